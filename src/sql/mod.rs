//! Every SQL statement this crate runs, rendered once per [`Settings`].
//!
//! Object names come only from validated [`Settings`]; every value travels as a bind
//! parameter. Statements are named table-then-verb.

use crate::settings::{Durability, Settings};

pub(crate) mod queue;
pub(crate) mod schedule;

/// Takes PgQueuer's schema-upgrade session lock (`$1` = the CRC-32 key).
pub(crate) const ADVISORY_LOCK: &str = "SELECT pg_advisory_lock($1)";
/// Releases it.
pub(crate) const ADVISORY_UNLOCK: &str = "SELECT pg_advisory_unlock($1)";
/// The schema unqualified names resolve to.
pub(crate) const CURRENT_SCHEMA: &str = "SELECT current_schema()::text";

pub(crate) mod claim;
pub(crate) mod ops;

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
    let (queue_logged, log_logged) = match s.durability {
        Durability::Durable => (true, true),
        Durability::Balanced => (true, false),
        Durability::Volatile => (false, false),
    };
    let pairs: [(&str, String); 18] = [
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
    ];
    let mut out = template.to_owned();
    for (key, value) in pairs {
        out = out.replace(&format!("{{{{{key}}}}}"), &value);
    }
    out
}

/// Drops every PgQueuer object (PgQueuer's `pgq uninstall`).
pub(crate) fn uninstall(s: &Settings) -> String {
    let q = |name: &str| s.qualify(name);
    format!(
        "DROP TRIGGER IF EXISTS {trigger} ON {queue};\n\
         DROP FUNCTION IF EXISTS {function};\n\
         DROP TABLE IF EXISTS {queue};\n\
         DROP TABLE IF EXISTS {log};\n\
         DROP TABLE IF EXISTS {schedules};\n\
         DROP TABLE IF EXISTS {statistics};\n\
         DROP TYPE IF EXISTS {status};\n\
         DROP TYPE IF EXISTS {statistics}_status;\n",
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

/// `LISTEN` on a channel.
pub(crate) fn channel_listen(channel: &str) -> String {
    format!("LISTEN {}", quote_identifier(channel))
}

/// Sends one notification: `$1` channel, `$2` payload.
pub(crate) const CHANNEL_NOTIFY: &str = "SELECT pg_notify($1::text, $2::text)";
