//! Jobs: the list, a job's page (its payload, headers and history) and the failures.

use std::time::SystemTime;

use maud::{Markup, html};

use super::{age, encode, entrypoint_link, exception_table, job_link, span, status_badge, when};
use crate::job::{FailedJob, LogEntry, Status};
use crate::payload::{PayloadKind, PayloadView, cut, size_note};
use crate::web::data::{HISTORY_SHOWN, JobDetail, JobRow, LoggedException};

pub(in crate::web) struct JobsPage<'a> {
    pub rows: &'a [JobRow],
    pub status: Option<Status>,
    pub entrypoint: Option<&'a str>,
    pub after: i64,
    pub more: bool,
    pub now: SystemTime,
}

pub(in crate::web) const PAGE_SIZE: i64 = 50;

pub(in crate::web) fn jobs(p: &JobsPage<'_>) -> Markup {
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

/// The payload and headers views over outside bytes (see `super::fuzz`): bounded output.
#[cfg(any(test, feature = "fuzzing"))]
pub(in crate::web) fn fuzz_views(shown: &[u8], whole: usize) {
    crate::payload::check_bounded(shown, whole);
    let text = String::from_utf8_lossy(shown);
    let view = headers_view(&text, whole);
    assert!(
        view.len() <= text.len().max(PayloadView::PRETTY_BYTES) + 4,
        "{} bytes of headers shown as {}",
        text.len(),
        view.len()
    );
}

/// How a payload's kind reads on the job page.
fn kind_label(kind: PayloadKind) -> &'static str {
    match kind {
        PayloadKind::Hex => "hex (not UTF-8)",
        other => other.as_str(),
    }
}

/// The headers' JSON text (its first characters, as the statement reads them) as
/// shown: pretty-printed when it is all there.
fn headers_view(text: &str, whole: usize) -> String {
    if text.len() >= whole
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
    {
        let pretty = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_owned());
        let (pretty, was_cut) = cut(&pretty, PayloadView::PRETTY_BYTES);
        return if was_cut {
            format!("{pretty}\n…")
        } else {
            pretty.to_owned()
        };
    }
    format!("{text}…")
}

pub(in crate::web) fn job(
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
                        @let view = PayloadView::new(bytes, whole);
                        p.muted #payload-size { (view.size_note()) ", shown as " (kind_label(view.kind)) }
                        pre #payload { (view.text) }
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

pub(in crate::web) fn failures(
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
