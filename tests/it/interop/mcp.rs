//! `pgq mcp` against PgQueuer 1.6.0's own MCP server (`python -m pgqueuer.adapters.mcp`),
//! both driven by the official Python SDK's client over stdio on one database.
//!
//! Documented differences, which the comparison allows:
//! - `queue_stats` and `throughput_summary` count log rows not yet folded into the
//!   statistics without folding them (PgQueuer's `queue_stats` writes first): here
//!   PgQueuer's session runs first and folds them, so both see the same rows; the rows
//!   of `queue_stats` are compared as sets (PgQueuer orders by insertion into the
//!   statistics table, ours by bucket, newest first), with a limit that covers them all.
//! - `queue_table_info` adds `payload_bytes` and cuts payloads to 4,096 bytes.
//! - Ages in seconds (`seconds_since_heartbeat`, `oldest_age_seconds`, `avg_age_seconds`)
//!   are read a few seconds apart, and compared within 30 s.
//! - Log rows written by one statement share `created`, and both servers order them by
//!   `created` alone, so `failed_jobs` and `queue_log` are compared as sets of rows.

use std::time::Duration;

use pgqueuer::{Entrypoint, NewJob, OnFailure, Queue, Worker};
use serde_json::{Value, json};

use crate::harness::{TestDb, Throwaway, eventually, pgq_binary, scalar};
use crate::python;

/// PgQueuer 1.6.0's MCP tools.
const PGQUEUER_TOOLS: [&str; 11] = [
    "queue_size",
    "queue_table_info",
    "queue_stats",
    "throughput_summary",
    "failed_jobs",
    "queue_log",
    "schedules",
    "stale_jobs",
    "active_workers",
    "queue_age",
    "schema_info",
];

/// A queue with something of everything: queued and deferred jobs with payloads,
/// headers and a dedupe key, picked jobs of two workers, a stale one, a held failure,
/// exceptions in the log, and a schedule.
fn populate(db: &TestDb) {
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    // Failures first, through a worker: a held one and two exceptions.
    queue
        .enqueue_many(&[
            NewJob::new("mcp_held", "held".as_bytes().to_vec()),
            NewJob::new("mcp_broken", "x".as_bytes().to_vec()),
            NewJob::new("mcp_broken", "y".as_bytes().to_vec()),
            NewJob::new("mcp_ok", "fine".as_bytes().to_vec()),
        ])
        .unwrap();
    Worker::builder(pool.clone())
        .threads(2)
        .entrypoint(
            Entrypoint::new("mcp_held").on_failure(OnFailure::Hold),
            |_job, _ctx| Err("held for inspection".into()),
        )
        .entrypoint("mcp_broken", |job, _ctx| {
            Err(format!("broken job {}", job.id).into())
        })
        .entrypoint("mcp_ok", |_job, _ctx| Ok(()))
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    queue
        .enqueue_many(&[
            NewJob::new(
                "mcp_email",
                r#"{"to":"a@example.test"}"#.as_bytes().to_vec(),
            )
            .priority(5)
            .dedupe_key("mail-1")
            .header("trace", "abc"),
            NewJob::new("mcp_email", "plain text payload".as_bytes().to_vec()),
            NewJob::new("mcp_report", Vec::new()).execute_after(Duration::from_secs(3600)),
            NewJob::new("mcp_work", "w1".as_bytes().to_vec()),
            NewJob::new("mcp_work", "w2".as_bytes().to_vec()),
            NewJob::new("mcp_work", "w3".as_bytes().to_vec()),
        ])
        .unwrap();
    let mut client = db.client();
    client
        .batch_execute(
            "UPDATE pgqueuer SET status = 'picked', queue_manager_id = '11111111-1111-4111-8111-111111111111',
                 heartbeat = now() WHERE entrypoint = 'mcp_work' AND payload = 'w1';
             UPDATE pgqueuer SET status = 'picked', queue_manager_id = '22222222-2222-4222-8222-222222222222',
                 heartbeat = now() - interval '20 minutes' WHERE entrypoint = 'mcp_work' AND payload = 'w2';
             INSERT INTO pgqueuer_schedules (expression, entrypoint, next_run)
                 VALUES ('*/5 * * * *', 'mcp_nightly', now() + interval '5 minutes');
             ANALYZE pgqueuer, pgqueuer_log, pgqueuer_statistics, pgqueuer_schedules;",
        )
        .unwrap();
}

/// The calls of the comparison: PgQueuer's tools with their defaults and with arguments,
/// `queue_stats` first (PgQueuer's folds the log then).
fn comparison_calls() -> Vec<Value> {
    [
        ("queue_stats", json!({})),
        // A limit above the number of buckets: the two servers order buckets differently
        // (see the module docs), so a smaller one would pick different buckets.
        ("queue_stats", json!({"period": "PT1H", "limit": 100})),
        ("queue_size", json!({})),
        ("queue_table_info", json!({})),
        ("queue_table_info", json!({"limit": 2, "offset": 1})),
        ("throughput_summary", json!({})),
        ("throughput_summary", json!({"period": "P1D"})),
        ("failed_jobs", json!({})),
        ("failed_jobs", json!({"limit": 1})),
        ("queue_log", json!({})),
        ("queue_log", json!({"limit": 500})),
        ("schedules", json!({})),
        ("stale_jobs", json!({})),
        ("stale_jobs", json!({"threshold": "PT1M", "limit": 5})),
        ("active_workers", json!({})),
        ("queue_age", json!({})),
        ("schema_info", json!({})),
    ]
    .into_iter()
    .map(|(name, args)| json!([name, args]))
    .collect()
}

fn our_server() -> Value {
    json!([pgq_binary().display().to_string(), "mcp"])
}

fn pgqueuer_server() -> Value {
    json!([
        python::interpreter().display().to_string(),
        "-m",
        "pgqueuer.adapters.mcp"
    ])
}

/// Fields whose value is an age, read at slightly different times by the two servers.
const AGES: [&str; 3] = [
    "seconds_since_heartbeat",
    "oldest_age_seconds",
    "avg_age_seconds",
];

/// PgQueuer's row `theirs` and ours agree on every field of PgQueuer's.
fn same_row(tool: &str, theirs: &Value, ours: &Value) -> Result<(), String> {
    let (Some(theirs), Some(ours)) = (theirs.as_object(), ours.as_object()) else {
        return Err(format!("{tool}: rows are not objects: {theirs} / {ours}"));
    };
    for (field, want) in theirs {
        let got = ours
            .get(field)
            .ok_or_else(|| format!("{tool}: our row lacks `{field}`: {ours:?}"))?;
        let equal = if AGES.contains(&field.as_str()) {
            (want.as_f64().unwrap_or(0.0) - got.as_f64().unwrap_or(f64::MAX)).abs() < 30.0
        } else {
            want == got
        };
        if !equal {
            return Err(format!(
                "{tool}: field `{field}` is {want} in PgQueuer's row and {got} in ours"
            ));
        }
    }
    Ok(())
}

/// Rows as an order-free list (for the tools whose order is not defined by both).
fn sorted(rows: &[Value]) -> Vec<Value> {
    let mut rows = rows.to_vec();
    rows.sort_by_key(|r| {
        let o = r.as_object().unwrap();
        (
            o.get("id").and_then(Value::as_i64),
            o.get("created").map(Value::to_string),
            o.get("entrypoint").map(Value::to_string),
            o.get("priority").and_then(Value::as_i64),
            o.get("status").map(Value::to_string),
        )
    });
    rows
}

/// For each of PgQueuer's tools, called with defaults and with arguments on the same
/// data (queued, deferred, picked, stale and held jobs, exceptions, a schedule, two
/// workers), our result equals PgQueuer 1.6.0's own MCP server's, field by field.
#[test]
fn every_tool_answers_as_pgqueuer_1_6_0_does() {
    let db = TestDb::new();
    populate(&db);
    let calls = comparison_calls();
    let answer = python::script(
        &db,
        "mcp_session.py",
        &json!({
            "servers": {"pgqueuer": pgqueuer_server(), "ours": our_server()},
            "order": ["pgqueuer", "ours"],
            "calls": calls,
        }),
    );
    let (theirs, ours) = (&answer["pgqueuer"], &answer["ours"]);
    for tool in PGQUEUER_TOOLS {
        for side in [theirs, ours] {
            assert!(
                side["tools"].as_array().unwrap().iter().any(|t| t == tool),
                "{tool} missing: {}",
                side["tools"]
            );
        }
    }
    assert!(
        ours["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "pgqueuer_guide")
    );
    assert_eq!(ours["protocol_version"], theirs["protocol_version"]);
    let (their_calls, our_calls) = (
        theirs["calls"].as_array().unwrap(),
        ours["calls"].as_array().unwrap(),
    );
    assert_eq!(their_calls.len(), calls.len());
    let mut compared = 0;
    for (want, got) in their_calls.iter().zip(our_calls) {
        let tool = want["name"].as_str().unwrap();
        let args = &want["args"];
        assert_eq!(
            want["is_error"], false,
            "PgQueuer's {tool} {args} failed: {want}"
        );
        assert_eq!(got["is_error"], false, "our {tool} {args} failed: {got}");
        let want_rows = want["structured"]["result"].as_array().unwrap();
        let got_rows = got["structured"]["result"].as_array().unwrap();
        assert_eq!(
            want_rows.len(),
            got_rows.len(),
            "{tool} {args}: PgQueuer {want_rows:?}\nours {got_rows:?}"
        );
        let (want_rows, got_rows) = match tool {
            "queue_stats" | "failed_jobs" | "queue_log" => (sorted(want_rows), sorted(got_rows)),
            _ => (want_rows.clone(), got_rows.clone()),
        };
        for (w, g) in want_rows.iter().zip(&got_rows) {
            if let Err(e) = same_row(tool, w, g) {
                panic!("{tool} {args}: {e}\nPgQueuer: {want_rows:?}\nours: {got_rows:?}");
            }
            compared += 1;
        }
        // One text item per row, as PgQueuer sends them.
        assert_eq!(
            got["texts"].as_array().unwrap().len(),
            got_rows.len(),
            "{tool}"
        );
    }
    assert!(compared > 40, "only {compared} rows compared");
}

/// A whole session of every tool (ours with their defaults and with arguments) and the
/// prompt leaves the tables' write counters unchanged and the log's rows unfolded, and
/// works for a role granted SELECT only; each answer says what it should.
#[test]
fn a_whole_session_writes_nothing_and_needs_only_select() {
    let db = TestDb::new();
    populate(&db);
    let mut client = db.client();
    client
        .batch_execute(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgq_mcp_reader') THEN
                     CREATE ROLE pgq_mcp_reader LOGIN;
                 END IF;
             END $$;
             GRANT USAGE ON SCHEMA public TO pgq_mcp_reader;
             GRANT SELECT ON ALL TABLES IN SCHEMA public TO pgq_mcp_reader;",
        )
        .unwrap();
    let job: i64 = scalar(&mut client, "SELECT min(id) FROM pgqueuer");
    let unfolded = "SELECT count(*) FROM pgqueuer_log WHERE NOT aggregated";
    let writes = "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint \
                  FROM pg_stat_user_tables";
    client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .unwrap();
    let before_unfolded: i64 = scalar(&mut client, unfolded);
    assert!(
        before_unfolded > 0,
        "the session must meet unfolded log rows"
    );
    client
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .unwrap();
    let before: i64 = scalar(&mut client, writes);
    let mut calls: Vec<Value> = PGQUEUER_TOOLS.iter().map(|t| json!([t, {}])).collect();
    // Ours, once with their defaults and once with arguments.
    calls.extend([
        json!(["explain_job", {"job_id": job}]),
        json!(["explain_job", {"job_id": job, "heartbeat_timeout": "PT1M"}]),
        json!(["limits", {}]),
        json!(["limits", {"declared": {"mcp_work": 2}}]),
        json!(["limit_audit", {}]),
        json!(["limit_audit", {"period": "PT2H", "entrypoint": "mcp_work"}]),
        json!(["health", {}]),
        json!(["health", {"stall_after": "PT2M", "stale_after": "PT1M", "window": "PT10M",
                          "declared": {"mcp_work": 2}}]),
    ]);
    let reader = format!(
        "{}?user=pgq_mcp_reader",
        python::python_dsn(&db).replace("postgresql://postgres@", "postgresql://")
    );
    let answer = python::script(
        &db,
        "mcp_session.py",
        &json!({
            "servers": {"ours": our_server()},
            "order": ["ours"],
            "calls": calls,
            "env": {"PGQUEUER_DSN": reader},
        }),
    );
    let calls = answer["ours"]["calls"].as_array().unwrap();
    for call in calls {
        assert_eq!(call["is_error"], false, "{call}");
    }
    let by_name = |name: &'static str| calls.iter().filter(move |c| c["name"] == name);
    for explained in by_name("explain_job") {
        assert_eq!(explained["structured"]["job_id"], job, "{explained}");
        assert!(explained["structured"]["state"].is_string(), "{explained}");
    }
    let limits: Vec<_> = by_name("limits").collect();
    assert!(
        limits[1]["structured"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["entrypoint"] == "mcp_work" && r["declared_limit"] == 2)
    );
    for health in by_name("health") {
        assert!(
            ["OK", "DEGRADED", "STALLED"]
                .contains(&health["structured"]["verdict"].as_str().unwrap()),
            "{health}"
        );
    }
    // The populated queue holds a failure and a stale job: DEGRADED, saying so.
    let verdict = &by_name("health").next().unwrap()["structured"];
    assert_eq!(verdict["verdict"], "DEGRADED", "{verdict}");
    assert!(answer["ours"]["prompt_text"].as_str().unwrap().len() > 200);
    // The server has exited: its backends' counters are flushed.
    let mut after = before;
    eventually(Duration::from_secs(20), "the statistics to settle", || {
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .unwrap();
        after = scalar(&mut client, writes);
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgq-mcp' \
             OR application_name = 'pgq mcp'",
        ) == 0
    });
    client
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .unwrap();
    after = after.max(scalar(&mut client, writes));
    assert_eq!(after, before, "the session wrote to a table");
    assert_eq!(scalar::<i64>(&mut client, unfolded), before_unfolded);
}

/// An unknown tool, a malformed period, a negative limit, an argument of the wrong type
/// and an unknown argument each get a JSON-RPC error (-32602) naming it.
#[test]
fn bad_calls_are_json_rpc_errors_naming_the_argument() {
    let db = TestDb::new();
    let answer = python::script(
        &db,
        "mcp_session.py",
        &json!({
            "servers": {"ours": our_server()},
            "order": ["ours"],
            "calls": [
                ["no_such_tool", {}],
                ["queue_stats", {"period": "one hour"}],
                ["queue_log", {"limit": -5}],
                ["queue_table_info", {"offset": "ten"}],
                ["queue_size", {"verbose": true}],
                ["queue_size", {}],
            ],
        }),
    );
    let calls = answer["ours"]["calls"].as_array().unwrap();
    for (call, named) in calls.iter().zip([
        "no_such_tool",
        "`period`",
        "`limit`",
        "`offset`",
        "`verbose`",
    ]) {
        assert_eq!(call["error_code"], -32602, "{call}");
        let message = call["error"].as_str().unwrap();
        assert!(message.contains(named), "{named}: {message}");
    }
    assert_eq!(
        calls[5]["is_error"], false,
        "the server answers on: {}",
        calls[5]
    );
}

/// A database outage mid-session gets an error result, the server stays up, and it
/// answers again once the database is back.
#[test]
fn a_database_outage_is_an_error_result_and_the_server_carries_on() {
    let server = Throwaway::new(&[]).expect("a throwaway server");
    let mut admin = server.admin();
    admin.batch_execute("CREATE DATABASE mcp_outage").unwrap();
    let dsn = format!("{}?sslmode=disable", server.dsn("mcp_outage"));
    let mut db = pgqueuer::connect_one(&dsn, "tests").unwrap();
    pgqueuer::upgrade(&mut db).unwrap();
    drop(db);
    drop(admin);
    let dir = std::env::temp_dir().join(format!("pgq-mcp-outage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str| dir.join(name).display().to_string();
    let test_db = TestDb::new();
    let session = python::spawn_script(
        &test_db,
        "mcp_session.py",
        &json!({
            "servers": {"ours": our_server()},
            "order": ["ours"],
            "env": {"PGQUEUER_DSN": dsn},
            "calls": [
                ["queue_size", {}],
                ["__signal__", {"file": file("up")}],
                ["__pause__", {"until_file": file("stopped")}],
                ["queue_size", {}],
                ["__signal__", {"file": file("down")}],
                ["__pause__", {"until_file": file("started")}],
                ["queue_size", {}],
            ],
        }),
        Duration::from_secs(120),
    );
    let wait_for = |name: &str| {
        let path = dir.join(name);
        eventually(Duration::from_secs(60), name, || path.exists());
    };
    wait_for("up");
    server.stop().unwrap();
    std::fs::write(dir.join("stopped"), "").unwrap();
    wait_for("down");
    server.start().unwrap();
    std::fs::write(dir.join("started"), "").unwrap();
    let answer = session.finish().success().json();
    let calls = answer["ours"]["calls"].as_array().unwrap();
    assert_eq!(calls[0]["is_error"], false, "{}", calls[0]);
    assert_eq!(calls[1]["is_error"], true, "{}", calls[1]);
    assert!(
        calls[1]["error"].is_null(),
        "an error result, not a protocol error"
    );
    assert!(
        calls[1]["texts"][0]
            .as_str()
            .unwrap()
            .contains("queue_size"),
        "{}",
        calls[1]
    );
    assert_eq!(calls[2]["is_error"], false, "answers again: {}", calls[2]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Payloads come back bounded (4,096 bytes, with the whole size in `payload_bytes`), and
/// one that is not UTF-8 as PostgreSQL's hex text instead of failing the call (where
/// PgQueuer's server fails the whole call).
#[test]
fn payloads_are_bounded_and_binary_ones_do_not_fail_the_call() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    queue
        .enqueue_many(&[
            NewJob::new("big", vec![b'a'; 10_000]).priority(2),
            NewJob::new("binary", vec![0x00, 0xff, 0xfe]).priority(1),
        ])
        .unwrap();
    let answer = python::script(
        &db,
        "mcp_session.py",
        &json!({
            "servers": {"ours": our_server()},
            "order": ["ours"],
            "calls": [["queue_table_info", {}]],
        }),
    );
    let call = &answer["ours"]["calls"][0];
    assert_eq!(call["is_error"], false, "{call}");
    let rows = call["structured"]["result"].as_array().unwrap();
    assert_eq!(rows[0]["payload"].as_str().unwrap().len(), 4_096);
    assert_eq!(rows[0]["payload_bytes"], 10_000);
    assert_eq!(rows[1]["payload"], "\\x00fffe");
    assert_eq!(rows[1]["payload_bytes"], 3);
}

/// Ten log rows with 10 MiB tracebacks, headers and dedupe keys of kilobytes, and a
/// thousand rows asked for: every traceback, headers text and dedupe key comes cut to
/// 4,096 characters with a note of the rest, the reply line stays under 2 MiB, and the
/// rows left out are counted in a last text item.
#[test]
fn answers_are_bounded_in_bytes() {
    let db = TestDb::new();
    let mut client = db.client();
    let traceback = json!({
        "job_id": 1,
        "exception_type": "Huge",
        "exception_message": "x",
        "traceback": "t".repeat(10 << 20),
    })
    .to_string();
    // Older small rows, enough to pass the byte budget after the big ones (the newest
    // come first).
    client
        .execute(
            "INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, traceback) \
             SELECT g, 'exception', 0, 'small', \
                    jsonb_build_object('exception_type', 'E', 'traceback', repeat('s', 3000)) \
             FROM generate_series(2, 990) g",
            &[],
        )
        .unwrap();
    for _ in 0..10 {
        client
            .execute(
                "INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, traceback) \
                 VALUES (1, 'exception', 0, 'big', $1::text::jsonb)",
                &[&traceback],
            )
            .unwrap();
    }
    client
        .execute(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, dedupe_key, headers, status) \
             VALUES (0, 'big', 'x', repeat('k', 2000), \
                     jsonb_build_object('h', repeat('h', 50000)), 'queued')",
            &[],
        )
        .unwrap();
    let server = pgqueuer::mcp::McpServer::new(db.pool(2));
    let calls = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "queue_log", "arguments": {"limit": 1000}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "queue_table_info", "arguments": {}}}),
    ];
    let input: String = calls.iter().map(|c| format!("{c}\n")).collect();
    let mut output = Vec::new();
    server
        .serve(std::io::Cursor::new(input), &mut output)
        .unwrap();
    let lines: Vec<&[u8]> = output
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 2);
    for line in &lines {
        assert!(line.len() < 2 << 20, "a reply of {} bytes", line.len());
    }
    let log: Value = serde_json::from_slice(lines[0]).unwrap();
    let rows = log["result"]["structuredContent"]["result"]
        .as_array()
        .unwrap();
    assert!(rows.len() >= 10 && rows.len() < 990, "{} rows", rows.len());
    let big = rows[0]["traceback"].as_str().unwrap();
    assert!(big.len() < 5_000, "a traceback of {} bytes", big.len());
    assert!(big.contains("more characters not shown"), "{big}");
    let content = log["result"]["content"].as_array().unwrap();
    let note = content.last().unwrap()["text"].as_str().unwrap();
    assert!(
        note.contains(&format!("{} more rows not shown", 999 - rows.len())),
        "{note}"
    );
    let info: Value = serde_json::from_slice(lines[1]).unwrap();
    let job = &info["result"]["structuredContent"]["result"][0];
    assert!(job["dedupe_key"].as_str().unwrap().len() < 5_000);
    assert!(
        job["headers"]
            .as_str()
            .unwrap()
            .contains("more characters not shown")
    );
}
