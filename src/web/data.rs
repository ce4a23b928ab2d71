//! What the pages read: one function per question, each a statement or two of
//! [`WebSql`] on the caller's transaction (which carries the statement timeout).
//! Nothing here writes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use fallible_iterator::FallibleIterator;
use postgres::types::Type;
use postgres::{GenericClient, Row};
use uuid::Uuid;

use crate::connect::{query_alone, query_one_alone};
use crate::error::Result;
use crate::job::{FailedJob, Failure, Job, JobId, LogEntry, Status, status_of};
use crate::sql::web::{self as sql, WebSql};

/// The statuses a job's outcome is logged with, as the throughput chart splits them.
pub(super) const OUTCOMES: [&str; 3] = ["successful", "exception", "canceled"];

fn count(row: &Row, column: &str) -> Result<u64> {
    let n: i64 = row.try_get(column)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// One entrypoint's jobs in the queue table.
#[derive(Debug, Clone, Default)]
pub(super) struct EntrypointCounts {
    pub entrypoint: String,
    pub queued: u64,
    pub picked: u64,
    pub failed: u64,
    /// When the longest-waiting eligible queued job became eligible.
    pub waiting_since: Option<SystemTime>,
    /// Queued jobs not yet due.
    pub deferred: u64,
    /// Whether `queued`, `failed` and `deferred` are estimated from a sample (`picked`
    /// and `waiting_since` are always exact).
    pub estimated: bool,
}

/// Above this many rows (the planner's estimate) the queued, deferred and failed counts
/// are estimated from a sample of about [`SAMPLE_ROWS`] rows: counting a million rows
/// takes half a second, a sample a few milliseconds.
pub(super) const EXACT_BELOW: f64 = 200_000.0;
const SAMPLE_ROWS: f64 = 10_000.0;

/// The most entrypoints a page lists (the busiest first); the rest are counted, and a
/// filter finds any of them.
pub(super) const SHOWN_ENTRYPOINTS: usize = 100;

/// The entrypoints with rows in the queue table that a page lists, and the figures of
/// all of them.
#[derive(Debug, Clone, Default)]
pub(super) struct Entrypoints {
    /// At most the busiest asked for (most jobs in the table), by name.
    pub shown: Vec<EntrypointCounts>,
    /// How many entrypoints match (the shown ones and those left out).
    pub matching: u64,
    /// Every matching entrypoint's counts added up (`entrypoint` empty).
    pub all: EntrypointCounts,
}

impl Entrypoints {
    /// How many matching entrypoints are not shown.
    pub(super) fn left_out(&self) -> u64 {
        self.matching.saturating_sub(self.shown.len() as u64)
    }
}

/// The entrypoints with rows in the queue table (or `only` that one) whose name contains
/// `filter`: at most `shown` of them, the busiest, by name, with the figures of all.
pub(super) fn entrypoint_counts<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    only: Option<&str>,
    filter: Option<&str>,
    shown: usize,
) -> Result<Entrypoints> {
    let rows: f64 = query_one_alone(
        client,
        sql::CATALOG_ROW_ESTIMATE,
        &[(&s.queue_table, Type::TEXT)],
    )?
    .try_get("n")?;
    let limit = i64::try_from(shown).unwrap_or(i64::MAX);
    let (read, estimated) = if rows < EXACT_BELOW {
        (exact_counts(client, s, only, filter, limit)?, false)
    } else {
        let percent = (100.0 * SAMPLE_ROWS / rows).clamp(0.01, 100.0);
        (
            sampled_counts(client, s, only, filter, limit, percent)?,
            true,
        )
    };
    let mut out = Entrypoints::default();
    if let Some((row, _)) = read.first() {
        out.matching = count(row, "matching")?;
        let now = SystemTime::now();
        out.all = EntrypointCounts {
            entrypoint: String::new(),
            queued: count(row, "all_queued")?,
            picked: count(row, "all_picked")?,
            failed: count(row, "all_failed")?,
            deferred: count(row, "all_deferred")?,
            waiting_since: row
                .try_get::<_, Option<SystemTime>>("all_due")?
                .filter(|t| *t <= now),
            estimated,
        };
    }
    out.shown = read.into_iter().map(|(_, counts)| counts).collect();
    out.shown.sort_by(|a, b| a.entrypoint.cmp(&b.entrypoint));
    Ok(out)
}

fn exact_counts<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    only: Option<&str>,
    filter: Option<&str>,
    limit: i64,
) -> Result<Vec<(Row, EntrypointCounts)>> {
    query_alone(
        client,
        &s.queue_count_by_entrypoint,
        &[
            (&only, Type::TEXT),
            (&filter, Type::TEXT),
            (&limit, Type::INT8),
        ],
    )?
    .into_iter()
    .map(|row| {
        let counts = EntrypointCounts {
            entrypoint: row.try_get("entrypoint")?,
            queued: count(&row, "queued")?,
            picked: count(&row, "picked")?,
            failed: count(&row, "failed")?,
            deferred: count(&row, "deferred")?,
            waiting_since: row.try_get("waiting_since")?,
            estimated: false,
        };
        Ok((row, counts))
    })
    .collect()
}

/// The counts of a large queue: queued, deferred and failed as shares of a block sample
/// of `percent` of the table, times the table's rows as the planner reckons them now
/// (a share varies far less from sample to sample than the sample's size does); the entrypoints with queued jobs found by a loose
/// scan of the queued-jobs index, so none is missed however few its jobs; picked counts
/// and each entrypoint's earliest due job read exactly through their indexes.
fn sampled_counts<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    only: Option<&str>,
    filter: Option<&str>,
    limit: i64,
    percent: f64,
) -> Result<Vec<(Row, EntrypointCounts)>> {
    query_alone(
        client,
        &s.queue_sample_by_entrypoint,
        &[
            (&percent, Type::FLOAT8),
            (&only, Type::TEXT),
            (&s.queue_table, Type::TEXT),
            (&filter, Type::TEXT),
            (&limit, Type::INT8),
        ],
    )?
    .into_iter()
    .map(|row| {
        let first_due: Option<SystemTime> = row.try_get("first_due")?;
        let now: SystemTime = row.try_get("now")?;
        let mut queued = count(&row, "queued")?;
        // A queued job exists (the index said so) even if the sample saw none.
        if first_due.is_some() && queued == 0 {
            queued = 1;
        }
        let counts = EntrypointCounts {
            entrypoint: row.try_get("entrypoint")?,
            queued,
            picked: count(&row, "picked")?,
            failed: count(&row, "failed")?,
            deferred: count(&row, "deferred")?,
            waiting_since: first_due.filter(|t| *t <= now),
            estimated: true,
        };
        Ok((row, counts))
    })
    .collect()
}

/// Transitions of one minute, status and entrypoint.
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    pub minute: SystemTime,
    pub status: &'static str,
    pub entrypoint: Arc<str>,
    pub count: u64,
}

/// How far back the charts and window figures go.
pub(super) const HISTORY: Duration = Duration::from_secs(86_400);
/// Minutes older than this are taken as final between full reads (a minute's log rows
/// are counted whether or not an aggregation has folded them yet, so only a row whose
/// transaction commits later than this is missed, until the next full read).
const SETTLE_MINUTES: i64 = 2;
/// A full read of the history this often catches what settled minutes missed.
const FULL_READ_EVERY: Duration = Duration::from_secs(60 * 60);

/// Transitions per minute over the last [`HISTORY`], kept between requests: the first
/// request reads the whole day (statistics plus log rows not yet aggregated, in one
/// statement, so each row is counted once whether or not an aggregation moved it), later
/// ones only the last [`SETTLE_MINUTES`] minutes, through the indexes on the buckets'
/// and the log's times. A day of a busy queue is a million rows or more; a page does
/// not read them each time, and however many people watch, the database sees one reader.
#[derive(Debug, Default)]
pub(super) struct Minutes {
    /// (minute since the epoch, status, entrypoint) -> transitions; names are shared.
    counts: HashMap<(i64, Status, Arc<str>), u64>,
    names: HashSet<Arc<str>>,
    settled_before: i64,
    full_at: Option<Instant>,
}

impl Minutes {
    /// The buckets of the last [`HISTORY`], for `only` one entrypoint or all.
    pub(super) fn read<C: GenericClient>(
        &mut self,
        client: &mut C,
        s: &WebSql,
        only: Option<&str>,
    ) -> Result<Vec<Bucket>> {
        let full = self
            .full_at
            .is_none_or(|at| at.elapsed() >= FULL_READ_EVERY);
        let now_minute: i64 = query_one_alone(client, sql::CLOCK_MINUTE, &[])?.try_get("m")?;
        let from = if full {
            now_minute - i64::try_from(HISTORY.as_secs() / 60).unwrap_or(1440)
        } else {
            self.settled_before
        };
        let priorities: Vec<i32> =
            query_one_alone(client, &s.statistics_priorities, &[])?.try_get("priorities")?;
        // Streamed, not collected: a full read is tens of thousands of rows.
        let from_secs = from * 60;
        let params: [(&(dyn postgres::types::ToSql + Sync), Type); 2] =
            [(&from_secs, Type::INT8), (&priorities, Type::INT4_ARRAY)];
        let mut rows = client.query_typed_raw(&s.log_count_by_minute, params)?;
        // Into a map of its own first: a read that fails half way (a statement timeout)
        // leaves the kept minutes as they were.
        let mut fresh: HashMap<(i64, Status, Arc<str>), u64> = HashMap::new();
        while let Some(row) = rows.next()? {
            let Some(status) = Status::parse(row.try_get("status")?) else {
                continue;
            };
            let name: &str = row.try_get("entrypoint")?;
            let name = match self.names.get(name) {
                Some(shared) => Arc::clone(shared),
                None => {
                    let shared: Arc<str> = Arc::from(name);
                    self.names.insert(Arc::clone(&shared));
                    shared
                }
            };
            let key = (row.try_get::<_, i64>("minute")?, status, name);
            *fresh.entry(key).or_default() += count(&row, "n")?;
        }
        drop(rows);
        if full {
            self.counts = fresh;
            self.full_at = Some(Instant::now());
        } else {
            self.counts.retain(|(m, _, _), _| *m < from);
            self.counts.extend(fresh);
        }
        let oldest = now_minute - i64::try_from(HISTORY.as_secs() / 60).unwrap_or(1440);
        self.counts.retain(|(m, _, _), _| *m >= oldest);
        if full {
            // Names no bucket uses any more go with the full read.
            let used: HashSet<&Arc<str>> = self.counts.keys().map(|(_, _, e)| e).collect();
            let keep: HashSet<Arc<str>> = used.into_iter().cloned().collect();
            self.names = keep;
        }
        self.settled_before = now_minute - SETTLE_MINUTES;
        let mut buckets: Vec<Bucket> = self
            .counts
            .iter()
            .filter(|((_, _, e), _)| only.is_none_or(|o| o == &**e))
            .map(|((m, status, entrypoint), n)| Bucket {
                minute: SystemTime::UNIX_EPOCH
                    + Duration::from_secs(u64::try_from(*m).unwrap_or(0) * 60),
                status: status.as_str(),
                entrypoint: Arc::clone(entrypoint),
                count: *n,
            })
            .collect();
        buckets.sort_by_key(|b| b.minute);
        Ok(buckets)
    }
}

/// Handler durations of one entrypoint (or every one) from the log over a window: from
/// each `picked` row to the job's next outcome row.
#[derive(Debug, Clone, Default)]
pub(super) struct Durations {
    pub entrypoint: String,
    pub completed: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

pub(super) fn durations<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    window: Duration,
    only: Option<&str>,
) -> Result<Vec<Durations>> {
    let micros = i64::try_from(window.as_micros()).unwrap_or(i64::MAX);
    query_alone(
        client,
        &s.log_select_durations,
        &[(&micros, Type::INT8), (&only, Type::TEXT)],
    )?
    .iter()
    .map(|row| {
        Ok(Durations {
            entrypoint: row.try_get("entrypoint")?,
            completed: count(row, "completed")?,
            p50: row.try_get("p50")?,
            p95: row.try_get("p95")?,
            p99: row.try_get("p99")?,
            max: row.try_get("max")?,
        })
    })
    .collect()
}

/// One row of the jobs list.
#[derive(Debug, Clone)]
pub(super) struct JobRow {
    pub id: JobId,
    pub priority: i32,
    pub created: SystemTime,
    pub execute_after: SystemTime,
    pub status: Status,
    pub entrypoint: String,
    pub attempts: i32,
    pub slot: Option<i64>,
    pub queue_manager_id: Option<Uuid>,
    pub payload_bytes: Option<i32>,
}

/// Up to `limit` jobs after id `after` (and `offset` more skipped, for PgQueuer's
/// `page=` links), in id order (the primary key's, so a page of any filter costs the
/// same), filtered by status and entrypoint.
pub(super) fn jobs<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    status: Option<Status>,
    entrypoint: Option<&str>,
    (after, offset): (JobId, i64),
    limit: i64,
) -> Result<Vec<JobRow>> {
    let status = status.map(Status::as_str);
    query_alone(
        client,
        &s.queue_select_page,
        &[
            (&after, Type::INT8),
            (&status, Type::TEXT),
            (&entrypoint, Type::TEXT),
            (&limit, Type::INT8),
            (&offset, Type::INT8),
        ],
    )?
    .iter()
    .map(|row| {
        Ok(JobRow {
            id: row.try_get("id")?,
            priority: row.try_get("priority")?,
            created: row.try_get("created")?,
            execute_after: row.try_get("execute_after")?,
            status: status_of(row)?,
            entrypoint: row.try_get("entrypoint")?,
            attempts: row.try_get("attempts")?,
            slot: row.try_get("slot")?,
            queue_manager_id: row.try_get("queue_manager_id")?,
            payload_bytes: row.try_get("payload_bytes")?,
        })
    })
    .collect()
}

pub(super) use crate::sql::web::HISTORY_SHOWN;

/// The job page's row: the job with at most [`PAYLOAD_SHOWN`](sql::PAYLOAD_SHOWN) bytes
/// of its payload and none of its headers (those come as text, bounded).
#[derive(Debug, Clone)]
pub(super) struct JobDetail {
    pub job: Job,
    /// The whole payload's size (`job.payload` holds its first bytes).
    pub payload_bytes: Option<i64>,
    /// The headers' JSON text, at most [`HEADERS_SHOWN`](sql::HEADERS_SHOWN) characters;
    /// `None` for SQL NULL and JSON `null`.
    pub headers_text: Option<String>,
    /// The whole headers text's size.
    pub headers_bytes: i64,
}

/// The job's row (while it is in the queue table), bounded as [`JobDetail`] says, and
/// its latest [`HISTORY_SHOWN`] log rows (oldest first), tracebacks bounded.
pub(super) fn job<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    id: JobId,
) -> Result<(Option<JobDetail>, Vec<LogEntry>)> {
    let job = query_alone(client, &s.queue_select_shown, &[(&id, Type::INT8)])?
        .iter()
        .map(|row| -> Result<JobDetail> {
            Ok(JobDetail {
                job: Job::from_row(row)?,
                payload_bytes: row.try_get("payload_bytes")?,
                headers_text: row.try_get("headers_text")?,
                headers_bytes: row.try_get("headers_bytes")?,
            })
        })
        .next()
        .transpose()?;
    let history = query_alone(client, &s.log_select_shown, &[(&id, Type::INT8)])?
        .iter()
        .map(LogEntry::from_row)
        .collect::<Result<_>>()?;
    Ok((job, history))
}

/// Held (`failed`) jobs with their reasons, oldest first: without payloads and headers
/// (the list shows neither), reasons cut.
pub(super) fn failed<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    limit: i64,
) -> Result<Vec<FailedJob>> {
    query_alone(
        client,
        &s.queue_select_failed_shown,
        &[(&limit, Type::INT8)],
    )?
    .iter()
    .map(|row| {
        let failure: Option<serde_json::Value> = row.try_get("failure")?;
        Ok(FailedJob {
            job: Job::from_row(row)?,
            failure: failure.as_ref().and_then(Failure::from_json),
        })
    })
    .collect()
}

/// A logged exception (`exception` log row), newest first.
#[derive(Debug, Clone)]
pub(super) struct LoggedException {
    pub job_id: JobId,
    pub created: SystemTime,
    pub entrypoint: String,
    pub failure: Option<Failure>,
}

/// The latest `limit` exceptions (of one entrypoint or all), with the failure's type and
/// message only, cut.
pub(super) fn exceptions<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    entrypoint: Option<&str>,
    limit: i64,
) -> Result<Vec<LoggedException>> {
    query_alone(
        client,
        &s.log_select_exceptions,
        &[(&entrypoint, Type::TEXT), (&limit, Type::INT8)],
    )?
    .iter()
    .map(|row| {
        let traceback: Option<serde_json::Value> = row.try_get("traceback")?;
        Ok(LoggedException {
            job_id: row.try_get("job_id")?,
            created: row.try_get("created")?,
            entrypoint: row.try_get("entrypoint")?,
            failure: traceback.as_ref().and_then(Failure::from_json),
        })
    })
    .collect()
}

/// A picked job's slot, for an entrypoint's page.
#[derive(Debug, Clone)]
pub(super) struct PickedSlot {
    pub id: JobId,
    pub slot: Option<i64>,
    pub queue_manager_id: Option<Uuid>,
    pub heartbeat: SystemTime,
}

pub(super) fn picked_slots<C: GenericClient>(
    client: &mut C,
    s: &WebSql,
    entrypoint: &str,
) -> Result<Vec<PickedSlot>> {
    query_alone(client, &s.queue_select_picked, &[(&entrypoint, Type::TEXT)])?
        .iter()
        .map(|row| {
            Ok(PickedSlot {
                id: row.try_get("id")?,
                slot: row.try_get("slot")?,
                queue_manager_id: row.try_get("queue_manager_id")?,
                heartbeat: row.try_get("heartbeat")?,
            })
        })
        .collect()
}

/// One of the four tables, for the System page.
#[derive(Debug, Clone)]
pub(super) struct TableInfo {
    pub name: String,
    pub exists: bool,
    pub logged: bool,
    pub estimated_rows: i64,
    pub total_bytes: i64,
}

/// The server's version, the four tables and the log rows awaiting aggregation.
pub(super) struct SystemInfo {
    pub server_version: String,
    pub database: String,
    pub tables: Vec<TableInfo>,
    pub unaggregated: u64,
}

pub(super) fn system<C: GenericClient>(client: &mut C, s: &WebSql) -> Result<SystemInfo> {
    let rows = query_alone(
        client,
        sql::CATALOG_SELECT_TABLES,
        &[
            (&s.table_names, Type::TEXT_ARRAY),
            (&s.tables_qualified, Type::TEXT_ARRAY),
        ],
    )?;
    let tables = rows
        .iter()
        .map(|row| {
            Ok(TableInfo {
                name: row.try_get("name")?,
                exists: row.try_get("exists")?,
                logged: row.try_get("logged")?,
                estimated_rows: row.try_get("estimated_rows")?,
                total_bytes: row.try_get("total_bytes")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let head = query_one_alone(client, sql::SERVER_DESCRIBE, &[])?;
    let unaggregated = if tables.get(1).is_some_and(|t| t.exists) {
        let row = query_one_alone(client, &s.log_count_unaggregated, &[])?;
        count(&row, "n")?
    } else {
        0
    };
    Ok(SystemInfo {
        server_version: head.try_get("version")?,
        database: head.try_get("db")?,
        tables,
        unaggregated,
    })
}

#[cfg(test)]
mod tests {
    /// The job page reads as many payload bytes as a payload view shows, no fewer.
    #[test]
    fn the_job_page_reads_what_a_payload_view_shows() {
        assert_eq!(
            usize::try_from(crate::sql::web::PAYLOAD_SHOWN).ok(),
            Some(crate::PayloadView::TEXT_BYTES)
        );
    }
}
