//! Every SQL statement this crate runs, rendered once per [`Settings`].
//!
//! Object names come only from validated [`Settings`]; every value travels as a bind
//! parameter. Statements are named table-then-verb.

use crate::settings::Settings;

pub(crate) mod claim;
pub(crate) mod functions;
#[cfg(feature = "mcp")]
pub(crate) mod mcp;
pub(crate) mod ops;
pub(crate) mod overrides;
pub(crate) mod queue;
pub(crate) mod rates;
pub(crate) mod schedule;
pub(crate) mod schema;
#[cfg(feature = "web")]
pub(crate) mod web;

/// The column list a statement must return for `Job::from_row` (by name, so the column
/// order of an upgraded table does not matter).
pub(crate) const JOB_COLUMNS: &str = "id, priority, queue_manager_id, created, updated, heartbeat, \
     execute_after, status::text AS status, entrypoint, dedupe_key, payload, headers, attempts, slot";

/// Takes PgQueuer's schema-upgrade lock (`$1` = the CRC-32 key) for the transaction. The
/// key is the one Python's session lock takes, so the two wait for each other.
pub(crate) const ADVISORY_XACT_LOCK: &str = "SELECT pg_advisory_xact_lock($1)";
/// Quiets the NOTICEs of `IF NOT EXISTS` guards for the rest of the transaction.
pub(crate) const QUIET_NOTICES: &str = "SET LOCAL client_min_messages = warning";
/// The schema unqualified names resolve to.
pub(crate) const CURRENT_SCHEMA: &str = "SELECT current_schema()::text";
/// The session's database.
pub(crate) const CURRENT_DATABASE: &str = "SELECT current_database()::text";
/// Whether the schema `$1` exists.
pub(crate) const SCHEMA_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text)";

const CATALOG: &str = include_str!("catalog.sql");

/// The catalog description query for `schema` (a validated identifier).
pub(crate) fn catalog(schema: &str) -> String {
    CATALOG.replace("{{schema}}", schema)
}

/// `CREATE SCHEMA IF NOT EXISTS` for a validated schema name.
pub(crate) fn schema_create(schema: &str) -> String {
    format!("CREATE SCHEMA IF NOT EXISTS {schema}")
}

fn persistence(logged: bool) -> &'static str {
    if logged { "" } else { "UNLOGGED " }
}

/// Fills the `{{name}}` placeholders of a migration template from `s` (already validated).
pub(crate) fn render_migration(template: &str, s: &Settings) -> String {
    let schema_prefix = s
        .schema
        .as_ref()
        .map(|x| format!("{x}."))
        .unwrap_or_default();
    let schema_oid = match &s.schema {
        Some(schema) => format!("'{schema}'::regnamespace"),
        None => "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())".to_owned(),
    };
    let (queue_logged, log_logged) = s.durability.logged();
    let pairs: [(&str, String); 19] = [
        ("queue_table_name", s.queue_table.clone()),
        ("log_table_name", s.queue_table_log.clone()),
        ("statistics_table_name", s.statistics_table.clone()),
        ("schedules_table_name", s.schedules_table.clone()),
        ("queue_table", s.qualify(&s.queue_table)),
        ("log_table", s.qualify(&s.queue_table_log)),
        ("statistics_table", s.qualify(&s.statistics_table)),
        ("schedules_table", s.qualify(&s.schedules_table)),
        ("status_type", s.qualify(&s.queue_status_type)),
        ("function", s.qualify(&s.function)),
        ("trigger", s.trigger.clone()),
        ("channel", s.channel.clone()),
        ("schema_prefix", schema_prefix),
        ("schema_oid", schema_oid),
        ("queue_persistence", persistence(queue_logged).into()),
        ("schedules_persistence", persistence(queue_logged).into()),
        ("log_persistence", persistence(log_logged).into()),
        ("statistics_persistence", persistence(log_logged).into()),
        ("statistics_fold", statistics_fold(s)),
    ];
    let mut out = template.to_owned();
    for (key, value) in pairs {
        out = out.replace(&format!("{{{{{key}}}}}"), &value);
    }
    out
}

/// Folds duplicate per-second buckets of the statistics table into the lowest id (their
/// counts summed), so that its unique index can be built over the rest. Older releases
/// bucketed by a different expression and may hold rows that collide under 1.6.0's.
pub(crate) fn statistics_fold(s: &Settings) -> String {
    let statistics = s.qualify(&s.statistics_table);
    format!(
        "WITH ranked AS (
    SELECT id,
           FIRST_VALUE(id) OVER w AS keep_id,
           SUM(count) OVER (PARTITION BY priority,
               date_trunc('sec', timezone('UTC', created)), status, entrypoint) AS total
      FROM {statistics}
    WINDOW w AS (PARTITION BY priority,
               date_trunc('sec', timezone('UTC', created)), status, entrypoint
               ORDER BY id)
), kept AS (
    UPDATE {statistics} s SET count = r.total
      FROM ranked r WHERE s.id = r.id AND r.id = r.keep_id AND s.count <> r.total
)
DELETE FROM {statistics} s USING ranked r
 WHERE s.id = r.id AND r.id <> r.keep_id"
    )
}

const CATALOG_1_6_0: &str = include_str!("catalog_1_6_0.txt");

/// The catalog facts (lines of [`catalog`]) of PgQueuer 1.6.0's install for `s`, whose
/// objects live in `schema` (the configured one, or the session's current schema).
pub(crate) fn catalog_1_6_0(s: &Settings, schema: &str) -> Vec<String> {
    let (queue_logged, log_logged) = s.durability.logged();
    let flag = |logged: bool| if logged { "p" } else { "u" };
    let reference = s
        .schema
        .as_ref()
        .map(|x| format!("{x}."))
        .unwrap_or_default();
    let lower = |name: &str| name.to_ascii_lowercase();
    let pairs: [(&str, String); 14] = [
        ("queue_persistence", flag(queue_logged).into()),
        ("schedules_persistence", flag(queue_logged).into()),
        ("log_persistence", flag(log_logged).into()),
        ("statistics_persistence", flag(log_logged).into()),
        ("function", lower(&s.function)),
        ("trigger", lower(&s.trigger)),
        ("channel", s.channel.clone()),
        ("statistics", lower(&s.statistics_table)),
        ("schedules", lower(&s.schedules_table)),
        ("log", lower(&s.queue_table_log)),
        ("status", lower(&s.queue_status_type)),
        ("queue", lower(&s.queue_table)),
        ("schema", lower(schema)),
        ("ref", lower(&reference)),
    ];
    CATALOG_1_6_0
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let mut out = line.to_owned();
            for (key, value) in &pairs {
                out = out.replace(&format!("{{{{{key}}}}}"), value);
            }
            out
        })
        .collect()
}

/// Drops every PgQueuer object (PgQueuer's `pgq uninstall`), after this crate's statement
/// functions.
pub(crate) fn uninstall(s: &Settings) -> String {
    let q = |name: &str| s.qualify(name);
    format!(
        "{functions}{rates}{overrides}DROP TRIGGER IF EXISTS {trigger} ON {queue};\n\
         DROP FUNCTION IF EXISTS {function};\n\
         DROP TABLE IF EXISTS {queue};\n\
         DROP TABLE IF EXISTS {log};\n\
         DROP TABLE IF EXISTS {schedules};\n\
         DROP TABLE IF EXISTS {statistics};\n\
         DROP TYPE IF EXISTS {status};\n\
         DROP TYPE IF EXISTS {statistics}_status;\n",
        functions = functions::drop_all(s),
        rates = rates::rates_drop(s),
        overrides = overrides::overrides_drop(s),
        trigger = s.trigger,
        queue = q(&s.queue_table),
        function = q(&s.function),
        log = q(&s.queue_table_log),
        schedules = q(&s.schedules_table),
        statistics = q(&s.statistics_table),
        status = q(&s.queue_status_type),
    )
}

/// Quotes a validated name as an SQL identifier (for `LISTEN`, which takes no parameter).
pub(crate) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `LISTEN "<channel>"`, the channel quoted as an identifier (embedded quotes doubled),
/// as PgQueuer 1.6 issues it.
pub(crate) fn channel_listen(channel: &str) -> String {
    format!("LISTEN {}", quote_identifier(channel))
}

/// Sends one notification: `$1` channel, `$2` payload.
pub(crate) const CHANNEL_NOTIFY: &str = "SELECT pg_notify($1::text, $2::text)";

/// Steers a direct connection's planner to the queue's indexes for the rest of the
/// session (see `Conn::plan_with_indexes`): no sequential or bitmap scans, no sorts,
/// no JIT, generic plans from the first run.
pub(crate) const SESSION_PLAN_WITH_INDEXES: &str = "SET enable_seqscan = off; SET enable_bitmapscan = off; \
     SET enable_sort = off; SET jit = off; \
     SET plan_cache_mode = force_generic_plan";

/// The seconds from the timestamp `expr` until `now()` (float8; negative for a time to
/// come), for a timestamp of any value: `-infinity` (which another program may write) is
/// infinitely old and `infinity` infinitely far off, where PostgreSQL 15's subtraction
/// of an infinite timestamp fails the whole statement.
pub(crate) fn age_seconds(expr: &str) -> String {
    format!(
        "(CASE WHEN {expr} IS NULL THEN NULL \
         WHEN isfinite({expr}) THEN EXTRACT(EPOCH FROM now() - {expr})::float8 \
         WHEN {expr} < now() THEN 'Infinity'::float8 ELSE '-Infinity'::float8 END)"
    )
}

/// The microseconds from `now()` until the timestamp `expr` (bigint; negative once it has
/// passed), for a timestamp of any value (see [`age_seconds`]): an infinite one gives
/// the bigint range's end, a little short of it.
/// `expr` (a scalar subquery, say) is evaluated once (`OFFSET 0` keeps the planner from
/// copying it into every use); NULL stays NULL.
pub(crate) fn micros_until(expr: &str) -> String {
    format!(
        "(SELECT CASE WHEN at_time.t IS NOT NULL THEN GREATEST(LEAST(-{} * 1000000, 9.2e18), -9.2e18)::bigint END \
         FROM (SELECT {expr} AS t OFFSET 0) at_time)",
        age_seconds("at_time.t")
    )
}

/// Run on each new direct connection: in a `SQL_ASCII` database, whose text holds
/// whatever bytes were written, the server refuses to send a row with bytes that are not
/// UTF-8 to a UTF-8 client (22021), failing the whole statement, so one such row would
/// fail every claim that reaches it. With `client_encoding` `SQL_ASCII` too the bytes
/// come as stored, and the client reads them as it can (see `Job::unreadable`). Nothing
/// changes for any other server encoding.
pub(crate) const SESSION_RAW_TEXT_IN_SQL_ASCII: &str = "SELECT set_config('client_encoding', 'SQL_ASCII', false) \
     WHERE current_setting('server_encoding') = 'SQL_ASCII'";

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement a worker runs per claim or per job, rendered for the default
    /// names, is checked in as SQL under `src/sql/rendered/`, one file each, so that a
    /// reviewer reads (and diffs) what the database runs. A change of the renderer that
    /// changes a statement fails here until the files are written again:
    /// `PGQ_BLESS_SQL=1 cargo test --lib rendered`.
    #[test]
    fn rendered_statements_match_the_files_checked_in() {
        let s = crate::settings::Settings::default();
        let claims = claim::ClaimSql::new(&s);
        let mut statements: Vec<(String, String)> = claims
            .named_shapes()
            .into_iter()
            .map(|(name, sql)| (name, sql.to_owned()))
            .collect();
        statements.extend([
            ("complete-many".into(), claim::queue_complete_many(&s)),
            ("complete-plain".into(), claim::queue_complete_plain(&s)),
            ("heartbeat-many".into(), claim::queue_heartbeat_many(&s)),
            ("retry".into(), claim::queue_retry(&s)),
            ("release-many".into(), claim::queue_release_many(&s)),
            ("next-due".into(), claim::queue_next_due(&s)),
            ("next-due-recent".into(), claim::queue_next_due_recent(&s)),
            ("slots-in-use".into(), claim::queue_slots_in_use(&s)),
        ]);
        let q = queue::QueueSql::new(&s);
        statements.extend([
            ("enqueue-raise".into(), q.insert_many_raise),
            ("enqueue-skip".into(), q.insert_many_skip),
            (
                "enqueue-update-priority".into(),
                q.insert_many_update_priority,
            ),
        ]);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sql/rendered");
        let bless = std::env::var_os("PGQ_BLESS_SQL").is_some();
        let mut stale = Vec::new();
        for (name, sql) in &statements {
            let path = dir.join(format!("{name}.sql"));
            let text =
                format!("-- Rendered by src/sql for the default names; do not edit.\n{sql};\n");
            if bless {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &text).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(name.clone());
            }
        }
        let names: std::collections::HashSet<String> =
            statements.iter().map(|(n, _)| format!("{n}.sql")).collect();
        let extra: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|f| !names.contains(f))
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            stale.is_empty() && extra.is_empty(),
            "src/sql/rendered/ is out of date: changed {stale:?}, left over {extra:?}; \
             write it again with PGQ_BLESS_SQL=1 cargo test --lib rendered"
        );
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn listen_quotes_the_channel() {
        assert_eq!(channel_listen("ch_pgqueuer"), "LISTEN \"ch_pgqueuer\"");
        assert_eq!(channel_listen("a\"b.c-d"), "LISTEN \"a\"\"b.c-d\"");
    }
}
