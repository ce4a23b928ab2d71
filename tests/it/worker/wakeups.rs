//! When idle threads wake: a claimed batch, a NOTIFY, a deferred job's due time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::{NewJob, Queue, Worker};

use super::start_timing_worker;
use crate::harness::TestDb;

/// A batch claimed at once starts on every idle thread at once: the jobs one thread claims
/// for the others do not wait for it to come back from its own, nor for a poll. Eight
/// jobs of 400 ms, enqueued in one statement to an idle worker of eight threads (60 s
/// dequeue timeout), overlap all eight.
#[test]
fn a_claimed_batch_starts_on_every_idle_thread_at_once() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (tx, rx) = crossbeam_channel::unbounded();
    let worker = {
        let (now, peak) = (now.clone(), peak.clone());
        Worker::builder(pool.clone())
            .threads(8)
            .batch_size(8)
            .dequeue_timeout(Duration::from_secs(60))
            .entrypoint("slow", move |_job, _ctx| {
                tx.send(Instant::now()).unwrap();
                peak.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(400));
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    // Let every thread reach its idle wait.
    std::thread::sleep(Duration::from_millis(700));
    let jobs: Vec<NewJob> = (0..8).map(|_| NewJob::new("slow", Vec::new())).collect();
    Queue::new(pool).enqueue_many(&jobs).unwrap();
    let starts: Vec<Instant> = (0..8)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("a job never started")
        })
        .collect();
    let spread = *starts.iter().max().unwrap() - *starts.iter().min().unwrap();
    eprintln!("8 jobs started within {spread:?} of each other");
    assert_eq!(worker.join().unwrap().succeeded, 8);
    assert_eq!(peak.load(Ordering::SeqCst), 8, "not every job overlapped");
    assert!(
        spread < Duration::from_millis(200),
        "starts spread over {spread:?}"
    );
}

/// An idle worker with a 60 s dequeue timeout starts a new job within a second: the
/// wake-up comes from LISTEN/NOTIFY, not from polling.
#[test]
fn an_idle_worker_is_woken_by_notify() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let (worker, rx) = start_timing_worker(&pool, 2, "ping");
    // Let the threads reach their idle wait.
    std::thread::sleep(Duration::from_millis(700));
    let queue = Queue::new(pool);
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let sent = Instant::now();
        queue.enqueue(NewJob::new("ping", Vec::new())).unwrap();
        let started = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the job never started");
        latencies.push(started - sent);
        std::thread::sleep(Duration::from_millis(100));
    }
    latencies.sort();
    eprintln!("enqueue-to-start latencies: {latencies:?}");
    assert!(latencies[4] < Duration::from_secs(1), "{latencies:?}");
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 5);
}

/// An idle thread's wait is cut short at the next deferred job's due time: with a 60 s
/// dequeue timeout, a job due in 1.5 s starts on time although nothing notifies then.
#[test]
fn a_deferred_job_starts_when_due_without_polling() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let (worker, rx) = start_timing_worker(&pool, 1, "later");
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    Queue::new(pool)
        .enqueue(NewJob::new("later", Vec::new()).execute_after(Duration::from_millis(1_500)))
        .unwrap();
    let started = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the deferred job never ran");
    let waited = started - sent;
    eprintln!("deferred job started after {waited:?}");
    assert!(
        waited >= Duration::from_millis(1_450),
        "started early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(2_500),
        "started late: {waited:?}"
    );
    worker.join().unwrap();
}

/// The thread that claims for an idle worker runs the first job itself and leaves the
/// dispatcher's lane to the next free thread (see `src/worker/runner.rs`): the worker has
/// one thread more than `threads`, yet never runs more jobs at once. Two threads, short
/// jobs first (so that a batch is claimed ahead of free threads), then bursts of ten
/// 20 ms jobs to the idle worker, each claimed at once: never more than two overlap,
/// always two do, and every job runs once.
#[test]
fn the_claiming_thread_runs_a_job_without_exceeding_threads() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let ran = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (now, peak, ran) = (now.clone(), peak.clone(), ran.clone());
        Worker::builder(pool.clone())
            .threads(2)
            .batch_size(10)
            .dequeue_timeout(Duration::from_secs(60))
            .entrypoint("short", |_job, _ctx| Ok(()))
            .entrypoint("burst", move |_job, _ctx| {
                peak.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
                now.fetch_sub(1, Ordering::SeqCst);
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let queue = Queue::new(pool);
    let short: Vec<NewJob> = (0..20).map(|_| NewJob::new("short", Vec::new())).collect();
    queue.enqueue_many(&short).unwrap();
    for round in 1..=5 {
        std::thread::sleep(Duration::from_millis(300));
        let burst: Vec<NewJob> = (0..10).map(|_| NewJob::new("burst", Vec::new())).collect();
        queue.enqueue_many(&burst).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ran.load(Ordering::SeqCst) < round * 10 {
            assert!(Instant::now() < deadline, "burst {round} did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 70);
    assert_eq!(ran.load(Ordering::SeqCst), 50);
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "jobs at once beyond threads(2)"
    );
}
