//! Jobs both ways: enqueued on one side, run on the other, every field intact.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use pgqueuer::{Error, Job, JobId, NewJob, Queue, Status, Worker};
use serde_json::{Value, json};

use super::{hex, micros, python_worker};
use crate::harness::TestDb;
use crate::python;

/// A job both languages enqueue and compare: every field a producer sets.
#[derive(Debug, Clone)]
struct Sample {
    payload: Option<Vec<u8>>,
    priority: i32,
    delay: Duration,
    dedupe_key: Option<String>,
    /// JSON `null` for "no headers".
    headers: Value,
}

/// Non-UTF-8, absent, empty and text payloads; negative, zero and positive priorities;
/// nested headers and none; dedupe keys; one job delayed by `delay`.
fn samples(tag: &str, delay: Duration) -> Vec<Sample> {
    let key = |k: &str| Some(format!("{tag}-{k}"));
    vec![
        Sample {
            payload: Some(vec![0xff, 0xfe, 0x00, 0x80, b'b', b'i', b'n', 0xc3, 0x28]),
            priority: 7,
            delay: Duration::ZERO,
            dedupe_key: key("binary"),
            headers: json!({"trace_id": tag, "n": 1, "nested": {"list": [1, "two", null, true]}}),
        },
        Sample {
            payload: None,
            priority: -3,
            delay: Duration::ZERO,
            dedupe_key: None,
            headers: Value::Null,
        },
        Sample {
            payload: Some(Vec::new()),
            priority: 0,
            delay: Duration::ZERO,
            dedupe_key: None,
            headers: json!({"only": "one"}),
        },
        Sample {
            payload: Some("délai ✓".as_bytes().to_vec()),
            priority: 2,
            delay,
            dedupe_key: key("delayed"),
            headers: json!({"delayed": true}),
        },
    ]
}

impl Sample {
    fn new_job(&self, entrypoint: &str) -> NewJob {
        let mut job = match &self.payload {
            Some(p) => NewJob::new(entrypoint, p.clone()),
            None => NewJob::without_payload(entrypoint),
        }
        .priority(self.priority)
        .execute_after(self.delay);
        if let Some(key) = &self.dedupe_key {
            job = job.dedupe_key(key.as_str());
        }
        if !self.headers.is_null() {
            job = job.headers(self.headers.clone());
        }
        job
    }

    fn python_spec(&self, entrypoint: &str) -> Value {
        json!({
            "entrypoint": entrypoint,
            "payload_hex": self.payload.as_deref().map(hex),
            "priority": self.priority,
            "delay_s": self.delay.as_secs_f64(),
            "dedupe_key": self.dedupe_key,
            "headers": self.headers,
        })
    }

    fn delay_us(&self) -> i64 {
        i64::try_from(self.delay.as_micros()).unwrap()
    }
}

fn ids_of(value: &Value) -> Vec<JobId> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_i64().unwrap_or_else(|| panic!("not an id: {v}")))
        .collect()
}

/// Jobs enqueued by Python's `Queries.enqueue` reach our handler exactly as sent (payload
/// bytes, priority, headers, dedupe key), and the delayed one does not start early.
#[test]
fn python_enqueues_and_our_worker_runs_identical_jobs() {
    let db = TestDb::new();
    let delay = Duration::from_millis(1_500);
    let samples = samples("py", delay);
    let spec: Vec<Value> = samples.iter().map(|s| s.python_spec("py2rs")).collect();
    let ids = ids_of(&python::script(&db, "enqueue.py", &json!({ "jobs": spec }))["ids"]);
    assert_eq!(ids.len(), samples.len());
    // Python's dedupe key blocks our producer too.
    let pool = db.pool(4);
    let duplicate = Queue::new(pool.clone()).enqueue(samples[0].new_job("py2rs"));
    assert!(
        matches!(duplicate, Err(Error::DuplicateJob { .. })),
        "{duplicate:?}"
    );

    let clock = db.pool(2);
    let seen: Arc<Mutex<HashMap<JobId, (Job, SystemTime)>>> = Arc::default();
    let summary = {
        let seen = seen.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .entrypoint("py2rs", move |job, _ctx| {
                let now: SystemTime = clock
                    .get()?
                    .query_one("SELECT clock_timestamp()", &[])?
                    .get(0);
                seen.lock().unwrap().insert(job.id, (job.clone(), now));
                Ok(())
            })
            .build()
            .unwrap()
            .run_until_empty()
            .unwrap()
    };
    assert_eq!(summary.succeeded, 4);
    let seen = seen.lock().unwrap();
    for (sample, id) in samples.iter().zip(&ids) {
        let (job, started) = &seen[id];
        assert_eq!(job.entrypoint, "py2rs");
        assert_eq!(job.payload, sample.payload, "payload of job {id}");
        assert_eq!(job.priority, sample.priority, "priority of job {id}");
        assert_eq!(job.dedupe_key, sample.dedupe_key, "dedupe key of job {id}");
        assert_eq!(
            job.headers
                .as_ref()
                .and_then(|h| h.value().cloned())
                .unwrap_or(Value::Null),
            sample.headers,
            "headers of job {id}"
        );
        assert_eq!(job.attempts, 0);
        // Python adds the delay to the enqueuing transaction's now(), as `created` is.
        assert_eq!(
            micros(job.execute_after) - micros(job.created),
            sample.delay_us(),
            "execute_after of job {id}"
        );
        assert!(
            *started >= job.execute_after,
            "job {id} started {:?} before it was due",
            job.execute_after.duration_since(*started).unwrap()
        );
    }
    let delayed = &seen[&ids[3]];
    eprintln!(
        "python->rust: delayed job started {:?} after its enqueue ({delay:?} delay)",
        delayed.1.duration_since(delayed.0.created).unwrap()
    );
}

/// Jobs enqueued by our `Queue` reach a Python `QueueManager` handler exactly as sent,
/// and the delayed one does not start early.
#[test]
fn our_enqueue_runs_in_python_with_identical_data() {
    let db = TestDb::new();
    let delay = Duration::from_secs(1);
    let samples = samples("rs", delay);
    let jobs: Vec<NewJob> = samples.iter().map(|s| s.new_job("rs2py")).collect();

    let queue = Queue::new(db.pool(2));
    let ids = queue.enqueue_many(&jobs).unwrap();
    // Our dedupe key blocks Python's producer too.
    let duplicate = samples[0].python_spec("rs2py");
    let skipped = python::script(
        &db,
        "enqueue.py",
        &json!({"jobs": [duplicate], "on_conflict": "skip"}),
    );
    assert_eq!(skipped["ids"], json!([null]), "{skipped}");

    let answer = python_worker(
        &db,
        &json!({"entrypoint": "rs2py", "behaviour": "echo", "timeout_s": 30}),
    );
    let seen: HashMap<JobId, &Value> = answer["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_i64().unwrap(), s))
        .collect();
    assert_eq!(seen.len(), samples.len(), "{answer}");
    for (sample, id) in samples.iter().zip(&ids) {
        let got = seen[id];
        assert_eq!(got["entrypoint"], "rs2py");
        assert_eq!(
            got["payload_hex"],
            json!(sample.payload.as_deref().map(hex)),
            "payload of job {id}"
        );
        assert_eq!(got["priority"], sample.priority, "priority of job {id}");
        assert_eq!(got["headers"], sample.headers, "headers of job {id}");
        assert_eq!(
            got["dedupe_key"],
            json!(sample.dedupe_key),
            "dedupe key of job {id}"
        );
        assert_eq!(got["attempts"], 0);
        assert_eq!(got["status"], "picked");
        let created = got["created"].as_i64().unwrap();
        let due = got["execute_after"].as_i64().unwrap();
        let started = got["started"].as_i64().unwrap();
        assert_eq!(
            due - created,
            sample.delay_us(),
            "execute_after of job {id}"
        );
        assert!(
            started >= due,
            "job {id} started {} us before it was due",
            due - started
        );
    }
    let statuses = queue.wait_for(&ids, Duration::from_secs(5)).unwrap();
    assert!(
        statuses.values().all(|s| *s == Status::Successful),
        "{statuses:?}"
    );
    let delayed = seen[&ids[3]];
    eprintln!(
        "rust->python: delayed job started {} ms after its enqueue ({delay:?} delay)",
        (delayed["started"].as_i64().unwrap() - delayed["created"].as_i64().unwrap()) / 1_000
    );
}
