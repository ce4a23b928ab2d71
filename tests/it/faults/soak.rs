//! Soak: many jobs through one worker process, its memory watched.
//!
//! `cargo test --test it faults::soak` runs this alone; `PGQ_SOAK_JOBS` sets the count.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pgqueuer::postgres::Client;
use pgqueuer::{NewJob, Queue};

use super::checks::count;
use super::process::{Proc, rss_kib_of, worker_args};
use super::summary::{Row, report};
use crate::harness::{TestDb, eventually, scalar};

/// The most jobs waiting in the queue table at once.
const MAX_BACKLOG: i64 = 20_000;

/// Many jobs through one worker process while a producer keeps a backlog of at most
/// 20,000: its RSS, sampled every 100 ms, stays flat. `PGQ_SOAK_JOBS` sets the count
/// (default 20,000; the full soak is 1,000,000).
#[test]
fn soak_keeps_worker_memory_flat() {
    let total: usize = std::env::var("PGQ_SOAK_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        ))
        .unwrap();
    let queue = Queue::new(db.pool(2));
    let mut worker = spawn_soak_worker(&db);
    worker.wait_running(Duration::from_secs(20));
    let sampler = RssSampler::start(worker.pid());
    let mut vacuum = Vacuum::new(&mut client);
    let started = Instant::now();
    feed(&queue, &mut client, total, &mut vacuum);
    let limit = Duration::from_secs(60 + (total / 500) as u64);
    eventually(limit, "the soak to drain", || {
        vacuum.tick(&mut client);
        backlog(&mut client) == 0
    });
    let elapsed = started.elapsed();
    let samples = sampler.stop();
    assert!(
        worker.running(),
        "the soak worker died: {}",
        worker.stderr()
    );
    let rss = Rss::of(&samples, worker.rss_kib());
    let status = worker.terminate();
    let successful: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    );
    let Rss {
        first,
        settled,
        last,
        max,
        ref curve,
    } = rss;
    eprintln!("soak: RSS KiB at each tenth of the run {curve:?}");
    eprintln!(
        "soak: {total} jobs in {elapsed:.1?} ({:.0}/s; autovacuum {}, {} manual vacuums); \
         worker RSS first {first} KiB, after 3 s {settled} KiB, last {last} KiB, max {max} KiB \
         over {} samples",
        total as f64 / elapsed.as_secs_f64(),
        if vacuum.autovacuum { "on" } else { "off" },
        vacuum.vacuums,
        samples.len()
    );
    report(Row {
        test: "soak",
        faults: format!("none; RSS KiB first {first} last {last} max {max}"),
        enqueued: total,
        completed: usize::try_from(successful).unwrap(),
        lost: total - usize::try_from(successful).unwrap().min(total),
        concurrency: "-".into(),
    });
    assert!(status.success(), "{status} {}", worker.stderr());
    assert_eq!(successful, count(total));
    assert!(samples.len() >= 2, "too few RSS samples: {samples:?}");
    // Flat: no more than 8 MiB above the settled size at the end, 16 MiB at any time.
    assert!(
        last <= settled.max(first) + 8 * 1024,
        "RSS grew: {samples:?}"
    );
    assert!(
        max <= settled.max(first) + 16 * 1024,
        "RSS peaked: {samples:?}"
    );
}

/// The soak's worker process: two threads, batches of 20, a no-op `soak` handler.
fn spawn_soak_worker(db: &TestDb) -> Proc {
    Proc::spawn(
        "soak",
        &db.dsn(),
        &worker_args(
            &[("soak", 0, 0, 0)],
            &[
                "--threads",
                "2",
                "--batch",
                "20",
                "--heartbeat-timeout",
                "10",
                "--dequeue-timeout",
                "1",
            ],
        ),
    )
}

/// Jobs waiting in the queue table.
fn backlog(client: &mut Client) -> i64 {
    scalar(client, "SELECT count(*) FROM pgqueuer")
}

/// Enqueues `total` jobs in batches of at most 5,000, waiting whenever the backlog is
/// over [`MAX_BACKLOG`].
fn feed(queue: &Queue, client: &mut Client, total: usize, vacuum: &mut Vacuum) {
    let mut enqueued = 0usize;
    while enqueued < total {
        vacuum.tick(client);
        if backlog(client) > MAX_BACKLOG {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let n = (total - enqueued).min(5_000);
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| NewJob::new("soak", (enqueued + i).to_string()))
            .collect();
        queue.enqueue_many(&jobs).unwrap();
        enqueued += n;
    }
}

/// Without autovacuum (the CI server runs with it off) the queue table fills with dead
/// rows and every claim slows down; this vacuums it every 10 s as autovacuum would.
struct Vacuum {
    autovacuum: bool,
    last: Instant,
    vacuums: usize,
}

impl Vacuum {
    fn new(client: &mut Client) -> Vacuum {
        Vacuum {
            autovacuum: scalar::<String>(client, "SHOW autovacuum") == "on",
            last: Instant::now(),
            vacuums: 0,
        }
    }

    fn tick(&mut self, client: &mut Client) {
        if !self.autovacuum && self.last.elapsed() > Duration::from_secs(10) {
            client.batch_execute("VACUUM pgqueuer").unwrap();
            self.last = Instant::now();
            self.vacuums += 1;
        }
    }
}

/// How often the sampler reads the worker's RSS: the default soak drains in about a
/// second on this machine, and needs several samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// A thread sampling a process's RSS (KiB) every [`SAMPLE_EVERY`] until stopped.
struct RssSampler {
    samples: Arc<Mutex<Vec<u64>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let samples: Arc<Mutex<Vec<u64>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(kib) = rss_kib_of(pid) {
                        samples.lock().unwrap().push(kib);
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
            })
        };
        RssSampler {
            samples,
            stop,
            thread,
        }
    }

    /// Stops the sampler; returns every sample, oldest first.
    fn stop(self) -> Vec<u64> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap();
        self.samples.lock().unwrap().clone()
    }
}

/// The RSS figures of a run, in KiB.
struct Rss {
    first: u64,
    /// After 3 s: allocators settle within the first seconds; growth after that is what
    /// matters.
    settled: u64,
    /// At the end (read once more then, or the last sample).
    last: u64,
    max: u64,
    /// At every tenth of the run, to tell a creep from a plateau.
    curve: Vec<u64>,
}

impl Rss {
    fn of(samples: &[u64], at_end: Option<u64>) -> Rss {
        let first = samples.first().copied().unwrap_or(0);
        let last = at_end.or(samples.last().copied()).unwrap_or(0);
        let max = samples.iter().copied().max().unwrap_or(0).max(last);
        let curve: Vec<u64> = (0..=10)
            .filter_map(|i| {
                samples
                    .get((samples.len().saturating_sub(1)) * i / 10)
                    .copied()
            })
            .collect();
        let at_3s = (Duration::from_secs(3).as_millis() / SAMPLE_EVERY.as_millis()) as usize;
        let settled = samples.get(at_3s).copied().unwrap_or(first);
        Rss {
            first,
            settled,
            last,
            max,
            curve,
        }
    }
}
