//! What a worker checks before it starts, and how a program reports a failed start.

use std::time::Duration;

use pgqueuer::{Error, NewJob, Queue, Status, Worker};

use crate::harness::TestDb;

/// Without the unique slot index a worker is not built: `Error::Schema` names the index
/// and says to upgrade.
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

/// Bad worker options (no entrypoint, zero threads or batch size, an entrypoint twice, a
/// zero heartbeat timeout, a pool too small) are refused naming the option; jobs of
/// unknown entrypoints are left queued.
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
