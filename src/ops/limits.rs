//! Limits stored in the database ([`set_limits`]): they override what workers declare, and
//! running workers take a change within a second.

use std::time::SystemTime;

use postgres::GenericClient;
use postgres::types::Type;

use crate::connect;
use crate::error::{Error, Result};
use crate::job::check_entrypoint;
use crate::rate::{RateLimit, check_windows};
use crate::settings::Settings;
use crate::sql::overrides as sql;

/// An entrypoint's stored limits ([`set_limits`]). `None` keeps what workers declare.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredLimits {
    /// The entrypoint.
    pub entrypoint: String,
    /// The concurrency limit that overrides the declared one (0: none).
    pub concurrency_limit: Option<u32>,
    /// The rate limits that override the declared ones (empty: none).
    pub rates: Option<Vec<RateLimit>>,
    /// When they last changed.
    pub changed: SystemTime,
    /// Who changed them.
    pub changed_by: String,
}

/// What one running worker of this crate declares for one of its entrypoints
/// ([`declared_limits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeclaredLimits {
    /// The worker (its `queue_manager_id`).
    pub worker: uuid::Uuid,
    /// The entrypoint.
    pub entrypoint: String,
    /// The concurrency limit it declares (0: none).
    pub concurrency_limit: u32,
    /// The rate limits it declares, as text (`100/s`).
    pub rates: Vec<String>,
    /// When the worker last said so (every 10 s while it runs).
    pub seen: SystemTime,
}

/// One change of the stored limits ([`limit_changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitChange {
    /// When.
    pub changed: SystemTime,
    /// Who, as the caller of [`set_limits`] or [`unset_limits`] said.
    pub changed_by: String,
    /// The database role that made it.
    pub db_user: String,
    /// The entrypoint.
    pub entrypoint: String,
    /// `set` or `unset`.
    pub action: String,
    /// The stored concurrency limit after a `set`.
    pub concurrency_limit: Option<u32>,
    /// The stored rate limits after a `set`, as text (`100/s`).
    pub rates: Option<Vec<String>>,
}

/// Stores limits for `entrypoint` that override what every worker of this crate declares
/// for it: `concurrency_limit` (0: none) and `rates` (empty: none), each `None` to keep
/// what is stored. `by` says who changes them (logged with the time and the database
/// role). Running workers read them again within a second (a notification on a channel
/// of this crate's own). Lowering a concurrency limit revokes no running job: the slots
/// beyond it drain as their jobs end. Python PgQueuer workers do not read stored limits.
///
/// # Errors
/// [`Error::InvalidInput`] for a bad entrypoint, rate limit or `by` (nothing is stored);
/// [`Error::Db`], for instance when the tables are missing (run [`crate::upgrade`]).
pub fn set_limits<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    entrypoint: &str,
    concurrency_limit: Option<u32>,
    rates: Option<&[RateLimit]>,
    by: &str,
) -> Result<StoredLimits> {
    settings.validate()?;
    check_entrypoint("entrypoint", entrypoint)?;
    check_by(by)?;
    if concurrency_limit.is_some_and(|l| i32::try_from(l).is_err()) {
        return Err(Error::invalid(
            "concurrency_limit",
            format!("{concurrency_limit:?} is larger than {}", i32::MAX),
        ));
    }
    if let Some(rates) = rates {
        check_windows(entrypoint, rates)?;
    }
    let limit = concurrency_limit.map(|l| i32::try_from(l).unwrap_or(i32::MAX));
    let texts: Option<Vec<String>> = rates.map(|r| r.iter().map(ToString::to_string).collect());
    let channel = settings.limits_channel();
    let row = connect::query_one_alone(
        client,
        &sql::overrides_set(settings),
        &[
            (&entrypoint, Type::TEXT),
            (&limit, Type::INT4),
            (&texts, Type::TEXT_ARRAY),
            (&by, Type::TEXT),
            (&channel, Type::TEXT),
        ],
    )
    .map_err(needs_upgrade)?;
    stored_of(&row)
}

/// Deletes `entrypoint`'s stored limits, so that workers go back to what they declare;
/// logged as [`set_limits`] logs. False when none were stored.
///
/// # Errors
/// As [`set_limits`].
pub fn unset_limits<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    entrypoint: &str,
    by: &str,
) -> Result<bool> {
    settings.validate()?;
    check_entrypoint("entrypoint", entrypoint)?;
    check_by(by)?;
    let channel = settings.limits_channel();
    let rows = connect::query_alone(
        client,
        &sql::overrides_unset(settings),
        &[
            (&entrypoint, Type::TEXT),
            (&by, Type::TEXT),
            (&channel, Type::TEXT),
        ],
    )
    .map_err(needs_upgrade)?;
    Ok(!rows.is_empty())
}

/// Every entrypoint's stored limits, by name; none where the table is missing (a schema
/// this crate's [`crate::upgrade`] has not run on).
///
/// # Errors
/// [`Error::Db`]; [`Error::InvalidInput`] for a stored rate this crate cannot read
/// (written by another program).
pub fn stored_limits<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
) -> Result<Vec<StoredLimits>> {
    settings.validate()?;
    if !exists(client, settings, &settings.limits_table())? {
        return Ok(Vec::new());
    }
    connect::query_alone(
        client,
        &sql::overrides_select(settings),
        &[(&None::<Vec<String>>, Type::TEXT_ARRAY)],
    )?
    .iter()
    .map(stored_of)
    .collect()
}

/// Whether this crate's own `table` exists. Asked first rather than read from a failed
/// statement, which would abort the caller's transaction.
fn exists<C: GenericClient>(client: &mut C, settings: &Settings, table: &str) -> Result<bool> {
    Ok(connect::query_one_alone(
        client,
        crate::sql::rates::RATES_EXIST,
        &[(&table, Type::TEXT), (&settings.schema, Type::TEXT)],
    )?
    .try_get(0)?)
}

/// For a change: a missing table means the schema needs this crate's upgrade.
fn needs_upgrade(e: Error) -> Error {
    match &e {
        Error::Db(db) if db.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => {
            Error::invalid(
                "stored limits",
                format!(
                    "the database has no table for them ({}): run upgrade() (or `pgq \
                     upgrade`) of this version first",
                    db.as_db_error()
                        .map_or_else(|| db.to_string(), |d| d.message().to_owned())
                ),
            )
        }
        _ => e,
    }
}

/// What each running worker of this crate declares, per entrypoint and worker: workers
/// record it as they start and every 10 s, and delete it as they stop; a worker not
/// heard from for 35 s is left out. Python PgQueuer workers record nothing. Empty where
/// the table is missing (a schema this crate's [`crate::upgrade`] has not run on).
///
/// # Errors
/// [`Error::Db`].
pub fn declared_limits<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
) -> Result<Vec<DeclaredLimits>> {
    settings.validate()?;
    if !exists(client, settings, &settings.declared_table())? {
        return Ok(Vec::new());
    }
    connect::query_alone(client, &sql::declared_select(settings), &[])?
        .iter()
        .map(|row| {
            let limit: i32 = row.try_get("concurrency_limit")?;
            Ok(DeclaredLimits {
                worker: row.try_get("worker")?,
                entrypoint: row.try_get("entrypoint")?,
                concurrency_limit: u32::try_from(limit).unwrap_or(0),
                rates: row.try_get("rates")?,
                seen: row.try_get("seen")?,
            })
        })
        .collect()
}

/// The latest `n` changes of the stored limits, newest first; none where the table is
/// missing.
///
/// # Errors
/// [`Error::Db`].
pub fn limit_changes<C: GenericClient>(
    client: &mut C,
    settings: &Settings,
    n: usize,
) -> Result<Vec<LimitChange>> {
    settings.validate()?;
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    if !exists(client, settings, &settings.limits_log_table())? {
        return Ok(Vec::new());
    }
    connect::query_alone(client, &sql::overrides_log(settings), &[(&n, Type::INT8)])?
        .iter()
        .map(|row| {
            let limit: Option<i32> = row.try_get("concurrency_limit")?;
            Ok(LimitChange {
                changed: row.try_get("changed")?,
                changed_by: row.try_get("changed_by")?,
                db_user: row.try_get("db_user")?,
                entrypoint: row.try_get("entrypoint")?,
                action: row.try_get("action")?,
                concurrency_limit: limit.map(|l| u32::try_from(l).unwrap_or(0)),
                rates: row.try_get("rates")?,
            })
        })
        .collect()
}

/// Reads one stored row (`entrypoint, concurrency_limit, rates, changed, changed_by`).
pub(crate) fn stored_of(row: &postgres::Row) -> Result<StoredLimits> {
    let entrypoint: String = row.try_get("entrypoint")?;
    let limit: Option<i32> = row.try_get("concurrency_limit")?;
    let texts: Option<Vec<String>> = row.try_get("rates")?;
    let rates = match texts {
        None => None,
        Some(texts) => {
            let rates = texts
                .iter()
                .map(|t| RateLimit::parse(t))
                .collect::<Result<Vec<_>>>()
                .map_err(|e| {
                    Error::invalid(
                        "rates",
                        format!(
                            "the stored rate limits of {entrypoint:?} cannot be read ({e}); \
                             store them again with `pgq limits set`"
                        ),
                    )
                })?;
            check_windows(&entrypoint, &rates)?;
            Some(rates)
        }
    };
    let concurrency_limit = match limit {
        None => None,
        Some(l) => Some(u32::try_from(l).map_err(|_| {
            Error::invalid(
                "concurrency_limit",
                format!(
                    "the stored concurrency limit of {entrypoint:?} is {l}, not a count; \
                     store it again with `pgq limits set`"
                ),
            )
        })?),
    };
    Ok(StoredLimits {
        concurrency_limit,
        rates,
        changed: row.try_get("changed")?,
        changed_by: row.try_get("changed_by")?,
        entrypoint,
    })
}

/// Who changes a limit: some text, at most 200 characters, no control characters.
fn check_by(by: &str) -> Result<()> {
    if by.trim().is_empty() || by.chars().count() > 200 || by.chars().any(char::is_control) {
        return Err(Error::invalid(
            "by",
            "say who changes the limits in 1 to 200 printable characters",
        ));
    }
    Ok(())
}
