//! A handler blocking past the heartbeat timeout, while another worker polls.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::postgres::Client;
use pgqueuer::{JobId, NewJob, Pool, Queue, Worker};

use super::checks::{RUNS_DDL, outcomes, successful, unfinished};
use super::process::{Proc, worker_args, worker_binary};
use super::summary::{Row, report};
use crate::harness::{TestDb, eventually, log_of, scalar};

/// Handlers that block for 12 s, 4× the heartbeat timeout, keep their jobs: the
/// heartbeat thread refreshes them while the executors are stuck, so another worker
/// process polling every 100 ms never gets them, and each runs once.
#[test]
fn a_blocked_handler_keeps_its_job() {
    // Built (if need be) before the clock starts: the poller must start quickly.
    worker_binary();
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let pool = db.pool(5);
    let queue = Queue::new(pool.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = blocking_worker(&pool, runs.clone());
    let owner = worker.id().to_string();
    let ids = queue
        .enqueue_many(&[NewJob::new("long", "a"), NewJob::new("long", "b")])
        .unwrap();
    let running = worker.start().unwrap();
    eventually(Duration::from_secs(30), "both long jobs to start", || {
        runs.load(Ordering::SeqCst) == 2
    });
    let mut other = spawn_poller(&db);
    let seen = watch_until_finished(&mut client, &ids, &other);
    let summary = running.join().unwrap();
    let polled = seen.other_up.map(|t| seen.finished - t);
    let stolen: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer_example_runs");
    let refreshes: Vec<usize> = ids
        .iter()
        .map(|id| seen.beats.get(id).map_or(0, Vec::len))
        .collect();
    let (max_age, owners) = (seen.max_age, &seen.owners);
    eprintln!(
        "blocked handler: runs {}, another worker polled for {polled:?} while the jobs ran, \
         heartbeat values seen per job {refreshes:?}, oldest heartbeat {max_age:.2} s, owners {owners:?}",
        runs.load(Ordering::SeqCst)
    );
    let done = outcomes(&mut client, &ids);
    report(Row {
        test: "blocked handler",
        faults: format!("2 handlers blocked {BLOCK:?} (timeout {TIMEOUT:?})"),
        enqueued: ids.len(),
        completed: successful(&done),
        lost: unfinished(&mut client, &ids).len(),
        concurrency: "-".into(),
    });
    assert_eq!(runs.load(Ordering::SeqCst), 2, "a job ran twice");
    assert_eq!(summary.succeeded, 2);
    assert_eq!(
        stolen, 0,
        "the other worker ran a job that was still running"
    );
    assert_eq!(owners.len(), 1, "the jobs changed hands: {owners:?}");
    assert!(owners.contains(&owner));
    // Two heartbeat timeouts of polling: without the heartbeat thread the jobs would
    // have been older than the timeout for at least one of them, in reach of the poller.
    assert!(
        polled.is_some_and(|d| d >= 2 * TIMEOUT),
        "the other worker was not polling long enough to prove anything: {polled:?}"
    );
    assert!(
        max_age < TIMEOUT.as_secs_f64(),
        "a heartbeat got {max_age:.2} s old"
    );
    // A beat every 1.5 s over 12 s: eight are due; four prove the refreshes went on.
    assert!(refreshes.iter().all(|n| *n >= 4), "{refreshes:?}");
    for id in &ids {
        assert_eq!(
            log_of(&mut client, *id),
            ["queued", "picked", "successful"],
            "job {id}"
        );
    }
    let status = other.terminate();
    assert!(status.success(), "{status} {}", other.stderr());
}

/// The heartbeat timeout of both workers: 3 s, so that a beat (due every 1.5 s) can be
/// late by more than a second on a busy machine without the job looking abandoned.
const TIMEOUT: Duration = Duration::from_secs(3);

/// How long each `long` handler blocks: four heartbeat timeouts.
const BLOCK: Duration = Duration::from_secs(12);

/// A worker of two threads and a [`TIMEOUT`] heartbeat timeout whose `long` handler
/// counts its runs and then blocks for [`BLOCK`] without looking at anything.
fn blocking_worker(pool: &Pool, runs: Arc<AtomicUsize>) -> Worker {
    Worker::builder(pool.clone())
        .threads(2)
        .heartbeat_timeout(TIMEOUT)
        .dequeue_timeout(Duration::from_millis(200))
        .entrypoint("long", move |_job, _ctx| {
            runs.fetch_add(1, Ordering::SeqCst);
            // Blocks without looking at anything: only the heartbeat thread speaks.
            std::thread::sleep(BLOCK);
            Ok(())
        })
        .build()
        .unwrap()
}

/// Another worker process for `long` that polls every 100 ms with the same heartbeat
/// timeout, recording any job it runs.
fn spawn_poller(db: &TestDb) -> Proc {
    Proc::spawn(
        "poller",
        &db.dsn(),
        &worker_args(
            &[("long", 0, 0, 0)],
            &[
                "--threads",
                "2",
                "--heartbeat-timeout",
                &TIMEOUT.as_secs().to_string(),
                "--dequeue-timeout",
                "0.1",
                "--record",
            ],
        ),
    )
}

/// What was seen of the jobs' rows while they ran.
struct Watched {
    /// When the poller was first seen running.
    other_up: Option<Instant>,
    /// When every job had a terminal log row.
    finished: Instant,
    /// Each job's distinct heartbeat values, in the order seen.
    beats: HashMap<JobId, Vec<String>>,
    /// The oldest heartbeat seen, in seconds.
    max_age: f64,
    /// Every worker id seen holding a job.
    owners: HashSet<String>,
}

/// Samples the rows of `ids` every 100 ms until every job has ended (at most 60 s: the
/// handlers block for 12 s, the rest is room for a busy machine).
fn watch_until_finished(client: &mut Client, ids: &[JobId], other: &Proc) -> Watched {
    let mut other_up = None;
    let mut beats: HashMap<JobId, Vec<String>> = HashMap::new();
    let mut max_age = 0.0f64;
    let mut owners = HashSet::new();
    let started = Instant::now();
    while !unfinished(client, ids).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "jobs never finished"
        );
        if other_up.is_none() && other.worker_id_now().is_some() {
            other_up = Some(Instant::now());
        }
        for row in client
            .query(
                "SELECT id, heartbeat::text, EXTRACT(EPOCH FROM clock_timestamp() - heartbeat)::float8, \
                        queue_manager_id::text FROM pgqueuer WHERE id = ANY($1::bigint[])",
                &[&ids],
            )
            .unwrap()
        {
            let beat: String = row.get(1);
            let list = beats.entry(row.get(0)).or_default();
            if list.last() != Some(&beat) {
                list.push(beat);
            }
            max_age = max_age.max(row.get(2));
            owners.insert(row.get::<_, String>(3));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Watched {
        other_up,
        finished: Instant::now(),
        beats,
        max_age,
        owners,
    }
}
