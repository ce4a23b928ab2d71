//! The dashboard's reads (`crate::web`): what its pages show, bounded so that a huge
//! payload, traceback or table costs a page a fixed amount.
//!
//! Rendered once per [`Settings`] into a [`WebSql`], which the dashboard keeps for as
//! long as it serves. Nothing here writes; the dashboard's two actions go through the
//! producer's statements (`sql/queue.rs`).

use std::time::Duration;

use super::ops::{statistics_priorities, statistics_since};
use crate::settings::Settings;

/// Payload bytes the dashboard's job page reads at most (`substring` in the statement:
/// a payload of hundreds of MiB costs the page this much, on every live refresh).
pub(crate) const PAYLOAD_SHOWN: i32 = 16 << 10;
/// Characters of the headers' JSON text the job page reads at most.
pub(crate) const HEADERS_SHOWN: i32 = 16 << 10;
/// Log rows of one job the job page reads at most (the latest ones).
pub(crate) const HISTORY_SHOWN: i64 = 500;
/// Characters of a traceback record's JSON text read whole; of a longer one, the type
/// and message are read cut to [`REASON_SHOWN`] and the traceback text to this.
const TRACEBACK_SHOWN: i32 = 16 << 10;
/// Characters of a failure's type and of its message read at most.
const REASON_SHOWN: i32 = 2000;
/// Picked jobs of one entrypoint its page lists at most.
const PICKED_SHOWN: i64 = 500;

/// The planner's estimate of the rows of the table `$1 text` (a qualified name), 0 when
/// there is no such table: `n float8`.
pub(crate) const CATALOG_ROW_ESTIMATE: &str = "SELECT coalesce((SELECT reltuples FROM pg_class WHERE oid = to_regclass($1::text)), 0)::float8 AS n";

/// The server's minute since the epoch: `m bigint`.
pub(crate) const CLOCK_MINUTE: &str = "SELECT (EXTRACT(EPOCH FROM now())::bigint / 60) AS m";

/// The tables named in `$1 text[]` (bare names, as shown) and `$2 text[]` (qualified,
/// looked up), in that order: whether each exists, is logged, its planner row estimate
/// and its size with indexes and TOAST.
pub(crate) const CATALOG_SELECT_TABLES: &str = "SELECT n.name, c.oid IS NOT NULL AS exists,
       coalesce(c.relpersistence = 'p', false) AS logged,
       coalesce(c.reltuples, 0)::bigint AS estimated_rows,
       coalesce(pg_total_relation_size(c.oid), 0) AS total_bytes
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS n(name, qualified, ord)
  LEFT JOIN pg_class c ON c.oid = to_regclass(n.qualified)
 ORDER BY n.ord";

/// The server's version and the session's database: `version`, `db`.
pub(crate) const SERVER_DESCRIBE: &str =
    "SELECT current_setting('server_version') AS version, current_database() AS db";

/// A statement that reaches the server and reads nothing (`/healthz`).
pub(crate) const PING: &str = "SELECT 1";

/// The statement timeout of the rest of a transaction, in whole milliseconds (at least
/// one: zero would turn the timeout off).
pub(crate) fn statement_timeout(timeout: Duration) -> String {
    format!(
        "SET LOCAL statement_timeout = {}",
        timeout.as_millis().max(1)
    )
}

/// Every statement of the dashboard's pages for one set of object names, and the names
/// some of them take as binds.
#[derive(Debug)]
pub(crate) struct WebSql {
    /// The qualified queue table (the bind of [`CATALOG_ROW_ESTIMATE`] and of
    /// `queue_sample_by_entrypoint`).
    pub(crate) queue_table: String,
    /// The four tables' bare names, for [`CATALOG_SELECT_TABLES`]: queue, log,
    /// statistics, schedules.
    pub(crate) table_names: Vec<String>,
    /// The same tables, qualified.
    pub(crate) tables_qualified: Vec<String>,
    /// `queue_count_by_entrypoint`: per entrypoint (or only `$1`), exact counts, of those
    /// whose name contains `$2` the `$3` busiest (see `busiest`).
    pub(crate) queue_count_by_entrypoint: String,
    /// `queue_sample_by_entrypoint`: per entrypoint (or only `$2`), counts estimated
    /// from a sample of `$1` percent, of those whose name contains `$4` the `$5` busiest.
    pub(crate) queue_sample_by_entrypoint: String,
    /// `statistics_priorities` (see `sql::ops`).
    pub(crate) statistics_priorities: String,
    /// `log_count_by_minute`: transitions per minute since `$1` (Unix seconds).
    pub(crate) log_count_by_minute: String,
    /// `log_select_durations`: handler durations per entrypoint over `$1` µs.
    pub(crate) log_select_durations: String,
    /// `queue_select_page`: a page of the jobs list.
    pub(crate) queue_select_page: String,
    /// `queue_select_shown`: the row `$1` for the job page, payload and headers bounded.
    pub(crate) queue_select_shown: String,
    /// `log_select_shown`: the latest [`HISTORY_SHOWN`] log rows of the job `$1`, oldest
    /// first, tracebacks bounded.
    pub(crate) log_select_shown: String,
    /// `queue_select_failed_shown`: held rows with their latest failure, at most `$1`,
    /// without payloads or headers, reasons cut.
    pub(crate) queue_select_failed_shown: String,
    /// `log_select_exceptions`: the latest `$2` exceptions (of entrypoint `$1` or all).
    pub(crate) log_select_exceptions: String,
    /// `queue_select_picked`: the picked jobs of entrypoint `$1`, by slot.
    pub(crate) queue_select_picked: String,
    /// `log_count_unaggregated`: log rows no aggregation has folded yet.
    pub(crate) log_count_unaggregated: String,
}

impl WebSql {
    /// Renders every statement for `s`, which must have passed `Settings::validate`.
    pub(crate) fn new(s: &Settings) -> WebSql {
        let tables = [
            &s.queue_table,
            &s.queue_table_log,
            &s.statistics_table,
            &s.schedules_table,
        ];
        WebSql {
            queue_table: s.qualify(&s.queue_table),
            table_names: tables.iter().map(|n| (*n).clone()).collect(),
            tables_qualified: tables.iter().map(|n| s.qualify(n)).collect(),
            queue_count_by_entrypoint: busiest(&queue_count_by_entrypoint(s), 2, "waiting_since"),
            queue_sample_by_entrypoint: busiest(&queue_sample_by_entrypoint(s), 4, "first_due"),
            statistics_priorities: statistics_priorities(s),
            log_count_by_minute: log_count_by_minute(s),
            log_select_durations: log_select_durations(s),
            queue_select_page: queue_select_page(s),
            queue_select_shown: queue_select_shown(s),
            log_select_shown: log_select_shown(s),
            queue_select_failed_shown: queue_select_failed_shown(s),
            log_select_exceptions: log_select_exceptions(s),
            queue_select_picked: queue_select_picked(s),
            log_count_unaggregated: format!(
                "SELECT count(*) AS n FROM {} WHERE NOT aggregated",
                s.qualify(&s.queue_table_log)
            ),
        }
    }
}

/// The rows of `counts` (per entrypoint: `queued`, `picked`, `failed`, `deferred` and the
/// time column `due`) whose name contains the text parameter `$first` (all when NULL),
/// the busiest first (most jobs in the table), at most the bigint parameter after it;
/// each row also carries the figures of every matching entrypoint: `matching` (how
/// many), `all_queued`, `all_picked`, `all_failed`, `all_deferred` and `all_due` (the
/// earliest). A queue of 200,000 entrypoints costs a page a few rows, not 200,000.
fn busiest(counts: &str, first: usize, due: &str) -> String {
    let (filter, limit) = (format!("${first}::text"), format!("${}::bigint", first + 1));
    format!(
        "SELECT c.*, count(*) OVER () AS matching,
       sum(c.queued) OVER ()::bigint AS all_queued, sum(c.picked) OVER ()::bigint AS all_picked,
       sum(c.failed) OVER ()::bigint AS all_failed, sum(c.deferred) OVER ()::bigint AS all_deferred,
       min(c.{due}) OVER () AS all_due
  FROM ({counts}) c
 WHERE {filter} IS NULL OR strpos(c.entrypoint, {filter}) > 0
 ORDER BY c.queued + c.picked + c.failed DESC, c.entrypoint
 LIMIT {limit}"
    )
}

/// Per entrypoint with rows (or only `$1 text`), by name: `queued`, `picked`, `failed`,
/// `deferred` (queued, not due) and `waiting_since` (the earliest due time among due
/// queued jobs), every count exact.
fn queue_count_by_entrypoint(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
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
    )
}

/// The counts of a large queue, per entrypoint (or only `$2 text`), by name: queued,
/// deferred and failed as shares of a block sample of `$1 float8` percent of the table,
/// times the table's rows as the planner reckons them now (`$3 text`: the qualified
/// table); the entrypoints with queued jobs found by a loose scan of the queued-jobs
/// index, so none is missed however few its jobs; `picked` and each entrypoint's
/// `first_due` read exactly through their indexes; `now`, the server's time.
fn queue_sample_by_entrypoint(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
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
    )
}

/// Transitions per minute, status and entrypoint since `$1 bigint` (Unix seconds):
/// statistics buckets (`$2 int[]`: their priorities) plus unaggregated log rows, in one
/// snapshot: `minute`, `status`, `entrypoint`, `n`.
fn log_count_by_minute(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    let stats = s.qualify(&s.statistics_table);
    let since = "to_timestamp($1::bigint)";
    let recent = statistics_since(since, "$2");
    format!(
        "SELECT minute, status, entrypoint, sum(n)::bigint AS n FROM (
    SELECT (EXTRACT(EPOCH FROM created)::bigint / 60) AS minute, status::text AS status,
           entrypoint, sum(count) AS n
      FROM {stats} st
     WHERE {recent} AND isfinite(created)
     GROUP BY 1, 2, 3
    UNION ALL
    SELECT (EXTRACT(EPOCH FROM created)::bigint / 60), status::text, entrypoint, count(*)
      FROM {log}
     WHERE created >= {since} AND isfinite(created) AND NOT aggregated
     GROUP BY 1, 2, 3
) t
 GROUP BY minute, status, entrypoint"
    )
}

/// Handler durations per entrypoint (or only `$2 text`) over the last `$1 bigint`
/// microseconds, from each `picked` log row to the job's next outcome row: `completed`
/// and the seconds' `p50`, `p95`, `p99` and `max`.
fn log_select_durations(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    format!(
        "WITH rows AS (
    SELECT entrypoint, status::text AS status, created,
           lag(status::text) OVER w AS before, lag(created) OVER w AS before_at
      FROM {log}
     WHERE created > now() - $1::bigint * interval '1 microsecond' AND isfinite(created)
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
    )
}

/// Up to `$4 bigint` rows after id `$1 bigint` (and `$5 bigint` more skipped), in id
/// order (the primary key's, so a page of any filter costs the same), of status `$2
/// text` and entrypoint `$3 text` where given; the payload's size, not the payload.
fn queue_select_page(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT id, priority, created, execute_after, status::text AS status, entrypoint,
       attempts, slot, queue_manager_id, octet_length(payload) AS payload_bytes
  FROM {queue}
 WHERE id > $1::bigint
   AND ($2::text IS NULL OR status::text = $2::text)
   AND ($3::text IS NULL OR entrypoint = $3::text)
 ORDER BY id
 LIMIT $4::bigint OFFSET $5::bigint"
    )
}

/// The jsonb traceback `column`, bounded: itself when its text is short, else an object
/// of PgQueuer's shape with each field cut (and a note of the whole size).
fn bounded_traceback(column: &str) -> String {
    format!(
        "CASE WHEN {column} IS NULL OR octet_length({column}::text) <= {TRACEBACK_SHOWN}
      THEN {column}
      ELSE jsonb_build_object(
          'exception_type', left({column}->>'exception_type', {REASON_SHOWN}),
          'exception_message', left({column}->>'exception_message', {REASON_SHOWN}),
          'traceback', left({column}->>'traceback', {TRACEBACK_SHOWN})
              || ' [cut: the whole traceback record is '
              || octet_length({column}::text) || ' bytes]')
 END"
    )
}

/// The jsonb traceback `column` as a failure's type and message only, each cut to
/// [`REASON_SHOWN`] characters (what the dashboard's lists show).
fn failure_summary(column: &str) -> String {
    format!(
        "jsonb_build_object(
    'exception_type', left({column}->>'exception_type', {REASON_SHOWN}),
    'exception_message', left({column}->>'exception_message', {REASON_SHOWN}))"
    )
}

/// The row `$1 bigint` with [`JOB_COLUMNS`](super::JOB_COLUMNS)' names, for a page:
/// `payload` holds the first [`PAYLOAD_SHOWN`] bytes (`payload_bytes`: the whole size),
/// `headers` is NULL and `headers_text` holds the first [`HEADERS_SHOWN`] characters of
/// their JSON text (`headers_bytes`: the whole size; JSON `null` reads as none), the
/// dedupe key is cut.
fn queue_select_shown(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after,
       status::text AS status, entrypoint, left(dedupe_key, {REASON_SHOWN}) AS dedupe_key,
       substring(payload FROM 1 FOR {PAYLOAD_SHOWN}) AS payload,
       octet_length(payload)::bigint AS payload_bytes,
       NULL::jsonb AS headers,
       CASE WHEN headers IS NULL OR headers = 'null'::jsonb THEN NULL
            ELSE left(headers::text, {HEADERS_SHOWN}) END AS headers_text,
       coalesce(octet_length(headers::text), 0)::bigint AS headers_bytes,
       attempts, slot
  FROM {queue}
 WHERE id = $1::bigint"
    )
}

/// The latest [`HISTORY_SHOWN`] log rows of the job `$1 bigint`, oldest first, as
/// `log_select_job` (`sql/queue.rs`) returns them but with tracebacks bounded.
fn log_select_shown(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    format!(
        "SELECT * FROM (
    SELECT id, created, status::text AS status, priority, entrypoint,
           {traceback} AS traceback
      FROM {log}
     WHERE job_id = $1::bigint
     ORDER BY created DESC, id DESC
     LIMIT {HISTORY_SHOWN}
) latest
 ORDER BY created, id",
        traceback = bounded_traceback("traceback")
    )
}

/// Held (`failed`) rows with their latest failure, as `queue_select_failed`
/// (`sql/queue.rs`) returns them (at most `$1`), but without payloads, headers or dedupe
/// keys and with the failure's type and message only, cut.
fn queue_select_failed_shown(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT job.id, job.priority, job.queue_manager_id, job.created, job.updated,
       job.heartbeat, job.execute_after, job.status::text AS status, job.entrypoint,
       NULL::text AS dedupe_key, NULL::bytea AS payload, NULL::jsonb AS headers,
       job.attempts, job.slot, reason.failure
  FROM {queue} AS job
  LEFT JOIN LATERAL (
       SELECT {failure} AS failure FROM {log} AS l
        WHERE l.job_id = job.id AND l.status = 'failed'::{status}
        ORDER BY l.created DESC, l.id DESC
        LIMIT 1
  ) AS reason ON true
 WHERE job.status = 'failed'::{status}
 ORDER BY job.created, job.id
 LIMIT $1::bigint",
        failure = failure_summary("l.traceback")
    )
}

/// The latest `$2 bigint` `exception` log rows (of entrypoint `$1 text`, or all), newest
/// first, with the failure's type and message only, cut.
fn log_select_exceptions(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT job_id, created, entrypoint, {failure} AS traceback
  FROM {log}
 WHERE status = 'exception'::{status} AND ($1::text IS NULL OR entrypoint = $1::text)
 ORDER BY created DESC, id DESC
 LIMIT $2::bigint",
        failure = failure_summary("traceback")
    )
}

/// The picked jobs of entrypoint `$1 text` (at most [`PICKED_SHOWN`]), by slot then id,
/// with their worker and heartbeat.
fn queue_select_picked(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT id, slot, queue_manager_id, heartbeat
  FROM {queue}
 WHERE status = 'picked'::{status} AND entrypoint = $1::text
 ORDER BY slot NULLS LAST, id
 LIMIT {PICKED_SHOWN}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prefix_and_schema() {
        let sql = WebSql::new(&Settings::with_prefix("app_").schema("myq"));
        assert_eq!(sql.queue_table, "myq.app_pgqueuer");
        assert_eq!(sql.table_names[1], "app_pgqueuer_log");
        assert_eq!(sql.tables_qualified[1], "myq.app_pgqueuer_log");
        assert!(sql.queue_select_page.contains("FROM myq.app_pgqueuer\n"));
        assert!(
            sql.log_select_exceptions
                .contains("'exception'::myq.app_pgqueuer_status")
        );
        assert!(
            sql.log_count_by_minute
                .contains("FROM myq.app_pgqueuer_statistics st")
        );
        assert!(sql.queue_select_picked.ends_with("LIMIT 500"));
    }

    #[test]
    fn the_timeout_is_never_zero() {
        assert_eq!(
            statement_timeout(Duration::from_micros(10)),
            "SET LOCAL statement_timeout = 1"
        );
        assert_eq!(
            statement_timeout(Duration::from_secs(5)),
            "SET LOCAL statement_timeout = 5000"
        );
    }
}
