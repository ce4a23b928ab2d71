//! Entrypoint names PostgreSQL cannot store or PgQueuer does not allow.

use pgqueuer::{NewJob, Queue, Worker};

use super::Tally;
use crate::harness::{TestDb, scalar};

/// An entrypoint name with a NUL (which PostgreSQL cannot store, so every claim would
/// fail at run time) is refused by the worker and claimer builders; jobs with an empty
/// or a 300-byte entrypoint are refused and nothing is inserted.
#[test]
fn bad_entrypoint_names_are_rejected_and_nothing_inserted() {
    let mut tally = Tally::default();
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    tally.expect_err(
        "worker entrypoint with a NUL",
        Worker::builder(pool.clone())
            .threads(1)
            .entrypoint("bad\0name", |_job, _ctx| Ok(()))
            .build()
            .map(drop),
        &["entrypoint", "NUL"],
    );
    tally.expect_err(
        "claimer entrypoint with a NUL",
        pgqueuer::Claimer::builder()
            .entrypoint("bad\0name", 1)
            .build()
            .map(drop),
        &["entrypoint", "NUL"],
    );
    let queue = Queue::new(pool);
    let bad_jobs = [
        (NewJob::new("", "x"), "entrypoint"),
        (NewJob::new("e".repeat(300), "x"), "entrypoint"),
    ];
    for (job, field) in bad_jobs {
        tally.expect_err(
            &format!("job with a bad {field}"),
            queue.enqueue(job).map(drop),
            &[field],
        );
    }
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0
    );
    tally.finish("entrypoint names");
}
