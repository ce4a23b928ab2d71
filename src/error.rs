//! The crate's error type.

use std::error::Error as StdError;
use std::fmt;

/// Everything that can go wrong in this crate.
///
/// `postgres::Error` displays only "db error"; every variant that wraps one prints the
/// whole source chain instead (`db error: ERROR: relation "x" does not exist`), so a log
/// line or a `main` that returns this error says what actually happened.
///
/// `Debug` prints the same message followed by the variant's name, because `Debug` is
/// what a person reads when `main` returns the error or `unwrap` and `expect` panic on it:
/// `the PgQueuer schema is missing or outdated: column pgqueuer.slot; run
/// pgqueuer::upgrade() or `pgq upgrade` (Error::Schema)`. `{:#?}` shows the fields.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A connection could not be opened. `target` names the host, port, user and database
    /// that were tried.
    #[error("could not connect to {target}: {}{advice}", chain(.source))]
    Connect {
        /// `user@host:port/dbname` as resolved from the DSN and environment.
        target: String,
        /// What the driver reported.
        #[source]
        source: postgres::Error,
        /// What to change, when the settings can tell (TLS: the server refused plaintext,
        /// offers no TLS, or its certificate did not verify); empty otherwise.
        advice: String,
    },

    /// The connection string or the connection environment could not be understood.
    #[error("invalid connection settings: {0}")]
    ConnectionConfig(String),

    /// A `Settings` value (an object name, the durability level...) is not acceptable.
    /// Nothing was sent to the database.
    #[error("invalid setting {setting} = {value:?}: {reason}")]
    InvalidSetting {
        /// The setting's name, as in `Settings` (and `PGQUEUER_<NAME>` in the environment).
        setting: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },

    /// An argument is not acceptable. Nothing was sent to the database.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The argument or field that was wrong.
        field: String,
        /// Why it was rejected.
        reason: String,
    },

    /// No pooled connection could be had within the pool's connection timeout.
    #[error("no database connection available: {}", chain(.0))]
    Pool(#[from] r2d2::Error),

    /// The database rejected a statement or the connection failed while running one.
    /// Errors that only a pooler in transaction mode causes (a prepared statement that
    /// vanished, or exists twice) say which setting fixes them.
    #[error("{}{}", chain(.0), pooler_advice(.0))]
    Db(#[from] postgres::Error),

    /// The database lacks objects this crate needs. Every missing or outdated object is
    /// named. Call `upgrade()` (or `pgq upgrade`) to fix it.
    #[error(
        "the PgQueuer schema in database {database:?} is missing or outdated: {}; run \
         pgqueuer::upgrade() or `pgq upgrade` on it (or connect to the database that has it)",
        .missing.join(", ")
    )]
    Schema {
        /// The database checked (`current_database()`), since the wrong one is a common
        /// cause: a DSN that was not set, and a default database that is the user's name.
        database: String,
        /// One entry per missing object, e.g. `column pgqueuer.slot`.
        missing: Vec<String>,
    },

    /// An enqueue with `OnConflict::Raise` hit a queued or picked job with the same
    /// dedupe key. Nothing of the batch was inserted.
    #[error("duplicate job: a queued or picked job already has one of the dedupe keys {keys:?}")]
    DuplicateJob {
        /// The dedupe keys of the whole call.
        keys: Vec<String>,
        /// The unique violation reported by the database.
        #[source]
        source: postgres::Error,
    },

    /// A waited-for operation did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),

    /// The database answered in a shape this crate does not expect: a row it must return
    /// is missing, or a value cannot be read (a bug, or the schema was changed underneath).
    #[error("unexpected answer from the database: {0}")]
    Unexpected(String),

    /// The worker stopped because of a failure of its own machinery (not of a handler).
    #[error("worker failed: {0}")]
    Worker(String),
}

/// The advice for an error that a transaction pooler causes when the crate was not told
/// about it, or nothing.
fn pooler_advice(e: &postgres::Error) -> &'static str {
    use postgres::error::SqlState;
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_SQL_STATEMENT_NAME
                || *c == SqlState::DUPLICATE_PSTATEMENT =>
        {
            " (prepared statements do not survive here: this looks like a pooler in \
             transaction mode, such as PgBouncer with pool_mode = transaction, that does not \
             keep them; set ConnectOptions::pooler to Pooler::Transaction, or \
             PGQUEUER_POOLER=transaction, and give workers a direct listen_dsn / \
             PGQUEUER_LISTEN_DSN; with PgBouncer 1.21 or later, max_prepared_statements \
             above 0 lets Pooler::TransactionPrepared keep them)"
        }
        _ => "",
    }
}

impl Error {
    /// The SQLSTATE of the underlying database error, if there is one.
    pub fn sqlstate(&self) -> Option<&postgres::error::SqlState> {
        match self {
            Error::Db(e)
            | Error::Connect { source: e, .. }
            | Error::DuplicateJob { source: e, .. } => e.code(),
            _ => None,
        }
    }

    /// True for an error only a pooler in transaction mode causes when the crate was not
    /// told about it (see [`crate::Pooler`]): retrying cannot help.
    pub fn is_pooler_mismatch(&self) -> bool {
        matches!(self, Error::Db(e) if !pooler_advice(e).is_empty())
    }

    /// True when the database could not be reached for a moment (a lost or refused
    /// connection, a pool that could not hand one out, a server shutting down or
    /// read-only after a failover): the same call may succeed a moment later.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::Db(e) => e.is_closed() || crate::sqlstate::is_connection_lost(e),
            Error::Pool(_) | Error::Connect { .. } => true,
            _ => false,
        }
    }

    /// True for [`Error::DuplicateJob`].
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Error::DuplicateJob { .. })
    }

    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// An [`Error::InvalidInput`] naming `field` instead (any other error as it is): a check
    /// run per item names the item only when it fails, rather than formatting each name.
    pub(crate) fn in_field(self, field: impl FnOnce() -> String) -> Self {
        match self {
            Error::InvalidInput { reason, .. } => Error::InvalidInput {
                field: field(),
                reason,
            },
            other => other,
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return self.fields(f);
        }
        write!(f, "{self} (Error::{})", self.variant())
    }
}

impl Error {
    /// The variant's name, for `Debug`.
    fn variant(&self) -> &'static str {
        match self {
            Error::Connect { .. } => "Connect",
            Error::ConnectionConfig(_) => "ConnectionConfig",
            Error::InvalidSetting { .. } => "InvalidSetting",
            Error::InvalidInput { .. } => "InvalidInput",
            Error::Pool(_) => "Pool",
            Error::Db(_) => "Db",
            Error::Schema { .. } => "Schema",
            Error::DuplicateJob { .. } => "DuplicateJob",
            Error::Timeout(_) => "Timeout",
            Error::Unexpected(_) => "Unexpected",
            Error::Worker(_) => "Worker",
        }
    }

    /// The structured form, for `{:#?}`.
    fn fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.variant();
        match self {
            Error::Connect {
                target,
                source,
                advice,
            } => f
                .debug_struct(name)
                .field("target", target)
                .field("source", source)
                .field("advice", advice)
                .finish(),
            Error::InvalidSetting {
                setting,
                value,
                reason,
            } => f
                .debug_struct(name)
                .field("setting", setting)
                .field("value", value)
                .field("reason", reason)
                .finish(),
            Error::InvalidInput { field, reason } => f
                .debug_struct(name)
                .field("field", field)
                .field("reason", reason)
                .finish(),
            Error::Schema { database, missing } => f
                .debug_struct(name)
                .field("database", database)
                .field("missing", missing)
                .finish(),
            Error::DuplicateJob { keys, source } => f
                .debug_struct(name)
                .field("keys", keys)
                .field("source", source)
                .finish(),
            Error::ConnectionConfig(s) | Error::Unexpected(s) | Error::Worker(s) => {
                f.debug_tuple(name).field(s).finish()
            }
            Error::Pool(e) => f.debug_tuple(name).field(e).finish(),
            Error::Db(e) => f.debug_tuple(name).field(e).finish(),
            Error::Timeout(d) => f.debug_tuple(name).field(d).finish(),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Formats an error followed by each of its sources, joined by ": ", skipping a source
/// whose text the previous message already ends with.
pub(crate) fn chain<'a>(err: &'a (dyn StdError + 'static)) -> ErrorChain<'a> {
    ErrorChain(err)
}

/// Display adapter returned by [`chain`].
pub(crate) struct ErrorChain<'a>(&'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut source = self.0.source();
        while let Some(err) = source {
            let text = err.to_string();
            if !last.ends_with(&text) {
                write!(f, ": {text}")?;
            }
            last = text;
            source = err.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Leaf;
    impl fmt::Display for Leaf {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Connection refused (os error 111)")
        }
    }
    impl StdError for Leaf {}

    #[derive(Debug)]
    struct Outer(Leaf);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("error connecting to server")
        }
    }
    impl StdError for Outer {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn chain_includes_every_source() {
        let e = Outer(Leaf);
        assert_eq!(
            chain(&e).to_string(),
            "error connecting to server: Connection refused (os error 111)"
        );
    }

    #[test]
    fn debug_reads_like_display_and_names_the_variant() {
        let e = Error::Schema {
            database: "app".into(),
            missing: vec!["column pgqueuer.slot".into()],
        };
        let debug = format!("{e:?}");
        assert!(debug.starts_with(&e.to_string()), "{debug}");
        assert!(debug.contains("upgrade"), "{debug}");
        assert!(debug.ends_with("(Error::Schema)"), "{debug}");
        let fields = format!("{e:#?}");
        assert!(fields.starts_with("Schema {"), "{fields}");
        assert!(fields.contains("column pgqueuer.slot"), "{fields}");
    }

    #[test]
    fn chain_skips_a_repeated_tail() {
        let e = Leaf;
        assert_eq!(chain(&e).to_string(), "Connection refused (os error 111)");
    }
}
