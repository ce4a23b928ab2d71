//! Monitoring commands: stale, workers, backlog, sizes, dashboard, listen.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use pgqueuer::ops::{self, Aggregation};
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{Error, Settings};
use serde_json::{Value, json};

use crate::args::LimitsCommand;
use crate::args::format_span;
use crate::output::{
    Cell, backlog_json, clock, iso_time, number, print_json, schedule_json, short, stale_json,
    table, text, throughput_json, worker_json,
};
use crate::{Context, Failure, Outcome, fail};

pub(crate) fn stale(ctx: &Context, threshold: Duration, limit: usize, json: bool) -> Outcome {
    let mut conn = ctx.connect()?;
    let jobs = ops::stale_jobs(&mut *conn, &ctx.settings, threshold, limit)?;
    if json {
        print_json(jobs.iter().map(stale_json).collect());
        return Ok(());
    }
    if jobs.is_empty() {
        println!("No stale jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = jobs
        .iter()
        .map(|s| {
            let j = &s.job;
            vec![
                number(&j.id),
                text(&j.entrypoint),
                text(
                    j.queue_manager_id
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                ),
                text(short(j.heartbeat)),
                number(&format!("{:.0}", s.seconds_since_heartbeat)),
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
            vec![
                text(w.queue_manager_id.to_string()),
                number(&w.active_jobs),
                text(short(w.oldest_heartbeat)),
                text(short(w.newest_heartbeat)),
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

pub(crate) fn workers(ctx: &Context, json: bool) -> Outcome {
    let mut conn = ctx.connect()?;
    let active = ops::active_workers(&mut *conn, &ctx.settings)?;
    if json {
        print_json(active.iter().map(worker_json).collect());
        return Ok(());
    }
    if active.is_empty() {
        println!("No workers are holding picked jobs.");
        return Ok(());
    }
    print!("{}", table(&WORKER_HEADERS, &worker_rows(&active)));
    Ok(())
}

pub(crate) fn backlog(ctx: &Context, json: bool) -> Outcome {
    let mut conn = ctx.connect()?;
    let ages = ops::queue_age(&mut *conn, &ctx.settings)?;
    if json {
        print_json(ages.iter().map(backlog_json).collect());
        return Ok(());
    }
    if ages.is_empty() {
        println!("No queued jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = ages
        .iter()
        .map(|a| {
            vec![
                text(&a.entrypoint),
                number(&a.queued_count),
                text(short(a.oldest_created)),
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

pub(crate) fn sizes(ctx: &Context, json: bool) -> Outcome {
    let sizes = ctx.queue()?.sizes()?;
    if json {
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

/// What one dashboard frame shows.
struct Frame {
    aggregation: String,
    throughput: Vec<ops::Throughput>,
    backlog: Vec<ops::QueueAge>,
    workers: Vec<ops::ActiveWorker>,
}

/// Aggregates the log, then reads one frame.
fn read_frame(conn: &mut pgqueuer::Conn, settings: &Settings) -> Result<Frame, Error> {
    let aggregation = match ops::aggregate_log(&mut **conn, settings)? {
        Aggregation::Folded { log_rows, .. } => format!("{log_rows} new log rows aggregated"),
        Aggregation::Busy => "another session is aggregating the log".to_owned(),
    };
    Ok(Frame {
        aggregation,
        throughput: ops::throughput(&mut **conn, settings, DASHBOARD_WINDOW)?,
        backlog: ops::queue_age(&mut **conn, settings)?,
        workers: ops::active_workers(&mut **conn, settings)?,
    })
}

fn frame_json(frame: &Frame, limit: usize) -> Value {
    json!({
        "time": crate::output::iso_time(std::time::SystemTime::now()),
        "window_seconds": DASHBOARD_WINDOW.as_secs(),
        "aggregation": frame.aggregation,
        "throughput": frame.throughput.iter().take(limit).map(throughput_json).collect::<Vec<_>>(),
        "backlog": frame.backlog.iter().take(limit).map(backlog_json).collect::<Vec<_>>(),
        "workers": frame.workers.iter().take(limit).map(worker_json).collect::<Vec<_>>(),
    })
}

fn frame_text(frame: &Frame, limit: usize) -> String {
    let window = DASHBOARD_WINDOW.as_secs();
    let mut out = format!(
        "PgQueuer dashboard, {} UTC ({})\n\n",
        clock(),
        frame.aggregation
    );

    out.push_str(&format!("Throughput, last {window} s\n"));
    if frame.throughput.is_empty() {
        out.push_str("  (nothing)\n");
    } else {
        let rows: Vec<Vec<Cell>> = frame
            .throughput
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
    if frame.backlog.is_empty() {
        out.push_str("  (no queued jobs)\n");
    } else {
        let rows: Vec<Vec<Cell>> = frame
            .backlog
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
    if frame.workers.is_empty() {
        out.push_str("  (no worker holds a picked job)\n");
    } else {
        let shown = &frame.workers[..frame.workers.len().min(limit)];
        out.push_str(&table(&WORKER_HEADERS, &worker_rows(shown)));
    }
    out
}

/// Prints frames: once, or every `interval` (`count` times, or until Ctrl-C). On a
/// terminal each refresh clears the screen; into a pipe or file the frames follow each
/// other, separated by a blank line (one JSON object per line with `json`).
pub(crate) fn dashboard(
    ctx: &Context,
    interval: Option<Duration>,
    limit: usize,
    count: Option<u64>,
    json: bool,
) -> Outcome {
    let mut conn = ctx.connect()?;
    let clear = interval.is_some() && !json && std::io::stdout().is_terminal();
    let mut frames = 0u64;
    loop {
        let frame = read_frame(&mut conn, &ctx.settings)?;
        let text = if json {
            format!("{}\n", frame_json(&frame, limit))
        } else if clear {
            format!("\x1b[2J\x1b[H{}", frame_text(&frame, limit))
        } else if frames > 0 {
            format!("\n{}", frame_text(&frame, limit))
        } else {
            frame_text(&frame, limit)
        };
        let mut stdout = std::io::stdout().lock();
        if write!(stdout, "{text}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
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

pub(crate) fn listen(
    ctx: &Context,
    channel: Option<String>,
    count: Option<u64>,
    timeout: Option<Duration>,
) -> Outcome {
    let channel = channel.unwrap_or_else(|| ctx.settings.channel.clone());
    let mut conn = ctx.connect()?;
    if conn.pooler().is_transaction_mode() {
        // LISTEN through a transaction pooler hears nothing: use the direct DSN.
        let Some(direct) = std::env::var("PGQUEUER_LISTEN_DSN")
            .ok()
            .filter(|d| !d.trim().is_empty())
        else {
            return Err(Failure::Message(
                "PGQUEUER_POOLER=transaction: LISTEN cannot work through a transaction \
                 pooler; set PGQUEUER_LISTEN_DSN to a direct connection (or run pgq listen \
                 with --dsn of one and PGQUEUER_POOLER unset)"
                    .into(),
            ));
        };
        conn = pgqueuer::connect_one(&direct, "pgq")?;
    }
    ops::listen(&mut *conn, &channel)?;
    let deadline = timeout.map(|t| Instant::now() + t);
    eprintln!("pgq: listening on channel {channel:?}; Ctrl-C to stop.");
    let mut seen = 0u64;
    let mut quiet_since = Instant::now();
    while count.is_none_or(|c| seen < c) {
        let now = Instant::now();
        let mut wait = LISTEN_PROBE_AFTER.saturating_sub(now - quiet_since);
        if let Some(deadline) = deadline {
            if now >= deadline {
                return match count {
                    Some(c) => Err(fail(format!(
                        "timed out after {} with {seen} of {c} events",
                        format_span(timeout.unwrap_or_default())
                    ))),
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

/// Splits `--remove` targets into ids (all ASCII digits) and entrypoints (the rest), as
/// PgQueuer's `pgq schedules --remove` reads them.
fn split_targets(targets: &[String]) -> Result<(Vec<i64>, Vec<&str>), Failure> {
    let mut ids = Vec::new();
    let mut entrypoints = Vec::new();
    for target in targets {
        if !target.is_empty() && target.bytes().all(|b| b.is_ascii_digit()) {
            let id = target
                .parse()
                .map_err(|_| fail(format!("--remove {target}: too large to be a schedule id")))?;
            ids.push(id);
        } else {
            entrypoints.push(target.as_str());
        }
    }
    Ok((ids, entrypoints))
}

pub(crate) fn schedules(ctx: &Context, remove: &[String], json: bool) -> Outcome {
    let (ids, entrypoints) = split_targets(remove)?;
    let mut conn = ctx.connect()?;
    if !remove.is_empty() {
        let removed = pgqueuer::schedules::remove(&mut *conn, &ctx.settings, &ids, &entrypoints)?;
        eprintln!("pgq: removed {removed} schedule(s).");
    }
    let rows = pgqueuer::schedules::list(&mut *conn, &ctx.settings)?;
    if json {
        print_json(rows.iter().map(schedule_json).collect());
        return Ok(());
    }
    if rows.is_empty() {
        println!("No schedules.");
        return Ok(());
    }
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|r| {
            vec![
                number(&r.id),
                text(&r.expression),
                text(&r.entrypoint),
                text(r.status.map_or("", pgqueuer::Status::as_str)),
                text(short(r.next_run)),
                text(r.last_run.map(short).unwrap_or_default()),
                text(short(r.heartbeat)),
            ]
        })
        .collect();
    print!("{}", table(&SCHEDULE_HEADERS, &cells));
    Ok(())
}

pub(crate) fn limits(ctx: &Context, json: bool) -> Outcome {
    let mut conn = ctx.connect()?;
    let slots = ops::slots_in_use(&mut *conn, &ctx.settings)?;
    let stored = ops::stored_limits(&mut *conn, &ctx.settings)?;
    let declared = ops::declared_limits(&mut *conn, &ctx.settings)?;
    let changes = ops::limit_changes(&mut *conn, &ctx.settings, 10)?;
    // Every entrypoint that holds slots, has stored limits or a running worker.
    let mut names: Vec<&str> = slots
        .iter()
        .map(|s| s.entrypoint.as_str())
        .chain(stored.iter().map(|s| s.entrypoint.as_str()))
        .chain(declared.iter().map(|d| d.entrypoint.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let views: Vec<LimitsView<'_>> = names
        .iter()
        .map(|name| LimitsView {
            entrypoint: name,
            slots: slots.iter().find(|s| s.entrypoint == *name),
            stored: stored.iter().find(|s| s.entrypoint == *name),
            declared: declared.iter().filter(|d| d.entrypoint == *name).collect(),
        })
        .collect();
    if json {
        print_json(views.iter().map(LimitsView::json).collect());
        return Ok(());
    }
    if views.is_empty() {
        println!(
            "No picked jobs, no stored limits and no running worker of this crate ('pgq limits \
             set' stores limits)."
        );
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = views
        .iter()
        .map(|v| {
            vec![
                text(v.entrypoint),
                text(v.declared_text()),
                text(v.stored_text()),
                text(v.in_force_text()),
            ]
        })
        .collect();
    println!("Limits (stored ones override what workers declare; 'pgq limits set' stores some):");
    print!(
        "{}",
        table(
            &["Entrypoint", "Declared by workers", "Stored", "In force"],
            &rows
        )
    );
    if !slots.is_empty() {
        let rows: Vec<Vec<Cell>> = slots
            .iter()
            .map(|s| {
                vec![
                    text(&s.entrypoint),
                    number(&s.in_use),
                    text(s.highest.map_or_else(|| "-".into(), |h| h.to_string())),
                    text(
                        s.highest
                            .map_or_else(|| "-".into(), |h| format!(">= {}", h + 1)),
                    ),
                    number(&s.unslotted),
                ]
            })
            .collect();
        println!();
        print!(
            "{}",
            table(
                &[
                    "Entrypoint",
                    "Slots held",
                    "Highest slot",
                    "Limit of its worker",
                    "Picked without slot"
                ],
                &rows
            )
        );
        println!(
            "A worker that took slot N had a limit above N: a highest slot at or above the \
             limit in force means workers disagree (the largest limit is the one that holds), \
             or that a lowered limit is still draining."
        );
    }
    if !changes.is_empty() {
        let rows: Vec<Vec<Cell>> = changes
            .iter()
            .map(|c| {
                vec![
                    text(short(c.changed)),
                    text(format!("{} ({})", c.changed_by, c.db_user)),
                    text(&c.entrypoint),
                    text(&c.action),
                    text(
                        c.concurrency_limit
                            .map_or_else(|| "-".to_owned(), concurrency_text),
                    ),
                    text(
                        c.rates
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), |r| rates_text(r)),
                    ),
                ]
            })
            .collect();
        println!();
        println!("Latest changes:");
        print!(
            "{}",
            table(
                &["When", "By", "Entrypoint", "Action", "Concurrency", "Rates"],
                &rows
            )
        );
    }
    Ok(())
}

/// What `pgq limits` knows of one entrypoint.
struct LimitsView<'a> {
    entrypoint: &'a str,
    slots: Option<&'a ops::SlotUse>,
    stored: Option<&'a ops::StoredLimits>,
    declared: Vec<&'a ops::DeclaredLimits>,
}

impl LimitsView<'_> {
    /// The distinct declarations, each with how many workers make it.
    fn declarations(&self) -> Vec<(u32, &[String], usize)> {
        let mut seen: Vec<(u32, &[String], usize)> = Vec::new();
        for d in &self.declared {
            match seen
                .iter_mut()
                .find(|(l, r, _)| *l == d.concurrency_limit && *r == d.rates.as_slice())
            {
                Some(entry) => entry.2 += 1,
                None => seen.push((d.concurrency_limit, &d.rates, 1)),
            }
        }
        seen
    }

    fn declared_text(&self) -> String {
        let declarations = self.declarations();
        if declarations.is_empty() {
            return "no running worker".into();
        }
        declarations
            .iter()
            .map(|(limit, rates, n)| {
                format!(
                    "{}, {} ({n} worker{})",
                    concurrency_text(*limit),
                    rates_text(rates),
                    if *n == 1 { "" } else { "s" }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn stored_text(&self) -> String {
        let Some(s) = self.stored else {
            return "-".into();
        };
        format!(
            "{}, {} (by {}, {})",
            s.concurrency_limit
                .map_or_else(|| "concurrency as declared".to_owned(), concurrency_text),
            s.rates.as_ref().map_or_else(
                || "rates as declared".to_owned(),
                |r| rates_text(&r.iter().map(ToString::to_string).collect::<Vec<_>>())
            ),
            s.changed_by,
            short(s.changed)
        )
    }

    /// The limits every worker of this crate keeps: the stored ones, over what they
    /// declare.
    fn in_force_text(&self) -> String {
        let declarations = self.declarations();
        let concurrency: Option<u32> =
            self.stored
                .and_then(|s| s.concurrency_limit)
                .or(match declarations.as_slice() {
                    [(limit, _, _)] => Some(*limit),
                    _ => None,
                });
        let rates: Option<Vec<String>> = self
            .stored
            .and_then(|s| s.rates.as_ref())
            .map(|r| r.iter().map(ToString::to_string).collect())
            .or(match declarations.as_slice() {
                [(_, rates, _)] => Some(rates.to_vec()),
                _ => None,
            });
        match (concurrency, rates) {
            (Some(c), Some(r)) => format!("{}, {}", concurrency_text(c), rates_text(&r)),
            (Some(c), None) if declarations.is_empty() => {
                format!("{}, rates as each worker declares", concurrency_text(c))
            }
            (None, Some(r)) if declarations.is_empty() => {
                format!("concurrency as each worker declares, {}", rates_text(&r))
            }
            _ if declarations.is_empty() => "as each worker declares".into(),
            _ => "differs by worker: declare the same limits, or store them".into(),
        }
    }

    fn json(&self) -> Value {
        json!({
            "entrypoint": self.entrypoint,
            "slots_in_use": self.slots.map_or(0, |s| s.in_use),
            "highest_slot": self.slots.and_then(|s| s.highest),
            "smallest_limit_that_took_it": self.slots.and_then(|s| s.highest.map(|h| h + 1)),
            "picked_without_slot": self.slots.map_or(0, |s| s.unslotted),
            "declared": self.declared.iter().map(|d| json!({
                "worker": d.worker.to_string(),
                "concurrency_limit": d.concurrency_limit,
                "rates": d.rates,
                "seen": iso_time(d.seen),
            })).collect::<Vec<_>>(),
            "stored": self.stored.map(|s| json!({
                "concurrency_limit": s.concurrency_limit,
                "rates": s.rates.as_ref().map(|r| r.iter().map(ToString::to_string).collect::<Vec<_>>()),
                "changed": iso_time(s.changed),
                "changed_by": s.changed_by,
            })),
        })
    }
}

fn concurrency_text(limit: u32) -> String {
    if limit == 0 {
        "no concurrency limit".into()
    } else {
        format!("concurrency {limit}")
    }
}

fn rates_text(rates: &[String]) -> String {
    if rates.is_empty() {
        "no rate limit".into()
    } else {
        rates.join(" + ")
    }
}

/// `pgq limits set` and `pgq limits unset`.
pub(crate) fn change_limits(ctx: &Context, action: LimitsCommand) -> Outcome {
    let who = |by: Option<String>| {
        by.or_else(|| std::env::var("USER").ok())
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| "pgq".to_owned())
    };
    let mut conn = ctx.connect()?;
    match action {
        LimitsCommand::Set {
            entrypoint,
            rates,
            no_rate,
            concurrency,
            by,
        } => {
            let parsed: Vec<pgqueuer::RateLimit> = rates
                .iter()
                .map(|r| pgqueuer::RateLimit::parse(r))
                .collect::<Result<_, _>>()?;
            let rates = if no_rate {
                Some(&[][..])
            } else if parsed.is_empty() {
                None
            } else {
                Some(&parsed[..])
            };
            if rates.is_none() && concurrency.is_none() {
                return Err(fail(
                    "pgq limits set: give --concurrency N, --rate N/WINDOW or --no-rate; \
                     there is nothing to store",
                ));
            }
            let stored = ops::set_limits(
                &mut *conn,
                &ctx.settings,
                &entrypoint,
                concurrency,
                rates,
                &who(by),
            )?;
            println!(
                "Stored for {}: {}, {}. Running workers take it within a second.",
                stored.entrypoint,
                stored
                    .concurrency_limit
                    .map_or_else(|| "concurrency as declared".to_owned(), concurrency_text),
                stored.rates.as_ref().map_or_else(
                    || "rates as declared".to_owned(),
                    |r| rates_text(&r.iter().map(ToString::to_string).collect::<Vec<_>>())
                )
            );
        }
        LimitsCommand::Unset { entrypoint, by } => {
            if ops::unset_limits(&mut *conn, &ctx.settings, &entrypoint, &who(by))? {
                println!(
                    "Deleted the stored limits of {entrypoint}: workers use the limits they declare."
                );
            } else {
                println!("{entrypoint} has no stored limits.");
            }
        }
    }
    Ok(())
}

pub(crate) fn audit(
    ctx: &Context,
    since: Duration,
    entrypoint: Option<&str>,
    resolution: Duration,
    json: bool,
) -> Outcome {
    let mut conn = ctx.connect()?;
    let audit = ops::limit_audit(&mut *conn, &ctx.settings, since, entrypoint, resolution)?;
    if json {
        println!(
            "{}",
            json!({
                "since": crate::output::iso_time(audit.since),
                "rows_read": audit.rows_read,
                "log_order_reliable": audit.log_order_reliable,
                "entrypoints": audit.entrypoints.iter().map(|e| json!({
                    "entrypoint": e.entrypoint,
                    "peak": e.peak,
                    "peak_at": crate::output::iso_time(e.peak_at),
                    "clock_peak": e.clock_peak,
                    "clock_peak_at": crate::output::iso_time(e.clock_peak_at),
                    "runs": e.runs,
                    "highest_slot": e.highest_slot,
                })).collect::<Vec<_>>(),
            })
        );
        return Ok(());
    }
    println!(
        "Limit audit of the log since {} UTC ({} log rows read). \"Most picked at once\" \
         is swept in the order the log was written; \"by clock\" by its timestamps \
         (transaction starts, overlaps under {} not counted), where an excess over the \
         first is within the clock's resolution, not a breach:",
        short(audit.since),
        audit.rows_read,
        format_span(resolution)
    );
    if !audit.log_order_reliable {
        println!(
            "  note: the log's id sequence caches ids, so the log order is unknown and \
             both figures come from the clock"
        );
    }
    if audit.entrypoints.is_empty() {
        println!("  (no job was picked in the window)");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = audit
        .entrypoints
        .iter()
        .map(|e| {
            vec![
                text(&e.entrypoint),
                number(&e.peak),
                text(short(e.peak_at)),
                number(&e.clock_peak),
                number(&e.runs),
                text(
                    e.highest_slot
                        .map(|h| h.to_string())
                        .unwrap_or_else(|| "-".into()),
                ),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "Entrypoint",
                "Most picked at once",
                "First at",
                "By clock",
                "Runs",
                "Highest slot now"
            ],
            &rows
        )
    );
    Ok(())
}

/// `pgq health`: the verdict, its reasons and the figures; the exit status says the
/// verdict (0, 1, 2), and 3 when the check itself failed.
pub(crate) fn health(
    ctx: &Context,
    options: &ops::HealthOptions,
    probe: Option<ops::Probe>,
    json: bool,
) -> Outcome {
    let checked = ctx
        .connect()
        .and_then(|mut conn| ops::health(&mut *conn, &ctx.settings, options));
    let health = match checked {
        Ok(health) => health,
        Err(e) => {
            if json {
                println!(
                    "{}",
                    json!({ "verdict": "UNKNOWN", "error": e.to_string() })
                );
            } else {
                crate::report(&Failure::Failed(e), ctx.target.borrow().as_deref());
            }
            return Err(Failure::Exit(3));
        }
    };
    if json {
        println!("{}", health.to_json());
    } else {
        println!("{}", health.verdict);
        for reason in &health.reasons {
            println!(
                "  - {} ({}): {}",
                reason.verdict, reason.code, reason.message
            );
        }
        println!(
            "  due {}, picked {} ({} stale), failed {}, last progress {}, {} arrived and {} \
             finished over {}",
            health.due_jobs,
            health.picked_jobs,
            health.stale_jobs,
            health.failed_jobs,
            health.last_progress.map_or_else(
                || "none today".to_owned(),
                |d| format!("{} s ago", d.as_secs())
            ),
            health.arrivals,
            health.completions,
            format_span(options.window)
        );
    }
    match probe {
        Some(probe) if health.passes(probe) => Ok(()),
        Some(_) => Err(Failure::Exit(1)),
        None => match health.verdict.exit_code() {
            0 => Ok(()),
            code => Err(Failure::Exit(code)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_into_ids_and_entrypoints() {
        let targets: Vec<String> = ["12", "cleanup", "007", "x1", "", "-3"]
            .map(String::from)
            .to_vec();
        let (ids, names) = split_targets(&targets).unwrap();
        assert_eq!(ids, vec![12, 7]);
        assert_eq!(names, vec!["cleanup", "x1", "", "-3"]);
        assert!(split_targets(&["99999999999999999999".to_owned()]).is_err());
    }
}
