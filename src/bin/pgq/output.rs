//! Output: tables in PgQueuer's styles, JSON arrays, short timestamps.

use std::time::SystemTime;

use serde_json::Value;

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

/// An ISO 8601 timestamp from the JSON form (`2026-01-02T03:04:05.123456Z`) as PgQueuer's
/// tables show it (`2026-01-02 03:04:05`, UTC).
pub(crate) fn short_time(iso: &Value) -> String {
    let iso = iso.as_str().unwrap_or_default();
    iso.get(..19).unwrap_or(iso).replacen('T', " ", 1)
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
    use serde_json::json;

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
            short_time(&json!("2026-01-02T03:04:05.123456Z")),
            "2026-01-02 03:04:05"
        );
        assert_eq!(
            short_time(&json!("2026-01-02T03:04:05Z")),
            "2026-01-02 03:04:05"
        );
    }
}
