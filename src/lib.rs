//! A blocking, thread-pool job queue on PostgreSQL, schema- and wire-compatible with
//! [PgQueuer](https://github.com/janbjorge/pgqueuer) 1.6 (Python).
//!
//! Python producers and Rust workers (and the reverse) share one database, one queue
//! table, one NOTIFY channel and one set of concurrency slots.
//!
//! # Example
//!
//! ```no_run
//! # fn main() -> Result<(), pgqueuer::Error> {
//! use std::time::Duration;
//! use pgqueuer::{Entrypoint, NewJob, Queue, Worker};
//!
//! // A pool, and the schema installed or brought up to date (safe from every process).
//! let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
//! pgqueuer::upgrade(pool.get()?.client())?;
//!
//! // Produce: one statement per batch.
//! let queue = Queue::new(pool.clone());
//! let id = queue.enqueue(NewJob::new("email", b"to=a@example.com".to_vec()).priority(5))?;
//!
//! // Consume: handlers on a thread pool; `resize` runs at most 2 at once across every
//! // worker, Rust or Python.
//! let worker = Worker::builder(pool)
//!     .entrypoint("email", |job, _ctx| {
//!         let _to = job.payload_str().ok_or("the payload is not UTF-8")?;
//!         Ok(())
//!     })
//!     .entrypoint(Entrypoint::new("resize").concurrency_limit(2), |_job, _ctx| Ok(()))
//!     .build()?; // refuses a database without the capacity-slot column and index
//! let stop = worker.shutdown_handle(); // stop.shutdown() from any thread, e.g. on SIGTERM
//! let running = worker.start()?; // or worker.run() to block this thread
//! let statuses = queue.wait_for(&[id], Duration::from_secs(30))?;
//! # let _ = (statuses, stop);
//! running.join()?; // running handlers finish, every outcome is written
//! # Ok(())
//! # }
//! ```
//!
//! Install a logger (`env_logger::init()`, or any `log` implementation): the worker logs
//! each failed job at `warn` with its id, entrypoint and cause chain. Without one it
//! prints failures on stderr so that they are never silent.
//!
//! # Producing
//!
//! [`Queue`] enqueues [`NewJob`]s one at a time or in batches of any size, each batch one
//! statement that also writes the jobs' `queued` log rows; [`Queue::on`] runs the same
//! calls on a client the caller holds, such as its transaction, so that a job exists only
//! if that transaction commits.
//! [`OnConflict`] says what a dedupe key held by a queued or picked job does. The same
//! type cancels, inspects, clears and requeues jobs and waits for them to finish. The
//! NOTIFY payloads shared with Python are in [`events`].
//!
//! # Consuming
//!
//! [`Worker`] runs handlers on a fixed pool of threads, for which one dispatcher claims
//! with the slot-claiming dequeue ([`Claimer`]), woken by one dedicated LISTEN
//! connection; a [`ShutdownHandle`] stops it from any thread.
//!
//! # Seeing into it
//!
//! [`StatsHandle::snapshot`] gives a worker's figures ([`WorkerStats`]) to any thread.
//! Feature `metrics` records the same through the `metrics` facade, for whatever
//! recorder the program installs before building the worker; feature `opentelemetry`
//! carries trace context through job headers as PgQueuer does, so that a job's
//! `process` span continues the trace that enqueued it, from Python or Rust
//! ([`Job::trace_carrier`] gives the raw context without the feature). The repository's
//! `docs/operating.md` has the metric names.
//!
//! # Operating
//!
//! [`ops`] holds what an operator runs: statistics aggregation under PgQueuer's advisory
//! lock, log pruning, stale-job, worker, backlog and throughput queries, table
//! persistence and autovacuum tuning. The `pgq` program (feature `cli`) is a thin layer
//! over it and over [`Queue`].
//!
//! # Scheduling
//!
//! [`Scheduler`] runs handlers at the times of cron expressions ([`Cron`]: 5 fields, or 6
//! with seconds last, read exactly as PgQueuer's croniter reads them) and shares
//! PgQueuer's schedules table with Python's `SchedulerManager`: a schedule registered on
//! either side fires once per due time across every process that registered it, and a
//! schedule whose scheduler died is taken over after 30 s. [`schedules`] lists and
//! removes the rows.

// docs.rs builds with `--cfg docsrs` on a nightly toolchain, and marks each feature's
// items with the feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod claim;
mod connect;
mod cron;
mod error;
pub mod events;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod headers;
mod horizon;
mod job;
mod lock;
mod loop_conn;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
pub mod ops;
mod payload;
mod percent;
mod queue;
mod rate;
pub mod schedules;
mod schema;
mod settings;
mod shutdown;
mod sql;
mod sqlstate;
mod telemetry;
mod time;
mod tls;
#[cfg(feature = "web")]
#[cfg_attr(docsrs, doc(cfg(feature = "web")))]
pub mod web;
mod worker;

pub use claim::{Claim, Claimer, ClaimerBuilder, LostRace, Outcome};
pub use connect::{
    Conn, ConnectOptions, Manager, Pool, PooledConn, Pooler, connect, connect_one, connect_with,
};
pub use cron::Cron;
pub use error::{Error, Result};
pub use headers::Headers;
pub use job::{FailedJob, Failure, Job, JobId, LogEntry, Status};
pub use payload::{PayloadKind, PayloadView};
pub use queue::{
    EnqueueTarget, Explanation, NewJob, OnConflict, Queue, QueueOn, QueueSize, SlotHolder,
};
pub use rate::RateLimit;
pub use schedules::{RunningScheduler, Schedule, ScheduleId, Scheduler, SchedulerBuilder};
pub use schema::{
    UpgradePlan, UpgradeReport, describe_schema, missing_own_tables, uninstall, uninstall_sql,
    uninstall_with, upgrade, upgrade_plan, upgrade_sql, upgrade_with, verify, verify_with,
};
pub use settings::{Durability, Settings};
pub use shutdown::ShutdownHandle;
pub use worker::{
    BoxError, Context, Entrypoint, EntrypointStats, FencingToken, HandlerResult, JobError,
    LimitStats, OnFailure, RateStats, Retry, RetryPolicy, RunSummary, RunningWorker, StatsHandle,
    TimingStats, Worker, WorkerBuilder, WorkerHealth, WorkerStats,
};

/// Re-exported so users need not match versions by hand.
pub use postgres;
/// Re-exported so users need not match versions by hand.
pub use r2d2;

/// The README's examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The examples of the guide to the API (`docs/usage.md`), compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../docs/usage.md")]
struct UsageDoctests;

/// The examples of the operating guide (`docs/operating.md`), compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../docs/operating.md")]
struct OperatingDoctests;

/// The examples of the rate limits guide (`docs/rate-limits.md`), compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../docs/rate-limits.md")]
struct RateLimitsDoctests;
