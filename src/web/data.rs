//! What the pages read: one function per question, each a statement or two on the
//! caller's transaction (which carries the statement timeout). Nothing here writes.

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
use crate::queue::Queue;
use crate::settings::Settings;

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

/// Every entrypoint with rows in the queue table (or `only` that one), by name.
pub(super) fn entrypoint_counts<C: GenericClient>(
    client: &mut C,
    s: &Settings,
    only: Option<&str>,
) -> Result<Vec<EntrypointCounts>> {
    let queue = s.qualify(&s.queue_table);
    let rows: f64 = query_one_alone(
        client,
        "SELECT coalesce((SELECT reltuples FROM pg_class WHERE oid = to_regclass($1::text)), 0)::float8 AS n",
        &[(&queue, Type::TEXT)],
    )?
    .try_get("n")?;
    if rows < EXACT_BELOW {
        exact_counts(client, s, only)
    } else {
        sampled_counts(
            client,
            s,
            only,
            (100.0 * SAMPLE_ROWS / rows).clamp(0.01, 100.0),
        )
    }
}

fn exact_counts<C: GenericClient>(
    client: &mut C,
    s: &Settings,
    only: Option<&str>,
) -> Result<Vec<EntrypointCounts>> {
    let queue = s.qualify(&s.queue_table);
    let sql = format!(
        "SELECT entrypoint,
       count(*) FILTER (WHERE status::text = 'queued') AS queued,
       count(*) FILTER (WHERE status::text = 'picked') AS picked,
       count(*) FILTER (WHERE status::text = 'failed') AS failed,
       count(*) FILTER (WHERE status::text = 'queued' AND execute_after > now()) AS deferred,
       min(execute_after) FILTER (WHERE status::text = 'queued' AND execute_after <= now())
           AS waiting_since
  FROM {queue}
 WHERE $1::text IS NULL OR entrypoint = $1::text
 GROUP BY entrypoint
 ORDER BY entrypoint"
    );
    query_alone(client, &sql, &[(&only, Type::TEXT)])?
        .iter()
        .map(|row| {
            Ok(EntrypointCounts {
                entrypoint: row.try_get("entrypoint")?,
                queued: count(row, "queued")?,
                picked: count(row, "picked")?,
                failed: count(row, "failed")?,
                deferred: count(row, "deferred")?,
                waiting_since: row.try_get("waiting_since")?,
                estimated: false,
            })
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
    s: &Settings,
    only: Option<&str>,
    percent: f64,
) -> Result<Vec<EntrypointCounts>> {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    let sql = format!(
        "WITH RECURSIVE names AS (
    (SELECT entrypoint FROM {queue} WHERE status = 'queued'::{status}
      ORDER BY entrypoint, execute_after LIMIT 1)
    UNION ALL
    SELECT (SELECT q.entrypoint FROM {queue} q
             WHERE q.status = 'queued'::{status} AND q.entrypoint > names.entrypoint
             ORDER BY q.entrypoint, q.execute_after LIMIT 1)
      FROM names WHERE names.entrypoint IS NOT NULL
),
est AS (
    SELECT entrypoint,
           count(*) FILTER (WHERE status = 'queued'::{status}) AS queued,
           count(*) FILTER (WHERE status = 'failed'::{status}) AS failed,
           count(*) FILTER (WHERE status = 'queued'::{status} AND execute_after > now())
               AS deferred,
           count(*) AS n
      FROM {queue} TABLESAMPLE SYSTEM ($1::float8)
     GROUP BY entrypoint
),
scale AS (
    -- The planner's way to the table's rows now: its density at the last ANALYZE times
    -- its size now, over the rows the sample saw.
    SELECT (CASE WHEN c.relpages > 0
                 THEN c.reltuples / c.relpages
                      * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
                 ELSE c.reltuples END)
           / greatest((SELECT sum(n) FROM est), 1) AS factor
      FROM pg_class c WHERE c.oid = to_regclass($3::text)
),
picked AS (
    SELECT entrypoint, count(*) AS picked
      FROM {queue} WHERE status = 'picked'::{status} GROUP BY entrypoint
),
every AS (
    SELECT entrypoint FROM names WHERE entrypoint IS NOT NULL
    UNION SELECT entrypoint FROM est
    UNION SELECT entrypoint FROM picked
)
SELECT e.entrypoint,
       round(coalesce(est.queued, 0) * scale.factor)::bigint AS queued,
       round(coalesce(est.failed, 0) * scale.factor)::bigint AS failed,
       round(coalesce(est.deferred, 0) * scale.factor)::bigint AS deferred,
       coalesce(p.picked, 0) AS picked,
       (SELECT min(q.execute_after) FROM {queue} q
         WHERE q.status = 'queued'::{status} AND q.entrypoint = e.entrypoint) AS first_due,
       now() AS now
  FROM every e
 CROSS JOIN scale
  LEFT JOIN est USING (entrypoint)
  LEFT JOIN picked p USING (entrypoint)
 WHERE $2::text IS NULL OR e.entrypoint = $2::text
 ORDER BY e.entrypoint"
    );
    query_alone(
        client,
        &sql,
        &[
            (&percent, Type::FLOAT8),
            (&only, Type::TEXT),
            (&queue, Type::TEXT),
        ],
    )?
    .iter()
    .map(|row| {
        let first_due: Option<SystemTime> = row.try_get("first_due")?;
        let now: SystemTime = row.try_get("now")?;
        let mut queued = count(row, "queued")?;
        // A queued job exists (the index said so) even if the sample saw none.
        if first_due.is_some() && queued == 0 {
            queued = 1;
        }
        Ok(EntrypointCounts {
            entrypoint: row.try_get("entrypoint")?,
            queued,
            picked: count(row, "picked")?,
            failed: count(row, "failed")?,
            deferred: count(row, "deferred")?,
            waiting_since: first_due.filter(|t| *t <= now),
            estimated: true,
        })
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
        s: &Settings,
        only: Option<&str>,
    ) -> Result<Vec<Bucket>> {
        let full = self
            .full_at
            .is_none_or(|at| at.elapsed() >= FULL_READ_EVERY);
        let now_minute: i64 = query_one_alone(
            client,
            "SELECT (EXTRACT(EPOCH FROM now())::bigint / 60) AS m",
            &[],
        )?
        .try_get("m")?;
        let from = if full {
            now_minute - i64::try_from(HISTORY.as_secs() / 60).unwrap_or(1440)
        } else {
            self.settled_before
        };
        let priorities: Vec<i32> =
            query_one_alone(client, &crate::sql::ops::statistics_priorities(s), &[])?
                .try_get("priorities")?;
        // Streamed, not collected: a full read is tens of thousands of rows.
        let from_secs = from * 60;
        let params: [(&(dyn postgres::types::ToSql + Sync), Type); 2] =
            [(&from_secs, Type::INT8), (&priorities, Type::INT4_ARRAY)];
        let mut rows = client.query_typed_raw(&minutes_since(s), params)?;
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

/// Transitions per minute, status and entrypoint since `$1 bigint` (Unix seconds):
/// statistics buckets (`$2 int[]`: their priorities) plus unaggregated log rows, in one
/// snapshot.
fn minutes_since(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    let stats = s.qualify(&s.statistics_table);
    let since = "to_timestamp($1::bigint)";
    let recent = crate::sql::ops::statistics_since(since, "$2");
    format!(
        "SELECT minute, status, entrypoint, sum(n)::bigint AS n FROM (
    SELECT (EXTRACT(EPOCH FROM created)::bigint / 60) AS minute, status::text AS status,
           entrypoint, sum(count) AS n
      FROM {stats} st
     WHERE {recent}
     GROUP BY 1, 2, 3
    UNION ALL
    SELECT (EXTRACT(EPOCH FROM created)::bigint / 60), status::text, entrypoint, count(*)
      FROM {log}
     WHERE created >= {since} AND NOT aggregated
     GROUP BY 1, 2, 3
) t
 GROUP BY minute, status, entrypoint"
    )
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
    s: &Settings,
    window: Duration,
    only: Option<&str>,
) -> Result<Vec<Durations>> {
    let log = s.qualify(&s.queue_table_log);
    let micros = i64::try_from(window.as_micros()).unwrap_or(i64::MAX);
    let sql = format!(
        "WITH rows AS (
    SELECT entrypoint, status::text AS status, created,
           lag(status::text) OVER w AS before, lag(created) OVER w AS before_at
      FROM {log}
     WHERE created > now() - $1::bigint * interval '1 microsecond'
       AND ($2::text IS NULL OR entrypoint = $2::text)
    WINDOW w AS (PARTITION BY job_id ORDER BY created, id)
), d AS (
    SELECT entrypoint, EXTRACT(EPOCH FROM created - before_at)::float8 AS secs
      FROM rows
     WHERE before = 'picked'
       AND status IN ('successful', 'exception', 'canceled', 'failed', 'deleted')
)
SELECT entrypoint, count(*) AS completed,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY secs) AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY secs) AS p99,
       max(secs) AS max
  FROM d
 GROUP BY entrypoint
 ORDER BY entrypoint"
    );
    query_alone(client, &sql, &[(&micros, Type::INT8), (&only, Type::TEXT)])?
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
    s: &Settings,
    status: Option<Status>,
    entrypoint: Option<&str>,
    (after, offset): (JobId, i64),
    limit: i64,
) -> Result<Vec<JobRow>> {
    let queue = s.qualify(&s.queue_table);
    let sql = format!(
        "SELECT id, priority, created, execute_after, status::text AS status, entrypoint,
       attempts, slot, queue_manager_id, octet_length(payload) AS payload_bytes
  FROM {queue}
 WHERE id > $1::bigint
   AND ($2::text IS NULL OR status::text = $2::text)
   AND ($3::text IS NULL OR entrypoint = $3::text)
 ORDER BY id
 LIMIT $4::bigint OFFSET $5::bigint"
    );
    let status = status.map(Status::as_str);
    query_alone(
        client,
        &sql,
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

pub(super) use crate::sql::queue::HISTORY_SHOWN;
use crate::sql::queue::failure_summary;

/// The job page's row: the job with at most [`PAYLOAD_SHOWN`](crate::sql::queue::PAYLOAD_SHOWN) bytes of its payload and
/// none of its headers (those come as text, bounded).
#[derive(Debug, Clone)]
pub(super) struct JobDetail {
    pub job: Job,
    /// The whole payload's size (`job.payload` holds its first bytes).
    pub payload_bytes: Option<i64>,
    /// The headers' JSON text, at most [`HEADERS_SHOWN`](crate::sql::queue::HEADERS_SHOWN) characters; `None` for SQL
    /// NULL and JSON `null`.
    pub headers_text: Option<String>,
    /// The whole headers text's size.
    pub headers_bytes: i64,
}

/// The job's row (while it is in the queue table), bounded as [`JobDetail`] says, and
/// its latest [`HISTORY_SHOWN`] log rows (oldest first), tracebacks bounded.
pub(super) fn job<C: GenericClient>(
    client: &mut C,
    queue: &Queue,
    id: JobId,
) -> Result<(Option<JobDetail>, Vec<LogEntry>)> {
    let sql = queue.statements();
    let job = query_alone(client, &sql.select_shown, &[(&id, Type::INT8)])?
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
    let history = query_alone(client, &sql.log_select_shown, &[(&id, Type::INT8)])?
        .iter()
        .map(LogEntry::from_row)
        .collect::<Result<_>>()?;
    Ok((job, history))
}

/// Held (`failed`) jobs with their reasons, oldest first: without payloads and headers
/// (the list shows neither), reasons cut.
pub(super) fn failed<C: GenericClient>(
    client: &mut C,
    queue: &Queue,
    limit: i64,
) -> Result<Vec<FailedJob>> {
    query_alone(
        client,
        &queue.statements().select_failed_shown,
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
    s: &Settings,
    entrypoint: Option<&str>,
    limit: i64,
) -> Result<Vec<LoggedException>> {
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    let sql = format!(
        "SELECT job_id, created, entrypoint, {failure} AS traceback
  FROM {log}
 WHERE status = 'exception'::{status} AND ($1::text IS NULL OR entrypoint = $1::text)
 ORDER BY created DESC, id DESC
 LIMIT $2::bigint",
        failure = failure_summary("traceback")
    );
    query_alone(
        client,
        &sql,
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
pub(super) struct HeldSlot {
    pub id: JobId,
    pub slot: Option<i64>,
    pub queue_manager_id: Option<Uuid>,
    pub heartbeat: SystemTime,
}

pub(super) fn held_slots<C: GenericClient>(
    client: &mut C,
    s: &Settings,
    entrypoint: &str,
) -> Result<Vec<HeldSlot>> {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    let sql = format!(
        "SELECT id, slot, queue_manager_id, heartbeat
  FROM {queue}
 WHERE status = 'picked'::{status} AND entrypoint = $1::text
 ORDER BY slot NULLS LAST, id
 LIMIT 500"
    );
    query_alone(client, &sql, &[(&entrypoint, Type::TEXT)])?
        .iter()
        .map(|row| {
            Ok(HeldSlot {
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

pub(super) fn system<C: GenericClient>(client: &mut C, s: &Settings) -> Result<SystemInfo> {
    let names = [
        &s.queue_table,
        &s.queue_table_log,
        &s.statistics_table,
        &s.schedules_table,
    ];
    let qualified: Vec<String> = names.iter().map(|n| s.qualify(n)).collect();
    let plain: Vec<String> = names.iter().map(|n| (*n).clone()).collect();
    let rows = query_alone(
        client,
        "SELECT n.name, c.oid IS NOT NULL AS exists,
       coalesce(c.relpersistence = 'p', false) AS logged,
       coalesce(c.reltuples, 0)::bigint AS estimated_rows,
       coalesce(pg_total_relation_size(c.oid), 0) AS total_bytes
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS n(name, qualified, ord)
  LEFT JOIN pg_class c ON c.oid = to_regclass(n.qualified)
 ORDER BY n.ord",
        &[(&plain, Type::TEXT_ARRAY), (&qualified, Type::TEXT_ARRAY)],
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
    let head = query_one_alone(
        client,
        "SELECT current_setting('server_version') AS version, current_database() AS db",
        &[],
    )?;
    let log = s.qualify(&s.queue_table_log);
    let unaggregated = if tables.get(1).is_some_and(|t| t.exists) {
        let row = query_one_alone(
            client,
            &format!("SELECT count(*) AS n FROM {log} WHERE NOT aggregated"),
            &[],
        )?;
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
