//! With every slot of a limit taken, new jobs are no reason to claim: a worker claims
//! again when a slot comes free (its own job ending, or another worker's), not on each
//! insert.

use std::time::{Duration, Instant};

use pgqueuer::{Entrypoint, NewJob, Queue, RunningWorker, Worker};

use crate::harness::{TestDb, eventually, wait_listeners};
use crate::worker::Gate;

/// A worker of four threads whose `gate` entrypoint (limit 2) waits at `gate`.
fn gated(db: &TestDb, gate: &Gate) -> RunningWorker {
    Worker::builder(db.pool(4))
        .threads(4)
        .entrypoint(Entrypoint::new("gate").concurrency_limit(2), gate.handler())
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

/// How many claims `worker` makes while 20 more jobs are enqueued one at a time, and how
/// long the inserts took.
fn claims_during_inserts(worker: &RunningWorker, queue: &Queue) -> (u64, Duration) {
    let before = worker.stats().claims;
    let started = Instant::now();
    trickle(queue, 20);
    (worker.stats().claims - before, started.elapsed())
}

/// The worker holds both slots itself: twenty inserts cost it no claim; when a job ends
/// its slot goes to a waiting job at once, in one claim.
#[test]
fn a_worker_holding_every_slot_does_not_claim_on_inserts() {
    let db = TestDb::new();
    let mut client = db.client();
    let queue = Queue::new(db.pool(1));
    let gate = Gate::new();
    let worker = gated(&db, &gate);
    // The inserts' NOTIFYs reach the worker.
    wait_listeners(&mut client, &db.name, 1, &[], Duration::from_secs(30));
    trickle(&queue, 2);
    // Each claim is counted before its job starts: no claim is still to come.
    gate.wait_started(2);
    let before = worker.stats().claims;
    trickle(&queue, 20);
    // The claim a freed slot is worth comes after the inserts: the worker had its chance
    // to claim on them, and did not.
    gate.let_through(1);
    gate.wait_started(1);
    let during = worker.stats().claims - before;
    assert_eq!(
        during, 1,
        "claims while this worker held both slots, and the one the freed slot made"
    );
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
    eventually(Duration::from_secs(30), "the waiter's first claim", || {
        waiter.stats().claims >= 1
    });
    let (during, took) = claims_during_inserts(&waiter, &queue);
    // One safety look per 100 ms while the inserts went on (however long a busy machine
    // made them take), and a few claims more for the waiter's first moments; a claim per
    // insert would be 20 in well under 2 s.
    let bound = u64::try_from(took.as_millis() / 100).unwrap() + 3;
    assert!(
        during <= bound,
        "{during} claims during 20 inserts in {took:?} while the limit was held elsewhere"
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
        Duration::from_secs(60),
        "the waiter to run the rest",
        || waiter.stats().jobs.succeeded == 21,
    );
    assert_eq!(waiter.join().unwrap().succeeded, 21);
}
