//! Concurrency limits, exactly-once execution and batch sizes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgqueuer::{Entrypoint, NewJob, Queue, Worker};

use crate::harness::{TestDb, scalar};
use crate::worker::Overlap;

/// 16 threads drain 20,000 jobs over limits 2 and 5 and two unlimited entrypoints: every
/// job runs exactly once and running handlers never exceed a limit.
#[test]
fn sixteen_threads_run_every_job_once_within_limits() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        ))
        .unwrap();
    let pool = db.pool(18);
    let queue = Queue::new(pool.clone());
    let plan: [(&str, u32, usize); 4] = [
        ("two", 2, 1_500),
        ("five", 5, 3_500),
        ("a", 0, 7_500),
        ("b", 0, 7_500),
    ];
    for (ep, _, count) in plan {
        for chunk in (0..count).collect::<Vec<_>>().chunks(2_000) {
            let jobs: Vec<NewJob> = chunk
                .iter()
                .map(|i| {
                    NewJob::new(ep, i.to_string().into_bytes())
                        .priority(i32::try_from(*i % 7).unwrap())
                })
                .collect();
            queue.enqueue_many(&jobs).unwrap();
        }
    }
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let running: Arc<HashMap<&'static str, (AtomicI64, AtomicI64)>> = Arc::new(
        plan.iter()
            .map(|(ep, _, _)| (*ep, (AtomicI64::new(0), AtomicI64::new(0))))
            .collect(),
    );
    let mut builder = Worker::builder(pool.clone()).threads(16).batch_size(10);
    for (ep, limit, _) in plan {
        let (seen, running) = (seen.clone(), running.clone());
        builder = builder.entrypoint(
            Entrypoint::new(ep).concurrency_limit(limit),
            move |job, _ctx| {
                let (now, max) = &running[ep];
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
                now.fetch_sub(1, Ordering::SeqCst);
                assert!(
                    seen.lock().unwrap().insert(job.id),
                    "job {} ran twice",
                    job.id
                );
                Ok(())
            },
        );
    }
    let worker = builder.build().unwrap();
    let started = Instant::now();
    let summary = worker.run_until_empty().unwrap();
    let total: usize = plan.iter().map(|p| p.2).sum();
    eprintln!("worker: {total} jobs in {:?}", started.elapsed());
    assert_eq!(summary.succeeded, total as u64);
    assert_eq!(seen.lock().unwrap().len(), total);
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ),
        i64::try_from(total).unwrap()
    );
    for (ep, limit, _) in plan {
        let max = running[ep].1.load(Ordering::SeqCst);
        eprintln!("worker: {ep} limit {limit} max running {max}");
        if limit > 0 {
            assert!(
                max <= i64::from(limit),
                "{ep}: {max} running > limit {limit}"
            );
        }
    }
    assert!(
        running["five"].1.load(Ordering::SeqCst) >= 2,
        "no overlap seen on the limit-5 entrypoint"
    );
}

/// Where slots are scarce (limit 1, two threads), a slot turns over in one commit: the
/// claim that takes the next job also ends the previous one, so many `successful` log
/// rows were written by the same transaction as a `picked` one, and the limit holds.
/// With `reuse_slots(false)` every end is written on its own first.
#[test]
fn a_scarce_slot_turns_over_in_one_commit_unless_slots_are_released() {
    for reuse in [true, false] {
        let db = TestDb::new();
        let pool = db.pool(4);
        let queue = Queue::new(pool.clone());
        let jobs: Vec<NewJob> = (0..60).map(|_| NewJob::new("one", Vec::new())).collect();
        queue.enqueue_many(&jobs).unwrap();
        let overlap = Overlap::default();
        let worker = {
            let overlap = overlap.clone();
            Worker::builder(pool)
                .threads(2)
                .reuse_slots(reuse)
                .entrypoint(
                    Entrypoint::new("one").concurrency_limit(1),
                    move |_job, _ctx| {
                        overlap.during(|| std::thread::sleep(Duration::from_millis(2)));
                        Ok(())
                    },
                )
                .build()
                .unwrap()
        };
        assert_eq!(worker.run_until_empty().unwrap().succeeded, 60);
        assert_eq!(overlap.peak(), 1);
        let mut client = db.client();
        let shared = scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log done WHERE done.status = 'successful' AND EXISTS \
             (SELECT 1 FROM pgqueuer_log pick WHERE pick.status = 'picked' AND pick.xmin = done.xmin)",
        );
        eprintln!("reuse_slots({reuse}): {shared} of 60 ends committed with a claim");
        if reuse {
            // Most of the 60 when idle; how many depends on whether the completer writes
            // an end before the next claim folds it in, which a busy machine's slow
            // wake-ups tilt. Ten still shows ends turning over in the claims' commits,
            // which never happens with reuse_slots(false).
            assert!(
                shared >= 10,
                "only {shared} of 60 ends were committed with a claim"
            );
        } else {
            assert_eq!(shared, 0, "an end was committed with a claim");
        }
    }
}

/// With default settings a claim takes a full batch of 10 (PgQueuer's batch size): the
/// default thread count matches it. Each claim writes its `picked` log rows in one
/// statement, so they share one `created` time.
#[test]
fn the_default_worker_claims_full_batches_of_ten() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| NewJob::new("batch", i.to_string().into_bytes()))
        .collect();
    queue.enqueue_many(&jobs).unwrap();
    let summary = Worker::builder(db.pool(6))
        .entrypoint("batch", |_j, _c| {
            std::thread::sleep(Duration::from_millis(20));
            Ok(())
        })
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    assert_eq!(summary.succeeded, 60);
    let mut client = db.client();
    let largest: i64 = scalar(
        &mut client,
        "SELECT max(n) FROM (SELECT count(*) AS n FROM pgqueuer_log
          WHERE status = 'picked' GROUP BY created) claims",
    );
    assert_eq!(largest, 10, "the largest claim took {largest} jobs");
}

/// A limit above the largest 32-bit integer (any `u32` is allowed) claims like any other
/// far from full: 200 jobs of an entrypoint limited to `u32::MAX`, claimed ten at a time
/// on two lanes, all run once, each picked with a slot below its limit.
#[test]
fn a_limit_beyond_32_bits_claims_and_slots_like_any_other() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(
            "CREATE TABLE slots_taken (id bigint, slot bigint);
             CREATE FUNCTION note_slot() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.status = 'picked' THEN
                     INSERT INTO slots_taken VALUES (NEW.id, NEW.slot);
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER note_slot AFTER UPDATE ON pgqueuer
                 FOR EACH ROW EXECUTE FUNCTION note_slot();",
        )
        .unwrap();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let jobs: Vec<NewJob> = (0..200)
        .map(|i| NewJob::new("wide", format!("{i}")))
        .collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    let ran = Arc::new(AtomicI64::new(0));
    let worker = {
        let ran = ran.clone();
        Worker::builder(pool.clone())
            .threads(4)
            .batch_size(10)
            .entrypoint(
                Entrypoint::new("wide").concurrency_limit(u32::MAX),
                move |_job, _ctx| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .build()
            .unwrap()
    };
    let stop = worker.shutdown_handle();
    let running = worker.start().unwrap();
    let started = Instant::now();
    while scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer") > 0
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.shutdown();
    running.join().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 200, "every job ran once");
    assert!(crate::faults::checks::unfinished(&mut client, &ids).is_empty());
    let (picks, slotted, max_slot): (i64, i64, Option<i64>) = {
        let row = client
            .query_one(
                "SELECT count(*), count(slot), max(slot) FROM slots_taken",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!((picks, slotted), (200, 200), "every pick took a slot");
    assert!(
        max_slot.is_some_and(|s| s < i64::from(u32::MAX)),
        "{max_slot:?}"
    );
}
