//! Insight queries: stale jobs, active workers, backlog age, slots in use, the limit
//! audit, throughput and a connection's encryption. Each reads; none writes.

use std::time::{Duration, SystemTime};

use postgres::types::Type;
use postgres::{GenericClient, Row};
use uuid::Uuid;

#[cfg(doc)]
use super::{aggregate_log, prune_log};
use super::{count_of, micros_of};
use crate::connect;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::job::{Job, Status, status_of};
use crate::settings::Settings;
use crate::sql::ops as sql;

/// A picked job whose worker has not sent a heartbeat for longer than a threshold (one
/// row of [`stale_jobs`]). Such a job is re-claimed by the next worker whose heartbeat
/// timeout is shorter than its age.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StaleJob {
    /// The job's row without its data: a listing of stale jobs reads no payload or
    /// headers (`None` here, whatever the row holds), so that a queue of large payloads
    /// costs it nothing; [`crate::Queue::job`] reads a job whole.
    pub job: Job,
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
    /// Slots in use: picked jobs holding a slot.
    pub in_use: u64,
    /// The highest slot in use: the worker holding it declares a limit above it.
    pub highest: Option<i64>,
    /// Picked jobs without a slot (an entrypoint without a limit, or jobs picked before
    /// slots existed).
    pub unslotted: u64,
}

/// The slots in use per entrypoint with picked jobs, by entrypoint. Slots are numbered
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
                in_use: count_of(row, "in_use")?,
                highest: row.try_get("highest")?,
                unslotted: count_of(row, "unslotted")?,
            })
        })
        .collect()
}

/// One rate-limit window's use (one row of [`rates_in_use`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateUse {
    /// The entrypoint.
    pub entrypoint: String,
    /// The window's length.
    pub per: Duration,
    /// Starts within the last window, by every worker that declares it.
    pub starts_in_window: u64,
    /// The window's units: the starts it allows, for the largest limit declared for this
    /// entrypoint and window since its units were made (units are never taken away, so a
    /// limit lowered since shows its old value here).
    pub units: u64,
    /// The starts the limit in force allows: the stored one ([`super::set_limits`]) where
    /// the entrypoint has stored rate limits, else the largest that a running worker of
    /// this crate declares for the window ([`super::declared_limits`]). `None` when no
    /// worker keeps the window now.
    pub limit: Option<u64>,
}

/// The rate in use of every rate-limit window with units in the rates table, by
/// entrypoint and window; empty where the table does not exist (a schema PgQueuer made).
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`].
pub fn rates_in_use<C: GenericClient>(client: &mut C, settings: &Settings) -> Result<Vec<RateUse>> {
    settings.validate()?;
    let name = settings.rates_table();
    let exists = connect::query_one_alone(
        client,
        crate::sql::rates::RATES_EXIST,
        &[(&name, Type::TEXT), (&settings.schema, Type::TEXT)],
    )?;
    if !exists.try_get::<_, bool>(0)? {
        return Ok(Vec::new());
    }
    let rows = connect::query_alone(client, &crate::sql::rates::rates_by_window(settings), &[])?;
    // A stored row this crate cannot read shows as no stored limit here (`pgq limits`
    // names it).
    let stored = super::stored_limits(client, settings).unwrap_or_default();
    let declared = super::declared_limits(client, settings)?;
    rows.iter()
        .map(|row| {
            let per_us: i64 = row.try_get("per_us")?;
            let entrypoint: String = row.try_get("entrypoint")?;
            let per = Duration::from_micros(u64::try_from(per_us).unwrap_or(0));
            let limit = match stored
                .iter()
                .find(|s| s.entrypoint == entrypoint)
                .and_then(|s| s.rates.as_ref())
            {
                Some(rates) => rates
                    .iter()
                    .find(|r| r.per() == per)
                    .map(|r| u64::from(r.starts())),
                None => declared
                    .iter()
                    .filter(|d| d.entrypoint == entrypoint)
                    .flat_map(|d| d.rates.iter())
                    .filter_map(|text| crate::RateLimit::parse(text).ok())
                    .filter(|r| r.per() == per)
                    .map(|r| u64::from(r.starts()))
                    .max(),
            };
            Ok(RateUse {
                entrypoint,
                per,
                starts_in_window: count_of(row, "spent")?,
                units: count_of(row, "units")?,
                limit,
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

impl StaleJob {
    fn from_row(row: &Row) -> Result<StaleJob> {
        Ok(StaleJob {
            job: Job::from_row(row)?,
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
