//! Limits stored in the database (`ops::set_limits`, `pgq limits set`) while workers run:
//! a rate lowered from 50/s to 10/s holds within a second, a concurrency limit lowered from
//! 4 to 1 drains without cancelling, and stored rows or notifications written by another
//! program change nothing they should not.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, unbounded};
use pgqueuer::ops::{self, set_limits};
use pgqueuer::{Entrypoint, NewJob, Queue, RateLimit, Settings, Worker};

use super::rates::{most_in_a_kept_window, most_in_any_window};
use super::{Starts, recording_worker};
use crate::claim::insert_jobs;
use crate::harness::{
    TestDb, captured, eventually, eventually_explained, init_logging, scalar, timing_lock,
};

/// A worker at 50 starts a second has its rate stored down to 10 a second while it runs:
/// from a second after the change (the change's own time, on the database clock) no
/// window of a second (less `rates::PREEMPTED`) holds more than 10 starts, and the worker
/// keeps using what the new rate allows.
#[test]
fn a_rate_lowered_while_running_holds_within_a_second() {
    let _timing = timing_lock();
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "api", 0, 600);
    let starts = Starts::default();
    let worker = recording_worker(
        &db,
        Entrypoint::new("api").rate_limit(50, Duration::from_secs(1)),
        8,
        10,
        &starts,
    );
    let count = || starts.lock().unwrap().len();
    eventually(Duration::from_secs(30), "100 starts at 50/s", || {
        count() >= 100
    });
    let stored = set_limits(
        &mut client,
        &Settings::default(),
        "api",
        None,
        Some(&[RateLimit::per_second(10)]),
        "test",
    )
    .unwrap();
    let changed = stored.changed;
    // Four seconds at the new rate (a start at least 4 s after the change).
    eventually(
        Duration::from_secs(30),
        "starts 4 s after the change",
        || {
            starts
                .lock()
                .unwrap()
                .last()
                .is_some_and(|t| *t >= changed + Duration::from_secs(4))
        },
    );
    worker.join().unwrap();
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let before: Vec<SystemTime> = starts.iter().copied().filter(|t| *t < changed).collect();
    let settled = changed + Duration::from_secs(1);
    let after: Vec<SystemTime> = starts.iter().copied().filter(|t| *t >= settled).collect();
    let most_before = most_in_any_window(&before, Duration::from_secs(1));
    assert!(
        most_before >= 45 && most_in_a_kept_window(&before, Duration::from_secs(1)) <= 50,
        "{most_before} starts in a second before the change: the worker ran at 50/s"
    );
    let most_after = most_in_a_kept_window(&after, Duration::from_secs(1));
    assert!(
        most_after <= 10,
        "{most_after} starts in a second from 1 s after the change to 10/s"
    );
    let in_three = after
        .iter()
        .filter(|t| **t < settled + Duration::from_secs(3))
        .count();
    // Half the new rate at least, even on a busy machine: the worker goes on at the new
    // rate rather than stopping (the fleet tests in `rates` hold it to 90%).
    assert!(
        in_three >= 15,
        "{in_three} starts in the 3 s after: the new rate is used (30 allowed)"
    );
}

/// One job's life in the drain test.
#[derive(Debug, Clone, Copy)]
enum Event {
    Start,
    End { cancelled: bool },
}

/// A worker holding four jobs at a declared limit of 4 has its limit stored down to 1
/// (as has a second worker, idle, declaring 4 too): no running job is cancelled, no new
/// one starts on either worker until all four have ended, and after that jobs run one at
/// a time.
#[test]
fn a_concurrency_limit_lowered_while_running_drains_without_cancelling() {
    let db = TestDb::new();
    let mut client = db.client();
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let (release, released): (_, Receiver<()>) = unbounded();
    let start = |threads: usize| {
        let log = Arc::clone(&events);
        let released = released.clone();
        Worker::builder(db.pool(6))
            .threads(threads)
            .entrypoint(
                Entrypoint::new("render").concurrency_limit(4),
                move |_, ctx| {
                    log.lock().unwrap().push(Event::Start);
                    // Held until the test lets it go.
                    let _ = released.recv_timeout(Duration::from_secs(60));
                    log.lock().unwrap().push(Event::End {
                        cancelled: ctx.is_cancelled(),
                    });
                    Ok(())
                },
            )
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let holder = start(6);
    insert_jobs(&mut client, "render", 0, 7);
    let running = |events: &[Event]| {
        events.iter().fold(0i64, |n, e| match e {
            Event::Start => n + 1,
            Event::End { .. } => n - 1,
        })
    };
    eventually(Duration::from_secs(30), "four jobs running", || {
        running(&events.lock().unwrap()) == 4
    });
    let idle = start(2);
    let set_at = Instant::now();
    set_limits(
        &mut client,
        &Settings::default(),
        "render",
        Some(1),
        None,
        "test",
    )
    .unwrap();
    let in_force = |w: &pgqueuer::RunningWorker| {
        w.stats()
            .limits
            .iter()
            .any(|l| l.entrypoint == "render" && l.limit == 1)
    };
    eventually(
        Duration::from_secs(5),
        "both workers to take the limit of 1",
        || in_force(&holder) && in_force(&idle),
    );
    assert!(
        set_at.elapsed() < Duration::from_secs(1),
        "the change took {:?} to reach the running workers",
        set_at.elapsed()
    );
    let change = events.lock().unwrap().len();
    let picked = |client: &mut pgqueuer::postgres::Client| -> i64 {
        scalar(
            client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
        )
    };
    // Each job ends in turn. The idle worker, holding no job, claims whenever a slot
    // comes free, so a claim that ignored the new limit would start a job beside those
    // still held; the next is let go only after that claim.
    for n in 1..=7 {
        let claims = idle.stats().claims;
        release.send(()).unwrap();
        let ended = |events: &[Event]| {
            events
                .iter()
                .filter(|e| matches!(e, Event::End { .. }))
                .count()
        };
        eventually(Duration::from_secs(30), "the released job to end", || {
            ended(&events.lock().unwrap()) == n
        });
        if n < 4 {
            let left = i64::try_from(4 - n).unwrap();
            eventually_explained(
                Duration::from_secs(30),
                "the released job's slot to be free",
                || picked(&mut client) <= left,
                || format!(" (after {n} released: {:?})", events.lock().unwrap()),
            );
            eventually(Duration::from_secs(30), "the idle worker's claim", || {
                idle.stats().claims > claims
            });
        } else if n < 7 {
            eventually(Duration::from_secs(30), "the next job to start", || {
                running(&events.lock().unwrap()) == 1
            });
        }
    }
    holder.join().unwrap();
    idle.join().unwrap();
    let events = events.lock().unwrap().clone();
    let mut now = running(&events[..change]);
    assert_eq!(now, 4, "four ran when the limit changed");
    for e in &events[change..] {
        match e {
            Event::Start => {
                assert_eq!(
                    now, 0,
                    "a job started beside {now} others under a limit of 1: {events:?}"
                );
                now += 1;
            }
            Event::End { cancelled } => {
                assert!(!cancelled, "a running job was cancelled: {events:?}");
                now -= 1;
            }
        }
    }
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ),
        7,
        "every job ran, once"
    );
}

/// Rows and notifications another program writes: a stored rate this crate cannot read is
/// reported and leaves the declared limit, a flood of notifications on the limits channel
/// with junk payloads is one reload, and the worker goes on running jobs throughout.
#[test]
fn stored_rows_and_notifications_from_elsewhere_change_nothing_else() {
    init_logging();
    let db = TestDb::new();
    let mut client = db.client();
    let queue = Queue::new(db.pool(2));
    let worker = Worker::builder(db.pool(6))
        .threads(2)
        .entrypoint(
            Entrypoint::new("hostile_ep").concurrency_limit(3),
            |_, _| Ok(()),
        )
        .build()
        .unwrap()
        .start()
        .unwrap();
    let limit = || {
        worker
            .stats()
            .limits
            .iter()
            .find(|l| l.entrypoint == "hostile_ep")
            .map(|l| l.limit)
    };
    client
        .batch_execute(
            "INSERT INTO pgqueuer_rs_limits (entrypoint, concurrency_limit, rates, changed_by) \
             VALUES ('hostile_ep', 2, '{\"every tuesday\"}', 'someone else');
             NOTIFY ch_pgqueuer_rs_limits, 'hostile_ep';",
        )
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the unreadable row reported",
        || {
            captured("every tuesday")
                .iter()
                .any(|l| l.contains("hostile_ep"))
        },
    );
    assert_eq!(
        limit(),
        Some(3),
        "the declared limit holds beside an unreadable row"
    );
    let error = ops::stored_limits(&mut client, &Settings::default()).unwrap_err();
    assert!(
        error.to_string().contains("pgq limits set"),
        "the error says how to repair it: {error}"
    );
    for i in 0..200 {
        client
            .execute(
                "SELECT pg_notify('ch_pgqueuer_rs_limits', $1)",
                &[&format!("{}\u{1}{i}", "x".repeat(i * 10))],
            )
            .unwrap();
    }
    let id = queue
        .enqueue(NewJob::new("hostile_ep", b"after".to_vec()))
        .unwrap();
    queue.wait_for(&[id], Duration::from_secs(30)).unwrap();
    // Repaired by an operator: the stored limit of 2 is in force.
    set_limits(
        &mut client,
        &Settings::default(),
        "hostile_ep",
        Some(2),
        Some(&[]),
        "operator",
    )
    .unwrap();
    eventually(
        Duration::from_secs(5),
        "the repaired limit in force",
        || limit() == Some(2),
    );
    let ids = queue
        .enqueue_many(
            &(0..20)
                .map(|i| NewJob::new("hostile_ep", format!("{i}")))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    queue.wait_for(&ids, Duration::from_secs(30)).unwrap();
    let summary = worker.join().unwrap();
    assert_eq!(summary.succeeded, 21);
}
