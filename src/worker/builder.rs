//! [`WorkerBuilder`]: every worker default in one place, checked once at `build()`.
//!
//! What the claim statement needs (entrypoints and their limits, the worker id, the
//! heartbeat timeout, the per-worker budget, the object names) goes into a
//! [`ClaimerBuilder`], whose own defaults and checks serve the worker unchanged; the rest
//! is the worker's own ([`Options`]).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::claim::{Claimer, ClaimerBuilder};
use crate::connect::Pool;
use crate::error::{Error, Result};
use crate::job::Job;
use crate::settings::Settings;
use crate::shutdown::ShutdownHandle;
use crate::time::check_duration;

use super::Worker;
use super::entrypoint::{Context, Entrypoint, Handler, HandlerResult, Registry};
use super::limits::LimitWatch;
use super::stats::Stats;

/// Pool connections a worker with a second claim lane needs (see [`MAX_LANES`]). A worker
/// takes only its claims' connections from the pool (one, which any pool has): heartbeats
/// and outcomes have a connection each of their own, and so has the listener, all
/// outside the pool, so that handlers that hold or wait for pool connections cannot keep
/// a worker's jobs from their heartbeats (another worker would take them as stale and run
/// them again) or its outcomes from being written.
const TWO_LANE_POOL: u32 = 4;

/// Claims a worker has in flight at once when its pool has room for a second claim
/// connection (each runs on a claim lane of its own, see `dispatcher`).
const MAX_LANES: u32 = 2;

/// Most threads a worker starts (each is a real OS thread).
pub(crate) const MAX_THREADS: usize = 4096;
/// Most jobs one claim takes.
pub(crate) const MAX_BATCH_SIZE: usize = 10_000;
/// Shortest wait a duration option may give.
const MIN_WAIT: Duration = Duration::from_millis(1);
/// Longest `dequeue_timeout` and `poll_interval`: a worker looks at its table at least
/// once a day.
const MAX_POLL: Duration = Duration::from_secs(86_400);
/// Longest `heartbeat_timeout`: a dead worker's jobs wait at most a week for rescue.
const MAX_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(7 * 86_400);
/// Longest `shutdown_deadline`.
const MAX_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(365 * 86_400);

/// The worker's own settings, beside the claimer's.
#[derive(Debug, Clone)]
struct Options {
    threads: usize,
    batch_size: usize,
    dequeue_timeout: Duration,
    poll_interval: Duration,
    shutdown_deadline: Option<Duration>,
    reuse_slots: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            // Equal to the batch size, so that a default claim can take a full batch.
            threads: 10,
            batch_size: 10,
            dequeue_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            shutdown_deadline: None,
            reuse_slots: true,
        }
    }
}

impl Options {
    /// Every number and duration within its range (see the constants above), so that no
    /// arithmetic of the worker's threads can overflow.
    fn check(&self) -> Result<()> {
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(Error::invalid(
                "threads",
                format!(
                    "{} is outside the allowed range 1 to {MAX_THREADS}",
                    self.threads
                ),
            ));
        }
        if !(1..=MAX_BATCH_SIZE).contains(&self.batch_size) {
            return Err(Error::invalid(
                "batch_size",
                format!(
                    "{} is outside the allowed range 1 to {MAX_BATCH_SIZE}",
                    self.batch_size
                ),
            ));
        }
        check_duration("dequeue_timeout", self.dequeue_timeout, MIN_WAIT, MAX_POLL)?;
        check_duration("poll_interval", self.poll_interval, MIN_WAIT, MAX_POLL)?;
        if let Some(deadline) = self.shutdown_deadline {
            check_duration(
                "shutdown_deadline",
                deadline,
                Duration::ZERO,
                MAX_SHUTDOWN_DEADLINE,
            )?;
        }
        Ok(())
    }
}

/// Builds a [`Worker`]. Every default is PgQueuer's where PgQueuer has one.
///
/// ```no_run
/// # fn main() -> Result<(), pgqueuer::Error> {
/// use std::time::Duration;
/// use pgqueuer::{Entrypoint, OnFailure, RetryPolicy, Worker};
///
/// let pool = pgqueuer::connect("")?; // PGQUEUER_DSN, PGDSN, DATABASE_URL or PG*
/// let worker = Worker::builder(pool)
///     .threads(16) // at most 16 jobs at once
///     .batch_size(16) // each claim takes up to 16
///     .heartbeat_timeout(Duration::from_secs(30))
///     .entrypoint("email", |_job, _ctx| Ok(()))
///     .entrypoint(
///         Entrypoint::new("pdf")
///             .concurrency_limit(4)
///             .on_failure(OnFailure::Hold)
///             .retry(RetryPolicy::exponential(5, Duration::from_secs(1), Duration::from_secs(300))),
///         |_job, ctx| {
///             if ctx.is_cancelled() {
///                 return Ok(());
///             }
///             Ok(())
///         },
///     )
///     .build()?;
/// # let _ = worker;
/// # Ok(())
/// # }
/// ```
pub struct WorkerBuilder {
    pool: Pool,
    claimer: ClaimerBuilder,
    options: Options,
    resources: Option<Arc<dyn Any + Send + Sync>>,
    registry: Registry,
    /// The first bad entrypoint registration, reported by `build()`.
    error: Option<Error>,
}

impl WorkerBuilder {
    pub(crate) fn new(pool: Pool) -> WorkerBuilder {
        WorkerBuilder {
            pool,
            claimer: Claimer::builder(),
            options: Options::default(),
            resources: None,
            registry: Registry::default(),
            error: None,
        }
    }

    /// Executor threads, each running one job at a time: the most jobs this worker runs
    /// at once. Defaults to 10, the default [`WorkerBuilder::batch_size`], so that a claim
    /// can take a full batch: a claim takes no more jobs than there are idle threads
    /// (plus, without limits and while handlers are short, one batch ahead: see
    /// [`WorkerBuilder::batch_size`]).
    ///
    /// Threads are cheap (the worker holds a fixed few pool connections whatever their
    /// number). The worker starts one thread more than this, so that one can claim while
    /// `threads` run jobs; which thread claims changes, the most jobs run at once does
    /// not. PgQueuer's `batch_size` with N consumers maps to `threads(N * batch)` and
    /// `batch_size(batch)`: each of its jobs runs as a task of its own. Accepts 1 to
    /// 4,096.
    #[must_use]
    pub fn threads(mut self, threads: usize) -> Self {
        self.options.threads = threads;
        self
    }

    /// Most jobs one claim takes; a claim takes no more than there are idle threads, so a
    /// batch size above [`WorkerBuilder::threads`] cannot be reached (`build()` logs a
    /// warning). Defaults to 10, as PgQueuer's.
    ///
    /// A worker whose entrypoints have no concurrency limit also claims one batch ahead
    /// of its threads while its handlers are short (a running average under 1 ms): the
    /// next batch is claimed, and its commit paid, while the current one runs, and its
    /// jobs wait in the worker for a thread, about one short job's run. Such jobs are
    /// held like running ones (heartbeats, cancellation) and go back to the queue at
    /// shutdown. Where a limit is at stake, or handlers take longer, the worker owns only the jobs its
    /// threads run, so that idle threads of other workers are not kept waiting. Accepts
    /// 1 to 10,000.
    #[must_use]
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.options.batch_size = batch_size;
        self
    }

    /// A picked job whose heartbeat is older than this may be re-picked by any worker;
    /// this worker refreshes its jobs every half of it. Use the same value as every other
    /// worker of the queue. Defaults to 30 s, as PgQueuer's. Accepts 1 ms to 7 days.
    #[must_use]
    pub fn heartbeat_timeout(mut self, timeout: Duration) -> Self {
        self.claimer = self.claimer.heartbeat_timeout(timeout);
        self
    }

    /// Longest the worker waits without a notification before it looks at the table
    /// again (the fallback when a NOTIFY is lost). It is shortened to the due time of the
    /// next deferred job. Defaults to 30 s, as PgQueuer's. Accepts 1 ms to 1 day.
    #[must_use]
    pub fn dequeue_timeout(mut self, timeout: Duration) -> Self {
        self.options.dequeue_timeout = timeout;
        self
    }

    /// How often a worker that cannot LISTEN looks at the table: through a transaction
    /// pooler ([`crate::Pooler::Transaction`]) without a `listen_dsn`, no notification
    /// arrives, so new jobs are found by this poll (and a cancelled job's handler learns
    /// of it at its next heartbeat). Defaults to 1 s. Unused when the worker LISTENs.
    /// Accepts 1 ms to 1 day.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.options.poll_interval = interval;
        self
    }

    /// At most this many jobs owned by this worker at once, enforced in the claim
    /// statement (PgQueuer's `max_concurrent_tasks`). Defaults to no limit beyond the
    /// thread count.
    #[must_use]
    pub fn max_concurrent_tasks(mut self, n: u32) -> Self {
        self.claimer = self.claimer.max_concurrent_tasks(n);
        self
    }

    /// After a shutdown request, how long running handlers may go on before
    /// [`Context::is_cancelled`] (and [`Context::shutting_down`]) turns true for them.
    /// Defaults to none (wait for them).
    ///
    /// Shutdown never loses a job. Jobs claimed and not started go back to the queue at
    /// once (a `queued` log row, no attempt counted). A handler that returns, before or
    /// after the deadline, gets the outcome it returned. A handler that does not return
    /// keeps its job picked, with heartbeats, and `run()` waits for it: if the process is
    /// killed meanwhile, the job goes stale and any worker re-picks it after
    /// [`WorkerBuilder::heartbeat_timeout`]. Accepts 0 to 365 days.
    #[must_use]
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.options.shutdown_deadline = Some(deadline);
        self
    }

    /// Whether a concurrency slot of a limited entrypoint goes straight to this worker's
    /// next job of it when a job finishes, where the limit is no larger than the thread
    /// count (so slots, not threads, bound the rate). Defaults to true: one statement and
    /// one commit end the finished job and claim the next, with the freed slot
    /// ([`crate::Claimer::complete_and_claim`]). The slot is then never free in between,
    /// so while this worker has jobs of the entrypoint to run and threads to run them,
    /// other workers (Python ones included) get none of its slots. With `false` the
    /// finished job's row is written first and its slot is free to every worker, at the
    /// price of a second commit per job.
    #[must_use]
    pub fn reuse_slots(mut self, reuse: bool) -> Self {
        self.options.reuse_slots = reuse;
        self
    }

    /// Object names. Defaults to PgQueuer's ([`Settings::default`]).
    #[must_use]
    pub fn settings(mut self, settings: &Settings) -> Self {
        self.claimer = self.claimer.settings(settings);
        self
    }

    /// A value every handler can borrow through [`Context::resource`].
    #[must_use]
    pub fn resources<T: Any + Send + Sync>(mut self, resources: T) -> Self {
        self.resources = Some(Arc::new(resources));
        self
    }

    /// Runs `handler` for jobs of `entrypoint`: a name (`"email"`, with the default
    /// options) or an [`Entrypoint`] with options of its own.
    #[must_use]
    pub fn entrypoint<F>(mut self, entrypoint: impl Into<Entrypoint>, handler: F) -> Self
    where
        F: Fn(&Job, &Context<'_>) -> HandlerResult + Send + Sync + 'static,
    {
        let options = entrypoint.into();
        let (name, limit) = (options.name.clone(), options.concurrency_limit);
        let rates = options.rate_limits.clone();
        let handler: Handler = Arc::new(handler);
        match self.registry.add(options, handler) {
            Ok(()) => {
                self.claimer = self.claimer.entrypoint(&name, limit);
                for rate in rates {
                    self.claimer = self.claimer.rate_limit(&name, rate);
                }
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Checks the options and the database schema.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad option (no entrypoint, a repeated or empty
    /// entrypoint name or one with a NUL character, a number or duration outside its
    /// range, which the error names, a zero budget); [`Error::Schema`] when the
    /// database lacks an object the worker needs, such as the concurrency-slot column or
    /// index (run `upgrade()` first); [`Error::Pool`] or [`Error::Db`] when the schema
    /// cannot be checked.
    pub fn build(self) -> Result<Worker> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let o = self.options;
        o.check()?;
        check_duration(
            "heartbeat_timeout",
            self.claimer.heartbeat_timeout_ref(),
            MIN_WAIT,
            MAX_HEARTBEAT_TIMEOUT,
        )?;
        let settings = self.claimer.settings_ref().clone();
        let claimer = self.claimer.build()?;
        if o.batch_size > o.threads {
            log::warn!(
                "pgqueuer worker: batch_size({}) is larger than threads({}); a claim takes \
                 at most one job per idle thread, so batches stay at {}: raise threads to \
                 run more jobs at once",
                o.batch_size,
                o.threads,
                o.threads
            );
        }
        let mut conn = self.pool.get()?;
        crate::schema::verify_with(&mut conn, &settings)?;
        if claimer.is_rate_limited() {
            crate::schema::verify_rates(conn.client(), &settings)?;
            claimer.provision_rate_limits(conn.client())?;
        }
        // Where the listener connects: a connection like the pool's, or, through a
        // transaction pooler, the listen DSN; without one the worker polls.
        let (listen, poll_interval) = match conn.listen_target() {
            Some(listen) => (Some(listen), None),
            None => {
                super::warning::warn_always(format_args!(
                    "worker: the pool goes through a transaction pooler, where \
                     LISTEN cannot work, and no listen_dsn is set (ConnectOptions::listen_dsn, \
                     PGQUEUER_LISTEN_DSN): polling every {:?} instead",
                    o.poll_interval
                ));
                (None, Some(o.poll_interval))
            }
        };
        let heartbeat_conn = conn.sibling("heartbeat");
        let complete_conn = conn.sibling("complete");
        drop(conn);
        // A second claim in flight where the pool has room for it beside a handler's
        // connection. With limits it claims only while they are far from binding, and
        // its search for free slots starts half the limit away from the first lane's, so
        // that the two take different slots.
        let lanes = if self.pool.max_size() >= TWO_LANE_POOL {
            usize::try_from(MAX_LANES).unwrap_or(1)
        } else {
            1
        };
        // A batch may be claimed ahead where no slot is at stake: always without limits,
        // with them only while they are far from binding (see `relax_margin`).
        let claim_ahead = o.batch_size;
        // What this worker may hold beyond the slots in use when it claims relaxed: its
        // threads' jobs, a batch ahead and a batch per lane in flight.
        let relax_margin =
            i64::try_from(o.threads + (lanes + 1) * o.batch_size).unwrap_or(i64::MAX);
        // Rates likewise: far from binding while every window has that many rested units.
        let claimer = claimer.with_plenty_at(relax_margin);
        let slots_scarce =
            self.registry.limits().iter().any(|(_, limit)| {
                *limit > 0 && usize::try_from(*limit).is_ok_and(|l| l <= o.threads)
            });
        let stats = Arc::new(Stats::new(&self.registry));
        let limits = Arc::new(LimitWatch::new(&self.registry, &claimer));
        Ok(Worker {
            stats,
            limits,
            config: Arc::new(WorkerConfig {
                pool: self.pool,
                heartbeat_conn,
                complete_conn,
                listen,
                poll_interval,
                settings,
                claimer,
                registry: self.registry,
                threads: o.threads,
                batch_size: o.batch_size,
                lanes,
                claim_ahead,
                relax_margin,
                slots_scarce,
                fold_outcomes: slots_scarce && o.reuse_slots,
                dequeue_timeout: o.dequeue_timeout,
                shutdown_deadline: o.shutdown_deadline,
                resources: self.resources,
            }),
            shutdown: ShutdownHandle::new().0,
        })
    }
}

/// Everything a worker's run needs that `build()` fixed.
pub(crate) struct WorkerConfig {
    pub(crate) pool: Pool,
    /// Opens the heartbeat thread's connection, outside the pool.
    pub(crate) heartbeat_conn: crate::connect::Manager,
    /// Opens the completer's connection, outside the pool.
    pub(crate) complete_conn: crate::connect::Manager,
    /// Where the listener connects (`None`: it cannot, the dispatcher polls).
    pub(crate) listen: Option<crate::connect::Target>,
    /// Set when the worker polls instead of listening: the longest wait between looks.
    pub(crate) poll_interval: Option<Duration>,
    pub(crate) settings: Settings,
    pub(crate) claimer: Claimer,
    pub(crate) registry: Registry,
    pub(crate) threads: usize,
    pub(crate) batch_size: usize,
    /// Claim lanes (1 or 2): claims in flight at once.
    pub(crate) lanes: usize,
    /// Jobs a claim may take beyond idle threads while handlers are short and no limit
    /// binds (see `room::Room`): one batch.
    pub(crate) claim_ahead: usize,
    /// A worker with limits claims as an unlimited one (ahead, on every lane) while each
    /// limit has this many slots to spare beyond those in use fleet-wide at the last
    /// claim; nearer, it claims for free threads only, on one lane.
    pub(crate) relax_margin: i64,
    /// Some entrypoint's concurrency limit is no larger than the thread count, so its
    /// slots, not the threads, bound how fast its jobs run: outcomes are written sooner,
    /// and each write wakes the dispatcher.
    pub(crate) slots_scarce: bool,
    /// Slots are scarce and reused ([`WorkerBuilder::reuse_slots`]): claims take finished
    /// jobs' outcomes along and hand their slots to new jobs.
    pub(crate) fold_outcomes: bool,
    pub(crate) dequeue_timeout: Duration,
    pub(crate) shutdown_deadline: Option<Duration>,
    pub(crate) resources: Option<Arc<dyn Any + Send + Sync>>,
}

impl WorkerConfig {
    /// How often owned jobs get a heartbeat: half the timeout, as PgQueuer does.
    pub(crate) fn heartbeat_interval(&self) -> Duration {
        self.claimer.heartbeat_timeout() / 2
    }
}
