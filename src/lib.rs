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
//! let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
//! pgqueuer::upgrade(&mut pool.get()?)?;
//! # Ok(())
//! # }
//! ```

mod connect;
mod error;
pub mod events;
mod job;
mod queue;
mod schema;
mod settings;
mod sql;
pub mod sqlstate;

pub use connect::{Conn, ConnectOptions, Manager, Pool, PooledConn, connect, connect_with};
pub use error::{Error, Result};
pub use job::{Job, JobId, Status};
pub use queue::{NewJob, OnConflict, Queue, QueueSize};
pub use schema::{
    UpgradeReport, describe_with, uninstall, uninstall_with, upgrade, upgrade_sql, upgrade_with,
    verify, verify_with,
};
pub use settings::{Durability, Settings};

/// Re-exported so users need not match versions by hand.
pub use postgres;
/// Re-exported so users need not match versions by hand.
pub use r2d2;
