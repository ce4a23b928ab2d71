//! Per-job timeouts: the handler is asked to stop, its job fails with a timeout (or is
//! retried), and a handler far past its timeout is warned about.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::{Entrypoint, NewJob, OnFailure, Queue, RetryPolicy, Status, Worker};

use crate::harness::{TestDb, captured};

/// A handler that waits for its job's stop request (up to 10 s), then returns success;
/// records that it saw a timeout. Runs of a retried job after the first return at once.
fn stop_at_timeout(
    saw_timeout: Arc<AtomicBool>,
) -> impl Fn(&pgqueuer::Job, &pgqueuer::Context<'_>) -> pgqueuer::HandlerResult + Clone {
    move |job, ctx| {
        if job.attempts > 0 {
            return Ok(());
        }
        let started = Instant::now();
        while !ctx.is_cancelled() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if ctx.is_cancelled() && ctx.timed_out() {
            saw_timeout.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Past its timeout a handler sees `is_cancelled()` and `timed_out()`; its job ends as
/// an exception whose traceback says it timed out, or, with a retry policy, is retried.
#[test]
fn a_timed_out_handler_is_asked_to_stop_and_its_job_fails_or_retries() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let failing = queue.enqueue(NewJob::new("slow", "a")).unwrap();
    let retried = queue.enqueue(NewJob::new("slow_retry", "b")).unwrap();
    let saw_timeout = Arc::new(AtomicBool::new(false));
    let handler = stop_at_timeout(saw_timeout.clone());
    let once = RetryPolicy::exponential(1, Duration::ZERO, Duration::ZERO).jitter(0.0);
    let summary = Worker::builder(db.pool(4))
        .threads(2)
        .entrypoint(
            Entrypoint::new("slow").timeout(Duration::from_millis(300)),
            handler.clone(),
        )
        .entrypoint(
            Entrypoint::new("slow_retry")
                .timeout(Duration::from_millis(300))
                .retry(once),
            handler,
        )
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    assert!(
        saw_timeout.load(Ordering::SeqCst),
        "the handler never saw the timeout"
    );
    assert_eq!(
        (summary.failed, summary.retried, summary.succeeded),
        (1, 1, 1)
    );
    let history = queue.history(failing).unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.status, Status::Exception);
    let failure = last.failure().unwrap();
    assert_eq!(failure.exception_type, "TimeoutError");
    assert!(failure.message.contains("timeout of 300ms"), "{failure:?}");
    assert!(failure.traceback.starts_with("timed out:"), "{failure:?}");
    let history = queue.history(retried).unwrap();
    let statuses: Vec<Status> = history.iter().map(|e| e.status).collect();
    assert_eq!(
        statuses,
        [
            Status::Queued,
            Status::Picked,
            Status::Queued,
            Status::Picked,
            Status::Successful
        ]
    );
    assert_eq!(history[2].failure().unwrap().exception_type, "TimeoutError");
}

/// A handler that ignores its timeout and runs on is logged at `warn` at three times
/// the timeout, and its job still fails with a timeout once it returns.
#[test]
fn a_handler_far_past_its_timeout_is_warned_about() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(NewJob::new("stubborn", "x")).unwrap();
    Worker::builder(db.pool(4))
        .threads(1)
        .entrypoint(
            Entrypoint::new("stubborn")
                .timeout(Duration::from_millis(100))
                .on_failure(OnFailure::Hold),
            |job, _ctx| {
                // Runs on until the warning is out (30 s at most: the test then fails on
                // its absence), however late a busy machine makes it.
                let needle = format!("job {} (stubborn) is still running", job.id);
                let until = Instant::now() + Duration::from_secs(30);
                while captured(&needle).is_empty() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(())
            },
        )
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    let warned = captured(&format!("job {id} (stubborn) is still running"));
    assert!(
        warned
            .iter()
            .any(|l| l.contains("3 times its timeout of 100ms")),
        "{warned:?}"
    );
    assert_eq!(queue.job(id).unwrap().unwrap().status, Status::Failed);
    let failure = queue.list_failed(1).unwrap()[0].failure.clone().unwrap();
    assert_eq!(failure.exception_type, "TimeoutError");
    assert!(
        failure.traceback.contains("then returned success"),
        "{failure:?}"
    );
}
