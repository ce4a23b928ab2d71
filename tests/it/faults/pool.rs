//! Pool exhaustion: a hog takes every connection of a worker's pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pgqueuer::{ConnectOptions, Error, NewJob, Queue, Worker};

use super::checks::{enqueue_plan, wait_all_done};
use super::summary::{Row, report};
use crate::harness::{TestDb, captured, eventually};

/// A hog takes every connection of the worker's pool: enqueueing through that pool
/// fails with an error naming the cause, the worker logs its failed claims and backs off,
/// and once the hog lets go it runs every job.
#[test]
fn pool_exhaustion_is_reported_and_the_worker_recovers() {
    let db = TestDb::new();
    let mut client = db.client();
    let options = ConnectOptions {
        max_size: 3,
        min_idle: 0,
        connection_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let pool = pgqueuer::connect_with(&db.dsn(), &options).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let worker = {
        let done = done.clone();
        Worker::builder(pool.clone())
            .threads(1)
            .heartbeat_timeout(Duration::from_secs(5))
            .dequeue_timeout(Duration::from_millis(500))
            .entrypoint("p", move |_job, _ctx| {
                done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .build()
            .unwrap()
    };
    let hogged: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    let err = Queue::new(pool.clone())
        .enqueue(NewJob::new("p", "x"))
        .unwrap_err();
    assert!(matches!(err, Error::Pool(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("no database connection available: timed out waiting for connection"),
        "{err}"
    );
    let failed_claims = || {
        captured("claim failed")
            .iter()
            .filter(|l| l.contains("timed out waiting for connection"))
            .count()
    };
    let failed_before = failed_claims();
    let running = worker.start().unwrap();
    let ids = enqueue_plan(&Queue::new(db.pool(2)), &[("p", 0, 0, 20)]);
    // The worker tried to claim, and could not: it had its chances to run a job.
    eventually(Duration::from_secs(60), "two failed claims", || {
        failed_claims() >= failed_before + 2
    });
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "a job ran without a connection"
    );
    drop(hogged);
    // Claims back off up to 5 s; a minute is room for a busy machine.
    let recovered = eventually(Duration::from_secs(60), "every job to run", || {
        done.load(Ordering::SeqCst) == 20
    });
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(60));
    let summary = running.join().unwrap();
    let lines: Vec<String> = captured("claim failed")
        .into_iter()
        .filter(|l| {
            // Logged by whichever worker thread leads (see src/worker/runner.rs).
            l.starts_with("pgqueuer-") && l.contains("timed out waiting for connection")
        })
        .collect();
    eprintln!(
        "pool exhaustion: enqueue said {err:?} ({err}); {} failed claims logged, e.g. {:?}; \
         all 20 ran {recovered:?} after the hog let go",
        lines.len(),
        lines.first()
    );
    report(Row {
        test: "pool exhaustion",
        faults: format!("pool hogged; {} claims timed out", lines.len()),
        enqueued: ids.len(),
        completed: usize::try_from(summary.succeeded).unwrap(),
        lost: lost.len(),
        concurrency: "-".into(),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(summary.succeeded, 20);
    assert!(!lines.is_empty(), "the failed claims were not logged");
}
