//! `Queue::explain` against real rows, a full limit held by a Python worker included.

use std::time::Duration;

use pgqueuer::{Claimer, Entrypoint, Explanation, NewJob, OnFailure, Queue, Status, Worker};

use crate::harness::TestDb;
use crate::limits::python_holding;

/// Unknown, finished (with its log row) and held (with its reason), after a worker ran.
#[test]
fn explain_says_how_a_job_ended() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    assert!(matches!(
        queue.explain(999_999).unwrap(),
        Explanation::Unknown(999_999)
    ));
    let done = queue.enqueue(NewJob::new("ok", "x")).unwrap();
    let held = queue.enqueue(NewJob::new("bad", "x")).unwrap();
    Worker::builder(db.pool(4))
        .threads(1)
        .entrypoint("ok", |_j, _c| Ok(()))
        .entrypoint(
            Entrypoint::new("bad").on_failure(OnFailure::Hold),
            |_j, _c| Err("no disk".into()),
        )
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    match queue.explain(done).unwrap() {
        Explanation::Finished { id, last } => {
            assert_eq!((id, last.status), (done, Status::Successful));
        }
        other => panic!("{other:?}"),
    }
    let text = queue.explain(held).unwrap().to_string();
    assert!(
        text.contains("is held as failed: Error: no disk") && text.contains("pgq requeue"),
        "{text}"
    );
}

/// Deferred, running (naming its worker), stale once its heartbeat is old (and running
/// again under a longer heartbeat timeout), and waiting behind jobs ahead of it.
#[test]
fn explain_says_why_a_queued_or_picked_job_is_not_done() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let later = queue
        .enqueue(NewJob::new("later", "x").execute_after(Duration::from_secs(3600)))
        .unwrap();
    match queue.explain(later).unwrap() {
        Explanation::Deferred { due_in, .. } => {
            assert!(due_in > Duration::from_secs(3500), "{due_in:?}");
        }
        other => panic!("{other:?}"),
    }

    let busy = queue.enqueue(NewJob::new("busy", "x")).unwrap();
    let claimer = Claimer::builder().entrypoint("busy", 0).build().unwrap();
    let pool = db.pool(1);
    let claimed = claimer.claim(&mut pool.get().unwrap(), 1).unwrap();
    assert_eq!(claimed.jobs.len(), 1);
    let text = queue.explain(busy).unwrap().to_string();
    assert!(
        text.contains("is running") && text.contains(&claimer.worker_id().to_string()),
        "{text}"
    );
    client
        .execute(
            "UPDATE pgqueuer SET heartbeat = now() - interval '5 minutes' WHERE id = $1",
            &[&busy],
        )
        .unwrap();
    match queue.explain(busy).unwrap() {
        Explanation::Stale { heartbeat_age, .. } => {
            assert!(
                heartbeat_age >= Duration::from_secs(299),
                "{heartbeat_age:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        queue
            .explain_stale_after(busy, Duration::from_secs(600))
            .unwrap(),
        Explanation::Running { .. }
    ));

    let first = queue.enqueue(NewJob::new("line", "1").priority(5)).unwrap();
    queue.enqueue(NewJob::new("line", "2").priority(5)).unwrap();
    let last = queue.enqueue(NewJob::new("line", "3")).unwrap();
    match queue.explain(last).unwrap() {
        Explanation::Waiting { ahead, holders, .. } => {
            assert_eq!(ahead, 2);
            assert!(holders.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let text = queue.explain(first).unwrap().to_string();
    assert!(text.contains("is next in line"), "{text}");
}

/// A job waiting behind a full limit held by a Python worker is explained with the
/// slots held, the jobs holding them and the Python worker's id.
#[test]
fn explain_names_the_python_worker_holding_a_full_limit() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ep = "full";
    let jobs: Vec<NewJob> = (0..2).map(|i| NewJob::new(ep, format!("{i}"))).collect();
    let holders = queue.enqueue_many(&jobs).unwrap();
    let python = python_holding(&db, ep, 2, 2, 30.0);
    let waiting = queue.enqueue(NewJob::new(ep, "third")).unwrap();
    let python_worker: uuid::Uuid = db
        .client()
        .query_one(
            "SELECT queue_manager_id FROM pgqueuer WHERE id = $1",
            &[&holders[0]],
        )
        .unwrap()
        .get(0);
    match queue.explain(waiting).unwrap() {
        Explanation::Waiting {
            ahead,
            holders: seen,
            ..
        } => {
            assert_eq!(ahead, 0);
            let slots: Vec<(i64, Option<i64>)> = seen.iter().map(|h| (h.job_id, h.slot)).collect();
            assert_eq!(slots, [(holders[0], Some(0)), (holders[1], Some(1))]);
            assert!(seen.iter().all(|h| h.worker == Some(python_worker)));
        }
        other => panic!("{other:?}"),
    }
    let text = queue.explain(waiting).unwrap().to_string();
    assert!(
        text.contains("2 concurrency slots of \"full\" are held")
            && text.contains(&format!("slot 0 by job {}", holders[0]))
            && text.contains(&python_worker.to_string())
            && text.contains("With a limit of 2 the limit is full"),
        "{text}"
    );
    python.kill();
}
