//! When idle threads wake: a claimed batch, a NOTIFY, a deferred job's due time.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use pgqueuer::{NewJob, Queue, Worker};

use super::{Overlap, start_timing_worker};
use crate::harness::{TestDb, eventually, listener_pids};

/// A batch claimed at once starts on every idle thread at once: the jobs one thread claims
/// for the others do not wait for it to come back from its own, nor for a poll. Eight
/// jobs, enqueued in one statement to an idle worker of eight threads (60 s dequeue
/// timeout), are claimed by one statement and all eight run at once.
#[test]
fn a_claimed_batch_starts_on_every_idle_thread_at_once() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(4);
    let overlap = Overlap::default();
    let (started_tx, started_rx) = crossbeam_channel::unbounded();
    let (open_tx, open_rx) = crossbeam_channel::unbounded::<()>();
    let worker = {
        let overlap = overlap.clone();
        Worker::builder(pool.clone())
            .threads(8)
            .batch_size(8)
            .dequeue_timeout(Duration::from_secs(60))
            .entrypoint("slow", move |_job, _ctx| {
                overlap.during(|| {
                    started_tx.send(()).unwrap();
                    // Held until the test has seen all eight start (a job waiting for
                    // another to end would never start: the test fails first).
                    open_rx
                        .recv_timeout(Duration::from_secs(60))
                        .map_err(|_| "the test never let the job end")
                })?;
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    // Idle: the first claim (which found nothing) is done and the listener is listening.
    eventually(Duration::from_secs(30), "an idle, listening worker", || {
        worker.stats().claims >= 1 && !listener_pids(&mut client, &db.name).is_empty()
    });
    let jobs: Vec<NewJob> = (0..8).map(|_| NewJob::new("slow", Vec::new())).collect();
    Queue::new(pool).enqueue_many(&jobs).unwrap();
    // 30 s, half the dequeue timeout: starts that waited for a poll would come too late,
    // and no other timing is at stake (every job is held until all eight ran).
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in 0..8 {
        started_rx
            .recv_deadline(deadline)
            .unwrap_or_else(|_| panic!("only {n} of 8 jobs started at once"));
    }
    // One claim took all eight: a statement's NOW() is the same for every row it updates.
    let (picked, claims): (i64, i64) = {
        let row = client
            .query_one(
                "SELECT count(*), count(DISTINCT updated) FROM pgqueuer WHERE status = 'picked'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    eprintln!("8 jobs running at once, {picked} picked rows from {claims} claims");
    assert_eq!(
        (picked, claims),
        (8, 1),
        "the batch was not claimed at once"
    );
    for _ in 0..8 {
        open_tx.send(()).unwrap();
    }
    assert_eq!(worker.join().unwrap().succeeded, 8);
    assert_eq!(overlap.peak(), 8, "not every job overlapped");
}

/// An idle worker with a 60 s dequeue timeout starts each new job within 10 s: the
/// wake-up comes from LISTEN/NOTIFY, not from polling.
#[test]
fn an_idle_worker_is_woken_by_notify() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(4);
    let (worker, rx) = start_timing_worker(&pool, 2, "ping");
    // Idle: the first claim (which found nothing) is done and the listener is listening.
    eventually(Duration::from_secs(30), "an idle, listening worker", || {
        worker.stats().claims >= 1 && !listener_pids(&mut client, &db.name).is_empty()
    });
    let queue = Queue::new(pool);
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let sent = Instant::now();
        queue.enqueue(NewJob::new("ping", Vec::new())).unwrap();
        let started = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the job never started");
        latencies.push(started - sent);
    }
    latencies.sort();
    eprintln!("enqueue-to-start latencies: {latencies:?}");
    // Milliseconds when idle; 10 s leaves room for a busy machine and is still far
    // below the 60 s poll that would start a job a NOTIFY did not.
    assert!(latencies[4] < Duration::from_secs(10), "{latencies:?}");
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 5);
}

/// An idle thread's wait is cut short at the next deferred job's due time: with a 60 s
/// dequeue timeout, a job due in 1.5 s starts then, although nothing notifies then.
#[test]
fn a_deferred_job_starts_when_due_without_polling() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let (worker, rx) = start_timing_worker(&pool, 1, "later");
    eventually(Duration::from_secs(30), "the worker's first claim", || {
        worker.stats().claims >= 1
    });
    let sent = Instant::now();
    Queue::new(pool)
        .enqueue(NewJob::new("later", Vec::new()).execute_after(Duration::from_millis(1_500)))
        .unwrap();
    let started = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the deferred job never ran");
    let waited = started - sent;
    eprintln!("deferred job started after {waited:?}");
    assert!(
        waited >= Duration::from_millis(1_450),
        "started early: {waited:?}"
    );
    // Due at 1.5 s; 10 s more for a busy machine is still far below the 60 s poll.
    assert!(
        waited < Duration::from_millis(11_500),
        "started late: {waited:?}"
    );
    worker.join().unwrap();
}

/// The thread that claims a lone job for an idle worker runs it itself and leaves the
/// dispatcher's lane to the next free thread (see `src/worker/runner.rs`): a long job
/// started that way does not hold up the next one, and although the worker has one
/// thread more than `threads`, no more than `threads` jobs run at once. Two threads: a
/// lone job held until the next lone job starts (which it must, beside it), then one
/// more lone job held until a burst of eight has started beside it (never three at once).
#[test]
fn a_lone_job_runs_on_the_claiming_thread_and_claiming_goes_on() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(4);
    let overlap = Overlap::default();
    let seen = Seen::default();
    // Each start: the job's payload, and how many jobs ran then (counting it).
    let (tx, rx) = crossbeam_channel::unbounded::<(String, usize)>();
    let worker = {
        let (overlap, seen) = (overlap.clone(), seen.clone());
        Worker::builder(pool.clone())
            .threads(2)
            .dequeue_timeout(Duration::from_secs(60))
            .entrypoint("job", move |job, _ctx| {
                let name = job.payload_str().unwrap_or_default().to_owned();
                overlap.during(|| {
                    tx.send((name.clone(), overlap.now())).unwrap();
                    seen.mark(&name);
                    // The long jobs are held (30 s at most) until what must start beside
                    // them has started.
                    match name.as_str() {
                        "long 1" => seen.wait_for(|s| s.iter().any(|n| n == "next")),
                        "long 2" => {
                            seen.wait_for(|s| s.iter().filter(|n| n.starts_with('b')).count() == 8);
                        }
                        _ => std::thread::sleep(Duration::from_millis(50)),
                    }
                });
                Ok(())
            })
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let queue = Queue::new(pool);
    let started = |what: &str| {
        let (name, running) = rx.recv_timeout(Duration::from_secs(60)).expect(what);
        assert_eq!(name, what);
        running
    };
    eventually(Duration::from_secs(30), "an idle, listening worker", || {
        worker.stats().claims >= 1 && !listener_pids(&mut client, &db.name).is_empty()
    });
    queue.enqueue(NewJob::new("job", "long 1")).unwrap();
    started("long 1");
    queue.enqueue(NewJob::new("job", "next")).unwrap();
    let beside = started("next");
    assert_eq!(
        beside, 2,
        "the second job did not start while the first ran (the lead stayed with its thread)"
    );
    // Idle again before the next lone job.
    eventually(Duration::from_secs(30), "the first two jobs to end", || {
        worker.stats().jobs.succeeded == 2 && overlap.now() == 0
    });
    queue.enqueue(NewJob::new("job", "long 2")).unwrap();
    started("long 2");
    let burst: Vec<NewJob> = (0..8)
        .map(|i| NewJob::new("job", format!("b{i}")))
        .collect();
    queue.enqueue_many(&burst).unwrap();
    for _ in 0..8 {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("a burst job never started");
    }
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 11);
    assert_eq!(overlap.peak(), 2, "jobs at once beyond threads(2)");
}

/// The payloads of the jobs started so far, for handlers that wait for others to start.
#[derive(Clone, Default)]
struct Seen(Arc<(Mutex<Vec<String>>, Condvar)>);

impl Seen {
    fn mark(&self, name: &str) {
        self.0.0.lock().unwrap().push(name.to_owned());
        self.0.1.notify_all();
    }

    /// Waits until `done` holds of the payloads seen, 30 s at most.
    fn wait_for(&self, done: impl Fn(&[String]) -> bool) {
        let guard = self.0.0.lock().unwrap();
        let _ = self
            .0
            .1
            .wait_timeout_while(guard, Duration::from_secs(30), |s| !done(s))
            .unwrap();
    }
}

/// A dispatcher waiting for room to claim a batch ahead is woken once every thread is
/// free, even when the allowance for jobs claimed ahead lapsed during the wait (a handler
/// ran long), so that the room it waited for can no longer come. Four threads, batches of
/// ten and a two-minute dequeue timeout: after a first claim of four short jobs the worker
/// claims ten, four of which sleep 30 ms; while they run the dispatcher waits for room for
/// ten; the sleeps push the running average of handler times past the allowance's 1 ms,
/// and when the last job ends four is all the room there is. The drain of the 24 jobs must
/// end in well under the two minutes a wait for the dequeue timeout would take (it did
/// take them before the wake was mended). Several rounds: the batches' order depends on
/// timing.
#[test]
fn a_wait_for_room_ends_when_the_allowance_ahead_lapses_meanwhile() {
    let db = TestDb::new();
    for round in 0..3 {
        let queue = Queue::new(db.pool(1));
        for (name, n) in [("short", 4), ("long", 4), ("short", 16)] {
            let jobs: Vec<NewJob> = (0..n).map(|_| NewJob::without_payload(name)).collect();
            queue.enqueue_many(&jobs).unwrap();
        }
        let worker = Worker::builder(db.pool(3))
            .threads(4)
            .batch_size(10)
            .dequeue_timeout(Duration::from_secs(120))
            .entrypoint("short", |_job, _ctx| Ok(()))
            .entrypoint("long", |_job, _ctx| {
                std::thread::sleep(Duration::from_millis(30));
                Ok(())
            })
            .build()
            .unwrap();
        let started = Instant::now();
        let summary = worker.run_until_empty().unwrap();
        let took = started.elapsed();
        assert_eq!(summary.succeeded, 24, "round {round}");
        assert!(
            took < Duration::from_secs(60),
            "round {round}: the drain took {took:?}: the dispatcher waited for room that \
             could not come until the dequeue timeout"
        );
    }
}

/// A storm of forged notifications (any role may NOTIFY on the channel): 3 s of insert
/// events as fast as one session sends them, and as many payloads that do not parse. An
/// idle worker claims at most the false-alarm budget's 50 at once and 50 a second
/// (against one claim per event before), warns of the unparsable ones once, with a
/// count, and a real job enqueued during the storm still starts at once.
#[test]
fn a_forged_notify_storm_costs_a_bounded_claim_rate() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(4);
    let (started_tx, started_rx) = crossbeam_channel::unbounded::<Instant>();
    let worker = Worker::builder(pool.clone())
        .threads(2)
        .dequeue_timeout(Duration::from_secs(60))
        .entrypoint("real", move |_job, _ctx| {
            let _ = started_tx.send(Instant::now());
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    eventually(Duration::from_secs(30), "an idle, listening worker", || {
        worker.stats().claims >= 1 && !listener_pids(&mut client, &db.name).is_empty()
    });
    std::thread::sleep(Duration::from_millis(300));
    let before = worker.stats().claims;
    let storm = {
        let config = db.config();
        std::thread::spawn(move || {
            let mut forger = config.connect(postgres::NoTls).unwrap();
            let started = Instant::now();
            let mut sent = 0u64;
            while started.elapsed() < Duration::from_secs(3) {
                // Each its own transaction, each payload distinct: none is deduplicated.
                let insert = format!(
                    "{{\"channel\" : \"ch_pgqueuer\", \"operation\" : \"insert\", \
                     \"sent_at\" : \"2026-01-01T00:00:00.{sent:06}+00:00\", \
                     \"table\" : \"pgqueuer\", \"type\" : \"table_changed_event\"}}"
                );
                forger
                    .execute("SELECT pg_notify('ch_pgqueuer', $1)", &[&insert])
                    .unwrap();
                forger
                    .execute(
                        "SELECT pg_notify('ch_pgqueuer', $1)",
                        &[&format!("not json {sent}")],
                    )
                    .unwrap();
                sent += 1;
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let enqueued = Instant::now();
    Queue::new(pool).enqueue(NewJob::new("real", "x")).unwrap();
    let started = started_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the real job started");
    let sent = storm.join().unwrap();
    let claims = worker.stats().claims - before;
    let waited = started - enqueued;
    eprintln!("{sent} forged inserts in 3 s: {claims} claims; the real job waited {waited:?}");
    assert!(sent > 1_000, "the storm sent only {sent}");
    // The burst, 50 a second for the 3 s, and a few for the real job and its end.
    assert!(
        claims <= 50 + 3 * 50 + 20,
        "{claims} claims for {sent} forged events"
    );
    assert!(
        waited < Duration::from_secs(1),
        "the real job waited {waited:?}"
    );
    let warned = crate::harness::captured("cannot parse");
    assert!(
        !warned.is_empty() && warned.len() <= 2,
        "{} warnings of unparsable notifications: {warned:?}",
        warned.len()
    );
    worker.shutdown_handle().shutdown();
    worker.join().unwrap();
}
