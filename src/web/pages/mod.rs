//! The pages, rendered on the server with maud (every value from the database goes
//! through maud's escaping, so a payload or traceback holding markup shows as text).

mod figures;
mod fleet;
mod jobs;

use std::time::SystemTime;

use maud::{DOCTYPE, Markup, html};

use super::data::LoggedException;
use super::http::encode;
use crate::time::python_time;

pub(super) use figures::{
    EntrypointPage, EntrypointsPage, Overview, WINDOWS, entrypoint, entrypoints, overview,
};
pub(super) use fleet::{schedules, system, workers};
#[cfg(any(test, feature = "fuzzing"))]
pub(super) use jobs::fuzz_views;
pub(super) use jobs::{JobsPage, PAGE_SIZE, failures, job, jobs};

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

/// The latest exceptions: job, entrypoint, when and the failure.
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
