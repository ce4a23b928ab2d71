//! Failures: what one side records of a failed job, the other reads.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use pgqueuer::{Entrypoint, JobId, NewJob, OnFailure, Queue, Retry, Status, Worker};
use serde_json::{Value, json};

use super::{drain, python_worker};
use crate::harness::{TestDb, log_of};
use crate::python;

/// Failures our worker writes (held, deleted, retried) parse in Python: `pgq failed
/// --json` lists the held job, and PgQueuer's `Log`/`TracebackRecord` models load every
/// traceback we wrote.
#[test]
fn our_failures_parse_in_python() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let hold = queue
        .enqueue(NewJob::new("rs_hold", b"kept for inspection".to_vec()).priority(4))
        .unwrap();
    let delete = queue.enqueue(NewJob::without_payload("rs_delete")).unwrap();
    let retry = queue.enqueue(NewJob::without_payload("rs_retry")).unwrap();
    let worker = Worker::builder(pool.clone())
        .threads(2)
        .entrypoint(
            Entrypoint::new("rs_hold").on_failure(OnFailure::Hold),
            |_job, _ctx| Err(std::io::Error::other("disk on fire").into()),
        )
        .entrypoint("rs_delete", |job, _ctx| {
            Err(format!("job {} is not welcome", job.id).into())
        })
        .entrypoint("rs_retry", |job, _ctx| {
            if job.attempts == 0 {
                return Err(Retry::after(Duration::ZERO).reason("once more").into());
            }
            Ok(())
        })
        .build()
        .unwrap();
    let worker_id = worker.id().to_string();
    let summary = worker.run_until_empty().unwrap();
    assert_eq!((summary.failed, summary.retried), (2, 1), "{summary:?}");

    let failed = python::pgq(&db, &["failed", "--json"]).success().json();
    let listed = failed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{failed}");
    let job = &listed[0];
    assert_eq!(job["id"], hold);
    assert_eq!(job["entrypoint"], "rs_hold");
    assert_eq!(job["status"], "failed");
    assert_eq!(job["priority"], 4);
    assert_eq!(job["attempts"], 0);
    assert_eq!(job["queue_manager_id"], Value::Null);
    assert_eq!(job["payload_bytes"], "kept for inspection".len());

    let log = python::script(&db, "read_log.py", &json!({}));
    let tracebacks: HashMap<(JobId, String), &Value> = log["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["traceback"].is_null())
        .map(|r| {
            (
                (
                    r["job_id"].as_i64().unwrap(),
                    r["status"].as_str().unwrap().to_owned(),
                ),
                &r["traceback"],
            )
        })
        .collect();
    assert_eq!(tracebacks.len(), 3, "{log}");
    let held = tracebacks[&(hold, "failed".to_owned())];
    assert_eq!(held["job_id"], hold);
    assert_eq!(held["exception_message"], "disk on fire");
    assert_eq!(
        held["additional_context"],
        json!({"entrypoint": "rs_hold", "queue_manager_id": worker_id})
    );
    let deleted = tracebacks[&(delete, "exception".to_owned())];
    assert_eq!(
        deleted["exception_message"],
        format!("job {delete} is not welcome")
    );
    let retried = tracebacks[&(retry, "queued".to_owned())];
    assert_eq!(
        retried["additional_context"],
        json!({
            "entrypoint": "rs_retry", "queue_manager_id": worker_id,
            "attempt": 0, "retry_delay": "0:00:00", "reason": "once more",
        })
    );
    for tb in tracebacks.values() {
        assert!(tb["timestamp"].is_string() && tb["exception_type"].is_string());
    }
    eprintln!("python parsed our tracebacks: {held}");

    // Python's `pgq requeue` puts our held job back; our worker then finishes it.
    python::pgq(&db, &["requeue", &hold.to_string()]).success();
    let summary = drain(&pool, Entrypoint::new("rs_hold"));
    assert_eq!(summary.succeeded, 1);
    assert_eq!(
        log_of(&mut db.client(), hold),
        [
            "queued",
            "picked",
            "failed",
            "queued",
            "picked",
            "successful"
        ]
    );
}

/// A Python handler failing with on_failure="hold" leaves a job our `Queue` lists as
/// failed, with PgQueuer's six-key traceback; our requeue then lets our worker finish it.
#[test]
fn python_failures_appear_in_ours() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let id = queue
        .enqueue(NewJob::new("py_hold", b"fragile".to_vec()).priority(3))
        .unwrap();
    let answer = python_worker(
        &db,
        &json!({"entrypoint": "py_hold", "behaviour": "raise", "on_failure": "hold"}),
    );
    assert_eq!(answer["seen"], json!([{"id": id}]), "{answer}");

    let failed = queue.list_failed(10).unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    // The reason Python recorded is read back with the held job.
    let failure = failed[0]
        .failure
        .as_ref()
        .expect("the failure of the held job");
    assert_eq!(failure.exception_type, "ValueError");
    assert_eq!(failure.message, format!("python handler refuses job {id}"));
    assert!(failure.traceback.contains("ValueError"), "{failure:?}");
    let job = &failed[0].job;
    assert_eq!(job.id, id);
    assert_eq!(job.status, Status::Failed);
    assert_eq!(job.entrypoint, "py_hold");
    assert_eq!(job.payload.as_deref(), Some(&b"fragile"[..]));
    assert_eq!(job.priority, 3);
    assert_eq!(job.queue_manager_id, None);
    assert_eq!(queue.job_statuses(&[id]).unwrap()[&id], Status::Failed);

    let traceback: Value = db
        .client()
        .query_one(
            "SELECT traceback FROM pgqueuer_log WHERE job_id = $1 AND status = 'failed'",
            &[&id],
        )
        .unwrap()
        .get(0);
    let keys: BTreeSet<&str> = traceback
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {traceback}"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "job_id",
            "timestamp",
            "exception_type",
            "exception_message",
            "traceback",
            "additional_context"
        ])
    );
    assert_eq!(traceback["job_id"], id);
    assert_eq!(traceback["exception_type"], "ValueError");
    assert_eq!(
        traceback["exception_message"],
        format!("python handler refuses job {id}")
    );
    assert!(
        traceback["traceback"]
            .as_str()
            .unwrap()
            .starts_with("Traceback (most recent call last)"),
        "{traceback}"
    );
    assert_eq!(traceback["additional_context"]["entrypoint"], "py_hold");
    let manager = traceback["additional_context"]["queue_manager_id"]
        .as_str()
        .unwrap();
    assert!(uuid::Uuid::parse_str(manager).is_ok(), "{traceback}");

    assert_eq!(queue.requeue_failed(&[id]).unwrap(), [id]);
    let summary = drain(&pool, Entrypoint::new("py_hold"));
    assert_eq!(summary.succeeded, 1);
    assert_eq!(
        log_of(&mut db.client(), id),
        [
            "queued",
            "picked",
            "failed",
            "queued",
            "picked",
            "successful"
        ]
    );
}
