//! Jobs of entrypoints nobody here handles.

use std::process::Command;

use pgqueuer::{NewJob, Queue, Status};

use super::{Tally, run_echo};
use crate::faults::process::worker_binary;
use crate::harness::{TestDb, scalar};

/// Jobs of an entrypoint no worker here handles are left alone: a worker draining its
/// own jobs beside them, and a worker process that knows only other entrypoints, never
/// touch them (still queued, no attempt, no owner, no log row but `queued`).
#[test]
fn foreign_entrypoints_are_left_alone() {
    let mut tally = Tally::default();
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let strangers = queue
        .enqueue_many(
            &(0..5)
                .map(|i| NewJob::new("stranger", vec![i]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    // A job of the worker's own, so that it claims while the strangers wait.
    queue.enqueue(NewJob::new("echo", "own")).unwrap();
    let (summary, _) = run_echo(&pool);
    assert_eq!(summary.succeeded, 1, "the worker's own job");
    let statuses = queue.job_statuses(&strangers).unwrap();
    assert!(strangers.iter().all(|id| statuses[id] == Status::Queued));
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'stranger' \
             AND attempts = 0 AND queue_manager_id IS NULL"
        ),
        5
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log l JOIN pgqueuer q ON q.id = l.job_id WHERE l.status <> 'queued'"
        ),
        0
    );
    // A worker process that knows only other entrypoints drains and leaves them too.
    let out = Command::new(worker_binary())
        .args([
            "--dsn",
            &db.dsn(),
            "--entrypoint",
            "known",
            "--drain",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'queued'"
        ),
        5
    );
    pgqueuer::verify(&mut client).expect("the schema is intact");
    tally.ran(1, summary.succeeded);
    tally.kept(strangers.len());
    tally.finish("foreign entrypoints");
}
