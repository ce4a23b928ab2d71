//! Headers that are not JSON objects.

use pgqueuer::{JobId, NewJob, Queue};
use serde_json::json;

use super::{Tally, assert_seen_as_sent, fnv, run_echo};
use crate::faults::checks::unfinished;
use crate::harness::{TestDb, scalar};

/// Jobs whose headers are not an object (an array, a string) or hold a NUL are refused
/// and nothing is inserted; rows another producer wrote with non-object headers (an
/// array, a string, a number) run, and the handler reads those headers as written.
#[test]
fn non_object_headers_are_refused_or_read_back_as_written() {
    let mut tally = Tally::default();
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let bad_jobs = [
        (NewJob::new("echo", "x").headers(json!([1, 2])), "headers"),
        (NewJob::new("echo", "x").headers(json!("text")), "headers"),
        (
            NewJob::new("echo", "x").header("k", "nul\0inside"),
            "headers",
        ),
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

    let mut expected: Vec<(JobId, Option<usize>, u64, Option<serde_json::Value>)> = Vec::new();
    for headers in [json!([1, 2]), json!("just text"), json!(42)] {
        let id: JobId = client
            .query_one(
                "INSERT INTO pgqueuer (priority, entrypoint, payload, headers, status) \
                 VALUES (0, 'echo', 'raw', $1, 'queued') RETURNING id",
                &[&headers],
            )
            .unwrap()
            .get(0);
        expected.push((id, Some(3), fnv(b"raw"), Some(headers)));
    }
    let (summary, seen) = run_echo(&pool);
    assert_seen_as_sent(&seen, &expected);
    assert_eq!(summary.succeeded, expected.len() as u64);
    let ids: Vec<JobId> = expected.iter().map(|e| e.0).collect();
    assert!(unfinished(&mut client, &ids).is_empty());
    pgqueuer::verify(&mut client).expect("the schema is intact");
    tally.ran(expected.len(), summary.succeeded);
    tally.finish("non-object headers");
}
