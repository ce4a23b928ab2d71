//! Operating a queue: statistics, log pruning, insight queries, table persistence and
//! autovacuum tuning. What `pgq` runs, as functions over any client.
//!
//! ```no_run
//! # fn main() -> Result<(), pgqueuer::Error> {
//! use std::time::Duration;
//! use pgqueuer::Settings;
//! use pgqueuer::ops::{self, Aggregation};
//!
//! let settings = Settings::default();
//! let mut conn = pgqueuer::connect_one("postgres://postgres@127.0.0.1/app", "ops")?;
//! if let Aggregation::Folded { log_rows, .. } = ops::aggregate_log(&mut *conn, &settings)? {
//!     println!("{log_rows} log rows added to the statistics");
//! }
//! for row in ops::throughput(&mut *conn, &settings, Duration::from_secs(60))? {
//!     println!("{} {} {}", row.entrypoint, row.status, row.count);
//! }
//! for age in ops::queue_age(&mut *conn, &settings)? {
//!     println!("{}: {} queued, oldest {:.0} s", age.entrypoint, age.queued_count, age.oldest_age_seconds);
//! }
//! let pruned = ops::prune_log(&mut *conn, &settings, Duration::from_secs(7 * 86_400))?;
//! println!("deleted {} log rows", pruned.deleted);
//! # Ok(())
//! # }
//! ```
//!
//! # Statistics and the aggregation lock
//!
//! The log table gets one row per job transition; the statistics table holds the same
//! counts rolled up per second, entrypoint, priority and status. [`aggregate_log`] moves
//! counts from one to the other while holding PgQueuer's transaction-scoped advisory lock
//! (key `hashtext('<qualified statistics table>')`), so that two aggregators never count
//! the same log rows. PgQueuer's workers take that lock for their periodic aggregation,
//! but its on-demand readers (`pgq dashboard`, the Prometheus and web adapters) aggregate
//! without it; this crate takes it on every path, so its dashboard never double counts
//! against a Rust or Python worker. (A Python on-demand aggregation running at the same
//! moment still can, on its side.)
//!
//! Every function taking a client works inside the caller's transaction too; a lock or
//! DDL lock then lasts until that transaction ends.

mod health;
mod insight;
mod limits;
mod prometheus;
mod statistics;
mod tuning;

use std::time::{Duration, SystemTime};

use postgres::{GenericClient, Row};

use crate::error::{Error, Result};
use crate::time::python_time;

pub use crate::horizon::{HolderKind, HorizonHolder, holders as horizon_holders};
pub use health::{Health, HealthOptions, Probe, Reason as HealthReason, Verdict, health};
pub use insight::{
    AUDIT_RESOLUTION, ActiveWorker, AuditedEntrypoint, ConnectionTls, LimitAudit, QueueAge,
    RateUse, SlotUse, StaleJob, Throughput, active_workers, connection_tls, limit_audit, queue_age,
    rates_in_use, slots_in_use, stale_jobs, throughput,
};
pub(crate) use limits::stored_of;
pub use limits::{
    DeclaredLimits, LimitChange, StoredLimits, declared_limits, limit_changes, set_limits,
    stored_limits, unset_limits,
};
pub use prometheus::prometheus_text;
pub use statistics::{Aggregation, Pruned, aggregate_log, prune_log};
pub use tuning::{Autovacuum, autovacuum, autovacuum_sql, durability_sql, set_durability};

/// `t` in UTC as PgQueuer's JSON output writes timestamps (`pgq ... --json`, its
/// tracebacks): ISO 8601 with six fraction digits (none when zero) and `Z`, e.g.
/// `2026-11-29T19:18:23.097731Z`.
pub fn format_timestamp(t: SystemTime) -> String {
    python_time(t)
}

/// Subscribes `client` to `channel` (`LISTEN`, the name quoted as an identifier, as
/// PgQueuer 1.6 does). Read what arrives with `client.notifications()`; build a fresh
/// `timeout_iter` for every wait, as one that has returned `None` stays exhausted.
///
/// Use a connection of its own (see [`crate::connect_one`]): a pooled connection would
/// keep listening after it returns to the pool.
///
/// # Errors
/// [`Error::InvalidInput`] naming `channel` when it is empty, longer than PostgreSQL's
/// 63-byte identifier limit (the server would silently listen to a shorter name), or
/// contains a NUL character; [`Error::Db`] when the statement fails.
pub fn listen<C: GenericClient>(client: &mut C, channel: &str) -> Result<()> {
    if channel.is_empty() || channel.len() > 63 || channel.contains('\0') {
        return Err(Error::invalid(
            "channel",
            format!("{channel:?} is not a channel name (1 to 63 bytes, no NUL character)"),
        ));
    }
    client.batch_execute(&crate::sql::channel_listen(channel))?;
    Ok(())
}

fn micros_of(field: &str, d: Duration) -> Result<i64> {
    i64::try_from(d.as_micros())
        .map_err(|_| Error::invalid(field, format!("{d:?} does not fit an interval")))
}

fn count_of(row: &Row, column: &str) -> Result<u64> {
    let n: i64 = row.try_get(column)?;
    u64::try_from(n).map_err(|_| Error::Unexpected(format!("negative {column}: {n}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_spans_are_rejected_by_name() {
        let err = micros_of("older_than", Duration::MAX).unwrap_err();
        assert!(err.to_string().contains("older_than"), "{err}");
        assert_eq!(
            micros_of("x", Duration::from_millis(1500)).unwrap(),
            1_500_000
        );
    }
}
