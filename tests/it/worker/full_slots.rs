//! With every slot of a limit taken, new jobs are no reason to claim: a worker claims
//! again when a slot comes free (its own job ending, or another worker's), not on each
//! insert.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use pgqueuer::{EntrypointOptions, NewJob, Queue, RunningWorker, Worker};

use crate::harness::{TestDb, eventually};

/// A worker of four threads whose `gate` entrypoint (limit 2) waits for a message per
/// job; the receiver hears each job start.
fn gated(db: &TestDb) -> (RunningWorker, Sender<()>, Receiver<i64>) {
    let (open_tx, open_rx) = crossbeam_channel::unbounded::<()>();
    let (started_tx, started_rx) = crossbeam_channel::unbounded::<i64>();
    let worker = Worker::builder(db.pool(4))
        .threads(4)
        .entrypoint_with(
            "gate",
            EntrypointOptions::default().concurrency_limit(2),
            move |job, _ctx| {
                let _ = started_tx.send(job.id);
                open_rx
                    .recv_timeout(Duration::from_secs(30))
                    .map_err(|_| "the test never opened the gate")?;
                Ok(())
            },
        )
        .build()
        .unwrap()
        .start()
        .unwrap();
    (worker, open_tx, started_rx)
}

/// Enqueues `n` gate jobs one statement (and one NOTIFY) at a time, 20 ms apart.
fn trickle(queue: &Queue, n: usize) {
    for _ in 0..n {
        queue.enqueue(NewJob::without_payload("gate")).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn started(rx: &Receiver<i64>, n: usize) {
    for _ in 0..n {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a gate job never started");
    }
}

/// The worker holds both slots itself: twenty inserts cost it no claim; when a job ends
/// its slot goes to a waiting job at once.
#[test]
fn a_worker_holding_every_slot_does_not_claim_on_inserts() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let (worker, open, rx) = gated(&db);
    trickle(&queue, 2);
    started(&rx, 2);
    std::thread::sleep(Duration::from_millis(200));
    let before = worker.stats().claims;
    trickle(&queue, 20);
    let during = worker.stats().claims - before;
    assert_eq!(
        during, 0,
        "claims while both slots were held by this worker"
    );
    open.send(()).unwrap();
    started(&rx, 1);
    for _ in 0..21 {
        open.send(()).unwrap();
    }
    started(&rx, 19);
    assert_eq!(worker.join().unwrap().succeeded, 22);
}

/// Another worker holds both slots: after one claim finds the due jobs out of reach,
/// twenty inserts cost at most a few more (one per 100 ms safety look); once the other
/// worker stops and its jobs end, this worker takes the freed slots.
#[test]
fn a_worker_facing_slots_held_elsewhere_waits_for_one_to_free() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let (holder, open_holder, holder_rx) = gated(&db);
    trickle(&queue, 2);
    started(&holder_rx, 2);
    let (waiter, open_waiter, waiter_rx) = gated(&db);
    trickle(&queue, 1);
    std::thread::sleep(Duration::from_millis(300));
    let before = waiter.stats().claims;
    trickle(&queue, 20);
    let during = waiter.stats().claims - before;
    assert!(
        during <= 8,
        "{during} claims during 20 inserts while the limit was held elsewhere"
    );
    assert_eq!(
        waiter.stats().running,
        0,
        "the waiter took a job past the limit"
    );
    // The holder claims nothing more; its two jobs end and free their slots.
    holder.shutdown_handle().shutdown();
    open_holder.send(()).unwrap();
    open_holder.send(()).unwrap();
    assert_eq!(holder.join().unwrap().succeeded, 2);
    started(&waiter_rx, 2);
    for _ in 0..21 {
        open_waiter.send(()).unwrap();
    }
    eventually(
        Duration::from_secs(10),
        "the waiter to run the rest",
        || waiter.stats().jobs.succeeded == 21,
    );
    assert_eq!(waiter.join().unwrap().succeeded, 21);
}
