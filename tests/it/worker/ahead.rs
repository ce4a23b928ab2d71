//! Claiming ahead: without a concurrency limit, and while handlers are short, a worker
//! claims its next batch while the current one runs; with long handlers or a limit it
//! never holds more jobs than it has threads. At shutdown, jobs claimed ahead still run.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use pgqueuer::{EntrypointOptions, NewJob, Queue, RunningWorker, Worker};

use crate::harness::{TestDb, eventually, log_of, scalar};

/// Jobs picked by anyone now.
fn picked(db: &TestDb) -> i64 {
    scalar(
        &mut db.client(),
        "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
    )
}

/// A worker of two threads and batches of two whose `warm` jobs take `warm_for` and whose
/// `gate` jobs wait for a message on the returned sender; `limit` limits `gate`.
fn gated_worker(
    db: &TestDb,
    warm_for: Duration,
    limit: Option<u32>,
) -> (RunningWorker, Sender<()>, Receiver<i64>) {
    let (open_tx, open_rx) = crossbeam_channel::unbounded::<()>();
    let (started_tx, started_rx) = crossbeam_channel::unbounded::<i64>();
    let options = limit.map_or_else(EntrypointOptions::default, |l| {
        EntrypointOptions::default().concurrency_limit(l)
    });
    let worker = Worker::builder(db.pool(5))
        .threads(2)
        .batch_size(2)
        .entrypoint("warm", move |_job, _ctx| {
            std::thread::sleep(warm_for);
            Ok(())
        })
        .entrypoint_with("gate", options, move |job, _ctx| {
            let _ = started_tx.send(job.id);
            open_rx
                .recv_timeout(Duration::from_secs(30))
                .map_err(|_| "the test never opened the gate")?;
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    (worker, open_tx, started_rx)
}

/// Runs `n` `warm` jobs to completion through `worker`.
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
fn two_gates_running(db: &TestDb, n: usize, started: &Receiver<i64>) -> Vec<i64> {
    let queue = Queue::new(db.pool(1));
    let jobs: Vec<NewJob> = (0..n).map(|_| NewJob::without_payload("gate")).collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    for _ in 0..2 {
        started
            .recv_timeout(Duration::from_secs(10))
            .expect("a gate job never started");
    }
    ids
}

/// Short handlers and no limit: with both threads held by running jobs, the worker
/// claims one more batch (two jobs) ahead, and no more than that; when the gates open
/// every job runs, the ones claimed ahead included.
#[test]
fn short_jobs_are_claimed_one_batch_ahead() {
    let db = TestDb::new();
    let (worker, open, started) = gated_worker(&db, Duration::ZERO, None);
    warm_up(&db, 40);
    let ids = two_gates_running(&db, 8, &started);
    eventually(Duration::from_secs(5), "a batch claimed ahead", || {
        picked(&db) == 4
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(picked(&db), 4, "two running and one batch of two ahead");
    for _ in 0..8 {
        open.send(()).unwrap();
    }
    eventually(Duration::from_secs(10), "every gate job to end", || {
        ids.iter()
            .all(|id| log_of(&mut db.client(), *id).len() == 3)
    });
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 48, "{summary:?}");
}

/// Handlers that take 20 ms are not short: the worker holds only the jobs its threads
/// run.
#[test]
fn long_jobs_are_not_claimed_ahead() {
    let db = TestDb::new();
    let (worker, open, started) = gated_worker(&db, Duration::from_millis(20), None);
    warm_up(&db, 12);
    two_gates_running(&db, 6, &started);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(picked(&db), 2, "only the running jobs are held");
    for _ in 0..6 {
        open.send(()).unwrap();
    }
    assert_eq!(worker.join().unwrap().failed, 0);
}

/// A limited entrypoint holds slots: however short the handlers, nothing is claimed
/// ahead of the threads.
#[test]
fn limited_jobs_are_not_claimed_ahead() {
    let db = TestDb::new();
    let (worker, open, started) = gated_worker(&db, Duration::ZERO, Some(10));
    warm_up(&db, 40);
    two_gates_running(&db, 6, &started);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(picked(&db), 2, "only the running jobs are held");
    for _ in 0..6 {
        open.send(()).unwrap();
    }
    assert_eq!(worker.join().unwrap().failed, 0);
}

/// Shutdown with jobs claimed ahead: they are not left picked for another worker to
/// rescue after the heartbeat timeout; they run, and the worker then stops.
#[test]
fn jobs_claimed_ahead_run_at_shutdown() {
    let db = TestDb::new();
    let (worker, open, started) = gated_worker(&db, Duration::ZERO, None);
    warm_up(&db, 40);
    let ids = two_gates_running(&db, 8, &started);
    eventually(Duration::from_secs(5), "a batch claimed ahead", || {
        picked(&db) == 4
    });
    worker.shutdown_handle().shutdown();
    for _ in 0..8 {
        open.send(()).unwrap();
    }
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
