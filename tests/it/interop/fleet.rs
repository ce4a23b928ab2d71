//! A mixed fleet: Python and Rust workers under one concurrency limit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use pgqueuer::events::Event;
use pgqueuer::postgres::Client;
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{Entrypoint, JobId, NewJob, Queue, Worker};
use serde_json::json;

use super::{check_python_worker, create_side_tables, micros};
use crate::harness::{TestDb, eventually, scalar};
use crate::python;

/// Jobs of the run, all of entrypoint `shared`.
const JOBS: usize = 2_000;
/// The concurrency limit every worker of the fleet declares for `shared`.
const LIMIT: u32 = 2;

/// Two Python `QueueManager` processes and two Rust workers drain 2,000 jobs of one
/// entrypoint declared with concurrency_limit=2 by all four: every job runs exactly once,
/// and the handler intervals (database clock) never overlap more than twice.
#[test]
fn a_mixed_fleet_keeps_the_limit_and_runs_every_job_once() {
    let db = TestDb::new();
    let mut client = db.client();
    // Commits need not wait for the disk here: this test is about overlap, not durability.
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        ))
        .unwrap();
    create_side_tables(&mut client);
    let stop_capture = Arc::new(AtomicBool::new(false));
    let capture = capture_notifications(&db, stop_capture.clone());
    let python_workers = start_python_workers(&db, &mut client);

    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new("shared", i.to_string().into_bytes()))
        .collect();
    let started = Instant::now();
    let ids = Queue::new(db.pool(1)).enqueue_many(&jobs).unwrap();
    run_rust_workers(&db);
    for worker in python_workers {
        check_python_worker(&worker.finish().success().json());
    }
    let elapsed = started.elapsed();
    stop_capture.store(true, Ordering::SeqCst);
    let payloads = capture.join().unwrap();

    let (per_worker, events) = assert_every_job_ran_once(&mut client, &ids);
    let max_running = max_overlap(events);
    eprintln!(
        "mixed fleet: {JOBS} jobs in {elapsed:?}, runs per worker {per_worker:?}, \
         max handlers overlapping {max_running} (limit {LIMIT})"
    );
    assert!(
        max_running <= i64::from(LIMIT),
        "{max_running} handlers overlapped under a limit of {LIMIT}"
    );
    assert_eq!(max_running, i64::from(LIMIT), "the limit was never reached");
    // The audit of the log both kinds of worker wrote agrees: the limit, never more.
    let audit = pgqueuer::ops::limit_audit(
        &mut client,
        &pgqueuer::Settings::default(),
        elapsed + Duration::from_secs(60),
        Some("shared"),
        pgqueuer::ops::AUDIT_RESOLUTION,
    )
    .unwrap();
    eprintln!("mixed fleet: audit {audit:?}");
    assert_eq!(audit.entrypoints.len(), 1);
    assert_eq!(audit.entrypoints[0].peak, u64::from(LIMIT));
    assert!(audit.entrypoints[0].runs >= u64::try_from(JOBS).unwrap());
    for name in ["py-1", "py-2", "rs-1", "rs-2"] {
        assert!(
            per_worker.get(name).copied().unwrap_or(0) > 0,
            "worker {name} ran no job: {per_worker:?}"
        );
    }
    assert_notifications_parse(&payloads);
}

/// Starts the two Python workers (`py-1`, `py-2`: `record_run`, batches of 1, gated)
/// and waits until both are set up and waiting for jobs, before any exist.
fn start_python_workers(db: &TestDb, client: &mut Client) -> Vec<python::Running> {
    let mut python_workers: Vec<python::Running> = ["py-1", "py-2"]
        .iter()
        .map(|name| {
            python::spawn_script(
                db,
                "worker.py",
                &json!({
                    "entrypoint": "shared", "behaviour": "record_run", "name": name,
                    "concurrency_limit": LIMIT, "batch_size": 1, "gate": true,
                    // 2,000 jobs take seconds when idle; a busy machine needs more.
                    "sleep_s": 0.002, "timeout_s": 150,
                }),
                Duration::from_secs(160),
            )
        })
        .collect();
    // Both Python managers are set up and wait for jobs before any exist.
    eventually(
        Duration::from_secs(120),
        "both Python workers ready",
        || {
            if let Some(i) = python_workers
                .iter_mut()
                .position(python::Running::has_exited)
            {
                let out = python_workers.remove(i).finish();
                panic!("a Python worker exited before the jobs were enqueued: {out:?}");
            }
            scalar::<i64>(
                client,
                "SELECT count(*) FROM interop_marks WHERE what LIKE 'ready:%'",
            ) == 2
        },
    );
    python_workers
}

/// Runs the two Rust workers (`rs-1`, `rs-2`) until the queue is empty; each handler
/// records its run (database clock) in `interop_runs`.
fn run_rust_workers(db: &TestDb) {
    let record = db.pool(4);
    let rust_workers: Vec<_> = ["rs-1", "rs-2"]
        .into_iter()
        .map(|name| {
            let record = record.clone();
            // Slots are released between jobs, so the Python workers get their share:
            // reused slots would stay with whichever worker took them first.
            let worker = Worker::builder(db.pool(4))
                .threads(2)
                .batch_size(2)
                .reuse_slots(false)
                .entrypoint(
                    Entrypoint::new("shared").concurrency_limit(LIMIT),
                    move |job, _ctx| {
                        let mut conn = record.get()?;
                        let start: SystemTime =
                            conn.query_one("SELECT clock_timestamp()", &[])?.get(0);
                        std::thread::sleep(Duration::from_millis(2));
                        conn.execute(
                            "INSERT INTO interop_runs (job_id, started, finished, worker) \
                             VALUES ($1, $2, clock_timestamp(), $3)",
                            &[&job.id, &start, &name],
                        )?;
                        Ok(())
                    },
                )
                .build()
                .unwrap();
            std::thread::spawn(move || worker.run_until_empty())
        })
        .collect();
    for handle in rust_workers {
        handle.join().unwrap().unwrap();
    }
}

/// Asserts that the queue is empty and that every enqueued job ran exactly once and was
/// logged picked and successful; returns how many runs each worker made, and the runs'
/// starts (+1) and ends (-1) in microseconds.
fn assert_every_job_ran_once(
    client: &mut Client,
    ids: &[JobId],
) -> (BTreeMap<String, usize>, Vec<(i64, i32)>) {
    // Every job ran exactly once and finished.
    assert_eq!(
        scalar::<i64>(client, "SELECT count(*) FROM pgqueuer"),
        0,
        "jobs left in the queue"
    );
    let runs = client
        .query(
            "SELECT job_id, worker, started, finished FROM interop_runs",
            &[],
        )
        .unwrap();
    let mut per_job: BTreeMap<JobId, usize> = BTreeMap::new();
    let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
    let mut events: Vec<(i64, i32)> = Vec::with_capacity(runs.len() * 2);
    for row in &runs {
        *per_job.entry(row.get(0)).or_default() += 1;
        *per_worker.entry(row.get(1)).or_default() += 1;
        let (start, end): (SystemTime, SystemTime) = (row.get(2), row.get(3));
        assert!(end >= start);
        events.push((micros(start), 1));
        events.push((micros(end), -1));
    }
    let twice: Vec<_> = per_job.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs run more than once: {twice:?}");
    assert_eq!(
        per_job.keys().copied().collect::<BTreeSet<_>>(),
        ids.iter().copied().collect::<BTreeSet<_>>(),
        "the runs are not exactly the enqueued jobs"
    );
    for status in ["picked", "successful"] {
        assert_eq!(
            scalar::<i64>(
                client,
                &format!("SELECT count(*) FROM pgqueuer_log WHERE status = '{status}'")
            ),
            i64::try_from(JOBS).unwrap(),
            "{status} log rows"
        );
    }
    (per_worker, events)
}

/// The most runs that overlapped in time, from their starts (+1) and ends (-1).
fn max_overlap(mut events: Vec<(i64, i32)>) -> i64 {
    // Sweep the intervals: ends sort before starts at the same microsecond, so touching
    // intervals do not count as overlapping.
    events.sort_unstable();
    let (mut running, mut max_running) = (0i64, 0i64);
    for (_, delta) in &events {
        running += i64::from(*delta);
        max_running = max_running.max(running);
    }
    max_running
}

/// Every notification either side sent on the channel parses here, as it did in Python
/// (check_python_worker: nothing logged at CRITICAL), and the Python workers' health
/// checks were among them.
#[track_caller]
fn assert_notifications_parse(payloads: &[String]) {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for payload in payloads {
        let event = Event::parse(payload)
            .unwrap_or_else(|e| panic!("a notification does not parse ({e}): {payload}"));
        *kinds.entry(event.kind()).or_default() += 1;
    }
    eprintln!("mixed fleet: notifications on the channel {kinds:?}");
    assert!(
        kinds.get("health_check_event").copied().unwrap_or(0) >= 2,
        "the Python workers' health checks were not seen: {kinds:?}"
    );
}

/// Collects every payload sent on the default channel until `stop` is set.
fn capture_notifications(db: &TestDb, stop: Arc<AtomicBool>) -> JoinHandle<Vec<String>> {
    let mut client = db.client();
    client.batch_execute("LISTEN ch_pgqueuer").unwrap();
    std::thread::spawn(move || {
        let mut payloads = Vec::new();
        loop {
            // Read what has arrived, then stop once asked to (after a last quiet spell).
            let stopping = stop.load(Ordering::SeqCst);
            let mut notifications = client.notifications();
            let mut it = notifications.timeout_iter(Duration::from_millis(100));
            // An error ends the capture: the test is over (its database was dropped,
            // which terminates this session) or its checks will miss the events.
            loop {
                match it.next() {
                    Ok(Some(note)) => payloads.push(note.payload().to_owned()),
                    Ok(None) => break,
                    Err(_) => return payloads,
                }
            }
            if stopping {
                return payloads;
            }
        }
    })
}
