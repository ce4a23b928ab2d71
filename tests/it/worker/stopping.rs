//! Stopping handlers: cancellation of a running job, and shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::{NewJob, Queue, Worker};

use crate::harness::{TestDb, eventually, log_of, scalar};

/// `Queue::cancel` of a running job reaches its handler (`ctx.is_cancelled()`) long
/// before the handler would end by itself, and the job is logged `canceled`.
#[test]
fn cancellation_reaches_a_running_handler() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let (started_tx, started_rx) = crossbeam_channel::unbounded();
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let worker = {
        let saw_cancel = saw_cancel.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .entrypoint("slow", move |job, ctx| {
                started_tx.send(job.id).unwrap();
                let until = Instant::now() + Duration::from_secs(60);
                while Instant::now() < until {
                    if ctx.is_cancelled() {
                        saw_cancel.store(true, Ordering::SeqCst);
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let id = queue.enqueue(NewJob::new("slow", Vec::new())).unwrap();
    assert_eq!(
        started_rx.recv_timeout(Duration::from_secs(30)).unwrap(),
        id
    );
    let sent = Instant::now();
    assert_eq!(queue.cancel(&[id]).unwrap(), [id]);
    // Milliseconds when idle (the NOTIFY); 30 s is room for a busy machine, and the
    // handler would otherwise run for a minute.
    eventually(
        Duration::from_secs(30),
        "the handler to see the cancellation",
        || saw_cancel.load(Ordering::SeqCst),
    );
    eprintln!("cancellation reached the handler in {:?}", sent.elapsed());
    let summary = worker.join().unwrap();
    assert_eq!(summary.cancelled, 1);
    assert_eq!(log_of(&mut client, id), ["queued", "picked", "canceled"]);
}

/// Shutdown with jobs in flight: no claim after the signal, running jobs finish, every
/// thread joins, and nothing is left picked by this worker. With a deadline, handlers
/// that watch `is_cancelled` are told to stop.
#[test]
fn shutdown_lets_running_jobs_finish_and_claims_nothing_more() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    queue
        .enqueue_many(
            &(0..8)
                .map(|i| NewJob::new("sleep", vec![i]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let asked_to_stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (started, asked_to_stop) = (started.clone(), asked_to_stop.clone());
        Worker::builder(pool.clone())
            .threads(4)
            .batch_size(1)
            .entrypoint("sleep", move |_job, _ctx| {
                started.fetch_add(1, Ordering::SeqCst);
                // Running until shutdown was asked (30 s at most), and a little after.
                let until = Instant::now() + Duration::from_secs(30);
                while !asked_to_stop.load(Ordering::SeqCst) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                std::thread::sleep(Duration::from_millis(100));
                Ok(())
            })
            .build()
            .unwrap()
    };
    let stop = worker.shutdown_handle();
    let running = worker.start().unwrap();
    eventually(Duration::from_secs(30), "four jobs to start", || {
        started.load(Ordering::SeqCst) == 4
    });
    let asked = Instant::now();
    stop.shutdown();
    asked_to_stop.store(true, Ordering::SeqCst);
    let summary = running.wait().unwrap();
    // The handlers' last 100 ms; 10 s is room for a busy machine.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        asked.elapsed()
    );
    // The worker has stopped: a job it started after the signal would be counted.
    assert_eq!((summary.succeeded, summary.released), (4, 0));
    assert_eq!(
        started.load(Ordering::SeqCst),
        4,
        "a job started after shutdown"
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
        ),
        0
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'queued'"
        ),
        4
    );

    // A deadline makes handlers that watch for it stop early.
    let worker = Worker::builder(pool)
        .threads(2)
        .shutdown_deadline(Duration::from_millis(200))
        .entrypoint("sleep", |_job, ctx| {
            let until = Instant::now() + Duration::from_secs(30);
            while !ctx.is_cancelled() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(())
        })
        .build()
        .unwrap();
    let stop = worker.shutdown_handle();
    let running = worker.start().unwrap();
    eventually(Duration::from_secs(30), "jobs to be picked", || {
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
        ) == 2
    });
    let asked = Instant::now();
    stop.shutdown();
    running.wait().unwrap();
    // The 200 ms deadline; 10 s is room for a busy machine and far below the handlers'
    // own 30 s.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "deadline shutdown took {:?}",
        asked.elapsed()
    );
}

/// A worker's listener waits on its connection, where nothing but a notification ends
/// the wait early: once every executor has exited, the completer wakes it on the
/// worker's own channel, so that a stop (every `run_until_empty`) does not wait out the
/// listener's poll. The wake reaches a session listening on that channel, and only on a
/// stop: a drain that is still running sends none.
#[test]
fn a_stop_wakes_the_listener_on_the_workers_own_channel() {
    use fallible_iterator::FallibleIterator;

    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    queue.enqueue(NewJob::new("once", Vec::new())).unwrap();
    let (started_tx, started_rx) = crossbeam_channel::unbounded();
    let (finish_tx, finish_rx) = crossbeam_channel::bounded::<()>(1);
    let worker = Worker::builder(pool.clone())
        .threads(2)
        .entrypoint("once", move |_job, _ctx| {
            started_tx.send(()).unwrap();
            finish_rx.recv_timeout(Duration::from_secs(60)).unwrap();
            Ok(())
        })
        .build()
        .unwrap();
    let channel = format!("pgqueuer_rs_wake_{}", worker.id().simple());
    let mut watcher = db.client();
    watcher
        .batch_execute(&format!("LISTEN \"{channel}\""))
        .unwrap();
    std::thread::scope(|scope| {
        let drain = scope.spawn(|| worker.run_until_empty().unwrap());
        started_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        // Running: nothing on the channel yet (the handler waits for the test).
        assert_eq!(watcher.notifications().iter().count().unwrap(), 0);
        finish_tx.send(()).unwrap();
        let summary = drain.join().unwrap();
        assert_eq!(summary.succeeded, 1);
    });
    let woken = watcher
        .notifications()
        .timeout_iter(Duration::from_secs(30))
        .next()
        .unwrap()
        .expect("no wake on the worker's own channel within 30 s of its stop");
    assert_eq!(woken.channel(), channel);
    assert_eq!(woken.payload(), "");
}
