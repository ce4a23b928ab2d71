//! The operator's statements: statistics aggregation, log pruning, insight queries
//! (stale jobs, active workers, backlog age, throughput), the health facts, the
//! Prometheus figures, table persistence and autovacuum tuning.
//!
//! Rendered per call from validated [`Settings`]; these run once per command, not per
//! job, so nothing is cached. Time spans travel as microseconds (`bigint`) and are turned
//! into an exact interval in SQL by [`micros_interval`].

use crate::settings::{Durability, Settings};

/// The interval of `param` microseconds (a `bigint` bind), exact: whole seconds plus the
/// microsecond remainder, never days, so it means the same elapsed time across a
/// daylight-saving change.
fn micros_interval(param: &str) -> String {
    format!(
        "(({param}::bigint / 1000000) * interval '1 second' \
         + ({param}::bigint % 1000000) * interval '1 microsecond')"
    )
}

/// The advisory-lock key expression of statistics aggregation: `hashtext` of the
/// qualified statistics table name, bound as `$1 text` (PgQueuer's key).
const STATISTICS_LOCK_KEY: &str = "hashtext($1::text)";

/// Folds every unaggregated log row into the per-second statistics table, guarded by
/// `pg_try_advisory_xact_lock(hashtext($1))` so that only one aggregator runs at a time
/// (a loser does nothing and reports `locked = false`).
///
/// Returns one row: `locked bool`, `log_rows bigint` (rows marked aggregated),
/// `buckets bigint` (statistics rows inserted or added to).
///
/// Unlike PgQueuer's statement, which counts a snapshot of the log in one CTE and marks
/// rows in another, this one counts exactly the rows its UPDATE marked (the UPDATE's
/// RETURNING feeds the rollup), so a row is never counted without being marked or
/// marked without being counted.
pub(crate) fn log_aggregate(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    let stats = s.qualify(&s.statistics_table);
    format!(
        "WITH guard AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock({STATISTICS_LOCK_KEY}) AS locked
),
marked AS (
    UPDATE {log} AS l
       SET aggregated = TRUE
      FROM guard
     WHERE guard.locked AND NOT l.aggregated
    RETURNING l.entrypoint, l.priority, l.status, date_trunc('sec', l.created) AS second
),
buckets AS (
    SELECT entrypoint, priority, status, second, count(*) AS n
      FROM marked
     GROUP BY entrypoint, priority, status, second
),
merged AS (
    INSERT INTO {stats} AS st (count, created, entrypoint, priority, status)
    SELECT n, second, entrypoint, priority, status FROM buckets
    ON CONFLICT (priority, date_trunc('sec', timezone('UTC', created)), status, entrypoint)
    DO UPDATE SET count = st.count + EXCLUDED.count
    RETURNING 1
)
SELECT (SELECT locked FROM guard) AS locked,
       (SELECT count(*) FROM marked) AS log_rows,
       (SELECT count(*) FROM merged) AS buckets"
    )
}

/// Waits for the statistics aggregation lock (`$1 text`: the qualified statistics table
/// name), held until the transaction ends.
pub(crate) const STATISTICS_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext($1::text))";

/// Deletes log rows created more than `$1 bigint` microseconds ago, except rows still
/// marked unaggregated (`aggregated = false`); returns nothing, the affected row count
/// is the number deleted. Run after [`log_aggregate`] in the same transaction, that
/// exception only spares rows committed in between, which the next aggregation counts.
pub(crate) fn log_delete_before(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    format!(
        "DELETE FROM {log}
 WHERE created < now() - {interval}
   AND aggregated IS DISTINCT FROM FALSE",
        interval = micros_interval("$1")
    )
}

/// Jobs in the queue table per entrypoint and status (every priority summed), by
/// entrypoint then status: `entrypoint`, `status text`, `n bigint`.
/// The rows of `series` (`entrypoint`, `status`, `n`) of its `busiest` entrypoints (the
/// largest sums of `n`), by entrypoint and status, then one row per status adding up the
/// rest with entrypoint NULL; `left_out` on every row counts the entrypoints folded into
/// those. A queue of 200,000 entrypoints then costs a scrape a few hundred series.
pub(crate) fn busiest_series(series: &str, busiest: usize) -> String {
    format!(
        "WITH t AS ({series}),
ranked AS (
    SELECT entrypoint, row_number() OVER (ORDER BY sum(n) DESC, entrypoint) AS rank
      FROM t GROUP BY entrypoint
),
left_out AS (SELECT count(*) AS n FROM ranked WHERE rank > {busiest})
SELECT t.entrypoint, t.status, t.n, (SELECT n FROM left_out) AS left_out
  FROM t JOIN ranked r USING (entrypoint) WHERE r.rank <= {busiest}
UNION ALL
SELECT NULL, t.status, sum(t.n)::bigint, (SELECT n FROM left_out)
  FROM t JOIN ranked r USING (entrypoint) WHERE r.rank > {busiest}
 GROUP BY t.status
 ORDER BY 1 NULLS LAST, 2"
    )
}

pub(crate) fn queue_count_by_status(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT entrypoint, status::text AS status, count(*) AS n
  FROM {queue}
 GROUP BY entrypoint, status
 ORDER BY entrypoint, status::text"
    )
}

/// The distinct priorities of the statistics table, by a loose scan of its unique index
/// (one probe per priority): `priorities int[]`.
pub(crate) fn statistics_priorities(s: &Settings) -> String {
    let stats = s.qualify(&s.statistics_table);
    format!(
        "WITH RECURSIVE prios AS (
    (SELECT priority FROM {stats} ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT st.priority FROM {stats} st WHERE st.priority > prios.priority
             ORDER BY st.priority LIMIT 1)
      FROM prios WHERE prios.priority IS NOT NULL
)
SELECT coalesce(array_agg(priority), '{{}}') AS priorities FROM prios WHERE priority IS NOT NULL"
    )
}

/// The condition on statistics rows (`st`) of buckets from `since` (an SQL `timestamptz`
/// expression) on, written so that the table's unique index serves it: its leading
/// column is the priority, so the priorities are listed (`prios`: an `int[]` bind from
/// [`statistics_priorities`]) and each gets a range scan of its buckets. A condition on
/// `created` alone would read the whole table, which holds a row per second,
/// entrypoint, priority and status.
pub(crate) fn statistics_since(since: &str, prios: &str) -> String {
    format!(
        "st.priority = ANY({prios}::int[])
   AND date_trunc('sec', timezone('UTC', st.created)) >= timezone('UTC', ({since}))"
    )
}

/// Log transitions per entrypoint and status over the last `$1 bigint` microseconds
/// (`$2 int[]`: the statistics' priorities), read without writing: the statistics
/// table's buckets plus the log rows no aggregation has folded yet (what an aggregation
/// would add), so the counts are those PgQueuer reads after aggregating. `entrypoint`,
/// `status text`, `n bigint`.
pub(crate) fn log_count_since_by_status(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    let stats = s.qualify(&s.statistics_table);
    let interval = micros_interval("$1");
    let recent = statistics_since(&format!("now() - {interval}"), "$2");
    format!(
        "SELECT entrypoint, status, sum(n)::bigint AS n FROM (
    SELECT entrypoint, status::text AS status, sum(count) AS n
      FROM {stats} st
     WHERE {recent} AND created > now() - {interval}
     GROUP BY entrypoint, status
    UNION ALL
    SELECT entrypoint, status::text, count(*)
      FROM {log}
     WHERE created > now() - {interval} AND NOT aggregated
     GROUP BY entrypoint, status
) t
 GROUP BY entrypoint, status
 ORDER BY entrypoint, status"
    )
}

/// The figures of ours in the Prometheus text, one row: per entrypoint with eligible
/// queued jobs the age of its longest wait (`entrypoints text[]` and `ages float8[]`, in
/// the same order), picked jobs whose heartbeat is older than `$1 bigint` microseconds
/// (`stale`), and log rows not aggregated yet (`unaggregated`).
pub(crate) fn queue_health(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "WITH waits AS (
    SELECT entrypoint, {age} AS age
      FROM {queue}
     WHERE status = 'queued'::{status} AND execute_after <= now()
     GROUP BY entrypoint
)
SELECT coalesce((SELECT array_agg(entrypoint ORDER BY entrypoint) FROM waits), '{{}}') AS entrypoints,
       coalesce((SELECT array_agg(age ORDER BY entrypoint) FROM waits), '{{}}') AS ages,
       (SELECT count(*) FROM {queue}
         WHERE status = 'picked'::{status} AND heartbeat < now() - {interval}) AS stale,
       (SELECT count(*) FROM {log} WHERE NOT aggregated) AS unaggregated",
        interval = micros_interval("$1"),
        age = super::age_seconds("min(execute_after)"),
    )
}

/// Picked rows whose heartbeat is older than `$1 bigint` microseconds, stalest first, at
/// most `$2 bigint`, with `seconds_since_heartbeat float8`: the job columns with NULL for
/// the payload and headers, which a listing does not read.
pub(crate) fn queue_select_stale(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after,
       status::text AS status, entrypoint, dedupe_key, NULL::bytea AS payload,
       NULL::jsonb AS headers, attempts, slot,
       {age} AS seconds_since_heartbeat
  FROM {queue}
 WHERE status = 'picked'::{status}
   AND heartbeat < now() - {interval}
 ORDER BY heartbeat, id
 LIMIT $2::bigint",
        interval = micros_interval("$1"),
        age = super::age_seconds("heartbeat"),
    )
}

/// The facts a health verdict is made of (`ops::health`), in one statement: `$1` a
/// heartbeat's age that makes a picked job stale, `$2` the window over which arrivals
/// and completions are counted, both in microseconds. `last_progress_s` is the age of
/// the latest log row other than an enqueue (a pick or an outcome) of the last day. Each
/// count reads an index (or the window's rows of the log).
pub(crate) fn queue_health_facts(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT
  (SELECT count(*) FROM {queue} WHERE status = 'queued'::{status} AND execute_after <= now()) AS due,
  (SELECT {oldest_due}
     FROM {queue} WHERE status = 'queued'::{status} AND execute_after <= now()) AS oldest_due_s,
  (SELECT count(*) FROM {queue} WHERE status = 'picked'::{status}) AS picked,
  (SELECT count(*) FROM {queue} WHERE status = 'picked'::{status} AND heartbeat < now() - {stale}) AS stale,
  (SELECT count(*) FROM {queue} WHERE status = 'failed'::{status}) AS failed,
  (SELECT {last_progress} FROM {log}
     WHERE created > now() - interval '1 day' AND status <> 'queued'::{status}) AS last_progress_s,
  (SELECT count(*) FROM {log} WHERE created > now() - {window} AND status = 'queued'::{status}) AS arrivals,
  (SELECT count(*) FROM {log} WHERE created > now() - {window}
      AND status NOT IN ('queued'::{status}, 'picked'::{status})) AS completions",
        stale = micros_interval("$1"),
        window = micros_interval("$2"),
        oldest_due = super::age_seconds("min(greatest(created, execute_after))"),
        last_progress = super::age_seconds("max(created)"),
    )
}

/// The limit audit (see `ops::limit_audit`): per entrypoint with a run in the window
/// (`$1` microseconds back; `$2` one entrypoint or NULL; `$3` the clock resolution in
/// microseconds), the most runs open at once swept in the order the log was written
/// (`peak`, `peak_at`) and by the log's timestamps (`clock_peak`, `clock_peak_at`).
///
/// A run is a pick up to the job's next log row. In log order a slot's next holder is
/// always written after its last holder's end: its pick row is inserted after its slot
/// index entry, which waits for (or sees) the commit of the end that freed the seat,
/// whose row was inserted before that commit. So the sweep by log id never shows two
/// runs of one slot at once, while the timestamps (transaction starts) can.
pub(crate) fn log_limit_audit(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "WITH win AS (SELECT now() - {window} AS since, now() AS until),
rows AS (
    SELECT l.id, l.job_id, l.entrypoint, l.status::text AS status, l.created
      FROM {log} l, win
     WHERE l.created >= win.since AND ($2::text IS NULL OR l.entrypoint = $2::text)
),
bounds AS (SELECT min(id) - 1 AS first, max(id) + 1 AS last FROM rows),
seq AS (
    SELECT entrypoint, status, id, created,
           lead(id) OVER w AS next_id,
           lead(created) OVER w AS next_at,
           row_number() OVER w AS n
      FROM rows
    WINDOW w AS (PARTITION BY job_id ORDER BY id)
),
runs AS (
    SELECT entrypoint, id AS i0, coalesce(next_id, (SELECT last FROM bounds)) AS i1,
           created AS t0, coalesce(next_at, (SELECT until FROM win)) AS t1
      FROM seq WHERE status = 'picked'
    UNION ALL
    SELECT entrypoint, (SELECT first FROM bounds), id, (SELECT since FROM win), created
      FROM seq WHERE n = 1 AND status NOT IN ('picked', 'queued')
),
by_order AS (
    SELECT entrypoint, k, at,
           sum(d) OVER (PARTITION BY entrypoint ORDER BY k, d ROWS UNBOUNDED PRECEDING) AS running
      FROM (SELECT entrypoint, i0 AS k, 1 AS d, t0 AS at FROM runs
            UNION ALL
            SELECT entrypoint, i1, -1, t1 FROM runs) e
),
by_clock AS (
    SELECT entrypoint, t,
           sum(d) OVER (PARTITION BY entrypoint ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS running
      FROM (SELECT entrypoint, t0 AS t, 1 AS d FROM runs
            UNION ALL
            SELECT entrypoint, greatest(t0, t1 - {resolution}), -1 FROM runs) e
),
order_peaks AS (
    SELECT DISTINCT ON (entrypoint) entrypoint, running AS peak, at AS peak_at
      FROM by_order ORDER BY entrypoint, running DESC, k
),
clock_peaks AS (
    SELECT DISTINCT ON (entrypoint) entrypoint, running AS peak, t AS peak_at
      FROM by_clock ORDER BY entrypoint, running DESC, t
)
SELECT p.entrypoint, p.peak::bigint AS peak, p.peak_at,
       c.peak::bigint AS clock_peak, c.peak_at AS clock_peak_at,
       (SELECT count(*) FROM runs r WHERE r.entrypoint = p.entrypoint) AS runs,
       (SELECT count(*) FROM rows) AS rows_read,
       (SELECT since FROM win) AS since,
       (SELECT slot FROM {queue} q WHERE q.entrypoint = p.entrypoint AND q.status = 'picked'::{status}
           AND q.slot IS NOT NULL ORDER BY q.slot DESC LIMIT 1) AS highest_slot
  FROM order_peaks p JOIN clock_peaks c ON c.entrypoint = p.entrypoint
 ORDER BY p.entrypoint",
        window = micros_interval("$1"),
        resolution = micros_interval("$3")
    )
}

/// How many ids the log's id sequence hands a session at once (`1`, PgQueuer's
/// default, keeps ids in the order rows are written). `$1` the qualified log table.
pub(crate) const LOG_ID_CACHE: &str = "SELECT s.seqcache FROM pg_catalog.pg_sequence s \
     WHERE s.seqrelid = pg_catalog.pg_get_serial_sequence($1::text, 'id')::regclass";

/// Per entrypoint with picked jobs: how many hold a concurrency slot (`in_use`), the
/// highest slot in use (`highest`), and how many are picked without one (`unslotted`).
pub(crate) fn queue_select_slots(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT entrypoint, count(slot) AS in_use, max(slot) AS highest,
       count(*) FILTER (WHERE slot IS NULL) AS unslotted
  FROM {queue} WHERE status = 'picked'::{status}
 GROUP BY entrypoint ORDER BY entrypoint"
    )
}

/// How many log rows the last `$1` microseconds hold (for an audit that found no run).
pub(crate) fn log_count_since(s: &Settings) -> String {
    let log = s.qualify(&s.queue_table_log);
    format!(
        "SELECT count(*) FROM {log} WHERE created >= now() - {window} \
         AND ($2::text IS NULL OR entrypoint = $2::text)",
        window = micros_interval("$1")
    )
}

/// Per worker (`queue_manager_id`) holding picked rows: how many, the oldest and newest
/// heartbeat, and the distinct entrypoints (sorted); ordered by worker id.
pub(crate) fn queue_select_workers(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT queue_manager_id, count(*) AS active_jobs,
       min(heartbeat) AS oldest_heartbeat, max(heartbeat) AS newest_heartbeat,
       array_agg(DISTINCT entrypoint ORDER BY entrypoint) AS entrypoints
  FROM {queue}
 WHERE status = 'picked'::{status} AND queue_manager_id IS NOT NULL
 GROUP BY queue_manager_id
 ORDER BY queue_manager_id"
    )
}

/// Per entrypoint with queued rows (deferred ones included): how many, the oldest
/// `created`, and the oldest and average age in seconds (`float8`); by entrypoint.
pub(crate) fn queue_select_age(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT entrypoint, count(*) AS queued_count, min(created) AS oldest_created,
       {oldest} AS oldest_age_seconds,
       avg({each}) AS avg_age_seconds
  FROM {queue}
 WHERE status = 'queued'::{status}
 GROUP BY entrypoint
 ORDER BY entrypoint",
        oldest = super::age_seconds("min(created)"),
        each = super::age_seconds("created"),
    )
}

/// Statistics counts per entrypoint and status over buckets newer than `$1 bigint`
/// microseconds ago; ordered by entrypoint, then status (the enum's order).
pub(crate) fn statistics_select_throughput(s: &Settings) -> String {
    let stats = s.qualify(&s.statistics_table);
    format!(
        "SELECT entrypoint, status::text AS status, sum(count)::bigint AS count
  FROM {stats}
 WHERE created > now() - {interval}
 GROUP BY entrypoint, status
 ORDER BY entrypoint, status",
        interval = micros_interval("$1")
    )
}

/// `ALTER TABLE ... SET LOGGED|UNLOGGED` for the four tables, in PgQueuer's order (queue,
/// log, statistics, schedules), one statement per line.
pub(crate) fn tables_set_persistence(s: &Settings, level: Durability) -> String {
    let (queue_logged, log_logged) = match level {
        Durability::Durable => (true, true),
        Durability::Balanced => (true, false),
        Durability::Volatile => (false, false),
    };
    let mode = |logged: bool| if logged { "LOGGED" } else { "UNLOGGED" };
    [
        (&s.queue_table, queue_logged),
        (&s.queue_table_log, log_logged),
        (&s.statistics_table, log_logged),
        (&s.schedules_table, queue_logged),
    ]
    .iter()
    .map(|(table, logged)| format!("ALTER TABLE {} SET {};\n", s.qualify(table), mode(*logged)))
    .collect()
}

/// Reloptions for the tables that churn (queue, schedules): vacuum early and fast, leave
/// room on each page for HOT updates.
const HOT_TABLE_OPTIONS: [(&str, &str); 7] = [
    ("autovacuum_vacuum_scale_factor", "0.01"),
    ("autovacuum_vacuum_threshold", "1000"),
    ("autovacuum_analyze_scale_factor", "0.02"),
    ("autovacuum_analyze_threshold", "500"),
    ("autovacuum_vacuum_cost_limit", "10000"),
    ("autovacuum_vacuum_cost_delay", "0"),
    ("fillfactor", "70"),
];

/// Reloptions for the append-mostly tables (log, statistics): vacuum rarely.
const APPEND_TABLE_OPTIONS: [(&str, &str); 4] = [
    ("autovacuum_vacuum_scale_factor", "0.95"),
    ("autovacuum_vacuum_threshold", "1000000"),
    ("autovacuum_analyze_scale_factor", "0.05"),
    ("autovacuum_analyze_threshold", "10000"),
];

/// `ALTER TABLE ... SET (...)` with PgQueuer's recommended autovacuum settings (queue and
/// schedules, then log and statistics), or with `reset` the `RESET (...)` of the same
/// keys.
pub(crate) fn tables_set_autovacuum(s: &Settings, reset: bool) -> String {
    let tables: [(&String, &[(&str, &str)]); 4] = [
        (&s.queue_table, &HOT_TABLE_OPTIONS),
        (&s.schedules_table, &HOT_TABLE_OPTIONS),
        (&s.queue_table_log, &APPEND_TABLE_OPTIONS),
        (&s.statistics_table, &APPEND_TABLE_OPTIONS),
    ];
    tables
        .iter()
        .map(|(table, options)| {
            let list = options
                .iter()
                .map(|(key, value)| {
                    if reset {
                        format!("    {key}")
                    } else {
                        format!("    {key} = {value}")
                    }
                })
                .collect::<Vec<_>>()
                .join(",\n");
            let verb = if reset { "RESET" } else { "SET" };
            format!("ALTER TABLE {} {verb} (\n{list}\n);\n", s.qualify(table))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The dead row versions of the table `$1 text` (qualified), as the statistics count
/// them: `n`, 0 for a table they have not seen.
pub(crate) const TABLE_DEAD_TUPLES: &str = "SELECT coalesce((SELECT n_dead_tup FROM pg_catalog.pg_stat_all_tables \
     WHERE relid = to_regclass($1::text)), 0)::int8 AS n";

/// What holds this database's MVCC horizon back (see `crate::horizon`), oldest row
/// version first: `kind`, `name`, `application_name`, `client_addr`, `state`, `held_s`
/// (float8 or NULL), `xid_age` (int8) and `query` (its first 100 characters).
pub(crate) const HORIZON_HOLDERS: &str = "SELECT * FROM (
    SELECT 'session' AS kind, pid::text AS name, application_name, client_addr::text AS client_addr,
           state, EXTRACT(EPOCH FROM now() - coalesce(xact_start, query_start))::float8 AS held_s,
           age(coalesce(backend_xmin, backend_xid))::int8 AS xid_age, left(query, 100) AS query
      FROM pg_catalog.pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND coalesce(backend_xmin, backend_xid) IS NOT NULL
    UNION ALL
    SELECT 'replication_slot', slot_name::text, NULL, NULL,
           CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL::float8,
           greatest(age(xmin), age(catalog_xmin))::int8, NULL
      FROM pg_catalog.pg_replication_slots
     WHERE xmin IS NOT NULL OR (catalog_xmin IS NOT NULL AND database = current_database())
    UNION ALL
    SELECT 'prepared_transaction', gid, owner::text, NULL, NULL,
           EXTRACT(EPOCH FROM now() - prepared)::float8, age(transaction)::int8, NULL
      FROM pg_catalog.pg_prepared_xacts
     WHERE database = current_database()
    UNION ALL
    SELECT 'standby', coalesce(application_name, pid::text), application_name, client_addr::text,
           state, NULL::float8, age(backend_xmin)::int8, NULL
      FROM pg_catalog.pg_stat_replication
     WHERE backend_xmin IS NOT NULL
) h ORDER BY xid_age DESC, held_s DESC NULLS LAST";

/// This session's own encryption: `ssl`, `version`, `cipher` (one row).
pub(crate) const CONNECTION_TLS: &str = "SELECT coalesce(s.ssl, false) AS ssl, s.version, s.cipher \
     FROM (SELECT 1) one LEFT JOIN pg_catalog.pg_stat_ssl s ON s.pid = pg_catalog.pg_backend_pid()";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prefix_and_schema() {
        let s = Settings::with_prefix("app_").schema("myq");
        assert!(log_aggregate(&s).contains("UPDATE myq.app_pgqueuer_log AS l"));
        assert!(log_aggregate(&s).contains("INSERT INTO myq.app_pgqueuer_statistics AS st"));
        assert!(queue_select_stale(&s).contains("'picked'::myq.app_pgqueuer_status"));
        assert!(statistics_select_throughput(&s).contains("FROM myq.app_pgqueuer_statistics"));
    }

    #[test]
    fn the_arbiter_restates_the_unique_count_index() {
        // PostgreSQL infers the unique index only from the same expressions.
        assert!(log_aggregate(&Settings::default()).contains(
            "ON CONFLICT (priority, date_trunc('sec', timezone('UTC', created)), status, entrypoint)"
        ));
    }

    #[test]
    fn persistence_follows_the_levels() {
        let s = Settings::default();
        assert_eq!(
            tables_set_persistence(&s, Durability::Balanced),
            "ALTER TABLE pgqueuer SET LOGGED;\n\
             ALTER TABLE pgqueuer_log SET UNLOGGED;\n\
             ALTER TABLE pgqueuer_statistics SET UNLOGGED;\n\
             ALTER TABLE pgqueuer_schedules SET LOGGED;\n"
        );
        assert!(!tables_set_persistence(&s, Durability::Durable).contains("UNLOGGED"));
        assert_eq!(
            tables_set_persistence(&s, Durability::Volatile)
                .matches("UNLOGGED")
                .count(),
            4
        );
    }

    #[test]
    fn autovacuum_sets_and_resets_the_same_keys() {
        let s = Settings::default();
        let set = tables_set_autovacuum(&s, false);
        let reset = tables_set_autovacuum(&s, true);
        assert_eq!(set.matches("ALTER TABLE").count(), 4);
        assert!(
            set.contains("ALTER TABLE pgqueuer SET (\n    autovacuum_vacuum_scale_factor = 0.01,")
        );
        assert!(set.contains("    fillfactor = 70\n);"));
        assert!(set.contains(
            "ALTER TABLE pgqueuer_log SET (\n    autovacuum_vacuum_scale_factor = 0.95,"
        ));
        assert!(reset.contains(
            "ALTER TABLE pgqueuer_schedules RESET (\n    autovacuum_vacuum_scale_factor,"
        ));
        assert!(!reset.contains('='));
        assert_eq!(set.matches(" = ").count(), reset.matches("    ").count());
    }
}
