//! Claiming ahead: without a concurrency limit (or far from it), and while handlers are
//! short, a worker claims its next batch while the current one runs; with long handlers
//! or a limit that binds it never holds more jobs than it has threads. At shutdown, jobs claimed ahead and not
//! started go back to the queue.

use std::time::{Duration, Instant};

use pgqueuer::{Entrypoint, NewJob, Queue, RunningWorker, Worker};

use super::{Gate, claiming_ahead};
use crate::harness::{TestDb, eventually, log_of, scalar};

/// Jobs picked by anyone now.
fn picked(db: &TestDb) -> i64 {
    scalar(
        &mut db.client(),
        "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
    )
}

/// Waits until `n` gate jobs have their outcome written: a job that has ended stays
/// picked until then, beside the jobs that run.
fn outcomes_written(db: &TestDb, n: i64) {
    eventually(
        Duration::from_secs(30),
        "the ended gate jobs' outcomes",
        || {
            scalar::<i64>(
                &mut db.client(),
                "SELECT count(*) FROM pgqueuer_log WHERE entrypoint = 'gate' AND status = 'successful'",
            ) >= n
        },
    );
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
        .entrypoint(
            Entrypoint::new("gate").concurrency_limit(limit),
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
    eventually(Duration::from_secs(60), "the warm-up jobs to end", || {
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

/// A worker warmed up on 40 short jobs, with two of eight gate jobs running and two more
/// claimed ahead, in a database of its own; the gate jobs' ids. Tried again with a fresh
/// database and worker when a slow warm-up job kept it from claiming ahead (see
/// [`claiming_ahead`]). `limit` limits `gate` (0: no limit).
fn a_batch_ahead(limit: u32) -> (TestDb, Gate, RunningWorker, Vec<i64>) {
    claiming_ahead(|| {
        let db = TestDb::new();
        let gate = Gate::new();
        let worker = gated_worker(&db, &gate, Duration::ZERO, limit);
        warm_up(&db, 40);
        let ids = two_gates_running(&db, &gate, 8);
        // The claim ahead follows the gates' claim at once; 5 s is room for a busy
        // machine, and an attempt that waits in vain is only made again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if picked(&db) == 4 {
                return Some((db, gate, worker, ids));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        gate.let_through(8);
        worker.join().unwrap();
        None
    })
}

/// Short handlers and no limit: with both threads held by running jobs, the worker
/// claims one more batch (two jobs) ahead, and no more than that; when the gates open
/// every job runs, the ones claimed ahead included.
#[test]
fn short_jobs_are_claimed_one_batch_ahead() {
    let (db, gate, worker, ids) = a_batch_ahead(0);
    // A third batch would follow the batch ahead at once, without waiting for anything;
    // by the time a job claimed ahead starts on a freed thread (a job's end, a wake and
    // a start later) it would be picked too. So each start is the moment to look.
    for ended in 1..=2 {
        gate.let_through(1);
        gate.wait_started(1);
        outcomes_written(&db, ended);
        assert!(
            picked(&db) <= 4,
            "more than one batch ahead: {}",
            picked(&db)
        );
    }
    gate.let_through(6);
    eventually(Duration::from_secs(60), "every gate job to end", || {
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
    // A claim ahead would follow the gates' claim at once, without waiting for anything;
    // the next gate job starts only after one ends and a claim for its freed thread, so
    // at that start a job claimed ahead would be picked beside the two running.
    for ended in 1..=2 {
        gate.let_through(1);
        gate.wait_started(1);
        outcomes_written(&db, ended);
        assert_eq!(picked(&db), 2, "only the running jobs are held");
    }
    gate.let_through(4);
    assert_eq!(worker.join().unwrap().failed, 0);
}

/// Handlers of 20 ms: however many jobs are queued, nothing is claimed ahead.
#[test]
fn long_jobs_are_not_claimed_ahead() {
    holds_only_running_jobs(Duration::from_millis(20), 0);
}

/// A limit that binds (3, against two threads and a batch of two claimed ahead): however
/// short the handlers, nothing is claimed ahead of the threads, so slots are held only
/// by running jobs.
#[test]
fn jobs_at_a_binding_limit_are_not_claimed_ahead() {
    holds_only_running_jobs(Duration::ZERO, 3);
}

/// A limit far from binding (1,000) costs nothing: the worker claims a batch ahead, as
/// without a limit, and every job still runs.
#[test]
fn jobs_far_from_their_limit_are_claimed_ahead() {
    let (db, gate, worker, ids) = a_batch_ahead(1_000);
    gate.let_through(8);
    eventually(Duration::from_secs(60), "every gate job to end", || {
        ids.iter()
            .all(|id| log_of(&mut db.client(), *id).len() == 3)
    });
    assert_eq!(worker.join().unwrap().failed, 0);
}

/// Shutdown with jobs claimed ahead: they are not left picked for another worker to
/// rescue after the heartbeat timeout, nor run; they go back to the queue at once (a
/// `queued` log row) while the running jobs still run, and the worker then stops.
#[test]
fn jobs_claimed_ahead_go_back_to_the_queue_at_shutdown() {
    let (db, gate, worker, ids) = a_batch_ahead(0);
    let running: Vec<i64> = {
        let mut client = db.client();
        ids.iter()
            .copied()
            .filter(|id| log_of(&mut client, *id) == ["queued", "picked"])
            .collect()
    };
    assert_eq!(running.len(), 4, "two running and two claimed ahead");
    worker.shutdown_handle().shutdown();
    eventually(
        Duration::from_secs(30),
        "the jobs claimed ahead to go back to the queue",
        || picked(&db) == 2,
    );
    gate.let_through(2);
    let summary = worker.join().unwrap();
    assert_eq!(
        (summary.succeeded, summary.released, summary.cancelled),
        (42, 2, 0),
        "40 warm-up jobs and the 2 running gates ran, the 2 ahead were released: {summary:?}"
    );
    assert_eq!(picked(&db), 0, "nothing is left picked");
    let mut client = db.client();
    let logs: Vec<Vec<String>> = ids.iter().map(|id| log_of(&mut client, *id)).collect();
    let with = |log: &[&str]| logs.iter().filter(|l| *l == log).count();
    assert_eq!(with(&["queued", "picked", "successful"]), 2, "{logs:?}");
    assert_eq!(with(&["queued", "picked", "queued"]), 2, "{logs:?}");
    assert_eq!(with(&["queued"]), 4, "{logs:?}");
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'queued' AND queue_manager_id IS NULL \
             AND attempts = 0"
        ),
        6,
        "the released jobs are plain queued jobs again"
    );
}
