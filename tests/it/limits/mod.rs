//! Concurrency limits, every test in one place: the slot-claiming dequeue's slots and
//! races (`slots`, `races`), a worker's threads within its limits (`worker`), a worker
//! facing full slots (`full_slots`), workers that disagree on a limit, Python's and ours
//! (`disagree`), limits far from binding claimed as if there were none (`relaxed`), and
//! the limit audit from the log (`audit`), rate limits (`rates`) and limits stored in the
//! database while workers run (`stored`). A fleet of Rust and Python
//! workers at one limit is in `interop::fleet`.

mod audit;
mod disagree;
mod full_slots;
mod races;
mod rates;
mod relaxed;
mod slots;
mod stored;
mod worker;

use std::time::Duration;

use pgqueuer::postgres::Client;
use pgqueuer::{Entrypoint, Worker};
use serde_json::json;

use crate::harness::{TestDb, eventually};
use crate::python;

/// The tables `worker.py`'s `record_run` behaviour writes.
pub fn create_runs_table(client: &mut Client) {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS interop_marks (
                 job_id bigint NOT NULL, what text NOT NULL,
                 at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE TABLE IF NOT EXISTS interop_runs (
                 job_id bigint NOT NULL, started timestamptz NOT NULL,
                 finished timestamptz NOT NULL, worker text NOT NULL);",
        )
        .unwrap();
}

/// The picked jobs of `entrypoint` as (id, slot), by slot.
pub fn picked(client: &mut Client, entrypoint: &str) -> Vec<(i64, Option<i64>)> {
    client
        .query(
            "SELECT id, slot FROM pgqueuer WHERE entrypoint = $1 AND status = 'picked' \
             ORDER BY slot, id",
            &[&entrypoint],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// A Python PgQueuer worker with `limit` on `entrypoint` whose handler sleeps `sleep_s`,
/// started in the background; returns once it holds `holds` jobs.
pub fn python_holding(
    db: &TestDb,
    entrypoint: &str,
    limit: u32,
    holds: usize,
    sleep_s: f64,
) -> python::Running {
    let mut client = db.client();
    create_runs_table(&mut client);
    let spec = json!({
        "entrypoint": entrypoint, "behaviour": "record_run", "concurrency_limit": limit,
        "sleep_s": sleep_s, "timeout_s": 120, "name": "py",
    });
    let running = python::spawn_script(db, "worker.py", &spec, Duration::from_secs(150));
    eventually(
        Duration::from_secs(30),
        "the Python worker to pick its jobs",
        || picked(&mut client, entrypoint).len() == holds,
    );
    running
}

/// A worker of `entrypoint` with `limit`, two threads and a long heartbeat timeout (so
/// that a dead Python worker's jobs never look stale to it), started in the background.
pub fn rust_worker(
    db: &TestDb,
    entrypoint: &str,
    limit: u32,
    pause: bool,
) -> pgqueuer::RunningWorker {
    Worker::builder(db.pool(4))
        .threads(2)
        .heartbeat_timeout(Duration::from_secs(600))
        .dequeue_timeout(Duration::from_millis(500))
        .entrypoint(
            Entrypoint::new(entrypoint)
                .concurrency_limit(limit)
                .pause_on_larger_limit(pause),
            |_job, _ctx| Ok(()),
        )
        .build()
        .unwrap()
        .start()
        .unwrap()
}

/// When each job's handler started, as the handlers record it.
pub type Starts = std::sync::Arc<std::sync::Mutex<Vec<std::time::SystemTime>>>;

/// A worker of `threads` threads claiming batches of `batch` (its pool has room for two
/// claim lanes), whose `entrypoint` handler records when each job starts in `starts`.
pub fn recording_worker(
    db: &TestDb,
    entrypoint: Entrypoint,
    threads: usize,
    batch: usize,
    starts: &Starts,
) -> pgqueuer::RunningWorker {
    let seen = std::sync::Arc::clone(starts);
    Worker::builder(db.pool(6))
        .threads(threads)
        .batch_size(batch)
        .entrypoint(entrypoint, move |_, _| {
            seen.lock().unwrap().push(std::time::SystemTime::now());
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap()
}
