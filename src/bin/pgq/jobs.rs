//! Job commands: queue, job, cancel, failed, requeue.

use std::time::Duration;

use pgqueuer::{Explanation, FailedJob, Job, LogEntry, NewJob, OnConflict};
use serde_json::{Value, json};

use crate::args::OnConflictArg;
use crate::output::{Cell, iso_time, number, print_json, short, table, text};
use crate::{Context, Outcome, fail};

/// The arguments of `pgq queue`.
pub(crate) struct Enqueue {
    pub(crate) entrypoint: String,
    pub(crate) payload: Option<String>,
    pub(crate) priority: i32,
    pub(crate) delay: Option<Duration>,
    pub(crate) dedupe_key: Option<String>,
    pub(crate) on_conflict: OnConflictArg,
}

pub(crate) fn enqueue(ctx: &Context, args: Enqueue) -> Outcome {
    let mut job = match args.payload {
        Some(payload) => NewJob::new(args.entrypoint, payload.into_bytes()),
        None => NewJob::without_payload(args.entrypoint),
    }
    .priority(args.priority);
    if let Some(delay) = args.delay {
        job = job.execute_after(delay);
    }
    let key = args.dedupe_key.unwrap_or_default();
    if !key.is_empty() {
        job = job.dedupe_key(key.as_str());
    }
    // As PgQueuer does: always skip in SQL (no error in the server log); the choice only
    // decides the exit status.
    let enqueued = ctx
        .queue()?
        .enqueue_deduplicated(&[job], OnConflict::Skip)?;
    match enqueued.first().copied().flatten() {
        Some(id) => println!("Enqueued job {id}."),
        None if args.on_conflict == OnConflictArg::Raise => {
            return Err(fail(format!(
                "duplicate dedupe_key {key:?}: a queued or picked job holds it \
                 (--on-conflict skip exits 0 instead)"
            )));
        }
        None => println!("Skipped: duplicate dedupe_key {key:?}."),
    }
    Ok(())
}

/// Names on stderr the ids of `asked` that are not in `done`.
fn report_left_out(asked: &[i64], done: &[i64], why: &str) {
    let left: Vec<String> = asked
        .iter()
        .filter(|id| !done.contains(id))
        .map(i64::to_string)
        .collect();
    if !left.is_empty() {
        eprintln!("pgq: {why}: {}", left.join(", "));
    }
}

pub(crate) fn cancel(ctx: &Context, ids: &[i64]) -> Outcome {
    let cancelled = ctx.queue()?.cancel(ids)?;
    println!("Cancelled {} job(s).", cancelled.len());
    report_left_out(
        ids,
        &cancelled,
        "not cancelled (not queued or picked: unknown, finished or failed)",
    );
    Ok(())
}

pub(crate) fn requeue(ctx: &Context, ids: &[i64]) -> Outcome {
    let requeued = ctx.queue()?.requeue_failed(ids)?;
    println!("Re-queued {} job(s).", requeued.len());
    report_left_out(ids, &requeued, "not re-queued (not held as failed)");
    Ok(())
}

/// Every column of a job's row but the payload, as PgQueuer's JSON writes them, plus
/// `dedupe_key`, which PgQueuer's job model leaves out, and `payload_bytes` (the payload's
/// length; 0 when there is none).
fn row_json(job: &Job) -> serde_json::Map<String, Value> {
    let Value::Object(row) = json!({
        "id": job.id,
        "priority": job.priority,
        "created": iso_time(job.created),
        "updated": iso_time(job.updated),
        "heartbeat": iso_time(job.heartbeat),
        "execute_after": iso_time(job.execute_after),
        "status": job.status.as_str(),
        "entrypoint": job.entrypoint,
        "attempts": job.attempts,
        "queue_manager_id": job.queue_manager_id.map(|id| id.to_string()),
        "slot": job.slot,
        "headers": job.headers.as_ref().map(pgqueuer::Headers::to_json_value),
        "dedupe_key": job.dedupe_key,
        "payload_bytes": job.payload.as_ref().map_or(0, Vec::len),
    }) else {
        unreachable!("a JSON object literal")
    };
    let mut row = row;
    if let Some(problem) = &job.unreadable {
        row.insert("unreadable".into(), json!(problem));
    }
    row
}

/// A held job as PgQueuer's `pgq failed --json` writes it ([`row_json`]), with the
/// failure (`exception_type`, `exception_message`; `null` when its log row is gone).
fn failed_job_json(held: &FailedJob) -> Value {
    let mut row = row_json(&held.job);
    let failure = held.failure.as_ref();
    row.insert(
        "exception_type".into(),
        failure.map(|f| f.exception_type.as_str()).into(),
    );
    row.insert(
        "exception_message".into(),
        failure.map(|f| f.message.as_str()).into(),
    );
    Value::Object(row)
}

pub(crate) fn failed(ctx: &Context, limit: usize, json: bool) -> Outcome {
    let jobs = ctx.queue()?.list_failed(limit)?;
    if json {
        print_json(jobs.iter().map(failed_job_json).collect());
        return Ok(());
    }
    if jobs.is_empty() {
        println!("No failed jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = jobs
        .iter()
        .map(|held| {
            let job = &held.job;
            vec![
                number(&job.id),
                text(&job.entrypoint),
                number(&job.attempts),
                text(short(job.updated)),
                text(held.failure.as_ref().map_or_else(
                    || "(no failure logged)".to_owned(),
                    |f| one_line(&f.to_string(), 100),
                )),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["ID", "Entrypoint", "Attempts", "Failed", "Reason"], &rows)
    );
    println!("'pgq job ID' shows a job's payload and whole traceback.");
    Ok(())
}

/// The first line of `text`, cut to `max` characters with an ellipsis.
fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or_default();
    if first.chars().count() > max || text.lines().nth(1).is_some() {
        let cut: String = first.chars().take(max).collect();
        format!("{cut}…")
    } else {
        first.to_owned()
    }
}

/// A payload in `--json`: whole and exact, as text when it is UTF-8 and as hex digits
/// otherwise, so that a program gets its bytes back (people get the bounded
/// [`Job::payload_view`]).
fn payload_json(payload: Option<&[u8]>) -> (&'static str, String) {
    match payload {
        None => ("none", String::new()),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => ("text", text.to_owned()),
            Err(_) => ("hex", bytes.iter().map(|b| format!("{b:02x}")).collect()),
        },
    }
}

/// A job's row ([`row_json`]) with its payload, as text or hex.
fn job_json(job: &Job) -> Value {
    let (encoding, payload) = payload_json(job.payload.as_deref());
    let mut row = row_json(job);
    row.insert("payload_encoding".into(), encoding.into());
    row.insert(
        "payload".into(),
        job.payload.as_ref().map(|_| payload).into(),
    );
    Value::Object(row)
}

fn log_json(entry: &LogEntry) -> Value {
    json!({
        "id": entry.id,
        "created": iso_time(entry.created),
        "status": entry.status.as_str(),
        "priority": entry.priority,
        "entrypoint": entry.entrypoint,
        "traceback": entry.traceback,
    })
}

pub(crate) fn show(ctx: &Context, id: i64, json: bool) -> Outcome {
    let queue = ctx.queue()?;
    let job = queue.job(id)?;
    let history = queue.history(id)?;
    if job.is_none() && history.is_empty() {
        return Err(fail(format!(
            "no job {id}: it is not in the queue table and has no log rows (an unknown id, \
             or one whose log was pruned)"
        )));
    }
    if json {
        println!(
            "{}",
            json!({
                "id": id,
                "in_queue": job.is_some(),
                "job": job.as_ref().map(job_json),
                "log": history.iter().map(log_json).collect::<Vec<_>>(),
            })
        );
        return Ok(());
    }
    match &job {
        Some(job) => print_job(job),
        None => {
            let last = history.last().map_or("unknown", |e| e.status.as_str());
            println!(
                "Job {id} ({}) is no longer in the queue table: it ended {last}.",
                history.first().map_or("", |e| e.entrypoint.as_str())
            );
        }
    }
    println!("\nLog ({} rows, oldest first):", history.len());
    if history.is_empty() {
        println!("  (none: the log was pruned, or the job was inserted without one)");
    }
    for entry in &history {
        println!(
            "  {}  {:<10}  priority {}",
            short(entry.created),
            entry.status.as_str(),
            entry.priority
        );
        if let Some(failure) = entry.failure() {
            println!("      {failure}");
            for line in failure.traceback.lines() {
                println!("      | {line}");
            }
        } else if let Some(traceback) = &entry.traceback {
            println!("      traceback: {traceback}");
        }
    }
    Ok(())
}

fn print_job(job: &Job) {
    println!("Job {} ({}), status {}", job.id, job.entrypoint, job.status);
    let fields = [
        ("priority", job.priority.to_string()),
        ("attempts", job.attempts.to_string()),
        ("created", short(job.created)),
        ("updated", short(job.updated)),
        ("execute after", short(job.execute_after)),
        ("heartbeat", short(job.heartbeat)),
        (
            "worker",
            job.queue_manager_id
                .map_or_else(|| "-".to_owned(), |w| w.to_string()),
        ),
        (
            "slot",
            job.slot.map_or_else(|| "-".to_owned(), |s| s.to_string()),
        ),
        (
            "dedupe key",
            job.dedupe_key.clone().unwrap_or_else(|| "-".into()),
        ),
    ];
    for (name, value) in fields {
        println!("  {name:<14} {value}");
    }
    if let Some(problem) = &job.unreadable {
        println!("  {:<14} {problem}", "unreadable");
    }
    match job.payload_view() {
        None => println!("\nPayload: none"),
        Some(view) => {
            println!("\nPayload ({}, {}):", view.size_note(), view.kind);
            for line in view.text.lines() {
                println!("  {line}");
            }
        }
    }
    match &job.headers {
        None => println!("\nHeaders: none"),
        Some(headers) => println!(
            "\nHeaders:\n  {}",
            headers
                .value()
                .and_then(|v| serde_json::to_string_pretty(v).ok())
                .unwrap_or_else(|| headers.as_json().to_owned())
                .replace('\n', "\n  ")
        ),
    }
}

fn explanation_json(e: &Explanation) -> Value {
    let mut out = json!({ "kind": e.state(), "text": e.to_string() });
    match e {
        Explanation::Unknown(id) => out["id"] = json!(id),
        Explanation::Finished { id, last } => {
            out["id"] = json!(id);
            out["last"] = log_json(last);
        }
        Explanation::Held { job, failure } => {
            out["job"] = Value::Object(row_json(job));
            out["exception_type"] = json!(failure.as_ref().map(|f| &f.exception_type));
            out["exception_message"] = json!(failure.as_ref().map(|f| &f.message));
        }
        Explanation::Deferred { job, due_in } => {
            out["job"] = Value::Object(row_json(job));
            out["due_in_seconds"] = json!(due_in.as_secs_f64());
        }
        Explanation::Running { job, heartbeat_age } | Explanation::Stale { job, heartbeat_age } => {
            out["job"] = Value::Object(row_json(job));
            out["heartbeat_age_seconds"] = json!(heartbeat_age.as_secs_f64());
        }
        Explanation::Waiting {
            job,
            ahead,
            holders,
            rate_wait,
        } => {
            out["job"] = Value::Object(row_json(job));
            out["ahead"] = json!(ahead);
            out["rate_wait_seconds"] = json!(rate_wait.map(|w| w.as_secs_f64()));
            out["holders"] = holders
                .iter()
                .map(|h| {
                    json!({
                        "job_id": h.job_id,
                        "slot": h.slot,
                        "queue_manager_id": h.worker.map(|w| w.to_string()),
                        "heartbeat_age_seconds": h.heartbeat_age.as_secs_f64(),
                    })
                })
                .collect();
        }
        _ => {}
    }
    out
}

pub(crate) fn explain(ctx: &Context, id: i64, heartbeat_timeout: Duration, json: bool) -> Outcome {
    let explanation = ctx.queue()?.explain_stale_after(id, heartbeat_timeout)?;
    if json {
        println!("{}", explanation_json(&explanation));
    } else {
        println!("{explanation}.");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use pgqueuer::{Failure, Status};

    use super::*;

    fn held(payload: Option<Vec<u8>>) -> FailedJob {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        FailedJob {
            job: Job {
                id: 7,
                priority: 2,
                queue_manager_id: None,
                created: t,
                updated: t,
                heartbeat: t,
                execute_after: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
                status: Status::Failed,
                entrypoint: "email".into(),
                dedupe_key: None,
                payload,
                headers: None,
                attempts: 3,
                slot: None,
                unreadable: None,
            },
            failure: Some(Failure {
                exception_type: "ValueError".into(),
                message: "bad address".into(),
                traceback: "Traceback ...".into(),
            }),
        }
    }

    #[test]
    fn failed_job_json_replaces_the_payload_with_its_length() {
        let v = failed_job_json(&held(Some(b"hello".to_vec())));
        assert_eq!(v["payload_bytes"], 5);
        assert!(v.get("payload").is_none());
        assert_eq!(v["created"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(v["execute_after"], "2023-11-14T22:13:20Z");
        assert_eq!(v["status"], "failed");
        assert_eq!(v["headers"], Value::Null);
        assert_eq!(v["attempts"], 3);
        assert_eq!(v["exception_type"], "ValueError");
        assert_eq!(v["exception_message"], "bad address");
        assert_eq!(failed_job_json(&held(None))["payload_bytes"], 0);
    }

    #[test]
    fn json_payloads_are_text_or_hex() {
        assert_eq!(payload_json(Some(b"hi")), ("text", "hi".to_owned()));
        assert_eq!(
            payload_json(Some(&[0xff, 0x00, 0x10])),
            ("hex", "ff0010".to_owned())
        );
        assert_eq!(payload_json(None).0, "none");
        assert_eq!(one_line("a\nb", 10), "a…");
        assert_eq!(one_line("abc", 2), "ab…");
        assert_eq!(one_line("abc", 3), "abc");
    }
}
