//! Interoperation with the real Python PgQueuer 1.6.0, each test a cross-language run:
//! schema checks both ways, jobs enqueued on one side and run on the other, a mixed
//! fleet under one concurrency limit, failures, cancellation, crash recovery and
//! Python's dashboard. One file per concern; the helpers they share are here.

use std::time::{SystemTime, UNIX_EPOCH};

use pgqueuer::postgres::Client;
use pgqueuer::{Entrypoint, Pool, Worker};
use serde_json::{Value, json};

use crate::harness::TestDb;
use crate::python;

mod cancel;
mod dashboard;
mod failures;
mod fleet;
mod jobs;
mod mcp;
mod recovery;
mod schema;

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Microseconds since the Unix epoch, the unit the Python scripts report times in.
pub fn micros(t: SystemTime) -> i64 {
    i64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_micros()).unwrap()
}

/// Tables the Python scripts write to (`interop_marks`: handler milestones and ready
/// marks; `interop_runs`: one row per handler run).
pub fn create_side_tables(client: &mut Client) {
    client
        .batch_execute(
            "CREATE TABLE interop_marks (
                 job_id bigint NOT NULL, what text NOT NULL,
                 at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE TABLE interop_runs (
                 job_id bigint NOT NULL, started timestamptz NOT NULL,
                 finished timestamptz NOT NULL, worker text NOT NULL);",
        )
        .unwrap();
}

/// Checks a `worker.py` answer: it finished in time and PgQueuer logged nothing at
/// CRITICAL (which is where it reports a notification it cannot parse).
#[track_caller]
pub fn check_python_worker(answer: &Value) {
    assert_eq!(
        answer["timed_out"], false,
        "a Python worker timed out: {answer}"
    );
    assert_eq!(
        answer["critical"],
        json!([]),
        "PgQueuer logged critical errors: {answer}"
    );
}

/// Runs `worker.py` with `spec` to completion and checks its answer.
#[track_caller]
pub fn python_worker(db: &TestDb, spec: &Value) -> Value {
    let answer = python::script(db, "worker.py", spec);
    check_python_worker(&answer);
    answer
}

/// A Rust worker for one entrypoint that drains the queue, for tests that only need
/// its jobs run.
pub fn drain(pool: &Pool, entrypoint: Entrypoint) -> pgqueuer::RunSummary {
    Worker::builder(pool.clone())
        .threads(2)
        .entrypoint(entrypoint, |_job, _ctx| Ok(()))
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap()
}
