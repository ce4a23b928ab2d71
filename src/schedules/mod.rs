//! Cron schedules: the [`Scheduler`] that runs them, and the schedules table's rows,
//! listed and removed by [`list`] and [`remove`] (what `pgq schedules` shows and
//! `pgq schedules --remove` does).
//!
//! Rows are written by schedulers, Python's `SchedulerManager` and this crate's
//! [`Scheduler`] alike; one row per `(entrypoint, expression)`.
//!
//! ```no_run
//! # fn main() -> Result<(), pgqueuer::Error> {
//! use pgqueuer::{Settings, schedules};
//!
//! let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
//! let mut conn = pool.get()?;
//! for s in schedules::list(conn.client(), &Settings::default())? {
//!     println!("{} {} {:?}", s.id, s.entrypoint, s.expression);
//! }
//! // `pgq schedules --remove 3 --remove cleanup`: id 3, and every row of `cleanup`.
//! let removed = schedules::remove(conn.client(), &Settings::default(), &[3], &["cleanup"])?;
//! # let _ = removed;
//! # Ok(())
//! # }
//! ```

use std::time::SystemTime;

use postgres::GenericClient;
use postgres::types::Type;

use crate::connect::query_alone;
use crate::error::Result;

mod builder;
mod scheduler;

use crate::job::{Status, parse_status};
use crate::settings::Settings;
use crate::sql::schedule::ScheduleSql;
pub use builder::SchedulerBuilder;
pub use scheduler::{RunningScheduler, Scheduler};

/// A schedule's id (`pgqueuer_schedules.id`).
pub type ScheduleId = i64;

/// A row of the schedules table.
///
/// A handler receives the row as its scheduler claimed it: `status` is `Picked`,
/// `next_run` is already the following fire, and `last_run` is when the previous run
/// finished (by any scheduler, Python or Rust), or `None` before the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The row's id.
    pub id: ScheduleId,
    /// The cron expression, as croniter normalizes it (see [`Cron::normalized`](crate::Cron::normalized)).
    pub expression: String,
    /// The name the schedule was registered under.
    pub entrypoint: String,
    /// When the scheduler running it last reported it alive.
    pub heartbeat: SystemTime,
    /// When the row was first inserted.
    pub created: SystemTime,
    /// When the row last changed.
    pub updated: SystemTime,
    /// The next time it is due.
    pub next_run: SystemTime,
    /// When its last run finished, if it ever ran.
    pub last_run: Option<SystemTime>,
    /// `Queued` (waiting for `next_run`) or `Picked` (running). The column allows NULL,
    /// which reads as `None`.
    pub status: Option<Status>,
}

impl Schedule {
    /// Reads a row returned with the schedule columns (`status` as text).
    pub(crate) fn from_row(row: &postgres::Row) -> Result<Schedule> {
        let status: Option<String> = row.try_get("status")?;
        let status = status.as_deref().map(parse_status).transpose()?;
        Ok(Schedule {
            id: row.try_get("id")?,
            expression: row.try_get("expression")?,
            entrypoint: row.try_get("entrypoint")?,
            heartbeat: row.try_get("heartbeat")?,
            created: row.try_get("created")?,
            updated: row.try_get("updated")?,
            next_run: row.try_get("next_run")?,
            last_run: row.try_get("last_run")?,
            status,
        })
    }
}

/// Every row of the schedules table, least recently run first (never-run rows last,
/// then by id), as `pgq schedules` lists them.
///
/// # Errors
/// [`Error::InvalidSetting`](crate::Error::InvalidSetting) for a bad object name; [`Error::Db`](crate::Error::Db) when the query fails
/// (for instance when the table does not exist: run `upgrade()`).
pub fn list(client: &mut impl GenericClient, settings: &Settings) -> Result<Vec<Schedule>> {
    settings.validate()?;
    let sql = ScheduleSql::new(settings);
    query_alone(client, &sql.select, &[])?
        .iter()
        .map(Schedule::from_row)
        .collect()
}

/// Deletes the schedules whose id is in `ids` and every schedule of the entrypoints in
/// `entrypoints`; returns how many rows were deleted. A scheduler that is running one of
/// them stops firing it (it does not insert it again until it is restarted).
///
/// # Errors
/// [`Error::InvalidSetting`](crate::Error::InvalidSetting) for a bad object name; [`Error::Db`](crate::Error::Db) when the delete fails.
pub fn remove<S: AsRef<str>>(
    client: &mut impl GenericClient,
    settings: &Settings,
    ids: &[ScheduleId],
    entrypoints: &[S],
) -> Result<u64> {
    settings.validate()?;
    if ids.is_empty() && entrypoints.is_empty() {
        return Ok(0);
    }
    let names: Vec<&str> = entrypoints.iter().map(AsRef::as_ref).collect();
    let sql = ScheduleSql::new(settings);
    Ok(query_alone(
        client,
        &sql.delete,
        &[(&ids, Type::INT8_ARRAY), (&names, Type::TEXT_ARRAY)],
    )?
    .len() as u64)
}
