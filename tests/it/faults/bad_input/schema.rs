//! A database without the PgQueuer schema.

use pgqueuer::{Error, NewJob, Queue, Worker};

use super::Tally;
use crate::harness::TestDb;

/// Without the schema, building a worker fails with `Error::Schema` naming what is
/// missing and how to get it, and a producer gets the server's error.
#[test]
fn a_missing_schema_is_named() {
    let mut tally = Tally::default();
    let empty = TestDb::empty();
    let pool = empty.pool(4);
    let err = Worker::builder(pool.clone())
        .threads(1)
        .entrypoint("a", |_job, _ctx| Ok(()))
        .build()
        .unwrap_err();
    match &err {
        Error::Schema { missing, .. } => {
            assert!(
                missing.iter().any(|m| m.contains("pgqueuer_log")),
                "{missing:?}"
            );
            assert!(missing.len() >= 4, "{missing:?}");
        }
        other => panic!("expected Error::Schema, got {other:?}"),
    }
    tally.expect_err(
        "worker without a schema",
        Err(err),
        &["run pgqueuer::upgrade()"],
    );
    tally.expect_err(
        "enqueue without a schema",
        Queue::new(pool).enqueue(NewJob::new("a", "x")).map(drop),
        &["relation \"pgqueuer\" does not exist"],
    );
    drop(empty);
    tally.finish("missing schema");
}
