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
//! use pgqueuer::{NewJob, Queue};
//!
//! let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
//! pgqueuer::upgrade(pool.get()?.client())?;
//!
//! let queue = Queue::new(pool);
//! let id = queue.enqueue(NewJob::new("email", b"hello".to_vec()).priority(5))?;
//! let statuses = queue.wait_for(&[id], Duration::from_secs(30))?;
//! # let _ = statuses;
//! # Ok(())
//! # }
//! ```
//!
//! # Producing
//!
//! [`Queue`] enqueues [`NewJob`]s one at a time or in batches of any size, each batch one
//! statement that also writes the jobs' `queued` log rows; the `_in` variants run inside
//! the caller's transaction, so a job exists only if that transaction commits.
//! [`OnConflict`] says what a dedupe key held by a queued or picked job does. The same
//! type cancels, inspects, clears and requeues jobs and waits for them to finish. The
//! NOTIFY payloads shared with Python are in [`events`].
//!
//! # Scheduling
//!
//! [`Scheduler`] runs handlers at the times of cron expressions ([`Cron`]: 5 fields, or 6
//! with seconds last, read exactly as PgQueuer's croniter reads them) and shares
//! PgQueuer's schedules table with Python's `SchedulerManager`: a schedule registered on
//! either side fires once per due time across every process that registered it, and a
//! schedule whose scheduler died is taken over after 30 s. [`schedules`] lists and
//! removes the rows.

mod claim;
mod connect;
mod cron;
mod error;
pub mod events;
mod job;
mod queue;
mod scheduler;
pub mod schedules;
mod schema;
mod settings;
mod shutdown;
mod sql;
pub mod sqlstate;

pub use claim::{Claim, Claimer, ClaimerBuilder, Outcome};
pub use connect::{Conn, ConnectOptions, Manager, Pool, PooledConn, connect, connect_with};
pub use cron::Cron;
pub use error::{Error, Result};
pub use job::{Job, JobId, Status};
pub use queue::{NewJob, OnConflict, Queue, QueueSize};
pub use scheduler::Scheduler;
pub use schedules::{Schedule, ScheduleId};
pub use schema::{
    UpgradeReport, describe_with, uninstall, uninstall_with, upgrade, upgrade_sql, upgrade_with,
    verify, verify_with,
};
pub use settings::{Durability, Settings};
pub use shutdown::ShutdownHandle;

/// Re-exported so users need not match versions by hand.
pub use postgres;
/// Re-exported so users need not match versions by hand.
pub use r2d2;
