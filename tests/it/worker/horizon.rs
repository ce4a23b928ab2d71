//! Through a held horizon: another session holds a snapshot open, so that no row version
//! that died since can be removed, and the claims read from their floors past the index
//! entries of the jobs already run. What comes to lie behind a floor still starts within
//! the sweeps' bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgqueuer::{Entrypoint, JobId, NewJob, OnFailure, Queue, Retry, Worker};

use crate::harness::{TestDb, eventually, scalar};

/// The most a job behind a floor may wait once it is due: a sweep comes at least every
/// second while sweeps are cheap (a few milliseconds here), plus a claim's round trip and
/// the machine's load.
const BOUND: Duration = Duration::from_secs(2);

/// A snapshot held open in a session of its own, as a report or a forgotten `BEGIN`.
fn hold_snapshot(db: &TestDb) -> postgres::Client {
    let mut holder = db.client();
    holder
        .batch_execute(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current(); \
             SELECT count(*) FROM pgqueuer;",
        )
        .unwrap();
    holder
}

/// While a snapshot is held and 10,000 jobs have run since (their index entries dead but
/// kept), with a steady trickle moving the worker's floors on: a retried job, a requeued
/// held job, a job whose enqueue committed after newer jobs ran, a deferred job coming
/// due and a higher-priority job each start within 2 s of being due, and every job runs
/// once.
#[test]
fn jobs_behind_a_floor_start_within_the_bound_while_a_snapshot_is_held() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(6);
    let queue = Queue::new(pool.clone());
    let started: Arc<Mutex<HashMap<JobId, Vec<Instant>>>> = Arc::default();
    let worker = {
        let started = started.clone();
        Worker::builder(pool.clone())
            .threads(4)
            .batch_size(10)
            .entrypoint("h", {
                let started = started.clone();
                move |job, _ctx| {
                    started
                        .lock()
                        .unwrap()
                        .entry(job.id)
                        .or_default()
                        .push(Instant::now());
                    if job.payload_str() == Some("retry") && job.attempts == 0 {
                        return Err(Retry::after(Duration::ZERO).reason("once more").into());
                    }
                    Ok(())
                }
            })
            .entrypoint(
                Entrypoint::new("held").on_failure(OnFailure::Hold),
                move |job, _ctx| {
                    let mut started = started.lock().unwrap();
                    let runs = started.entry(job.id).or_default();
                    runs.push(Instant::now());
                    if runs.len() == 1 {
                        return Err("held for a requeue".into());
                    }
                    Ok(())
                },
            )
            .build()
            .unwrap()
            .start()
            .unwrap()
    };
    let _holder = hold_snapshot(&db);
    // 10,000 jobs run behind the horizon.
    for _ in 0..10 {
        let jobs: Vec<NewJob> = (0..1_000).map(|_| NewJob::new("h", "x")).collect();
        queue.enqueue_many(&jobs).unwrap();
    }
    eventually(Duration::from_secs(120), "10,000 jobs run", || {
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'h'",
        ) == 0
    });
    // A trickle that keeps the floors moving on.
    let trickling = Arc::new(AtomicBool::new(true));
    let trickle = {
        let (queue, trickling) = (queue.clone(), trickling.clone());
        std::thread::spawn(move || {
            let mut ids = Vec::new();
            while trickling.load(Ordering::SeqCst) {
                ids.extend(
                    queue
                        .enqueue_many(&[NewJob::new("h", "x"), NewJob::new("h", "x")])
                        .unwrap(),
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            ids
        })
    };
    let ran = |id: JobId, n: usize| {
        let started = started.clone();
        move || {
            started
                .lock()
                .unwrap()
                .get(&id)
                .is_some_and(|r| r.len() >= n)
        }
    };
    let runs = |id: JobId| {
        started
            .lock()
            .unwrap()
            .get(&id)
            .cloned()
            .unwrap_or_default()
    };
    let mut checks: Vec<(&str, Duration)> = Vec::new();

    // A retry keeps its id, behind the floor by then.
    let retried = queue.enqueue(NewJob::new("h", "retry")).unwrap();
    eventually(
        Duration::from_secs(30),
        "the retried job runs twice",
        ran(retried, 2),
    );
    let r = runs(retried);
    checks.push(("retried", r[1] - r[0]));

    // A held job requeued.
    let held = queue.enqueue(NewJob::new("held", "x")).unwrap();
    eventually(Duration::from_secs(30), "the job is held", || {
        scalar::<i64>(
            &mut client,
            &format!("SELECT count(*) FROM pgqueuer WHERE id = {held} AND status = 'failed'"),
        ) == 1
    });
    std::thread::sleep(Duration::from_millis(300));
    let requeued_at = Instant::now();
    assert_eq!(queue.requeue_failed(&[held]).unwrap(), vec![held]);
    eventually(
        Duration::from_secs(30),
        "the requeued job runs",
        ran(held, 2),
    );
    checks.push(("requeued", runs(held)[1] - requeued_at));

    // An enqueue that commits after newer jobs ran: its id is older than theirs.
    let mut late = db.client();
    let mut tx = late.transaction().unwrap();
    let late_id: JobId = tx
        .query_one(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status) \
             VALUES (0, 'h', 'late', 'queued') RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    let newer = queue
        .enqueue_many(&(0..20).map(|_| NewJob::new("h", "x")).collect::<Vec<_>>())
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "newer jobs run",
        ran(*newer.last().unwrap(), 1),
    );
    std::thread::sleep(Duration::from_millis(300));
    tx.commit().unwrap();
    let committed_at = Instant::now();
    eventually(
        Duration::from_secs(30),
        "the late job runs",
        ran(late_id, 1),
    );
    checks.push(("committed late", runs(late_id)[0] - committed_at));

    // A deferred job coming due.
    let deferred = queue
        .enqueue(NewJob::new("h", "x").execute_after(Duration::from_secs(2)))
        .unwrap();
    let due_at = Instant::now() + Duration::from_secs(2);
    eventually(
        Duration::from_secs(30),
        "the deferred job runs",
        ran(deferred, 1),
    );
    checks.push((
        "deferred",
        runs(deferred)[0].saturating_duration_since(due_at),
    ));

    // A higher priority than the floors'.
    let urgent_at = Instant::now();
    let urgent = queue.enqueue(NewJob::new("h", "x").priority(10)).unwrap();
    eventually(
        Duration::from_secs(30),
        "the urgent job runs",
        ran(urgent, 1),
    );
    checks.push(("higher priority", runs(urgent)[0] - urgent_at));

    trickling.store(false, Ordering::SeqCst);
    let trickled = trickle.join().unwrap();
    eventually(Duration::from_secs(60), "the trickle runs", || {
        trickled.iter().all(|id| ran(*id, 1)())
    });
    worker.shutdown_handle().shutdown();
    worker.join().unwrap();
    eprintln!("behind a floor, waited: {checks:?}");
    for (what, waited) in &checks {
        assert!(*waited <= BOUND, "the {what} job waited {waited:?}");
    }
    let started = started.lock().unwrap();
    for id in &trickled {
        assert_eq!(started[id].len(), 1, "job {id} ran once");
    }
}

/// `pgq health` names what holds the horizon, and says DEGRADED (`horizon_held`): a
/// long transaction by its `application_name` and state (and not before it is older
/// than `--horizon-after`), a logical replication slot, and a prepared transaction, each
/// by name, on a server of its own (`wal_level = logical`, prepared transactions on).
/// `/metrics` exports the horizon's age and the queue table's dead tuples.
#[test]
fn health_names_what_holds_the_horizon() {
    let server = crate::harness::Throwaway::with_conf(
        &[],
        &[
            "wal_level = logical",
            "max_prepared_transactions = 4",
            "max_replication_slots = 4",
        ],
    )
    .expect("a throwaway server");
    let mut admin = server.admin();
    admin.batch_execute("CREATE DATABASE h").unwrap();
    let dsn = server.dsn("h");
    let mut client = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
    pgqueuer::upgrade(&mut client).unwrap();
    let health = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["health", "--json"];
        all.extend_from_slice(args);
        let out = std::process::Command::new(crate::harness::pgq_binary())
            .args(&all)
            .env("PGQUEUER_DSN", &dsn)
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let horizon_reason = |h: &serde_json::Value| -> Option<String> {
        h["reasons"]
            .as_array()?
            .iter()
            .find(|r| r["code"] == "horizon_held")
            .map(|r| r["message"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(horizon_reason(&health(&[])), None, "nothing holds it yet");

    let mut report = server.server.config("h");
    report.application_name("nightly-report");
    let mut report = report.connect(postgres::NoTls).unwrap();
    report
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pgqueuer;")
        .unwrap();
    assert_eq!(
        horizon_reason(&health(&["--horizon-xid-after", "100000000"])),
        None,
        "younger than five minutes"
    );
    std::thread::sleep(Duration::from_millis(1_200));
    let h = health(&["--horizon-after", "1s", "--horizon-xid-after", "100000000"]);
    assert_eq!(h["verdict"], "DEGRADED", "{h}");
    let named = horizon_reason(&h).expect("the session is named");
    assert!(
        named.contains("nightly-report") && named.contains("idle in transaction"),
        "{named}"
    );
    report.batch_execute("COMMIT").unwrap();

    client
        .batch_execute(
            "SELECT pg_create_logical_replication_slot('cdc_slot', 'test_decoding');
             CREATE TABLE orders (id int);
             BEGIN; INSERT INTO orders VALUES (1); PREPARE TRANSACTION 'forgotten-2pc';",
        )
        .unwrap();
    let h = health(&["--horizon-after", "0s", "--horizon-xid-after", "0"]);
    let named = horizon_reason(&h).expect("named");
    let all = h.to_string();
    assert!(
        all.contains("cdc_slot") || named.contains("cdc_slot"),
        "the slot: {all}"
    );
    assert!(
        all.contains("forgotten-2pc") || named.contains("forgotten-2pc"),
        "the prepared transaction: {all}"
    );
    let holders = pgqueuer::ops::horizon_holders(&mut client).unwrap();
    let kinds: Vec<&str> = holders.iter().map(|h| h.kind.as_str()).collect();
    assert!(
        kinds.contains(&"replication_slot") && kinds.contains(&"prepared_transaction"),
        "{kinds:?}"
    );
    let metrics = pgqueuer::ops::prometheus_text(
        &mut client,
        &pgqueuer::Settings::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    assert!(metrics.contains("pgqueuer_horizon_xid_age "), "{metrics}");
    assert!(
        metrics.contains("pgqueuer_horizon_held_seconds "),
        "{metrics}"
    );
    assert!(metrics.contains("pgqueuer_queue_dead_tuples "), "{metrics}");
    // Each on its own: a batch of statements is one transaction block.
    client
        .batch_execute("ROLLBACK PREPARED 'forgotten-2pc'")
        .unwrap();
    client
        .batch_execute("SELECT pg_drop_replication_slot('cdc_slot')")
        .unwrap();
}
