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

/// Runs 5,000 jobs of `entrypoint` through a worker of `pool`, so that a held snapshot
/// keeps their index entries: what a claim from the top would walk.
fn dead_behind(db: &TestDb, entrypoint: &str) {
    let queue = Queue::new(db.pool(2));
    for _ in 0..5 {
        let jobs: Vec<NewJob> = (0..1_000).map(|_| NewJob::new(entrypoint, "x")).collect();
        queue.enqueue_many(&jobs).unwrap();
    }
    Worker::builder(db.pool(6))
        .threads(4)
        .entrypoint(entrypoint, |_job, _ctx| Ok(()))
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
}

/// While a snapshot is held, a Python PgQueuer 1.6.0 worker and a Rust worker share an
/// entrypoint limited to 3: 300 jobs each run once, and no more than 3 handlers ever run
/// at once (swept from runs on the database clock).
#[test]
fn limits_stay_exact_with_python_workers_while_a_snapshot_is_held() {
    let db = TestDb::new();
    let mut client = db.client();
    crate::limits::create_runs_table(&mut client);
    let _holder = hold_snapshot(&db);
    dead_behind(&db, "ltd");
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new("ltd", format!("{i}")))
        .collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    let python = crate::python::spawn_script(
        &db,
        "worker.py",
        &serde_json::json!({
            "entrypoint": "ltd", "behaviour": "record_run", "concurrency_limit": 3,
            "sleep_s": 0.02, "timeout_s": 120, "name": "py",
        }),
        Duration::from_secs(150),
    );
    // The Rust worker starts once Python runs jobs: started together, Rust (up in
    // milliseconds, Python in seconds) could run all 300 before Python took one.
    eventually(
        Duration::from_secs(60),
        "the Python worker to run a job",
        || {
            scalar::<i64>(
                &mut client,
                "SELECT count(*) FROM interop_runs WHERE worker = 'py'",
            ) > 0
        },
    );
    let pool = db.pool(6);
    let record = db.pool(4);
    let rust = Worker::builder(pool)
        .threads(4)
        .entrypoint(
            Entrypoint::new("ltd").concurrency_limit(3),
            move |job, _ctx| {
                let mut conn = record.get()?;
                let started: std::time::SystemTime =
                    conn.query_one("SELECT clock_timestamp()", &[])?.get(0);
                std::thread::sleep(Duration::from_millis(20));
                conn.execute(
                    "INSERT INTO interop_runs VALUES ($1, $2, clock_timestamp(), 'rust')",
                    &[&job.id, &started],
                )?;
                Ok(())
            },
        )
        .build()
        .unwrap()
        .start()
        .unwrap();
    eventually(Duration::from_secs(120), "300 jobs run", || {
        crate::faults::checks::unfinished(&mut client, &ids).is_empty()
    });
    rust.shutdown_handle().shutdown();
    rust.join().unwrap();
    python.finish();
    let (runs, peak, python_runs): (i64, i64, i64) = {
        let row = client
            .query_one(
                "WITH r AS (SELECT * FROM interop_runs WHERE job_id = ANY($1)),
                      ev AS (SELECT started AS t, 1 AS d FROM r UNION ALL SELECT finished, -1 FROM r)
                 SELECT (SELECT count(*) FROM r),
                        (SELECT coalesce(max(n), 0) FROM (SELECT sum(d) OVER (ORDER BY t, d) AS n FROM ev) s)::bigint,
                        (SELECT count(*) FROM r WHERE worker = 'py')",
                &[&ids],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    eprintln!("{runs} runs, {python_runs} by Python, at most {peak} at once");
    assert_eq!(runs, 300, "every job ran once");
    assert!(python_runs > 0, "the Python worker took part");
    assert!(peak <= 3, "{peak} handlers ran at once");
}

/// While a snapshot is held, a worker process is SIGKILLed holding a long job: a worker
/// of this process re-picks it once its heartbeat is stale (timeout 2 s), within the
/// stale looks' period of it.
#[test]
fn a_killed_workers_job_is_rescued_while_a_snapshot_is_held() {
    let db = TestDb::new();
    let mut client = db.client();
    let _holder = hold_snapshot(&db);
    dead_behind(&db, "long");
    let mut victim = crate::faults::process::Proc::spawn(
        "victim",
        &db.dsn(),
        &crate::faults::process::worker_args(
            &[("long", 0, 60_000, 0)],
            &["--threads", "1", "--heartbeat-timeout", "2"],
        ),
    );
    victim.wait_running(Duration::from_secs(30));
    let id = Queue::new(db.pool(2))
        .enqueue(NewJob::new("long", "x"))
        .unwrap();
    eventually(Duration::from_secs(30), "the victim picks the job", || {
        scalar::<i64>(
            &mut client,
            &format!("SELECT count(*) FROM pgqueuer WHERE id = {id} AND status = 'picked'"),
        ) == 1
    });
    victim.kill9();
    let killed = Instant::now();
    let (rescued_tx, rescued_rx) = crossbeam_channel::bounded(1);
    let rescuer = Worker::builder(db.pool(6))
        .threads(2)
        .heartbeat_timeout(Duration::from_secs(2))
        .entrypoint("long", move |_job, _ctx| {
            let _ = rescued_tx.try_send(Instant::now());
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    let rescued = rescued_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the killed worker's job was rescued");
    let took = rescued - killed;
    eprintln!("rescued {took:?} after the kill");
    // Stale 2 s after its last beat, looked for every second.
    assert!(
        took < Duration::from_secs(8),
        "rescued {took:?} after the kill"
    );
    rescuer.shutdown_handle().shutdown();
    rescuer.join().unwrap();
    assert_eq!(
        crate::harness::log_of(&mut client, id)
            .last()
            .map(String::as_str),
        Some("successful")
    );
}

/// The dashboard's overview shows a banner naming what holds the horizon (by its
/// `application_name`) once it has held it past `WebOptions::horizon_after`, and none
/// before.
#[test]
fn the_overview_names_a_long_held_horizon() {
    let db = TestDb::new();
    let mut options = pgqueuer::web::WebOptions::default();
    options.horizon_after = Duration::from_secs(2);
    let web = crate::web::dashboard(&db, options);
    let mut report = db.config();
    report.application_name("old-report");
    let mut report = report.connect(postgres::NoTls).unwrap();
    report
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pgqueuer;")
        .unwrap();
    let page = crate::web::get(web.addr(), "/");
    assert_eq!(page.status, 200);
    assert!(
        !page.body.contains("id=\"horizon\""),
        "a young snapshot is no banner"
    );
    std::thread::sleep(Duration::from_millis(2_500));
    let page = crate::web::get(web.addr(), "/");
    assert!(
        page.body.contains("id=\"horizon\"") && page.body.contains("old-report"),
        "{}",
        page.body
    );
    report.batch_execute("COMMIT").unwrap();
    let page = crate::web::get(web.addr(), "/");
    assert!(
        !page.body.contains("id=\"horizon\""),
        "gone with the snapshot"
    );
}
