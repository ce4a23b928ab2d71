//! Inspecting and fixing the queue: sizes, failed jobs, requeue, clear, statuses.

use std::time::Duration;

use pgqueuer::events::{Event, Operation};
use pgqueuer::{Queue, Status};

use super::{Listener, job};
use crate::harness::{TestDb, scalar};

/// `sizes`, `list_failed`, `requeue_failed` (which wakes workers) and `clear` (which
/// logs `deleted`) report and change the queue as they say.
#[test]
fn sizes_clear_list_failed_and_requeue_failed() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let a = queue
        .enqueue_many(&[job("a"), job("a"), job("a").priority(2)])
        .unwrap();
    let b = queue.enqueue_many(&[job("b"), job("b")]).unwrap();
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed', attempts = 3 WHERE id = ANY($1)",
            &[&b],
        )
        .unwrap();
    let sizes: Vec<(String, i32, Status, u64)> = queue
        .sizes()
        .unwrap()
        .into_iter()
        .map(|s| (s.entrypoint, s.priority, s.status, s.count))
        .collect();
    assert_eq!(
        sizes,
        [
            ("a".to_owned(), 0, Status::Queued, 2),
            ("a".to_owned(), 2, Status::Queued, 1),
            ("b".to_owned(), 0, Status::Failed, 2),
        ]
    );
    let failed = queue.list_failed(10).unwrap();
    assert_eq!(failed.iter().map(|j| j.job.id).collect::<Vec<_>>(), b);
    assert!(failed.iter().all(|j| j.job.status == Status::Failed));
    assert_eq!(queue.list_failed(1).unwrap().len(), 1);

    let mut listener = Listener::new(&db);
    let requeued = queue.requeue_failed(&[b[0], a[0], 424_242]).unwrap();
    assert_eq!(requeued, [b[0]]);
    let back = &queue.jobs(&[b[0]]).unwrap()[0];
    assert_eq!((back.status, back.attempts), (Status::Queued, 0));
    assert_eq!(queue.job_statuses(&[b[0]]).unwrap()[&b[0]], Status::Queued);
    // Workers are woken although the trigger announces no UPDATE.
    listener
        .first(Duration::from_secs(5), |e| {
            matches!(e, Event::TableChanged(t) if t.operation == Operation::Update && t.table == "pgqueuer")
        })
        .expect("an update event after a requeue");

    assert_eq!(queue.clear(&["a"]).unwrap(), 3);
    assert_eq!(queue.clear(&[] as &[&str]).unwrap(), 0);
    let deleted = scalar::<i64>(
        &mut client,
        "SELECT count(*) FROM pgqueuer_log WHERE status = 'deleted'",
    );
    assert_eq!(deleted, 3);
    assert_eq!(
        queue.job_statuses(&a).unwrap(),
        a.iter().map(|id| (*id, Status::Deleted)).collect()
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        2
    );
}

/// `job_statuses` reports each known job's latest logged status and leaves unknown ids
/// out.
#[test]
fn job_statuses_reports_the_latest_log_status() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let ids = queue.enqueue_many(&[job("s"), job("s")]).unwrap();
    client
        .execute(
            "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
             VALUES ($1, 'picked', 's', 0), ($1, 'exception', 's', 0)",
            &[&ids[0]],
        )
        .unwrap();
    let statuses = queue.job_statuses(&[ids[0], ids[1], 777]).unwrap();
    assert_eq!(statuses.len(), 2);
    assert_eq!(statuses[&ids[0]], Status::Exception);
    assert_eq!(statuses[&ids[1]], Status::Queued);
}
