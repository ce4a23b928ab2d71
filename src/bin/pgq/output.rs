//! Output: tables in PgQueuer's styles, JSON in PgQueuer's shapes, timestamps.

use std::time::SystemTime;

use pgqueuer::ops::{ActiveWorker, QueueAge, StaleJob, Throughput};
use pgqueuer::{Schedule, Status};
use serde_json::{Value, json};

/// Table styles, as `PGQUEUER_TABLEFMT` names them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableStyle {
    Pretty,
    Simple,
    Plain,
    Github,
}

pub(crate) fn table_style() -> TableStyle {
    let name = std::env::var("PGQUEUER_TABLEFMT")
        .or_else(|_| std::env::var("TABLEFMT"))
        .unwrap_or_default();
    match name.trim() {
        "" | "pretty" => TableStyle::Pretty,
        "simple" => TableStyle::Simple,
        "plain" => TableStyle::Plain,
        "github" => TableStyle::Github,
        other => {
            log::warn!("PGQUEUER_TABLEFMT={other:?} is not supported here; using pretty");
            TableStyle::Pretty
        }
    }
}

/// One cell: numbers are right-aligned, text left-aligned.
pub(crate) enum Cell {
    Text(String),
    Number(String),
}

pub(crate) fn text(s: impl Into<String>) -> Cell {
    Cell::Text(s.into())
}

pub(crate) fn number(n: &impl std::fmt::Display) -> Cell {
    Cell::Number(n.to_string())
}

impl Cell {
    fn as_str(&self) -> &str {
        match self {
            Cell::Text(s) | Cell::Number(s) => s,
        }
    }
}

/// Renders a table in the style of `PGQUEUER_TABLEFMT`.
pub(crate) fn table(headers: &[&str], rows: &[Vec<Cell>]) -> String {
    let style = table_style();
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(width(cell.as_str()));
        }
    }
    let numeric: Vec<bool> = (0..headers.len())
        .map(|i| !rows.is_empty() && rows.iter().all(|r| matches!(r[i], Cell::Number(_))))
        .collect();
    let pad = |s: &str, i: usize| {
        let fill = " ".repeat(widths[i] - width(s));
        if numeric[i] {
            format!("{fill}{s}")
        } else {
            format!("{s}{fill}")
        }
    };
    let line = |cells: Vec<String>| match style {
        TableStyle::Pretty | TableStyle::Github => format!("| {} |\n", cells.join(" | ")),
        TableStyle::Simple | TableStyle::Plain => format!("{}\n", cells.join("  ").trim_end()),
    };
    let header_cells: Vec<String> = headers.iter().enumerate().map(|(i, h)| pad(h, i)).collect();
    let rule = |corner: &str, fill: &str| {
        let parts: Vec<String> = widths.iter().map(|w| fill.repeat(w + 2)).collect();
        format!("{corner}{}{corner}\n", parts.join(corner))
    };
    let mut out = String::new();
    match style {
        TableStyle::Pretty => {
            out.push_str(&rule("+", "-"));
            out.push_str(&line(header_cells));
            out.push_str(&rule("+", "-"));
        }
        TableStyle::Github => {
            out.push_str(&line(header_cells));
            let parts: Vec<String> = widths
                .iter()
                .zip(&numeric)
                .map(|(w, num)| {
                    if *num {
                        format!("{}:", "-".repeat(w + 1))
                    } else {
                        format!(":{}", "-".repeat(w + 1))
                    }
                })
                .collect();
            out.push_str(&format!("|{}|\n", parts.join("|")));
        }
        TableStyle::Simple => {
            out.push_str(&line(header_cells));
            let parts: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&format!("{}\n", parts.join("  ")));
        }
        TableStyle::Plain => out.push_str(&line(header_cells)),
    }
    for row in rows {
        let cells = row
            .iter()
            .enumerate()
            .map(|(i, c)| pad(c.as_str(), i))
            .collect();
        out.push_str(&line(cells));
    }
    if style == TableStyle::Pretty {
        out.push_str(&rule("+", "-"));
    }
    out
}

/// `t` as PgQueuer's JSON writes it (`2026-01-02T03:04:05.123456Z`).
pub(crate) fn iso_time(t: SystemTime) -> String {
    pgqueuer::ops::format_timestamp(t)
}

/// An ISO 8601 timestamp (`2026-01-02T03:04:05.123456Z`) as PgQueuer's tables show it
/// (`2026-01-02 03:04:05`, UTC).
pub(crate) fn short_time(iso: &str) -> String {
    iso.get(..19).unwrap_or(iso).replacen('T', " ", 1)
}

/// [`short_time`] of `t`.
pub(crate) fn short(t: SystemTime) -> String {
    short_time(&iso_time(t))
}

/// A stale job as PgQueuer's `pgq stale --json` writes it: the same keys, timestamps in
/// ISO 8601 UTC, the worker id as a string or `null`.
pub(crate) fn stale_json(s: &StaleJob) -> Value {
    let j = &s.job;
    json!({
        "id": j.id,
        "priority": j.priority,
        "queue_manager_id": j.queue_manager_id.map(|id| id.to_string()),
        "created": iso_time(j.created),
        "updated": iso_time(j.updated),
        "heartbeat": iso_time(j.heartbeat),
        "execute_after": iso_time(j.execute_after),
        "status": j.status.as_str(),
        "entrypoint": j.entrypoint,
        "seconds_since_heartbeat": s.seconds_since_heartbeat,
    })
}

/// A worker as PgQueuer's `pgq workers --json` writes it.
pub(crate) fn worker_json(w: &ActiveWorker) -> Value {
    json!({
        "queue_manager_id": w.queue_manager_id.to_string(),
        "active_jobs": w.active_jobs,
        "oldest_heartbeat": iso_time(w.oldest_heartbeat),
        "newest_heartbeat": iso_time(w.newest_heartbeat),
        "entrypoints": w.entrypoints,
    })
}

/// A backlog row as PgQueuer's `pgq backlog --json` writes it.
pub(crate) fn backlog_json(a: &QueueAge) -> Value {
    json!({
        "entrypoint": a.entrypoint,
        "queued_count": a.queued_count,
        "oldest_created": iso_time(a.oldest_created),
        "oldest_age_seconds": a.oldest_age_seconds,
        "avg_age_seconds": a.avg_age_seconds,
    })
}

/// A throughput row: `{"entrypoint", "status", "count"}`.
pub(crate) fn throughput_json(t: &Throughput) -> Value {
    json!({
        "entrypoint": t.entrypoint,
        "status": t.status.as_str(),
        "count": t.count,
    })
}

/// A schedule with PgQueuer's column names, timestamps in ISO 8601 UTC.
pub(crate) fn schedule_json(s: &Schedule) -> Value {
    json!({
        "id": s.id,
        "expression": s.expression,
        "entrypoint": s.entrypoint,
        "heartbeat": iso_time(s.heartbeat),
        "created": iso_time(s.created),
        "updated": iso_time(s.updated),
        "next_run": iso_time(s.next_run),
        "last_run": s.last_run.map(iso_time),
        "status": s.status.map(Status::as_str),
    })
}

pub(crate) fn print_json(items: Vec<Value>) {
    println!("{}", Value::Array(items));
}

/// The time of day in UTC, `HH:MM:SS`.
pub(crate) fn clock() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_numbers_right() {
        let rows = vec![
            vec![number(&5), text("email")],
            vec![number(&123), text("pdf")],
        ];
        let out = table(&["ID", "Entrypoint"], &rows);
        assert_eq!(
            out,
            "+-----+------------+\n\
             |  ID | Entrypoint |\n\
             +-----+------------+\n\
             |   5 | email      |\n\
             | 123 | pdf        |\n\
             +-----+------------+\n"
        );
    }

    #[test]
    fn short_times_drop_the_fraction_and_zone() {
        assert_eq!(
            short_time("2026-01-02T03:04:05.123456Z"),
            "2026-01-02 03:04:05"
        );
        assert_eq!(short_time("2026-01-02T03:04:05Z"), "2026-01-02 03:04:05");
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(iso_time(t), "2023-11-14T22:13:20.123456Z");
        assert_eq!(short(t), "2023-11-14 22:13:20");
    }
}
