//! statement_timeout: a lock hog makes every statement of a running worker time out.

use std::time::Duration;

use pgqueuer::Queue;
use pgqueuer::postgres::Client;

use super::checks::{count, enqueue_plan, outcomes, successful, wait_all_done};
use super::process::{Proc, digest, worker_args};
use super::summary::{Row, report};
use crate::harness::{TestDb, eventually, scalar};

/// With `statement_timeout = 300ms` on the database, a hog holds an ACCESS EXCLUSIVE
/// lock on the queue table for 3 s in the middle of a run: the worker process's claims
/// and completions are cancelled, it logs the cause and backs off, and once the lock is
/// gone it finishes every job.
#[test]
fn statement_timeouts_are_logged_and_the_worker_recovers() {
    let db = TestDb::new();
    let mut client = db.client();
    // Enqueued first: connections opened before the ALTER keep no statement timeout.
    let queue = Queue::new(db.pool(2));
    let ids = enqueue_plan(&queue, &[("st", 0, 10, 300)]);
    drop(queue);
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET statement_timeout = '300ms'",
            db.name
        ))
        .unwrap();
    let mut worker = Proc::spawn(
        "st",
        &db.dsn(),
        &worker_args(
            &[("st", 0, 10, 0)],
            &[
                "--threads",
                "2",
                "--heartbeat-timeout",
                "10",
                "--dequeue-timeout",
                "0.5",
                "--quiet",
            ],
        ),
    );
    let successes = |c: &mut Client| -> i64 {
        scalar(
            c,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
        )
    };
    eventually(Duration::from_secs(60), "30 jobs done", || {
        successes(&mut client) >= 30
    });
    let mut hog = db.client();
    hog.batch_execute("SET statement_timeout = 0").unwrap();
    let mut tx = hog.transaction().unwrap();
    tx.batch_execute("LOCK TABLE pgqueuer IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let before = successes(&mut client);
    let timeouts = |w: &Proc| {
        w.stderr()
            .matches("canceling statement due to statement timeout")
            .count()
    };
    let timed_out_before = timeouts(&worker);
    std::thread::sleep(Duration::from_secs(3));
    // The worker has tried through the lock: statements of its have timed out on it.
    eventually(
        Duration::from_secs(30),
        "two statements to time out on the lock",
        || timeouts(&worker) >= timed_out_before + 2,
    );
    let during = successes(&mut client);
    tx.commit().unwrap();
    let recovered = eventually(
        Duration::from_secs(60),
        "a job to complete after the lock",
        || successes(&mut client) > during,
    );
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(60));
    let stderr = worker.stderr();
    let cancelled = stderr
        .matches("canceling statement due to statement timeout")
        .count();
    let backoffs: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("claim failed (retrying in "))
        .filter_map(|l| l.split("retrying in ").nth(1)?.split(')').next())
        .collect();
    let outcome_retries = stderr.matches("could not write").count();
    eprintln!("worker reported {:?}", digest(&stderr));
    let done = outcomes(&mut client, &ids);
    eprintln!(
        "statement_timeout: {cancelled} statements cancelled, claim backoffs {backoffs:?}, \
         {outcome_retries} completion batches retried; completed {before} before the lock, \
         {during} at its end, first completion {recovered:?} after release; outcomes {done:?}"
    );
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} RESET statement_timeout",
            db.name
        ))
        .unwrap();
    report(Row {
        test: "statement_timeout",
        faults: format!("3 s lock hog; {cancelled} statements timed out"),
        enqueued: ids.len(),
        completed: successful(&done),
        lost: lost.len(),
        concurrency: "-".into(),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(done.get("successful").copied(), Some(count(ids.len())));
    assert_eq!(before, during, "jobs completed through an exclusive lock?");
    assert!(cancelled >= 2, "no timeout was logged: {stderr}");
    assert!(
        backoffs.iter().any(|b| *b != "50ms"),
        "the claim did not back off: {backoffs:?}"
    );
    // The claim backs off up to 5 s between tries; 20 s is room for a busy machine.
    assert!(recovered < Duration::from_secs(20), "{recovered:?}");
    let status = worker.terminate();
    assert!(status.success(), "{status} {stderr}");
}
