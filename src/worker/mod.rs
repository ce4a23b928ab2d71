//! The worker: a fixed pool of executor threads claiming and running jobs, woken by a
//! dedicated LISTEN connection, with batched heartbeats and completions.

mod completer;
mod entrypoint;
mod executor;
mod heartbeat;
mod listener;

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use uuid::Uuid;

pub use entrypoint::{
    BoxError, Context, EntrypointOptions, HandlerResult, JobError, OnFailure, Retry, RetryPolicy,
};

use crate::claim::{Claimer, Statements};
use crate::connect::{Pool, PooledConn};
use crate::error::{Error, Result};
use crate::job::{Job, JobId};
use crate::settings::Settings;
use crate::shutdown::ShutdownHandle;
use entrypoint::{Handler, Registry};

/// Pool connections a worker needs: one for claims, the heartbeat thread's and the
/// completer's (the listener opens its own, outside the pool).
const POOL_CONNECTIONS: u32 = 3;

/// Claims a worker has in flight at once when its pool has room for a second claim
/// connection (each claim runs on its own).
const MAX_CLAIMERS: u32 = 2;

/// Builds a [`Worker`]. Every default is PgQueuer's where PgQueuer has one.
///
/// ```no_run
/// # fn main() -> Result<(), pgqueuer::Error> {
/// use std::time::Duration;
/// use pgqueuer::{EntrypointOptions, OnFailure, RetryPolicy, Worker};
///
/// let pool = pgqueuer::connect("")?; // PGQUEUER_DSN, PGDSN, DATABASE_URL or PG*
/// let worker = Worker::builder(pool)
///     .threads(16) // at most 16 jobs at once
///     .batch_size(16) // each claim takes up to 16 (never more than idle threads)
///     .heartbeat_timeout(Duration::from_secs(30))
///     .entrypoint("email", |_job, _ctx| Ok(()))
///     .entrypoint_with(
///         "pdf",
///         EntrypointOptions::new()
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
    settings: Settings,
    threads: usize,
    batch_size: usize,
    heartbeat_timeout: Duration,
    dequeue_timeout: Duration,
    max_concurrent_tasks: Option<u32>,
    shutdown_deadline: Option<Duration>,
    reuse_seats: bool,
    resources: Option<Arc<dyn Any + Send + Sync>>,
    registry: Registry,
    errors: Vec<Error>,
}

impl WorkerBuilder {
    /// Executor threads, each running one job at a time: the most jobs this worker runs
    /// at once. Defaults to 10, the default [`WorkerBuilder::batch_size`], so that a claim
    /// can take a full batch: a claim never takes more jobs than there are idle threads.
    ///
    /// Threads are cheap (the worker holds a fixed few pool connections whatever their
    /// number). PgQueuer's `batch_size` with N consumers maps to `threads(N * batch)`
    /// and `batch_size(batch)`: each of its jobs runs as a task of its own.
    #[must_use]
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Most jobs one claim takes; a claim never takes more than there are idle threads,
    /// so a batch size above [`WorkerBuilder::threads`] cannot be reached (`build()` logs
    /// a warning). Defaults to 10, as PgQueuer's.
    #[must_use]
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// A picked job whose heartbeat is older than this may be re-picked by any worker;
    /// this worker refreshes its jobs every half of it. Use the same value as every other
    /// worker of the queue. Defaults to 30 s.
    #[must_use]
    pub fn heartbeat_timeout(mut self, timeout: Duration) -> Self {
        self.heartbeat_timeout = timeout;
        self
    }

    /// Longest an idle thread waits without a notification before polling the table
    /// (the fallback when NOTIFY is lost). Defaults to 30 s.
    #[must_use]
    pub fn dequeue_timeout(mut self, timeout: Duration) -> Self {
        self.dequeue_timeout = timeout;
        self
    }

    /// At most this many jobs held by this worker at once, enforced in the claim
    /// statement (PgQueuer's `max_concurrent_tasks`). Defaults to no limit beyond the
    /// thread count.
    #[must_use]
    pub fn max_concurrent_tasks(mut self, n: u32) -> Self {
        self.max_concurrent_tasks = Some(n);
        self
    }

    /// After a shutdown request, how long running handlers may go on before
    /// [`Context::is_cancelled`] turns true for them. Defaults to none (wait for them).
    #[must_use]
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.shutdown_deadline = Some(deadline);
        self
    }

    /// Whether a seat of a limited entrypoint goes straight to this worker's next job of
    /// it when a job finishes, where the limit is no larger than the thread count (so
    /// seats, not threads, bound the rate). Defaults to true: one statement and one
    /// commit end the finished job and claim the next, with the freed seat
    /// ([`crate::Claimer::complete_and_claim`]). The seat is then never free in between,
    /// so while this worker has jobs of the entrypoint to run and threads to run them,
    /// other workers (Python ones included) get none of its seats. With `false` the
    /// finished job's row is written first and its seat is free to every worker, at the
    /// price of a second commit per job (the limit-10 benchmark flow ran at about
    /// two thirds of the rate).
    #[must_use]
    pub fn reuse_seats(mut self, reuse: bool) -> Self {
        self.reuse_seats = reuse;
        self
    }

    /// Object names. Defaults to PgQueuer's ([`Settings::default`]).
    #[must_use]
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// A value every handler can borrow through [`Context::resource`].
    #[must_use]
    pub fn resources<T: Any + Send + Sync>(mut self, resources: T) -> Self {
        self.resources = Some(Arc::new(resources));
        self
    }

    /// Runs `handler` for jobs of `name`, with default options.
    #[must_use]
    pub fn entrypoint<F>(self, name: &str, handler: F) -> Self
    where
        F: Fn(&Job, &Context<'_>) -> HandlerResult + Send + Sync + 'static,
    {
        self.entrypoint_with(name, EntrypointOptions::new(), handler)
    }

    /// Runs `handler` for jobs of `name`, with `options`.
    #[must_use]
    pub fn entrypoint_with<F>(mut self, name: &str, options: EntrypointOptions, handler: F) -> Self
    where
        F: Fn(&Job, &Context<'_>) -> HandlerResult + Send + Sync + 'static,
    {
        let handler: Handler = Arc::new(handler);
        if let Err(e) = self.registry.add(name.to_owned(), options, handler) {
            self.errors.push(e);
        }
        self
    }

    /// Checks the options and the database schema.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad option (no entrypoint, a repeated entrypoint, an
    /// entrypoint name with a NUL character, zero threads or batch size, a zero timeout, a pool too small for the threads);
    /// [`Error::Schema`] when the database lacks an object the worker needs, such as the
    /// capacity-slot column or index (run `upgrade()` first); [`Error::Pool`] or
    /// [`Error::Db`] when the schema cannot be checked.
    pub fn build(mut self) -> Result<Worker> {
        if let Some(e) = self.errors.drain(..).next() {
            return Err(e);
        }
        if self.registry.order.is_empty() {
            return Err(Error::invalid(
                "entrypoints",
                "a worker needs at least one entrypoint",
            ));
        }
        if self.threads == 0 {
            return Err(Error::invalid(
                "threads",
                "a worker needs at least one thread",
            ));
        }
        if self.batch_size == 0 {
            return Err(Error::invalid("batch_size", "must be at least 1"));
        }
        for (name, value) in [
            ("heartbeat_timeout", self.heartbeat_timeout),
            ("dequeue_timeout", self.dequeue_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::invalid(name, "must be positive"));
            }
        }
        if self.batch_size > self.threads {
            log::warn!(
                "pgqueuer worker: batch_size({}) is larger than threads({}); a claim takes \
                 at most one job per idle thread, so batches stay at {}: raise threads to \
                 run more jobs at once",
                self.batch_size,
                self.threads,
                self.threads
            );
        }
        if self.max_concurrent_tasks == Some(0) {
            return Err(Error::invalid("max_concurrent_tasks", "must be at least 1"));
        }
        if self.pool.max_size() < POOL_CONNECTIONS {
            return Err(Error::invalid(
                "pool",
                format!(
                    "the pool holds at most {} connections; a worker needs {POOL_CONNECTIONS} \
                     (claims, heartbeats, completions), plus any its handlers take",
                    self.pool.max_size()
                ),
            ));
        }
        let mut conn = self.pool.get()?;
        crate::schema::verify_with(&mut conn, &self.settings)?;
        let config = conn.config().clone();
        drop(conn);
        let statements = Arc::new(Statements::new(&self.settings)?);
        let timeout_us = i64::try_from(self.heartbeat_timeout.as_micros()).unwrap_or(i64::MAX);
        let worker_id = Uuid::new_v4();
        let limits = self.registry.limits();
        let claimer = Claimer::from_parts(
            statements,
            &limits,
            worker_id,
            self.max_concurrent_tasks.map(i64::from),
            timeout_us,
        );
        // Two claims of a limited entrypoint in flight at once would compute the same free
        // seats and one would lose the race on the seat index nearly every time.
        let claimers = if claimer.is_capacity_gated() {
            1
        } else {
            usize::try_from((self.pool.max_size() - POOL_CONNECTIONS + 1).min(MAX_CLAIMERS))
                .unwrap_or(1)
        };
        let seats_scarce = limits.iter().any(|(_, limit)| {
            *limit > 0 && usize::try_from(*limit).is_ok_and(|l| l <= self.threads)
        });
        let ends_ride_claims = seats_scarce && self.reuse_seats;
        Ok(Worker {
            inner: Arc::new(Inner {
                pool: self.pool,
                config,
                settings: self.settings,
                claimer,
                registry: self.registry,
                threads: self.threads,
                claimers,
                seats_scarce,
                ends_ride_claims,
                batch_size: self.batch_size,
                heartbeat_timeout: self.heartbeat_timeout,
                dequeue_timeout: self.dequeue_timeout,
                shutdown_deadline: self.shutdown_deadline,
                resources: self.resources,
            }),
            shutdown: ShutdownHandle::new().0,
        })
    }
}

/// Everything fixed at build time, shared by the threads of a run.
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) config: postgres::Config,
    pub(crate) settings: Settings,
    pub(crate) claimer: Claimer,
    pub(crate) registry: Registry,
    pub(crate) threads: usize,
    /// Claim connections (1 or 2, as the pool allows).
    pub(crate) claimers: usize,
    /// Some entrypoint's concurrency limit is no larger than this worker's thread count,
    /// so its seats, not the threads, bound how fast its jobs run: the completer writes
    /// after a shorter wait and wakes a claimer (see `completer`).
    pub(crate) seats_scarce: bool,
    /// Seats are scarce and may be reused ([`WorkerBuilder::reuse_seats`]): each claim
    /// takes the ends of finished jobs along and hands their seats to new jobs.
    pub(crate) ends_ride_claims: bool,
    pub(crate) batch_size: usize,
    pub(crate) heartbeat_timeout: Duration,
    pub(crate) dequeue_timeout: Duration,
    pub(crate) shutdown_deadline: Option<Duration>,
    pub(crate) resources: Option<Arc<dyn Any + Send + Sync>>,
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Jobs whose handler returned `Ok`.
    pub succeeded: u64,
    /// Jobs that failed for good (`exception` or `failed`).
    pub failed: u64,
    /// Jobs put back in the queue to run again.
    pub retried: u64,
    /// Jobs cancelled while claimed or running.
    pub cancelled: u64,
}

/// Counters behind [`RunSummary`], updated by executor threads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) succeeded: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) cancelled: AtomicU64,
}

impl Counters {
    fn summary(&self) -> RunSummary {
        RunSummary {
            succeeded: self.succeeded.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
        }
    }
}

/// State of one run, shared by its threads.
pub(crate) struct Run {
    pub(crate) inner: Arc<Inner>,
    pub(crate) shutdown: ShutdownHandle,
    /// Drain mode: stop once nothing is queued for our entrypoints and nothing runs.
    pub(crate) drain: bool,
    /// Jobs claimed by this worker whose outcome is not yet written, with their cancel
    /// flags. Executors insert at claim time; the completer (or the claim that took the
    /// job's end along) removes once the row is no longer ours; the heartbeat thread
    /// refreshes every id in it; the listener sets flags on `cancellation_event`.
    pub(crate) running: Mutex<HashMap<JobId, Arc<AtomicBool>>>,
    /// Idle executor threads not reserved by a claim in flight. An executor reserves up
    /// to a batch of these before claiming, so a claim never takes more jobs than there
    /// are threads to start them.
    pub(crate) free: AtomicUsize,
    /// The connections claims run on, and the claim tokens: an executor holding one of
    /// these locks claims for every idle thread not yet reserved, in one statement.
    /// Two claims can be in flight, so one runs while the other waits for its commit,
    /// but the second only while claims come back full batches (`batch_bound`): when
    /// idle threads are what bounds a claim, two would split them and pay two commits
    /// (the 64-thread drain made 0.045 commits per job that way, and 0.025 with one).
    /// Executors need no connection of their own, so a worker holds the same few pool
    /// connections whatever its thread count.
    pub(crate) claim_conns: Vec<Mutex<Option<PooledConn>>>,
    /// Set by the listener on every table change; the claimer clears it before claiming
    /// and claims again if it was set meanwhile (the change may postdate its snapshot).
    pub(crate) changed: AtomicBool,
    /// Until when (microseconds since `epoch`) no claim is worth running unless `changed`
    /// is set: the last claim found nothing more due for this worker (see
    /// `Run::quiet_for`).
    pub(crate) quiet_until: AtomicU64,
    /// The start of the run, for `quiet_until`.
    pub(crate) epoch: Instant,
    /// A wake token for handed-over jobs is on its way to an idle thread (see
    /// `executor::take_handed_over`).
    pub(crate) handoff_wake: AtomicBool,
    /// The last claim took a full batch with idle threads to spare for it: claims are
    /// bounded by the batch size, so a second claim connection is worth using.
    pub(crate) batch_bound: AtomicBool,
    /// Outcomes not yet written, for the completer to write (or, when seats are scarce
    /// and reused, the next claim: see `completer`).
    pub(crate) unwritten: Mutex<completer::Unwritten>,
    /// Counters for the summary.
    pub(crate) counters: Counters,
}

impl Run {
    /// Reserves up to `want` idle threads (the caller's own included); 0 when every idle
    /// thread is already promised a handed-over job.
    pub(crate) fn reserve(&self, want: usize) -> usize {
        let mut current = self.free.load(Ordering::SeqCst);
        loop {
            let take = current.min(want);
            if take == 0 {
                return 0;
            }
            match self.free.compare_exchange(
                current,
                current - take,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return take,
                Err(actual) => current = actual,
            }
        }
    }

    /// Returns reserved idle threads that got no job.
    pub(crate) fn release(&self, n: usize) {
        self.free.fetch_add(n, Ordering::SeqCst);
    }

    /// How long claiming stays pointless: `Some` while the last claim found nothing due
    /// for this worker, nothing has changed since (the listener sets `changed` on every
    /// insert or requeue, and on deletes when seats matter), no finished job's end waits
    /// for a claim to take it along, and the wait it chose (the next deferred job, or the
    /// polling interval) has not run out.
    pub(crate) fn quiet_for(&self) -> Option<Duration> {
        // When claims take finished jobs' ends along and reuse their seats, a claim is
        // worth running whenever ends wait.
        if self.changed.load(Ordering::SeqCst)
            || (self.inner.ends_ride_claims && self.ends_waiting())
        {
            return None;
        }
        let until = self.quiet_until.load(Ordering::SeqCst);
        let now = self.micros_since_epoch();
        (until > now).then(|| Duration::from_micros(until - now))
    }

    /// Claims are pointless for `d` from now, unless something changes (zero: claim).
    pub(crate) fn set_quiet(&self, d: Duration) {
        let d = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let until = if d == 0 {
            0
        } else {
            self.micros_since_epoch().saturating_add(d)
        };
        self.quiet_until.store(until, Ordering::SeqCst);
    }

    fn micros_since_epoch(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn running(&self) -> MutexGuard<'_, HashMap<JobId, Arc<AtomicBool>>> {
        lock(&self.running)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.shutdown.is_shutdown()
    }

    /// A pool connection for the claim, completer or heartbeat loop, set to plan with
    /// indexes only ([`crate::Conn::plan_with_indexes`]). The pool closes it when it is
    /// given back rather than hand the setting to another user.
    pub(crate) fn checkout(&self) -> crate::Result<PooledConn> {
        let mut conn = self.inner.pool.get()?;
        conn.plan_with_indexes()?;
        Ok(conn)
    }
}

/// Locks a mutex, recovering from poisoning (a panicking handler never holds one, but a
/// poisoned map is still consistent: every update is a single insert or remove).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A worker: build it with [`Worker::builder`], then [`Worker::run`] it (blocking) or
/// [`Worker::start`] it in the background.
///
/// ```no_run
/// # fn main() -> Result<(), pgqueuer::Error> {
/// use pgqueuer::Worker;
///
/// let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
/// let worker = Worker::builder(pool)
///     .entrypoint("hello", |job, _ctx| {
///         println!("hello {}", job.payload_str().unwrap_or("?"));
///         Ok(())
///     })
///     .build()?;
/// let stop = worker.shutdown_handle();
/// std::thread::spawn(move || {
///     std::thread::sleep(std::time::Duration::from_secs(60));
///     stop.shutdown(); // from a signal handler, another thread, anywhere
/// });
/// let summary = worker.run()?; // blocks until shutdown
/// println!("{} jobs succeeded", summary.succeeded);
/// # Ok(())
/// # }
/// ```
pub struct Worker {
    inner: Arc<Inner>,
    shutdown: ShutdownHandle,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.inner.claimer.worker_id())
            .field("entrypoints", &self.inner.registry.order)
            .field("threads", &self.inner.threads)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A builder using `pool`. The worker holds three of its connections (claims,
    /// heartbeats, completions) whatever the thread count, and a fourth for a second claim
    /// in flight when the pool has four or more; plus one of its own for LISTEN.
    pub fn builder(pool: Pool) -> WorkerBuilder {
        WorkerBuilder {
            pool,
            settings: Settings::default(),
            threads: 10,
            batch_size: 10,
            heartbeat_timeout: Duration::from_secs(30),
            dequeue_timeout: Duration::from_secs(30),
            max_concurrent_tasks: None,
            shutdown_deadline: None,
            reuse_seats: true,
            resources: None,
            registry: Registry::default(),
            errors: Vec::new(),
        }
    }

    /// This worker's id, written to `queue_manager_id` of the jobs it holds.
    pub fn id(&self) -> Uuid {
        self.inner.claimer.worker_id()
    }

    /// A handle that stops this worker from any thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Runs until [`ShutdownHandle::shutdown`]; then stops claiming, lets running
    /// handlers finish, writes every outcome and joins every thread.
    ///
    /// # Errors
    /// [`Error::Worker`] when a thread of the worker itself panicked.
    pub fn run(&self) -> Result<RunSummary> {
        self.run_mode(false)
    }

    /// Runs until nothing is queued for this worker's entrypoints and nothing is running,
    /// then stops as [`Worker::run`] does.
    ///
    /// Deferred jobs count as queued: a job due in an hour keeps this running for an hour
    /// (it waits for the due time, looking again at least every `dequeue_timeout`, and
    /// logs at `info` that it is waiting and how long).
    ///
    /// # Errors
    /// As [`Worker::run`].
    pub fn run_until_empty(&self) -> Result<RunSummary> {
        self.run_mode(true)
    }

    /// Runs in a background thread; the returned handle stops and joins it when dropped.
    ///
    /// # Errors
    /// [`Error::Worker`] when the thread cannot be spawned.
    pub fn start(self) -> Result<RunningWorker> {
        let shutdown = self.shutdown.clone();
        let thread = std::thread::Builder::new()
            .name("pgqueuer-worker".into())
            .spawn(move || self.run())
            .map_err(|e| Error::Worker(format!("cannot spawn the worker thread: {e}")))?;
        Ok(RunningWorker {
            shutdown,
            thread: Some(thread),
        })
    }

    fn run_mode(&self, drain: bool) -> Result<RunSummary> {
        let inner = &self.inner;
        let run = Run {
            inner: inner.clone(),
            shutdown: self.shutdown.clone(),
            drain,
            running: Mutex::new(HashMap::new()),
            free: AtomicUsize::new(inner.threads),
            claim_conns: (0..inner.claimers).map(|_| Mutex::new(None)).collect(),
            changed: AtomicBool::new(false),
            handoff_wake: AtomicBool::new(false),
            batch_bound: AtomicBool::new(false),
            quiet_until: AtomicU64::new(0),
            epoch: Instant::now(),
            unwritten: Mutex::new(completer::Unwritten::default()),
            counters: Counters::default(),
        };
        let (wake_tx, wake_rx) = crossbeam_channel::bounded::<executor::Wake>(inner.threads);
        let (handoff_tx, handoff_rx) = crossbeam_channel::unbounded::<Job>();
        let (outcome_tx, outcome_rx) = crossbeam_channel::bounded::<()>(1);
        // Each executor holds a sender; when all have exited the receivers disconnect,
        // which tells the helper threads that no job can start or finish any more.
        let (alive_tx, alive_rx) = crossbeam_channel::bounded::<()>(0);
        if no_logger() {
            eprintln!(
                "pgqueuer: no logger is installed, so the worker prints job failures here and \
                 nothing else; install one (for example `env_logger::init()`) to see its log"
            );
        }
        log::info!(
            "pgqueuer worker {} starting: {} threads, entrypoints {:?}",
            inner.claimer.worker_id(),
            inner.threads,
            inner.registry.order
        );
        let started = Instant::now();
        let panicked = std::thread::scope(|scope| {
            let run = &run;
            let mut handles = Vec::new();
            for index in 0..inner.threads {
                let channels = executor::Channels {
                    wake_tx: wake_tx.clone(),
                    wake_rx: wake_rx.clone(),
                    handoff_tx: handoff_tx.clone(),
                    handoff_rx: handoff_rx.clone(),
                    outcome_tx: outcome_tx.clone(),
                    _alive: alive_tx.clone(),
                };
                handles.push(spawn_named(
                    scope,
                    format!("pgqueuer-exec-{index}"),
                    move || {
                        executor::run(run, index, &channels);
                    },
                ));
            }
            drop((outcome_tx, alive_tx, handoff_tx));
            {
                let alive_rx = alive_rx.clone();
                let wake_tx = wake_tx.clone();
                handles.push(spawn_named(scope, "pgqueuer-listen".into(), move || {
                    listener::run(run, &wake_tx, &alive_rx);
                }));
            }
            {
                let alive_rx = alive_rx.clone();
                handles.push(spawn_named(scope, "pgqueuer-heartbeat".into(), move || {
                    heartbeat::run(run, &alive_rx);
                }));
            }
            {
                let wake_tx = wake_tx.clone();
                handles.push(spawn_named(scope, "pgqueuer-complete".into(), move || {
                    completer::run(run, &outcome_rx, &wake_tx);
                }));
            }
            drop(wake_tx);
            enforce_deadline(run, &alive_rx);
            handles.into_iter().filter_map(|h| h.join().err()).count()
        });
        let summary = run.counters.summary();
        log::info!(
            "pgqueuer worker {} stopped after {:?}: {summary:?}",
            inner.claimer.worker_id(),
            started.elapsed()
        );
        if panicked > 0 {
            return Err(Error::Worker(format!("{panicked} worker threads panicked")));
        }
        Ok(summary)
    }
}

/// True when no logger is installed: `log`'s max level is `Off`, as it is until a logger
/// is set up (`env_logger::init()` and its kin raise it).
fn no_logger() -> bool {
    log::max_level() == log::LevelFilter::Off
}

/// Logs at `warn`, and with no logger installed prints to stderr as well, as Python's
/// `logging` does with its last-resort handler: a failing handler must never go unseen.
pub(crate) fn warn_always(message: std::fmt::Arguments<'_>) {
    log::warn!("{message}");
    if no_logger() {
        eprintln!("pgqueuer: {message}");
    }
}

/// Waits for shutdown, then, past the deadline, flags every running job as cancelled.
fn enforce_deadline(run: &Run, alive: &Receiver<()>) {
    let _ = run.shutdown.receiver().recv();
    let Some(deadline) = run.inner.shutdown_deadline else {
        return;
    };
    // `alive` disconnects when every executor has exited.
    if let Err(crossbeam_channel::RecvTimeoutError::Timeout) = alive.recv_timeout(deadline) {
        let running = run.running();
        log::warn!(
            "shutdown deadline of {deadline:?} passed with {} jobs still held; asking their handlers to stop",
            running.len()
        );
        for flag in running.values() {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

fn spawn_named<'scope, 'env, F>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: String,
    f: F,
) -> std::thread::ScopedJoinHandle<'scope, ()>
where
    F: FnOnce() + Send + 'scope,
{
    std::thread::Builder::new()
        .name(name)
        .spawn_scoped(scope, f)
        .unwrap_or_else(|e| panic!("cannot spawn a worker thread: {e}"))
}

/// A worker running in a background thread. Dropping it shuts the worker down and waits
/// for it; [`RunningWorker::join`] does the same and returns the outcome.
#[derive(Debug)]
pub struct RunningWorker {
    shutdown: ShutdownHandle,
    thread: Option<std::thread::JoinHandle<Result<RunSummary>>>,
}

impl RunningWorker {
    /// A handle to stop the worker.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Asks the worker to stop and waits until it has.
    ///
    /// # Errors
    /// As [`Worker::run`].
    pub fn join(self) -> Result<RunSummary> {
        self.shutdown.shutdown();
        self.wait()
    }

    /// Waits until the worker stops by itself (drain mode) or is stopped elsewhere.
    ///
    /// # Errors
    /// As [`Worker::run`].
    pub fn wait(mut self) -> Result<RunSummary> {
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(Error::Worker("the worker thread panicked".into())),
            None => Ok(RunSummary::default()),
        }
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shutdown.shutdown();
            if let Ok(Err(e)) = thread.join() {
                log::warn!("pgqueuer worker stopped with an error: {e}");
            }
        }
    }
}
