//! A multi-connection stress run over several limits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::postgres::{Client, Config, NoTls};
use pgqueuer::{Claimer, Job, Pool};

use super::{insert_jobs, success};
use crate::harness::{TestDb, scalar};

/// Claiming threads, each with a connection of its own.
const THREADS: usize = 8;
/// Jobs of the whole run, about (each batch is split by [`share`], rounding down).
const TOTAL: i64 = 20_000;
/// Jobs enqueued before the threads start; the producer adds the rest while they run.
const UPFRONT: i64 = 12_000;
/// The entrypoints and their limits (0: unlimited).
const ENTRYPOINTS: [(&str, u32); 4] = [("l1", 1), ("l3", 3), ("l7", 7), ("free", 0)];

/// Tiny deterministic PRNG for the stress test (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What the producer and the claiming threads share.
struct Shared {
    /// Per entrypoint: handlers running now, and the most seen running at once.
    running: HashMap<&'static str, (AtomicI64, AtomicI64)>,
    /// Ids of every job whose completion was written.
    completed: Mutex<Vec<i64>>,
    /// Whether the producer is still enqueueing.
    producing: AtomicBool,
    /// Jobs enqueued so far.
    enqueued: AtomicUsize,
}

/// 8 threads, each with its own connection, claim and complete 20,000 jobs over limits
/// 1, 3, 7 and unlimited while a producer injects more; running handlers per entrypoint
/// never exceed the limit and every job completes exactly once. Half of the threads end
/// their jobs in the statement of their next claim, which reuses the freed slots.
#[test]
fn stress_limits_hold_and_every_job_runs_once() {
    let db = TestDb::new();
    let mut setup = db.client();
    setup
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        ))
        .unwrap();
    enqueue(&mut setup, UPFRONT, &mut Rng(0x9E37_79B9_7F4A_7C15));
    let upfront: i64 = scalar(&mut setup, "SELECT count(*) FROM pgqueuer");
    let shared = Shared {
        running: ENTRYPOINTS
            .iter()
            .map(|(ep, _)| (*ep, (AtomicI64::new(0), AtomicI64::new(0))))
            .collect(),
        completed: Mutex::new(Vec::with_capacity(TOTAL as usize)),
        producing: AtomicBool::new(true),
        enqueued: AtomicUsize::new(usize::try_from(upfront).unwrap()),
    };
    let pool = db.pool(THREADS as u32);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let (config, shared) = (db.config(), &shared);
        scope.spawn(move || produce(&config, shared));
        for t in 0..THREADS {
            let pool = pool.clone();
            scope.spawn(move || claim_and_run(&pool, t, shared));
        }
    });
    let elapsed = started.elapsed();
    let total = assert_every_job_completed_once(&mut setup, &shared);
    assert_limits_held_under_real_overlap(&shared);
    eprintln!("stress: {total} jobs in {elapsed:?}");
}

/// Percent of each batch per entrypoint. Unlimited entrypoints drain fastest; give them
/// most of the jobs so the run is short.
fn share(ep: &str) -> i64 {
    match ep {
        "free" => 55,
        "l7" => 25,
        "l3" => 13,
        _ => 7,
    }
}

/// Inserts `n` jobs split by [`share`], each entrypoint's at one random priority.
fn enqueue(client: &mut Client, n: i64, rng: &mut Rng) {
    for (ep, _) in ENTRYPOINTS {
        let count = n * share(ep) / 100;
        let priority = i32::try_from(rng.next() % 10).unwrap();
        insert_jobs(client, ep, priority, count);
    }
}

/// The producer: the jobs not enqueued up front, in 16 batches 50 ms apart.
fn produce(config: &Config, shared: &Shared) {
    let mut client = config.connect(NoTls).unwrap();
    let mut rng = Rng(42);
    for _ in 0..16 {
        std::thread::sleep(Duration::from_millis(50));
        enqueue(&mut client, (TOTAL - UPFRONT) / 16, &mut rng);
        let n: i64 = ENTRYPOINTS
            .iter()
            .map(|(ep, _)| (TOTAL - UPFRONT) / 16 * share(ep) / 100)
            .sum();
        shared
            .enqueued
            .fetch_add(usize::try_from(n).unwrap(), Ordering::SeqCst);
    }
    shared.producing.store(false, Ordering::SeqCst);
}

/// Claiming thread `t`: claims batches of `1 + t % 4`, runs them, and writes their
/// completions (odd threads in the statement of their next claim) until the producer is
/// done and every enqueued job has completed.
fn claim_and_run(pool: &Pool, t: usize, shared: &Shared) {
    let mut builder = Claimer::builder();
    for (ep, limit) in ENTRYPOINTS {
        builder = builder.entrypoint(ep, limit);
    }
    let claimer = builder.build().unwrap();
    let mut conn = pool.get().unwrap();
    // Odd threads end their jobs in their next claim's statement.
    let folding = t % 2 == 1;
    let mut unwritten: Vec<i64> = Vec::new();
    loop {
        let claim = claimer
            .complete_and_claim(&mut conn, &success(unwritten.clone()), 1 + t % 4)
            .unwrap();
        if !unwritten.is_empty() {
            // Rows a concurrent claim held locked are ended on their own.
            let rest: Vec<i64> = unwritten
                .iter()
                .copied()
                .filter(|id| !claim.ended.contains(id))
                .collect();
            let logged = claimer.complete(&mut conn, &success(rest.clone())).unwrap();
            assert_eq!(logged.len(), rest.len(), "a claimed job was no longer ours");
            let mut done = shared.completed.lock().unwrap();
            done.extend(&claim.ended);
            done.extend(logged);
            unwritten.clear();
        }
        if claim.jobs.is_empty() {
            let done = shared.completed.lock().unwrap().len();
            if !shared.producing.load(Ordering::SeqCst)
                && done >= shared.enqueued.load(Ordering::SeqCst)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let finished = run(&claim.jobs, shared);
        if folding {
            unwritten = finished;
            continue;
        }
        let logged = claimer
            .complete(&mut conn, &success(finished.clone()))
            .unwrap();
        assert_eq!(
            logged.len(),
            finished.len(),
            "a claimed job was no longer ours"
        );
        shared.completed.lock().unwrap().extend(logged);
    }
}

/// "Runs" each job for 300 µs, counting it as running meanwhile and asserting that its
/// entrypoint's limit holds; returns the ids.
fn run(jobs: &[Job], shared: &Shared) -> Vec<i64> {
    let mut finished = Vec::with_capacity(jobs.len());
    for job in jobs {
        let limit = ENTRYPOINTS
            .iter()
            .find(|(ep, _)| *ep == job.entrypoint)
            .unwrap()
            .1;
        let (now, max) = &shared.running[job.entrypoint.as_str()];
        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
        max.fetch_max(n, Ordering::SeqCst);
        if limit > 0 {
            assert!(
                n <= i64::from(limit),
                "{} running {n} > limit {limit}",
                job.entrypoint
            );
        }
        // Work long enough for handlers of one entrypoint to overlap.
        std::thread::sleep(Duration::from_micros(300));
        now.fetch_sub(1, Ordering::SeqCst);
        finished.push(job.id);
    }
    finished
}

/// Asserts that (about) every planned job was enqueued and every enqueued job completed
/// exactly once, leaving the queue empty; returns how many were enqueued.
#[track_caller]
fn assert_every_job_completed_once(setup: &mut Client, shared: &Shared) -> usize {
    let mut done = shared.completed.lock().unwrap().clone();
    let total = shared.enqueued.load(Ordering::SeqCst);
    assert!(
        total >= usize::try_from(TOTAL).unwrap() - 100,
        "only {total} jobs enqueued"
    );
    done.sort_unstable();
    let before_dedup = done.len();
    done.dedup();
    assert_eq!(before_dedup, done.len(), "a job completed twice");
    assert_eq!(done.len(), total, "every job completes");
    assert_eq!(scalar::<i64>(setup, "SELECT count(*) FROM pgqueuer"), 0);
    assert_eq!(
        scalar::<i64>(
            setup,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ),
        i64::try_from(total).unwrap()
    );
    total
}

/// Asserts that no entrypoint ever ran more handlers than its limit, and that handlers
/// did overlap where they could (so an overshoot would have been caught).
#[track_caller]
fn assert_limits_held_under_real_overlap(shared: &Shared) {
    let running = &shared.running;
    for (ep, limit) in ENTRYPOINTS {
        let max = running[ep].1.load(Ordering::SeqCst);
        eprintln!("stress: {ep} limit {limit} max running {max}");
        if limit > 0 {
            assert!(
                max <= i64::from(limit),
                "{ep}: {max} running > limit {limit}"
            );
        }
    }
    // The checker saw real overlap, so it could have caught an overshoot.
    assert_eq!(running["l1"].1.load(Ordering::SeqCst), 1);
    assert!(
        running["l3"].1.load(Ordering::SeqCst) >= 2,
        "no overlap seen on l3"
    );
    assert!(
        running["l7"].1.load(Ordering::SeqCst) >= 3,
        "no overlap seen on l7"
    );
}
