//! Headers that are not JSON objects, that serde_json cannot hold, or that nest too deep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgqueuer::{JobId, NewJob, Queue, Worker};
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

/// The log statuses of each job, in order: every job of `ids` must have exactly one
/// terminal row.
fn terminal_rows(client: &mut postgres::Client, ids: &[JobId]) -> HashMap<JobId, Vec<String>> {
    let mut out: HashMap<JobId, Vec<String>> = ids.iter().map(|id| (*id, Vec::new())).collect();
    for row in client
        .query(
            "SELECT job_id, status::text FROM pgqueuer_log WHERE job_id = ANY($1) \
             AND status NOT IN ('queued', 'picked') ORDER BY id",
            &[&ids],
        )
        .unwrap()
    {
        out.entry(row.get(0)).or_default().push(row.get(1));
    }
    out
}

/// Headers that serde_json cannot hold but jsonb keeps (a 401-digit number, arrays
/// nested 200 deep, objects nested 1,000 deep), written by another program, run like any
/// others, and so does every job claimed in the same batches: 40 ordinary jobs and the
/// three odd ones, claimed ten at a time by four threads, end once each as `successful`,
/// and the handler reads the odd headers' text as PostgreSQL prints it.
#[test]
fn headers_beyond_serde_json_neither_wedge_their_batch_nor_fail_their_job() {
    let mut tally = Tally::default();
    let db = TestDb::new();
    let mut client = db.client();
    let mut ids: Vec<JobId> = Vec::new();
    for i in 0..20 {
        ids.push(
            client
                .query_one(
                    "INSERT INTO pgqueuer (priority, entrypoint, payload, headers, status) \
                     VALUES (0, 'odd', $1, '{\"k\": 1}', 'queued') RETURNING id",
                    &[&format!("plain {i}").into_bytes()],
                )
                .unwrap()
                .get(0),
        );
    }
    let odd = [
        "'{\"n\": 1e400}'::jsonb",
        "(repeat('[', 200) || repeat(']', 200))::jsonb",
        "(repeat('{\"a\": ', 1000) || '1' || repeat('}', 1000))::jsonb",
    ];
    let mut odd_ids = Vec::new();
    for headers in odd {
        let id: JobId = client
            .query_one(
                &format!(
                    "INSERT INTO pgqueuer (priority, entrypoint, payload, headers, status) \
                     VALUES (0, 'odd', 'x', {headers}, 'queued') RETURNING id"
                ),
                &[],
            )
            .unwrap()
            .get(0);
        odd_ids.push(id);
        ids.push(id);
    }
    for i in 0..20 {
        ids.push(
            client
                .query_one(
                    "INSERT INTO pgqueuer (priority, entrypoint, payload, status) \
                     VALUES (0, 'odd', $1, 'queued') RETURNING id",
                    &[&format!("later {i}").into_bytes()],
                )
                .unwrap()
                .get(0),
        );
    }
    let stored: HashMap<JobId, String> = client
        .query(
            "SELECT id, headers::text FROM pgqueuer WHERE id = ANY($1)",
            &[&odd_ids],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();

    let pool = db.pool(8);
    let seen: Arc<Mutex<HashMap<JobId, Option<String>>>> = Arc::default();
    let worker = {
        let seen = seen.clone();
        Worker::builder(pool.clone())
            .threads(4)
            .batch_size(10)
            .heartbeat_timeout(Duration::from_secs(2))
            .entrypoint("odd", move |job, _ctx| {
                let text = job.headers.as_ref().map(|h| h.as_json().to_owned());
                seen.lock().unwrap().insert(job.id, text);
                Ok(())
            })
            .build()
            .unwrap()
    };
    let stop = worker.shutdown_handle();
    let running = worker.start().unwrap();
    let waited = std::time::Instant::now();
    while !unfinished(&mut client, &ids).is_empty() && waited.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.shutdown();
    running.join().unwrap();

    let left = unfinished(&mut client, &ids);
    assert!(left.is_empty(), "jobs never ended: {left:?}");
    for (id, statuses) in terminal_rows(&mut client, &ids) {
        assert_eq!(statuses, ["successful"], "job {id}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), ids.len(), "every job ran once");
    for id in &odd_ids {
        assert_eq!(seen[id].as_ref(), Some(&stored[id]), "job {id}'s headers");
    }
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0
    );
    tally.ran(ids.len(), seen.len() as u64);
    tally.finish("headers beyond serde_json");
}

/// Headers nested deeper than every reader can parse are refused on enqueue, with the
/// field and the bound named, and nothing is written; a value far deeper than a thread's
/// stack is refused the same way, not a crash.
#[test]
fn headers_nested_past_the_bound_are_refused_on_enqueue() {
    let mut tally = Tally::default();
    let db = TestDb::new();
    let mut client = db.client();
    let queue = Queue::new(db.pool(2));
    let mut deep = json!(1);
    for _ in 0..NewJob::MAX_HEADERS_DEPTH {
        deep = json!([deep]);
    }
    tally.expect_err(
        "headers nested 65 levels",
        queue
            .enqueue(NewJob::new("echo", "x").header("k", deep.clone()))
            .map(drop),
        &["headers", "64 levels"],
    );
    let mut very = json!(null);
    for _ in 0..100_000 {
        very = serde_json::Value::Array(vec![very]);
    }
    let job = NewJob::new("echo", "x").header("k", very);
    tally.expect_err(
        "headers nested 100,000 levels",
        queue.enqueue_many(std::slice::from_ref(&job)).map(drop),
        &["jobs[0].headers", "64 levels"],
    );
    // serde_json's drop recurses: let it, on a thread with room.
    std::thread::Builder::new()
        .stack_size(128 << 20)
        .spawn(move || drop(job))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0
    );
    // At the bound, the headers go in and read back.
    let at_bound = match deep {
        serde_json::Value::Array(mut inner) => inner.pop().unwrap(),
        _ => unreachable!(),
    };
    let id = queue
        .enqueue(NewJob::new("echo", "x").header("k", at_bound.clone()))
        .unwrap();
    let job = queue.job(id).unwrap().unwrap();
    assert_eq!(
        job.headers.as_ref().and_then(|h| h.get("k")),
        Some(&at_bound)
    );
    tally.ran(0, 0);
    tally.finish("headers too deep");
}

/// Valid JSON as another program may write it into `headers`, as text: any scalar,
/// numbers beyond `f64` (`1e400`, 500 digits), strings of any Unicode, raw or escaped
/// (surrogate pairs, `\u0000`, which jsonb refuses), nested up to 2,000 levels.
fn any_json_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        Just("1e400".to_owned()),
        Just("-1E-400".to_owned()),
        Just("-0".to_owned()),
        (1usize..600).prop_map(|n| "9".repeat(n)),
    ];
    let character = prop_oneof![
        any::<char>().prop_map(|c| match c {
            '"' => "\\\"".to_owned(),
            '\\' => "\\\\".to_owned(),
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32),
            c => c.to_string(),
        }),
        any::<char>().prop_map(|c| {
            let mut units = [0u16; 2];
            c.encode_utf16(&mut units)
                .iter()
                .map(|u| format!("\\u{u:04X}"))
                .collect::<String>()
        }),
        Just("\\u0000".to_owned()),
        Just("\\ud83d\\ude00".to_owned()),
    ];
    let string =
        proptest::collection::vec(character, 0..12).prop_map(|cs| format!("\"{}\"", cs.concat()));
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number,
        string.clone(),
    ];
    let value = leaf.prop_recursive(3, 24, 4, move |inner| {
        let key = string.clone();
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            proptest::collection::vec((key, inner), 0..4).prop_map(|kv| {
                let pairs: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{{}}}", pairs.join(", "))
            }),
        ]
    });
    (value, 0usize..2000, any::<bool>()).prop_map(|(v, depth, objects)| {
        if objects {
            format!("{}{v}{}", "{\"k\": ".repeat(depth), "}".repeat(depth))
        } else {
            format!("{}{v}{}", "[".repeat(depth), "]".repeat(depth))
        }
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 3, ..Default::default() })]

    /// Arbitrary valid JSON written into `headers` through SQL, as psql or another
    /// program writes it (what jsonb refuses, such as `\u0000`, is never a job): a worker
    /// claiming them ten at a time on four threads ends every job exactly once, as
    /// `successful`, and its handler reads each job's headers as PostgreSQL prints them.
    #[test]
    fn any_valid_jsonb_in_headers_ends_every_job_exactly_once(
        texts in proptest::collection::vec(any_json_text(), 40..60),
    ) {
        let db = TestDb::new();
        let mut client = db.client();
        let mut stored: HashMap<JobId, Option<String>> = HashMap::new();
        for text in &texts {
            let inserted = client.query_one(
                "INSERT INTO pgqueuer (priority, entrypoint, payload, headers, status) \
                 VALUES (0, 'any', 'x', $1::text::jsonb, 'queued') \
                 RETURNING id, headers::text",
                &[text],
            );
            match inserted {
                Ok(row) => {
                    let printed: Option<String> = row.get(1);
                    let seen = printed.filter(|t| t != "null");
                    stored.insert(row.get(0), seen);
                }
                Err(e) => {
                    // Only what jsonb itself refuses.
                    let code = e.code().map(|c| c.code().to_owned()).unwrap_or_default();
                    proptest::prop_assert!(code.starts_with("22"), "{text}: {e:?}");
                }
            }
        }
        let ids: Vec<JobId> = stored.keys().copied().collect();
        let seen: Arc<Mutex<HashMap<JobId, Vec<Option<String>>>>> = Arc::default();
        let worker = {
            let seen = seen.clone();
            Worker::builder(db.pool(6))
                .threads(4)
                .batch_size(10)
                .entrypoint("any", move |job, _ctx| {
                    let text = job.headers.as_ref().map(|h| h.as_json().to_owned());
                    seen.lock().unwrap().entry(job.id).or_default().push(text);
                    Ok(())
                })
                .build()
                .unwrap()
        };
        let stop = worker.shutdown_handle();
        let running = worker.start().unwrap();
        let waited = std::time::Instant::now();
        while !unfinished(&mut client, &ids).is_empty() && waited.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.shutdown();
        running.join().unwrap();
        for (id, statuses) in terminal_rows(&mut client, &ids) {
            proptest::prop_assert_eq!(statuses, vec!["successful".to_owned()], "job {}", id);
        }
        let seen = seen.lock().unwrap();
        for (id, printed) in &stored {
            proptest::prop_assert_eq!(seen.get(id).map(Vec::as_slice), Some(std::slice::from_ref(printed)), "job {}", id);
        }
    }
}
