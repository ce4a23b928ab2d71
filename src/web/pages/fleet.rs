//! What runs the queue: the workers, the schedules and the database (System).

use std::time::{Duration, SystemTime};

use maud::{Markup, html};

use super::{age, entrypoint_link, job_link, span, when};
use crate::job::Status;
use crate::ops::{ActiveWorker, StaleJob};
use crate::schedules::Schedule;
use crate::web::data::SystemInfo;

/// Workers listed at most, those holding the most jobs first.
const MAX_WORKERS_SHOWN: usize = 100;

fn shown_workers(active: &[ActiveWorker]) -> Vec<&ActiveWorker> {
    let mut shown: Vec<&ActiveWorker> = active.iter().collect();
    if shown.len() > MAX_WORKERS_SHOWN {
        shown.sort_by_key(|w| std::cmp::Reverse(w.active_jobs));
        shown.truncate(MAX_WORKERS_SHOWN);
    }
    shown
}

pub(in crate::web) fn workers(
    active: &[ActiveWorker],
    stale: &[StaleJob],
    stale_after: Duration,
    now: SystemTime,
) -> Markup {
    html! {
        h1 { "Workers" }
        p.muted { "Workers holding picked jobs. A heartbeat older than " (span(stale_after.as_secs_f64()))
                  " is marked stale (" a href="/workers?stale_after=60" { "?stale_after=seconds" } ")." }
        @if active.is_empty() { p.muted { "No worker holds a job." } } @else {
            @if active.len() > MAX_WORKERS_SHOWN {
                p.muted { (active.len()) " workers; the " (MAX_WORKERS_SHOWN) " holding the most jobs are shown." }
            }
            div.scroll { table #workers {
                thead { tr { th { "worker" } th.num { "jobs" } th { "entrypoints" } th { "newest heartbeat" } th { "oldest heartbeat" } } }
                tbody { @for w in shown_workers(active) {
                    @let newest = now.duration_since(w.newest_heartbeat).unwrap_or_default();
                    tr {
                        td { (w.queue_manager_id.to_string()) }
                        td.num { (w.active_jobs) }
                        td { @for (i, e) in w.entrypoints.iter().enumerate() { @if i > 0 { ", " } (entrypoint_link(e)) } }
                        td.stale[newest > stale_after] { (span(newest.as_secs_f64())) " ago" @if newest > stale_after { " (stale)" } }
                        td { (age(w.oldest_heartbeat, now)) " ago" }
                    }
                } }
            } }
        }
        h2 { "Stale jobs (" (stale.len()) ")" }
        @if stale.is_empty() { p.muted { "None." } } @else {
            div.scroll { table #stale {
                thead { tr { th { "job" } th { "entrypoint" } th { "worker" } th { "since heartbeat" } } }
                tbody { @for s in stale { tr {
                    td { (job_link(s.job.id)) }
                    td { (entrypoint_link(&s.job.entrypoint)) }
                    td.muted { (s.job.queue_manager_id.map(|u| u.to_string()).unwrap_or_default()) }
                    td.stale { (span(s.seconds_since_heartbeat)) }
                } } }
            } }
        }
    }
}

pub(in crate::web) fn schedules(rows: &[Schedule], now: SystemTime) -> Markup {
    html! {
        h1 { "Schedules" }
        @if rows.is_empty() { p.muted { "No schedules." } } @else {
            div.scroll { table #schedules {
                thead { tr { th { "id" } th { "expression" } th { "entrypoint" } th { "status" } th { "next run" } th { "last run" } } }
                tbody { @for s in rows { tr {
                    td { (s.id) }
                    td { code { (s.expression) } }
                    td { (s.entrypoint) }
                    td { (s.status.map_or("", Status::as_str)) }
                    td { (when(s.next_run))
                         @if s.next_run > now { " (in " (span(s.next_run.duration_since(now).unwrap_or_default().as_secs_f64())) ")" } }
                    td { (s.last_run.map_or_else(|| "never".to_owned(), when)) }
                } } }
            } }
        }
    }
}

pub(in crate::web) fn system(
    info: &SystemInfo,
    verify: &Result<(), String>,
    connection: &str,
) -> Markup {
    html! {
        h1 { "System" }
        dl.fields {
            dt { "server" } dd #server-version { "PostgreSQL " (info.server_version) }
            dt { "database" } dd { (info.database) }
            dt { "connection" } dd #connection { (connection) }
            dt { "pgqueuer (Rust)" } dd { (env!("CARGO_PKG_VERSION")) }
            dt { "log rows awaiting aggregation" } dd #unaggregated { (info.unaggregated) }
            dt { "schema" } dd #verify {
                @match verify {
                    Ok(()) => "every object present (verify passed)",
                    Err(e) => span.stale { (e) },
                }
            }
        }
        h2 { "Tables" }
        div.scroll { table #tables {
            thead { tr { th { "table" } th { "persistence" } th.num { "rows (planner estimate)" } th.num { "size" } } }
            tbody { @for t in &info.tables { tr {
                td { (t.name) }
                @if t.exists {
                    td { @if t.logged { "logged" } @else { "unlogged" } }
                    td.num { @if t.estimated_rows < 0 { "not analyzed" } @else { "≈ " (t.estimated_rows) } }
                    td.num { (bytes(t.total_bytes)) }
                } @else {
                    td colspan="3" .stale { "missing" }
                }
            } } }
        } }
    }
}

#[allow(clippy::cast_precision_loss, reason = "a size for people to read")]
fn bytes(n: i64) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else if n < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", n / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GiB", n / 1024.0 / 1024.0 / 1024.0)
    }
}
