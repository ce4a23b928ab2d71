//! The fault summary: every fault test reports one row (the bad-input tests one between
//! them); each row is printed, the table so far is rewritten to
//! `target/fault-summary.txt`, and the whole table is printed once every row is in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pgqueuer::JobId;

use super::checks::{count, successful};

/// How many rows the table has when complete (one per fault test, one for all the
/// bad-input tests together); the table is printed when the last one is in.
const FAULT_TESTS: usize = 14;

pub struct Row {
    pub test: &'static str,
    pub faults: String,
    pub enqueued: usize,
    pub completed: usize,
    pub lost: usize,
    /// `entrypoint max/limit` for each limited entrypoint, or `-`.
    pub concurrency: String,
}

/// The rows reported so far, in the order they came.
static ROWS: Mutex<Vec<Row>> = Mutex::new(Vec::new());

fn summary_path() -> PathBuf {
    // target/<profile>/deps/it-<hash> -> target/
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(3)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("fault-summary.txt")
}

fn render(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<24} {:<44} {:>9} {:>9} {:>5}  {}\n",
        "test", "faults injected", "enqueued", "completed", "lost", "max concurrency/limit"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<24} {:<44} {:>9} {:>9} {:>5}  {}\n",
            r.test, r.faults, r.enqueued, r.completed, r.lost, r.concurrency
        ));
    }
    out
}

/// Adds a test's row; rewrites the summary file; prints the row, and the whole table
/// once every fault test has reported.
pub fn report(row: Row) {
    let mut rows = ROWS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    eprintln!("fault summary row:\n{}", render(std::slice::from_ref(&row)));
    rows.push(row);
    let table = render(&rows);
    let path = summary_path();
    if let Err(e) = std::fs::write(&path, &table) {
        eprintln!("could not write {}: {e}", path.display());
    }
    if rows.len() == FAULT_TESTS {
        eprintln!("\n== fault suite summary ({})\n{table}", path.display());
    }
}

/// How a run over `ids` ended, as the database tells it.
pub struct Ended<'a> {
    pub ids: &'a [JobId],
    /// The jobs that never finished.
    pub lost: &'a [JobId],
    /// Outcomes of `ids` by status.
    pub done: &'a BTreeMap<String, i64>,
    /// The highest concurrency seen per entrypoint.
    pub max: &'a BTreeMap<String, i64>,
    pub limits: &'a [(&'a str, u32)],
}

/// Reports the row of a run whose every job must end successful, then fails the test
/// unless each did and none was lost.
pub fn report_all_done(test: &'static str, faults: String, ended: &Ended<'_>) {
    report(Row {
        test,
        faults,
        enqueued: ended.ids.len(),
        completed: successful(ended.done),
        lost: ended.lost.len(),
        concurrency: concurrency(ended.max, ended.limits),
    });
    let lost = ended.lost;
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(
        ended.done.get("successful").copied(),
        Some(count(ended.ids.len()))
    );
}

/// `entrypoint max/limit` for each limited entrypoint of `limits`, or `-`.
pub fn concurrency(max: &BTreeMap<String, i64>, limits: &[(&str, u32)]) -> String {
    let parts: Vec<String> = limits
        .iter()
        .filter(|(_, limit)| *limit > 0)
        .map(|(ep, limit)| format!("{ep} {}/{limit}", max.get(*ep).copied().unwrap_or(0)))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}
