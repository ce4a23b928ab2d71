//! Payloads of odd sizes and contents.

use std::time::Instant;

use pgqueuer::{JobId, NewJob, Queue};
use serde_json::json;

use super::{Tally, assert_seen_as_sent, fnv, run_echo};
use crate::faults::checks::unfinished;
use crate::harness::TestDb;

/// Payloads of 50 MiB, 0 bytes, none at all and not UTF-8, and a job with headers, reach
/// the handler with their bytes and headers intact; the non-UTF-8 one does not read as
/// text.
#[test]
fn odd_payloads_reach_the_handler_intact() {
    let mut tally = Tally::default();
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let big: Vec<u8> = (0..50u32 << 20)
        .map(|i| (i.wrapping_mul(31) % 251) as u8)
        .collect();
    let non_utf8 = vec![0xff, 0xfe, 0x00, 0xc3, 0x28];
    let mut expected: Vec<(JobId, Option<usize>, u64, Option<serde_json::Value>)> = Vec::new();
    let started = Instant::now();
    let big_id = queue.enqueue(NewJob::new("echo", big.clone())).unwrap();
    let enqueue_big = started.elapsed();
    expected.push((big_id, Some(big.len()), fnv(&big), None));
    drop(big);
    for (job, payload, headers) in [
        (NewJob::new("echo", Vec::new()), Some(Vec::new()), None),
        (NewJob::without_payload("echo"), None, None),
        (NewJob::new("echo", non_utf8.clone()), Some(non_utf8), None),
        (
            NewJob::new("echo", "h")
                .header("trace", "abc")
                .header("n", 5),
            Some(b"h".to_vec()),
            Some(json!({"trace": "abc", "n": 5})),
        ),
    ] {
        let id = queue.enqueue(job).unwrap();
        let len = payload.as_ref().map(Vec::len);
        let hash = fnv(payload.as_deref().unwrap_or_default());
        expected.push((id, len, hash, headers));
    }
    let started = Instant::now();
    let (summary, seen) = run_echo(&pool);
    let drained = started.elapsed();
    assert_seen_as_sent(&seen, &expected);
    assert!(
        !seen[&expected[3].0].3,
        "the non-UTF-8 payload read as text"
    );
    assert_eq!(summary.succeeded, expected.len() as u64);
    let ids: Vec<JobId> = expected.iter().map(|e| e.0).collect();
    assert!(unfinished(&mut client, &ids).is_empty());
    pgqueuer::verify(&mut client).expect("the schema is intact");
    eprintln!(
        "bad input: 50 MiB payload enqueued in {enqueue_big:?}, {} odd jobs drained in {drained:?}",
        expected.len()
    );
    tally.ran(expected.len(), summary.succeeded);
    tally.finish("payloads");
}
