//! What a job holds: headers, payloads, the delay, and input that is refused.

use std::collections::HashMap;
use std::time::Duration;

use pgqueuer::{NewJob, OnConflict, Queue};

use super::{field_of, job, one_connection_behind_a_counting_proxy};
use crate::harness::{TestDb, scalar};

/// "No headers" is stored as Python stores it (jsonb null), and reads back as none
/// whoever wrote it, SQL NULL included; headers set read back as set.
#[test]
fn headers_written_by_us_and_by_python_read_back() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let with = queue
        .enqueue(job("h").header("trace", "abc").header("n", 3))
        .unwrap();
    let without = queue.enqueue(job("h")).unwrap();
    // What Python writes (jsonb null), and a row with SQL NULL.
    let python: i64 = client
        .query_one(
            "INSERT INTO pgqueuer (priority, entrypoint, status, headers) \
             VALUES (0, 'h', 'queued', 'null'::jsonb) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    let sql_null: i64 = client
        .query_one(
            "INSERT INTO pgqueuer (priority, entrypoint, status, headers) \
             VALUES (0, 'h', 'queued', NULL) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    // We store "no headers" as Python does: jsonb null, not SQL NULL.
    let kind: Option<String> = client
        .query_one(
            "SELECT jsonb_typeof(headers) FROM pgqueuer WHERE id = $1",
            &[&without],
        )
        .unwrap()
        .get(0);
    assert_eq!(kind.as_deref(), Some("null"));
    let jobs: HashMap<i64, pgqueuer::Job> = queue
        .jobs(&[with, without, python, sql_null])
        .unwrap()
        .into_iter()
        .map(|j| (j.id, j))
        .collect();
    assert_eq!(
        jobs[&with].headers.as_ref().and_then(|h| h.value()),
        Some(&serde_json::json!({"trace": "abc", "n": 3}))
    );
    assert_eq!(jobs[&without].headers, None);
    assert_eq!(jobs[&python].headers, None);
    assert_eq!(jobs[&sql_null].headers, None);
    assert_eq!(jobs[&python].payload, None);
}

/// Payloads (empty, not UTF-8, text, 20 MB, none) read back byte for byte.
#[test]
fn payloads_round_trip_exactly() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let big: Vec<u8> = (0..20_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let payloads: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0xff, 0xfe, 0x00, 0xc3, 0x28, 0x00],
        b"plain text".to_vec(),
        big,
    ];
    let jobs: Vec<NewJob> = payloads
        .iter()
        .map(|p| NewJob::new("bytes", p.clone()))
        .collect();
    let mut ids = queue.enqueue_many(&jobs).unwrap();
    ids.push(queue.enqueue(NewJob::without_payload("bytes")).unwrap());
    let read = queue.jobs(&ids).unwrap();
    assert_eq!(read.len(), 5);
    for (job, expected) in read.iter().zip(&payloads) {
        assert_eq!(job.payload.as_ref(), Some(expected), "job {}", job.id);
    }
    assert_eq!(read[4].payload, None);
    assert_eq!(read[2].payload_str(), Some("plain text"));
}

/// Each kind of bad job is refused naming its field (`jobs[i].field` in a batch) on
/// every enqueue path before any message reaches the server; the limits themselves are
/// accepted.
#[test]
fn bad_input_names_the_field_sends_nothing_and_inserts_nothing() {
    let (db, proxy, pool) = one_connection_behind_a_counting_proxy();
    let queue = Queue::new(pool);
    let mut direct = db.client();
    let before = proxy.total();
    let cases: Vec<(NewJob, &str)> = vec![
        (job(""), "entrypoint"),
        (
            job(&"e".repeat(NewJob::MAX_ENTRYPOINT_BYTES + 1)),
            "entrypoint",
        ),
        (job("nul\0"), "entrypoint"),
        (job("ep").dedupe_key(""), "dedupe_key"),
        (job("ep").dedupe_key("nul\0"), "dedupe_key"),
        (job("ep").headers(serde_json::json!("text")), "headers"),
        (job("ep").headers(serde_json::json!([1])), "headers"),
        (job("ep").header("k", "\0"), "headers"),
        (job("ep").execute_after(Duration::MAX), "execute_after"),
        (
            job("ep").execute_after(Duration::from_secs(u64::MAX / 1_000_000)),
            "execute_after",
        ),
    ];
    for (bad, field) in &cases {
        let err = queue.enqueue(bad).unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
        assert_eq!(field_of(err), *field);
        let err = queue.on(&mut direct).enqueue(bad).unwrap_err();
        assert_eq!(field_of(err), *field);
        let batch = [job("fine"), bad.clone()];
        let err = queue.enqueue_many(&batch).unwrap_err();
        assert_eq!(field_of(err), format!("jobs[1].{field}"));
        let err = queue
            .enqueue_deduplicated(&batch, OnConflict::Skip)
            .unwrap_err();
        assert_eq!(field_of(err), format!("jobs[1].{field}"));
    }
    // A batch over the size limit (zeroed memory is lazy: this allocates nothing real).
    let quarter = Queue::MAX_BATCH_BYTES / 4;
    let huge: Vec<NewJob> = (0..5)
        .map(|_| NewJob::new("big", vec![0u8; quarter]))
        .collect();
    assert_eq!(field_of(queue.enqueue_many(&huge).unwrap_err()), "jobs");
    assert_eq!(proxy.total(), before, "no message reached the server");
    assert_eq!(
        scalar::<i64>(&mut direct, "SELECT count(*) FROM pgqueuer"),
        0
    );
    assert_eq!(
        scalar::<i64>(&mut direct, "SELECT count(*) FROM pgqueuer_log"),
        0
    );
    // The limits themselves are accepted.
    queue
        .enqueue(
            job(&"e".repeat(NewJob::MAX_ENTRYPOINT_BYTES))
                .dedupe_key("k".repeat(NewJob::MAX_DEDUPE_KEY_BYTES))
                .execute_after(NewJob::MAX_EXECUTE_AFTER),
        )
        .unwrap();
}

/// `execute_after` is the enqueuing transaction's time plus the delay, to the
/// microsecond; without a delay the job is due at once.
#[test]
fn execute_after_is_an_exact_delay_from_the_enqueuing_transaction() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let delay = Duration::new(3 * 86_400 + 5, 7_000);
    let id = queue.enqueue(job("later").execute_after(delay)).unwrap();
    let gap: String = client
        .query_one(
            "SELECT (extract(epoch FROM execute_after) - extract(epoch FROM created))::text \
             FROM pgqueuer WHERE id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(gap, "259205.000007");
    let now = queue.enqueue(job("now")).unwrap();
    let due: bool = client
        .query_one(
            "SELECT execute_after = created FROM pgqueuer WHERE id = $1",
            &[&now],
        )
        .unwrap()
        .get(0);
    assert!(due);
}
