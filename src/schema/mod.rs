//! Install, upgrade, verify and uninstall the PgQueuer schema.
//!
//! Install and upgrade are one operation: [`upgrade`] runs every step in `migrations/`,
//! each idempotent and convergent, so from nothing, from any older PgQueuer release's
//! schema, or from an up-to-date one it ends in the catalog `pgq install` of PgQueuer
//! 1.6.0 creates. It holds PgQueuer's own advisory lock while it works, so any number of
//! processes, Rust or Python, may call it at once.

use std::collections::BTreeSet;

use postgres::types::Type;
use postgres::{Client, GenericClient};

use crate::connect::{query_alone, query_one_alone};
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::sql;

mod functions;
mod plan;

pub use plan::UpgradePlan;

/// The migration steps, in order: (name, SQL template).
const MIGRATIONS: [(&str, &str); 9] = [
    (
        "001_status_enum",
        include_str!("../../migrations/001_status_enum.sql"),
    ),
    (
        "002_queue_table",
        include_str!("../../migrations/002_queue_table.sql"),
    ),
    (
        "003_log_table",
        include_str!("../../migrations/003_log_table.sql"),
    ),
    (
        "004_statistics_table",
        include_str!("../../migrations/004_statistics_table.sql"),
    ),
    (
        "005_schedules_table",
        include_str!("../../migrations/005_schedules_table.sql"),
    ),
    (
        "006_widen_ids",
        include_str!("../../migrations/006_widen_ids.sql"),
    ),
    (
        "007_indexes",
        include_str!("../../migrations/007_indexes.sql"),
    ),
    (
        "008_function_trigger",
        include_str!("../../migrations/008_function_trigger.sql"),
    ),
    (
        "009_drop_retired",
        include_str!("../../migrations/009_drop_retired.sql"),
    ),
];

/// What [`upgrade`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpgradeReport {
    /// The catalog facts that changed, each `+ fact` (now present) or `- fact` (gone), in
    /// the form of [`describe_schema`]. Empty when the schema was already up to date.
    pub changes: Vec<String>,
    /// The statement functions this call created: functions of this crate's own, outside
    /// PgQueuer's catalog, that connections through a transaction pooler run their per-job
    /// statements with (see [`crate::Pooler::Transaction`]).
    pub statement_functions: Vec<String>,
    /// The tables of this crate's own this call created (the rates table, which keeps
    /// rate limits: [`crate::RateLimit`]; the stored limits and their change log:
    /// [`crate::ops::set_limits`]), outside PgQueuer's catalog.
    pub own_tables: Vec<String>,
}

impl UpgradeReport {
    /// True when PgQueuer's schema was already up to date (statement functions aside: a
    /// database PgQueuer installed gets them from the first `upgrade()`).
    pub fn is_noop(&self) -> bool {
        self.changes.is_empty()
    }
}

/// The SQL that [`upgrade_with`] runs, one string per step, rendered for `settings`
/// (for `pgq sql upgrade` and review). Each step must run as its own transaction.
///
/// It does not hold the statement functions [`upgrade_with`] makes last: their columns come
/// from the server's description of each statement. A database installed from this script
/// works the same, except that through a transaction pooler the per-job statements are
/// planned on every execution until `upgrade()` runs once.
///
/// # Errors
/// [`Error::InvalidSetting`] when a name in `settings` is not acceptable.
pub fn upgrade_sql(settings: &Settings) -> Result<Vec<String>> {
    settings.validate()?;
    let mut steps = Vec::with_capacity(MIGRATIONS.len() + 1);
    if let Some(schema) = &settings.schema {
        steps.push(sql::schema_create(schema));
    }
    steps.extend(
        MIGRATIONS
            .iter()
            .map(|(_, template)| sql::render_migration(template, settings)),
    );
    Ok(steps)
}

/// Installs or upgrades the schema with PgQueuer's default names. See [`upgrade_with`].
///
/// # Errors
/// As [`upgrade_with`].
pub fn upgrade(client: &mut Client) -> Result<UpgradeReport> {
    upgrade_with(client, &Settings::default())
}

/// Installs the schema, or brings an existing one up to date, for `settings`.
///
/// Last, it creates the statement functions that connections through a transaction
/// pooler run their per-job statements with (see [`crate::Pooler::Transaction`]),
/// functions of this crate's own that PgQueuer neither needs nor sees.
///
/// Safe to call from a startup hook of every process: it serializes on PgQueuer's upgrade
/// advisory lock, changes nothing when the schema is current, keeps every row, and leaves
/// rows picked before the capacity-slot column existed with `slot` NULL. Each step runs in
/// its own transaction (enum labels must be committed before use), so `client` must not
/// be inside a transaction.
///
/// # Errors
/// [`Error::InvalidSetting`] before any SQL for a bad name; [`Error::Db`] naming the
/// statement's failure otherwise (steps already applied stay applied; running it again
/// continues from there).
pub fn upgrade_with(client: &mut Client, settings: &Settings) -> Result<UpgradeReport> {
    let steps = upgrade_sql(settings)?;
    let key = settings.upgrade_lock_key();
    // The common case, a schema already current, costs two catalog reads.
    if plan::plan(client, settings)?.statements.is_empty() {
        let own_tables = own_tables(client, settings)?;
        let statement_functions = functions::install(client, settings)?;
        return Ok(UpgradeReport {
            changes: Vec::new(),
            statement_functions,
            own_tables,
        });
    }
    let mut changes = Vec::new();
    for step in &steps {
        // Each step is a transaction of its own (enum labels must be committed before
        // use) that holds PgQueuer's upgrade lock and quiets the NOTICE lines of the
        // `IF NOT EXISTS` guards: nothing outlives it, so this works through a
        // transaction pooler too. Processes upgrading at once take turns step by step;
        // each reports the changes its own steps made (read under the lock), so every
        // change is reported by exactly one of them.
        let mut tx = client.transaction()?;
        tx.query_typed(sql::ADVISORY_XACT_LOCK, &[(&key, Type::INT8)])?;
        tx.batch_execute(sql::QUIET_NOTICES)?;
        let before = describe_in(&mut tx, settings)?;
        tx.batch_execute(step)?;
        let after = describe_in(&mut tx, settings)?;
        tx.commit()?;
        changes.extend(diff(&before, &after));
    }
    let own_tables = own_tables(client, settings)?;
    let statement_functions = functions::install(client, settings)?;
    let report = UpgradeReport {
        changes,
        statement_functions,
        own_tables,
    };
    if !report.is_noop() {
        log::info!(
            "pgqueuer schema upgraded: {} catalog changes",
            report.changes.len()
        );
    }
    Ok(report)
}

/// Creates the tables of this crate's own that `settings` lacks (the rates table); returns
/// their names. Like the statement functions, a role that may not create them gets a
/// warning: only workers that declare rate limits need them, and those say so when they
/// are built.
fn own_tables(client: &mut Client, settings: &Settings) -> Result<Vec<String>> {
    let name = settings.rates_table();
    if missing_own_tables(client, settings)?.is_empty() {
        return Ok(Vec::new());
    }
    let made = (|| -> Result<()> {
        let mut tx = client.transaction()?;
        tx.query_typed(
            sql::ADVISORY_XACT_LOCK,
            &[(&settings.upgrade_lock_key(), Type::INT8)],
        )?;
        tx.batch_execute(sql::QUIET_NOTICES)?;
        tx.batch_execute(&sql::rates::rates_create(settings))?;
        tx.batch_execute(&sql::overrides::overrides_create(settings))?;
        tx.commit()?;
        Ok(())
    })();
    match made {
        Ok(()) => Ok(own_table_names(settings)
            .iter()
            .map(|t| settings.qualify(t))
            .collect()),
        Err(Error::Db(e))
            if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
                || e.code() == Some(&postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION) =>
        {
            log::warn!(
                "rates table {name} and the stored limits' tables not created ({}); workers \
                 that declare rate limits need the first, `pgq limits set` the others: run \
                 upgrade() as a role that may create tables in the schema",
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |d| d.message().to_owned())
            );
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// The tables of this crate's own, outside PgQueuer's catalog: the rates table, the
/// stored limits, their change log, and the workers' declared limits.
fn own_table_names(settings: &Settings) -> [String; 4] {
    [
        settings.rates_table(),
        settings.limits_table(),
        settings.limits_log_table(),
        settings.declared_table(),
    ]
}

/// The tables of this crate's own that `client`'s database lacks, qualified: the rates
/// table (rate limits need it), the stored limits and their change log (`pgq limits
/// set`) and the workers' declared limits (`pgq limits`). [`upgrade_with`] creates them;
/// PgQueuer knows nothing of them, and workers without rate limits run without them.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`] when the catalog cannot be
/// read.
pub fn missing_own_tables<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
) -> Result<Vec<String>> {
    settings.validate()?;
    let mut missing = Vec::new();
    for table in own_table_names(settings) {
        let present: bool = query_one_alone(
            client,
            sql::rates::RATES_EXIST,
            &[(&table, Type::TEXT), (&settings.schema, Type::TEXT)],
        )?
        .get(0);
        if !present {
            missing.push(settings.qualify(&table));
        }
    }
    Ok(missing)
}

/// Checks that the rates table exists, for a worker or claimer that declares rate limits.
///
/// # Errors
/// [`Error::Schema`] naming the table (fix: [`upgrade_with`]); [`Error::Db`] when the
/// catalog cannot be read.
pub(crate) fn verify_rates<C: GenericClient>(client: &mut C, settings: &Settings) -> Result<()> {
    let name = settings.rates_table();
    let present: bool = query_one_alone(
        client,
        sql::rates::RATES_EXIST,
        &[(&name, Type::TEXT), (&settings.schema, Type::TEXT)],
    )?
    .get(0);
    if present {
        return Ok(());
    }
    let database = query_one_alone(client, sql::CURRENT_DATABASE, &[])?.get(0);
    Err(Error::Schema {
        database,
        missing: vec![format!(
            "table {} (it keeps rate limits)",
            settings.qualify(&name)
        )],
    })
}

/// The statements `client`'s database still needs to match PgQueuer 1.6.0's catalog for
/// `settings`, read from its catalog without changing anything: what
/// [`upgrade_with`] would change, and PgQueuer's `pgq upgrade --plan` would print. Empty
/// when the schema is up to date. ([`upgrade_sql`] is the whole script instead, the same
/// for every database.)
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`] when the catalog cannot be
/// read.
pub fn upgrade_plan(client: &mut Client, settings: &Settings) -> Result<UpgradePlan> {
    plan::plan(client, settings)
}

/// The catalog facts of the schema holding the objects of `settings`, one line each,
/// sorted (tables, columns, indexes, constraints, sequences, enums, functions, triggers).
/// This is how tests compare a database with PgQueuer's own install.
///
/// # Errors
/// [`Error::Db`] when the catalog cannot be read.
pub fn describe_schema(client: &mut Client, settings: &Settings) -> Result<Vec<String>> {
    describe_in(client, settings)
}

/// [`describe_schema`] through any client (a transaction of the upgrade's, say).
pub(crate) fn describe_in<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
) -> Result<Vec<String>> {
    settings.validate()?;
    let schema: String = match &settings.schema {
        Some(schema) => schema.clone(),
        None => query_one_alone(client, sql::CURRENT_SCHEMA, &[])?.get(0),
    };
    let rows = query_alone(client, &sql::catalog(&schema), &[])?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

fn diff(before: &[String], after: &[String]) -> Vec<String> {
    let old: BTreeSet<&String> = before.iter().collect();
    let new: BTreeSet<&String> = after.iter().collect();
    let removed = old.difference(&new).map(|l| format!("- {l}"));
    let added = new.difference(&old).map(|l| format!("+ {l}"));
    removed.chain(added).collect()
}

/// Checks the schema with PgQueuer's default names. See [`verify_with`].
///
/// # Errors
/// As [`verify_with`].
pub fn verify(client: &mut Client) -> Result<()> {
    verify_with(client, &Settings::default())
}

/// Checks that every object the runtime depends on exists: the four tables, every column
/// (including `slot`), the seven status labels, the capacity-slot unique index, the dedupe
/// index, the log's job index, the trigger function and the trigger.
///
/// # Errors
/// [`Error::Schema`] listing every missing object by name (fix: [`upgrade_with`]);
/// [`Error::Db`] when the catalog cannot be read.
pub fn verify_with(client: &mut Client, settings: &Settings) -> Result<()> {
    let facts = describe_schema(client, settings)?;
    let missing = missing_objects(&facts, settings);
    if missing.is_empty() {
        Ok(())
    } else {
        let database = query_one_alone(client, sql::CURRENT_DATABASE, &[])?.get(0);
        Err(Error::Schema { database, missing })
    }
}

/// Every object of [`verify_with`] absent from `facts` (lines of [`describe_schema`]).
pub(crate) fn missing_objects(facts: &[String], s: &Settings) -> Vec<String> {
    let has = |prefix: &str| facts.iter().any(|f| f.starts_with(prefix));
    let mut missing = Vec::new();
    let columns: [(&str, &[&str]); 4] = [
        (
            &s.queue_table,
            &[
                "id",
                "priority",
                "queue_manager_id",
                "created",
                "updated",
                "heartbeat",
                "execute_after",
                "status",
                "entrypoint",
                "dedupe_key",
                "payload",
                "headers",
                "attempts",
                "slot",
            ],
        ),
        (
            &s.queue_table_log,
            &[
                "id",
                "created",
                "job_id",
                "status",
                "priority",
                "entrypoint",
                "traceback",
                "aggregated",
            ],
        ),
        (
            &s.statistics_table,
            &["id", "created", "count", "priority", "status", "entrypoint"],
        ),
        (
            &s.schedules_table,
            &[
                "id",
                "expression",
                "entrypoint",
                "heartbeat",
                "created",
                "updated",
                "next_run",
                "last_run",
                "status",
            ],
        ),
    ];
    for (table, cols) in columns {
        if !has(&format!("table {table} ")) {
            missing.push(format!("table {table}"));
            continue;
        }
        for col in cols {
            if !has(&format!("column {table}.{col} ")) {
                missing.push(format!("column {table}.{col}"));
            }
        }
    }
    let enum_prefix = format!("enum {} ", s.queue_status_type);
    match facts.iter().find(|f| f.starts_with(&enum_prefix)) {
        None => missing.push(format!("type {}", s.queue_status_type)),
        Some(line) => {
            let labels: Vec<&str> = line[enum_prefix.len()..].split(',').collect();
            for label in crate::job::Status::ALL.map(crate::job::Status::as_str) {
                if !labels.contains(&label) {
                    missing.push(format!("enum label {}.{label}", s.queue_status_type));
                }
            }
        }
    }
    let slot = s.slot_index_name();
    let slot_ok = facts.iter().any(|f| {
        f.starts_with(&format!("index CREATE UNIQUE INDEX {slot} ON "))
            && f.contains("USING btree (entrypoint, slot) WHERE ((status = 'picked'::")
    });
    if !slot_ok {
        missing.push(format!("unique index {slot}"));
    }
    let dedupe = format!("{}_unique_dedupe_key", s.queue_table);
    if !has(&format!("index CREATE UNIQUE INDEX {dedupe} ON ")) {
        missing.push(format!("unique index {dedupe}"));
    }
    let log_index = format!("{}_job_id_status", s.queue_table_log);
    if !has(&format!("index CREATE INDEX {log_index} ON ")) {
        missing.push(format!("index {log_index}"));
    }
    if !has(&format!("function {} ", s.function)) {
        missing.push(format!("function {}", s.function));
    }
    if !has(&format!("trigger CREATE TRIGGER {} ", s.trigger)) {
        missing.push(format!("trigger {}", s.trigger));
    }
    missing
}

/// The SQL that [`uninstall_with`] runs, rendered for `settings` (for `pgq sql uninstall`
/// and review): drop the trigger, the function, the four tables and the enum types, each
/// `IF EXISTS`.
///
/// # Errors
/// [`Error::InvalidSetting`] when a name in `settings` is not acceptable.
pub fn uninstall_sql(settings: &Settings) -> Result<String> {
    settings.validate()?;
    Ok(sql::uninstall(settings))
}

/// Removes the schema with PgQueuer's default names. See [`uninstall_with`].
///
/// # Errors
/// As [`uninstall_with`].
pub fn uninstall(client: &mut Client) -> Result<()> {
    uninstall_with(client, &Settings::default())
}

/// Drops the trigger, the function, the four tables (with every job and log row) and the
/// enum types. Objects already absent are skipped. The schema itself is kept.
///
/// # Errors
/// [`Error::InvalidSetting`] for a bad name; [`Error::Db`] when a drop fails.
pub fn uninstall_with(client: &mut Client, settings: &Settings) -> Result<()> {
    client.batch_execute(&uninstall_sql(settings)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        for settings in [
            Settings::default(),
            Settings::with_prefix("app_").schema("myq"),
        ] {
            for step in upgrade_sql(&settings).unwrap() {
                assert!(!step.contains("{{"), "unfilled placeholder in {step}");
            }
        }
    }

    #[test]
    fn bad_names_build_no_sql() {
        let settings = Settings {
            function: "f(); drop table x; --".into(),
            ..Settings::default()
        };
        let err = upgrade_sql(&settings).unwrap_err();
        assert!(err.to_string().contains("function"), "{err}");
    }

    #[test]
    fn diff_lists_removed_then_added() {
        let before = vec!["a".to_owned(), "b".to_owned()];
        let after = vec!["b".to_owned(), "c".to_owned()];
        assert_eq!(diff(&before, &after), ["- a", "+ c"]);
        assert!(diff(&after, &after).is_empty());
    }
}
