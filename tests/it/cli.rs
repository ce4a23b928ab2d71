//! The `pgq` program, run as a child process against a real database: every command, its
//! JSON and table output, and its failures (exit status and message).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgqueuer::postgres::Client;
use pgqueuer::{Claimer, NewJob, Outcome, Queue, Settings, Status};
use serde_json::Value;

use crate::claim::insert_jobs;
use crate::harness::TestDb;

/// What one run of `pgq` did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    fn ok(self) -> String {
        assert_eq!(self.code, 0, "pgq failed: {self:?}");
        self.stdout
    }

    /// stdout parsed as JSON, after asserting success.
    fn json(self) -> Vec<Value> {
        let out = self.ok();
        match serde_json::from_str(&out) {
            Ok(Value::Array(items)) => items,
            other => panic!("not a JSON array: {out:?} ({other:?})"),
        }
    }
}

/// `pgq` with a clean environment: only `PGQUEUER_DSN` (when given) says where to go.
fn command(dsn: Option<&str>, args: &[&str]) -> Command {
    let mut c = Command::new(crate::harness::pgq_binary());
    c.args(args);
    for var in [
        "PGQUEUER_DSN",
        "PGDSN",
        "DATABASE_URL",
        "PGQUEUER_PREFIX",
        "PGQUEUER_SCHEMA",
        "PGQUEUER_CHANNEL",
        "PGQUEUER_TABLEFMT",
        "TABLEFMT",
        "PGQUEUER_DURABILITY",
    ] {
        c.env_remove(var);
    }
    if let Some(dsn) = dsn {
        c.env("PGQUEUER_DSN", dsn);
    }
    c
}

fn pgq_env(dsn: Option<&str>, args: &[&str]) -> Run {
    let out = command(dsn, args)
        .stdin(Stdio::null())
        .output()
        .expect("run pgq");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `pgq ARGS` against `db`.
fn pgq(db: &TestDb, args: &[&str]) -> Run {
    pgq_env(Some(&db.dsn()), args)
}

fn scalar<T: for<'a> pgqueuer::postgres::types::FromSql<'a>>(client: &mut Client, sql: &str) -> T {
    client.query_one(sql, &[]).unwrap().get(0)
}

/// The id in "Enqueued job 42.".
fn enqueued_id(stdout: &str) -> i64 {
    stdout
        .trim()
        .strip_prefix("Enqueued job ")
        .and_then(|s| s.strip_suffix('.'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an enqueue message: {stdout:?}"))
}

/// Claims every queued job of `entrypoint` as a worker and ends each with `status`;
/// returns their ids.
fn process(db: &TestDb, entrypoint: &str, status: Status) -> Vec<i64> {
    let pool = db.pool(1);
    let claimer = Claimer::builder()
        .entrypoint(entrypoint, 0)
        .build()
        .unwrap();
    let mut conn = pool.get().unwrap();
    let claim = claimer.claim(&mut conn, 100).unwrap();
    let outcomes: Vec<Outcome> = claim
        .jobs
        .iter()
        .map(|j| Outcome {
            id: j.id,
            status,
            traceback: None,
        })
        .collect();
    claimer.complete(&mut conn, &outcomes).unwrap();
    outcomes.iter().map(|o| o.id).collect()
}

#[test]
fn queue_enqueues_with_priority_delay_and_dedupe() {
    let db = TestDb::new();
    let mut client = db.client();
    let id = enqueued_id(
        &pgq(
            &db,
            &[
                "queue",
                "email",
                "héllo",
                "--priority",
                "5",
                "--delay",
                "60",
            ],
        )
        .ok(),
    );
    let row = client
        .query_one(
            "SELECT payload, priority, execute_after > now() + interval '50 seconds', \
                    execute_after < now() + interval '70 seconds', headers \
               FROM pgqueuer WHERE id = $1",
            &[&id],
        )
        .unwrap();
    assert_eq!(row.get::<_, Vec<u8>>(0), "héllo".as_bytes());
    assert_eq!(row.get::<_, i32>(1), 5);
    assert!(
        row.get::<_, bool>(2) && row.get::<_, bool>(3),
        "delay not applied"
    );
    assert_eq!(
        row.get::<_, Value>(4),
        Value::Null,
        "headers are JSON null as in Python"
    );

    // No payload is SQL NULL; a payload starting with '-' goes after --.
    let bare = enqueued_id(&pgq(&db, &["queue", "ping"]).ok());
    let dashed = enqueued_id(&pgq(&db, &["queue", "ping", "--", "-x"]).ok());
    let payloads: Vec<Option<Vec<u8>>> = client
        .query(
            "SELECT payload FROM pgqueuer WHERE id = ANY($1) ORDER BY id",
            &[&vec![bare, dashed]],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(payloads, [None, Some(b"-x".to_vec())]);

    let first = pgq(&db, &["queue", "report", "--dedupe-key", "daily"]).ok();
    enqueued_id(&first);
    let raised = pgq(&db, &["queue", "report", "--dedupe-key", "daily"]);
    assert_eq!(raised.code, 1, "{raised:?}");
    assert!(
        raised.stderr.contains("duplicate dedupe_key \"daily\""),
        "{raised:?}"
    );
    let skipped = pgq(
        &db,
        &[
            "queue",
            "report",
            "--dedupe-key",
            "daily",
            "--on-conflict",
            "skip",
        ],
    );
    assert_eq!(skipped.code, 0, "{skipped:?}");
    assert!(
        skipped.stdout.starts_with("Skipped: duplicate dedupe_key"),
        "{skipped:?}"
    );
    let reports: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'report'",
    );
    assert_eq!(reports, 1);

    let bad = pgq(&db, &["queue", "report", "--on-conflict", "update"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("--on-conflict"), "{bad:?}");
}

#[test]
fn sizes_cancel_failed_and_requeue() {
    let db = TestDb::new();
    let mut client = db.client();
    assert_eq!(pgq(&db, &["sizes"]).ok().trim(), "The queue is empty.");
    insert_jobs(&mut client, "a", 0, 2);
    let doomed = insert_jobs(&mut client, "b", 3, 1);
    let held = insert_jobs(&mut client, "held", 0, 1);
    process(&db, "held", Status::Failed);

    let sizes = pgq(&db, &["sizes", "--json"]).json();
    let find = |ep: &str| {
        sizes
            .iter()
            .find(|s| s["entrypoint"] == ep)
            .unwrap_or_else(|| panic!("{ep} missing from {sizes:?}"))
            .clone()
    };
    assert_eq!(find("a")["count"], 2);
    assert_eq!(find("b")["priority"], 3);
    assert_eq!(find("held")["status"], "failed");
    let table = pgq(&db, &["sizes"]).ok();
    assert!(
        table.contains("| Entrypoint | Priority | Status | Count |"),
        "{table}"
    );

    // failed: Python's JSON shape, payload reported by size only.
    let failed = pgq(&db, &["failed", "--json"]).json();
    assert_eq!(failed.len(), 1);
    let job = &failed[0];
    assert_eq!(job["id"], held[0]);
    assert_eq!(job["status"], "failed");
    assert_eq!(job["payload_bytes"], 1, "insert_jobs stores one digit");
    assert!(job.get("payload").is_none(), "{job}");
    assert!(job["created"].as_str().unwrap().ends_with('Z'), "{job}");
    for key in [
        "priority",
        "updated",
        "heartbeat",
        "execute_after",
        "entrypoint",
        "attempts",
        "queue_manager_id",
        "slot",
        "headers",
    ] {
        assert!(job.get(key).is_some(), "{key} missing from {job}");
    }
    let listing = pgq(&db, &["failed", "-n", "5"]).ok();
    assert!(
        listing.contains(&format!("{} | held ", held[0])),
        "{listing}"
    );
    assert_eq!(
        pgq(&db, &["failed", "--limit", "0", "--json"]).json().len(),
        0
    );

    // cancel: one cancelled, the held job and an unknown id are named on stderr.
    let cancel = pgq(
        &db,
        &[
            "cancel",
            &doomed[0].to_string(),
            &held[0].to_string(),
            "999999",
        ],
    );
    assert_eq!(cancel.stdout.trim(), "Cancelled 1 job(s).", "{cancel:?}");
    assert!(
        cancel.stderr.contains(&format!("{}, 999999", held[0])),
        "{cancel:?}"
    );
    let canceled: i64 = scalar(
        &mut client,
        &format!(
            "SELECT count(*) FROM pgqueuer_log WHERE job_id = {} AND status = 'canceled'",
            doomed[0]
        ),
    );
    assert_eq!(canceled, 1);

    // requeue: the held job goes back, the unknown id is named.
    let requeue = pgq(&db, &["requeue", &held[0].to_string(), "999999"]);
    assert_eq!(requeue.stdout.trim(), "Re-queued 1 job(s).", "{requeue:?}");
    assert!(requeue.stderr.contains("999999"), "{requeue:?}");
    let status: String = scalar(
        &mut client,
        &format!("SELECT status::text FROM pgqueuer WHERE id = {}", held[0]),
    );
    assert_eq!(status, "queued");
    assert_eq!(pgq(&db, &["failed"]).ok().trim(), "No failed jobs.");

    for bad in [
        &["cancel"][..],
        &["cancel", "x"],
        &["requeue", "-3"],
        &["requeue", "0"],
    ] {
        let run = pgq(&db, bad);
        assert_eq!(run.code, 2, "{bad:?}: {run:?}");
    }
}

#[test]
fn stale_workers_and_backlog() {
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "slow", 0, 2);
    insert_jobs(&mut client, "waiting", 0, 3);
    let pool = db.pool(1);
    let claimer = Claimer::builder().entrypoint("slow", 0).build().unwrap();
    let claimed = claimer.claim(&mut pool.get().unwrap(), 10).unwrap().jobs;
    assert_eq!(claimed.len(), 2);
    client
        .execute(
            "UPDATE pgqueuer SET heartbeat = now() - interval '10 minutes' WHERE id = $1",
            &[&claimed[0].id],
        )
        .unwrap();
    client
        .execute(
            "UPDATE pgqueuer SET created = now() - interval '1 hour' WHERE entrypoint = 'waiting'",
            &[],
        )
        .unwrap();

    let stale = pgq(&db, &["stale", "--json"]).json();
    assert_eq!(
        stale.len(),
        1,
        "only the job without heartbeat for 10 min: {stale:?}"
    );
    assert_eq!(stale[0]["id"], claimed[0].id);
    assert_eq!(
        stale[0]["queue_manager_id"],
        claimer.worker_id().to_string()
    );
    let seconds = stale[0]["seconds_since_heartbeat"].as_f64().unwrap();
    assert!((599.0..700.0).contains(&seconds), "{seconds}");
    assert_eq!(pgq(&db, &["stale", "-t", "0", "--json"]).json().len(), 2);
    assert_eq!(
        pgq(&db, &["stale", "-t", "0", "-n", "1", "--json"])
            .json()
            .len(),
        1
    );
    assert_eq!(
        pgq(&db, &["stale", "--threshold", "3600"]).ok().trim(),
        "No stale jobs."
    );
    let table = pgq(&db, &["stale"]).ok();
    assert!(table.contains("Seconds since heartbeat"), "{table}");
    assert!(table.contains(&claimer.worker_id().to_string()), "{table}");

    let workers = pgq(&db, &["workers", "--json"]).json();
    assert_eq!(workers.len(), 1);
    assert_eq!(
        workers[0]["queue_manager_id"],
        claimer.worker_id().to_string()
    );
    assert_eq!(workers[0]["active_jobs"], 2);
    assert_eq!(workers[0]["entrypoints"], serde_json::json!(["slow"]));
    assert!(pgq(&db, &["workers"]).ok().contains("| Queue manager"));

    let backlog = pgq(&db, &["backlog", "--json"]).json();
    assert_eq!(
        backlog.len(),
        1,
        "claimed jobs are not backlog: {backlog:?}"
    );
    assert_eq!(backlog[0]["entrypoint"], "waiting");
    assert_eq!(backlog[0]["queued_count"], 3);
    let oldest = backlog[0]["oldest_age_seconds"].as_f64().unwrap();
    assert!((3599.0..3700.0).contains(&oldest), "{oldest}");
    assert!(pgq(&db, &["backlog"]).ok().contains("| waiting"));

    client.batch_execute("DELETE FROM pgqueuer").unwrap();
    assert_eq!(
        pgq(&db, &["workers"]).ok().trim(),
        "No workers are holding picked jobs."
    );
    assert_eq!(pgq(&db, &["backlog"]).ok().trim(), "No queued jobs.");

    let bad = pgq(&db, &["stale", "-t", "soon"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(
        bad.stderr
            .starts_with("pgq: error: invalid value 'soon' for '--threshold")
            && bad.stderr.contains("expected a number of seconds"),
        "{bad:?}"
    );
}

#[test]
fn dashboard_aggregates_and_shows_processed_entrypoints() {
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "resize", 0, 3);
    insert_jobs(&mut client, "backlogged", 0, 2);
    process(&db, "resize", Status::Successful);

    let out = pgq(&db, &["dashboard"]).ok();
    assert!(
        !out.contains('\x1b'),
        "printing once does not clear the screen"
    );
    let throughput = out.split("\nBacklog\n").next().unwrap_or_default();
    assert!(
        throughput.contains("| resize     | successful |     3 |"),
        "three successes of resize in the last minute:\n{out}"
    );
    assert!(
        throughput.contains("| resize     | picked     |     3 |"),
        "{out}"
    );
    assert!(
        out.contains("| backlogged |      2 |"),
        "backlog table:\n{out}"
    );
    let unaggregated: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM pgqueuer_log WHERE NOT aggregated",
    );
    assert_eq!(unaggregated, 0);
    let successes: i64 = scalar(
        &mut client,
        "SELECT sum(count)::bigint FROM pgqueuer_statistics WHERE entrypoint = 'resize' AND status = 'successful'",
    );
    assert_eq!(successes, 3);

    // A second look counts nothing twice.
    pgq(&db, &["dashboard"]).ok();
    let successes_again: i64 = scalar(
        &mut client,
        "SELECT sum(count)::bigint FROM pgqueuer_statistics WHERE entrypoint = 'resize' AND status = 'successful'",
    );
    assert_eq!(successes_again, 3);

    // Into a pipe, refreshes follow each other without screen-clearing escapes.
    let refreshed = pgq(&db, &["dashboard", "-i", "0.1", "--count", "2", "-n", "1"]).ok();
    assert!(!refreshed.contains('\x1b'), "{refreshed:?}");
    assert_eq!(
        refreshed.matches("PgQueuer dashboard, ").count(),
        2,
        "{refreshed:?}"
    );
    // --json: one object per frame and line.
    let frames = pgq(&db, &["dashboard", "--json", "-i", "0.1", "--count", "2"]).ok();
    let frames: Vec<Value> = frames
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert!(
        frames[0]["throughput"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["entrypoint"] == "resize" && t["status"] == "successful" && t["count"] == 3),
        "{frames:?}"
    );
    assert_eq!(frames[0]["backlog"][0]["entrypoint"], "backlogged");
    assert_eq!(frames[0]["backlog"][0]["queued_count"], 2);

    for bad in [
        &["dashboard", "--count", "2"][..],
        &["dashboard", "-i", "0"],
        &["dashboard", "-n", "-1"],
    ] {
        assert_eq!(pgq(&db, bad).code, 2, "{bad:?}");
    }
}

#[test]
fn listen_prints_each_event_as_it_arrives() {
    let db = TestDb::new();
    let mut child: Child = command(
        Some(&db.dsn()),
        &["listen", "--count", "2", "--timeout", "10"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn pgq listen");
    // Enqueue only once it listens: a NOTIFY before the LISTEN is lost.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("pgq: listening on channel \"ch_pgqueuer\""),
        "{line:?}"
    );

    let queue = Queue::new(db.pool(1));
    let id = queue.enqueue(NewJob::new("ping", b"x".to_vec())).unwrap();
    queue.cancel(&[id]).unwrap();

    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "pgq listen did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{status:?}: {out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("table_changed_event {"), "{out}");
    assert!(
        lines[0].contains("\"operation\" : \"insert\""),
        "the trigger's raw JSON: {out}"
    );
    // cancel deletes the row (table_changed delete) and sends a cancellation_event in one
    // transaction; which arrives first is up to the server.
    assert!(
        lines[1].starts_with("table_changed_event {")
            || lines[1].starts_with("cancellation_event {"),
        "{out}"
    );

    // Nothing arrives on another channel: --count is not reached by --timeout.
    let quiet = pgq(
        &db,
        &[
            "listen",
            "--channel",
            "elsewhere",
            "--count",
            "1",
            "--timeout",
            "0.3",
        ],
    );
    assert_eq!(quiet.code, 1, "{quiet:?}");
    assert!(
        quiet
            .stderr
            .contains("pgq: listening on channel \"elsewhere\""),
        "{quiet:?}"
    );
    assert!(
        quiet
            .stderr
            .contains("pgq: error: timed out after 300ms with 0 of 1 events"),
        "{quiet:?}"
    );
    // Without --count, the timeout is a normal end.
    assert_eq!(pgq(&db, &["listen", "--timeout", "0.2"]).code, 0);
}

#[test]
fn prune_log_keeps_the_counts() {
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "old", 0, 4);
    process(&db, "old", Status::Successful);
    // The log rows of these jobs (picked, successful) are made ten days old; one more
    // recent row stays.
    client
        .batch_execute(
            "UPDATE pgqueuer_log SET created = now() - interval '10 days'; \
             INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint) VALUES (99, 'queued', 0, 'new')",
        )
        .unwrap();
    let logged: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer_log");

    let out = pgq(&db, &["prune-log", "--older-than", "7d"]).ok();
    assert_eq!(
        out.trim(),
        format!(
            "Aggregated {logged} log row(s) into the statistics; deleted {} log row(s) older than 7d.",
            logged - 1
        )
    );
    let left: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer_log");
    assert_eq!(left, 1, "the recent row stays");
    let counted: i64 = scalar(
        &mut client,
        "SELECT sum(count)::bigint FROM pgqueuer_statistics",
    );
    assert_eq!(
        counted, logged,
        "every pruned row is counted in the statistics"
    );
    let successes: i64 = scalar(
        &mut client,
        "SELECT sum(count)::bigint FROM pgqueuer_statistics WHERE status = 'successful'",
    );
    assert_eq!(successes, 4);

    // Pruning again deletes nothing and counts nothing twice.
    let again = pgq(&db, &["prune-log", "--older-than", "1h30m"]).ok();
    assert!(
        again.contains("Aggregated 0 log row(s)") && again.contains("deleted 0"),
        "{again}"
    );

    for bad in [
        &["prune-log"][..],
        &["prune-log", "--older-than", "7"],
        &["prune-log", "--older-than", "7y"],
    ] {
        let run = pgq(&db, bad);
        assert_eq!(run.code, 2, "{bad:?}: {run:?}");
        assert!(
            run.stderr.starts_with("pgq: error: ")
                && run.stderr.contains("--older-than")
                && run.stderr.contains("'--help'"),
            "{run:?}"
        );
    }
}

/// `(relname, relpersistence, reloptions)` of the four tables, by name.
fn table_storage(client: &mut Client) -> Vec<(String, String, Option<Vec<String>>)> {
    client
        .query(
            "SELECT relname::text, relpersistence::text, reloptions FROM pg_class \
              WHERE relkind = 'r' AND relname IN ('pgqueuer', 'pgqueuer_log', 'pgqueuer_statistics', 'pgqueuer_schedules') \
              ORDER BY relname",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[test]
fn durability_and_autovac_change_the_tables() {
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "kept", 0, 2);
    let persistence = |client: &mut Client| -> Vec<String> {
        table_storage(client)
            .into_iter()
            .map(|(name, p, _)| format!("{name}={p}"))
            .collect()
    };

    assert_eq!(
        pgq(&db, &["durability", "balanced"]).ok().trim(),
        "Set PgQueuer durability to balanced."
    );
    assert_eq!(
        persistence(&mut client),
        [
            "pgqueuer=p",
            "pgqueuer_log=u",
            "pgqueuer_schedules=p",
            "pgqueuer_statistics=u"
        ]
    );
    pgq(&db, &["durability", "volatile"]).ok();
    assert!(persistence(&mut client).iter().all(|p| p.ends_with("=u")));
    pgq(&db, &["durability", "DURABLE"]).ok();
    assert!(persistence(&mut client).iter().all(|p| p.ends_with("=p")));
    let kept: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer");
    assert_eq!(kept, 2, "rows survive the rewrites");

    assert_eq!(
        pgq(&db, &["autovac"]).ok().trim(),
        "Applied recommended autovacuum settings."
    );
    let storage = table_storage(&mut client);
    let options = |name: &str| {
        storage
            .iter()
            .find(|t| t.0 == name)
            .unwrap()
            .2
            .clone()
            .unwrap_or_default()
    };
    assert!(
        options("pgqueuer").contains(&"fillfactor=70".to_owned()),
        "{storage:?}"
    );
    assert!(options("pgqueuer_schedules").contains(&"autovacuum_vacuum_cost_delay=0".to_owned()));
    assert!(options("pgqueuer_log").contains(&"autovacuum_vacuum_threshold=1000000".to_owned()));
    assert_eq!(options("pgqueuer_statistics").len(), 4);
    assert_eq!(options("pgqueuer").len(), 7);

    assert_eq!(
        pgq(&db, &["autovac", "--rollback"]).ok().trim(),
        "Reset autovacuum settings to defaults."
    );
    assert!(
        table_storage(&mut client).iter().all(|t| t.2.is_none()),
        "every option reset"
    );

    let bad = pgq(&db, &["durability", "forever"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(
        bad.stderr.contains("volatile, balanced or durable"),
        "{bad:?}"
    );
    assert_eq!(pgq(&db, &["durability"]).code, 2);
}

#[test]
fn install_verify_and_uninstall_through_the_program() {
    let db = TestDb::empty();
    let missing = pgq(&db, &["verify"]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stdout.contains("missing table pgqueuer"),
        "{missing:?}"
    );
    // A command that needs the schema says how to get it.
    let sizes = pgq(&db, &["sizes"]);
    assert_eq!(sizes.code, 1, "{sizes:?}");
    assert!(sizes.stderr.contains("pgq upgrade"), "{sizes:?}");

    assert!(
        pgq(&db, &["install", "-d", "balanced"])
            .ok()
            .starts_with("Installed PgQueuer schema (durability=balanced")
    );
    let again = pgq(&db, &["install"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("already installed"), "{again:?}");
    assert!(
        pgq(&db, &["verify"])
            .ok()
            .contains("All required PgQueuer database objects are present.")
    );
    assert_eq!(
        pgq(&db, &["upgrade"]).ok().trim(),
        "PgQueuer schema is already up to date."
    );
    let mut client = db.client();
    let log_persistence: String = scalar(
        &mut client,
        "SELECT relpersistence::text FROM pg_class WHERE relname = 'pgqueuer_log'",
    );
    assert_eq!(log_persistence, "u");

    assert_eq!(
        pgq(&db, &["uninstall"]).ok().trim(),
        "Removed every PgQueuer object."
    );
    assert!(
        pgq(&db, &["verify", "--expect", "absent"])
            .ok()
            .contains("No PgQueuer database objects found.")
    );
    assert_eq!(pgq(&db, &["verify", "--expect", "maybe"]).code, 2);
}

#[test]
fn sql_commands_print_without_connecting() {
    // Nothing listens on port 1: any connection attempt would fail.
    let nowhere = Some("postgres://nobody@127.0.0.1:1/none");
    let install = pgq_env(nowhere, &["sql", "install"]).ok();
    assert!(install.contains("CREATE TABLE"), "{install}");
    assert_eq!(
        install,
        pgq_env(nowhere, &["sql", "upgrade"]).ok(),
        "installing is upgrading"
    );
    let volatile = pgq_env(nowhere, &["sql", "install", "--durability", "volatile"]).ok();
    assert!(volatile.contains("UNLOGGED"), "{volatile}");
    for step in pgqueuer::upgrade_sql(&Settings::default()).unwrap() {
        assert!(install.contains(step.trim_end()), "every step is printed");
    }

    let uninstall = pgq_env(nowhere, &["sql", "uninstall"]).ok();
    assert_eq!(
        uninstall,
        pgqueuer::uninstall_sql(&Settings::default()).unwrap()
    );
    let named = pgq_env(
        nowhere,
        &["--prefix", "app_", "sql", "uninstall", "--schema", "MyQ"],
    )
    .ok();
    assert!(
        named.contains("DROP TABLE IF EXISTS myq.app_pgqueuer;"),
        "{named}"
    );

    // A name set explicitly wins over --prefix, as in Python.
    let out = command(nowhere, &["--prefix", "app_", "sql", "uninstall"])
        .env("PGQUEUER_QUEUE_TABLE", "jobs")
        .output()
        .unwrap();
    let explicit = String::from_utf8(out.stdout).unwrap();
    assert!(
        explicit.contains("DROP TABLE IF EXISTS jobs;"),
        "{explicit}"
    );
    assert!(
        explicit.contains("DROP TABLE IF EXISTS app_pgqueuer_log;"),
        "{explicit}"
    );

    let durability = pgq_env(nowhere, &["sql", "durability", "balanced"]).ok();
    assert_eq!(durability.lines().count(), 4);
    assert!(
        durability.contains("ALTER TABLE pgqueuer_log SET UNLOGGED;"),
        "{durability}"
    );
    let tune = pgq_env(nowhere, &["sql", "autovac"]).ok();
    assert!(tune.contains("fillfactor = 70"), "{tune}");
    let reset = pgq_env(nowhere, &["sql", "autovac", "--rollback"]).ok();
    assert!(reset.contains("RESET (") && !reset.contains('='), "{reset}");

    for bad in [
        &["sql"][..],
        &["sql", "nothing"],
        &["sql", "durability"],
        &["sql", "install", "--plan"],
    ] {
        assert_eq!(pgq_env(nowhere, bad).code, 2, "{bad:?}");
    }
}

#[test]
fn failures_exit_non_zero_with_an_actionable_message() {
    // A DSN that cannot connect names the target (never a password).
    let run = pgq_env(
        Some("postgres://nobody:secret@127.0.0.1:1/nodb"),
        &["sizes"],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("nobody@127.0.0.1:1/nodb"), "{run:?}");
    assert!(!run.stderr.contains("secret"), "{run:?}");
    assert!(run.stderr.contains("hint:"), "{run:?}");
    let run = pgq_env(
        None,
        &["--dsn", "postgres://someone@127.0.0.1:1/db", "stale"],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("someone@127.0.0.1:1/db"), "{run:?}");
    let run = pgq_env(None, &["--dsn", "postgres://x@h/db?nonsense=1", "workers"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("nonsense"), "{run:?}");

    // A DSN of another database system is named as such.
    let run = pgq_env(None, &["--dsn", "mysql://root@127.0.0.1/app", "sizes"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("mysql://") && run.stderr.contains("postgres://"),
        "{run:?}"
    );

    // Usage errors: exit 2, one form ("pgq: error: ..."), the usage line and a pointer
    // to --help; no terminal escapes into a pipe.
    let usage = |args: &[&str], says: &[&str]| {
        let run = pgq_env(None, args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.starts_with("pgq: error: "), "{run:?}");
        assert!(run.stderr.contains("'--help'"), "{run:?}");
        assert!(!run.stderr.contains('\x1b'), "{run:?}");
        for text in says {
            assert!(
                run.stderr.contains(text),
                "{args:?} does not say {text:?}: {run:?}"
            );
        }
    };
    usage(&["frobnicate"], &["unrecognized subcommand 'frobnicate'"]);
    usage(&["wokers"], &["a similar subcommand exists: 'workers'"]);
    usage(&[], &["requires a subcommand"]);
    usage(
        &["failed", "--limit", "many"],
        &["'many' for '--limit <N>'", "expected a whole number"],
    );
    usage(
        &["backlog", "--verbose"],
        &["unexpected argument '--verbose'"],
    );
    usage(&["queue"], &["<ENTRYPOINT>", "Usage: pgq queue"]);
    usage(
        &["queue", "ep", "--priority", "high"],
        &["'high' for '--priority <N>'"],
    );
    let run = pgq_env(None, &["--prefix", "1bad", "sizes"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("prefix"), "{run:?}");

    // Help for the program and for every command, without a database.
    let help = pgq_env(None, &["--help"]).ok();
    for heading in [
        "Schema:",
        "Jobs:",
        "Monitoring:",
        "Options:",
        "Environment:",
        "--dsn",
    ] {
        assert!(help.contains(heading), "--help lacks {heading:?}:\n{help}");
    }
    assert_eq!(pgq_env(None, &["help"]).ok(), help);
    for command in [
        "install",
        "upgrade",
        "verify",
        "uninstall",
        "sql",
        "durability",
        "autovac",
        "queue",
        "job",
        "cancel",
        "failed",
        "requeue",
        "stale",
        "workers",
        "backlog",
        "sizes",
        "dashboard",
        "listen",
        "prune-log",
        "completions",
    ] {
        let help = pgq_env(None, &[command, "--help"]).ok();
        assert!(
            help.contains(&format!("Usage: pgq {command}")),
            "{command}: {help}"
        );
        assert_eq!(pgq_env(None, &["help", command]).ok(), help);
    }
}

/// `pgq completions SHELL` prints a completion script that knows the commands.
#[test]
fn completions_are_printed_for_each_shell() {
    let bash = pgq_env(None, &["completions", "bash"]).ok();
    assert!(
        bash.contains("_pgq()") && bash.contains("prune-log"),
        "{bash}"
    );
    let zsh = pgq_env(None, &["completions", "zsh"]).ok();
    assert!(zsh.starts_with("#compdef pgq"), "{zsh}");
    for shell in ["fish", "elvish", "powershell"] {
        assert!(
            pgq_env(None, &["completions", shell])
                .ok()
                .contains("dashboard"),
            "{shell}"
        );
    }
    assert_eq!(pgq_env(None, &["completions", "tcsh"]).code, 2);
}

#[test]
fn schedules_lists_and_removes_by_id_and_entrypoint() {
    let db = TestDb::new();
    let mut client = db.client();
    let ids: Vec<i64> = client
        .query(
            "INSERT INTO pgqueuer_schedules (expression, entrypoint) VALUES \
             ('* * * * *', 'every_minute'), ('0 0 * * *', 'nightly'), ('*/5 * * * *', 'nightly') \
             RETURNING id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let listed = pgq(&db, &["schedules", "--json"]).json();
    assert_eq!(listed.len(), 3);
    for row in &listed {
        for key in [
            "id",
            "expression",
            "entrypoint",
            "next_run",
            "last_run",
            "status",
            "heartbeat",
        ] {
            assert!(row.get(key).is_some(), "{key} missing in {row}");
        }
    }
    let table = pgq(&db, &["schedules"]).ok();
    assert!(
        table.contains("every_minute") && table.contains("0 0 * * *"),
        "{table}"
    );

    let first = ids[0].to_string();
    let run = pgq(
        &db,
        &["schedules", "--remove", &first, "-r", "nightly", "--json"],
    );
    assert!(run.stderr.contains("pgq: removed 3 schedule(s)"), "{run:?}");
    assert!(run.json().is_empty());
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_schedules"),
        0
    );
    assert!(pgq(&db, &["schedules"]).ok().contains("No schedules"));
}

/// `pgq failed` shows why each job is held, and `pgq job ID` shows one job whole: its
/// row, payload (text or hex), headers and log with tracebacks, before and after it
/// leaves the queue table. The library's `Queue::job` and `Queue::history` agree.
#[test]
fn failed_and_job_show_reasons_payloads_and_history() {
    use pgqueuer::{EntrypointOptions, OnFailure, Worker};

    let db = TestDb::new();
    let queue = Queue::new(db.pool(4));
    let held = queue
        .enqueue(NewJob::new("fragile", b"payload text".to_vec()))
        .unwrap();
    let done = queue.enqueue(NewJob::new("fine", b"ok".to_vec())).unwrap();
    Worker::builder(db.pool(4))
        .entrypoint_with(
            "fragile",
            EntrypointOptions::new().on_failure(OnFailure::Hold),
            |_, _| Err("disk full: /var/spool".into()),
        )
        .entrypoint("fine", |_, _| Ok(()))
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    let binary = queue
        .enqueue(
            NewJob::new("later", vec![0xff, 0xfe, 0x00, 0x41])
                .header("trace", "abc")
                .execute_after(Duration::from_secs(3600)),
        )
        .unwrap();
    let picked = queue.enqueue(NewJob::without_payload("busy")).unwrap();
    let claimer = Claimer::builder().entrypoint("busy", 0).build().unwrap();
    let pool = db.pool(1);
    assert_eq!(
        claimer
            .claim(&mut pool.get().unwrap(), 1)
            .unwrap()
            .jobs
            .len(),
        1
    );

    // failed: the reason in the table and in JSON.
    let table = pgq(&db, &["failed"]).ok();
    assert!(
        table.contains(&format!(" {held} | fragile "))
            && table.contains("| Error: disk full: /var/spool"),
        "{table}"
    );
    let json = pgq(&db, &["failed", "--json"]).json();
    assert_eq!(json[0]["exception_message"], "disk full: /var/spool");
    assert_eq!(json[0]["exception_type"], "Error", "{json:?}");

    // job: a held job, with its log and the failure's traceback.
    let shown = pgq(&db, &["job", &held.to_string()]).ok();
    for text in [
        &format!("Job {held} (fragile), status failed")[..],
        "Payload (12 bytes, text):",
        "  payload text",
        "Log (3 rows, oldest first):",
        "queued",
        "picked",
        "disk full: /var/spool",
    ] {
        assert!(shown.contains(text), "no {text:?} in:\n{shown}");
    }
    // A queued job with a binary payload and headers.
    let shown = pgq(&db, &["job", &binary.to_string()]).ok();
    assert!(
        shown.contains("status queued")
            && shown.contains("Payload (4 bytes, hex):")
            && shown.contains("fffe0041")
            && shown.contains("\"trace\": \"abc\""),
        "{shown}"
    );
    let json = pgq(&db, &["job", &binary.to_string(), "--json"]).ok();
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["in_queue"], true);
    assert_eq!(json["job"]["payload_encoding"], "hex");
    assert_eq!(json["job"]["payload"], "fffe0041");
    assert_eq!(json["log"].as_array().unwrap().len(), 1);
    // A picked job names its worker.
    let shown = pgq(&db, &["job", &picked.to_string()]).ok();
    assert!(
        shown.contains("status picked") && shown.contains(&claimer.worker_id().to_string()),
        "{shown}"
    );
    // A finished job is shown from the log.
    let shown = pgq(&db, &["job", &done.to_string()]).ok();
    assert!(
        shown.contains(&format!(
            "Job {done} (fine) is no longer in the queue table: it ended successful"
        )) && shown.contains("Log (3 rows, oldest first):"),
        "{shown}"
    );
    // An unknown id fails and says so.
    let run = pgq(&db, &["job", "999999"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.starts_with("pgq: error: no job 999999"),
        "{run:?}"
    );
    assert_eq!(pgq(&db, &["job", "x"]).code, 2);

    // The library's view is the same.
    assert!(queue.job(done).unwrap().is_none());
    let history = queue.history(done).unwrap();
    assert_eq!(
        history.iter().map(|e| e.status).collect::<Vec<_>>(),
        [Status::Queued, Status::Picked, Status::Successful]
    );
    let failure = queue.history(held).unwrap()[2].failure().unwrap();
    assert_eq!(failure.message, "disk full: /var/spool");
    assert_eq!(queue.job(held).unwrap().unwrap().status, Status::Failed);
    assert!(queue.history(999_999).unwrap().is_empty());
}

/// `pgq upgrade --plan` prints the delta this database needs: nothing on an up-to-date
/// database, the install on an empty one, a few statements on a 1.3.2 one; it changes
/// nothing.
#[test]
fn upgrade_plan_prints_only_what_this_database_needs() {
    let current = TestDb::new();
    let out = pgq(&current, &["upgrade", "--plan"]).ok();
    assert!(out.contains("is up to date: nothing to apply"), "{out}");
    assert!(!out.contains("CREATE") && !out.contains("ALTER"), "{out}");

    let empty = crate::harness::TestDb::empty();
    let out = pgq(&empty, &["upgrade", "--plan"]).ok();
    assert!(
        out.contains("CREATE TABLE IF NOT EXISTS pgqueuer ("),
        "{out}"
    );
    let mut client = empty.client();
    assert!(describe_nothing(&mut client), "--plan changed the database");

    let old = crate::harness::TestDb::empty();
    let mut client = old.client();
    client
        .batch_execute(&crate::harness::fixture("pgqueuer-1.3.2.sql"))
        .unwrap();
    let out = pgq(&old, &["upgrade", "--plan"]).ok();
    assert!(
        out.contains("\nALTER TABLE pgqueuer ADD COLUMN slot bigint;\n")
            && out.contains("CREATE INDEX pgqueuer_picked_heartbeat_idx ON pgqueuer USING btree")
            && !out.contains("CREATE TABLE"),
        "{out}"
    );
    assert!(
        pgqueuer::verify(&mut client).is_err(),
        "--plan applied something"
    );
}

fn describe_nothing(client: &mut Client) -> bool {
    pgqueuer::describe_with(client, &Settings::default())
        .unwrap()
        .is_empty()
}

/// On a database without the schema, a command's error names that database and says how
/// to get the schema there (the easy mistake: no DSN, and a default database that is the
/// user's name).
#[test]
fn a_missing_schema_names_the_database_it_looked_in() {
    let empty = crate::harness::TestDb::empty();
    let run = pgq(&empty, &["sizes"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("relation \"pgqueuer\" does not exist")
            && run.stderr.contains(&format!("/{}?", empty.name))
            && run.stderr.contains("Run 'pgq upgrade' there"),
        "{run:?}"
    );
    let run = pgq(&empty, &["verify"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout.contains("missing table pgqueuer")
            && run.stderr.contains(&empty.name)
            && run.stderr.contains("pgq upgrade"),
        "{run:?}"
    );
}
