//! Interoperation with the real Python PgQueuer 1.6.0, each test a cross-language run:
//! schema checks both ways, jobs enqueued on one side and run on the other, a mixed
//! fleet under one concurrency limit, failures, cancellation, crash recovery and
//! Python's dashboard.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgqueuer::events::{Event, HealthCheck, Operation, TableChanged};
use pgqueuer::postgres::Client;
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{
    Claimer, EntrypointOptions, Error, Job, JobId, NewJob, OnFailure, Pool, Queue, Retry, Settings,
    Status, Worker,
};
use serde_json::{Value, json};

use crate::harness::TestDb;
use crate::harness::{eventually, log_of, scalar};
use crate::python;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Microseconds since the Unix epoch, the unit the Python scripts report times in.
fn micros(t: SystemTime) -> i64 {
    i64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_micros()).unwrap()
}

/// Tables the Python scripts write to (`interop_marks`: handler milestones and ready
/// marks; `interop_runs`: one row per handler run).
fn create_side_tables(client: &mut Client) {
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

/// Checks a `worker.py` answer: it finished in time and PgQueuer logged nothing at
/// CRITICAL (which is where it reports a notification it cannot parse).
#[track_caller]
fn check_python_worker(answer: &Value) {
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
fn python_worker(db: &TestDb, spec: &Value) -> Value {
    let answer = python::script(db, "worker.py", spec);
    check_python_worker(&answer);
    answer
}

/// A Rust worker for one entrypoint that drains the queue, for tests that only need
/// its jobs run.
fn drain(pool: &Pool, entrypoint: &str, options: EntrypointOptions) -> pgqueuer::RunSummary {
    Worker::builder(pool.clone())
        .threads(2)
        .entrypoint_with(entrypoint, options, |_job, _ctx| Ok(()))
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap()
}

// 1. Schema ------------------------------------------------------------------------------

/// `pgq upgrade --plan` printed no SQL statement (it prints the delta on stdout, headed by
/// comments, and its verdict on stderr).
#[track_caller]
fn assert_nothing_planned(plan: &python::Output) {
    let statements: Vec<&str> = plan
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("--"))
        .collect();
    assert!(
        statements.is_empty(),
        "pgq upgrade --plan wants to change our schema: {statements:#?}\n{plan:?}"
    );
    assert!(
        plan.stderr.contains("already up to date"),
        "pgq upgrade --plan did not report an up-to-date schema: {plan:?}"
    );
}

/// Our `upgrade()` satisfies Python's `pgq verify` and leaves `pgq upgrade --plan` with
/// nothing to do; Python's `pgq install` satisfies our `verify()`, leaves our `upgrade()`
/// with nothing to change, and our worker runs a job on it.
#[test]
fn schemas_are_accepted_both_ways() {
    let ours = TestDb::empty();
    let report = pgqueuer::upgrade(&mut ours.client()).unwrap();
    assert!(
        !report.is_noop(),
        "upgrade() on an empty database did nothing"
    );

    let verify = python::pgq(&ours, &["verify", "--expect", "present"]).success();
    assert!(
        verify
            .stdout
            .contains("All required PgQueuer database objects are present."),
        "{verify:?}"
    );
    assert_nothing_planned(&python::pgq(&ours, &["upgrade", "--plan"]).success());

    // The same with a prefix and a schema: PgQueuer names every object after them.
    let prefixed = TestDb::empty();
    let settings = Settings::with_prefix("app_").schema("myq");
    pgqueuer::upgrade_with(&mut prefixed.client(), &settings).unwrap();
    let env = [("PGQUEUER_PREFIX", "app_"), ("PGQUEUER_SCHEMA", "myq")];
    python::pgq_with_env(&prefixed, &env, &["verify", "--expect", "present"]).success();
    assert_nothing_planned(
        &python::pgq_with_env(&prefixed, &env, &["upgrade", "--plan"]).success(),
    );

    let theirs = TestDb::empty();
    let install = python::pgq(&theirs, &["install"]).success();
    eprintln!("pgq install: {}", install.stderr.trim());
    let mut client = theirs.client();
    pgqueuer::verify(&mut client).unwrap();
    let report = pgqueuer::upgrade(&mut client).unwrap();
    assert!(
        report.is_noop(),
        "our upgrade() changed PgQueuer's own install: {:#?}",
        report.changes
    );
    let pool = theirs.pool(4);
    let id = Queue::new(pool.clone())
        .enqueue(NewJob::new("on_their_schema", b"hello".to_vec()))
        .unwrap();
    let summary = drain(&pool, "on_their_schema", EntrypointOptions::new());
    assert_eq!(summary.succeeded, 1);
    assert_eq!(log_of(&mut client, id), ["queued", "picked", "successful"]);
}

// 2. Jobs both ways ----------------------------------------------------------------------

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
            job.headers.clone().unwrap_or(Value::Null),
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

// 3. A mixed fleet -----------------------------------------------------------------------

/// Two Python `QueueManager` processes and two Rust workers drain 2,000 jobs of one
/// entrypoint declared with concurrency_limit=2 by all four: every job runs exactly once,
/// and the handler intervals (database clock) never overlap more than twice.
#[test]
fn a_mixed_fleet_keeps_the_limit_and_runs_every_job_once() {
    const JOBS: usize = 2_000;
    const LIMIT: u32 = 2;
    let db = TestDb::new();
    let mut client = db.client();
    // Commits need not wait for the disk here: this test is about overlap, not durability.
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        ))
        .unwrap();
    create_side_tables(&mut client);
    let stop_capture = Arc::new(AtomicBool::new(false));
    let capture = capture_notifications(&db, stop_capture.clone());

    let mut python_workers: Vec<python::Running> = ["py-1", "py-2"]
        .iter()
        .map(|name| {
            python::spawn_script(
                &db,
                "worker.py",
                &json!({
                    "entrypoint": "shared", "behaviour": "record_run", "name": name,
                    "concurrency_limit": LIMIT, "batch_size": 1, "gate": true,
                    "sleep_s": 0.002, "timeout_s": 50,
                }),
                Duration::from_secs(55),
            )
        })
        .collect();
    // Both Python managers are set up and wait for jobs before any exist.
    eventually(Duration::from_secs(30), "both Python workers ready", || {
        if let Some(i) = python_workers
            .iter_mut()
            .position(python::Running::has_exited)
        {
            let out = python_workers.remove(i).finish();
            panic!("a Python worker exited before the jobs were enqueued: {out:?}");
        }
        scalar(
            &mut client,
            "SELECT count(*) FROM interop_marks WHERE what LIKE 'ready:%'",
        ) == 2
    });

    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new("shared", i.to_string().into_bytes()))
        .collect();
    let started = Instant::now();
    let ids = Queue::new(db.pool(1)).enqueue_many(&jobs).unwrap();

    let record = db.pool(4);
    let rust_workers: Vec<_> = ["rs-1", "rs-2"]
        .into_iter()
        .map(|name| {
            let record = record.clone();
            // Slots are released between jobs, so the Python workers get their share:
            // reused slots would stay with whichever worker took them first.
            let worker = Worker::builder(db.pool(4))
                .threads(2)
                .batch_size(2)
                .reuse_slots(false)
                .entrypoint_with(
                    "shared",
                    EntrypointOptions::new().concurrency_limit(LIMIT),
                    move |job, _ctx| {
                        let mut conn = record.get()?;
                        let start: SystemTime =
                            conn.query_one("SELECT clock_timestamp()", &[])?.get(0);
                        std::thread::sleep(Duration::from_millis(2));
                        conn.execute(
                            "INSERT INTO interop_runs (job_id, started, finished, worker) \
                             VALUES ($1, $2, clock_timestamp(), $3)",
                            &[&job.id, &start, &name],
                        )?;
                        Ok(())
                    },
                )
                .build()
                .unwrap();
            std::thread::spawn(move || worker.run_until_empty())
        })
        .collect();
    for handle in rust_workers {
        handle.join().unwrap().unwrap();
    }
    for worker in python_workers {
        check_python_worker(&worker.finish().success().json());
    }
    let elapsed = started.elapsed();
    stop_capture.store(true, Ordering::SeqCst);
    let payloads = capture.join().unwrap();

    // Every job ran exactly once and finished.
    assert_eq!(
        scalar(&mut client, "SELECT count(*) FROM pgqueuer"),
        0,
        "jobs left in the queue"
    );
    let runs = client
        .query(
            "SELECT job_id, worker, started, finished FROM interop_runs",
            &[],
        )
        .unwrap();
    let mut per_job: BTreeMap<JobId, usize> = BTreeMap::new();
    let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
    let mut events: Vec<(i64, i32)> = Vec::with_capacity(runs.len() * 2);
    for row in &runs {
        *per_job.entry(row.get(0)).or_default() += 1;
        *per_worker.entry(row.get(1)).or_default() += 1;
        let (start, end): (SystemTime, SystemTime) = (row.get(2), row.get(3));
        assert!(end >= start);
        events.push((micros(start), 1));
        events.push((micros(end), -1));
    }
    let twice: Vec<_> = per_job.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs run more than once: {twice:?}");
    assert_eq!(
        per_job.keys().copied().collect::<BTreeSet<_>>(),
        ids.iter().copied().collect::<BTreeSet<_>>(),
        "the runs are not exactly the enqueued jobs"
    );
    for status in ["picked", "successful"] {
        assert_eq!(
            scalar(
                &mut client,
                &format!("SELECT count(*) FROM pgqueuer_log WHERE status = '{status}'")
            ),
            i64::try_from(JOBS).unwrap(),
            "{status} log rows"
        );
    }

    // Sweep the intervals: ends sort before starts at the same microsecond, so touching
    // intervals do not count as overlapping.
    events.sort_unstable();
    let (mut running, mut max_running) = (0i64, 0i64);
    for (_, delta) in &events {
        running += i64::from(*delta);
        max_running = max_running.max(running);
    }
    eprintln!(
        "mixed fleet: {JOBS} jobs in {elapsed:?}, runs per worker {per_worker:?}, \
         max handlers overlapping {max_running} (limit {LIMIT})"
    );
    assert!(
        max_running <= i64::from(LIMIT),
        "{max_running} handlers overlapped under a limit of {LIMIT}"
    );
    assert_eq!(max_running, i64::from(LIMIT), "the limit was never reached");
    for name in ["py-1", "py-2", "rs-1", "rs-2"] {
        assert!(
            per_worker.get(name).copied().unwrap_or(0) > 0,
            "worker {name} ran no job: {per_worker:?}"
        );
    }

    // Every notification either side sent on the channel parses here, as it did in
    // Python (check_python_worker: nothing logged at CRITICAL).
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for payload in &payloads {
        let event = Event::parse(payload)
            .unwrap_or_else(|e| panic!("a notification does not parse ({e}): {payload}"));
        *kinds.entry(event.kind()).or_default() += 1;
    }
    eprintln!("mixed fleet: notifications on the channel {kinds:?}");
    assert!(
        kinds.get("health_check_event").copied().unwrap_or(0) >= 2,
        "the Python workers' health checks were not seen: {kinds:?}"
    );
}

/// Collects every payload sent on the default channel until `stop` is set.
fn capture_notifications(db: &TestDb, stop: Arc<AtomicBool>) -> JoinHandle<Vec<String>> {
    let mut client = db.client();
    client.batch_execute("LISTEN ch_pgqueuer").unwrap();
    std::thread::spawn(move || {
        let mut payloads = Vec::new();
        loop {
            // Read what has arrived, then stop once asked to (after a last quiet spell).
            let stopping = stop.load(Ordering::SeqCst);
            let mut notifications = client.notifications();
            let mut it = notifications.timeout_iter(Duration::from_millis(100));
            // An error ends the capture: the test is over (its database was dropped,
            // which terminates this session) or its checks will miss the events.
            loop {
                match it.next() {
                    Ok(Some(note)) => payloads.push(note.payload().to_owned()),
                    Ok(None) => break,
                    Err(_) => return payloads,
                }
            }
            if stopping {
                return payloads;
            }
        }
    })
}

// 4. Failures ----------------------------------------------------------------------------

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
        .entrypoint_with(
            "rs_hold",
            EntrypointOptions::new().on_failure(OnFailure::Hold),
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
    let summary = drain(&pool, "rs_hold", EntrypointOptions::new());
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
    let summary = drain(&pool, "py_hold", EntrypointOptions::new());
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

// 5. Cancellation ------------------------------------------------------------------------

/// `Queries.mark_job_as_cancelled` from Python reaches our running handler:
/// `ctx.is_cancelled()` turns true. (On the way, `pgq workers` lists our worker.)
#[test]
fn python_cancellation_reaches_our_running_handler() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let id = Queue::new(pool.clone())
        .enqueue(NewJob::without_payload("rs_long"))
        .unwrap();
    let (started_tx, started_rx) = crossbeam_channel::bounded(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let worker = Worker::builder(pool)
        .threads(1)
        .entrypoint("rs_long", move |_job, ctx| {
            let _ = started_tx.send(());
            let until = Instant::now() + Duration::from_secs(20);
            while !ctx.is_cancelled() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = done_tx.send((ctx.is_cancelled(), Instant::now()));
            Ok(())
        })
        .build()
        .unwrap();
    let ours = worker.id().to_string();
    let worker = worker.start().unwrap();
    started_rx
        .recv_timeout(Duration::from_secs(15))
        .expect("our handler never started");
    // Python's insight commands see our running worker.
    let workers = python::pgq(&db, &["workers", "--json"]).success().json();
    assert_eq!(workers.as_array().map(Vec::len), Some(1), "{workers}");
    assert_eq!(workers[0]["queue_manager_id"], ours);
    assert_eq!(workers[0]["active_jobs"], 1);
    assert_eq!(workers[0]["entrypoints"], json!(["rs_long"]));
    let sent = Instant::now();
    python::script(&db, "cancel.py", &json!({ "ids": [id] }));
    let (cancelled, at) = done_rx
        .recv_timeout(Duration::from_secs(15))
        .expect("our handler never returned");
    assert!(cancelled, "our handler ran out its time without a cancel");
    eprintln!(
        "python cancel reached our handler {:?} after the script started (interpreter start included)",
        at - sent
    );
    let summary = worker.join().unwrap();
    assert_eq!(summary.cancelled, 1, "{summary:?}");
    assert_eq!(
        log_of(&mut db.client(), id),
        ["queued", "picked", "canceled"]
    );
}

/// Our `Queue::cancel` reaches a running Python handler: its `ctx.cancellation` scope is
/// cancelled and the handler stops long before its 20 s wait.
#[test]
fn our_cancellation_reaches_a_running_python_handler() {
    let db = TestDb::new();
    let mut client = db.client();
    create_side_tables(&mut client);
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(NewJob::without_payload("py_long")).unwrap();
    let mut python = python::spawn_script(
        &db,
        "worker.py",
        &json!({"entrypoint": "py_long", "behaviour": "wait_cancel", "wait_s": 20, "timeout_s": 40}),
        Duration::from_secs(45),
    );
    eventually(
        Duration::from_secs(20),
        "the Python handler to start",
        || {
            assert!(
                !python.has_exited(),
                "the Python worker exited before its handler started"
            );
            scalar(
                &mut client,
                &format!(
                    "SELECT count(*) FROM interop_marks WHERE job_id = {id} AND what = 'started'"
                ),
            ) == 1
        },
    );
    // Our other two kinds of event reach the same Python listener before the cancel; it
    // must parse them (check_python_worker: nothing logged at CRITICAL).
    for event in [
        Event::from(HealthCheck::new("ch_pgqueuer")),
        Event::from(TableChanged::new(
            "ch_pgqueuer",
            Operation::Update,
            "pgqueuer",
        )),
    ] {
        client
            .execute("SELECT pg_notify('ch_pgqueuer', $1)", &[&event.to_json()])
            .unwrap();
    }
    assert_eq!(queue.cancel(&[id]).unwrap(), [id]);
    let answer = python.finish().success().json();
    check_python_worker(&answer);
    let seen = &answer["seen"][0];
    assert_eq!(seen["id"], id, "{answer}");
    assert_eq!(seen["cancel_called"], true, "{answer}");
    assert_eq!(seen["cancelled_caught"], true, "{answer}");
    let waited = seen["waited_s"].as_f64().unwrap();
    assert!(waited < 10.0, "the handler waited {waited} s");
    eprintln!("our cancel stopped the Python handler after {waited:.3} s");
    assert_eq!(log_of(&mut client, id), ["queued", "picked", "canceled"]);
}

// 6. Crash recovery ----------------------------------------------------------------------

/// A job held by a Python worker killed mid-handler is re-picked by our worker once its
/// heartbeat is stale, keeping its slot under the limit, and run to success.
#[test]
fn our_worker_recovers_a_job_from_a_killed_python_worker() {
    let db = TestDb::new();
    let mut client = db.client();
    create_side_tables(&mut client);
    let pool = db.pool(4);
    let id = Queue::new(pool.clone())
        .enqueue(NewJob::without_payload("orphan"))
        .unwrap();
    let mut python = python::spawn_script(
        &db,
        "worker.py",
        &json!({"entrypoint": "orphan", "behaviour": "wait_cancel", "concurrency_limit": 1,
                "wait_s": 30, "timeout_s": 40}),
        Duration::from_secs(45),
    );
    eventually(
        Duration::from_secs(20),
        "the Python handler to start",
        || {
            assert!(!python.has_exited(), "the Python worker exited early");
            scalar(
                &mut client,
                &format!(
                    "SELECT count(*) FROM interop_marks WHERE job_id = {id} AND what = 'started'"
                ),
            ) == 1
        },
    );
    python.kill();
    let (owner, slot): (Option<uuid::Uuid>, Option<i64>) = {
        let row = client
            .query_one(
                "SELECT queue_manager_id, slot FROM pgqueuer WHERE id = $1",
                &[&id],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert!(owner.is_some(), "the killed worker's job is not picked");
    assert_eq!(slot, Some(0), "Python took slot 0 of the limit");

    let (tx, rx) = crossbeam_channel::bounded(1);
    let worker = Worker::builder(pool)
        .threads(1)
        .heartbeat_timeout(Duration::from_secs(1))
        .dequeue_timeout(Duration::from_millis(200))
        .entrypoint_with(
            "orphan",
            EntrypointOptions::new().concurrency_limit(1),
            move |job, _ctx| {
                let _ = tx.send(job.clone());
                Ok(())
            },
        )
        .build()
        .unwrap();
    let ours = worker.id();
    let running = worker.start().unwrap();
    let job = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("our worker never re-picked the orphaned job");
    assert_eq!(
        (job.id, job.slot),
        (id, slot),
        "the re-pick must keep the slot"
    );
    assert_eq!(job.queue_manager_id, Some(ours));
    assert_ne!(owner, Some(ours));
    let summary = running.join().unwrap();
    assert_eq!(summary.succeeded, 1);
    assert_eq!(
        log_of(&mut client, id),
        ["queued", "picked", "picked", "successful"]
    );
}

/// A job claimed by a Rust process that died (no heartbeats) is re-picked by a Python
/// `QueueManager` once stale, keeping its slot, and run to success.
#[test]
fn python_recovers_a_job_our_dead_claimer_left() {
    let db = TestDb::new();
    let pool = db.pool(2);
    let id = Queue::new(pool.clone())
        .enqueue(NewJob::new("abandoned", b"still here".to_vec()))
        .unwrap();
    let dead = Claimer::builder()
        .entrypoint("abandoned", 1)
        .build()
        .unwrap();
    let claim = dead.claim(&mut pool.get().unwrap(), 1).unwrap();
    assert_eq!(claim.jobs.len(), 1);
    let slot = claim.jobs[0].slot;
    assert_eq!(slot, Some(0));
    // Stale for a 1 s heartbeat timeout by the time Python's first dequeue runs.
    std::thread::sleep(Duration::from_millis(1_100));
    let answer = python_worker(
        &db,
        &json!({"entrypoint": "abandoned", "behaviour": "echo", "concurrency_limit": 1,
                "heartbeat_timeout_s": 1}),
    );
    let seen = answer["seen"].as_array().unwrap();
    assert_eq!(seen.len(), 1, "{answer}");
    assert_eq!(seen[0]["id"], id);
    assert_eq!(
        seen[0]["slot"],
        json!(slot),
        "the re-pick must keep the slot"
    );
    assert_eq!(seen[0]["payload_hex"], hex(b"still here"));
    assert_eq!(
        log_of(&mut db.client(), id),
        ["queued", "picked", "picked", "successful"]
    );
}

// 7. Statistics --------------------------------------------------------------------------

/// Python's `pgq dashboard` (printed once) aggregates the log rows our worker wrote and
/// shows our entrypoint with every job `successful`.
#[test]
fn python_dashboard_shows_our_jobs() {
    const JOBS: usize = 25;
    let db = TestDb::new();
    let pool = db.pool(4);
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new("rs_stats", i.to_string().into_bytes()))
        .collect();
    Queue::new(pool.clone()).enqueue_many(&jobs).unwrap();
    let summary = drain(&pool, "rs_stats", EntrypointOptions::new());
    assert_eq!(summary.succeeded, JOBS as u64);

    let out = python::pgq(&db, &["dashboard", "--limit", "100"]).success();
    // Rows look like `| <created> | <count> | <entrypoint> | <status> | <priority> |`.
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for line in out.stdout.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() == 7 && cells[3] == "rs_stats" {
            *counts.entry(cells[4].to_owned()).or_default() += cells[2].parse::<i64>().unwrap();
        }
    }
    eprintln!(
        "pgq dashboard counts for rs_stats: {counts:?}\n{}",
        out.stdout
    );
    let expected = i64::try_from(JOBS).unwrap();
    assert_eq!(counts.get("successful"), Some(&expected), "{out:?}");
    assert_eq!(counts.get("queued"), Some(&expected), "{out:?}");
    assert_eq!(counts.get("picked"), Some(&expected), "{out:?}");
}
