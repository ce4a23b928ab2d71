//! The read-only statements of the MCP tools (`crate::mcp`) that match PgQueuer 1.6.0's
//! MCP server: the same rows, in PgQueuer's column names and order, with what PgQueuer
//! returns as text (`jsonb`, `numeric` sums) cast to text here. Periods and limits travel
//! as parameters; a NULL period means "all of it".

use crate::settings::Settings;

/// The most characters of one text value (a traceback, headers, a dedupe key) an MCP
/// answer carries; longer ones are cut, with a note of how many characters were left out.
pub(crate) const FIELD_SHOWN: usize = 4_096;

/// `expr` (text) cut to [`FIELD_SHOWN`] characters in the database, so that a row of
/// megabytes costs the client, and the reply, no more than a few KiB.
fn shown(expr: &str) -> String {
    format!(
        "CASE WHEN length({expr}) > {FIELD_SHOWN} \
         THEN left({expr}, {FIELD_SHOWN}) || ' [... ' || (length({expr}) - {FIELD_SHOWN}) || ' more characters not shown]' \
         ELSE {expr} END"
    )
}

/// `interval` of the bigint microseconds in `param` (NULL stays NULL).
fn micros(param: &str) -> String {
    format!("({param}::bigint * interval '1 microsecond')")
}

/// Rows per entrypoint, priority and status (PgQueuer's `queue_size`). Statuses sort in
/// the enum's order, as PgQueuer's do.
pub(crate) fn queue_size(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT count(*) AS count, q.entrypoint, q.priority, q.status::text AS status
  FROM {queue} q
 GROUP BY q.entrypoint, q.priority, q.status
 ORDER BY count, q.entrypoint, q.priority, q.status"
    )
}

/// The queue table's rows, by priority then id: `$1` limit, `$2` offset, `$3` the most
/// payload bytes returned (`payload_bytes` says the whole size).
pub(crate) fn queue_browse(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after,
       status::text AS status, entrypoint, {dedupe_key} AS dedupe_key,
       substring(payload FROM 1 FOR $3::int) AS payload, octet_length(payload) AS payload_bytes,
       {headers} AS headers, attempts, slot
  FROM {queue}
 ORDER BY priority DESC, id ASC
 LIMIT $1::bigint OFFSET $2::bigint",
        dedupe_key = shown("dedupe_key"),
        headers = shown("headers::text"),
    )
}

/// Per-second buckets of transitions: the statistics table with the log rows not yet
/// folded into it added (what PgQueuer's `queue_stats` shows after it folds them, without
/// the write). `$1` period in microseconds or NULL, `$2` limit; newest first.
pub(crate) fn stats_buckets(s: &Settings) -> String {
    let stats = s.qualify(&s.statistics_table);
    let log = s.qualify(&s.queue_table_log);
    format!(
        "WITH pending AS (
    SELECT entrypoint, priority, status, date_trunc('sec', created) AS created, count(*) AS count
      FROM {log} WHERE NOT aggregated
     GROUP BY entrypoint, priority, status, date_trunc('sec', created)
), merged AS (
    SELECT coalesce(st.entrypoint, p.entrypoint) AS entrypoint,
           coalesce(st.priority, p.priority) AS priority,
           coalesce(st.status, p.status) AS status,
           coalesce(st.created, p.created) AS created,
           coalesce(st.count, 0) + coalesce(p.count, 0) AS count
      FROM {stats} st
      FULL JOIN pending p ON p.entrypoint = st.entrypoint AND p.priority = st.priority
                         AND p.status = st.status AND p.created = st.created
)
SELECT m.count::bigint AS count, m.created, m.entrypoint, m.priority, m.status::text AS status
  FROM merged m
 WHERE $1::bigint IS NULL OR m.created > now() - {period}
 ORDER BY m.created DESC, m.entrypoint, m.priority, m.status
 LIMIT $2::bigint",
        period = micros("$1")
    )
}

/// Totals per entrypoint and status over the period (`$1` microseconds or NULL), the
/// unfolded log rows included; `total_count` is text, as PgQueuer's numeric sum reaches
/// JSON.
pub(crate) fn throughput(s: &Settings) -> String {
    let stats = s.qualify(&s.statistics_table);
    let log = s.qualify(&s.queue_table_log);
    format!(
        "WITH counts AS (
    SELECT entrypoint, status, count FROM {stats}
     WHERE $1::bigint IS NULL OR created > now() - {period}
    UNION ALL
    SELECT entrypoint, status, 1 FROM {log}
     WHERE NOT aggregated AND ($1::bigint IS NULL OR date_trunc('sec', created) > now() - {period})
)
SELECT c.entrypoint, c.status::text AS status, sum(c.count)::text AS total_count
  FROM counts c
 GROUP BY c.entrypoint, c.status
 ORDER BY c.entrypoint, c.status",
        period = micros("$1")
    )
}

/// The newest log rows (`$1` limit), only `exception` ones when `$2` is true.
pub(crate) fn log_rows(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    format!(
        "SELECT id, created, job_id, status::text AS status, priority, entrypoint,
       {traceback} AS traceback, aggregated
  FROM {log}
 WHERE NOT $2::bool OR status = 'exception'
 ORDER BY created DESC
 LIMIT $1::bigint",
        traceback = shown("traceback::text"),
    )
}

/// Every schedule, by id.
pub(crate) fn schedules(s: &Settings) -> String {
    let schedules = s.qualify(&s.schedules_table);
    format!(
        "SELECT id, expression, heartbeat, created, updated, next_run, last_run,
       status::text AS status, entrypoint
  FROM {schedules}
 ORDER BY id"
    )
}

/// The queue's tables: name, persistence (`LOGGED` or `UNLOGGED`), the planner's row
/// estimate and the total size in words; by name.
pub(crate) fn schema_info(s: &Settings) -> String {
    let names = [
        &s.queue_table,
        &s.queue_table_log,
        &s.statistics_table,
        &s.schedules_table,
    ]
    .iter()
    .map(|n| format!("'{n}'"))
    .collect::<Vec<_>>()
    .join(", ");
    let schema = s
        .schema
        .as_ref()
        .map_or_else(|| "current_schema()".to_owned(), |n| format!("'{n}'"));
    format!(
        "SELECT c.relname::text AS table_name,
       CASE c.relpersistence WHEN 'u' THEN 'UNLOGGED' WHEN 'p' THEN 'LOGGED'
            ELSE c.relpersistence::text END AS persistence,
       c.reltuples::bigint AS estimated_rows,
       pg_size_pretty(pg_total_relation_size(c.oid)) AS total_size
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = {schema} AND c.relname IN ({names}) AND c.relkind = 'r'
 ORDER BY c.relname"
    )
}
