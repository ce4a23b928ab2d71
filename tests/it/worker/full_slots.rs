//! With every slot of a limit taken, new jobs are no reason to claim: a worker claims
//! again when a slot comes free (its own job ending, or another worker's), not on each
//! insert.

use std::time::Duration;

use pgqueuer::{EntrypointOptions, NewJob, Queue, RunningWorker, Worker};

use super::Gate;
use crate::harness::{TestDb, eventually};

/// A worker of four threads whose `gate` entrypoint (limit 2) waits at `gate`.
fn gated(db: &TestDb, gate: &Gate) -> RunningWorker {
    Worker::builder(db.pool(4))
        .threads(4)
        .entrypoint_with(
            "gate",
            EntrypointOptions::default().concurrency_limit(2),
            gate.handler(),
        )
        .build()
        .unwrap()
        .start()
        .unwrap()
}

/// Enqueues `n` gate jobs one statement (and one NOTIFY) at a time, 20 ms apart.
fn trickle(queue: &Queue, n: usize) {
    for _ in 0..n {
        queue.enqueue(NewJob::without_payload("gate")).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many claims `worker` makes while 20 more jobs are enqueued one at a time.
fn claims_during_inserts(worker: &RunningWorker, queue: &Queue) -> u64 {
    let before = worker.stats().claims;
    trickle(queue, 20);
    worker.stats().claims - before
}

/// The worker holds both slots itself: twenty inserts cost it no claim; when a job ends
/// its slot goes to a waiting job at once.
#[test]
fn a_worker_holding_every_slot_does_not_claim_on_inserts() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let gate = Gate::new();
    let worker = gated(&db, &gate);
    trickle(&queue, 2);
    gate.wait_started(2);
    std::thread::sleep(Duration::from_millis(200));
    let during = claims_during_inserts(&worker, &queue);
    assert_eq!(during, 0, "claims while this worker held both slots");
    gate.let_through(1);
    gate.wait_started(1);
    gate.let_through(21);
    gate.wait_started(19);
    assert_eq!(worker.join().unwrap().succeeded, 22);
}

/// Another worker holds both slots: after one claim finds the due jobs out of reach,
/// twenty inserts cost at most a few more (one per 100 ms safety look); once the other
/// worker stops and its jobs end, this worker takes the freed slots.
#[test]
fn a_worker_facing_slots_held_elsewhere_waits_for_one_to_free() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let (holder_gate, waiter_gate) = (Gate::new(), Gate::new());
    let holder = gated(&db, &holder_gate);
    trickle(&queue, 2);
    holder_gate.wait_started(2);
    let waiter = gated(&db, &waiter_gate);
    trickle(&queue, 1);
    std::thread::sleep(Duration::from_millis(300));
    let during = claims_during_inserts(&waiter, &queue);
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
    holder_gate.let_through(2);
    assert_eq!(holder.join().unwrap().succeeded, 2);
    waiter_gate.wait_started(2);
    waiter_gate.let_through(21);
    eventually(
        Duration::from_secs(10),
        "the waiter to run the rest",
        || waiter.stats().jobs.succeeded == 21,
    );
    assert_eq!(waiter.join().unwrap().succeeded, 21);
}
