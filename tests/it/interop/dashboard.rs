//! Statistics: Python's dashboard counts what our worker logged.

use std::collections::BTreeMap;

use pgqueuer::{Entrypoint, NewJob, Queue};

use super::drain;
use crate::harness::TestDb;
use crate::python;

/// Python's `pgq dashboard` (printed once) aggregates the log rows our worker wrote and
/// shows our entrypoint with every job `successful`.
#[test]
fn python_dashboard_shows_our_jobs() {
    const JOBS: usize = 25;
    let db = TestDb::new();
    let pool = db.pool(4);
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new("rs_stats", i.to_string().into_bytes()))
        .collect();
    Queue::new(pool.clone()).enqueue_many(&jobs).unwrap();
    let summary = drain(&pool, Entrypoint::new("rs_stats"));
    assert_eq!(summary.succeeded, JOBS as u64);

    let out = python::pgq(&db, &["dashboard", "--limit", "100"]).success();
    // Rows look like `| <created> | <count> | <entrypoint> | <status> | <priority> |`.
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for line in out.stdout.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() == 7 && cells[3] == "rs_stats" {
            *counts.entry(cells[4].to_owned()).or_default() += cells[2].parse::<i64>().unwrap();
        }
    }
    eprintln!(
        "pgq dashboard counts for rs_stats: {counts:?}\n{}",
        out.stdout
    );
    let expected = i64::try_from(JOBS).unwrap();
    assert_eq!(counts.get("successful"), Some(&expected), "{out:?}");
    assert_eq!(counts.get("queued"), Some(&expected), "{out:?}");
    assert_eq!(counts.get("picked"), Some(&expected), "{out:?}");
}
