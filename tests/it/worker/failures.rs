//! Failing handlers: retries, hold, panics, and failures reported without a logger.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::{Entrypoint, NewJob, OnFailure, Queue, Retry, RetryPolicy, Status, Worker};

use crate::harness::{TestDb, eventually, log_of, scalar};

/// A worker of two threads (200 ms dequeue timeout) with the one entrypoint `add`
/// configures, started.
fn start_worker(
    pool: &pgqueuer::Pool,
    add: impl FnOnce(pgqueuer::WorkerBuilder) -> pgqueuer::WorkerBuilder,
) -> pgqueuer::RunningWorker {
    add(Worker::builder(pool.clone())
        .threads(2)
        .dequeue_timeout(Duration::from_millis(200)))
    .build()
    .unwrap()
    .start()
    .unwrap()
}

/// A handler failing under an exponential retry policy (200 ms base, no jitter) is
/// retried with a `queued` log row per attempt, 200 ms and then 400 ms later, each
/// failure recorded with PgQueuer's six-key traceback, until it succeeds.
#[test]
fn retries_log_each_attempt_with_growing_delays() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let flaky = queue.enqueue(NewJob::new("flaky", Vec::new())).unwrap();
    let worker = start_worker(&pool, |builder| {
        builder.entrypoint(
            Entrypoint::new("flaky").retry(
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
    });
    eventually(Duration::from_secs(30), "the flaky job to succeed", || {
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
    // Lower bounds only (a busy machine delays re-picks, never hastens them): the second
    // is at least 400 ms, so the delay grew.
    assert!(gaps[1] >= 0.19 && gaps[2] >= 0.39, "delays {gaps:?}");
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
    worker.join().unwrap();
}

/// A handler returning `Retry::after` is retried after that delay, with one more
/// `queued` and `picked` log row, and then succeeds.
#[test]
fn a_handler_asking_for_a_retry_runs_again() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let asked = queue.enqueue(NewJob::new("asks", Vec::new())).unwrap();
    let worker = start_worker(&pool, |builder| {
        builder.entrypoint("asks", |job, _ctx| {
            if job.attempts == 0 {
                return Err(Retry::after(Duration::from_millis(100))
                    .reason("not yet")
                    .into());
            }
            Ok(())
        })
    });
    eventually(
        Duration::from_secs(10),
        "the job asking for a retry to succeed",
        || log_of(&mut client, asked).last().map(String::as_str) == Some("successful"),
    );
    assert_eq!(
        log_of(&mut client, asked),
        ["queued", "picked", "queued", "picked", "successful"]
    );
    worker.join().unwrap();
}

/// A drain whose last job asks for a retry waits for it: while the job runs nothing is
/// queued (the drain waits for its write), then the retry is queued, deferred 200 ms, and
/// `run_until_empty` returns only once it has run again and succeeded, every other job
/// having run once.
#[test]
fn a_drain_waits_for_the_retry_its_last_job_asks_for() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let quick = queue
        .enqueue_many(
            &(0..20)
                .map(|_| NewJob::new("drained", Vec::new()))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    // Lowest priority: claimed with the others or after them, never before.
    let last = queue
        .enqueue(NewJob::new("drained", Vec::new()).priority(-1))
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let summary = Worker::builder(pool.clone())
        .threads(4)
        .entrypoint("drained", move |job, _ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            if job.id == last && job.attempts == 0 {
                // Long enough for the drain to find nothing queued while it runs.
                std::thread::sleep(Duration::from_millis(50));
                return Err(Retry::after(Duration::from_millis(200)).into());
            }
            Ok(())
        })
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    assert_eq!(
        log_of(&mut client, last),
        ["queued", "picked", "queued", "picked", "successful"]
    );
    assert_eq!(runs.load(Ordering::SeqCst), quick.len() + 2);
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT COUNT(*) FROM pgqueuer"),
        0
    );
    assert_eq!((summary.succeeded, summary.retried), (21, 1), "{summary:?}");
}

/// A retry wakes its own worker's dispatcher: an UPDATE sends no notification, so a
/// worker idle in a long quiet spell (60 s dequeue timeout, nothing else queued) would
/// otherwise leave its retried job queued and due until the spell ends. The handler
/// fails only once the dispatcher has looked for the next due job and found none (its
/// last statement, idle on its connection), so the retry comes in the middle of the
/// spell; the job must run again within seconds. (It also caught a stall at start: the
/// second lane's first sweep, claiming before the primary lane, held the room of both
/// threads for a moment, and the primary lane, finding none, waited for a job to end; it
/// never looked for the next due job, in most runs.)
#[test]
fn a_retry_ends_the_quiet_spell_of_an_idle_worker() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let flaky = queue.enqueue(NewJob::new("flaky", Vec::new())).unwrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<i32>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let worker = start_worker(&pool, |builder| {
        // A quiet spell far longer than the test waits, in place of the usual 200 ms.
        builder.dequeue_timeout(Duration::from_secs(60)).entrypoint(
            Entrypoint::new("flaky").retry(
                RetryPolicy::exponential(3, Duration::from_millis(10), Duration::from_millis(10))
                    .jitter(0.0),
            ),
            move |job, _ctx| {
                started_tx.send(job.attempts).unwrap();
                if job.attempts == 0 {
                    // Bounded, so that a failing assertion below (which drops the
                    // worker, and so joins it, before `go_tx`) cannot wait for ever.
                    let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(90));
                    return Err("first run fails".into());
                }
                Ok(())
            },
        )
    });
    let first = started_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(first, 0);
    eventually(
        Duration::from_secs(30),
        "the dispatcher to look for the next due job while the first run holds it",
        || {
            scalar::<i64>(
                &mut client,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND state = 'idle' AND query LIKE '%queued_us%'",
            ) >= 1
        },
    );
    let failed_at = Instant::now();
    go_tx.send(()).unwrap();
    let again = started_rx
        .recv_timeout(Duration::from_secs(15))
        .unwrap_or_else(|_| {
            panic!(
                "the retried job did not run again within 15 s of its failure (log: {:?})",
                log_of(&mut client, flaky)
            )
        });
    assert_eq!(again, 1);
    eprintln!("ran again {:?} after the failure", failed_at.elapsed());
    eventually(Duration::from_secs(10), "the retry to succeed", || {
        log_of(&mut client, flaky).last().map(String::as_str) == Some("successful")
    });
    worker.join().unwrap();
}

/// With `OnFailure::Hold` a failing job stays in the queue table as `failed`, owned by
/// no worker, its traceback logged; requeued, it runs again and succeeds.
#[test]
fn hold_keeps_a_failed_job_until_it_is_requeued() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let held = queue.enqueue(NewJob::new("broken", Vec::new())).unwrap();
    let fail_broken = Arc::new(AtomicBool::new(true));
    let worker = {
        let fail_broken = fail_broken.clone();
        start_worker(&pool, move |builder| {
            builder.entrypoint(
                Entrypoint::new("broken").on_failure(OnFailure::Hold),
                move |_job, _ctx| {
                    if fail_broken.load(Ordering::SeqCst) {
                        Err(std::io::Error::other("disk on fire").into())
                    } else {
                        Ok(())
                    }
                },
            )
        })
    };
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

/// A panicking handler's job ends as `exception` with a `Panic` traceback, and the same
/// worker thread runs every other job.
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

/// A drain that looks at the queue while a job runs, and sees it `picked`, does not stop
/// when that job's retry is written before the look returns: the worker held the job
/// when the look began. To make the look slow enough to land the retry inside it, the
/// index the look walks carries 300,000 entries of deleted rows that an open snapshot
/// elsewhere keeps from being cleaned up, and the handler returns only once it sees the
/// look running (`pg_stat_activity`; the look then takes about 25 ms, the retry's write a
/// few). Before the fix the drain returned with the retried job queued, six runs of six
/// (three of five with 150,000 entries).
#[test]
fn a_drain_does_not_stop_on_a_look_at_the_queue_that_a_retry_outdated() {
    let db = TestDb::new();
    let mut client = db.client();
    // An old snapshot: the rows deleted below stay visible to it, so the index entries
    // of the queued rows stay for every scan to walk.
    let mut holder = db.client();
    let mut snapshot = holder
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .start()
        .unwrap();
    snapshot.query_one("SELECT 1", &[]).unwrap();
    client
        .batch_execute(
            "INSERT INTO pgqueuer (priority, entrypoint, status, payload) \
             SELECT 10, 'drained', 'queued', NULL FROM generate_series(1, 300000); \
             DELETE FROM pgqueuer;",
        )
        .unwrap();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let retried = queue.enqueue(NewJob::new("drained", Vec::new())).unwrap();
    let dsn = db.dsn();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let saw_look = Arc::new(AtomicBool::new(false));
    let seen = saw_look.clone();
    let summary = Worker::builder(pool.clone())
        .threads(4)
        .entrypoint("drained", move |job, _ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            if job.attempts > 0 {
                return Ok(());
            }
            let mut watcher = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                let looking: i64 = watcher
                    .query_one(
                        "SELECT COUNT(*) FROM pg_stat_activity WHERE state = 'active' \
                         AND query LIKE '%AS any_queued%' AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                if looking > 0 {
                    seen.store(true, Ordering::SeqCst);
                    break;
                }
            }
            Err(Retry::after(Duration::ZERO).into())
        })
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    snapshot.rollback().unwrap();
    assert!(
        saw_look.load(Ordering::SeqCst),
        "the drain never looked at the queue while the job ran: the test did not reach \
         the window it is about"
    );
    assert_eq!(
        log_of(&mut client, retried),
        ["queued", "picked", "queued", "picked", "successful"]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT COUNT(*) FROM pgqueuer"),
        0
    );
    assert_eq!((summary.succeeded, summary.retried), (1, 1), "{summary:?}");
}
