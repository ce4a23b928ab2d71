//! The worker runtime: exactly-once under limits, LISTEN-driven latency, heartbeats and
//! stale re-picks, cancellation, retries, hold, panics, reconnects and shutdown.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgqueuer::{
    Claimer, EntrypointOptions, Error, NewJob, OnFailure, Queue, Retry, RetryPolicy, Status, Worker,
};

use crate::harness::TestDb;
use crate::harness::{eventually, log_of, scalar};

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
        builder = builder.entrypoint_with(
            ep,
            EntrypointOptions::new().concurrency_limit(limit),
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
    assert_eq!(scalar(&mut client, "SELECT count(*) FROM pgqueuer"), 0);
    assert_eq!(
        scalar(
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
/// claim that takes the next job also ends the previous one, so most `successful` log
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
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let worker = {
            let (now, peak) = (now.clone(), peak.clone());
            Worker::builder(pool)
                .threads(2)
                .reuse_slots(reuse)
                .entrypoint_with(
                    "one",
                    EntrypointOptions::new().concurrency_limit(1),
                    move |_job, _ctx| {
                        peak.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(2));
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    },
                )
                .build()
                .unwrap()
        };
        assert_eq!(worker.run_until_empty().unwrap().succeeded, 60);
        assert_eq!(peak.load(Ordering::SeqCst), 1);
        let mut client = db.client();
        let shared = scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log done WHERE done.status = 'successful' AND EXISTS \
             (SELECT 1 FROM pgqueuer_log pick WHERE pick.status = 'picked' AND pick.xmin = done.xmin)",
        );
        eprintln!("reuse_slots({reuse}): {shared} of 60 ends committed with a claim");
        if reuse {
            assert!(
                shared >= 30,
                "only {shared} of 60 ends were committed with a claim"
            );
        } else {
            assert_eq!(shared, 0, "an end was committed with a claim");
        }
    }
}

/// A running worker with a 60 s dequeue timeout whose `entrypoint` handler sends the
/// instant it starts each job.
fn start_timing_worker(
    pool: &pgqueuer::Pool,
    threads: usize,
    entrypoint: &str,
) -> (
    pgqueuer::RunningWorker,
    crossbeam_channel::Receiver<Instant>,
) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let worker = Worker::builder(pool.clone())
        .threads(threads)
        .dequeue_timeout(Duration::from_secs(60))
        .entrypoint(entrypoint, move |_job, _ctx| {
            tx.send(Instant::now()).unwrap();
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    (worker, rx)
}

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

/// A job longer than the heartbeat timeout keeps its row while another worker polls for
/// stale jobs; a worker that stops heartbeating loses its job to one that runs it.
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
            .heartbeat_timeout(Duration::from_secs(1))
            .dequeue_timeout(Duration::from_millis(300))
            .entrypoint("long", move |_job, _ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(3_000));
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let thief = Claimer::builder()
        .entrypoint("long", 0)
        .heartbeat_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut conn = pool.get().unwrap();
    eventually(
        Duration::from_secs(5),
        "the worker to start the long job",
        || runs.load(Ordering::SeqCst) == 1,
    );
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2_500) {
        let claim = thief.claim(&mut conn, 1).unwrap();
        assert!(
            claim.jobs.is_empty(),
            "the long job was stolen despite heartbeats"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eventually(Duration::from_secs(5), "the long job to finish", || {
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
        Duration::from_secs(10),
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
                let until = Instant::now() + Duration::from_secs(10);
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
    assert_eq!(started_rx.recv_timeout(Duration::from_secs(5)).unwrap(), id);
    let sent = Instant::now();
    assert_eq!(queue.cancel(&[id]).unwrap(), [id]);
    eventually(
        Duration::from_secs(3),
        "the handler to see the cancellation",
        || saw_cancel.load(Ordering::SeqCst),
    );
    eprintln!("cancellation reached the handler in {:?}", sent.elapsed());
    let summary = worker.join().unwrap();
    assert_eq!(summary.cancelled, 1);
    assert_eq!(log_of(&mut client, id), ["queued", "picked", "canceled"]);
}

#[test]
fn retries_log_each_attempt_with_growing_delays_and_hold_keeps_failures() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let flaky = queue.enqueue(NewJob::new("flaky", Vec::new())).unwrap();
    let asked = queue.enqueue(NewJob::new("asks", Vec::new())).unwrap();
    let held = queue.enqueue(NewJob::new("broken", Vec::new())).unwrap();
    let fail_broken = Arc::new(AtomicBool::new(true));
    let worker = {
        let fail_broken = fail_broken.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .dequeue_timeout(Duration::from_millis(200))
            .entrypoint_with(
                "flaky",
                EntrypointOptions::new().retry(
                    RetryPolicy::exponential(5, Duration::from_millis(200), Duration::from_secs(5))
                        .jitter(0.0),
                ),
                |job, _ctx| {
                    if job.attempts < 2 {
                        return Err(format!("attempt {} fails", job.attempts).into());
                    }
                    Ok(())
                },
            )
            .entrypoint("asks", |job, _ctx| {
                if job.attempts == 0 {
                    return Err(Retry::after(Duration::from_millis(100))
                        .reason("not yet")
                        .into());
                }
                Ok(())
            })
            .entrypoint_with(
                "broken",
                EntrypointOptions::new().on_failure(OnFailure::Hold),
                move |_job, _ctx| {
                    if fail_broken.load(Ordering::SeqCst) {
                        Err(std::io::Error::other("disk on fire").into())
                    } else {
                        Ok(())
                    }
                },
            )
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    eventually(Duration::from_secs(10), "the flaky job to succeed", || {
        log_of(&mut client, flaky).last().map(String::as_str) == Some("successful")
    });
    assert_eq!(
        log_of(&mut client, flaky),
        [
            "queued",
            "picked",
            "queued",
            "picked",
            "queued",
            "picked",
            "successful"
        ]
    );
    // Delay between each retry's `queued` row and the next `picked`: 200 ms, then 400 ms.
    let gaps: Vec<f64> = client
        .query(
            "SELECT EXTRACT(EPOCH FROM created - LAG(created) OVER (ORDER BY id))::float8 AS gap, status::text \
             FROM pgqueuer_log WHERE job_id = $1 ORDER BY id",
            &[&flaky],
        )
        .unwrap()
        .iter()
        .filter(|r| r.get::<_, String>(1) == "picked")
        .filter_map(|r| r.get::<_, Option<f64>>(0))
        .collect();
    // The first `picked` follows the enqueue; the next two follow each retry.
    assert_eq!(gaps.len(), 3, "{gaps:?}");
    assert!(
        gaps[1] >= 0.19 && gaps[2] >= 0.39 && gaps[2] > gaps[1],
        "delays {gaps:?}"
    );
    let tb: serde_json::Value = client
        .query_one(
            "SELECT traceback FROM pgqueuer_log WHERE job_id = $1 AND status = 'queued' AND traceback IS NOT NULL ORDER BY id LIMIT 1",
            &[&flaky],
        )
        .unwrap()
        .get(0);
    for key in [
        "job_id",
        "timestamp",
        "exception_type",
        "exception_message",
        "traceback",
        "additional_context",
    ] {
        assert!(tb.get(key).is_some(), "traceback lacks {key}: {tb}");
    }
    assert_eq!(tb["additional_context"]["attempt"], 0);
    assert_eq!(tb["additional_context"]["retry_delay"], "0:00:00.200000");

    eventually(
        Duration::from_secs(10),
        "the job asking for a retry to succeed",
        || log_of(&mut client, asked).last().map(String::as_str) == Some("successful"),
    );
    assert_eq!(
        log_of(&mut client, asked),
        ["queued", "picked", "queued", "picked", "successful"]
    );

    eventually(Duration::from_secs(10), "the broken job to be held", || {
        log_of(&mut client, held).last().map(String::as_str) == Some("failed")
    });
    let row = client
        .query_one(
            "SELECT status::text, queue_manager_id IS NULL FROM pgqueuer WHERE id = $1",
            &[&held],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, bool>(1)),
        ("failed".to_owned(), true)
    );
    let tb: serde_json::Value = client
        .query_one(
            "SELECT traceback FROM pgqueuer_log WHERE job_id = $1 AND status = 'failed'",
            &[&held],
        )
        .unwrap()
        .get(0);
    assert_eq!(tb["exception_message"], "disk on fire");
    assert_eq!(tb["additional_context"]["entrypoint"], "broken");
    fail_broken.store(false, Ordering::SeqCst);
    assert_eq!(queue.requeue_failed(&[held]).unwrap(), [held]);
    eventually(
        Duration::from_secs(10),
        "the requeued job to succeed",
        || log_of(&mut client, held).last().map(String::as_str) == Some("successful"),
    );
    worker.join().unwrap();
}

#[test]
fn a_panicking_handler_is_an_exception_and_the_worker_goes_on() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let bomb = queue
        .enqueue(NewJob::new("work", b"boom".to_vec()).priority(10))
        .unwrap();
    let others = queue
        .enqueue_many(
            &(0..20)
                .map(|i| NewJob::new("work", vec![i]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let worker = Worker::builder(pool)
        .threads(1)
        .entrypoint("work", |job, _ctx| {
            if job.payload.as_deref() == Some(b"boom") {
                panic!("handler bug");
            }
            Ok(())
        })
        .build()
        .unwrap();
    let summary = worker.run_until_empty().unwrap();
    assert_eq!((summary.failed, summary.succeeded), (1, 20));
    assert_eq!(log_of(&mut client, bomb), ["queued", "picked", "exception"]);
    let tb: serde_json::Value = client
        .query_one(
            "SELECT traceback FROM pgqueuer_log WHERE job_id = $1 AND status = 'exception'",
            &[&bomb],
        )
        .unwrap()
        .get(0);
    assert_eq!(tb["exception_type"], "Panic");
    assert_eq!(tb["exception_message"], "handler bug");
    for id in others {
        assert_eq!(
            log_of(&mut client, id).last().map(String::as_str),
            Some("successful")
        );
    }
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
    let first = queue.enqueue(NewJob::new("job", Vec::new())).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), first);

    let killed = scalar(
        &mut admin,
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = '{}' AND query LIKE 'LISTEN%'",
            db.name
        ),
    );
    assert_eq!(killed, 1, "the listener's backend");
    std::thread::sleep(Duration::from_millis(500));
    let second = queue.enqueue(NewJob::new("job", Vec::new())).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        second,
        "after the listener was killed"
    );

    let killed = scalar(
        &mut admin,
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = '{}' AND pid <> pg_backend_pid() AND query NOT LIKE 'LISTEN%'",
            db.name
        ),
    );
    assert!(killed >= 2, "pool connections killed: {killed}");
    let third = queue.enqueue(NewJob::new("job", Vec::new())).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        third,
        "after pool connections were killed"
    );
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 3);
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM pgqueuer"), 0);
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
    let worker = {
        let started = started.clone();
        Worker::builder(pool.clone())
            .threads(4)
            .batch_size(1)
            .entrypoint("sleep", move |_job, _ctx| {
                started.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(800));
                Ok(())
            })
            .build()
            .unwrap()
    };
    let stop = worker.shutdown_handle();
    let running = worker.start().unwrap();
    eventually(Duration::from_secs(5), "four jobs to start", || {
        started.load(Ordering::SeqCst) == 4
    });
    let asked = Instant::now();
    stop.shutdown();
    let summary = running.wait().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        asked.elapsed()
    );
    assert_eq!(summary.succeeded, 4);
    assert_eq!(
        started.load(Ordering::SeqCst),
        4,
        "a job started after shutdown"
    );
    assert_eq!(
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
        ),
        0
    );
    assert_eq!(
        scalar(
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
    eventually(Duration::from_secs(5), "jobs to be picked", || {
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
        ) == 2
    });
    let asked = Instant::now();
    stop.shutdown();
    running.wait().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "deadline shutdown took {:?}",
        asked.elapsed()
    );
}

#[test]
fn a_worker_refuses_to_start_without_the_slot_index() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute("DROP INDEX pgqueuer_picked_slot_idx")
        .unwrap();
    let err = Worker::builder(db.pool(4))
        .threads(1)
        .entrypoint("x", |_j, _c| Ok(()))
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Schema { missing, .. } if missing == &["unique index pgqueuer_picked_slot_idx"]),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade"));
}

#[test]
fn bad_worker_options_are_rejected() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let ok = |_: &pgqueuer::Job, _: &pgqueuer::Context<'_>| -> pgqueuer::HandlerResult { Ok(()) };
    let cases: Vec<(&str, pgqueuer::WorkerBuilder)> = vec![
        ("entrypoints", Worker::builder(pool.clone())),
        (
            "threads",
            Worker::builder(pool.clone()).threads(0).entrypoint("a", ok),
        ),
        (
            "batch_size",
            Worker::builder(pool.clone())
                .threads(1)
                .batch_size(0)
                .entrypoint("a", ok),
        ),
        (
            "twice",
            Worker::builder(pool.clone())
                .threads(1)
                .entrypoint("a", ok)
                .entrypoint("a", ok),
        ),
        (
            "heartbeat_timeout",
            Worker::builder(pool.clone())
                .threads(1)
                .heartbeat_timeout(Duration::ZERO)
                .entrypoint("a", ok),
        ),
        (
            "pool",
            Worker::builder(db.pool(2)).threads(1).entrypoint("a", ok),
        ),
    ];
    for (needle, builder) in cases {
        let err = builder.build().unwrap_err();
        assert!(
            err.to_string().contains(needle),
            "expected {needle:?} in {err}"
        );
    }
    // Jobs of entrypoints the worker does not know are left alone.
    let queue = Queue::new(pool.clone());
    let foreign = queue
        .enqueue(NewJob::new("someone-else", Vec::new()))
        .unwrap();
    let worker = Worker::builder(pool)
        .threads(1)
        .entrypoint("a", ok)
        .build()
        .unwrap();
    worker.run_until_empty().unwrap();
    let statuses = queue.job_statuses(&[foreign]).unwrap();
    assert_eq!(statuses[&foreign], Status::Queued);
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

/// A program whose `main` returns `pgqueuer::Error` (examples/minimal_worker.rs), run
/// against a database without the capacity-slot column and index (PgQueuer 1.3.2's
/// schema): its stderr names the database and the missing objects and says to upgrade,
/// where the derived `Debug` printed only `Schema { missing: [...] }`.
#[test]
fn a_main_returning_the_error_tells_a_person_what_to_do() {
    let exe = crate::harness::program("example", "minimal_worker", &[]);
    let db = TestDb::empty();
    db.client()
        .batch_execute(&crate::harness::fixture("pgqueuer-1.3.2.sql"))
        .unwrap();
    let out = std::process::Command::new(exe)
        .env("PGQUEUER_DSN", db.dsn())
        .env("RUST_LOG", "off")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for text in [
        "Error: the PgQueuer schema in database",
        &db.name,
        "column pgqueuer.slot",
        "unique index pgqueuer_picked_slot_idx",
        "run pgqueuer::upgrade() or `pgq upgrade`",
        "(Error::Schema)",
    ] {
        assert!(stderr.contains(text), "stderr lacks {text:?}: {stderr}");
    }
    assert!(!stderr.contains("Schema {"), "{stderr}");
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

/// With logging off (no logger, or one whose level is off) a failing handler is still
/// reported on stderr, with its job id, entrypoint and cause; a successful one is quiet.
#[test]
fn a_failure_reaches_stderr_with_logging_off() {
    let exe = crate::harness::program("example", "minimal_worker", &[]);
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let bad = queue
        .enqueue(NewJob::new("hello", vec![0xff, 0xfe]))
        .unwrap();
    let good = queue
        .enqueue(NewJob::new("hello", b"world".to_vec()))
        .unwrap();
    let mut child = std::process::Command::new(exe)
        .env("PGQUEUER_DSN", db.dsn())
        .env("RUST_LOG", "off")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let statuses = queue.wait_for(&[bad, good], Duration::from_secs(30));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let statuses = statuses.unwrap();
    assert_eq!(statuses[&bad], Status::Exception);
    assert_eq!(statuses[&good], Status::Successful);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "pgqueuer: job {bad} (hello) failed: Error: the payload is not UTF-8 text"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("no logger is installed"), "{stderr}");
    assert!(!stderr.contains(&format!("job {good} ")), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello world"));
}
