//! Heartbeats, stale re-picks and reconnecting after terminated connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::{Claimer, NewJob, Queue, Worker};

use crate::harness::{TestDb, eventually, log_of, scalar, wait_listeners};

/// A job longer than the heartbeat timeout keeps its row while another worker polls for
/// stale jobs; a worker that stops heartbeating loses its job to one that runs it. The
/// timeout is 4 s (a beat every 2 s): a beat late by a second on a busy machine does not
/// let the thief in, and the thief polls for two timeouts.
#[test]
fn heartbeats_keep_a_long_job_and_a_dead_worker_loses_its_job() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let long = queue.enqueue(NewJob::new("long", Vec::new())).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = {
        let runs = runs.clone();
        Worker::builder(pool.clone())
            .threads(1)
            .heartbeat_timeout(Duration::from_secs(4))
            .dequeue_timeout(Duration::from_millis(300))
            .entrypoint("long", move |_job, _ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(10));
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let thief = Claimer::builder()
        .entrypoint("long", 0)
        .heartbeat_timeout(Duration::from_secs(4))
        .build()
        .unwrap();
    let mut conn = pool.get().unwrap();
    eventually(
        Duration::from_secs(30),
        "the worker to start the long job",
        || runs.load(Ordering::SeqCst) == 1,
    );
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        let claim = thief.claim(&mut conn, 1).unwrap();
        assert!(
            claim.jobs.is_empty(),
            "the long job was stolen despite heartbeats"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eventually(Duration::from_secs(30), "the long job to finish", || {
        log_of(&mut client, long).last().map(String::as_str) == Some("successful")
    });
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        log_of(&mut client, long),
        ["queued", "picked", "successful"]
    );

    worker.join().unwrap();

    // A worker that claims and then dies (never heartbeats): a live worker re-picks.
    let orphan = queue.enqueue(NewJob::new("long", Vec::new())).unwrap();
    let dead = Claimer::builder().entrypoint("long", 0).build().unwrap();
    assert_eq!(dead.claim(&mut conn, 1).unwrap().jobs.len(), 1);
    drop(conn);
    let rescuer = {
        let runs = runs.clone();
        Worker::builder(pool.clone())
            .threads(1)
            .heartbeat_timeout(Duration::from_secs(1))
            .dequeue_timeout(Duration::from_millis(300))
            .entrypoint("long", move |_job, _ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    eventually(
        Duration::from_secs(30),
        "the orphaned job to be re-picked and run",
        || log_of(&mut client, orphan).last().map(String::as_str) == Some("successful"),
    );
    assert_eq!(
        log_of(&mut client, orphan),
        ["queued", "picked", "picked", "successful"]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    rescuer.join().unwrap();
}

/// Terminating the listener's connection, then every pool connection, mid-run: the
/// worker reconnects and keeps taking jobs (the 60 s dequeue timeout rules out polling).
#[test]
fn the_worker_recovers_from_terminated_connections() {
    let db = TestDb::new();
    let mut admin = db.client();
    let pool = db.pool(5);
    let queue = Queue::new(pool.clone());
    let (tx, rx) = crossbeam_channel::unbounded();
    let worker = Worker::builder(pool.clone())
        .threads(2)
        .dequeue_timeout(Duration::from_secs(60))
        .entrypoint("job", move |job, _ctx| {
            tx.send(job.id).unwrap();
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    // Each job starts within seconds when all is well; 20 s is room for a busy machine
    // and still well below the 60 s poll.
    let within = Duration::from_secs(20);
    let first = queue.enqueue(NewJob::new("job", Vec::new())).unwrap();
    assert_eq!(rx.recv_timeout(within).unwrap(), first);

    let listener = wait_listeners(&mut admin, &db.name, 1, &[], within);
    let killed: Vec<i32> = admin
        .query(
            "SELECT pid FROM unnest($1::int[]) AS l(pid) WHERE pg_terminate_backend(pid)",
            &[&listener],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(killed, listener, "the listener's backend");
    // Listening again, on a new backend.
    wait_listeners(&mut admin, &db.name, 1, &killed, within);
    let second = queue.enqueue(NewJob::new("job", Vec::new())).unwrap();
    assert_eq!(
        rx.recv_timeout(within).unwrap(),
        second,
        "after the listener was killed"
    );

    let killed = scalar::<i64>(
        &mut admin,
        &format!(
            "WITH t AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE datname = '{}' \
             AND pid <> pg_backend_pid() AND application_name NOT LIKE '%-listen') \
             SELECT count(*) FROM t WHERE pg_terminate_backend(pid)",
            db.name
        ),
    );
    assert!(killed >= 2, "pool connections killed: {killed}");
    let third = queue.enqueue(NewJob::new("job", Vec::new())).unwrap();
    assert_eq!(
        rx.recv_timeout(within).unwrap(),
        third,
        "after pool connections were killed"
    );
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 3);
    assert_eq!(
        scalar::<i64>(&mut admin, "SELECT count(*) FROM pgqueuer"),
        0
    );
}
