//! Executing one job: run its handler (panics caught, cancellation seen through the job's
//! flag), decide its outcome (with the retry policy) and hand it to the completer. No
//! claim and no write happens here.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant, SystemTime};

use super::builder::WorkerConfig;
use super::deadlines::{Armed, Deadlines};
use super::doorbell::{Doorbell, Wake};
use super::entrypoint::{Context, JobError, OnFailure, Registered};
use super::jitter::Jitter;
use super::ledger::Ledger;
use super::outcomes::Requeue;
use super::rate_gate::RateGate;
use super::stats::Stats;
use crate::claim::Outcome;
use crate::error::chain;
use crate::job::storable_text;
use crate::job::{Job, Status};
use crate::shutdown::ShutdownHandle;
use crate::telemetry;
use crate::time::{MAX_DELAY, TimeStyle, format_time, python_timedelta};

/// The most bytes of a handler's error message, traceback or retry reason written to
/// the log row (a note says how many more there were).
const MAX_TRACEBACK_TEXT: usize = 64 << 10;

/// What running a job uses; shared by every thread.
pub(crate) struct Executor<'a> {
    pub(crate) config: &'a WorkerConfig,
    pub(crate) ledger: &'a Ledger,
    pub(crate) doorbell: &'a Doorbell,
    pub(crate) stats: &'a Stats,
    /// Where jobs with a timeout are registered (`None`: no entrypoint has one).
    pub(crate) deadlines: Option<&'a Deadlines>,
    /// Once shutdown is requested, a job that has not started goes back to the queue.
    pub(crate) shutdown: &'a ShutdownHandle,
    /// Where a rate-limited job's start is checked against its claim.
    pub(crate) rate_gate: &'a RateGate,
}

/// How a job ended, as the executor reports it.
enum Verdict {
    /// Delete (or hold, for `Failed`) with a log row, and a traceback after a failure.
    End(Status, Option<Failure>),
    /// Put back in the queue after `delay`, with the failure (and the reason given) for
    /// the log's traceback.
    Requeue {
        delay: Duration,
        failure: Failure,
        reason: Option<String>,
    },
    /// Not started (shutdown came first): back to the queue at once, no attempt counted.
    Release,
}

impl Verdict {
    /// The failure's type and message, for the trace span's status.
    fn failure(&self) -> Option<(&str, &str)> {
        match self {
            Verdict::End(_, failure) => failure.as_ref(),
            Verdict::Requeue { failure, .. } => Some(failure),
            Verdict::Release => None,
        }
        .map(|f| (f.type_name, f.message.as_str()))
    }
}

impl Executor<'_> {
    /// Runs one job, leaves its outcome in the ledger and frees its room (the run grant
    /// is the runner's to give back).
    pub(crate) fn execute(&self, job: &Job, rng: &mut Jitter) {
        let started = Instant::now();
        match self.config.registry.by_name.get(&job.entrypoint) {
            Some(entry) => self.run_job(job, entry, rng, started),
            None => {
                // Cannot happen: the claim only takes our entrypoints.
                log::error!("job {} ({}) has no handler here", job.id, job.entrypoint);
                let outcome = Outcome {
                    id: job.id,
                    status: Status::Exception,
                    traceback: None,
                };
                self.ledger.finished(outcome, started.elapsed());
            }
        }
        self.doorbell.ring_if_wanted(Wake::Outcomes);
        self.doorbell
            .thread_freed(self.ledger.room(), self.ledger.most_room());
    }

    /// Runs the handler (in its trace span, when the job carries a trace context) and
    /// hands its outcome on.
    fn run_job(&self, job: &Job, entry: &Registered, rng: &mut Jitter, started: Instant) {
        let span = telemetry::process(job);
        let verdict = span.run(|| self.verdict(job, entry, rng));
        span.finish(verdict.failure());
        match verdict {
            Verdict::End(Status::Canceled, _) => {
                self.stats.ended(entry.index, Status::Canceled);
                self.ledger.cancelled(job.id, started.elapsed());
            }
            Verdict::End(status, failure) => {
                self.stats.ended(entry.index, status);
                let outcome = Outcome {
                    id: job.id,
                    status,
                    traceback: failure.map(|f| self.traceback_json(job, &f, None)),
                };
                self.ledger.finished(outcome, started.elapsed());
            }
            Verdict::Requeue {
                delay,
                failure,
                reason,
            } => {
                self.stats.retried(entry.index);
                let requeue = Requeue {
                    id: job.id,
                    entrypoint: job.entrypoint.clone(),
                    delay,
                    traceback: self.traceback_json(job, &failure, Some((delay, reason.as_deref()))),
                };
                self.ledger.requeued(requeue, started.elapsed());
            }
            Verdict::Release => {
                log::debug!(
                    "job {} ({}) not started before shutdown or a cancellation; giving it \
                     back to the queue if it is still this worker's",
                    job.id,
                    job.entrypoint
                );
                self.ledger.released(job.id);
            }
        }
    }

    /// Runs the handler and decides the job's outcome.
    fn verdict(&self, job: &Job, entry: &Registered, rng: &mut Jitter) -> Verdict {
        let config = self.config;
        let canceled = || Verdict::End(Status::Canceled, None);
        let stop = self.ledger.stop_of(job.id).unwrap_or_default();
        if !self
            .rate_gate
            .start(config, self.shutdown, job, || stop.is_cancelled())
        {
            return Verdict::Release;
        }
        if stop.is_cancelled() {
            // Not started, and its row gone or another worker's: `cancel` deleted the row
            // and logged `canceled` itself, and another owner runs it. Giving it back
            // changes nothing in either case, and should the row be this worker's after
            // all, it goes back to the queue rather than be deleted unrun.
            return Verdict::Release;
        }
        if self.shutdown.is_shutdown() {
            // Claimed ahead (or just before the shutdown request) and not started: no
            // handler has seen it, so it goes back to the queue for any worker.
            return Verdict::Release;
        }
        if let Some(problem) = &job.unreadable {
            // Its handler would see fields that are not what was stored: the job ends as
            // a failure, by its entrypoint's policy, without a retry that would read the
            // same row again.
            let failure = Failure {
                type_name: "UnreadableRow",
                message: format!("the job's row cannot be read as stored: {problem}"),
                traceback: format!(
                    "not run: job {} ({}) has columns this worker cannot read as stored \
                     ({problem}); rewrite them or requeue the job from a program that can",
                    job.id, job.entrypoint
                ),
            };
            super::warning::warn_always(format_args!(
                "job {} ({}) failed: {}: {}",
                job.id, job.entrypoint, failure.type_name, failure.message
            ));
            let status = match entry.options.on_failure {
                OnFailure::Delete => Status::Exception,
                OnFailure::Hold => Status::Failed,
            };
            return Verdict::End(status, Some(failure));
        }
        let started = Instant::now();
        if let (Some(timeout), Some(deadlines)) = (entry.options.timeout, self.deadlines) {
            deadlines.arm(Armed {
                id: job.id,
                entrypoint: job.entrypoint.clone(),
                timeout,
                started,
                stop: stop.clone(),
            });
        }
        let ctx = Context {
            job_id: job.id,
            stop: &stop,
            resources: config.resources.as_deref(),
            worker_id: config.claimer.worker_id(),
            picked_at: job.updated,
        };
        log::trace!("running job {} ({})", job.id, job.entrypoint);
        let due = job.created.max(job.execute_after);
        let waited = SystemTime::now().duration_since(due).unwrap_or_default();
        self.stats.started(entry.index, waited);
        let result = catch_unwind(AssertUnwindSafe(|| (entry.handler)(job, &ctx)));
        stop.end();
        self.stats.ran(entry.index, started.elapsed());
        let failure = match result {
            Ok(Ok(())) => None,
            Ok(Err(JobError::Retry(retry))) if retry.delay > MAX_DELAY => Some(Failure {
                type_name: "InvalidRetry",
                message: format!(
                    "the handler asked to retry after {:?}, longer than the longest delay \
                     allowed ({MAX_DELAY:?}, 1000 years)",
                    retry.delay
                ),
                traceback: format!(
                    "Retry::after({:?}) with reason {:?}: the delay cannot be stored",
                    retry.delay,
                    retry.reason.as_deref().unwrap_or_default()
                ),
            }),
            Ok(Err(JobError::Retry(retry))) => {
                let reason = retry.reason.as_deref().unwrap_or_default();
                return Verdict::Requeue {
                    delay: retry.delay,
                    failure: Failure {
                        type_name: "RetryRequested",
                        message: reason.to_owned(),
                        traceback: format!("retry requested: {reason}"),
                    },
                    reason: retry.reason,
                };
            }
            Ok(Err(JobError::Failed { error, type_name })) => Some(Failure {
                type_name,
                message: error.to_string(),
                traceback: chain(error.as_ref()).to_string(),
            }),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "handler panicked".to_owned());
                Some(Failure {
                    type_name: "Panic",
                    traceback: format!("the handler panicked: {message}"),
                    message,
                })
            }
        };
        if stop.is_cancelled() {
            return canceled();
        }
        let failure = match (failure, stop.is_timed_out()) {
            (failure, true) => {
                let timeout = entry.options.timeout.unwrap_or_default();
                let how = match &failure {
                    None => "then returned success".to_owned(),
                    Some(f) => format!("then failed with {}: {}", f.type_name, f.message),
                };
                Failure {
                    type_name: "TimeoutError",
                    message: format!("the job ran longer than its timeout of {timeout:?}"),
                    traceback: format!(
                        "timed out: the handler was asked to stop after its timeout of \
                         {timeout:?}, returned after {:?}, and {how}",
                        started.elapsed()
                    ),
                }
            }
            (Some(failure), false) => failure,
            (None, false) => return Verdict::End(Status::Successful, None),
        };
        if let Some(policy) = &entry.options.retry
            && let Some(delay) = policy.delay_for(job.attempts, rng.unit())
        {
            log::info!(
                "job {} ({}) failed ({}: {}); retrying in {delay:?}",
                job.id,
                job.entrypoint,
                failure.type_name,
                failure.message
            );
            return Verdict::Requeue {
                delay,
                reason: Some(failure.message.clone()),
                failure: Failure {
                    traceback: format!("retry requested: {}", failure.message),
                    ..failure
                },
            };
        }
        super::warning::warn_always(format_args!(
            "job {} ({}) failed: {}: {}",
            job.id, job.entrypoint, failure.type_name, failure.traceback
        ));
        let status = match entry.options.on_failure {
            OnFailure::Delete => Status::Exception,
            OnFailure::Hold => Status::Failed,
        };
        Verdict::End(status, Some(failure))
    }

    /// PgQueuer's `TracebackRecord`: all six keys, which Python readers require.
    fn traceback_json(
        &self,
        job: &Job,
        failure: &Failure,
        retry: Option<(Duration, Option<&str>)>,
    ) -> serde_json::Value {
        let mut context = serde_json::json!({
            "entrypoint": job.entrypoint,
            "queue_manager_id": self.config.claimer.worker_id().to_string(),
        });
        if let Some((delay, reason)) = retry {
            context["attempt"] = job.attempts.into();
            context["retry_delay"] = python_timedelta(delay).into();
            context["reason"] = reason.map_or(serde_json::Value::Null, |r| {
                storable_text(r, MAX_TRACEBACK_TEXT).into()
            });
        }
        serde_json::json!({
            "job_id": job.id,
            "timestamp": format_time(SystemTime::now(), TimeStyle::Python),
            "exception_type": failure.type_name,
            "exception_message": storable_text(&failure.message, MAX_TRACEBACK_TEXT),
            "traceback": storable_text(&failure.traceback, MAX_TRACEBACK_TEXT),
            "additional_context": context,
        })
    }
}

/// A handler failure, described for the log's traceback record.
struct Failure {
    type_name: &'static str,
    message: String,
    traceback: String,
}
