//! Table tuning: persistence (`LOGGED` or `UNLOGGED`, by durability level) and
//! PgQueuer's recommended autovacuum settings, each as statements to print or to run in
//! one transaction.

use postgres::GenericClient;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::settings::{Durability, Settings};
use crate::sql::ops as sql;

/// Which autovacuum settings [`autovacuum`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autovacuum {
    /// PgQueuer's recommended settings (`pgq autovac`): on the queue and schedules
    /// tables `autovacuum_vacuum_scale_factor = 0.01`, `autovacuum_vacuum_threshold =
    /// 1000`, `autovacuum_analyze_scale_factor = 0.02`, `autovacuum_analyze_threshold =
    /// 500`, `autovacuum_vacuum_cost_limit = 10000`, `autovacuum_vacuum_cost_delay = 0`,
    /// `fillfactor = 70`; on the log and statistics tables
    /// `autovacuum_vacuum_scale_factor = 0.95`, `autovacuum_vacuum_threshold = 1000000`,
    /// `autovacuum_analyze_scale_factor = 0.05`, `autovacuum_analyze_threshold = 10000`.
    Tune,
    /// Reset the same keys to the server's defaults (`pgq autovac --rollback`).
    Reset,
}

/// The statements [`set_durability`] runs: `ALTER TABLE ... SET LOGGED|UNLOGGED` for the
/// queue, log, statistics and schedules tables, in that order (for `pgq sql durability`).
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name.
pub fn durability_sql(settings: &Settings, level: Durability) -> Result<String> {
    settings.validate()?;
    Ok(sql::tables_set_persistence(settings, level))
}

/// Switches the four tables to the persistence of `level`, in one transaction:
/// [`Durability::Durable`] logs all four, [`Durability::Balanced`] leaves the log and
/// statistics UNLOGGED, [`Durability::Volatile`] none. Rows are kept.
///
/// Each switch rewrites the table under an ACCESS EXCLUSIVE lock, so workers and
/// producers wait for it; run it when the queue is quiet. UNLOGGED tables are emptied
/// by crash recovery and not replicated.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`] when a table is missing or a
/// statement fails (no table is changed then).
pub fn set_durability<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    level: Durability,
) -> Result<()> {
    run_in_transaction(client, &durability_sql(settings, level)?)
}

/// The statements [`autovacuum`] runs (for `pgq sql autovac`).
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name.
pub fn autovacuum_sql(settings: &Settings, mode: Autovacuum) -> Result<String> {
    settings.validate()?;
    Ok(sql::tables_set_autovacuum(
        settings,
        mode == Autovacuum::Reset,
    ))
}

/// Applies PgQueuer's recommended autovacuum storage parameters to the four tables, or
/// resets them (see [`Autovacuum`]), in one transaction.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`] when a table is missing or a
/// statement fails (no table is changed then).
pub fn autovacuum<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    mode: Autovacuum,
) -> Result<()> {
    run_in_transaction(client, &autovacuum_sql(settings, mode)?)
}

/// Runs `statements` (several, separated by semicolons) as one transaction.
fn run_in_transaction<C: GenericClient>(client: &mut C, statements: &str) -> Result<()> {
    let mut tx = client.transaction()?;
    tx.batch_execute(statements)?;
    tx.commit()?;
    Ok(())
}
