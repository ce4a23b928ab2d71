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

use std::time::{Duration, SystemTime};

use postgres::types::Type;
use postgres::{GenericClient, Row};
use uuid::Uuid;

use crate::connect;
use crate::error::{Error, Result};
use crate::job::{JobId, Status, status_of};
use crate::settings::{Durability, Settings};
use crate::sql::ops as sql;
use crate::time::python_time;

pub use crate::health::{Health, HealthOptions, Reason as HealthReason, Verdict, health};

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

/// A picked job whose worker has not sent a heartbeat for longer than a threshold (one
/// row of [`stale_jobs`]). Such a job is re-claimed by the next worker whose heartbeat
/// timeout is shorter than its age.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StaleJob {
    /// The job.
    pub id: JobId,
    /// Its priority.
    pub priority: i32,
    /// The worker that picked it.
    pub queue_manager_id: Option<Uuid>,
    /// When it was enqueued.
    pub created: SystemTime,
    /// When its row last changed state.
    pub updated: SystemTime,
    /// Its last heartbeat.
    pub heartbeat: SystemTime,
    /// When it became eligible.
    pub execute_after: SystemTime,
    /// Always [`Status::Picked`].
    pub status: Status,
    /// Its entrypoint.
    pub entrypoint: String,
    /// Seconds between its last heartbeat and the query.
    pub seconds_since_heartbeat: f64,
}

/// A worker holding picked jobs (one row of [`active_workers`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ActiveWorker {
    /// The worker's id (PgQueuer's `queue_manager_id`).
    pub queue_manager_id: Uuid,
    /// How many jobs it holds.
    pub active_jobs: u64,
    /// The oldest heartbeat among them.
    pub oldest_heartbeat: SystemTime,
    /// The newest heartbeat among them.
    pub newest_heartbeat: SystemTime,
    /// The entrypoints of its jobs, sorted, each once.
    pub entrypoints: Vec<String>,
}

/// The backlog of one entrypoint (one row of [`queue_age`]): its queued jobs, deferred
/// ones included.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueAge {
    /// The entrypoint.
    pub entrypoint: String,
    /// How many jobs are queued.
    pub queued_count: u64,
    /// When the oldest was enqueued.
    pub oldest_created: SystemTime,
    /// The oldest one's age in seconds.
    pub oldest_age_seconds: f64,
    /// The average age in seconds.
    pub avg_age_seconds: f64,
}

/// The concurrency slots of one entrypoint's picked jobs (one row of [`slots_in_use`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotUse {
    /// The entrypoint.
    pub entrypoint: String,
    /// Picked jobs holding a slot.
    pub held: u64,
    /// The highest slot held: any worker that holds it declares a limit above it.
    pub highest: Option<i64>,
    /// Picked jobs without a slot (an entrypoint without a limit, or jobs picked before
    /// slots existed).
    pub unslotted: u64,
}

/// The slots held per entrypoint with picked jobs, by entrypoint. Slots are numbered
/// from 0 below the limit of the worker that took them, so `highest + 1` is the smallest
/// limit that worker can have declared; workers that declare different limits for one
/// entrypoint show as a `highest` at or above the smaller limit.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn slots_in_use<C: GenericClient>(client: &mut C, settings: &Settings) -> Result<Vec<SlotUse>> {
    settings.validate()?;
    connect::query_alone(client, &sql::queue_select_slots(settings), &[])?
        .iter()
        .map(|row| {
            Ok(SlotUse {
                entrypoint: row.try_get("entrypoint")?,
                held: count_of(row, "held")?,
                highest: row.try_get("highest")?,
                unslotted: count_of(row, "unslotted")?,
            })
        })
        .collect()
}

/// A [`limit_audit`] resolution for its clock sweep that covers a commit or a short lock
/// wait: overlaps of one slot's runs by the log's timestamps shorter than this are not
/// counted in [`AuditedEntrypoint::clock_peak`].
pub const AUDIT_RESOLUTION: Duration = Duration::from_millis(10);

/// What [`limit_audit`] found in the log.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LimitAudit {
    /// The start of the window audited.
    pub since: SystemTime,
    /// How many log rows the audit read (the window's, of the entrypoint asked for).
    pub rows_read: u64,
    /// Whether the log's ids follow the order its rows were written in (its id sequence
    /// hands out one id at a time, as PgQueuer creates it). When false, `peak` is the
    /// clock's peak and may count overlaps that did not happen.
    pub log_order_reliable: bool,
    /// One row per entrypoint with a run in the window, by name.
    pub entrypoints: Vec<AuditedEntrypoint>,
}

/// One entrypoint in a [`LimitAudit`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AuditedEntrypoint {
    /// The entrypoint.
    pub entrypoint: String,
    /// The most of its jobs that were certainly picked at once in the window, swept in
    /// the order the log was written: at most its concurrency limit if the limit held.
    /// Overlaps shorter than a commit (the time between an end's log row and its commit)
    /// can be missed; none is invented.
    pub peak: u64,
    /// When that peak was first reached (the log time of the pick that reached it).
    pub peak_at: SystemTime,
    /// The most of its jobs picked at once by the log's timestamps. These are the start
    /// times of the transactions that wrote the rows, so a claim that waited for a slot,
    /// or a transaction begun before its statement, can make runs of one slot overlap:
    /// above `peak`, the excess is within the clock's resolution, not a breach.
    pub clock_peak: u64,
    /// When the clock's peak was first reached.
    pub clock_peak_at: SystemTime,
    /// Runs seen in the window (each pick of a job, up to its next transition).
    pub runs: u64,
    /// The highest slot a picked job of it holds now, if any.
    pub highest_slot: Option<i64>,
}

/// How many transitions to one status one entrypoint made in a window (one row of
/// [`throughput`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Throughput {
    /// The entrypoint.
    pub entrypoint: String,
    /// The status reached (`queued` counts enqueues and requeues, `picked` claims,
    /// the others outcomes).
    pub status: Status,
    /// How many times, over the window.
    pub count: u64,
}

/// Whether a connection is encrypted, as the server sees it (`pg_stat_ssl`; see
/// [`connection_tls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionTls {
    /// True when the connection is encrypted.
    pub encrypted: bool,
    /// The protocol, such as `TLSv1.3`, when encrypted.
    pub version: Option<String>,
    /// The cipher, when encrypted.
    pub cipher: Option<String>,
}

impl std::fmt::Display for ConnectionTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.encrypted {
            write!(
                f,
                "encrypted ({}, {})",
                self.version.as_deref().unwrap_or("TLS"),
                self.cipher.as_deref().unwrap_or("unknown cipher")
            )
        } else {
            f.write_str("plaintext (not encrypted)")
        }
    }
}

/// Whether `client`'s own connection is encrypted, read from `pg_stat_ssl`. Through a
/// pooler this is the pooler's connection to the server, not the client's to the pooler.
///
/// # Errors
/// [`Error::Db`].
pub fn connection_tls<C: GenericClient>(client: &mut C) -> Result<ConnectionTls> {
    let row = connect::query_one_alone(client, sql::CONNECTION_TLS, &[])?;
    Ok(ConnectionTls {
        encrypted: row.try_get("ssl")?,
        version: row.try_get("version")?,
        cipher: row.try_get("cipher")?,
    })
}

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

impl StaleJob {
    fn from_row(row: &Row) -> Result<StaleJob> {
        Ok(StaleJob {
            id: row.try_get("id")?,
            priority: row.try_get("priority")?,
            queue_manager_id: row.try_get("queue_manager_id")?,
            created: row.try_get("created")?,
            updated: row.try_get("updated")?,
            heartbeat: row.try_get("heartbeat")?,
            execute_after: row.try_get("execute_after")?,
            status: status_of(row)?,
            entrypoint: row.try_get("entrypoint")?,
            seconds_since_heartbeat: row.try_get("seconds_since_heartbeat")?,
        })
    }
}

impl ActiveWorker {
    fn from_row(row: &Row) -> Result<ActiveWorker> {
        Ok(ActiveWorker {
            queue_manager_id: row.try_get("queue_manager_id")?,
            active_jobs: count_of(row, "active_jobs")?,
            oldest_heartbeat: row.try_get("oldest_heartbeat")?,
            newest_heartbeat: row.try_get("newest_heartbeat")?,
            entrypoints: row.try_get("entrypoints")?,
        })
    }
}

impl QueueAge {
    fn from_row(row: &Row) -> Result<QueueAge> {
        Ok(QueueAge {
            entrypoint: row.try_get("entrypoint")?,
            queued_count: count_of(row, "queued_count")?,
            oldest_created: row.try_get("oldest_created")?,
            oldest_age_seconds: row.try_get("oldest_age_seconds")?,
            avg_age_seconds: row.try_get("avg_age_seconds")?,
        })
    }
}

/// `t` in UTC as PgQueuer's JSON output writes timestamps (`pgq ... --json`, its
/// tracebacks): ISO 8601 with six fraction digits (none when zero) and `Z`, e.g.
/// `2026-11-29T19:18:23.097731Z`.
pub fn format_timestamp(t: SystemTime) -> String {
    python_time(t)
}

/// Folds every log row not yet aggregated into the statistics table, in one statement,
/// if no other session is aggregating (see the [module docs](self) on the lock).
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

/// Up to `limit` picked jobs whose last heartbeat is older than `threshold`, stalest
/// first.
///
/// # Errors
/// [`Error::InvalidInput`] naming `threshold` when it does not fit an interval;
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn stale_jobs<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    threshold: Duration,
    limit: usize,
) -> Result<Vec<StaleJob>> {
    settings.validate()?;
    let micros = micros_of("threshold", threshold)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    connect::query_alone(
        client,
        &sql::queue_select_stale(settings),
        &[(&micros, Type::INT8), (&limit, Type::INT8)],
    )?
    .iter()
    .map(StaleJob::from_row)
    .collect()
}

/// The workers holding picked jobs, by worker id.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn active_workers<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
) -> Result<Vec<ActiveWorker>> {
    settings.validate()?;
    connect::query_alone(client, &sql::queue_select_workers(settings), &[])?
        .iter()
        .map(ActiveWorker::from_row)
        .collect()
}

/// The backlog per entrypoint that has queued jobs: how many and how old, by entrypoint.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn queue_age<C: GenericClient>(client: &mut C, settings: &Settings) -> Result<Vec<QueueAge>> {
    settings.validate()?;
    connect::query_alone(client, &sql::queue_select_age(settings), &[])?
        .iter()
        .map(QueueAge::from_row)
        .collect()
}

/// Audits concurrency limits after the fact: for each entrypoint (or only
/// `entrypoint`), the most of its jobs that were picked at once over the last `window`,
/// computed from the log rows that PgQueuer's workers and ours write (each pick, and
/// each job's next transition), next to the highest slot in use now.
///
/// A limit held when [`AuditedEntrypoint::peak`] never exceeds it. The peak is swept in
/// the order the log was written (by log id), which cannot show two holders of one slot
/// at once: a claim's pick row is written after its slot is taken, which is after the
/// commit of the end that freed the slot, which is after that end's row. The log's
/// timestamps cannot tell that order: they are the start times of the transactions that
/// wrote them, and a claim that waited for a slot (or a Python transaction begun before
/// its claim) is stamped before the end it waited for. Their sweep is reported apart
/// ([`AuditedEntrypoint::clock_peak`], ignoring overlaps shorter than `resolution`;
/// [`AUDIT_RESOLUTION`] is a good value): a clock peak above the peak is within the
/// clock's resolution, not a breach. The scan reads the window's log rows through the
/// log's `created` index, and [`LimitAudit::rows_read`] says how many; rows already
/// pruned ([`prune_log`]) are not seen.
///
/// # Errors
/// [`Error::InvalidInput`] naming `window` or `resolution` when it does not fit an
/// interval; [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn limit_audit<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    window: Duration,
    entrypoint: Option<&str>,
    resolution: Duration,
) -> Result<LimitAudit> {
    settings.validate()?;
    let window_us = micros_of("window", window)?;
    let resolution_us = micros_of("resolution", resolution)?;
    let log = settings.qualify(&settings.queue_table_log);
    let cache: Option<i64> =
        connect::query_alone(client, sql::LOG_ID_CACHE, &[(&log, Type::TEXT)])?
            .first()
            .map(|row| row.try_get(0))
            .transpose()?;
    let log_order_reliable = cache.is_none_or(|c| c <= 1);
    let rows = connect::query_alone(
        client,
        &sql::log_limit_audit(settings),
        &[
            (&window_us, Type::INT8),
            (&entrypoint, Type::TEXT),
            (&resolution_us, Type::INT8),
        ],
    )?;
    let Some(first) = rows.first() else {
        let count: i64 = connect::query_one_alone(
            client,
            &sql::log_count_since(settings),
            &[(&window_us, Type::INT8), (&entrypoint, Type::TEXT)],
        )?
        .get(0);
        return Ok(LimitAudit {
            since: SystemTime::now() - window,
            rows_read: u64::try_from(count).unwrap_or(0),
            log_order_reliable,
            entrypoints: Vec::new(),
        });
    };
    Ok(LimitAudit {
        since: first.try_get("since")?,
        rows_read: count_of(first, "rows_read")?,
        log_order_reliable,
        entrypoints: rows
            .iter()
            .map(|row| {
                let clock_peak = count_of(row, "clock_peak")?;
                let clock_peak_at = row.try_get("clock_peak_at")?;
                let (peak, peak_at) = if log_order_reliable {
                    (count_of(row, "peak")?, row.try_get("peak_at")?)
                } else {
                    (clock_peak, clock_peak_at)
                };
                Ok(AuditedEntrypoint {
                    entrypoint: row.try_get("entrypoint")?,
                    peak,
                    peak_at,
                    clock_peak,
                    clock_peak_at,
                    runs: count_of(row, "runs")?,
                    highest_slot: row.try_get("highest_slot")?,
                })
            })
            .collect::<Result<_>>()?,
    })
}

/// Transitions per entrypoint and status over the last `window`, read from the
/// statistics table (so call [`aggregate_log`] first for up-to-date counts); by
/// entrypoint, then status.
///
/// # Errors
/// [`Error::InvalidInput`] naming `window` when it does not fit an interval;
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn throughput<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    window: Duration,
) -> Result<Vec<Throughput>> {
    settings.validate()?;
    let micros = micros_of("window", window)?;
    connect::query_alone(
        client,
        &sql::statistics_select_throughput(settings),
        &[(&micros, Type::INT8)],
    )?
    .iter()
    .map(|row| {
        Ok(Throughput {
            entrypoint: row.try_get("entrypoint")?,
            status: status_of(row)?,
            count: count_of(row, "count")?,
        })
    })
    .collect()
}

/// How long back [`prometheus_text`] counts log transitions (`pgqueuer_logs_count`):
/// PgQueuer's five minutes.
pub const PROMETHEUS_LOG_WINDOW: Duration = Duration::from_secs(300);

/// The queue's figures in the Prometheus text format (version 0.0.4), for a `/metrics`
/// endpoint of a program's own (`pgq web` serves the same text).
///
/// PgQueuer's two series come first, with its names and labels, so that dashboards and
/// alerts written against a Python fleet keep working: `pgqueuer_queue_count` (jobs in
/// the queue table per entrypoint and status) and `pgqueuer_logs_count` (transitions
/// logged over the last [`PROMETHEUS_LOG_WINDOW`]). PgQueuer aggregates the log before
/// reading it; this reads the statistics plus the log rows not yet aggregated, which
/// gives the same counts without writing, so a scrape never changes the database.
/// Then the figures no peer exports: slots held and the highest slot per limited
/// entrypoint (`pgqueuer_slots_in_use`, `pgqueuer_slot_limit_evidence`: the smallest
/// limit the worker holding that slot can have declared), the longest wait of an
/// eligible queued job (`pgqueuer_oldest_queued_age_seconds`), picked jobs without a
/// heartbeat for `stale_after` (`pgqueuer_stale_picked_jobs`), and log rows awaiting
/// aggregation (`pgqueuer_unaggregated_log_rows`).
///
/// Every series has `# HELP` and `# TYPE` lines; label values are escaped as the format
/// requires. Counting the queue reads every row of the queue table, as PgQueuer's does.
///
/// # Errors
/// [`Error::InvalidInput`] naming `stale_after` when it does not fit an interval;
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn prometheus_text<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    stale_after: Duration,
) -> Result<String> {
    use std::fmt::Write as _;
    settings.validate()?;
    let stale_us = micros_of("stale_after", stale_after)?;
    let window_us = micros_of("window", PROMETHEUS_LOG_WINDOW)?;
    let queue = connect::query_alone(client, &sql::queue_count_by_status(settings), &[])?;
    let priorities: Vec<i32> =
        connect::query_one_alone(client, &sql::statistics_priorities(settings), &[])?
            .try_get("priorities")?;
    let logs = connect::query_alone(
        client,
        &sql::log_count_since_by_status(settings),
        &[(&window_us, Type::INT8), (&priorities, Type::INT4_ARRAY)],
    )?;
    let slots = slots_in_use(client, settings)?;
    let health = connect::query_one_alone(
        client,
        &sql::queue_health(settings),
        &[(&stale_us, Type::INT8)],
    )?;

    fn series(out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    }
    /// PgQueuer's form: one sample per (entrypoint, status) row, labelled as it labels.
    fn by_status(out: &mut String, name: &str, help: &str, rows: &[Row]) -> Result<()> {
        series(out, name, help);
        for row in rows {
            let (entrypoint, status): (String, String) = (row.try_get(0)?, row.try_get(1)?);
            let n = count_of(row, "n")?;
            let _ = writeln!(
                out,
                "{name}{{aggregation=\"sum\",entrypoint=\"{}\",status=\"{}\"}} {n}",
                label_value(&entrypoint),
                label_value(&status)
            );
        }
        Ok(())
    }
    let mut out = String::new();
    by_status(
        &mut out,
        "pgqueuer_queue_count",
        "Jobs in the queue table, by entrypoint and status.",
        &queue,
    )?;
    by_status(
        &mut out,
        "pgqueuer_logs_count",
        "Job transitions logged over the last 5 minutes, by entrypoint and status.",
        &logs,
    )?;
    let limited: Vec<&SlotUse> = slots.iter().filter(|s| s.highest.is_some()).collect();
    series(
        &mut out,
        "pgqueuer_slots_in_use",
        "Concurrency slots held by picked jobs, per entrypoint with a limit.",
    );
    for slot in &limited {
        let _ = writeln!(
            out,
            "pgqueuer_slots_in_use{{entrypoint=\"{}\"}} {}",
            label_value(&slot.entrypoint),
            slot.held
        );
    }
    series(
        &mut out,
        "pgqueuer_slot_limit_evidence",
        "The highest slot held plus one: the smallest concurrency limit the worker holding \
         it can have declared. Above a worker's own limit, another declares a larger one.",
    );
    for slot in &limited {
        let _ = writeln!(
            out,
            "pgqueuer_slot_limit_evidence{{entrypoint=\"{}\"}} {}",
            label_value(&slot.entrypoint),
            slot.highest.unwrap_or(-1) + 1
        );
    }
    series(
        &mut out,
        "pgqueuer_oldest_queued_age_seconds",
        "How long the longest-waiting eligible queued job has waited, by entrypoint.",
    );
    let entrypoints: Vec<String> = health.try_get("entrypoints")?;
    let ages: Vec<f64> = health.try_get("ages")?;
    for (entrypoint, age) in entrypoints.iter().zip(&ages) {
        let _ = writeln!(
            out,
            "pgqueuer_oldest_queued_age_seconds{{entrypoint=\"{}\"}} {}",
            label_value(entrypoint),
            age.max(0.0)
        );
    }
    series(
        &mut out,
        "pgqueuer_stale_picked_jobs",
        &format!(
            "Picked jobs without a heartbeat for {} s (their worker may be gone).",
            stale_after.as_secs_f64()
        ),
    );
    let _ = writeln!(
        out,
        "pgqueuer_stale_picked_jobs {}",
        count_of(&health, "stale")?
    );
    series(
        &mut out,
        "pgqueuer_unaggregated_log_rows",
        "Log rows not yet folded into the statistics table.",
    );
    let _ = writeln!(
        out,
        "pgqueuer_unaggregated_log_rows {}",
        count_of(&health, "unaggregated")?
    );
    Ok(out)
}

/// A label value as the Prometheus text format writes it: backslash, double quote and
/// line feed escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
    client.batch_execute(&sql::channel_listen(channel))?;
    Ok(())
}

/// Runs `statements` (several, separated by semicolons) as one transaction.
fn run_in_transaction<C: GenericClient>(client: &mut C, statements: &str) -> Result<()> {
    let mut tx = client.transaction()?;
    tx.batch_execute(statements)?;
    tx.commit()?;
    Ok(())
}

/// The text whose `hashtext` is the aggregation lock key: the qualified statistics
/// table name, as PgQueuer renders it.
fn statistics_lock_name(settings: &Settings) -> String {
    settings.qualify(&settings.statistics_table)
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
