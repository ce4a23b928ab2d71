//! The queue's figures: the overview, the entrypoints and an entrypoint's page, with the
//! throughput chart and the tables of counts they share.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use maud::{Markup, PreEscaped, html};

use super::{age, encode, entrypoint_link, exception_table, job_link, span};
use crate::web::data::{
    Bucket, Durations, EXACT_BELOW, EntrypointCounts, Entrypoints, LoggedException, OUTCOMES,
    PickedSlot,
};

/// The sums of [`OUTCOMES`] over buckets newer than `since`.
fn outcome_totals(buckets: &[Bucket], since: SystemTime) -> [u64; 3] {
    let mut totals = [0; 3];
    for b in buckets.iter().filter(|b| b.minute >= since) {
        if let Some(i) = OUTCOMES.iter().position(|o| *o == b.status) {
            totals[i] += b.count;
        }
    }
    totals
}

/// A 60-column stacked bar chart of outcomes per minute over the last hour, as SVG.
fn throughput_chart(buckets: &[Bucket], now: SystemTime) -> Markup {
    let minute_of = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            / 60
    };
    let last = minute_of(now);
    let mut columns = [[0u64; 3]; 60];
    for b in buckets {
        let m = minute_of(b.minute);
        if m + 60 > last && m <= last {
            let col = usize::try_from(59 - (last - m)).unwrap_or(0);
            if let Some(i) = OUTCOMES.iter().position(|o| *o == b.status) {
                columns[col][i] += b.count;
            }
        }
    }
    let peak = columns
        .iter()
        .map(|c| c.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut bars = String::new();
    for (i, col) in columns.iter().enumerate() {
        let mut y = 100.0;
        for (k, class) in ["ok-fill", "err-fill", "cancel-fill"].iter().enumerate() {
            if col[k] == 0 {
                continue;
            }
            #[allow(clippy::cast_precision_loss, reason = "a bar's height on a screen")]
            let h = col[k] as f64 / peak as f64 * 96.0;
            y -= h;
            let _ = write!(
                bars,
                "<rect class=\"{class}\" x=\"{}\" y=\"{y:.2}\" width=\"8\" height=\"{h:.2}\"><title>{} {} min ago</title></rect>",
                i * 10,
                col[k],
                59 - i
            );
        }
    }
    html! {
        div.chart {
            svg viewBox="0 0 600 100" preserveAspectRatio="none" role="img"
                aria-label="jobs finished per minute over the last hour" {
                (PreEscaped(bars))
            }
            div.legend {
                span { i.ok-fill {} "successful" }
                span { i.err-fill {} "exception" }
                span { i.cancel-fill {} "canceled" }
                span { "per minute, last 60 min; peak " (peak) }
            }
        }
    }
}

pub(in crate::web) struct Overview<'a> {
    pub entrypoints: &'a Entrypoints,
    pub buckets: &'a [Bucket],
    pub workers: usize,
    /// What has held the MVCC horizon long (see `crate::horizon`).
    pub horizon: &'a [crate::horizon::HorizonHolder],
    pub now: SystemTime,
}

pub(in crate::web) fn overview(o: &Overview<'_>) -> Markup {
    let all = &o.entrypoints.all;
    let (queued, picked, failed) = (all.queued, all.picked, all.failed);
    let oldest = all.waiting_since;
    let estimated = all.estimated;
    let windows = [("1 h", 3600), ("6 h", 6 * 3600), ("24 h", 24 * 3600)];
    let hour = outcome_totals(o.buckets, o.now - Duration::from_secs(3600));
    html! {
        h1 { "Overview" }
        @if let Some(oldest) = o.horizon.first() {
            div.banner #horizon role="alert" {
                strong { "The MVCC horizon is held: " }
                (oldest.to_string())
                @if o.horizon.len() > 1 { " (and " (o.horizon.len() - 1) " more)" }
                ". No row version that died since can be removed, so the queue's tables and \
                 indexes grow until it ends: end it, and set idle_in_transaction_session_timeout."
            }
        }
        div.cards {
            div.card #queued { div.n { (approx(queued, estimated)) } div.label { "queued" } }
            div.card #picked { div.n { (picked) } div.label { "picked (running)" } }
            div.card #failed { div.n { (approx(failed, estimated)) } div.label { "failed (held)" } }
            div.card { div.n { (o.workers) } div.label { "active workers" } }
            div.card { div.n { (oldest.map_or_else(|| "–".to_owned(), |t| age(t, o.now))) }
                       div.label { "longest wait" } }
            div.card { div.n { (hour[1]) } div.label { "exceptions, last hour" } }
        }
        h2 { "Throughput" }
        (throughput_chart(o.buckets, o.now))
        div.scroll {
            table #windows {
                thead { tr { th { "window" } th.num { "successful" } th.num { "exception" }
                             th.num { "canceled" } th.num { "per second" } } }
                tbody {
                    @for (label, secs) in windows {
                        @let t = outcome_totals(o.buckets, o.now - Duration::from_secs(secs));
                        tr {
                            td { (label) }
                            td.num { (t[0]) } td.num { (t[1]) } td.num { (t[2]) }
                            td.num { (format!("{:.2}", per_second(t.iter().sum(), secs))) }
                        }
                    }
                }
            }
        }
        h2 { "Backlog by entrypoint" }
        (entrypoint_table(&o.entrypoints.shown, None, o.now))
        (left_out_note(o.entrypoints, None))
        (estimate_note(&o.entrypoints.shown))
    }
}

/// What the table leaves out, when it does: how many entrypoints, and how to find them.
fn left_out_note(e: &Entrypoints, filter: Option<&str>) -> Markup {
    html! {
        @if e.left_out() > 0 {
            p.muted #left-out {
                "The " (e.shown.len()) " busiest of " (e.matching) " entrypoints"
                @if let Some(f) = filter { " whose name contains “" (f) "”" }
                " are shown; " (e.left_out()) " more are not. "
                a href="/entrypoints" { "Filter them by name" } "."
            }
        }
    }
}

#[allow(clippy::cast_precision_loss, reason = "a rate for people to read")]
fn per_second(n: u64, secs: u64) -> f64 {
    n as f64 / secs as f64
}

/// The entrypoints table, with window figures when `durations` is given.
fn entrypoint_table(
    rows: &[EntrypointCounts],
    figures: Option<(&[Durations], &[Bucket])>,
    now: SystemTime,
) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { "The queue table is empty." }
        } @else {
            div.scroll {
                table #entrypoints {
                    thead { tr {
                        th { "entrypoint" } th.num { "queued" } th.num { "deferred" }
                        th.num { "picked" } th.num { "failed" } th.num { "longest wait" }
                        @if figures.is_some() {
                            th.num { "completed" } th.num { "failure rate" }
                            th.num { "p50" } th.num { "p95" } th.num { "p99" }
                        }
                    } }
                    tbody {
                        @for e in rows {
                            tr {
                                td { (entrypoint_link(&e.entrypoint)) }
                                td.num { (approx(e.queued, e.estimated)) } td.num { (approx(e.deferred, e.estimated)) }
                                td.num { (e.picked) } td.num { (approx(e.failed, e.estimated)) }
                                td.num { (e.waiting_since.map_or_else(|| "–".to_owned(), |t| age(t, now))) }
                                @if let Some((durations, buckets)) = figures {
                                    @let d = durations.iter().find(|d| d.entrypoint == e.entrypoint);
                                    @let (done, errors) = terminal_counts(buckets, &e.entrypoint);
                                    td.num { (done) }
                                    td.num { (rate(errors, done)) }
                                    td.num { (d.map_or_else(|| "–".into(), |d| span(d.p50))) }
                                    td.num { (d.map_or_else(|| "–".into(), |d| span(d.p95))) }
                                    td.num { (d.map_or_else(|| "–".into(), |d| span(d.p99))) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A count, marked `≈` when it was estimated from a sample.
fn approx(n: u64, estimated: bool) -> String {
    if estimated {
        format!("≈ {n}")
    } else {
        n.to_string()
    }
}

fn estimate_note(rows: &[EntrypointCounts]) -> Markup {
    html! {
        @if rows.iter().any(|e| e.estimated) {
            p.muted #estimated { "≈: estimated from a sample of about 10,000 rows (the queue table holds more than "
                      (EXACT_BELOW) " rows); picked counts and waits are exact." }
        }
    }
}

/// Terminal transitions of `entrypoint` in `buckets`, and how many were failures
/// (`exception`, `failed`).
fn terminal_counts(buckets: &[Bucket], entrypoint: &str) -> (u64, u64) {
    let mut done = 0;
    let mut errors = 0;
    for b in buckets.iter().filter(|b| &*b.entrypoint == entrypoint) {
        match b.status {
            "successful" | "canceled" | "deleted" => done += b.count,
            "exception" | "failed" => {
                done += b.count;
                errors += b.count;
            }
            _ => {}
        }
    }
    (done, errors)
}

#[allow(
    clippy::cast_precision_loss,
    reason = "a percentage for people to read"
)]
fn rate(errors: u64, done: u64) -> String {
    if done == 0 {
        "–".into()
    } else {
        format!("{:.1}%", errors as f64 * 100.0 / done as f64)
    }
}

pub(in crate::web) const WINDOWS: [(&str, u64); 3] =
    [("1h", 3600), ("6h", 6 * 3600), ("24h", 86_400)];

pub(in crate::web) struct EntrypointsPage<'a> {
    pub rows: &'a Entrypoints,
    pub durations: &'a [Durations],
    pub buckets: &'a [Bucket],
    pub window: &'a str,
    /// Only entrypoints whose name contains it.
    pub filter: Option<&'a str>,
    pub now: SystemTime,
}

pub(in crate::web) fn entrypoints(p: &EntrypointsPage<'_>) -> Markup {
    let filtered = |label: &str| match p.filter {
        None => format!("/entrypoints?window={label}"),
        Some(f) => format!("/entrypoints?window={label}&filter={}", encode(f)),
    };
    html! {
        h1 { "Entrypoints" }
        p {
            "Window: "
            @for (label, _) in WINDOWS {
                @if label == p.window { strong { (label) } " " }
                @else { a href=(filtered(label)) { (label) } " " }
            }
        }
        form #filter method="get" action="/entrypoints" {
            input type="hidden" name="window" value=(p.window);
            label { "Name contains " input type="search" name="filter" value=(p.filter.unwrap_or_default()); }
            " " button type="submit" { "Filter" }
        }
        (entrypoint_table(&p.rows.shown, Some((p.durations, p.buckets)), p.now))
        (left_out_note(p.rows, p.filter))
        (estimate_note(&p.rows.shown))
    }
}

pub(in crate::web) struct EntrypointPage<'a> {
    pub name: &'a str,
    pub counts: Option<&'a EntrypointCounts>,
    pub slots: &'a [PickedSlot],
    pub durations: Option<&'a Durations>,
    pub exceptions: &'a [LoggedException],
    pub buckets: &'a [Bucket],
    /// Its rate-limit windows.
    pub rates: &'a [crate::ops::RateUse],
    pub now: SystemTime,
}

pub(in crate::web) fn entrypoint(p: &EntrypointPage<'_>) -> Markup {
    let held: Vec<i64> = p.slots.iter().filter_map(|s| s.slot).collect();
    let highest = held.iter().max().copied();
    let (done, errors) = terminal_counts(p.buckets, p.name);
    let c = p.counts.cloned().unwrap_or_default();
    html! {
        h1 { "Entrypoint " (p.name) }
        div.cards {
            div.card { div.n { (approx(c.queued, c.estimated)) } div.label { "queued" } }
            div.card { div.n { (approx(c.deferred, c.estimated)) } div.label { "deferred" } }
            div.card { div.n { (c.picked) } div.label { "picked" } }
            div.card { div.n { (approx(c.failed, c.estimated)) } div.label { "failed (held)" } }
            div.card #slots { div.n { (held.len()) } div.label { "slots in use" } }
            div.card #highest { div.n { (highest.map_or_else(|| "–".to_owned(), |h| h.to_string())) }
                       div.label { "highest slot held" } }
            div.card { div.n { (done) } div.label { "finished, 24 h" } }
            div.card { div.n { (rate(errors, done)) } div.label { "failure rate, 24 h" } }
        }
        @if let Some(h) = highest {
            p.muted { "Slot " (h) " is held: the worker holding it declares a concurrency limit of at least "
                      (h + 1) "." }
        }
        @if !p.rates.is_empty() {
            h2 { "Rate limits" }
            div.scroll { table #rates {
                thead { tr { th { "window" } th.num { "starts in the last window" } th.num { "allowed" } } }
                tbody { @for r in p.rates { tr {
                    td { (span(r.per.as_secs_f64())) }
                    td.num { (r.starts_in_window) }
                    td.num { (r.limit.unwrap_or(r.units)) }
                } } }
            } }
        }
        h2 { "Durations, last 24 h" }
        @match p.durations {
            Some(d) => div.scroll { table #durations {
                thead { tr { th.num { "completed" } th.num { "p50" } th.num { "p95" } th.num { "p99" } th.num { "max" } } }
                tbody { tr { td.num { (d.completed) } td.num { (span(d.p50)) } td.num { (span(d.p95)) }
                             td.num { (span(d.p99)) } td.num { (span(d.max)) } } }
            } },
            None => p.muted { "No job of this entrypoint finished in the last 24 h." },
        }
        h2 { "Picked jobs" }
        @if p.slots.is_empty() { p.muted { "None." } } @else {
            div.scroll { table {
                thead { tr { th { "slot" } th { "job" } th { "worker" } th { "last heartbeat" } } }
                tbody { @for s in p.slots { tr {
                    td { (s.slot.map_or_else(|| "–".to_owned(), |v| v.to_string())) }
                    td { (job_link(s.id)) }
                    td.muted { (s.queue_manager_id.map(|u| u.to_string()).unwrap_or_default()) }
                    td { (age(s.heartbeat, p.now)) " ago" }
                } } }
            } }
        }
        h2 { "Recent exceptions" }
        (exception_table(p.exceptions))
        p { a href=(format!("/jobs?entrypoint={}", encode(p.name))) { "All jobs of " (p.name) } }
    }
}
