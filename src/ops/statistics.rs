//! Statistics: folding the log into the per-second statistics table under PgQueuer's
//! advisory lock, and pruning the log once its counts are safe there (see the
//! [module docs](crate::ops) on the lock).

use std::time::Duration;

use postgres::GenericClient;
use postgres::types::Type;

use super::{count_of, micros_of};
use crate::connect;
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::sql::ops as sql;

/// What one [`aggregate_log`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregation {
    /// This call held the aggregation lock and folded every log row that was not yet
    /// aggregated (possibly none).
    Folded {
        /// Log rows now marked aggregated.
        log_rows: u64,
        /// Statistics rows inserted or added to (one per second, entrypoint, priority
        /// and status).
        buckets: u64,
    },
    /// Another session held the aggregation lock (a worker's periodic aggregation, or
    /// another dashboard); nothing was done. Its aggregation covers the same rows.
    Busy,
}

/// What [`prune_log`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Pruned {
    /// Log rows folded into the statistics first.
    pub aggregated: u64,
    /// Log rows deleted.
    pub deleted: u64,
}

/// Folds every log row not yet aggregated into the statistics table, in one statement,
/// if no other session is aggregating (see the [module docs](crate::ops) on the lock).
///
/// Counts go into per-second buckets by entrypoint, priority and status; a bucket that
/// already exists is added to. Every status is counted, `queued` and `picked` included,
/// as PgQueuer does. The first call over a large backlog is one long statement.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`] when the statement fails
/// (nothing is aggregated then).
pub fn aggregate_log<C: GenericClient>(client: &mut C, settings: &Settings) -> Result<Aggregation> {
    settings.validate()?;
    let key = statistics_lock_name(settings);
    let row =
        connect::query_one_alone(client, &sql::log_aggregate(settings), &[(&key, Type::TEXT)])?;
    let locked: bool = row.try_get("locked")?;
    if !locked {
        return Ok(Aggregation::Busy);
    }
    Ok(Aggregation::Folded {
        log_rows: count_of(&row, "log_rows")?,
        buckets: count_of(&row, "buckets")?,
    })
}

/// Deletes log rows created more than `older_than` ago, after folding every log row into
/// the statistics so that the counts survive. PgQueuer has no such operation; its log
/// grows forever.
///
/// Runs in one transaction that first waits for the aggregation lock (so no
/// lock-respecting aggregator is counting the rows it deletes), aggregates, then deletes.
/// The statistics table keeps every count; only the per-job history (`job_statuses`,
/// `wait_for` of long-finished jobs) of the deleted rows is lost.
///
/// # Errors
/// [`Error::InvalidInput`] naming `older_than` when it does not fit an interval;
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`] when a statement fails
/// (nothing is deleted or aggregated then).
pub fn prune_log<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    older_than: Duration,
) -> Result<Pruned> {
    settings.validate()?;
    let micros = micros_of("older_than", older_than)?;
    let key = statistics_lock_name(settings);
    let mut tx = client.transaction()?;
    tx.query_typed(sql::STATISTICS_LOCK, &[(&key, Type::TEXT)])?;
    let aggregated = match aggregate_log(&mut tx, settings)? {
        Aggregation::Folded { log_rows, .. } => log_rows,
        // The lock is ours; the try-lock of the same session cannot fail.
        Aggregation::Busy => {
            return Err(Error::Unexpected(
                "the aggregation lock was taken but aggregation reported it busy".into(),
            ));
        }
    };
    let deleted = tx.execute_typed(&sql::log_delete_before(settings), &[(&micros, Type::INT8)])?;
    tx.commit()?;
    Ok(Pruned {
        aggregated,
        deleted,
    })
}

/// The text whose `hashtext` is the aggregation lock key: the qualified statistics
/// table name, as PgQueuer renders it.
fn statistics_lock_name(settings: &Settings) -> String {
    settings.qualify(&settings.statistics_table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_name_is_the_qualified_statistics_table() {
        assert_eq!(
            statistics_lock_name(&Settings::default()),
            "pgqueuer_statistics"
        );
        assert_eq!(
            statistics_lock_name(&Settings::with_prefix("app_").schema("myq")),
            "myq.app_pgqueuer_statistics"
        );
    }
}
