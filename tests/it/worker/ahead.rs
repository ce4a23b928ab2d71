//! Claiming ahead: without a concurrency limit, and while handlers are short, a worker
//! claims its next batch while the current one runs; with long handlers or a limit it
//! never holds more jobs than it has threads. At shutdown, jobs claimed ahead still run.

use std::time::Duration;

use pgqueuer::{EntrypointOptions, NewJob, Queue, RunningWorker, Worker};

use super::Gate;
use crate::harness::{TestDb, eventually, log_of, scalar};

/// Jobs picked by anyone now.
fn picked(db: &TestDb) -> i64 {
    scalar(
        &mut db.client(),
        "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
    )
}

/// A worker of two threads and batches of two whose `warm` jobs take `warm_for` and whose
/// `gate` jobs wait at `gate`; `limit` limits `gate`.
fn gated_worker(db: &TestDb, gate: &Gate, warm_for: Duration, limit: u32) -> RunningWorker {
    Worker::builder(db.pool(5))
        .threads(2)
        .batch_size(2)
        .entrypoint("warm", move |_job, _ctx| {
            std::thread::sleep(warm_for);
            Ok(())
        })
        .entrypoint_with(
            "gate",
            EntrypointOptions::default().concurrency_limit(limit),
            gate.handler(),
        )
        .build()
        .unwrap()
        .start()
        .unwrap()
}

/// Runs `n` `warm` jobs to completion.
fn warm_up(db: &TestDb, n: usize) {
    let queue = Queue::new(db.pool(1));
    let jobs: Vec<NewJob> = (0..n).map(|_| NewJob::without_payload("warm")).collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    eventually(Duration::from_secs(20), "the warm-up jobs to end", || {
        let left: i64 = db
            .client()
            .query_one("SELECT count(*) FROM pgqueuer WHERE id = ANY($1)", &[&ids])
            .unwrap()
            .get(0);
        left == 0
    });
}

/// Enqueues `n` gate jobs and waits until two of them run (both threads busy).
fn two_gates_running(db: &TestDb, gate: &Gate, n: usize) -> Vec<i64> {
    let queue = Queue::new(db.pool(1));
    let jobs: Vec<NewJob> = (0..n).map(|_| NewJob::without_payload("gate")).collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    gate.wait_started(2);
    ids
}

/// A worker warmed up on 40 short jobs, with two of eight gate jobs running and (once
/// this returns) two more claimed ahead; the gate jobs' ids.
fn a_batch_ahead(db: &TestDb, gate: &Gate) -> (RunningWorker, Vec<i64>) {
    let worker = gated_worker(db, gate, Duration::ZERO, 0);
    warm_up(db, 40);
    let ids = two_gates_running(db, gate, 8);
    eventually(Duration::from_secs(5), "a batch claimed ahead", || {
        picked(db) == 4
    });
    (worker, ids)
}

/// Short handlers and no limit: with both threads held by running jobs, the worker
/// claims one more batch (two jobs) ahead, and no more than that; when the gates open
/// every job runs, the ones claimed ahead included.
#[test]
fn short_jobs_are_claimed_one_batch_ahead() {
    let db = TestDb::new();
    let gate = Gate::new();
    let (worker, ids) = a_batch_ahead(&db, &gate);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(picked(&db), 4, "two running and one batch of two ahead");
    gate.let_through(8);
    eventually(Duration::from_secs(10), "every gate job to end", || {
        ids.iter()
            .all(|id| log_of(&mut db.client(), *id).len() == 3)
    });
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 48, "{summary:?}");
}

/// Handlers that take 20 ms (`warm_for`), or a limit on `gate`, leave nothing claimed
/// ahead: the worker holds only the jobs its threads run.
fn holds_only_running_jobs(warm_for: Duration, limit: u32) {
    let db = TestDb::new();
    let gate = Gate::new();
    let worker = gated_worker(&db, &gate, warm_for, limit);
    warm_up(&db, 12);
    two_gates_running(&db, &gate, 6);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(picked(&db), 2, "only the running jobs are held");
    gate.let_through(6);
    assert_eq!(worker.join().unwrap().failed, 0);
}

#[test]
fn long_jobs_are_not_claimed_ahead() {
    holds_only_running_jobs(Duration::from_millis(20), 0);
}

/// A limited entrypoint holds slots: however short the handlers, nothing is claimed
/// ahead of the threads.
#[test]
fn limited_jobs_are_not_claimed_ahead() {
    holds_only_running_jobs(Duration::ZERO, 10);
}

/// Shutdown with jobs claimed ahead: they are not left picked for another worker to
/// rescue after the heartbeat timeout; they run, and the worker then stops.
#[test]
fn jobs_claimed_ahead_run_at_shutdown() {
    let db = TestDb::new();
    let gate = Gate::new();
    let (worker, ids) = a_batch_ahead(&db, &gate);
    worker.shutdown_handle().shutdown();
    gate.let_through(8);
    let summary = worker.join().unwrap();
    assert_eq!(
        summary.succeeded, 44,
        "40 warm-up jobs and 4 gates: {summary:?}"
    );
    assert_eq!(picked(&db), 0, "nothing is left picked");
    let ended = ids
        .iter()
        .filter(|id| log_of(&mut db.client(), **id) == ["queued", "picked", "successful"])
        .count();
    assert_eq!(ended, 4, "the two running and the two claimed ahead ran");
}
