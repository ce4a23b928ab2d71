//! Job commands: queue, cancel, failed, requeue.

use pgqueuer::ops;
use pgqueuer::{NewJob, OnConflict};
use serde_json::Value;

use crate::args::{Args, parse_count, parse_priority, parse_seconds, switch, valued};
use crate::output::{Cell, number, print_json, short_time, table, text};
use crate::{Context, Failure, Outcome};

pub(crate) fn enqueue(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "queue",
        &[
            valued("--priority", None),
            valued("--delay", None),
            valued("--dedupe-key", None),
            valued("--on-conflict", None),
        ],
        argv,
    )?;
    let positionals = args.positionals(1, 2, "ENTRYPOINT")?;
    let entrypoint = &positionals[0];
    let mut job = match positionals.get(1) {
        Some(payload) => NewJob::new(entrypoint.as_str(), payload.as_bytes()),
        None => NewJob::without_payload(entrypoint.as_str()),
    };
    if let Some(priority) = args.parsed("--priority", parse_priority)? {
        job = job.priority(priority);
    }
    if let Some(delay) = args.parsed("--delay", parse_seconds)? {
        job = job.execute_after(delay);
    }
    let key = args.value("--dedupe-key");
    if let Some(key) = key {
        job = job.dedupe_key(key);
    }
    let raise = match args.value("--on-conflict").unwrap_or("raise") {
        "raise" => true,
        "skip" => false,
        other => {
            return Err(args.bad(&format!("--on-conflict {other:?}: expected raise or skip")));
        }
    };
    // As PgQueuer does: always skip in SQL (no error in the server log); the choice only
    // decides the exit status.
    match ctx.queue()?.enqueue_with(job, OnConflict::Skip)? {
        Some(id) => println!("Enqueued job {id}."),
        None if raise => {
            eprintln!("Error: duplicate dedupe_key {:?}.", key.unwrap_or_default());
            return Err(Failure::Reported);
        }
        None => println!(
            "Skipped: duplicate dedupe_key {:?}.",
            key.unwrap_or_default()
        ),
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
        eprintln!("{why}: {}", left.join(", "));
    }
}

pub(crate) fn cancel(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("cancel", &[], argv)?;
    let ids = args.ids()?;
    let cancelled = ctx.queue()?.cancel(&ids)?;
    println!("Cancelled {} job(s).", cancelled.len());
    report_left_out(
        &ids,
        &cancelled,
        "Not cancelled (not queued or picked: unknown, finished or failed)",
    );
    Ok(())
}

pub(crate) fn failed(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "failed",
        &[valued("--limit", Some("-n")), switch("--json")],
        argv,
    )?;
    args.none()?;
    let limit = args.parsed("--limit", parse_count)?.unwrap_or(25);
    let jobs = ctx
        .queue()?
        .list_failed(usize::try_from(limit).unwrap_or(usize::MAX))?;
    let items: Vec<Value> = jobs.iter().map(ops::failed_job_json).collect();
    if args.switch("--json") {
        print_json(items);
        return Ok(());
    }
    if items.is_empty() {
        println!("No failed jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = items
        .iter()
        .map(|j| {
            vec![
                number(&j["id"]),
                text(j["entrypoint"].as_str().unwrap_or_default()),
                number(&j["attempts"]),
                text(short_time(&j["created"])),
                number(&j["payload_bytes"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["ID", "Entrypoint", "Attempts", "Created", "Payload bytes"],
            &rows
        )
    );
    Ok(())
}

pub(crate) fn requeue(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("requeue", &[], argv)?;
    let ids = args.ids()?;
    let requeued = ctx.queue()?.requeue_failed(&ids)?;
    println!("Re-queued {} job(s).", requeued.len());
    report_left_out(&ids, &requeued, "Not re-queued (not held as failed)");
    Ok(())
}
