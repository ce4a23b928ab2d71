//! `upgrade()`'s last step: the statement functions a connection through a transaction
//! pooler runs its per-job statements with (`sql/functions.rs` says why).
//!
//! Each function's signature and columns are the server's own description of its
//! statement, read by preparing the statement inside the step's transaction, so they
//! cannot drift from the statement text.

use postgres::error::SqlState;
use postgres::types::{Kind, Type};
use postgres::{Client, GenericClient};

use crate::connect::query_alone;
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::sql::{self, functions};

/// Creates the statement functions `settings` lacks; returns their names.
///
/// A role that may not create functions in the schema (an application role, with a
/// schema its owner installed), or a server that is read-only, gets a warning and no
/// functions rather than an error: `upgrade()` in a startup hook worked for such a role
/// before this step existed, and the functions only spare planning.
pub(super) fn install(client: &mut Client, settings: &Settings) -> Result<Vec<String>> {
    let wanted: Vec<(String, String)> = functions::per_job_statements(settings)
        .into_iter()
        .filter_map(|text| functions::function_name(settings, &text).map(|name| (name, text)))
        .collect();
    // The common case, every function present, costs one catalog read.
    if missing(client, settings, &wanted)?.is_empty() {
        return Ok(Vec::new());
    }
    match create_missing(client, settings, &wanted) {
        Err(Error::Db(e))
            if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE)
                || e.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) =>
        {
            log::warn!(
                "statement functions not created ({}); through a transaction pooler the \
                 per-job statements are planned on every run until upgrade() runs as a role \
                 that may create functions in the schema",
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |d| d.message().to_owned())
            );
            Ok(Vec::new())
        }
        other => other,
    }
}

/// [`install`]'s work, in one transaction under the upgrade lock.
fn create_missing(
    client: &mut Client,
    settings: &Settings,
    wanted: &[(String, String)],
) -> Result<Vec<String>> {
    let mut tx = client.transaction()?;
    tx.query_typed(
        sql::ADVISORY_XACT_LOCK,
        &[(&settings.upgrade_lock_key(), Type::INT8)],
    )?;
    tx.batch_execute(sql::QUIET_NOTICES)?;
    // Read again under the lock: another process may have made them meanwhile.
    let mut made = Vec::new();
    for (name, text) in missing(&mut tx, settings, wanted)? {
        let statement = tx.prepare(text)?;
        let params: Option<Vec<String>> = statement.params().iter().map(type_name).collect();
        let columns: Option<Vec<(String, String)>> = statement
            .columns()
            .iter()
            .map(|c| type_name(c.type_()).map(|t| (c.name().to_owned(), t)))
            .collect();
        // Closed here, inside the transaction, so nothing outlives it through a pooler.
        drop(statement);
        let (Some(params), Some(columns)) = (params, columns) else {
            log::debug!("statement function {name}: a type is not built in; left unnamed");
            continue;
        };
        if columns.is_empty() || has_duplicates(&columns) {
            continue;
        }
        let qualified = settings.qualify(name);
        tx.batch_execute(&functions::create(&qualified, &params, &columns, text))?;
        made.push(qualified);
    }
    tx.commit()?;
    Ok(made)
}

/// The entries of `wanted` (name, text) whose function does not exist.
fn missing<'a, C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    wanted: &'a [(String, String)],
) -> Result<Vec<(&'a String, &'a String)>> {
    let names: Vec<&str> = wanted.iter().map(|(name, _)| name.as_str()).collect();
    let rows = query_alone(
        client,
        functions::FUNCTIONS_EXIST,
        &[(&names, Type::TEXT_ARRAY), (&settings.schema, Type::TEXT)],
    )?;
    Ok(wanted
        .iter()
        .zip(rows)
        .filter(|(_, row)| !row.get::<_, bool>(0))
        .map(|((name, text), _)| (name, text))
        .collect())
}

/// A built-in type's qualified name, or `None` for a type of a schema (an enum of
/// PgQueuer's, say), which the function would then depend on.
fn type_name(ty: &Type) -> Option<String> {
    let built_in = ty.schema() == "pg_catalog"
        && match ty.kind() {
            Kind::Simple => true,
            Kind::Array(member) => member.schema() == "pg_catalog",
            _ => false,
        };
    built_in.then(|| format!("pg_catalog.{}", sql::quote_identifier(ty.name())))
}

fn has_duplicates(columns: &[(String, String)]) -> bool {
    let names: std::collections::BTreeSet<&String> = columns.iter().map(|(n, _)| n).collect();
    names.len() != columns.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_built_in_types_are_named() {
        assert_eq!(
            type_name(&Type::INT8_ARRAY).as_deref(),
            Some("pg_catalog.\"_int8\"")
        );
        assert_eq!(
            type_name(&Type::TEXT).as_deref(),
            Some("pg_catalog.\"text\"")
        );
        let status = Type::new(
            "pgqueuer_status".into(),
            1,
            Kind::Enum(vec!["queued".into()]),
            "public".into(),
        );
        assert_eq!(type_name(&status), None);
        let statuses = Type::new(
            "_pgqueuer_status".into(),
            2,
            Kind::Array(status),
            "public".into(),
        );
        assert_eq!(type_name(&statuses), None);
    }
}
