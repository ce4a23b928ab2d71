//! Monitoring: `stale`, `workers`, `backlog`, `dashboard` and `listen`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use pgqueuer::{Claimer, NewJob, Queue, Status};
use serde_json::Value;

use super::{command, pgq, process};
use crate::claim::insert_jobs;
use crate::harness::{TestDb, scalar};

/// `stale` lists only jobs whose heartbeat is older than the threshold, `workers` the
/// workers holding picked jobs, `backlog` the queued jobs by entrypoint and age.
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

/// `dashboard` aggregates the log into the statistics once (a second look counts nothing
/// twice) and shows throughput and backlog, as tables or JSON frames, without escapes
/// into a pipe.
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

/// `listen` prints each event on the channel as it arrives and stops at `--count`; with
/// `--count` unreached `--timeout` is an error, without `--count` a normal end.
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

/// Rows whose times are infinite (another program may write `-infinity` or `infinity`
/// into any timestamp column): `pgq backlog`, `pgq stale`, `pgq health`, `pgq explain`,
/// `pgq job`, the dashboard's pages and `/metrics`, and the MCP tools `queue_age`,
/// `stale_jobs` and `explain_job` answer, the
/// ages infinite (or none), instead of failing with "cannot subtract infinite
/// timestamps".
#[test]
fn infinite_times_read_as_infinitely_old_and_fail_nothing() {
    let db = TestDb::new();
    let mut client = db.client();
    let ids: Vec<i64> = client
        .query(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status, created, execute_after) \
             VALUES (0, 'inf', 'x', 'queued', '-infinity', '-infinity'), \
                    (0, 'inf', 'x', 'queued', now(), 'infinity') RETURNING id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let picked: i64 = client
        .query_one(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status, heartbeat, \
                                   queue_manager_id) \
             VALUES (0, 'inf', 'x', 'picked', '-infinity', gen_random_uuid()) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    let backlog = pgq(&db, &["backlog"]).ok();
    assert!(backlog.contains("inf"), "{backlog}");
    let stale = pgq(&db, &["stale"]).ok();
    assert!(stale.contains(&picked.to_string()), "{stale}");
    let health = pgq(&db, &["health"]);
    assert!(
        !health.stderr.contains("infinite") && !health.stdout.contains("cannot"),
        "{health:?}"
    );
    for id in ids.iter().chain([&picked]) {
        let explained = pgq(&db, &["explain", &id.to_string()]);
        assert!(
            !explained.stderr.contains("infinite") && explained.code != 2,
            "{explained:?}"
        );
        pgq(&db, &["job", &id.to_string()]).ok();
    }
    // Log rows of infinite times, as another program may write them.
    client
        .batch_execute(
            "INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, created) VALUES \
             (1, 'picked', 0, 'inf', '-infinity'), (1, 'successful', 0, 'inf', 'infinity')",
        )
        .unwrap();
    let web = crate::web::dashboard(&db, pgqueuer::web::WebOptions::default());
    for path in [
        "/".to_owned(),
        "/entrypoints".to_owned(),
        "/entrypoints/inf".to_owned(),
        "/metrics".to_owned(),
        format!("/jobs/{picked}"),
        format!("/jobs/{}", ids[0]),
    ] {
        let answer = crate::web::get(web.addr(), &path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    let server = pgqueuer::mcp::McpServer::new(db.pool(2));
    let calls: String = [
        ("queue_age", serde_json::json!({})),
        ("stale_jobs", serde_json::json!({})),
        ("explain_job", serde_json::json!({"job_id": picked})),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, args))| {
        format!(
            "{}\n",
            serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                               "params": {"name": name, "arguments": args}})
        )
    })
    .collect();
    let mut out = Vec::new();
    server.serve(std::io::Cursor::new(calls), &mut out).unwrap();
    for line in String::from_utf8(out).unwrap().lines() {
        let answer: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
}
