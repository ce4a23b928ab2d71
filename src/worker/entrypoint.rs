//! What a worker runs: handlers, their options, and what a handler may return.

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use uuid::Uuid;

use super::fast_map::FastMap;
use super::owned::Stop;
use crate::error::{Error, Result};
use crate::job::{Job, JobId, check_entrypoint};
use crate::rate::{RateLimit, check_windows};
use crate::time::{MAX_DELAY, check_duration};

/// What a handler returns: `Ok(())` for success, or a [`JobError`].
pub type HandlerResult = std::result::Result<(), JobError>;

/// A boxed error a handler failed with.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The shared form of a handler.
pub(crate) type Handler = Arc<dyn Fn(&Job, &Context<'_>) -> HandlerResult + Send + Sync + 'static>;

/// Why a handler did not succeed.
///
/// Any error converts into [`JobError::Failed`] with `?`; [`Retry`] converts into
/// [`JobError::Retry`].
pub enum JobError {
    /// The job failed. It is recorded as `exception` (deleted) or, with
    /// [`OnFailure::Hold`], as `failed` (kept for inspection and requeue), unless the
    /// entrypoint's [`RetryPolicy`] retries it first.
    Failed {
        /// The error.
        error: BoxError,
        /// The error's type, for the log's `exception_type`.
        type_name: &'static str,
    },
    /// Put the job back in the queue to run again later (counted in `attempts`).
    Retry(Retry),
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Failed { error, type_name } => f
                .debug_struct("Failed")
                .field("error", error)
                .field("type_name", type_name)
                .finish(),
            JobError::Retry(retry) => f.debug_tuple("Retry").field(retry).finish(),
        }
    }
}

impl<E> From<E> for JobError
where
    E: Into<BoxError>,
{
    fn from(error: E) -> Self {
        let type_name = short_type_name(std::any::type_name::<E>());
        JobError::Failed {
            error: error.into(),
            type_name,
        }
    }
}

impl From<Retry> for JobError {
    fn from(retry: Retry) -> Self {
        JobError::Retry(retry)
    }
}

/// The last path segment of a type name, generics dropped (`std::io::Error` → `Error`).
/// A message given as text (`Err("...".into())`) or an already boxed error says nothing
/// by its type, and is `Error`.
fn short_type_name(full: &'static str) -> &'static str {
    let base = full.split('<').next().unwrap_or(full);
    match base.rsplit("::").next().unwrap_or(base) {
        name if name.starts_with('&') => "Error",
        "String" | "Box" | "Cow" => "Error",
        name => name,
    }
}

/// A request to run the job again later. Return it as `Err(Retry::after(d).into())`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// How long to wait before the job is eligible again.
    pub delay: Duration,
    /// Why, for the log row's traceback.
    pub reason: Option<String>,
}

impl Retry {
    /// Retry after `delay`.
    pub fn after(delay: Duration) -> Retry {
        Retry {
            delay,
            reason: None,
        }
    }

    /// Adds a reason, written to the log.
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Retry {
        self.reason = Some(reason.into());
        self
    }
}

/// What happens to a job whose handler failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// Delete it and log `exception` (PgQueuer's default).
    #[default]
    Delete,
    /// Keep it in the queue table as `failed`, for inspection and `requeue_failed`.
    Hold,
}

/// Retries failed jobs in the database with exponential backoff (PgQueuer's
/// `DatabaseRetryEntrypointExecutor`): a failure of a run with `attempts < max_attempts`
/// requeues the job after `min(initial × 2^attempts, max_delay)` (± `jitter`); the run at
/// `attempts == max_attempts` fails for good.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries before the failure is final. Defaults to 5.
    pub max_attempts: u32,
    /// Delay before the first retry. Defaults to 1 s.
    pub initial_delay: Duration,
    /// Longest delay. Defaults to 5 minutes.
    pub max_delay: Duration,
    /// Growth factor per attempt. Defaults to 2.
    pub multiplier: f64,
    /// Relative random spread of each delay, 0.0 to 1.0. Defaults to 0.1.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(300),
            multiplier: 2.0,
            jitter: 0.1,
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff with these bounds and the default multiplier and jitter.
    pub fn exponential(max_attempts: u32, initial_delay: Duration, max_delay: Duration) -> Self {
        RetryPolicy {
            max_attempts,
            initial_delay,
            max_delay,
            ..RetryPolicy::default()
        }
    }

    /// Sets the jitter (0.0 = none).
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay before retrying a run that had `attempts` earlier attempts, or `None`
    /// when the failure is final. `unit` in `[0, 1)` picks the jitter.
    pub(crate) fn delay_for(&self, attempts: i32, unit: f64) -> Option<Duration> {
        let attempts = u32::try_from(attempts).unwrap_or(0);
        if attempts >= self.max_attempts {
            return None;
        }
        let exponent = i32::try_from(attempts).unwrap_or(i32::MAX);
        let base = self.initial_delay.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = base.min(self.max_delay.as_secs_f64());
        let spread = capped * self.jitter * (2.0 * unit - 1.0);
        let secs = (capped + spread).clamp(0.0, MAX_DELAY.as_secs_f64());
        Some(Duration::try_from_secs_f64(secs).map_or(MAX_DELAY, |d| d.min(MAX_DELAY)))
    }

    fn validate(&self, entrypoint: &str) -> Result<()> {
        let bad = |reason: &str| {
            Err(Error::invalid(
                format!("retry policy of {entrypoint:?}"),
                reason,
            ))
        };
        if !(self.multiplier >= 1.0 && self.multiplier.is_finite()) {
            return bad("multiplier must be a finite number >= 1");
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return bad("jitter must be between 0 and 1");
        }
        if self.initial_delay > self.max_delay {
            return bad("initial_delay must not exceed max_delay");
        }
        if self.max_delay > MAX_DELAY {
            return bad(&format!(
                "max_delay {:?} is longer than the longest delay allowed ({MAX_DELAY:?}, 1000 \
                 years)",
                self.max_delay
            ));
        }
        Ok(())
    }
}

/// An entrypoint to register with [`crate::WorkerBuilder::entrypoint`]: its name and
/// options. A bare name converts into one with the defaults, so
/// `.entrypoint("email", handler)` and
/// `.entrypoint(Entrypoint::new("resize").concurrency_limit(2), handler)` are the same
/// method.
#[derive(Debug, Clone, PartialEq)]
pub struct Entrypoint {
    pub(crate) name: String,
    pub(crate) concurrency_limit: u32,
    pub(crate) rate_limits: Vec<RateLimit>,
    pub(crate) on_failure: OnFailure,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) pause_on_larger_limit: bool,
    pub(crate) timeout: Option<Duration>,
}

impl Entrypoint {
    /// Entrypoint `name` with the defaults: no limit, delete on failure, no retries, no
    /// timeout. A bad name (empty, or holding a NUL character) is reported by
    /// [`crate::WorkerBuilder::build`].
    pub fn new(name: &str) -> Self {
        Entrypoint {
            name: name.to_owned(),
            concurrency_limit: 0,
            rate_limits: Vec::new(),
            on_failure: OnFailure::default(),
            retry: None,
            pause_on_larger_limit: false,
            timeout: None,
        }
    }

    /// The entrypoint's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// At most `limit` jobs of this entrypoint picked at once across every worker, Rust
    /// or Python, that declares the same limit (0 = unlimited). Defaults to 0.
    #[must_use]
    pub fn concurrency_limit(mut self, limit: u32) -> Self {
        self.concurrency_limit = limit;
        self
    }

    /// At most `starts` jobs of this entrypoint start in any window of `per`, across every
    /// worker that declares the same limit (Python PgQueuer's workers keep no rate
    /// limits). Call it again to stack windows (say 100 per second and 1,000 per hour);
    /// it stacks with a concurrency limit too. Defaults to none. See [`RateLimit`]: the
    /// window slides on the database clock, a stale re-pick (a dead worker's job started
    /// again) counts as a start, and a worker
    /// held back by a rate sleeps until the next start is allowed.
    #[must_use]
    pub fn rate_limit(mut self, starts: u32, per: Duration) -> Self {
        self.rate_limits.push(RateLimit::new(starts, per));
        self
    }

    /// What to do with a job that failed for good. Defaults to [`OnFailure::Delete`].
    #[must_use]
    pub fn on_failure(mut self, on_failure: OnFailure) -> Self {
        self.on_failure = on_failure;
        self
    }

    /// Retry failures in the database with this policy. Defaults to no retries.
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Stop claiming this entrypoint while another worker evidently declares a larger
    /// concurrency limit for it (a picked job holds a slot at or above this worker's
    /// limit), and claim it again once that is over. Defaults to false: the disagreement
    /// is logged at `warn` (at most once a minute) and shown in
    /// [`crate::WorkerStats::limits`], and this worker goes on claiming within its own
    /// limit. Only a larger limit elsewhere can be seen; see the repository's
    /// `docs/limits-and-slots.md`.
    #[must_use]
    pub fn pause_on_larger_limit(mut self, pause: bool) -> Self {
        self.pause_on_larger_limit = pause;
        self
    }

    /// How long a handler may run. Past it [`Context::is_cancelled`] turns true (and
    /// [`Context::timed_out`]), and when the handler returns its job is recorded as
    /// failed (`exception`, or `failed` with [`OnFailure::Hold`]) with a `TimeoutError`
    /// traceback, or retried per the entrypoint's [`RetryPolicy`]. Defaults to none.
    ///
    /// A blocking handler cannot be stopped from outside: its thread and its job (and, for
    /// a limited entrypoint, its concurrency slot) stay held until it returns. Check
    /// [`Context::is_cancelled`] in long loops. A handler still running at three times
    /// its timeout is logged at `warn`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl From<&str> for Entrypoint {
    fn from(name: &str) -> Self {
        Entrypoint::new(name)
    }
}

impl From<&String> for Entrypoint {
    fn from(name: &String) -> Self {
        Entrypoint::new(name)
    }
}

impl From<String> for Entrypoint {
    fn from(name: String) -> Self {
        Entrypoint::new(&name)
    }
}

/// The longest per-job timeout accepted (a year): the overrun warning comes at three
/// times it, which must stay a reachable instant.
const MAX_JOB_TIMEOUT: Duration = Duration::from_secs(365 * 86_400);

/// A registered entrypoint: its handler and options.
pub(crate) struct Registered {
    pub(crate) handler: Handler,
    pub(crate) options: Entrypoint,
    /// Its position in registration order (where the worker's stats keep its figures).
    pub(crate) index: usize,
}

/// Entrypoints by name, in registration order.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) order: Vec<String>,
    pub(crate) by_name: FastMap<String, Registered>,
}

impl Registry {
    pub(crate) fn add(&mut self, options: Entrypoint, handler: Handler) -> Result<()> {
        let name = options.name.clone();
        check_entrypoint("entrypoint", &name)?;
        if self.by_name.contains_key(&name) {
            return Err(Error::invalid(
                "entrypoint",
                format!("{name:?} is registered twice"),
            ));
        }
        if let Some(policy) = &options.retry {
            policy.validate(&name)?;
        }
        check_windows(&name, &options.rate_limits)?;
        if let Some(timeout) = options.timeout {
            check_duration(
                &format!("timeout of {name:?}"),
                timeout,
                Duration::from_millis(1),
                MAX_JOB_TIMEOUT,
            )?;
        }
        let index = self.order.len();
        self.order.push(name.clone());
        self.by_name.insert(
            name,
            Registered {
                handler,
                options,
                index,
            },
        );
        Ok(())
    }

    /// (name, limit) pairs for the claim statement.
    pub(crate) fn limits(&self) -> Vec<(String, i64)> {
        self.order
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    i64::from(self.by_name[n].options.concurrency_limit),
                )
            })
            .collect()
    }
}

/// What a handler can see besides its job.
pub struct Context<'a> {
    pub(crate) job_id: JobId,
    pub(crate) stop: &'a Stop,
    pub(crate) resources: Option<&'a (dyn Any + Send + Sync)>,
    pub(crate) worker_id: Uuid,
    /// When this worker picked the job (the row's `updated`, set by every pick).
    pub(crate) picked_at: SystemTime,
}

impl Context<'_> {
    /// True once the handler should stop: the job was cancelled (its row deleted by
    /// `cancel`, which a `cancellation_event` announces and the worker confirms against
    /// the database), the entrypoint's [timeout](Entrypoint::timeout) passed, or
    /// the worker's [shutdown deadline](crate::WorkerBuilder::shutdown_deadline) did. A
    /// long handler should check it and return early.
    ///
    /// What the handler then returns decides the job's outcome, but for a cancelled job,
    /// whose row is gone already (it is logged `canceled` by whoever cancelled it). After
    /// a timeout the job is recorded as failed. After the shutdown deadline the outcome
    /// is the one returned: return `Ok(())` only if the work is done, and an error or
    /// [`Retry`] if it must run again ([`Context::shutting_down`] tells this case apart).
    pub fn is_cancelled(&self) -> bool {
        self.stop.should_stop()
    }

    /// True once the entrypoint's [timeout](Entrypoint::timeout) has passed.
    pub fn timed_out(&self) -> bool {
        self.stop.is_timed_out()
    }

    /// True once the worker's shutdown deadline has passed while this handler runs: the
    /// worker wants to stop, and the job is not cancelled. Return `Err(Retry::after(..))`
    /// to run it again elsewhere, or finish and return `Ok(())`; a handler that does not
    /// return keeps its job picked (heartbeats go on) until it does.
    pub fn shutting_down(&self) -> bool {
        self.stop.is_shut_down()
    }

    /// The shared resources given to [`crate::WorkerBuilder::resources`], if they are a `T`.
    pub fn resource<T: Any>(&self) -> Option<&T> {
        self.resources.and_then(|r| r.downcast_ref::<T>())
    }

    /// The running job's id.
    pub fn job_id(&self) -> JobId {
        self.job_id
    }

    /// This worker's id (`queue_manager_id`).
    pub fn worker_id(&self) -> Uuid {
        self.worker_id
    }

    /// The token that fences this run of the job: the job, this worker and the time of
    /// this pick. It stays the same for the whole run (heartbeats do not change it) and
    /// changes whenever the job is picked again, by any worker (after this worker was
    /// presumed dead, say). See [`FencingToken`] for the pattern.
    pub fn fencing_token(&self) -> FencingToken {
        FencingToken {
            job_id: self.job_id,
            worker_id: self.worker_id,
            picked_at: self.picked_at,
        }
    }
}

/// Identifies one run of a job, so that a downstream write can be made safe against a
/// worker that was presumed dead and whose job was picked again meanwhile (at-least-once
/// execution means two runs may overlap).
///
/// Store the token with what a run writes, and refuse a write whose token is older than
/// the stored one for the same job: `picked_at` grows with every pick, since a job is
/// picked again only after its previous pick's heartbeat went stale. In SQL, for a table
/// of results keyed by job:
///
/// ```sql
/// INSERT INTO results (job_id, picked_at, worker_id, value) VALUES ($1, $2, $3, $4)
/// ON CONFLICT (job_id) DO UPDATE SET picked_at = EXCLUDED.picked_at,
///     worker_id = EXCLUDED.worker_id, value = EXCLUDED.value
///  WHERE results.picked_at <= EXCLUDED.picked_at;
/// ```
///
/// The queue row's `updated` column holds the `picked_at` of the current pick while the
/// job is picked, so a run can also check that it is still the current one
/// (`SELECT updated = $picked_at AND queue_manager_id = $worker FROM pgqueuer WHERE id = $job`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken {
    /// The job.
    pub job_id: JobId,
    /// The worker that runs it (`queue_manager_id`).
    pub worker_id: Uuid,
    /// When this worker picked it: the row's `updated`, which every pick sets and a
    /// heartbeat does not.
    pub picked_at: SystemTime,
}

impl fmt::Display for FencingToken {
    /// `job:worker:microseconds since 1970`, e.g. `42:6f0c…:1764577200123456`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self
            .picked_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        write!(f, "{}:{}:{micros}", self.job_id, self.worker_id)
    }
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("job_id", &self.job_id)
            .field("cancelled", &self.is_cancelled())
            .field("timed_out", &self.timed_out())
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_convert_with_their_type_name() {
        let parse: std::result::Result<i32, _> = "x".parse::<i32>();
        let err: JobError = parse.unwrap_err().into();
        match err {
            JobError::Failed { type_name, error } => {
                assert_eq!(type_name, "ParseIntError");
                assert!(error.to_string().contains("invalid digit"));
            }
            JobError::Retry(_) => panic!("not a retry"),
        }
        for text in [
            JobError::from("plain text"),
            JobError::from(String::from("owned text")),
            JobError::from(BoxError::from("boxed")),
        ] {
            assert!(
                matches!(
                    text,
                    JobError::Failed {
                        type_name: "Error",
                        ..
                    }
                ),
                "{text:?}"
            );
        }
        assert!(matches!(
            JobError::from(Retry::after(Duration::from_secs(1))),
            JobError::Retry(_)
        ));
    }

    #[test]
    fn names_postgres_cannot_store_are_rejected() {
        let handler: Handler = Arc::new(|_job: &Job, _ctx: &Context<'_>| Ok(()));
        let mut registry = Registry::default();
        let err = registry
            .add(Entrypoint::new("a\0b"), handler.clone())
            .unwrap_err();
        assert!(err.to_string().contains("NUL"), "{err}");
        assert!(registry.order.is_empty());
        registry.add(Entrypoint::new("a"), handler).unwrap();
    }

    #[test]
    fn retry_delays_grow_and_stop() {
        let p =
            RetryPolicy::exponential(3, Duration::from_secs(1), Duration::from_secs(3)).jitter(0.0);
        assert_eq!(p.delay_for(0, 0.5), Some(Duration::from_secs(1)));
        assert_eq!(p.delay_for(1, 0.5), Some(Duration::from_secs(2)));
        assert_eq!(p.delay_for(2, 0.5), Some(Duration::from_secs(3)), "capped");
        assert_eq!(p.delay_for(3, 0.5), None, "final");
        let j = p.jitter(0.5);
        let low = j.delay_for(0, 0.0).unwrap();
        let high = j.delay_for(0, 0.999).unwrap();
        assert!(low < Duration::from_secs(1) && high > Duration::from_secs(1));
    }

    #[test]
    fn bad_policies_and_names_are_rejected() {
        let handler: Handler = Arc::new(|_, _| Ok(()));
        let mut r = Registry::default();
        r.add(Entrypoint::new("a"), handler.clone()).unwrap();
        assert!(r.add(Entrypoint::new("a"), handler.clone()).is_err());
        assert!(r.add(Entrypoint::new(""), handler.clone()).is_err());
        let bad = RetryPolicy {
            multiplier: 0.5,
            ..RetryPolicy::default()
        };
        let err = r.add(Entrypoint::new("b").retry(bad), handler).unwrap_err();
        assert!(err.to_string().contains("multiplier"), "{err}");
    }
}
