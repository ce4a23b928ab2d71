//! Jobs: `queue`, `sizes`, `cancel`, `failed`, `requeue` and `job`.

use std::time::Duration;

use pgqueuer::{Claimer, NewJob, Queue, Status};
use serde_json::Value;

use super::{enqueued_id, pgq, process};
use crate::claim::insert_jobs;
use crate::harness::{TestDb, scalar};

/// `pgq queue` stores the payload, priority and delay it is given (no payload is SQL
/// NULL), and a repeated dedupe key fails or, with `--on-conflict skip`, is skipped.
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

/// `sizes`, `failed`, `cancel` and `requeue` report and change the queue as the library
/// does, in Python's JSON shapes, and name the ids they could not act on.
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

/// `pgq failed` shows why each job is held, and `pgq job ID` shows one job whole: its
/// row, payload (text or hex), headers and log with tracebacks, before and after it
/// leaves the queue table. The library's `Queue::job` and `Queue::history` agree.
#[test]
fn failed_and_job_show_reasons_payloads_and_history() {
    use pgqueuer::{Entrypoint, OnFailure, Worker};

    let db = TestDb::new();
    let queue = Queue::new(db.pool(4));
    let held = queue
        .enqueue(NewJob::new("fragile", b"payload text".to_vec()))
        .unwrap();
    let done = queue.enqueue(NewJob::new("fine", b"ok".to_vec())).unwrap();
    Worker::builder(db.pool(4))
        .entrypoint(
            Entrypoint::new("fragile").on_failure(OnFailure::Hold),
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
            && shown.contains("  00000000  ff fe 00 41")
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
