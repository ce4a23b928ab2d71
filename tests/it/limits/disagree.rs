//! Workers that disagree on a limit: reported with the numbers, and paused on request.

use std::time::Duration;

use pgqueuer::{Entrypoint, NewJob, Queue, Status, Worker};

use super::{picked, python_holding, rust_worker};
use crate::harness::{TestDb, captured, eventually};

/// A Python worker with `concurrency_limit=4` beside ours with 2: ours sees a slot at or
/// above its limit and reports it with the numbers, in its log and its stats.
#[test]
fn a_larger_python_limit_is_reported_with_the_numbers() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ep = "disagree";
    let jobs: Vec<NewJob> = (0..4).map(|i| NewJob::new(ep, format!("{i}"))).collect();
    queue.enqueue_many(&jobs).unwrap();
    let python = python_holding(&db, ep, 4, 4, 60.0);
    let mut client = db.client();
    let slots: Vec<Option<i64>> = picked(&mut client, ep).iter().map(|p| p.1).collect();
    assert_eq!(slots, [Some(0), Some(1), Some(2), Some(3)]);

    let ours = rust_worker(&db, ep, 2, false);
    eventually(
        Duration::from_secs(60),
        "the disagreement to be seen",
        || ours.stats().limits[0].larger_limit_elsewhere,
    );
    let limits = ours.stats().limits[0].clone();
    assert_eq!(limits.entrypoint, ep);
    assert_eq!(limits.limit, 2);
    assert_eq!(limits.highest_slot, Some(3));
    assert_eq!(limits.slots_in_use, 4);
    assert!(!limits.paused);
    let warned = captured(&format!("entrypoint {ep:?}: a job holds slot 3"));
    assert!(
        warned
            .iter()
            .any(|l| l
                .contains("declares a concurrency limit of at least 4, while this worker's is 2")),
        "{warned:?}"
    );
    ours.join().unwrap();
    python.kill();
}

/// With `pause_on_larger_limit`, a worker claims nothing of an entrypoint while a job
/// that a dead Python worker (limit 4) left behind holds slot 3, though two of its own
/// slots are free; without it, a worker claims within its own limit; once the slot is
/// free again the paused worker claims.
#[test]
fn the_opt_in_pauses_claiming_while_a_larger_limit_is_evident() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ep = "pausing";
    let jobs: Vec<NewJob> = (0..4).map(|i| NewJob::new(ep, format!("{i}"))).collect();
    queue.enqueue_many(&jobs).unwrap();
    python_holding(&db, ep, 4, 4, 60.0).kill();
    let mut client = db.client();
    // The dead worker's other jobs ended; slot 3 stays held until its heartbeat is stale.
    client
        .execute(
            "DELETE FROM pgqueuer WHERE entrypoint = $1 AND slot < 3",
            &[&ep],
        )
        .unwrap();
    let waiting: Vec<NewJob> = (0..3).map(|i| NewJob::new(ep, format!("w{i}"))).collect();
    let waiting = queue.enqueue_many(&waiting).unwrap();
    let queued = |queue: &Queue| {
        queue
            .job_statuses(&waiting)
            .unwrap()
            .values()
            .filter(|s| **s == Status::Queued)
            .count()
    };

    let paused = rust_worker(&db, ep, 2, true);
    eventually(Duration::from_secs(30), "the pause", || {
        paused.stats().limits[0].paused
    });
    // A claim cycle after the pause (a paused worker still runs one, claiming nothing,
    // every look at the slots): it had its chance to claim.
    let cycles = paused.stats().claims;
    eventually(
        Duration::from_secs(60),
        "a claim cycle while paused",
        || paused.stats().claims > cycles,
    );
    assert_eq!(queued(&queue), 3, "a paused worker claimed");
    paused.join().unwrap();

    // Without the opt-in, a worker claims within its own limit of 2 beside slot 3.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    let claiming = Worker::builder(db.pool(4))
        .threads(1)
        .heartbeat_timeout(Duration::from_secs(600))
        .entrypoint(
            Entrypoint::new(ep).concurrency_limit(2),
            move |_job, _ctx| {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            },
        )
        .build()
        .unwrap()
        .start()
        .unwrap();
    eventually(Duration::from_secs(30), "one job to run", || {
        seen.load(std::sync::atomic::Ordering::SeqCst) >= 1
    });
    claiming.join().unwrap();

    // The evidence goes: a paused worker claims again, within its next look.
    client
        .execute(
            "DELETE FROM pgqueuer WHERE entrypoint = $1 AND slot = 3",
            &[&ep],
        )
        .unwrap();
    let resumed = rust_worker(&db, ep, 2, true);
    let statuses = queue.wait_for(&waiting, Duration::from_secs(30)).unwrap();
    assert!(
        statuses.values().all(|s| *s == Status::Successful),
        "{statuses:?}"
    );
    assert!(!resumed.stats().limits[0].paused);
    resumed.join().unwrap();
}

/// Two Rust workers declaring the same limit report no disagreement.
#[test]
fn workers_with_equal_limits_report_nothing() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ep = "agree";
    let jobs: Vec<NewJob> = (0..40).map(|i| NewJob::new(ep, format!("{i}"))).collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    let start = || {
        Worker::builder(db.pool(4))
            .threads(3)
            .entrypoint(Entrypoint::new(ep).concurrency_limit(3), |_job, _ctx| {
                std::thread::sleep(Duration::from_millis(100));
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let (a, b) = (start(), start());
    queue.wait_for(&ids, Duration::from_secs(60)).unwrap();
    for w in [&a, &b] {
        let limits = &w.stats().limits[0];
        assert!(!limits.larger_limit_elsewhere, "{limits:?}");
        assert!(limits.highest_slot.is_none_or(|s| s < 3), "{limits:?}");
    }
    a.join().unwrap();
    b.join().unwrap();
    assert!(captured(&format!("entrypoint {ep:?}")).is_empty());
}

/// A worker that opted in to pausing counts its entrypoints as paused until its first
/// look at the slots; when that look finds no larger limit, the resume wakes the
/// dispatcher at once, rather than at the end of the quiet spell its first, empty claim
/// began (the 10 s between looks).
#[test]
fn a_resume_wakes_the_dispatcher_at_once() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ep = "resuming";
    let id = queue.enqueue(NewJob::new(ep, "x")).unwrap();
    let started = std::time::Instant::now();
    let worker = Worker::builder(db.pool(4))
        .threads(1)
        .dequeue_timeout(Duration::from_secs(30))
        .entrypoint(
            Entrypoint::new(ep)
                .concurrency_limit(2)
                .pause_on_larger_limit(true),
            |_job, _ctx| Ok(()),
        )
        .build()
        .unwrap()
        .start()
        .unwrap();
    // Far less than the 10 s to the next look: only a wake explains a start this soon.
    let statuses = queue.wait_for(&[id], Duration::from_secs(5)).unwrap();
    assert_eq!(
        statuses[&id],
        Status::Successful,
        "after {:?}",
        started.elapsed()
    );
    worker.join().unwrap();
}
