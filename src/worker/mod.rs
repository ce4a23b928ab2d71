//! The worker: a dispatcher that claims, executors that run, a completer that writes,
//! a listener that wakes the dispatcher and a heartbeat thread; see `ARCHITECTURE.md`.
//!
//! A job flows one way: the **listener** rings the dispatcher's doorbell when the table
//! changes; the **dispatcher** claims as many jobs as executor threads are idle and hands
//! them over; an **executor** runs each and hands its outcome to the **completer**, which
//! writes it (or lets the dispatcher fold it into its next claim); the **heartbeat**
//! thread keeps every owned job fresh meanwhile. The dispatcher's primary lane and the
//! executors share one set of threads (`runner`): whichever thread leads claims, and on
//! an idle worker runs a lone job it claimed itself. The shared pieces are in `state`.

mod alarms;
mod builder;
mod completer;
mod deadlines;
mod dispatcher;
mod doorbell;
mod entrypoint;
mod executor;
mod fast_map;
mod figures;
mod floors;
mod handoff;
mod heartbeat;
mod jitter;
mod ledger;
mod limits;
mod listener;
mod liveness;
mod outcomes;
mod owned;
mod rate_gate;
mod room;
mod runner;
mod stats;
mod warning;

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;
use uuid::Uuid;

pub use builder::WorkerBuilder;
pub use entrypoint::{
    BoxError, Context, Entrypoint, FencingToken, HandlerResult, JobError, OnFailure, Retry,
    RetryPolicy,
};
pub use figures::TimingStats;
pub use limits::{LimitStats, RateStats};
pub use liveness::WorkerHealth;
pub use stats::{EntrypointStats, RunSummary, StatsHandle, WorkerStats};

use crate::connect::Pool;
use crate::error::{Error, Result};
use crate::shutdown::ShutdownHandle;
use builder::WorkerConfig;
use completer::Completer;
use deadlines::Deadlines;
use dispatcher::{Dispatcher, SecondLane};
use doorbell::Doorbell;
use executor::Executor;
use ledger::Ledger;
use limits::LimitWatch;
use runner::Runner;
use stats::Stats;

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
    config: Arc<WorkerConfig>,
    stats: Arc<Stats>,
    limits: Arc<LimitWatch>,
    shutdown: ShutdownHandle,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.config.claimer.worker_id())
            .field("entrypoints", &self.config.registry.order)
            .field("threads", &self.config.threads)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A builder using `pool`. The worker holds three of its connections (claims,
    /// heartbeats, outcomes) whatever the thread count, and a fourth for a second claim in
    /// flight when the pool has four or more (used while claims come back full and no
    /// limit is near binding); plus one of its own for LISTEN.
    pub fn builder(pool: Pool) -> WorkerBuilder {
        WorkerBuilder::new(pool)
    }

    /// This worker's id, written to `queue_manager_id` of the jobs it owns.
    pub fn id(&self) -> Uuid {
        self.config.claimer.worker_id()
    }

    /// A handle that reads this worker's figures from any thread ([`WorkerStats`]).
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            stats: self.stats.clone(),
            limits: self.limits.clone(),
        }
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
        let stats = self.stats_handle();
        let thread = std::thread::Builder::new()
            .name("pgqueuer-worker".into())
            .spawn(move || self.run())
            .map_err(|e| Error::Worker(format!("cannot spawn the worker thread: {e}")))?;
        Ok(RunningWorker {
            shutdown,
            stats,
            thread: Some(thread),
        })
    }

    fn run_mode(&self, drain: bool) -> Result<RunSummary> {
        let config = &*self.config;
        let shutdown = &self.shutdown;
        let doorbell = Doorbell::new();
        let rate_gate = rate_gate::RateGate::default();
        let ledger = Ledger::new(
            config.threads,
            config.claim_ahead,
            !config.claimer.is_capacity_gated(),
            config.fold_outcomes,
        );
        let stats = &*self.stats;
        let limits = &*self.limits;
        let deadlines = config
            .registry
            .by_name
            .values()
            .any(|e| e.options.timeout.is_some())
            .then(Deadlines::default);
        let dispatcher = Dispatcher {
            config,
            doorbell: &doorbell,
            ledger: &ledger,
            limits,
            stats,
            shutdown,
            drain,
            second: SecondLane::default(),
            relaxed: std::sync::atomic::AtomicBool::new(!config.claimer.is_capacity_gated()),
            // Apart from other workers' searches (each worker's id is random).
            slot_shift: (config.claimer.worker_id().as_u128() >> 75) as f64 / (1u64 << 53) as f64,
            count_clock: dispatcher::CountClock::default(),
            fatal: std::sync::Mutex::new(None),
            parked_lead: std::sync::Mutex::new(None),
            rate_gate: &rate_gate,
        };
        let executor = Executor {
            rate_gate: &rate_gate,
            config,
            ledger: &ledger,
            doorbell: &doorbell,
            stats,
            deadlines: deadlines.as_ref(),
            shutdown,
        };
        // Each lane holds a sender: the threads learn from the disconnection that no job
        // can be handed over any more.
        let (dispatching_tx, dispatching_rx) = crossbeam_channel::bounded::<()>(0);
        dispatcher.first_lead(dispatching_tx.clone());
        // Each executor holds a sender: the helper threads learn from the disconnection
        // that no job can start or finish any more.
        let (alive_tx, alive_rx) = crossbeam_channel::bounded::<()>(0);
        if warning::no_logger() {
            eprintln!(
                "pgqueuer: no logger is installed, so the worker prints job failures here and \
                 nothing else; install one (for example `env_logger::init()`) to see its log"
            );
        }
        log::info!(
            "pgqueuer worker {} starting: {} threads, entrypoints {:?}",
            config.claimer.worker_id(),
            config.threads,
            config.registry.order
        );
        let started = Instant::now();
        stats.liveness.started(
            config.poll_interval.unwrap_or(config.dequeue_timeout),
            config.listen.is_some(),
        );
        let panicked = std::thread::scope(|scope| {
            let mut handles = Vec::new();
            if config.lanes > 1 {
                let dispatcher = &dispatcher;
                let dispatching = dispatching_tx.clone();
                handles.push(spawn_named(scope, "pgqueuer-lane-1".into(), move || {
                    let _dispatching = dispatching;
                    dispatcher.run_second();
                }));
            }
            drop(dispatching_tx);
            // One thread more than jobs run at once: the one that leads (see `runner`).
            for index in 0..=config.threads {
                let runner = Runner {
                    dispatcher: &dispatcher,
                    executor: &executor,
                    ledger: &ledger,
                    dispatching: &dispatching_rx,
                };
                let alive = alive_tx.clone();
                handles.push(spawn_named(
                    scope,
                    format!("pgqueuer-run-{index}"),
                    move || {
                        let _alive = alive;
                        runner.run(index);
                    },
                ));
            }
            drop(alive_tx);
            let (alive, ledger_ref, doorbell_ref) = (&alive_rx, &ledger, &doorbell);
            handles.push(spawn_named(scope, "pgqueuer-listen".into(), move || {
                listener::run(config, doorbell_ref, ledger_ref, limits, stats, alive);
            }));
            handles.push(spawn_named(scope, "pgqueuer-heartbeat".into(), move || {
                heartbeat::run(config, ledger_ref, limits, doorbell_ref, stats, alive);
            }));
            if let Some(deadlines) = &deadlines {
                handles.push(spawn_named(scope, "pgqueuer-timeouts".into(), move || {
                    deadlines.run(alive);
                }));
            }
            let completer = Completer {
                config,
                ledger: &ledger,
                doorbell: &doorbell,
                shutdown,
                stats,
                drain,
            };
            handles.push(spawn_named(scope, "pgqueuer-complete".into(), move || {
                completer.run(alive);
            }));
            enforce_deadline(config, shutdown, &ledger, &alive_rx);
            handles.into_iter().filter_map(|h| h.join().err()).count()
        });
        stats.liveness.stopped();
        let summary = stats.summary();
        log::info!(
            "pgqueuer worker {} stopped after {:?}: {summary:?}",
            config.claimer.worker_id(),
            started.elapsed()
        );
        if let Some(e) = crate::lock::lock(&dispatcher.fatal).take() {
            return Err(e);
        }
        if panicked > 0 {
            return Err(Error::Worker(format!("{panicked} worker threads panicked")));
        }
        Ok(summary)
    }
}

/// Waits for shutdown, then, past the deadline, tells every running handler to stop
/// ([`owned::Stop::shut_down`]; not a cancellation: the outcome stays the handler's).
fn enforce_deadline(
    config: &WorkerConfig,
    shutdown: &ShutdownHandle,
    ledger: &Ledger,
    alive: &Receiver<()>,
) {
    let _ = shutdown.receiver().recv();
    let Some(deadline) = config.shutdown_deadline else {
        return;
    };
    // `alive` disconnects when every executor has exited.
    if let Err(crossbeam_channel::RecvTimeoutError::Timeout) = alive.recv_timeout(deadline) {
        let owned = ledger.shut_down_all();
        log::warn!(
            "shutdown deadline of {deadline:?} passed with {owned} jobs still owned; asking \
             their handlers to stop (each keeps its job until it returns, and gets the \
             outcome it returns)"
        );
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
    stats: StatsHandle,
    thread: Option<std::thread::JoinHandle<Result<RunSummary>>>,
}

impl RunningWorker {
    /// The worker's figures now (see [`WorkerStats`]).
    pub fn stats(&self) -> WorkerStats {
        self.stats.snapshot()
    }

    /// A handle that reads the worker's figures from any thread.
    pub fn stats_handle(&self) -> StatsHandle {
        self.stats.clone()
    }

    /// Whether the worker's own loops make progress (see [`WorkerHealth`]), for a
    /// liveness probe of the process.
    pub fn health(&self) -> WorkerHealth {
        self.stats.health()
    }

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

#[cfg(test)]
mod layering {
    //! The worker's modules form a strict layering (see ARCHITECTURE.md): each depends only
    //! on siblings, without a cycle, and not on this parent module's items (but for the
    //! builder, which returns the `Worker` defined here), so a reader can follow any file
    //! down and never back into a room already left.

    use std::collections::{BTreeMap, BTreeSet};

    /// Every `super::NAME` a worker module mentions, per module.
    fn references() -> BTreeMap<String, BTreeSet<String>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker");
        let mut graph = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).expect("src/worker is readable") {
            let path = entry.expect("a directory entry").path();
            let module = path.file_stem().unwrap().to_string_lossy().into_owned();
            if module == "mod" || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a worker module is readable");
            let mut used = BTreeSet::new();
            for (at, _) in text.match_indices("super::") {
                let rest = &text[at + "super::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '{')
                    .collect();
                // `use super::*` in a test module refers to its own file.
                if !name.is_empty() && !rest.starts_with('*') {
                    used.insert(name);
                }
            }
            graph.insert(module, used);
        }
        graph
    }

    #[test]
    fn worker_modules_use_only_siblings() {
        let graph = references();
        for (module, used) in &graph {
            for name in used {
                // The one parent item a child may name: the `Worker` the builder builds.
                let builds_the_worker = module == "builder" && name == "Worker";
                assert!(
                    graph.contains_key(name) || builds_the_worker,
                    "src/worker/{module}.rs uses `super::{name}`, which is not a sibling \
                     module (a parent item, or a grouped import): move the item into the \
                     module it belongs to and name that module"
                );
            }
        }
    }

    #[test]
    fn worker_modules_have_no_cycle() {
        fn visit(
            graph: &BTreeMap<String, BTreeSet<String>>,
            module: &str,
            path: &mut Vec<String>,
            done: &mut BTreeSet<String>,
        ) {
            if let Some(at) = path.iter().position(|m| m == module) {
                let cycle = path[at..].join(" -> ");
                panic!("module cycle in src/worker: {cycle} -> {module}");
            }
            if done.contains(module) {
                return;
            }
            path.push(module.to_owned());
            for next in graph.get(module).into_iter().flatten() {
                if graph.contains_key(next) {
                    visit(graph, next, path, done);
                }
            }
            path.pop();
            done.insert(module.to_owned());
        }
        let graph = references();
        assert!(
            graph.len() >= 10,
            "found only {} worker modules: is src/worker where the test looks?",
            graph.len()
        );
        let mut done = BTreeSet::new();
        for module in graph.keys() {
            visit(&graph, module, &mut Vec::new(), &mut done);
        }
    }
}
