//! The health verdict, against real worker processes: a healthy fleet is OK, a
//! SIGSTOPped worker holding due jobs is STALLED, a SIGKILLed worker's stale jobs are
//! DEGRADED until another worker rescues them, a backlog outpacing throughput is
//! DEGRADED; each reason found from the database alone; and a worker whose completer
//! cannot write says it is unhealthy.

use std::process::Command;
use std::time::Duration;

use pgqueuer::ops::{Health, HealthOptions, Verdict};
use pgqueuer::{NewJob, Queue, Settings, Worker};

use crate::faults::process::{Proc, worker_args};
use crate::harness::{TestDb, eventually, pgq_binary, scalar};

fn check(db: &TestDb, options: &HealthOptions) -> Health {
    pgqueuer::ops::health(&mut db.client(), &Settings::default(), options).unwrap()
}

fn options(stall: f64, stale: f64) -> HealthOptions {
    let mut o = HealthOptions::default();
    o.stall_after = Duration::from_secs_f64(stall);
    o.stale_after = Duration::from_secs_f64(stale);
    o
}

fn codes(health: &Health) -> Vec<&'static str> {
    health.reasons.iter().map(|r| r.code).collect()
}

/// `pgq health` with `args`: its exit code and stdout.
fn pgq_health(db: &TestDb, args: &[&str]) -> (i32, String) {
    let out = Command::new(pgq_binary())
        .arg("--dsn")
        .arg(db.dsn())
        .arg("health")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn signal(proc: &Proc, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name}");
}

fn picked(db: &TestDb) -> i64 {
    scalar(
        &mut db.client(),
        "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
    )
}

/// A worker that has run every job: OK, with no reason, from the library, `pgq health`
/// (exit 0) and the dashboard's `/healthz?deep=1` (200).
#[test]
fn a_healthy_fleet_is_ok() {
    let db = TestDb::new();
    let mut worker = Proc::spawn(
        "healthy",
        &db.dsn(),
        &worker_args(&[("h_ok", 0, 1, 0)], &["--threads", "2"]),
    );
    worker.wait_running(Duration::from_secs(20));
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..30)
        .map(|i| NewJob::new("h_ok", format!("{i}")))
        .collect();
    queue.enqueue_many(&jobs).unwrap();
    eventually(Duration::from_secs(30), "every job done", || {
        scalar::<i64>(&mut db.client(), "SELECT count(*) FROM pgqueuer") == 0
    });
    let health = check(&db, &HealthOptions::default());
    assert_eq!(health.verdict, Verdict::Ok, "{health}");
    assert!(health.reasons.is_empty());
    assert_eq!(health.completions, 30);
    let (code, out) = pgq_health(&db, &["--json"]);
    assert_eq!(code, 0, "{out}");
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(json["verdict"], "OK");
    let dashboard = pgqueuer::web::Dashboard::new(db.pool(2))
        .serve("127.0.0.1:0")
        .unwrap();
    let answer = crate::web::get(dashboard.addr(), "/healthz?deep=1");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.body.contains("\"verdict\":\"OK\""),
        "{}",
        answer.body
    );
    dashboard.join();
    worker.terminate();
}

/// A worker frozen with SIGSTOP while it holds due jobs and others wait: nothing moves,
/// and the verdict is STALLED (`pgq health` exits 2, `/healthz?deep=1` answers 503).
#[test]
fn a_sigstopped_worker_holding_due_jobs_is_stalled() {
    let db = TestDb::new();
    let mut worker = Proc::spawn(
        "frozen",
        &db.dsn(),
        &worker_args(
            &[("h_stop", 0, 60_000, 0)],
            &["--threads", "2", "--heartbeat-timeout", "2"],
        ),
    );
    worker.wait_running(Duration::from_secs(20));
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..4)
        .map(|i| NewJob::new("h_stop", format!("{i}")))
        .collect();
    queue.enqueue_many(&jobs).unwrap();
    eventually(Duration::from_secs(20), "two jobs picked", || {
        picked(&db) == 2
    });
    // Running, it is healthy: it holds jobs with fresh heartbeats.
    assert_ne!(check(&db, &options(3.0, 3.0)).verdict, Verdict::Stalled);
    signal(&worker, "STOP");
    let mut health = check(&db, &options(3.0, 3.0));
    eventually(Duration::from_secs(30), "STALLED", || {
        health = check(&db, &options(3.0, 3.0));
        health.verdict == Verdict::Stalled
    });
    assert_eq!(codes(&health)[0], "stalled", "{health}");
    let (code, out) = pgq_health(&db, &["--stall-after", "3s", "--stale-after", "3s"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("STALLED"), "{out}");
    signal(&worker, "CONT");
    worker.kill9();
}

/// A SIGKILLed worker's jobs go stale: DEGRADED (stale jobs), until an idle worker takes
/// them over after its heartbeat timeout and runs them: OK again.
#[test]
fn a_killed_workers_stale_jobs_degrade_until_they_are_rescued() {
    let db = TestDb::new();
    let args = worker_args(
        &[("h_kill", 0, 1_500, 0)],
        &["--threads", "2", "--heartbeat-timeout", "4"],
    );
    let mut victim = Proc::spawn("victim", &db.dsn(), &args);
    victim.wait_running(Duration::from_secs(20));
    let queue = Queue::new(db.pool(2));
    queue
        .enqueue_many(&[NewJob::new("h_kill", "a"), NewJob::new("h_kill", "b")])
        .unwrap();
    eventually(Duration::from_secs(20), "both jobs picked", || {
        picked(&db) == 2
    });
    let mut rescuer = Proc::spawn("rescuer", &db.dsn(), &args);
    rescuer.wait_running(Duration::from_secs(20));
    victim.kill9();
    // Heartbeats every 2 s: older than 2.5 s is stale.
    let quick = options(60.0, 2.5);
    let mut health = check(&db, &quick);
    eventually(Duration::from_secs(30), "DEGRADED by stale jobs", || {
        health = check(&db, &quick);
        health.verdict == Verdict::Degraded
    });
    assert_eq!(codes(&health), ["stale_jobs"], "{health}");
    eventually(Duration::from_secs(60), "the rescue, and OK", || {
        health = check(&db, &quick);
        health.verdict == Verdict::Ok
            && scalar::<i64>(&mut db.client(), "SELECT count(*) FROM pgqueuer") == 0
    });
    rescuer.terminate();
}

/// Jobs arriving much faster than one slow thread finishes them: DEGRADED, the backlog
/// growing, while work still moves (not STALLED).
#[test]
fn a_backlog_outpacing_throughput_degrades() {
    let db = TestDb::new();
    let mut worker = Proc::spawn(
        "slow",
        &db.dsn(),
        &worker_args(&[("h_slow", 0, 300, 0)], &["--threads", "1"]),
    );
    worker.wait_running(Duration::from_secs(20));
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| NewJob::new("h_slow", format!("{i}")))
        .collect();
    queue.enqueue_many(&jobs).unwrap();
    eventually(Duration::from_secs(20), "the first job picked", || {
        picked(&db) == 1
    });
    let health = check(&db, &HealthOptions::default());
    assert_eq!(health.verdict, Verdict::Degraded, "{health}");
    assert_eq!(codes(&health), ["backlog_growing"], "{health}");
    let (code, _) = pgq_health(&db, &[]);
    assert_eq!(code, 1);
    worker.kill9();
}

/// Each remaining reason, made in the database: held failures and slots above a declared
/// limit are DEGRADED; a schema without the slot index (which `verify` rejects, so no
/// worker starts) is STALLED.
#[test]
fn held_failures_excess_slots_and_a_broken_schema_are_found() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ids = queue
        .enqueue_many(&[NewJob::new("h_limited", "a"), NewJob::new("h_failed", "b")])
        .unwrap();
    let mut client = db.client();
    client
        .execute(
            "UPDATE pgqueuer SET status = 'picked', queue_manager_id = gen_random_uuid(), \
             slot = 3, heartbeat = now() WHERE id = $1",
            &[&ids[0]],
        )
        .unwrap();
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&ids[1]],
        )
        .unwrap();
    let mut o = HealthOptions::default();
    o.limits = vec![("h_limited".into(), 2)];
    let health = check(&db, &o);
    assert_eq!(health.verdict, Verdict::Degraded, "{health}");
    let mut found = codes(&health);
    found.sort_unstable();
    assert_eq!(found, ["failed_jobs_held", "over_limit"], "{health}");
    let (code, out) = pgq_health(&db, &["--limit", "h_limited=2", "--json"]);
    assert_eq!(code, 1, "{out}");
    client
        .batch_execute("DROP INDEX pgqueuer_picked_slot_idx")
        .unwrap();
    let health = check(&db, &HealthOptions::default());
    assert_eq!(health.verdict, Verdict::Stalled, "{health}");
    assert_eq!(codes(&health), ["schema"], "{health}");
}

/// A worker whose completer cannot write (every outcome refused with a serialization
/// failure, which a retry may cure) says it is unhealthy, naming the completer, and
/// healthy again once its writes go through.
#[test]
fn a_worker_whose_completer_cannot_write_reports_itself_unhealthy() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(
            "CREATE FUNCTION refuse_all() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.status = 'successful' THEN
                     RAISE EXCEPTION 'not now' USING ERRCODE = '40001';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_all BEFORE INSERT ON pgqueuer_log
                 FOR EACH ROW EXECUTE FUNCTION refuse_all();",
        )
        .unwrap();
    let pool = db.pool(4);
    let worker = Worker::builder(pool.clone())
        .threads(2)
        .entrypoint("h_unwritten", |_job, _ctx| Ok(()))
        .build()
        .unwrap()
        .start()
        .unwrap();
    eventually(Duration::from_secs(20), "a healthy start", || {
        worker.health().healthy
    });
    Queue::new(pool)
        .enqueue(NewJob::new("h_unwritten", "x"))
        .unwrap();
    let mut health = worker.health();
    eventually(
        Duration::from_secs(30),
        "the worker to call itself unhealthy",
        || {
            health = worker.health();
            !health.healthy
        },
    );
    assert!(
        health
            .problems
            .iter()
            .any(|p| p.contains("outcomes have not been written")),
        "{health:?}"
    );
    client
        .batch_execute("DROP TRIGGER refuse_all ON pgqueuer_log")
        .unwrap();
    eventually(Duration::from_secs(30), "healthy once written", || {
        worker.health().healthy
    });
    worker.join().unwrap();
}

/// `pgq health --probe liveness` passes (exit 0) with held failures, stale jobs and a
/// growing backlog, which are a person's to read, and fails with the schema missing or
/// the database out of reach; `--probe readiness` fails where work stalls. The dashboard's
/// `/healthz?probe=` answers 200 or 503 the same way.
#[test]
fn probes_fail_only_for_what_a_restart_or_a_drain_of_traffic_can_help() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status) \
             SELECT 0, 'held', 'x', 'failed' FROM generate_series(1, 5);
             INSERT INTO pgqueuer (priority, entrypoint, payload, status, heartbeat, queue_manager_id) \
             VALUES (0, 'gone', 'x', 'picked', now() - interval '1 hour', gen_random_uuid());
             INSERT INTO pgqueuer (priority, entrypoint, payload, status, execute_after) \
             SELECT 0, 'waiting', 'x', 'queued', now() - interval '10 minutes' FROM generate_series(1, 50);
             INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint) \
             SELECT g, 'queued', 0, 'waiting' FROM generate_series(1, 50) g;",
        )
        .unwrap();
    let (code, out) = pgq_health(&db, &[]);
    assert_ne!(code, 0, "the plain check reports it: {out}");
    let (code, out) = pgq_health(&db, &["--probe", "liveness"]);
    assert_eq!(
        code, 0,
        "liveness passes with held failures and a backlog: {out}"
    );
    assert!(out.contains("failed_jobs_held"), "and says so: {out}");
    let (code, out) = pgq_health(&db, &["--probe", "readiness", "--stall-after", "1s"]);
    assert_eq!(code, 1, "readiness fails while due work stalls: {out}");

    let web = crate::web::dashboard(&db, pgqueuer::web::WebOptions::default());
    assert_eq!(
        crate::web::get(web.addr(), "/healthz?probe=liveness").status,
        200
    );
    assert_eq!(
        crate::web::get(web.addr(), "/healthz?probe=other").status,
        400
    );

    let bare = TestDb::empty();
    let (code, out) = pgq_health(&bare, &["--probe", "liveness"]);
    assert_ne!(code, 0, "no schema, no worker: {out}");
    let out = Command::new(pgq_binary())
        .args([
            "--dsn",
            "postgres://postgres@127.0.0.1:1/none",
            "health",
            "--probe",
            "liveness",
        ])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "the database out of reach");
}
