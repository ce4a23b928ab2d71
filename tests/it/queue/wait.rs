//! `wait_for`: woken by NOTIFY, polling without one, and timing out.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use pgqueuer::postgres::Client;
use pgqueuer::{Error, Queue, Status};

use super::job;
use crate::harness::{TestDb, wait_listeners};

/// Finishes a job the way a worker's completion statement does: the row deleted and the
/// terminal log row written in one transaction.
fn complete(client: &mut Client, id: i64, status: &str) {
    let mut tx = client.transaction().unwrap();
    tx.execute(
        &format!(
            "WITH gone AS (DELETE FROM pgqueuer WHERE id = $1 RETURNING id, entrypoint, priority) \
             INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
             SELECT id, '{status}', entrypoint, priority FROM gone"
        ),
        &[&id],
    )
    .unwrap();
    tx.commit().unwrap();
}

/// `wait_for` returns as soon as the jobs end elsewhere, woken by the NOTIFY rather than
/// its once-a-second poll.
#[test]
fn wait_for_returns_promptly_when_another_thread_completes_the_job() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ids = queue.enqueue_many(&[job("w"), job("w")]).unwrap();
    let (mut worker, mut watcher) = (db.client(), db.client());
    let (statuses, listening) = std::thread::scope(|scope| {
        let finisher = scope.spawn(|| {
            // wait_for LISTENs (on a connection of its own) before its first look; when
            // its LISTEN ended, on the database's clock.
            let pid = wait_listeners(&mut watcher, &db.name, 1, &[], Duration::from_secs(30))[0];
            let listening: SystemTime = watcher
                .query_one(
                    "SELECT state_change FROM pg_stat_activity WHERE pid = $1",
                    &[&pid],
                )
                .unwrap()
                .get(0);
            complete(&mut worker, ids[0], "successful");
            complete(&mut worker, ids[1], "exception");
            listening
        });
        let statuses = queue.wait_for(&ids, Duration::from_secs(20)).unwrap();
        (statuses, finisher.join().unwrap())
    });
    let returned: SystemTime = watcher
        .query_one("SELECT clock_timestamp()", &[])
        .unwrap()
        .get(0);
    let elapsed = returned.duration_since(listening).unwrap();
    assert_eq!(statuses[&ids[0]], Status::Successful);
    assert_eq!(statuses[&ids[1]], Status::Exception);
    // The poll looks a second after the first look, which came after the LISTEN ended:
    // an answer within a second of that (on the database's clock) came from the NOTIFY.
    // No wider margin exists without a longer poll interval, which `wait_for` has no
    // setting for.
    assert!(
        elapsed < Duration::from_secs(1),
        "took {elapsed:?} after the LISTEN"
    );
}

/// `wait_for` reports a job cancelled while it waits as `canceled`.
#[test]
fn wait_for_sees_a_cancellation() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(job("w")).unwrap();
    let statuses = std::thread::scope(|scope| {
        let canceller = queue.clone();
        scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            canceller.cancel(&[id]).unwrap();
        });
        queue.wait_for(&[id], Duration::from_secs(20)).unwrap()
    });
    assert_eq!(statuses, HashMap::from([(id, Status::Canceled)]));
}

/// `wait_for` sees a terminal log row written without any notification, by polling.
#[test]
fn wait_for_polls_when_no_notification_comes() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(job("w")).unwrap();
    let mut client = db.client();
    // A terminal log row without a DELETE: nothing is announced on the channel.
    let started = Instant::now();
    let statuses = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            client
                .execute(
                    "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
                     VALUES ($1, 'successful', 'w', 0)",
                    &[&id],
                )
                .unwrap();
        });
        queue.wait_for(&[id], Duration::from_secs(20)).unwrap()
    });
    assert_eq!(statuses[&id], Status::Successful);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// `wait_for` on a held job times out with `Error::Timeout` after the given time, not
/// long after; waiting for nothing returns at once.
#[test]
fn wait_for_times_out_on_unfinished_jobs() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(job("never")).unwrap();
    let mut client = db.client();
    // A held job is not finished.
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&id],
        )
        .unwrap();
    let started = Instant::now();
    let err = queue
        .wait_for(&[id], Duration::from_millis(400))
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err, Error::Timeout(d) if d == Duration::from_millis(400)),
        "{err:?}"
    );
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(queue.wait_for(&[], Duration::ZERO).unwrap().is_empty());
}

/// A connection lost under `wait_for` (a failover's old primary shutting down, an
/// administrator's `pg_terminate_backend`) is waited out: its read of the log is killed
/// mid-statement (held on a lock, so that the kill lands there), and the wait carries on
/// and returns the job's end once the database answers again.
#[test]
fn wait_for_carries_on_when_its_connection_is_killed_mid_read() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(job("survivor")).unwrap();
    let mut locker = db.client();
    let mut tx = locker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE pgqueuer_log IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let waiter = {
        let queue = queue.clone();
        std::thread::spawn(move || queue.wait_for(&[id], Duration::from_secs(60)))
    };
    let mut admin = db.client();
    crate::harness::eventually(
        Duration::from_secs(30),
        "the read to wait on the lock",
        || {
            let killed: i64 = admin
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()
                    AND wait_event_type = 'Lock' AND query LIKE '%pgqueuer_log%'",
                    &[],
                )
                .unwrap()
                .get(0);
            killed > 0
        },
    );
    tx.commit().unwrap();
    complete(&mut admin, id, "successful");
    let finished = waiter.join().unwrap().expect("wait_for carried on");
    assert_eq!(finished, HashMap::from([(id, Status::Successful)]));
}
