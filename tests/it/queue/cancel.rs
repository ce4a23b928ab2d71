//! Cancelling jobs: deleted, logged and announced.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pgqueuer::events::Event;
use pgqueuer::{NewJob, Queue};

use super::{Listener, job};
use crate::harness::TestDb;

/// `cancel` deletes queued and picked jobs (not held or unknown ones), logs them
/// `canceled` and announces them in one cancellation event of Python's exact shape.
#[test]
fn cancel_deletes_queued_and_picked_jobs_logs_them_and_announces_them() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let ids = queue
        .enqueue_many(&[job("c"), job("c"), job("c"), job("c")])
        .unwrap();
    let (queued, picked, held, untouched) = (ids[0], ids[1], ids[2], ids[3]);
    client
        .execute(
            "UPDATE pgqueuer SET status = 'picked', queue_manager_id = gen_random_uuid() WHERE id = $1",
            &[&picked],
        )
        .unwrap();
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&held],
        )
        .unwrap();
    let mut listener = Listener::new(&db);
    let cancelled = queue.cancel(&[picked, 999_999, queued, held]).unwrap();
    assert_eq!(cancelled, [queued, picked]);
    let payload = listener
        .first(Duration::from_secs(5), |e| {
            matches!(e, Event::Cancellation(_))
        })
        .expect("a cancellation event");
    // Exactly Python's field set, compact, with tz-aware times.
    let value: serde_json::Value = serde_json::from_str(&payload).unwrap();
    let keys: BTreeSet<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["channel", "sent_at", "type", "received_at", "ids"])
    );
    assert!(!payload.contains(": "), "compact JSON: {payload}");
    assert!(
        value["sent_at"].as_str().unwrap().ends_with('Z'),
        "{payload}"
    );
    let Event::Cancellation(event) = Event::parse(&payload).unwrap() else {
        unreachable!()
    };
    assert_eq!(event.ids, [queued, picked]);
    assert_eq!(event.channel, "ch_pgqueuer");
    let remaining: Vec<i64> = client
        .query("SELECT id FROM pgqueuer ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(remaining, [held, untouched]);
    let logged: Vec<i64> = client
        .query(
            "SELECT job_id FROM pgqueuer_log WHERE status = 'canceled' ORDER BY job_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(logged, [queued, picked]);
    // Cancelling again, or nothing, is not an error.
    assert_eq!(queue.cancel(&[queued, picked]).unwrap(), Vec::<i64>::new());
    assert_eq!(queue.cancel(&[]).unwrap(), Vec::<i64>::new());
}

/// Cancelling 1,000 jobs announces every id, in events under NOTIFY's 8,000-byte
/// payload limit.
#[test]
fn cancelling_many_jobs_splits_events_under_the_notify_payload_limit() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let jobs: Vec<NewJob> = (0..1000).map(|_| job("many")).collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    let mut listener = Listener::new(&db);
    assert_eq!(queue.cancel(&ids).unwrap(), ids);
    // Read until every id has been announced (10 s at most), not until a quiet spell.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while seen.len() < ids.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(payload) = listener.first(left, |e| matches!(e, Event::Cancellation(_))) else {
            break;
        };
        assert!(payload.len() < 8000);
        if let Event::Cancellation(c) = Event::parse(&payload).unwrap() {
            seen.extend(c.ids);
        }
    }
    assert_eq!(seen, ids);
}
