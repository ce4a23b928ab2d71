//! What a hostile handler or an unlucky deploy must not do to a worker: lose a job at
//! shutdown, wedge the completer with an outcome PostgreSQL refuses, keep a job picked
//! for ever, panic a thread with a duration, or run a job twice inside one worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use pgqueuer::{Entrypoint, Error, JobId, NewJob, Pool, Queue, Retry, RetryPolicy, Worker};

use super::{Gate, claiming_ahead};
use crate::harness::{TestDb, captured, eventually, log_of, scalar, wait_listeners};

fn count(client: &mut postgres::Client, sql: &str) -> i64 {
    scalar::<i64>(client, sql)
}

/// A handler that loops until it is told to stop and then returns `Ok(())` gets
/// `successful` at the shutdown deadline, not `canceled` (which deleted the job: it never
/// ran again); one that returns a retry when it sees the shutdown runs again later.
#[test]
fn the_shutdown_deadline_keeps_the_outcome_a_handler_returns() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let done = queue.enqueue(NewJob::new("finishes", Vec::new())).unwrap();
    let again = queue.enqueue(NewJob::new("retries", Vec::new())).unwrap();
    let (started_tx, started_rx) = crossbeam_channel::unbounded();
    let (seen_tx, seen_rx) = crossbeam_channel::unbounded();
    let worker = {
        let (started_a, started_b) = (started_tx.clone(), started_tx);
        let seen = seen_tx.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .shutdown_deadline(Duration::from_millis(300))
            .entrypoint("finishes", move |job, ctx| {
                started_a.send(job.id).unwrap();
                while !ctx.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                seen.send((job.id, ctx.shutting_down())).unwrap();
                Ok(())
            })
            .entrypoint("retries", move |job, ctx| {
                started_b.send(job.id).unwrap();
                while !ctx.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                seen_tx.send((job.id, ctx.shutting_down())).unwrap();
                if ctx.shutting_down() {
                    return Err(Retry::after(Duration::ZERO).reason("shutdown").into());
                }
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let mut started = [
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
    ];
    started.sort_unstable();
    assert_eq!(started, [done, again]);
    let summary = worker.join().unwrap();
    let mut seen: Vec<_> = seen_rx.try_iter().collect();
    seen.sort_unstable();
    assert_eq!(seen, [(done, true), (again, true)], "both saw the shutdown");
    assert_eq!(
        (summary.succeeded, summary.cancelled, summary.retried),
        (1, 0, 1)
    );
    assert_eq!(
        log_of(&mut client, done),
        ["queued", "picked", "successful"]
    );
    assert_eq!(log_of(&mut client, again), ["queued", "picked", "queued"]);
    // The retried job is queued again and runs on the next worker.
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    Worker::builder(pool)
        .entrypoint("retries", move |_job, _ctx| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(
        log_of(&mut client, again),
        ["queued", "picked", "queued", "picked", "successful"]
    );
}

/// Jobs claimed ahead of the threads and not started when shutdown comes go back to the
/// queue at once (a `queued` log row, no attempt counted), while the running handler
/// still runs; they used to be logged `canceled` and deleted at the deadline.
#[test]
fn jobs_claimed_ahead_go_back_to_the_queue_at_shutdown() {
    // A fresh database and worker per attempt (see `claiming_ahead`).
    let (db, gate, worker, ids) = claiming_ahead(|| {
        let db = TestDb::new();
        let mut client = db.client();
        let pool = db.pool(6);
        let queue = Queue::new(pool.clone());
        let gate = Gate::new();
        let worker = {
            let blocked = gate.handler();
            Worker::builder(pool.clone())
                .threads(1)
                .batch_size(5)
                .shutdown_deadline(Duration::from_secs(60))
                .entrypoint("quick", |_job, _ctx| Ok(()))
                .entrypoint("blocked", blocked)
                .build()
                .unwrap()
                .start()
                .unwrap()
        };
        // Quick jobs first, so that handlers are known to be short and the worker claims
        // a batch ahead of its one thread.
        let warm: Vec<NewJob> = (0..50).map(|_| NewJob::new("quick", Vec::new())).collect();
        let warm = queue.enqueue_many(&warm).unwrap();
        eventually(Duration::from_secs(60), "the quick jobs", || {
            warm.iter()
                .all(|id| log_of(&mut client, *id).last().map(String::as_str) == Some("successful"))
        });
        let mut jobs = vec![NewJob::new("blocked", Vec::new()).priority(10)];
        jobs.extend((0..4).map(|_| NewJob::new("quick", Vec::new())));
        let ids = queue.enqueue_many(&jobs).unwrap();
        let blocked = gate.wait_started(1)[0];
        assert_eq!(blocked, ids[0]);
        // The claim ahead comes with the blocked job's or at once after it; 5 s is room
        // for a busy machine, and an attempt that waits in vain is only made again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if count(&mut client, PICKED_QUICK) == 4 {
                return Some((db, gate, worker, ids));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        gate.let_through(1);
        worker.join().unwrap();
        None
    });
    let mut client = db.client();
    let stop = worker.shutdown_handle();
    stop.shutdown();
    // While the blocked handler still runs, the jobs claimed ahead are queued again.
    eventually(
        Duration::from_secs(30),
        "the unstarted jobs to be released",
        || count(&mut client, PICKED_QUICK) == 0,
    );
    assert_eq!(
        log_of(&mut client, ids[0]),
        ["queued", "picked"],
        "the blocked job still runs"
    );
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'quick' AND status = 'queued' \
             AND queue_manager_id IS NULL AND attempts = 0"
        ),
        4,
        "released jobs are plain queued jobs again"
    );
    gate.let_through(1);
    let summary = worker.join().unwrap();
    assert_eq!(summary.released, 4);
    assert_eq!(summary.cancelled, 0);
    assert_eq!(
        log_of(&mut client, ids[0]),
        ["queued", "picked", "successful"]
    );
    let released = ids[1..]
        .iter()
        .filter(|id| log_of(&mut client, **id) == ["queued", "picked", "queued"])
        .count();
    assert_eq!(released, 4);
}

/// The quick jobs picked now.
const PICKED_QUICK: &str =
    "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'quick' AND status = 'picked'";

/// One handler error with a NUL byte (and a retry reason with one) among 100 normal jobs:
/// every job is written (within a minute even on a busy machine), the NUL kept visible as `\u0000` text. It used to
/// be refused by jsonb (22P05) and retried for ever, holding every job of its batch.
#[test]
fn a_nul_byte_in_a_handler_error_wedges_nothing() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let mut jobs: Vec<NewJob> = (0..100).map(|_| NewJob::new("ok", Vec::new())).collect();
    jobs.push(NewJob::new("nul", b"error".to_vec()));
    jobs.push(NewJob::new("nul", b"retry".to_vec()));
    let ids = queue.enqueue_many(&jobs).unwrap();
    let worker = Worker::builder(pool)
        .threads(4)
        .entrypoint("ok", |_job, _ctx| Ok(()))
        .entrypoint("nul", |job, _ctx| {
            if job.payload.as_deref() == Some(b"error") {
                Err("bad\0byte".into())
            } else if job.attempts == 0 {
                Err(Retry::after(Duration::ZERO).reason("again\0later").into())
            } else {
                Ok(())
            }
        })
        .build()
        .unwrap();
    let stats = worker.stats_handle();
    let started = Instant::now();
    let summary = worker.run_until_empty().unwrap();
    // Under a second when idle; a wedged completer retries for ever, so 60 s (room for
    // a busy machine) still tells the two apart.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (summary.succeeded, summary.failed, summary.retried),
        (101, 1, 1)
    );
    assert_eq!(stats.snapshot().outcome_write_failures, 0);
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 0);
    let message: String = client
        .query_one(
            "SELECT traceback->>'exception_message' FROM pgqueuer_log WHERE job_id = $1 \
             AND status = 'exception'",
            &[&ids[100]],
        )
        .unwrap()
        .get(0);
    assert_eq!(message, "bad\\u0000byte");
    let reason: String = client
        .query_one(
            "SELECT traceback->'additional_context'->>'reason' FROM pgqueuer_log \
             WHERE job_id = $1 AND status = 'queued' AND traceback IS NOT NULL",
            &[&ids[101]],
        )
        .unwrap()
        .get(0);
    assert_eq!(reason, "again\\u0000later");
}

/// An outcome the database refuses for any reason (here a trigger on the log table that
/// rejects one job's `successful` row) is split from its batch: every other outcome is
/// written, the refused job is recorded as an exception saying why, and the failure is
/// counted and logged at `error`.
#[test]
fn an_outcome_the_database_refuses_is_recorded_as_an_exception_and_the_rest_written() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let ids = queue
        .enqueue_many(
            &(0..50)
                .map(|_| NewJob::new("ok", Vec::new()))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let refused = ids[17];
    client
        .batch_execute(&format!(
            "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.job_id = {refused} AND NEW.status = 'successful' THEN
                     RAISE EXCEPTION 'job {refused} may not succeed' USING ERRCODE = '22023';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_one BEFORE INSERT ON pgqueuer_log
                 FOR EACH ROW EXECUTE FUNCTION refuse_one();"
        ))
        .unwrap();
    let worker = Worker::builder(pool)
        .threads(4)
        .entrypoint("ok", |_job, _ctx| Ok(()))
        .build()
        .unwrap();
    let stats = worker.stats_handle();
    worker.run_until_empty().unwrap();
    let snapshot = stats.snapshot();
    assert!(snapshot.outcome_write_failures >= 1);
    assert!(
        snapshot
            .last_write_failure
            .as_deref()
            .is_some_and(|e| e.contains("may not succeed")),
        "{:?}",
        snapshot.last_write_failure
    );
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 0);
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ),
        49
    );
    let (status, kind, message): (String, String, String) = {
        let row = client
            .query_one(
                "SELECT status::text, traceback->>'exception_type', \
                 traceback->>'exception_message' FROM pgqueuer_log \
                 WHERE job_id = $1 AND status <> 'queued' AND status <> 'picked'",
                &[&refused],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(
        (status.as_str(), kind.as_str()),
        ("exception", "OutcomeNotWritten")
    );
    assert!(message.contains("may not succeed"), "{message}");
    assert!(
        !captured(&format!("job {refused} was refused by the database")).is_empty(),
        "no error was logged for job {refused}"
    );
}

/// `Retry::after(Duration::MAX)` is recorded as the job's exception naming the delay; it
/// used to leave the job picked for ever (the completer retried a write that could
/// never fit an interval).
#[test]
fn a_retry_delay_too_long_to_store_is_the_jobs_exception() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let id = queue.enqueue(NewJob::new("forever", Vec::new())).unwrap();
    let started = Instant::now();
    let summary = Worker::builder(pool)
        .entrypoint("forever", |_job, _ctx| {
            Err(Retry::after(Duration::MAX).into())
        })
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    // A job left picked would keep run_until_empty waiting for ever; 60 s is room for a
    // busy machine.
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!((summary.failed, summary.retried), (1, 0));
    assert_eq!(log_of(&mut client, id), ["queued", "picked", "exception"]);
    let message: String = client
        .query_one(
            "SELECT traceback->>'exception_message' FROM pgqueuer_log WHERE job_id = $1 \
             AND status = 'exception'",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert!(
        message.contains("longer than the longest delay"),
        "{message}"
    );
}

/// Durations the worker's arithmetic cannot take are refused at `build()` with an error
/// naming the option; they used to pass and panic a worker thread (`Instant + Duration`).
#[test]
fn out_of_range_durations_are_refused_at_build() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let builder = || Worker::builder(pool.clone()).entrypoint("e", |_job, _ctx| Ok(()));
    let cases: Vec<(&str, pgqueuer::WorkerBuilder)> = vec![
        ("dequeue_timeout", builder().dequeue_timeout(Duration::MAX)),
        ("dequeue_timeout", builder().dequeue_timeout(Duration::ZERO)),
        (
            "heartbeat_timeout",
            builder().heartbeat_timeout(Duration::MAX),
        ),
        ("poll_interval", builder().poll_interval(Duration::MAX)),
        (
            "shutdown_deadline",
            builder().shutdown_deadline(Duration::MAX),
        ),
        ("threads", builder().threads(usize::MAX)),
        ("batch_size", builder().batch_size(usize::MAX)),
        (
            "timeout",
            builder().entrypoint(Entrypoint::new("t").timeout(Duration::MAX), |_job, _ctx| {
                Ok(())
            }),
        ),
        (
            "retry policy",
            builder().entrypoint(
                Entrypoint::new("r").retry(RetryPolicy::exponential(
                    3,
                    Duration::from_secs(1),
                    Duration::MAX,
                )),
                |_job, _ctx| Ok(()),
            ),
        ),
    ];
    for (option, builder) in cases {
        match builder.build() {
            Err(e @ Error::InvalidInput { .. }) => {
                assert!(e.to_string().contains(option), "{option}: {e}");
            }
            other => panic!("{option}: expected an InvalidInput error, got {other:?}"),
        }
    }
}

/// A two-thread worker, not yet started, whose `long` handler sends each job's id when it
/// starts, runs until cancelled (30 s at most), then sends the id and when it stopped.
fn cancellable_worker(pool: Pool) -> (Worker, Receiver<JobId>, Receiver<(JobId, Instant)>) {
    let (started_tx, started_rx) = crossbeam_channel::unbounded();
    let (stopped_tx, stopped_rx) = crossbeam_channel::unbounded();
    let worker = Worker::builder(pool)
        .threads(2)
        .entrypoint("long", move |job, ctx| {
            started_tx.send(job.id).unwrap();
            let until = Instant::now() + Duration::from_secs(30);
            while !ctx.is_cancelled() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            stopped_tx.send((job.id, Instant::now())).unwrap();
            Ok(())
        })
        .build()
        .unwrap();
    (worker, started_rx, stopped_rx)
}

/// A `cancellation_event` that any role can send does not stop a handler whose job's row
/// still exists and is this worker's; a real `cancel` (which deletes the row) does.
#[test]
fn a_forged_cancellation_event_stops_nothing() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let (worker, started_rx, stopped_rx) = cancellable_worker(pool);
    let worker = worker.start().unwrap();
    let id = queue.enqueue(NewJob::new("long", Vec::new())).unwrap();
    assert_eq!(
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        id
    );
    // The event must reach a listener that is already listening.
    wait_listeners(&mut client, &db.name, 1, &[], Duration::from_secs(10));
    let forged = format!(
        r#"{{"channel":"ch_pgqueuer","sent_at":"2026-12-03T00:00:00Z","type":"cancellation_event","received_at":"2026-12-03T00:00:00Z","ids":[{id}]}}"#
    );
    client
        .execute("SELECT pg_notify('ch_pgqueuer', $1)", &[&forged])
        .unwrap();
    let warning = format!("ignored a cancellation_event for job {id}:");
    eventually(
        Duration::from_secs(10),
        "the listener to dismiss the event",
        || !captured(&warning).is_empty(),
    );
    assert!(
        stopped_rx.try_recv().is_err(),
        "the forged event stopped the handler"
    );
    let cancelled = Instant::now();
    queue.cancel(&[id]).unwrap();
    let (stopped, at) = stopped_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(stopped, id);
    assert!(at >= cancelled);
    let summary = worker.join().unwrap();
    assert_eq!(summary.cancelled, 1);
}

/// A worker's own wake channel (`pgqueuer_rs_wake_<id>`, on which its completer ends the
/// listener's wait at a stop) is open to any role: a flood on it, at the largest payload
/// a NOTIFY takes and with none, stops nothing and costs the listener its connection
/// nothing. The same listener then still delivers a real cancellation to the running
/// handler, and the worker stops as usual.
#[test]
fn a_flood_on_the_wake_channel_stops_nothing() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let (worker, started_rx, stopped_rx) = cancellable_worker(pool);
    let channel = format!("pgqueuer_rs_wake_{}", worker.id().simple());
    let worker = worker.start().unwrap();
    let id = queue.enqueue(NewJob::new("long", Vec::new())).unwrap();
    assert_eq!(
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        id
    );
    let listener = wait_listeners(&mut client, &db.name, 1, &[], Duration::from_secs(10));
    // 7,999 bytes is the most a NOTIFY payload may carry.
    client
        .execute(
            "SELECT pg_notify($1, CASE WHEN i % 2 = 0 THEN repeat('\\u0000', 1333) || 'x' ELSE '' END) \
             FROM generate_series(1, 300) AS i",
            &[&channel],
        )
        .unwrap();
    assert!(
        stopped_rx.try_recv().is_err(),
        "the flood stopped the handler"
    );
    queue.cancel(&[id]).unwrap();
    assert_eq!(
        stopped_rx.recv_timeout(Duration::from_secs(30)).unwrap().0,
        id,
        "the cancellation never reached the handler past the flood"
    );
    assert_eq!(
        wait_listeners(&mut client, &db.name, 1, &[], Duration::from_secs(10)),
        listener,
        "the listener reconnected"
    );
    let summary = worker.join().unwrap();
    assert_eq!(summary.cancelled, 1);
}

/// A job this worker runs whose heartbeat lagged past the timeout comes back from the
/// worker's own next claim as a stale re-pick: it is left to the run under way instead
/// of running a second time beside it.
#[test]
fn a_stale_re_pick_of_a_running_job_does_not_run_it_twice() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let gate = Gate::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = {
        let handler = gate.handler();
        let runs = runs.clone();
        Worker::builder(pool.clone())
            .threads(3)
            .heartbeat_timeout(Duration::from_secs(600))
            .entrypoint("held", move |job, ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                handler(job, ctx)
            })
            .entrypoint("poke", |_job, _ctx| Ok(()))
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let id = queue.enqueue(NewJob::new("held", Vec::new())).unwrap();
    assert_eq!(gate.wait_started(1), [id]);
    // The heartbeat lags: the row looks stale to the worker's own next claim.
    client
        .execute(
            "UPDATE pgqueuer SET heartbeat = now() - interval '1 hour' WHERE id = $1",
            &[&id],
        )
        .unwrap();
    let poke = queue.enqueue(NewJob::new("poke", Vec::new())).unwrap();
    let warning = format!("job {id} (held) was re-picked as stale");
    // The lanes look for stale jobs every 5 s at most (`worker::floors`).
    eventually(
        Duration::from_secs(20),
        "the stale re-pick of the running job",
        || !captured(&warning).is_empty(),
    );
    eventually(Duration::from_secs(10), "the poke job", || {
        log_of(&mut client, poke).last().map(String::as_str) == Some("successful")
    });
    gate.let_through(2);
    worker.join().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the held job ran twice");
    assert_eq!(
        log_of(&mut client, id),
        ["queued", "picked", "picked", "successful"]
    );
}

/// Durations as callers pass them: zero, small, huge, and `Duration::MAX`.
fn any_duration() -> impl proptest::strategy::Strategy<Value = Duration> {
    use proptest::prelude::*;
    prop_oneof![
        1 => Just(Duration::ZERO),
        40 => (1u64..3_000).prop_map(Duration::from_millis),
        1 => (0u64..100_000_000).prop_map(Duration::from_secs),
        1 => any::<u64>().prop_map(Duration::from_secs),
        // Past the year 9999 from now, where Python's datetime cannot read it.
        1 => Just(Duration::from_secs(9_000 * 31_557_600)),
        1 => Just(Duration::MAX),
    ]
}

/// Counts as callers pass them: zero, small, the bounds and beyond, anything.
fn any_count() -> impl proptest::strategy::Strategy<Value = usize> {
    use proptest::prelude::*;
    prop_oneof![
        1 => Just(0usize),
        40 => 1usize..6,
        1 => Just(4096),
        1 => Just(10_000),
        1 => Just(10_001),
        1 => any::<usize>()
    ]
}

/// Every worker option given arbitrary values: `build()` either accepts them and the
/// worker then runs a job to an outcome, or refuses them with an `InvalidInput` naming
/// an option that is out of its documented range. Nothing panics.
#[test]
fn arbitrary_worker_options_are_refused_by_name_or_work() {
    use proptest::prelude::*;
    let db = TestDb::new();
    let client = std::cell::RefCell::new(db.client());
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let day = Duration::from_secs(86_400);
    let ms = Duration::from_millis(1);
    let options = (
        (any_count(), any_count()),
        (any_duration(), any_duration(), any_duration()),
        (
            proptest::option::of(any_duration()),
            proptest::option::of(any_duration()),
        ),
        proptest::option::of((any::<u32>(), any_duration(), any_duration(), any::<f64>())),
    );
    let accepted = std::cell::Cell::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 60,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &options,
            |((threads, batch), (dequeue, heartbeat, poll), (deadline, timeout), policy)| {
                let mut entry = Entrypoint::new("e");
                if let Some(timeout) = timeout {
                    entry = entry.timeout(timeout);
                }
                if let Some((attempts, initial, max, multiplier)) = policy {
                    entry = entry.retry(RetryPolicy {
                        max_attempts: attempts % 4,
                        initial_delay: initial,
                        max_delay: max,
                        multiplier,
                        jitter: 0.1,
                    });
                }
                let mut builder = Worker::builder(pool.clone())
                    .threads(threads)
                    .batch_size(batch)
                    .dequeue_timeout(dequeue)
                    .heartbeat_timeout(heartbeat)
                    .poll_interval(poll)
                    .entrypoint(entry, |_job, _ctx| Ok(()));
                if let Some(deadline) = deadline {
                    builder = builder.shutdown_deadline(deadline);
                }
                // What the documentation allows.
                let mut out_of_range = Vec::new();
                if !(1..=4096).contains(&threads) {
                    out_of_range.push("threads");
                }
                if !(1..=10_000).contains(&batch) {
                    out_of_range.push("batch_size");
                }
                for (name, value, max) in [
                    ("dequeue_timeout", dequeue, day),
                    ("heartbeat_timeout", heartbeat, 7 * day),
                    ("poll_interval", poll, day),
                ] {
                    if value < ms || value > max {
                        out_of_range.push(name);
                    }
                }
                if deadline.is_some_and(|d| d > 365 * day) {
                    out_of_range.push("shutdown_deadline");
                }
                if timeout.is_some_and(|t| t < ms || t > 365 * day) {
                    out_of_range.push("timeout");
                }
                if let Some((_, initial, max, multiplier)) = policy
                    && (initial > max
                        || max > pgqueuer::NewJob::MAX_EXECUTE_AFTER
                        || !(multiplier >= 1.0 && multiplier.is_finite()))
                {
                    out_of_range.push("retry policy");
                }
                match builder.build() {
                    Ok(worker) => {
                        prop_assert!(out_of_range.is_empty(), "accepted {out_of_range:?}");
                        accepted.set(accepted.get() + 1);
                        let id = queue.enqueue(NewJob::new("e", Vec::new())).unwrap();
                        let running = worker.start().unwrap();
                        eventually(Duration::from_secs(20), "the job's outcome", || {
                            log_of(&mut client.borrow_mut(), id).len() > 2
                        });
                        running.join().unwrap();
                        client
                            .borrow_mut()
                            .execute("DELETE FROM pgqueuer", &[])
                            .unwrap();
                    }
                    Err(Error::InvalidInput { field, reason }) => {
                        prop_assert!(
                            out_of_range.iter().any(|o| field.contains(o)),
                            "refused {field}: {reason}, but only {out_of_range:?} are out of range"
                        );
                    }
                    Err(other) => prop_assert!(false, "{other:?}"),
                }
                Ok(())
            },
        )
        .unwrap();
    eprintln!("{} of 60 option sets accepted", accepted.get());
    assert!(
        accepted.get() >= 3,
        "too few option sets were accepted to prove anything"
    );
}

/// Every field of a job given arbitrary values: `enqueue` either stores the job (and
/// its due time stays within Python's `datetime`, which ends with the year 9999) or
/// refuses it with an `InvalidInput` naming the field, writing nothing.
#[test]
fn arbitrary_jobs_are_stored_or_refused_by_name() {
    use proptest::prelude::*;
    let db = TestDb::new();
    let client = std::cell::RefCell::new(db.client());
    let queue = Queue::new(db.pool(2));
    let text = || {
        prop_oneof![
            Just("e".to_owned()),
            "\\PC{0,12}",
            "[a-z]{0,3}\\x00[a-z]{0,3}",
            "[a-z]{1100,1200}",
        ]
    };
    let job = (
        text(),
        any::<i32>(),
        any_duration(),
        proptest::option::of(text()),
        proptest::option::of((text(), text())),
        proptest::collection::vec(any::<u8>(), 0..64),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&job, |(entrypoint, priority, delay, key, header, payload)| {
            let mut job = NewJob::new(&entrypoint, payload.clone())
                .priority(priority)
                .execute_after(delay);
            if let Some(key) = &key {
                job = job.dedupe_key(key.clone());
            }
            if let Some((name, value)) = &header {
                job = job.header(name.clone(), value.clone());
            }
            let before = count(&mut client.borrow_mut(), "SELECT count(*) FROM pgqueuer");
            match queue.enqueue(job) {
                Ok(id) => {
                    let row = client
                        .borrow_mut()
                        .query_one(
                            "SELECT entrypoint, priority, payload, \
                             extract(year FROM execute_after)::int AS year FROM pgqueuer WHERE id = $1",
                            &[&id],
                        )
                        .unwrap();
                    prop_assert_eq!(row.get::<_, String>(0), entrypoint);
                    prop_assert_eq!(row.get::<_, i32>(1), priority);
                    prop_assert_eq!(row.get::<_, Option<Vec<u8>>>(2).unwrap_or_default(), payload);
                    prop_assert!(row.get::<_, i32>(3) <= 9999);
                    client.borrow_mut().execute("DELETE FROM pgqueuer", &[]).unwrap();
                }
                Err(Error::InvalidInput { field, .. }) => {
                    prop_assert!(
                        ["entrypoint", "dedupe_key", "execute_after", "headers", "payload"]
                            .iter()
                            .any(|f| field.contains(f)),
                        "{field}"
                    );
                    prop_assert_eq!(count(&mut client.borrow_mut(), "SELECT count(*) FROM pgqueuer"), before);
                }
                Err(Error::DuplicateJob { .. }) => {}
                Err(other) => prop_assert!(false, "{other:?}"),
            }
            Ok(())
        })
        .unwrap();
}

/// A held job's row that another session keeps locked (`SELECT ... FOR UPDATE` in an
/// open transaction) holds up nothing else: the other held job's heartbeat stays fresh
/// and its outcome is written at once, while the locked job's outcome waits for the
/// lock and is written after it. The heartbeat and the completer used to retry the
/// locked row for up to 30 s, and every other job waited behind it.
#[test]
fn a_row_locked_by_another_session_holds_up_no_other_job() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let (a_gate, b_gate) = (Gate::new(), Gate::new());
    let worker = Worker::builder(pool)
        .threads(2)
        .heartbeat_timeout(Duration::from_secs(2))
        .entrypoint("locked_a", a_gate.handler())
        .entrypoint("locked_b", b_gate.handler())
        .build()
        .unwrap();
    let stats = worker.stats_handle();
    let worker = worker.start().unwrap();
    let a = queue.enqueue(NewJob::new("locked_a", Vec::new())).unwrap();
    let b = queue.enqueue(NewJob::new("locked_b", Vec::new())).unwrap();
    a_gate.wait_started(1);
    b_gate.wait_started(1);
    let mut locker = db.client();
    let mut lock = locker.transaction().unwrap();
    lock.execute("SELECT 1 FROM pgqueuer WHERE id = $1 FOR UPDATE", &[&a])
        .unwrap();
    // A ends first: its outcome meets the lock.
    a_gate.let_through(1);
    let heartbeat_age = |client: &mut postgres::Client, id: i64| -> f64 {
        client
            .query_one(
                "SELECT extract(epoch FROM now() - heartbeat)::float8 FROM pgqueuer WHERE id = $1",
                &[&id],
            )
            .unwrap()
            .get(0)
    };
    // Three beats of B while A's row stays locked (beats every second).
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let age = heartbeat_age(&mut client, b);
    assert!(
        age < 2.0,
        "B's heartbeat is {age:.1} s old behind A's locked row"
    );
    b_gate.let_through(1);
    eventually(
        Duration::from_secs(10),
        "B's outcome while A's row is locked",
        || log_of(&mut client, b).last().map(String::as_str) == Some("successful"),
    );
    assert_eq!(
        log_of(&mut client, a).last().map(String::as_str),
        Some("picked"),
        "A's outcome cannot be written while its row is locked"
    );
    assert!(
        stats.snapshot().outcome_lock_waits >= 1,
        "the completer's pauses for A's locked row are counted"
    );
    lock.rollback().unwrap();
    eventually(
        Duration::from_secs(10),
        "A's outcome once the lock is gone",
        || log_of(&mut client, a).last().map(String::as_str) == Some("successful"),
    );
    worker.join().unwrap();
}

/// The completer pauses before its next round only for rows another session keeps
/// locked. It used to pause (10 ms) whenever outcomes had arrived during its write, which
/// a busy worker's completer does after nearly every round: finished jobs held their rows
/// (and slots) that much longer, and its backlog stalled the claims. A drain where
/// nothing else locks a row makes no pause at all.
#[test]
fn outcomes_arriving_during_a_write_are_written_without_a_pause() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let jobs: Vec<NewJob> = (0..3_000)
        .map(|_| NewJob::new("short", Vec::new()))
        .collect();
    queue.enqueue_many(&jobs).unwrap();
    let worker = Worker::builder(pool)
        .threads(8)
        .batch_size(50)
        .entrypoint("short", |_job, _ctx| Ok(()))
        .build()
        .unwrap();
    let stats = worker.stats_handle();
    let summary = worker.run_until_empty().unwrap();
    assert_eq!(summary.succeeded, 3_000);
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 0);
    let snapshot = stats.snapshot();
    assert_eq!(
        snapshot.outcome_lock_waits, 0,
        "no row was locked by another session, yet the completer paused"
    );
    assert_eq!(snapshot.outcome_write_failures, 0);
}
