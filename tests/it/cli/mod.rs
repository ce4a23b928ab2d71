//! The `pgq` program, run as a child process against a real database: every command, its
//! JSON and table output, and its failures (exit status and message). One file per
//! group of commands; the helpers that run `pgq` are here.

use std::process::{Command, Stdio};

use pgqueuer::{Claimer, Outcome, Status};
use serde_json::Value;

use crate::harness::TestDb;

mod jobs;
mod limits;
mod maintenance;
mod monitoring;
mod schedules;
mod schema;
mod usage;

/// What one run of `pgq` did.
#[derive(Debug)]
pub struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    pub fn ok(self) -> String {
        assert_eq!(self.code, 0, "pgq failed: {self:?}");
        self.stdout
    }

    /// stdout parsed as JSON, after asserting success.
    fn json(self) -> Vec<Value> {
        let out = self.ok();
        match serde_json::from_str(&out) {
            Ok(Value::Array(items)) => items,
            other => panic!("not a JSON array: {out:?} ({other:?})"),
        }
    }
}

/// `pgq` with a clean environment: only `PGQUEUER_DSN` (when given) says where to go.
pub fn command(dsn: Option<&str>, args: &[&str]) -> Command {
    let mut c = Command::new(crate::harness::pgq_binary());
    c.args(args);
    for var in [
        "PGQUEUER_DSN",
        "PGDSN",
        "DATABASE_URL",
        "PGQUEUER_PREFIX",
        "PGQUEUER_SCHEMA",
        "PGQUEUER_CHANNEL",
        "PGQUEUER_TABLEFMT",
        "TABLEFMT",
        "PGQUEUER_DURABILITY",
        "PGQUEUER_POOLER",
        "PGQUEUER_LISTEN_DSN",
    ] {
        c.env_remove(var);
    }
    if let Some(dsn) = dsn {
        c.env("PGQUEUER_DSN", dsn);
    }
    c
}

pub fn pgq_env(dsn: Option<&str>, args: &[&str]) -> Run {
    let out = command(dsn, args)
        .stdin(Stdio::null())
        .output()
        .expect("run pgq");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `pgq ARGS` against `db`.
pub fn pgq(db: &TestDb, args: &[&str]) -> Run {
    pgq_env(Some(&db.dsn()), args)
}

/// The id in "Enqueued job 42.".
pub fn enqueued_id(stdout: &str) -> i64 {
    stdout
        .trim()
        .strip_prefix("Enqueued job ")
        .and_then(|s| s.strip_suffix('.'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an enqueue message: {stdout:?}"))
}

/// Claims every queued job of `entrypoint` as a worker and ends each with `status`;
/// returns their ids.
pub fn process(db: &TestDb, entrypoint: &str, status: Status) -> Vec<i64> {
    let pool = db.pool(1);
    let claimer = Claimer::builder()
        .entrypoint(entrypoint, 0)
        .build()
        .unwrap();
    let mut conn = pool.get().unwrap();
    let claim = claimer.claim(&mut conn, 100).unwrap();
    let outcomes: Vec<Outcome> = claim
        .jobs
        .iter()
        .map(|j| Outcome {
            id: j.id,
            status,
            traceback: None,
        })
        .collect();
    claimer.complete(&mut conn, &outcomes).unwrap();
    outcomes.iter().map(|o| o.id).collect()
}
