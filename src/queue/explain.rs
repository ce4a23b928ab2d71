//! [`Queue::explain`]: why a job is not running (or is, or has ended), in words and as
//! data, from the queue and log rows alone.

use std::fmt;
use std::time::Duration;

use postgres::types::Type;
use uuid::Uuid;

use super::Queue;
use crate::error::Result;
use crate::job::{Failure, Job, JobId, LogEntry, Status};

/// PgQueuer's default heartbeat timeout, which [`Queue::explain`] assumes.
const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a job is where it is ([`Queue::explain`]). Its `Display` says it in words.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Explanation {
    /// No job has this id, and no log row names it (or its log was pruned).
    Unknown(JobId),
    /// It has ended: its last log row (with the traceback, for a failure).
    Finished {
        /// The job.
        id: JobId,
        /// Its last log row.
        last: LogEntry,
    },
    /// It failed and is held for inspection (`pgq requeue` puts it back).
    Held {
        /// The row.
        job: Job,
        /// Its failure, from its latest `failed` log row.
        failure: Option<Failure>,
    },
    /// It is queued but not due yet.
    Deferred {
        /// The row.
        job: Job,
        /// How long until it is due.
        due_in: Duration,
    },
    /// A worker has it and is sending heartbeats: it is running.
    Running {
        /// The row.
        job: Job,
        /// How long ago the worker's last heartbeat was.
        heartbeat_age: Duration,
    },
    /// A worker had it, but its heartbeat is older than the heartbeat timeout: the worker
    /// is presumed dead, and the next claim of its entrypoint by any worker takes it over
    /// (keeping its concurrency slot).
    Stale {
        /// The row.
        job: Job,
        /// How long ago the last heartbeat was.
        heartbeat_age: Duration,
    },
    /// It is due and waits to be claimed.
    Waiting {
        /// The row.
        job: Job,
        /// Due jobs of its entrypoint that a claim takes first (higher priority, or as
        /// high and older).
        ahead: u64,
        /// The picked jobs of its entrypoint. Where they hold concurrency slots the
        /// entrypoint is limited, and with as many holders as its limit the limit is full:
        /// the job waits for one of them to end.
        holders: Vec<SlotHolder>,
        /// Where every unit of one of its entrypoint's rate-limit windows is resting: how
        /// long until the next start is allowed (the window's units in the rates table,
        /// which workers declaring rate limits keep; see [`crate::RateLimit`]).
        rate_wait: Option<Duration>,
    },
}

/// A picked job of an entrypoint, as [`Explanation::Waiting`] lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotHolder {
    /// The job.
    pub job_id: JobId,
    /// The concurrency slot it holds (`None`: its entrypoint has no limit, or it was
    /// picked before slots existed).
    pub slot: Option<i64>,
    /// The worker holding it.
    pub worker: Option<Uuid>,
    /// How long ago that worker's last heartbeat was.
    pub heartbeat_age: Duration,
}

impl Queue {
    /// Why job `id` is not running, or that it is, or how it ended, assuming PgQueuer's
    /// heartbeat timeout of 30 s for telling running jobs from stale ones. See
    /// [`Queue::explain_stale_after`].
    ///
    /// # Errors
    /// As [`Queue::explain_stale_after`].
    pub fn explain(&self, id: JobId) -> Result<Explanation> {
        self.explain_stale_after(id, DEFAULT_HEARTBEAT_TIMEOUT)
    }

    /// Why job `id` is where it is, for workers whose heartbeat timeout is
    /// `heartbeat_timeout`: unknown, finished (with its last log row), held as failed
    /// (with the failure), deferred (until when), running (on which worker), stale
    /// (waiting to be taken over), or waiting (behind how many jobs, and behind which
    /// jobs holding its entrypoint's concurrency slots).
    ///
    /// The database does not know the limits workers declare: a full limit shows as
    /// every slot of it held, with the jobs and workers holding them.
    ///
    /// # Errors
    /// [`crate::Error::Pool`] or [`crate::Error::Db`].
    pub fn explain_stale_after(
        &self,
        id: JobId,
        heartbeat_timeout: Duration,
    ) -> Result<Explanation> {
        let rows = self.query(&self.sql.explain_job, &[(&id, Type::INT8)])?;
        let Some(row) = rows.first() else {
            let history = self.history(id)?;
            return Ok(match history.into_iter().next_back() {
                Some(last) => Explanation::Finished { id, last },
                None => Explanation::Unknown(id),
            });
        };
        let job = Job::from_row(row)?;
        let seconds = |column: &str| -> Result<Duration> {
            let s: f64 = row.try_get(column)?;
            Ok(Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default())
        };
        let heartbeat_age = seconds("heartbeat_age")?;
        let due_in = seconds("due_in")?;
        Ok(match job.status {
            Status::Failed => {
                let failure = self
                    .history(id)?
                    .iter()
                    .rev()
                    .find(|e| e.status == Status::Failed)
                    .and_then(LogEntry::failure);
                Explanation::Held { job, failure }
            }
            Status::Picked if heartbeat_age > heartbeat_timeout => {
                Explanation::Stale { job, heartbeat_age }
            }
            Status::Picked => Explanation::Running { job, heartbeat_age },
            _ if !due_in.is_zero() => Explanation::Deferred { job, due_in },
            _ => {
                let ahead = self.query(
                    &self.sql.count_ahead,
                    &[
                        (&job.entrypoint, Type::TEXT),
                        (&job.priority, Type::INT4),
                        (&job.id, Type::INT8),
                    ],
                )?;
                let ahead: i64 = ahead.first().map_or(Ok(0), |r| r.try_get(0))?;
                let holders = self
                    .query(&self.sql.select_holders, &[(&job.entrypoint, Type::TEXT)])?
                    .iter()
                    .map(|r| {
                        let age: f64 = r.try_get("heartbeat_age")?;
                        Ok(SlotHolder {
                            job_id: r.try_get("id")?,
                            slot: r.try_get("slot")?,
                            worker: r.try_get("queue_manager_id")?,
                            heartbeat_age: Duration::try_from_secs_f64(age.max(0.0))
                                .unwrap_or_default(),
                        })
                    })
                    .collect::<Result<_>>()?;
                let rate_wait = self.rate_wait(&job.entrypoint)?;
                Explanation::Waiting {
                    job,
                    ahead: u64::try_from(ahead).unwrap_or(0),
                    holders,
                    rate_wait,
                }
            }
        })
    }
}

impl Queue {
    /// How long until `entrypoint`'s rate limits allow a start, if they hold it back now;
    /// `None` also where the rates table does not exist (a schema PgQueuer made alone).
    fn rate_wait(&self, entrypoint: &str) -> Result<Option<Duration>> {
        let exists = self.query(
            crate::sql::rates::RATES_EXIST,
            &[
                (&self.sql.rates_table, Type::TEXT),
                (&self.sql.rates_schema, Type::TEXT),
            ],
        )?;
        if !exists.first().map_or(Ok(false), |r| r.try_get(0))? {
            return Ok(None);
        }
        let rows = self.query(&self.sql.rate_next_start, &[(&entrypoint, Type::TEXT)])?;
        let wait: Option<i64> = rows.first().map_or(Ok(None), |r| r.try_get(0))?;
        Ok(wait.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0))))
    }
}

impl Explanation {
    /// The state in one word: `unknown`, `finished`, `held`, `deferred`, `running`,
    /// `stale` or `waiting`.
    pub fn state(&self) -> &'static str {
        match self {
            Explanation::Unknown(_) => "unknown",
            Explanation::Finished { .. } => "finished",
            Explanation::Held { .. } => "held",
            Explanation::Deferred { .. } => "deferred",
            Explanation::Running { .. } => "running",
            Explanation::Stale { .. } => "stale",
            Explanation::Waiting { .. } => "waiting",
        }
    }
}

/// Whole seconds (or milliseconds under one), for messages.
fn span(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs())
    }
}

fn worker(w: Option<Uuid>) -> String {
    w.map_or_else(|| "no worker".to_owned(), |w| format!("worker {w}"))
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Explanation::Unknown(id) => write!(
                f,
                "job {id} is unknown: no job has this id, and no log row names it (or the \
                 log was pruned)"
            ),
            Explanation::Finished { id, last } => {
                write!(
                    f,
                    "job {id} ({}) has finished: it ended {}",
                    last.entrypoint, last.status
                )?;
                if let Some(failure) = last.failure() {
                    write!(f, " ({failure})")?;
                }
                Ok(())
            }
            Explanation::Held { job, failure } => {
                write!(f, "job {} ({}) is held as failed", job.id, job.entrypoint)?;
                match failure {
                    Some(failure) => write!(f, ": {failure}")?,
                    None => write!(f, " (its failure's log row is gone)")?,
                }
                write!(f, "; `pgq requeue {}` puts it back in the queue", job.id)
            }
            Explanation::Deferred { job, due_in } => write!(
                f,
                "job {} ({}) is deferred: it is due in {}",
                job.id,
                job.entrypoint,
                span(*due_in)
            ),
            Explanation::Running { job, heartbeat_age } => write!(
                f,
                "job {} ({}) is running: {} picked it, last heartbeat {} ago",
                job.id,
                job.entrypoint,
                worker(job.queue_manager_id),
                span(*heartbeat_age)
            ),
            Explanation::Stale { job, heartbeat_age } => write!(
                f,
                "job {} ({}) is stale: {} picked it but its last heartbeat was {} ago, past \
                 the heartbeat timeout, so it is presumed dead; the next claim of {:?} by any \
                 worker takes the job over",
                job.id,
                job.entrypoint,
                worker(job.queue_manager_id),
                span(*heartbeat_age),
                job.entrypoint
            ),
            Explanation::Waiting {
                job,
                ahead,
                holders,
                rate_wait,
            } => {
                write!(f, "job {} ({}) is due and waiting", job.id, job.entrypoint)?;
                if let Some(wait) = rate_wait {
                    write!(
                        f,
                        "; waiting for the rate limit, next start in {} ms",
                        wait.as_millis()
                    )?;
                }
                if *ahead > 0 {
                    write!(
                        f,
                        "; {ahead} due jobs of {:?} are ahead of it (higher priority, or as \
                         high and older)",
                        job.entrypoint
                    )?;
                }
                let slotted: Vec<&SlotHolder> =
                    holders.iter().filter(|h| h.slot.is_some()).collect();
                if slotted.is_empty() {
                    if *ahead == 0 && rate_wait.is_none() {
                        write!(
                            f,
                            "; it is next in line, and starts when a worker serving {:?} \
                             claims (if none picks it up, no running worker serves that \
                             entrypoint)",
                            job.entrypoint
                        )?;
                    }
                    return Ok(());
                }
                let list: Vec<String> = slotted
                    .iter()
                    .map(|h| {
                        format!(
                            "slot {} by job {} ({}, heartbeat {} ago)",
                            h.slot.unwrap_or_default(),
                            h.job_id,
                            worker(h.worker),
                            span(h.heartbeat_age)
                        )
                    })
                    .collect();
                write!(
                    f,
                    "; {} concurrency slots of {:?} are held: {}. With a limit of {} the \
                     limit is full, and the job starts when one of them ends",
                    slotted.len(),
                    job.entrypoint,
                    list.join("; "),
                    slotted.len()
                )
            }
        }
    }
}
