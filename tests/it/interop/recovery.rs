//! Crash recovery: a job left by a dead worker of one side is run by the other.

use std::time::Duration;

use pgqueuer::{Claimer, Entrypoint, NewJob, Queue, Worker};
use serde_json::json;

use super::{create_side_tables, hex, python_worker};
use crate::harness::{TestDb, eventually, log_of, scalar};
use crate::python;

/// A job held by a Python worker killed mid-handler is re-picked by our worker once its
/// heartbeat is stale, keeping its slot under the limit, and run to success.
#[test]
fn our_worker_recovers_a_job_from_a_killed_python_worker() {
    let db = TestDb::new();
    let mut client = db.client();
    create_side_tables(&mut client);
    let pool = db.pool(4);
    let id = Queue::new(pool.clone())
        .enqueue(NewJob::without_payload("orphan"))
        .unwrap();
    let mut python = python::spawn_script(
        &db,
        "worker.py",
        &json!({"entrypoint": "orphan", "behaviour": "wait_cancel", "concurrency_limit": 1,
                "wait_s": 30, "timeout_s": 40}),
        Duration::from_secs(45),
    );
    eventually(
        Duration::from_secs(20),
        "the Python handler to start",
        || {
            assert!(!python.has_exited(), "the Python worker exited early");
            scalar::<i64>(
                &mut client,
                &format!(
                    "SELECT count(*) FROM interop_marks WHERE job_id = {id} AND what = 'started'"
                ),
            ) == 1
        },
    );
    python.kill();
    let (owner, slot): (Option<uuid::Uuid>, Option<i64>) = {
        let row = client
            .query_one(
                "SELECT queue_manager_id, slot FROM pgqueuer WHERE id = $1",
                &[&id],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert!(owner.is_some(), "the killed worker's job is not picked");
    assert_eq!(slot, Some(0), "Python took slot 0 of the limit");

    let (tx, rx) = crossbeam_channel::bounded(1);
    let worker = Worker::builder(pool)
        .threads(1)
        .heartbeat_timeout(Duration::from_secs(1))
        .dequeue_timeout(Duration::from_millis(200))
        .entrypoint(
            Entrypoint::new("orphan").concurrency_limit(1),
            move |job, _ctx| {
                let _ = tx.send(job.clone());
                Ok(())
            },
        )
        .build()
        .unwrap();
    let ours = worker.id();
    let running = worker.start().unwrap();
    let job = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("our worker never re-picked the orphaned job");
    assert_eq!(
        (job.id, job.slot),
        (id, slot),
        "the re-pick must keep the slot"
    );
    assert_eq!(job.queue_manager_id, Some(ours));
    assert_ne!(owner, Some(ours));
    let summary = running.join().unwrap();
    assert_eq!(summary.succeeded, 1);
    assert_eq!(
        log_of(&mut client, id),
        ["queued", "picked", "picked", "successful"]
    );
}

/// A job claimed by a Rust process that died (no heartbeats) is re-picked by a Python
/// `QueueManager` once stale, keeping its slot, and run to success.
#[test]
fn python_recovers_a_job_our_dead_claimer_left() {
    let db = TestDb::new();
    let pool = db.pool(2);
    let id = Queue::new(pool.clone())
        .enqueue(NewJob::new("abandoned", b"still here".to_vec()))
        .unwrap();
    let dead = Claimer::builder()
        .entrypoint("abandoned", 1)
        .build()
        .unwrap();
    let claim = dead.claim(&mut pool.get().unwrap(), 1).unwrap();
    assert_eq!(claim.jobs.len(), 1);
    let slot = claim.jobs[0].slot;
    assert_eq!(slot, Some(0));
    // Stale for a 1 s heartbeat timeout by the time Python's first dequeue runs.
    std::thread::sleep(Duration::from_millis(1_100));
    let answer = python_worker(
        &db,
        &json!({"entrypoint": "abandoned", "behaviour": "echo", "concurrency_limit": 1,
                "heartbeat_timeout_s": 1}),
    );
    let seen = answer["seen"].as_array().unwrap();
    assert_eq!(seen.len(), 1, "{answer}");
    assert_eq!(seen[0]["id"], id);
    assert_eq!(
        seen[0]["slot"],
        json!(slot),
        "the re-pick must keep the slot"
    );
    assert_eq!(seen[0]["payload_hex"], hex(b"still here"));
    assert_eq!(
        log_of(&mut db.client(), id),
        ["queued", "picked", "picked", "successful"]
    );
}
