//! Rows whose columns cannot be read as stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pgqueuer::{Entrypoint, JobId, OnFailure, Queue, Status, Worker};

use super::Tally;
use crate::cli::pgq;
use crate::faults::checks::unfinished;
use crate::harness::{TestDb, scalar};

/// A row whose text is not UTF-8 (a `SQL_ASCII` database hands out the bytes stored)
/// ends as that job's own failure, by its entrypoint's policy and naming the column,
/// without its handler running, while every job claimed in the same batches runs;
/// `Queue::job`, `pgq job` and `pgq failed` show the row rather than fail on it.
#[test]
fn a_row_that_cannot_be_read_ends_as_its_own_failure_and_its_batch_runs() {
    let mut tally = Tally::default();
    let db = TestDb::sql_ascii();
    let mut client = db.client();
    pgqueuer::upgrade(&mut client).expect("install the schema");
    let insert = |client: &mut postgres::Client, entrypoint: &str, key: &str| -> JobId {
        client
            .query_one(
                &format!(
                    "INSERT INTO pgqueuer (priority, entrypoint, payload, dedupe_key, status) \
                     VALUES (0, $1, 'x', {key}, 'queued') RETURNING id"
                ),
                &[&entrypoint],
            )
            .unwrap()
            .get(0)
    };
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(insert(&mut client, "dropped", "NULL"));
        ids.push(insert(&mut client, "kept", &format!("'fine-{i}'")));
    }
    let dropped_bad = insert(&mut client, "dropped", "E'key-\\xff-a'");
    let kept_bad = insert(&mut client, "kept", "E'key-\\xfe-b'");
    for _ in 0..6 {
        ids.push(insert(&mut client, "dropped", "NULL"));
    }
    let good = ids.clone();
    ids.extend([dropped_bad, kept_bad]);

    let queue = Queue::new(db.pool(2));
    let shown = queue.job(kept_bad).unwrap().expect("the row is there");
    assert!(
        shown
            .unreadable
            .as_deref()
            .is_some_and(|p| p.contains("dedupe_key") && p.contains("UTF-8")),
        "{shown:?}"
    );
    assert!(shown.dedupe_key.as_deref().unwrap().starts_with("key-"));

    let ran: Arc<Mutex<HashMap<JobId, usize>>> = Arc::default();
    let handler = |ran: Arc<Mutex<HashMap<JobId, usize>>>| {
        move |job: &pgqueuer::Job, _ctx: &pgqueuer::Context| -> pgqueuer::HandlerResult {
            *ran.lock().unwrap().entry(job.id).or_default() += 1;
            Ok(())
        }
    };
    let summary = Worker::builder(db.pool(6))
        .threads(2)
        .batch_size(10)
        .entrypoint("dropped", handler(ran.clone()))
        .entrypoint(
            Entrypoint::new("kept").on_failure(OnFailure::Hold),
            handler(ran.clone()),
        )
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();

    let ran = ran.lock().unwrap();
    for id in &good {
        assert_eq!(ran.get(id), Some(&1), "job {id} ran once");
    }
    assert!(!ran.contains_key(&dropped_bad) && !ran.contains_key(&kept_bad));
    assert!(unfinished(&mut client, &good).is_empty());
    let row = client
        .query_one(
            "SELECT status::text, traceback::text FROM pgqueuer_log \
             WHERE job_id = $1 AND status NOT IN ('queued', 'picked')",
            &[&dropped_bad],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "exception");
    let traceback: String = row.get(1);
    assert!(
        traceback.contains("UnreadableRow") && traceback.contains("dedupe_key"),
        "{traceback}"
    );
    assert_eq!(summary.failed, 2, "{summary:?}");

    // The held one stays, and every reader shows it.
    let held = queue.job(kept_bad).unwrap().expect("held");
    assert_eq!(held.status, Status::Failed);
    let job = pgq(&db, &["job", &kept_bad.to_string()]).ok();
    assert!(
        job.contains("unreadable") && job.contains("dedupe_key"),
        "{job}"
    );
    let failed = pgq(&db, &["failed"]).ok();
    assert!(failed.contains(&kept_bad.to_string()), "{failed}");
    assert!(failed.contains("UnreadableRow"), "{failed}");
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        1
    );
    tally.ran(ids.len(), summary.succeeded);
    tally.finish("unreadable rows");
}
