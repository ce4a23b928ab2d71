//! When idle threads wake: a claimed batch, a NOTIFY, a deferred job's due time.

use std::time::{Duration, Instant};

use pgqueuer::{NewJob, Queue, Worker};

use super::{Overlap, start_timing_worker};
use crate::harness::TestDb;

/// A batch claimed at once starts on every idle thread at once: the jobs one thread claims
/// for the others do not wait for it to come back from its own, nor for a poll. Eight
/// jobs of 400 ms, enqueued in one statement to an idle worker of eight threads (60 s
/// dequeue timeout), overlap all eight.
#[test]
fn a_claimed_batch_starts_on_every_idle_thread_at_once() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let overlap = Overlap::default();
    let (tx, rx) = crossbeam_channel::unbounded();
    let worker = {
        let overlap = overlap.clone();
        Worker::builder(pool.clone())
            .threads(8)
            .batch_size(8)
            .dequeue_timeout(Duration::from_secs(60))
            .entrypoint("slow", move |_job, _ctx| {
                tx.send(Instant::now()).unwrap();
                overlap.during(|| std::thread::sleep(Duration::from_millis(400)));
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
    assert_eq!(overlap.peak(), 8, "not every job overlapped");
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

/// The thread that claims a lone job for an idle worker runs it itself and leaves the
/// dispatcher's lane to the next free thread (see `src/worker/runner.rs`): a long job
/// started that way does not hold up the next one, and although the worker has one
/// thread more than `threads`, no more than `threads` jobs run at once. Two threads: a
/// lone 1 s job, then another lone job (it must start while the first runs), then one
/// more lone job and a burst of eight while both threads are busy (never three at once).
#[test]
fn a_lone_job_runs_on_the_claiming_thread_and_claiming_goes_on() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let overlap = Overlap::default();
    let (tx, rx) = crossbeam_channel::unbounded::<(String, Instant)>();
    let worker = {
        let overlap = overlap.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .dequeue_timeout(Duration::from_secs(60))
            .entrypoint("job", move |job, _ctx| {
                let name = job.payload_str().unwrap_or_default().to_owned();
                overlap.during(|| {
                    tx.send((name.clone(), Instant::now())).unwrap();
                    let ms = if name.starts_with("long") { 1_000 } else { 50 };
                    std::thread::sleep(Duration::from_millis(ms));
                });
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let queue = Queue::new(pool);
    let started = |what: &str| {
        let (name, at) = rx.recv_timeout(Duration::from_secs(10)).expect(what);
        assert_eq!(name, what);
        at
    };
    std::thread::sleep(Duration::from_millis(500));
    queue.enqueue(NewJob::new("job", "long 1")).unwrap();
    let long_started = started("long 1");
    queue.enqueue(NewJob::new("job", "next")).unwrap();
    let waited = started("next") - long_started;
    eprintln!("the second lone job started {waited:?} after the first");
    assert!(
        waited < Duration::from_millis(700),
        "the second job waited {waited:?} for the first (the lead stayed with its thread)"
    );
    std::thread::sleep(Duration::from_millis(1_200));
    queue.enqueue(NewJob::new("job", "long 2")).unwrap();
    started("long 2");
    let burst: Vec<NewJob> = (0..8)
        .map(|i| NewJob::new("job", format!("b{i}")))
        .collect();
    queue.enqueue_many(&burst).unwrap();
    for _ in 0..8 {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a burst job never started");
    }
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 11);
    assert_eq!(overlap.peak(), 2, "jobs at once beyond threads(2)");
}
