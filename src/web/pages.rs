//! The pages, rendered on the server with maud (every value from the database goes
//! through maud's escaping, so a payload or traceback holding markup shows as text).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::data::{
    Bucket, Durations, EntrypointCounts, HISTORY_SHOWN, HeldSlot, JobDetail, JobRow,
    LoggedException, OUTCOMES, SystemInfo,
};
use super::http::encode;
use crate::job::{FailedJob, LogEntry, Status};
use crate::ops::{ActiveWorker, StaleJob};
use crate::schedules::Schedule;
use crate::time::python_time;

/// The navigation, in order: path, label.
const NAV: [(&str, &str); 7] = [
    ("/", "Overview"),
    ("/entrypoints", "Entrypoints"),
    ("/jobs", "Jobs"),
    ("/failures", "Failures"),
    ("/workers", "Workers"),
    ("/schedules", "Schedules"),
    ("/system", "System"),
];

/// A whole page: head, navigation (with `here` marked), the live badge and `body`.
pub(super) fn layout(title: &str, here: &str, body: &Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · pgqueuer" }
                link rel="stylesheet" href="/static/style.css";
            }
            body {
                header {
                    span.brand { "pgqueuer" }
                    nav {
                        @for (path, label) in NAV {
                            a.here[path == here] href=(path) { (label) }
                        }
                    }
                    span #live { "static" }
                }
                main data-title=(title) {
                    (body)
                }
                script src="/static/live.js" defer {}
            }
        }
    }
}

/// `t` as `2026-12-01 13:03:42` (UTC).
pub(super) fn when(t: SystemTime) -> String {
    let iso = python_time(t);
    iso.get(..19).unwrap_or(&iso).replacen('T', " ", 1)
}

/// A duration as people read it: `850 ms`, `42 s`, `7 min`, `3.5 h`, `2.1 d`.
pub(super) fn span(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs < 1.0 {
        format!("{:.0} ms", secs * 1000.0)
    } else if secs < 120.0 {
        format!("{secs:.0} s")
    } else if secs < 7200.0 {
        format!("{:.0} min", secs / 60.0)
    } else if secs < 172_800.0 {
        format!("{:.1} h", secs / 3600.0)
    } else {
        format!("{:.1} d", secs / 86_400.0)
    }
}

fn age(t: SystemTime, now: SystemTime) -> String {
    span(now.duration_since(t).unwrap_or_default().as_secs_f64())
}

fn status_badge(status: &str) -> Markup {
    html! { span class=(format!("status {status}")) { (status) } }
}

fn job_link(id: i64) -> Markup {
    html! { a href=(format!("/jobs/{id}")) { (id) } }
}

fn entrypoint_link(name: &str) -> Markup {
    html! { a href=(format!("/entrypoints/{}", encode(name))) { (name) } }
}

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

pub(super) struct Overview<'a> {
    pub entrypoints: &'a [EntrypointCounts],
    pub buckets: &'a [Bucket],
    pub workers: usize,
    pub now: SystemTime,
}

pub(super) fn overview(o: &Overview<'_>) -> Markup {
    let queued: u64 = o.entrypoints.iter().map(|e| e.queued).sum();
    let picked: u64 = o.entrypoints.iter().map(|e| e.picked).sum();
    let failed: u64 = o.entrypoints.iter().map(|e| e.failed).sum();
    let oldest = o.entrypoints.iter().filter_map(|e| e.waiting_since).min();
    let estimated = o.entrypoints.iter().any(|e| e.estimated);
    let windows = [("1 h", 3600), ("6 h", 6 * 3600), ("24 h", 24 * 3600)];
    let hour = outcome_totals(o.buckets, o.now - Duration::from_secs(3600));
    html! {
        h1 { "Overview" }
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
        (entrypoint_table(o.entrypoints, None, o.now))
        (estimate_note(o.entrypoints))
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
                      (super::data::EXACT_BELOW) " rows); picked counts and waits are exact." }
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

pub(super) const WINDOWS: [(&str, u64); 3] = [("1h", 3600), ("6h", 6 * 3600), ("24h", 86_400)];

pub(super) fn entrypoints(
    rows: &[EntrypointCounts],
    durations: &[Durations],
    buckets: &[Bucket],
    window: &str,
    now: SystemTime,
) -> Markup {
    html! {
        h1 { "Entrypoints" }
        p {
            "Window: "
            @for (label, _) in WINDOWS {
                @if label == window { strong { (label) } " " }
                @else { a href=(format!("/entrypoints?window={label}")) { (label) } " " }
            }
        }
        (entrypoint_table(rows, Some((durations, buckets)), now))
        (estimate_note(rows))
    }
}

pub(super) struct EntrypointPage<'a> {
    pub name: &'a str,
    pub counts: Option<&'a EntrypointCounts>,
    pub slots: &'a [HeldSlot],
    pub durations: Option<&'a Durations>,
    pub exceptions: &'a [LoggedException],
    pub buckets: &'a [Bucket],
    pub now: SystemTime,
}

pub(super) fn entrypoint(p: &EntrypointPage<'_>) -> Markup {
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

fn exception_table(rows: &[LoggedException]) -> Markup {
    html! {
        @if rows.is_empty() { p.muted { "None logged." } } @else {
            div.scroll { table #exceptions {
                thead { tr { th { "job" } th { "entrypoint" } th { "when" } th { "reason" } } }
                tbody { @for e in rows { tr {
                    td { (job_link(e.job_id)) }
                    td { (entrypoint_link(&e.entrypoint)) }
                    td { (when(e.created)) }
                    td { (e.failure.as_ref().map(ToString::to_string).unwrap_or_default()) }
                } } }
            } }
        }
    }
}

pub(super) struct JobsPage<'a> {
    pub rows: &'a [JobRow],
    pub status: Option<Status>,
    pub entrypoint: Option<&'a str>,
    pub after: i64,
    pub more: bool,
    pub now: SystemTime,
}

pub(super) const PAGE_SIZE: i64 = 50;

pub(super) fn jobs(p: &JobsPage<'_>) -> Markup {
    let filter = |after: Option<i64>| {
        let mut q = Vec::new();
        if let Some(s) = p.status {
            q.push(format!("status={}", s.as_str()));
        }
        if let Some(e) = p.entrypoint {
            q.push(format!("entrypoint={}", encode(e)));
        }
        if let Some(a) = after {
            q.push(format!("after={a}"));
        }
        if q.is_empty() {
            "/jobs".to_owned()
        } else {
            format!("/jobs?{}", q.join("&"))
        }
    };
    html! {
        h1 { "Jobs" }
        div.filters {
            form method="get" action="/jobs" .filters {
                label { "status"
                    select name="status" {
                        option value="" selected[p.status.is_none()] { "any" }
                        @for s in [Status::Queued, Status::Picked, Status::Failed] {
                            option value=(s.as_str()) selected[p.status == Some(s)] { (s.as_str()) }
                        }
                    }
                }
                label { "entrypoint" input type="text" name="entrypoint" value=(p.entrypoint.unwrap_or_default()); }
                button type="submit" { "Filter" }
            }
            form method="get" action="/jobs/goto" .filters {
                label { "job id" input type="number" name="id" min="1" required; }
                button type="submit" { "Go" }
            }
        }
        @if p.rows.is_empty() {
            p.muted { "No jobs match." }
        } @else {
            div.scroll { table #jobs {
                thead { tr { th { "id" } th { "entrypoint" } th { "status" } th.num { "priority" }
                             th.num { "attempts" } th { "slot" } th { "worker" } th { "enqueued" } th { "due" } th.num { "payload" } } }
                tbody { @for j in p.rows { tr {
                    td { (job_link(j.id)) }
                    td { (entrypoint_link(&j.entrypoint)) }
                    td { (status_badge(j.status.as_str())) }
                    td.num { (j.priority) }
                    td.num { (j.attempts) }
                    td { (j.slot.map_or_else(String::new, |s| s.to_string())) }
                    td.muted { @if let Some(w) = j.queue_manager_id {
                        span title=(w.to_string()) { (w.to_string().get(..8).unwrap_or_default()) }
                    } }
                    td { (age(j.created, p.now)) " ago" }
                    td { @if j.execute_after > p.now { "in " (span(j.execute_after.duration_since(p.now).unwrap_or_default().as_secs_f64())) } @else { "now" } }
                    td.num { (j.payload_bytes.map_or_else(|| "–".to_owned(), |b| format!("{b} B"))) }
                } } }
            } }
        }
        div.pager {
            @if p.after > 0 { a href=(filter(None)) { "First page" } }
            @if p.more { @if let Some(last) = p.rows.last() { a #next href=(filter(Some(last.id))) { "Next 50" } } }
        }
    }
}

/// Characters of a pretty-printed JSON payload or headers shown at most (the
/// indentation can make a short text long).
const PRETTY_SHOWN: usize = 32 << 10;

/// `text` cut to `max` bytes at a character boundary, and whether it was cut.
fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// How a payload shows: JSON pretty-printed, other UTF-8 text as is, anything else as
/// a hex dump of its first 4 KiB. `shown` is the payload's first bytes, `whole` its size
/// (JSON is pretty-printed only when it is all there).
fn payload_view(shown: &[u8], whole: usize) -> (&'static str, String) {
    let text = match std::str::from_utf8(shown) {
        Ok(text) => Some(text),
        // The cut may fall inside a character: the text up to it is still text.
        Err(e) if shown.len() < whole && e.error_len().is_none() => {
            std::str::from_utf8(&shown[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    if let Some(text) = text {
        if shown.len() == whole
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
            && (value.is_object() || value.is_array())
        {
            let pretty = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_owned());
            let (pretty, was_cut) = cut(&pretty, PRETTY_SHOWN);
            let tail = if was_cut { "\n…" } else { "" };
            return ("JSON", format!("{pretty}{tail}"));
        }
        return ("text", text.to_owned());
    }
    let mut out = String::new();
    for (i, line) in shown.chunks(16).take(256).enumerate() {
        let _ = write!(out, "{:08x}  ", i * 16);
        for b in line {
            let _ = write!(out, "{b:02x} ");
        }
        out.push('\n');
    }
    ("hex (not UTF-8)", out)
}

/// The payload and headers views over outside bytes (see `super::fuzz`): bounded output.
#[cfg(any(test, feature = "fuzzing"))]
pub(super) fn fuzz_views(shown: &[u8], whole: usize) {
    let (_, view) = payload_view(shown, whole);
    // Text as is, pretty JSON cut to its bound, or at most 256 hex lines.
    assert!(
        view.len() <= shown.len().max(PRETTY_SHOWN + 8).max(256 * 90),
        "{} bytes shown as {}",
        shown.len(),
        view.len()
    );
    let text = String::from_utf8_lossy(shown);
    let _ = headers_view(&text, whole);
    let _ = size_note(shown.len(), whole);
}

/// How much of something of `whole` bytes shows when `shown` bytes do.
fn size_note(shown: usize, whole: usize) -> String {
    if shown < whole {
        format!("first {shown} of {whole} bytes")
    } else {
        format!("{whole} bytes")
    }
}

/// The headers' JSON text (its first characters, as the statement reads them) as
/// shown: pretty-printed when it is all there.
fn headers_view(text: &str, whole: usize) -> String {
    if text.len() >= whole
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
    {
        let pretty = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_owned());
        let (pretty, was_cut) = cut(&pretty, PRETTY_SHOWN);
        return if was_cut {
            format!("{pretty}\n…")
        } else {
            pretty.to_owned()
        };
    }
    format!("{text}…")
}

pub(super) fn job(
    id: i64,
    detail: Option<&JobDetail>,
    history: &[LogEntry],
    now: SystemTime,
) -> Markup {
    html! {
        h1 { "Job " (id) }
        @match detail {
            Some(detail) => {
                @let j = &detail.job;
                p {
                    (status_badge(j.status.as_str())) " "
                    @if matches!(j.status, Status::Queued | Status::Picked) {
                        form.inline method="post" action=(format!("/jobs/{id}/cancel")) {
                            button.quiet type="submit" { "Cancel" }
                        }
                    }
                    @if j.status == Status::Failed {
                        form.inline method="post" action="/jobs/requeue" {
                            input type="hidden" name="ids" value=(id);
                            button type="submit" { "Requeue" }
                        }
                    }
                }
                dl.fields #fields {
                    dt { "entrypoint" } dd { (entrypoint_link(&j.entrypoint)) }
                    dt { "status" } dd { (j.status.as_str()) }
                    dt { "priority" } dd { (j.priority) }
                    dt { "attempts" } dd { (j.attempts) }
                    dt { "slot" } dd { (j.slot.map_or_else(|| "–".to_owned(), |s| s.to_string())) }
                    dt { "worker" } dd { (j.queue_manager_id.map_or_else(|| "–".to_owned(), |u| u.to_string())) }
                    dt { "dedupe key" } dd { (j.dedupe_key.as_deref().unwrap_or("–")) }
                    dt { "created" } dd { (when(j.created)) " (" (age(j.created, now)) " ago)" }
                    dt { "updated" } dd { (when(j.updated)) }
                    dt { "heartbeat" } dd { (when(j.heartbeat)) }
                    dt { "execute after" } dd { (when(j.execute_after)) }
                }
                h2 { "Payload" }
                @match &j.payload {
                    None => p.muted { "None." },
                    Some(bytes) => {
                        @let whole = detail.payload_bytes.map_or(bytes.len(), |n| usize::try_from(n).unwrap_or(usize::MAX));
                        @let (kind, shown) = payload_view(bytes, whole);
                        p.muted #payload-size { (size_note(bytes.len(), whole)) ", shown as " (kind) }
                        pre #payload { (shown) }
                    }
                }
                h2 { "Headers" }
                @match &detail.headers_text {
                    None => p.muted { "None." },
                    Some(text) => {
                        @let whole = usize::try_from(detail.headers_bytes).unwrap_or(usize::MAX);
                        @if text.len() < whole { p.muted { (size_note(text.len(), whole)) } }
                        pre #headers { (headers_view(text, whole)) }
                    }
                }
            }
            None => p.notice { "This job is no longer in the queue table: it finished (or was "
                              "cancelled or deleted). Its log history follows." },
        }
        h2 { "History" }
        @if history.len() >= usize::try_from(HISTORY_SHOWN).unwrap_or(usize::MAX) {
            p.muted { "The latest " (HISTORY_SHOWN) " log rows." }
        }
        @if history.is_empty() { p.muted { "No log rows." } } @else {
            div.scroll { table #history {
                thead { tr { th { "when" } th { "status" } th { "entrypoint" } th.num { "priority" } th { "failure" } } }
                tbody { @for h in history { tr {
                    td { (when(h.created)) }
                    td { (status_badge(h.status.as_str())) }
                    td { (h.entrypoint) }
                    td.num { (h.priority) }
                    td {
                        @if let Some(f) = h.failure() {
                            strong { (f.to_string()) }
                            @if !f.traceback.is_empty() { pre.traceback { (f.traceback) } }
                        }
                    }
                } } }
            } }
        }
    }
}

pub(super) fn failures(
    held: &[FailedJob],
    exceptions: &[LoggedException],
    now: SystemTime,
) -> Markup {
    html! {
        h1 { "Failures" }
        h2 { "Held jobs (" (held.len()) ")" }
        @if held.is_empty() {
            p.muted { "No failed jobs are held." }
        } @else {
            form #requeue method="post" action="/jobs/requeue" {
                div.scroll { table #held {
                    thead { tr { th { "" } th { "job" } th { "entrypoint" } th.num { "attempts" } th { "held for" } th { "reason" } } }
                    tbody { @for f in held { tr {
                        td { input type="checkbox" name="ids" value=(f.job.id) aria-label=(format!("select job {}", f.job.id)); }
                        td { (job_link(f.job.id)) }
                        td { (entrypoint_link(&f.job.entrypoint)) }
                        td.num { (f.job.attempts) }
                        td { (age(f.job.updated, now)) }
                        td { (f.failure.as_ref().map(ToString::to_string).unwrap_or_default()) }
                    } } }
                } }
                p { button #requeue-selected type="submit" { "Requeue selected" } }
            }
        }
        h2 { "Recent exceptions" }
        (exception_table(exceptions))
    }
}

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

pub(super) fn workers(
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
                tbody { @for j in stale { tr {
                    td { (job_link(j.id)) }
                    td { (entrypoint_link(&j.entrypoint)) }
                    td.muted { (j.queue_manager_id.map(|u| u.to_string()).unwrap_or_default()) }
                    td.stale { (span(j.seconds_since_heartbeat)) }
                } } }
            } }
        }
    }
}

pub(super) fn schedules(rows: &[Schedule], now: SystemTime) -> Markup {
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

pub(super) fn system(info: &SystemInfo, verify: &Result<(), String>, connection: &str) -> Markup {
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

/// An error page: what went wrong and what to do.
pub(super) fn problem(status: u16, title: &str, detail: &str) -> Markup {
    layout(
        title,
        "",
        &html! {
            h1 { (status) " " (title) }
            p.notice #problem { (detail) }
            p { a href="/" { "Back to the overview" } }
        },
    )
}
