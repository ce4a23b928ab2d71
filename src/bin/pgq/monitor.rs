//! Monitoring commands: stale, workers, backlog, sizes, dashboard, listen.

use std::io::Write;
use std::time::{Duration, Instant};

use pgqueuer::ops::{self, Aggregation};
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{Error, Settings};
use serde_json::json;

use crate::args::{Args, format_span, parse_count, parse_positive, parse_seconds, switch, valued};
use crate::output::{Cell, clock, number, print_json, short_time, table, text};
use crate::{Context, Failure, Outcome};

pub(crate) fn stale(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "stale",
        &[
            valued("--threshold", Some("-t")),
            valued("--limit", Some("-n")),
            switch("--json"),
        ],
        argv,
    )?;
    args.none()?;
    let threshold = args
        .parsed("--threshold", parse_seconds)?
        .unwrap_or(Duration::from_secs(300));
    let limit = args.parsed("--limit", parse_count)?.unwrap_or(25);
    let mut conn = ctx.connect()?;
    let jobs = ops::stale_jobs(
        &mut *conn,
        &ctx.settings,
        threshold,
        usize::try_from(limit).unwrap_or(usize::MAX),
    )?;
    if args.switch("--json") {
        print_json(jobs.iter().map(ops::StaleJob::to_json).collect());
        return Ok(());
    }
    if jobs.is_empty() {
        println!("No stale jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = jobs
        .iter()
        .map(|j| {
            let v = j.to_json();
            vec![
                number(&j.id),
                text(&j.entrypoint),
                text(
                    j.queue_manager_id
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                ),
                text(short_time(&v["heartbeat"])),
                number(&format!("{:.0}", j.seconds_since_heartbeat)),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "ID",
                "Entrypoint",
                "Queue manager",
                "Heartbeat",
                "Seconds since heartbeat"
            ],
            &rows
        )
    );
    Ok(())
}

fn worker_rows(workers: &[ops::ActiveWorker]) -> Vec<Vec<Cell>> {
    workers
        .iter()
        .map(|w| {
            let v = w.to_json();
            vec![
                text(w.queue_manager_id.to_string()),
                number(&w.active_jobs),
                text(short_time(&v["oldest_heartbeat"])),
                text(short_time(&v["newest_heartbeat"])),
                text(w.entrypoints.join(", ")),
            ]
        })
        .collect()
}

const WORKER_HEADERS: [&str; 5] = [
    "Queue manager",
    "Picked jobs",
    "Oldest heartbeat",
    "Newest heartbeat",
    "Entrypoints",
];

pub(crate) fn workers(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("workers", &[switch("--json")], argv)?;
    args.none()?;
    let mut conn = ctx.connect()?;
    let active = ops::active_workers(&mut *conn, &ctx.settings)?;
    if args.switch("--json") {
        print_json(active.iter().map(ops::ActiveWorker::to_json).collect());
        return Ok(());
    }
    if active.is_empty() {
        println!("No workers are holding picked jobs.");
        return Ok(());
    }
    print!("{}", table(&WORKER_HEADERS, &worker_rows(&active)));
    Ok(())
}

pub(crate) fn backlog(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("backlog", &[switch("--json")], argv)?;
    args.none()?;
    let mut conn = ctx.connect()?;
    let ages = ops::queue_age(&mut *conn, &ctx.settings)?;
    if args.switch("--json") {
        print_json(ages.iter().map(ops::QueueAge::to_json).collect());
        return Ok(());
    }
    if ages.is_empty() {
        println!("No queued jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = ages
        .iter()
        .map(|a| {
            let v = a.to_json();
            vec![
                text(&a.entrypoint),
                number(&a.queued_count),
                text(short_time(&v["oldest_created"])),
                number(&format!("{:.0}", a.oldest_age_seconds)),
                number(&format!("{:.0}", a.avg_age_seconds)),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "Entrypoint",
                "Queued",
                "Oldest created",
                "Oldest age (s)",
                "Average age (s)"
            ],
            &rows
        )
    );
    Ok(())
}

pub(crate) fn sizes(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("sizes", &[switch("--json")], argv)?;
    args.none()?;
    let sizes = ctx.queue()?.sizes()?;
    if args.switch("--json") {
        print_json(
            sizes
                .iter()
                .map(|s| {
                    json!({
                        "entrypoint": s.entrypoint,
                        "priority": s.priority,
                        "status": s.status.as_str(),
                        "count": s.count,
                    })
                })
                .collect(),
        );
        return Ok(());
    }
    if sizes.is_empty() {
        println!("The queue is empty.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = sizes
        .iter()
        .map(|s| {
            vec![
                text(&s.entrypoint),
                number(&s.priority),
                text(s.status.as_str()),
                number(&s.count),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["Entrypoint", "Priority", "Status", "Count"], &rows)
    );
    Ok(())
}

/// The window of the dashboard's throughput table.
const DASHBOARD_WINDOW: Duration = Duration::from_secs(60);

/// One dashboard frame.
fn dashboard_frame(
    conn: &mut pgqueuer::Conn,
    settings: &Settings,
    limit: usize,
) -> Result<String, Error> {
    let aggregation = match ops::aggregate_log(&mut **conn, settings)? {
        Aggregation::Folded { log_rows, .. } => format!("{log_rows} new log rows aggregated"),
        Aggregation::Busy => "another session is aggregating the log".to_owned(),
    };
    let throughput = ops::throughput(&mut **conn, settings, DASHBOARD_WINDOW)?;
    let backlog = ops::queue_age(&mut **conn, settings)?;
    let workers = ops::active_workers(&mut **conn, settings)?;
    let window = DASHBOARD_WINDOW.as_secs();
    let mut out = format!("PgQueuer dashboard, {} UTC ({aggregation})\n\n", clock());

    out.push_str(&format!("Throughput, last {window} s\n"));
    if throughput.is_empty() {
        out.push_str("  (nothing)\n");
    } else {
        let rows: Vec<Vec<Cell>> = throughput
            .iter()
            .take(limit)
            .map(|t| {
                let rate = t.count as f64 / window as f64;
                vec![
                    text(&t.entrypoint),
                    text(t.status.as_str()),
                    number(&t.count),
                    number(&format!("{rate:.2}")),
                ]
            })
            .collect();
        out.push_str(&table(
            &["Entrypoint", "Status", "Count", "Per second"],
            &rows,
        ));
    }

    out.push_str("\nBacklog\n");
    if backlog.is_empty() {
        out.push_str("  (no queued jobs)\n");
    } else {
        let rows: Vec<Vec<Cell>> = backlog
            .iter()
            .take(limit)
            .map(|a| {
                vec![
                    text(&a.entrypoint),
                    number(&a.queued_count),
                    number(&format!("{:.0}", a.oldest_age_seconds)),
                ]
            })
            .collect();
        out.push_str(&table(&["Entrypoint", "Queued", "Oldest age (s)"], &rows));
    }

    out.push_str("\nWorkers\n");
    if workers.is_empty() {
        out.push_str("  (no worker holds a picked job)\n");
    } else {
        let shown = &workers[..workers.len().min(limit)];
        out.push_str(&table(&WORKER_HEADERS, &worker_rows(shown)));
    }
    Ok(out)
}

pub(crate) fn dashboard(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "dashboard",
        &[
            valued("--interval", Some("-i")),
            valued("--limit", Some("-n")),
            valued("--count", None),
        ],
        argv,
    )?;
    args.none()?;
    let interval = args.parsed("--interval", parse_seconds)?;
    if interval.is_some_and(|d| d.is_zero()) {
        return Err(args.bad("--interval must be more than 0 seconds"));
    }
    let limit = args.parsed("--limit", parse_count)?.unwrap_or(25);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let count = args.parsed("--count", parse_positive)?;
    if count.is_some() && interval.is_none() {
        return Err(args.bad("--count needs --interval (without it the dashboard prints once)"));
    }
    let mut conn = ctx.connect()?;
    let mut frames = 0u64;
    loop {
        let frame = dashboard_frame(&mut conn, &ctx.settings, limit)?;
        let mut stdout = std::io::stdout().lock();
        let written = if interval.is_some() {
            write!(stdout, "\x1b[2J\x1b[H{frame}")
        } else {
            write!(stdout, "{frame}")
        };
        if written.and_then(|()| stdout.flush()).is_err() {
            // stdout closed (a pipe reader went away): nothing more to show.
            return Ok(());
        }
        drop(stdout);
        frames += 1;
        match interval {
            Some(pause) if count.is_none_or(|c| frames < c) => std::thread::sleep(pause),
            _ => return Ok(()),
        }
    }
}

/// How long `listen` waits in silence before it checks that its connection still works.
const LISTEN_PROBE_AFTER: Duration = Duration::from_secs(30);

pub(crate) fn listen(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "listen",
        &[
            valued("--channel", None),
            valued("--count", None),
            valued("--timeout", None),
        ],
        argv,
    )?;
    args.none()?;
    let channel = args
        .value("--channel")
        .map_or_else(|| ctx.settings.channel.clone(), str::to_owned);
    let count = args.parsed("--count", parse_positive)?;
    let timeout = args.parsed("--timeout", parse_seconds)?;
    let mut conn = ctx.connect()?;
    ops::listen(&mut *conn, &channel)?;
    let deadline = timeout.map(|t| Instant::now() + t);
    eprintln!("Listening on channel {channel:?}; Ctrl-C to stop.");
    let mut seen = 0u64;
    let mut quiet_since = Instant::now();
    while count.is_none_or(|c| seen < c) {
        let now = Instant::now();
        let mut wait = LISTEN_PROBE_AFTER.saturating_sub(now - quiet_since);
        if let Some(deadline) = deadline {
            if now >= deadline {
                return match count {
                    Some(c) => {
                        eprintln!(
                            "pgq: timed out after {} with {seen} of {c} events",
                            format_span(timeout.unwrap_or_default())
                        );
                        Err(Failure::Reported)
                    }
                    None => Ok(()),
                };
            }
            wait = wait.min(deadline - now);
        }
        // A fresh timeout_iter per wait: one that has returned None stays exhausted.
        let next = conn.notifications().timeout_iter(wait).next();
        match next? {
            Some(note) => {
                let payload = note.payload();
                let kind = match pgqueuer::events::Event::parse(payload) {
                    Ok(event) => event.kind().to_owned(),
                    Err(e) => {
                        log::warn!("unparsable event: {e}");
                        "unparsable".to_owned()
                    }
                };
                let mut stdout = std::io::stdout().lock();
                if writeln!(stdout, "{kind} {payload}")
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    return Ok(());
                }
                seen += 1;
                quiet_since = Instant::now();
            }
            None => {
                if conn.is_closed() {
                    return Err(Failure::Failed(Error::Unexpected(
                        "the LISTEN connection was closed by the server".into(),
                    )));
                }
                if quiet_since.elapsed() >= LISTEN_PROBE_AFTER {
                    conn.is_valid(Duration::from_secs(5))?;
                    quiet_since = Instant::now();
                }
            }
        }
    }
    Ok(())
}

const SCHEDULE_HEADERS: [&str; 7] = [
    "Id",
    "Expression",
    "Entrypoint",
    "Status",
    "Next run",
    "Last run",
    "Heartbeat",
];

pub(crate) fn schedules(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "schedules",
        &[valued("--remove", Some("-r")), switch("--json")],
        argv,
    )?;
    args.none()?;
    let mut conn = ctx.connect()?;
    let targets = args.values("--remove");
    if !targets.is_empty() {
        let removed = pgqueuer::schedules::remove_targets(&mut *conn, &ctx.settings, &targets)?;
        eprintln!("Removed {removed} schedule(s).");
    }
    let rows = pgqueuer::schedules::list(&mut *conn, &ctx.settings)?;
    if args.switch("--json") {
        print_json(rows.iter().map(pgqueuer::Schedule::to_json).collect());
        return Ok(());
    }
    if rows.is_empty() {
        println!("No schedules.");
        return Ok(());
    }
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|r| {
            let v = r.to_json();
            vec![
                number(&r.id),
                text(&r.expression),
                text(&r.entrypoint),
                text(r.status.map_or("", pgqueuer::Status::as_str)),
                text(short_time(&v["next_run"])),
                text(short_time(&v["last_run"])),
                text(short_time(&v["heartbeat"])),
            ]
        })
        .collect();
    print!("{}", table(&SCHEDULE_HEADERS, &cells));
    Ok(())
}
