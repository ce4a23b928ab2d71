//! A health verdict for a queue, from the database alone, so that it holds across a
//! mixed Python and Rust fleet: OK, DEGRADED or STALLED, with the reasons. What `pgq
//! health`, the MCP `health` tool and the dashboard's `/healthz?deep=1` report, and what
//! an application can serve from its own probe ([`health`]).
//!
//! A worker that says it is alive can still have a dead claim loop; the database says
//! whether work moves: due jobs that wait while nothing is picked or finished is a stall,
//! whatever the workers report.

use std::fmt;
use std::time::{Duration, SystemTime};

use postgres::GenericClient;
use postgres::types::Type;

use super::micros_of;
use crate::connect;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::settings::Settings;
use crate::sql::ops as sql;

/// How healthy a queue is, worst last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// Work moves and nothing needs attention.
    Ok,
    /// Work moves, but something needs attention (stale jobs, a growing backlog, held
    /// failures, a limit exceeded).
    Degraded,
    /// Due work waits and nothing moves, or workers cannot start (the schema).
    Stalled,
}

impl Verdict {
    /// `OK`, `DEGRADED` or `STALLED`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Degraded => "DEGRADED",
            Verdict::Stalled => "STALLED",
        }
    }

    /// The exit code of `pgq health`: 0, 1, 2, for scripts.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Ok => 0,
            Verdict::Degraded => 1,
            Verdict::Stalled => 2,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reason of a [`Health`] verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reason {
    /// The verdict this reason alone would give.
    pub verdict: Verdict,
    /// A stable name for scripts: `stalled`, `schema`, `stale_jobs`, `backlog_growing`,
    /// `failed_jobs_held`, `over_limit`, `horizon_held`.
    pub code: &'static str,
    /// What was found, in words, with the figures.
    pub message: String,
}

/// The verdict and what it rests on ([`health`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Health {
    /// The worst verdict among the reasons; [`Verdict::Ok`] when there is none.
    pub verdict: Verdict,
    /// Why, worst first.
    pub reasons: Vec<Reason>,
    /// Queued jobs that are due now.
    pub due_jobs: u64,
    /// How long the oldest due job has waited.
    pub oldest_due_wait: Option<Duration>,
    /// Picked jobs, and those of them whose heartbeat is older than `stale_after`.
    pub picked_jobs: u64,
    /// See `picked_jobs`.
    pub stale_jobs: u64,
    /// Jobs held as `failed`.
    pub failed_jobs: u64,
    /// How long ago a job was last picked or finished (within the last day).
    pub last_progress: Option<Duration>,
    /// Jobs enqueued (or put back) over the window, and jobs finished over it.
    pub arrivals: u64,
    /// See `arrivals`.
    pub completions: u64,
}

/// What [`health`] measures against. The defaults suit PgQueuer's own defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthOptions {
    /// Due work that waited this long while nothing was picked or finished is a stall.
    /// Defaults to 60 s, twice PgQueuer's `dequeue_timeout` (an idle worker looks at
    /// least that often even without a notification).
    pub stall_after: Duration,
    /// A picked job whose heartbeat is older than this is stale. Defaults to 30 s,
    /// PgQueuer's `heartbeat_timeout`.
    pub stale_after: Duration,
    /// The window over which arrivals and completions are compared. Defaults to 5 min.
    pub window: Duration,
    /// Concurrency limits declared for entrypoints, to check the slots held against
    /// (the database does not store the limits workers declare).
    pub limits: Vec<(String, u32)>,
    /// A session or prepared transaction that has held the MVCC horizon this long is
    /// named (DEGRADED, `horizon_held`): while it lasts, no row version that died since it
    /// began can be removed. Defaults to 5 min.
    pub horizon_after: Duration,
    /// The same for replication slots and standbys, which say no time: named once the
    /// oldest row version they keep is this many transactions old. Defaults to 500,000.
    pub horizon_xid_after: i64,
}

impl Default for HealthOptions {
    fn default() -> Self {
        HealthOptions {
            stall_after: Duration::from_secs(60),
            stale_after: Duration::from_secs(30),
            window: Duration::from_secs(300),
            limits: Vec::new(),
            horizon_after: Duration::from_secs(300),
            horizon_xid_after: 500_000,
        }
    }
}

/// A backlog grows when arrivals over the window exceed completions by this factor (and
/// by [`BACKLOG_MARGIN`] jobs), while due jobs wait.
const BACKLOG_FACTOR: f64 = 1.25;
/// See [`BACKLOG_FACTOR`].
const BACKLOG_MARGIN: u64 = 10;

/// The queue's health verdict, read from the database in one statement and a schema
/// check (see the module docs):
///
/// - **STALLED** when due work (queued due jobs, or picked jobs gone stale) has waited
///   longer than `stall_after` and nothing was picked or finished for as long; or when
///   the schema lacks an object a worker needs (`verify` would reject it, so no worker
///   can start);
/// - **DEGRADED** for picked jobs with stale heartbeats (their workers are presumed
///   dead; another worker takes them over), a backlog growing faster than throughput
///   over `window`, failed jobs held, more slots held than a declared limit, or a
///   session, replication slot, prepared transaction or standby that has held the MVCC
///   horizon for longer than `horizon_after` (see [`crate::ops::horizon_holders`]);
/// - **OK** otherwise.
///
/// # Errors
/// [`Error::InvalidInput`] for a duration that does not fit an interval;
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn health<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    options: &HealthOptions,
) -> Result<Health> {
    settings.validate()?;
    let stale_us = micros_of("stale_after", options.stale_after)?;
    let window_us = micros_of("window", options.window)?;
    let mut reasons = Vec::new();
    let facts = crate::schema::describe_in(client, settings)?;
    let missing = crate::schema::missing_objects(&facts, settings);
    if !missing.is_empty() {
        reasons.push(Reason {
            verdict: Verdict::Stalled,
            code: "schema",
            message: format!(
                "the schema lacks {} (workers refuse to start without it): run pgq upgrade",
                missing.join(", ")
            ),
        });
        return Ok(verdict_of(reasons, Health::empty()));
    }
    let row = connect::query_one_alone(
        client,
        &sql::queue_health_facts(settings),
        &[(&stale_us, Type::INT8), (&window_us, Type::INT8)],
    )?;
    let count = |column: &str| -> Result<u64> {
        let n: i64 = row.try_get(column)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let seconds = |column: &str| -> Result<Option<Duration>> {
        let s: Option<f64> = row.try_get(column)?;
        Ok(s.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)))
    };
    let health = Health {
        verdict: Verdict::Ok,
        reasons: Vec::new(),
        due_jobs: count("due")?,
        oldest_due_wait: seconds("oldest_due_s")?,
        picked_jobs: count("picked")?,
        stale_jobs: count("stale")?,
        failed_jobs: count("failed")?,
        last_progress: seconds("last_progress_s")?,
        arrivals: count("arrivals")?,
        completions: count("completions")?,
    };
    let stall = options.stall_after;
    let quiet = health.last_progress.is_none_or(|age| age > stall);
    let waited = health.oldest_due_wait.is_some_and(|w| w > stall);
    if quiet && (waited || health.stale_jobs > 0) {
        let since = health.last_progress.map_or_else(
            || "nothing was picked or finished in the last day".to_owned(),
            |age| format!("nothing was picked or finished for {} s", age.as_secs()),
        );
        let waiting = match (waited, health.stale_jobs) {
            (true, 0) => format!(
                "{} due jobs wait (the oldest for {} s)",
                health.due_jobs,
                health.oldest_due_wait.unwrap_or_default().as_secs()
            ),
            (true, stale) => format!(
                "{} due jobs wait (the oldest for {} s) and {stale} picked jobs have stale \
                 heartbeats",
                health.due_jobs,
                health.oldest_due_wait.unwrap_or_default().as_secs()
            ),
            (false, stale) => format!("{stale} picked jobs have stale heartbeats"),
        };
        reasons.push(Reason {
            verdict: Verdict::Stalled,
            code: "stalled",
            message: format!(
                "{waiting} and {since} (more than stall_after, {} s): no worker claims; are \
                 the workers running, or stuck?",
                stall.as_secs()
            ),
        });
    } else if health.stale_jobs > 0 {
        reasons.push(Reason {
            verdict: Verdict::Degraded,
            code: "stale_jobs",
            message: format!(
                "{} picked jobs have heartbeats older than {} s: their workers are presumed \
                 dead, and another worker takes them over",
                health.stale_jobs,
                options.stale_after.as_secs()
            ),
        });
    }
    #[allow(clippy::cast_precision_loss, reason = "a ratio of job counts")]
    let growing = health.due_jobs > 0
        && health.arrivals > (health.completions as f64 * BACKLOG_FACTOR) as u64 + BACKLOG_MARGIN;
    if growing {
        reasons.push(Reason {
            verdict: Verdict::Degraded,
            code: "backlog_growing",
            message: format!(
                "the backlog grows: {} jobs arrived and {} finished over the last {} s, and \
                 {} due jobs wait",
                health.arrivals,
                health.completions,
                options.window.as_secs(),
                health.due_jobs
            ),
        });
    }
    if health.failed_jobs > 0 {
        reasons.push(Reason {
            verdict: Verdict::Degraded,
            code: "failed_jobs_held",
            message: format!(
                "{} failed jobs are held: inspect them (pgq failed) and requeue or delete them",
                health.failed_jobs
            ),
        });
    }
    let held = crate::horizon::long_held(
        crate::horizon::holders(client)?,
        options.horizon_after,
        options.horizon_xid_after,
    );
    if !held.is_empty() {
        let named: Vec<String> = held.iter().take(3).map(ToString::to_string).collect();
        let more = match held.len() {
            1..=3 => String::new(),
            n => format!(" (and {} more)", n - 3),
        };
        reasons.push(Reason {
            verdict: Verdict::Degraded,
            code: "horizon_held",
            message: format!(
                "the MVCC horizon is held by {}{more}: no row version that died since can be \
                 removed, so the queue's tables and indexes grow; end it (and set \
                 idle_in_transaction_session_timeout, or a statement_timeout for the roles \
                 that run reports)",
                named.join("; ")
            ),
        });
    }
    if !options.limits.is_empty() {
        for slots in crate::ops::slots_in_use(client, settings)? {
            let Some((_, limit)) = options.limits.iter().find(|(e, _)| *e == slots.entrypoint)
            else {
                continue;
            };
            let limit = u64::from(*limit);
            let highest = slots.highest.and_then(|h| u64::try_from(h).ok());
            if slots.in_use > limit || highest.is_some_and(|h| h >= limit) {
                reasons.push(Reason {
                    verdict: Verdict::Degraded,
                    code: "over_limit",
                    message: format!(
                        "{}: {} slots held, the highest {}, against a declared limit of \
                         {limit}: a worker declares a larger limit",
                        slots.entrypoint,
                        slots.in_use,
                        highest.map_or_else(|| "-".to_owned(), |h| h.to_string())
                    ),
                });
            }
        }
    }
    Ok(verdict_of(reasons, health))
}

/// What a probe asks of a [`Health`] ([`Health::passes`]): an orchestrator restarts what
/// fails its liveness probe and sends no work to what fails its readiness probe, so
/// neither may fail for what a person reads and acts on (held failures, stale jobs of a
/// dead worker, a held horizon, a slot over a limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// Fails only when no worker can work: the database cannot be read (the check
    /// fails) or the schema lacks what a worker needs.
    Liveness,
    /// Fails as liveness does, and also when work stalls or the backlog grows faster than
    /// the queue's throughput.
    Readiness,
}

impl Probe {
    /// `liveness` or `readiness`.
    pub fn parse(text: &str) -> Option<Probe> {
        match text {
            "liveness" => Some(Probe::Liveness),
            "readiness" => Some(Probe::Readiness),
            _ => None,
        }
    }
}

impl Health {
    /// Whether this health passes `probe` (a health that could not be read fails every
    /// probe: the caller has an error, not a `Health`).
    pub fn passes(&self, probe: Probe) -> bool {
        let failing: &[&str] = match probe {
            Probe::Liveness => &["schema"],
            Probe::Readiness => &["schema", "stalled", "backlog_growing"],
        };
        !self.reasons.iter().any(|r| failing.contains(&r.code))
    }

    fn empty() -> Health {
        Health {
            verdict: Verdict::Ok,
            reasons: Vec::new(),
            due_jobs: 0,
            oldest_due_wait: None,
            picked_jobs: 0,
            stale_jobs: 0,
            failed_jobs: 0,
            last_progress: None,
            arrivals: 0,
            completions: 0,
        }
    }

    /// The verdict and its reasons as JSON, with the figures (what `pgq health --json`,
    /// the MCP tool and `/healthz?deep=1` send).
    pub fn to_json(&self) -> serde_json::Value {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        serde_json::json!({
            "verdict": self.verdict.as_str(),
            "reasons": self.reasons.iter().map(|r| serde_json::json!({
                "verdict": r.verdict.as_str(),
                "code": r.code,
                "message": r.message,
            })).collect::<Vec<_>>(),
            "due_jobs": self.due_jobs,
            "oldest_due_wait_seconds": secs(self.oldest_due_wait),
            "picked_jobs": self.picked_jobs,
            "stale_jobs": self.stale_jobs,
            "failed_jobs": self.failed_jobs,
            "last_progress_seconds": secs(self.last_progress),
            "arrivals": self.arrivals,
            "completions": self.completions,
            "checked_at": crate::time::python_time(SystemTime::now()),
        })
    }
}

impl fmt::Display for Health {
    /// `DEGRADED: 3 picked jobs have heartbeats older than 30 s ...; ...`, or `OK`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.verdict.as_str())?;
        for (i, r) in self.reasons.iter().enumerate() {
            write!(f, "{}{}", if i == 0 { ": " } else { "; " }, r.message)?;
        }
        Ok(())
    }
}

fn verdict_of(mut reasons: Vec<Reason>, mut health: Health) -> Health {
    reasons.sort_by_key(|r| std::cmp::Reverse(r.verdict));
    health.verdict = reasons.first().map_or(Verdict::Ok, |r| r.verdict);
    health.reasons = reasons;
    health
}
