//! Connecting: DSN resolution, the r2d2 pool, and per-connection prepared statements.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, Config, GenericClient, Row, Statement};

use crate::error::{Error, Result, chain};
use crate::sql::functions;
use crate::tls::{Connector, TlsSettings};

/// The connection pool every part of this crate takes.
pub type Pool = r2d2::Pool<Manager>;

/// A connection checked out of a [`Pool`]. Derefs to [`Conn`] (and from there to
/// `postgres::Client`).
pub type PooledConn = r2d2::PooledConnection<Manager>;

/// How long a connection may go without the peer acknowledging anything before it is
/// failed, unless the DSN sets `tcp_user_timeout` (seconds): see `resolve_config`.
pub(crate) const NETWORK_DEADLINE: Duration = Duration::from_secs(30);

/// How long a validity probe of a pooled or listening connection may take.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A database connection with its own cache of prepared statements.
///
/// `postgres::Client` has no statement cache and a `Statement` is bound to the connection
/// that prepared it, so the cache lives beside the client: each statement this crate runs
/// per job is prepared once per connection and reused. Derefs to `postgres::Client`, so
/// it can be used as one.
pub struct Conn {
    client: Client,
    statements: Statements,
    target: Target,
    /// Where the listener connects when this one goes through a transaction pooler.
    listen: Option<Target>,
    /// Sequential and bitmap scans, sorts and JIT are off and plans are generic in this
    /// session ([`Conn::plan_with_indexes`]).
    index_plans: bool,
}

/// What sits between this crate and PostgreSQL, which decides whether a connection may
/// keep state between transactions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooler {
    /// A direct connection, or a pooler in session mode (PgBouncer `pool_mode =
    /// session`): the session is ours, so statements are prepared once per connection
    /// and the worker LISTENs on a connection like the pool's.
    #[default]
    Direct,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): consecutive
    /// transactions may run on different server connections, so nothing may outlive a
    /// transaction. Every statement runs unnamed with its declared parameter types, one
    /// round trip each as before: the per-job ones as calls of the statement functions
    /// `upgrade()` creates, whose plans PostgreSQL keeps per server connection (without
    /// them, as the statements themselves, planned on every execution); no session
    /// setting is made; the upgrade lock is taken per transaction. LISTEN cannot
    /// work through such a pooler: the worker listens on `listen_dsn` when one is given
    /// and otherwise polls, saying so at start.
    Transaction,
    /// A pooler in transaction mode that keeps protocol-level prepared statements for its
    /// clients: PgBouncer 1.21 or later with `max_prepared_statements` above 0. As
    /// [`Pooler::Transaction`] in all else, but the calls of the statement functions are
    /// prepared once per connection, as on a direct connection, so that no per-job
    /// statement is parsed or planned again (statements without a function still run
    /// unnamed). Through a pooler that does not keep them, the first statement run on
    /// another server connection fails (SQLSTATE 26000), with advice.
    TransactionPrepared,
}

impl Pooler {
    /// Reads `direct`, `session` (the same as direct), `transaction` or
    /// `transaction-prepared`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `PGQUEUER_POOLER` for anything else.
    pub fn parse(text: &str) -> Result<Pooler> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "direct" | "none" | "session" => Ok(Pooler::Direct),
            "transaction" => Ok(Pooler::Transaction),
            "transaction-prepared" | "transaction_prepared" => Ok(Pooler::TransactionPrepared),
            _ => Err(Error::InvalidSetting {
                setting: "PGQUEUER_POOLER",
                value: text.to_owned(),
                reason: "expected direct, session, transaction (PgBouncer's pool_mode) or \
                         transaction-prepared (transaction mode with PgBouncer's \
                         max_prepared_statements)"
                    .into(),
            }),
        }
    }

    /// Whether consecutive transactions may run on different server connections, so that
    /// no session state (settings, LISTEN) can be kept.
    pub fn is_transaction_mode(self) -> bool {
        self != Pooler::Direct
    }
}

/// A statement parameter with its type. Every statement this crate runs names its
/// parameter types, so that through a transaction pooler it can run unnamed in one
/// round trip with nothing to describe first; on a direct connection the types are
/// checked against the server's (in debug builds) when the statement is prepared.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// The per-connection statement cache: prepared statements, unless a transaction pooler
/// forbids names; then, for each statement, the call of its statement function, if
/// `upgrade()` made one (`sql/functions.rs`).
#[derive(Default)]
struct Statements {
    pooler: Pooler,
    prepared: HashMap<String, Statement>,
    /// Through a transaction pooler: each statement run so far, with the call of its
    /// function, or `None` to run it unnamed.
    functions: HashMap<String, Option<String>>,
}

impl Statements {
    /// Runs `sql` with `params` on `client`: a statement prepared on first use, or, for a
    /// transaction pooler, an unnamed one with the given types.
    fn query<C: GenericClient>(
        &mut self,
        client: &mut C,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>> {
        match self.pooler {
            Pooler::Direct => {
                let statement = match self.prepared.get(sql) {
                    Some(statement) => statement.clone(),
                    None => {
                        let statement = client.prepare(sql)?;
                        debug_assert_eq!(
                            statement.params(),
                            params.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
                            "declared parameter types of {sql}"
                        );
                        self.prepared.insert(sql.to_owned(), statement.clone());
                        statement
                    }
                };
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                Ok(client.query(&statement, &values)?)
            }
            Pooler::Transaction | Pooler::TransactionPrepared => {
                // One lookup of the (long) statement text per run; the catalog is read
                // once per connection and statement.
                let call = match self.functions.get(sql) {
                    Some(call) => call.clone(),
                    None => {
                        let call = function_call(client, sql, params.len())?;
                        self.functions.insert(sql.to_owned(), call.clone());
                        call
                    }
                };
                if let (Pooler::TransactionPrepared, Some(call)) = (self.pooler, &call) {
                    return self.query_prepared(client, sql, call, params);
                }
                match client.query_typed(call.as_deref().unwrap_or(sql), params) {
                    Ok(rows) => Ok(rows),
                    Err(e) => {
                        // Dropped since it was found (an uninstall): look again next time.
                        if e.code() == Some(&SqlState::UNDEFINED_FUNCTION) {
                            self.functions.remove(sql);
                        }
                        Err(e.into())
                    }
                }
            }
        }
    }

    /// Runs `call` (the call of `sql`'s statement function) prepared once per connection,
    /// through a pooler that keeps prepared statements ([`Pooler::TransactionPrepared`]).
    fn query_prepared<C: GenericClient>(
        &mut self,
        client: &mut C,
        sql: &str,
        call: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>> {
        let statement = match self.prepared.get(sql) {
            Some(statement) => statement.clone(),
            None => {
                let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
                let statement = client.prepare_typed(call, &types)?;
                self.prepared.insert(sql.to_owned(), statement.clone());
                statement
            }
        };
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
        client.query(&statement, &values).map_err(|e| {
            // Dropped since it was found (an uninstall): look again next time.
            if e.code() == Some(&SqlState::UNDEFINED_FUNCTION) {
                self.functions.remove(sql);
                self.prepared.remove(sql);
            }
            e.into()
        })
    }
}

/// The call of `sql`'s statement function, found by the end of its name, or `None` when
/// the database has none (an `upgrade()` of an older release, or a prefix too long).
fn function_call<C: GenericClient>(
    client: &mut C,
    sql: &str,
    params: usize,
) -> Result<Option<String>> {
    let suffix = functions::suffix(sql);
    let rows = client.query_typed(functions::FUNCTION_LOOKUP, &[(&suffix, Type::TEXT)])?;
    let call = rows
        .first()
        .map(|row| functions::call(&row.get::<_, String>(0), params));
    if call.is_none() {
        log::debug!("no statement function {suffix}: running the statement unnamed");
    }
    Ok(call)
}

/// Runs a one-shot statement given as text through any client, unnamed with its
/// parameter types: one round trip, nothing prepared, so it works through a transaction
/// pooler too. For operator functions and the schema; per-job statements go through
/// [`Conn::query_cached`].
pub(crate) fn query_alone<C: GenericClient>(
    client: &mut C,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<Row>> {
    Ok(client.query_typed(sql, params)?)
}

/// As [`query_alone`], for a statement that returns exactly one row.
pub(crate) fn query_one_alone<C: GenericClient>(
    client: &mut C,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Row> {
    Ok(client.query_typed_one(sql, params)?)
}

/// A transaction on a [`Conn`] that keeps using its statement cache
/// ([`Conn::transaction_cached`]).
pub(crate) struct CachedTransaction<'a> {
    tx: postgres::Transaction<'a>,
    statements: &'a mut Statements,
}

impl CachedTransaction<'_> {
    /// As [`Conn::query_cached`], inside the transaction.
    pub(crate) fn query_cached(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.statements.query(&mut self.tx, sql, params)
    }

    pub(crate) fn commit(self) -> Result<()> {
        Ok(self.tx.commit()?)
    }
}

impl Conn {
    /// The prepared statement for `sql` on this connection, preparing it on first use.
    ///
    /// A prepared statement outlives the transaction that made it, so it cannot be used
    /// through a transaction pooler ([`Pooler::Transaction`]): this crate's own
    /// statements go through [`Conn::query_cached`] instead, which knows the difference.
    ///
    /// # Errors
    /// The database's error when `sql` cannot be prepared.
    pub fn prepare_cached(&mut self, sql: &str) -> Result<Statement> {
        if let Some(statement) = self.statements.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements
            .prepared
            .insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Runs `sql` with `params` (each with its type) in one round trip: prepared once per
    /// connection, or unnamed where a transaction pooler forbids names (as a call of its
    /// statement function, when `upgrade()` made one for it and this connection's role
    /// owns it). The statement for code that must work through either (see [`Pooler`]).
    ///
    /// # Errors
    /// The database's error.
    pub fn query_cached(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>> {
        self.statements.query(&mut self.client, sql, params)
    }

    /// As [`Conn::query_cached`], for a statement that returns exactly one row.
    ///
    /// # Errors
    /// The database's error, or [`Error::Unexpected`] for another number of rows.
    pub fn query_one_cached(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Row> {
        let mut rows = self.query_cached(sql, params)?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(Error::Unexpected(format!(
                "a statement returned {n} rows where one was expected"
            ))),
        }
    }

    /// Opens a transaction whose statements still use this connection's cache.
    pub(crate) fn transaction_cached(&mut self) -> Result<CachedTransaction<'_>> {
        Ok(CachedTransaction {
            tx: self.client.transaction()?,
            statements: &mut self.statements,
        })
    }

    /// The kind of pooler between this connection and PostgreSQL.
    pub fn pooler(&self) -> Pooler {
        self.statements.pooler
    }

    /// Where a LISTEN connection beside this one connects: like this connection when it
    /// is direct; through a transaction pooler, to the listen DSN
    /// (`ConnectOptions::listen_dsn`), or nowhere (LISTEN cannot work there: poll). Its
    /// `application_name` ends in `-listen`.
    pub(crate) fn listen_target(&self) -> Option<Target> {
        match self.statements.pooler {
            Pooler::Direct => Some(self.target.for_listening()),
            Pooler::Transaction | Pooler::TransactionPrepared => {
                self.listen.as_ref().map(Target::for_listening)
            }
        }
    }

    /// Opens connections like this one (the same target, TLS settings and pooler) outside
    /// any pool, their `application_name` ending in `-{role}`: for a loop that keeps a
    /// fleet safe (heartbeats, outcomes), which nothing a handler does with the pool may
    /// keep waiting for a connection.
    pub(crate) fn sibling(&self, role: &str) -> Manager {
        Manager {
            target: self.target.for_role(role),
            pooler: self.statements.pooler,
            listen: self.listen.clone(),
        }
    }

    /// Turns sequential scans, bitmap scans, sorts and JIT off for this session, so the
    /// planner reaches rows through plain index scans, in index order where a statement
    /// wants order, and makes prepared statements use one generic plan from their first
    /// run. A connection so set is closed, not reused, when it goes back to the pool: keep
    /// it for a loop rather than check it out per call.
    ///
    /// Every statement the worker runs per job reaches its rows through an index, but
    /// PostgreSQL chooses plans from the table's size and statistics, and a prepared
    /// statement keeps the generic plan it made on its sixth run. A queue table is often
    /// empty when a worker starts and large minutes later, and without a fresh `ANALYZE`
    /// (autovacuum off or behind) the planner guesses: a plan made on the empty table
    /// scans the whole table for each completion, and a claim may read every due job of
    /// the entrypoint through the `(entrypoint, execute_after)` index and sort them all,
    /// rather than read the first few in `(entrypoint, priority, id)` order; either
    /// grows with the backlog. Bitmap scans are off too because they never mark the index
    /// entries of deleted rows dead, so with vacuum behind every later scan of those
    /// indexes steps over them again; plain index scans mark them, and later scans skip
    /// them. (Off only penalizes: a statement that cannot avoid a sort still sorts, and
    /// the penalty lifts its estimated cost past the JIT threshold, so JIT is off too:
    /// compiling takes longer than running any of these statements.)
    ///
    /// Plans are generic from the first run (`plan_cache_mode = force_generic_plan`):
    /// with the scans above off, the generic plan is the right one at any table size, and
    /// otherwise PostgreSQL may keep re-planning each run when column statistics (say,
    /// from an `ANALYZE` of a full queue) make custom plans look cheaper. The figures are
    /// in the repository's `docs/benchmarks.md`.
    ///
    /// # Errors
    /// The database's error.
    pub fn plan_with_indexes(&mut self) -> Result<(), postgres::Error> {
        // Through a transaction pooler a session setting would reach whichever client
        // gets the server connection next: plans are then left to the statistics.
        if !self.index_plans && self.statements.pooler == Pooler::Direct {
            self.client
                .batch_execute(crate::sql::SESSION_PLAN_WITH_INDEXES)?;
            self.index_plans = true;
        }
        Ok(())
    }

    /// The driver's configuration this connection was opened with. Its TLS settings
    /// (libpq's `sslrootcert` and the rest) are kept apart, where the driver has no room
    /// for them.
    pub fn config(&self) -> &Config {
        &self.target.config
    }

    /// Where this connection goes, as `user@host:port/dbname` (no password), for
    /// messages that must say which database they are about.
    pub fn target(&self) -> String {
        describe_target(&self.target.config)
    }

    /// How this connection's TLS is set, as `sslmode=verify-full (certificate and host
    /// name verified against /etc/ca.crt)`.
    pub fn tls_settings(&self) -> String {
        self.target.tls.describe()
    }

    /// The underlying client.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("closed", &self.client.is_closed())
            .field("pooler", &self.statements.pooler)
            .field("statements", &self.statements.prepared.len())
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// The r2d2 connection manager behind [`Pool`].
///
/// Unlike `r2d2_postgres::PostgresConnectionManager` (which it wraps) its validity check is
/// bounded in time, so `pool.get()` cannot hang on a black-holed connection, and every
/// connection carries a statement cache ([`Conn`]).
pub struct Manager {
    target: Target,
    pooler: Pooler,
    listen: Option<Target>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("target", &describe_target(&self.target.config))
            .field("tls", &self.target.tls.describe())
            .field("pooler", &self.pooler)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager opening connections with `config`, directly (see [`Manager::pooler`]),
    /// encrypting as the driver's own `sslmode` of `config` says (`prefer`, the default,
    /// encrypts when the server offers it) and verifying nothing. [`connect_with`] reads
    /// libpq's whole set of TLS settings (`verify-full`, `sslrootcert`, client
    /// certificates) instead.
    pub fn new(config: Config) -> Self {
        Manager {
            target: Target::unverified(config),
            pooler: Pooler::Direct,
            listen: None,
        }
    }

    fn with_target(target: Target) -> Self {
        Manager {
            target,
            pooler: Pooler::Direct,
            listen: None,
        }
    }

    /// Says what sits between the connections and PostgreSQL, and, for a transaction
    /// pooler, where a worker may LISTEN instead (as its own `sslmode` says, verifying
    /// nothing; through [`connect_with`] the listen DSN's TLS settings are libpq's).
    #[must_use]
    pub fn pooler(mut self, pooler: Pooler, listen: Option<Config>) -> Self {
        self.pooler = pooler;
        self.listen = listen.map(Target::unverified);
        self
    }

    fn listen_target(mut self, listen: Option<Target>) -> Self {
        self.listen = listen;
        self
    }

    /// Opens one connection, with an error naming the target on failure.
    pub(crate) fn open(&self) -> Result<Conn> {
        r2d2::ManageConnection::connect(self).map_err(|source| self.target.error(source))
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Conn, postgres::Error> {
        let mut client = self.target.connect()?;
        if self.pooler == Pooler::Direct {
            client.batch_execute(crate::sql::SESSION_RAW_TEXT_IN_SQL_ASCII)?;
        }
        if log::log_enabled!(log::Level::Debug) {
            log::debug!(
                "pgqueuer: connected to {} ({}): {}",
                describe_target(&self.target.config),
                self.target.tls.describe(),
                self.target.security(&mut client, self.pooler)
            );
        }
        Ok(Conn {
            client,
            statements: Statements {
                pooler: self.pooler,
                ..Statements::default()
            },
            target: self.target.clone(),
            listen: self.listen.clone(),
            index_plans: false,
        })
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        conn.client.is_valid(PROBE_TIMEOUT)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        // A session with scans turned off is not handed to another user.
        conn.client.is_closed() || conn.index_plans
    }
}

/// Where connections go: the driver's configuration, and the TLS settings and connector
/// beside it (the driver's `Config` has no room for libpq's root certificate, client
/// certificate or verifying modes).
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    tls: TlsSettings,
    connector: Connector,
}

impl Target {
    /// `config` with `tls`: the driver is told the mode it knows, and the connector does
    /// the checks the mode asks for.
    ///
    /// # Errors
    /// [`Error::ConnectionConfig`] for a certificate or key file that cannot be used.
    pub(crate) fn new(mut config: Config, tls: TlsSettings) -> Result<Target> {
        config.ssl_mode(tls.driver_mode());
        let connector = tls.connector()?;
        Ok(Target {
            config,
            tls,
            connector,
        })
    }

    /// `config` as its own `sslmode` says, verifying nothing (for a `Config` built by
    /// hand, where libpq's file settings cannot be).
    pub(crate) fn unverified(config: Config) -> Target {
        use crate::tls::SslMode;
        let mode = match config.get_ssl_mode() {
            postgres::config::SslMode::Disable => SslMode::Disable,
            postgres::config::SslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        let tls = TlsSettings {
            mode,
            root: None,
            client: None,
        };
        let connector = tls
            .connector()
            .unwrap_or_else(|e| unreachable!("no file is read without a root or client: {e}"));
        Target {
            config,
            tls,
            connector,
        }
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The driver's configuration, to change a setting of its own (a timeout).
    pub(crate) fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// This target for a LISTEN connection: its `application_name` ends in `-listen`, so
    /// that `pg_stat_activity` tells an operator (and a test) which connection listens.
    pub(crate) fn for_listening(&self) -> Target {
        self.for_role("listen")
    }

    /// This target for a connection of one role (`listen`, `heartbeat`, `complete`): its
    /// `application_name` ends in `-{role}`, so that `pg_stat_activity` tells an operator
    /// (and a test) what each of a worker's connections does.
    pub(crate) fn for_role(&self, role: &str) -> Target {
        let mut target = self.clone();
        let name = self.config.get_application_name().unwrap_or("pgqueuer-rs");
        let suffix = format!("-{role}");
        if !name.ends_with(&suffix) {
            // PostgreSQL keeps 63 bytes of it.
            let mut cut = name.len().min(63_usize.saturating_sub(suffix.len()));
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            target
                .config
                .application_name(&format!("{}{suffix}", &name[..cut]));
        }
        target
    }

    /// Opens a plain client (for LISTEN connections, which stay out of any pool).
    pub(crate) fn connect(&self) -> std::result::Result<Client, postgres::Error> {
        self.config.connect(self.connector.clone())
    }

    pub(crate) fn error(&self, source: postgres::Error) -> Error {
        let host = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect::<Vec<_>>()
            .join(",");
        Error::Connect {
            target: describe_target(&self.config),
            advice: crate::tls::advice(&source, &self.tls, &host),
            source,
        }
    }

    /// Whether `client`'s connection is encrypted, in words, for the log line of a new
    /// connection. Through a transaction pooler the server can only say of its own leg,
    /// so the settings speak instead.
    fn security(&self, client: &mut Client, pooler: Pooler) -> String {
        if self.tls.mode == crate::tls::SslMode::Disable {
            return "plaintext".into();
        }
        if pooler.is_transaction_mode() {
            return if self.tls.always_encrypted() {
                "encrypted".into()
            } else {
                "encrypted if the pooler offered TLS".into()
            };
        }
        match crate::ops::connection_tls(client) {
            Ok(tls) => tls.to_string(),
            Err(e) => format!("unknown ({e})"),
        }
    }
}

/// Drops connections the pool discards on a short-lived thread: dropping a `Client` waits
/// for the server to close the socket, which never happens on a black-holed connection.
#[derive(Debug)]
struct DropElsewhere;

impl r2d2::CustomizeConnection<Conn, postgres::Error> for DropElsewhere {
    fn on_release(&self, conn: Conn) {
        drop_elsewhere(conn);
    }
}

/// Closes a connection (a `Client`, or anything holding one) on a short-lived thread:
/// dropping a `Client` waits for the server to close the socket, which never happens on
/// a black-holed connection, and the caller must not hang on it.
pub(crate) fn drop_elsewhere<T: Send + 'static>(connection: T) {
    let spawned = std::thread::Builder::new()
        .name("pgqueuer-drop".into())
        .spawn(move || drop(connection));
    if let Err(e) = spawned {
        log::warn!("pgqueuer: could not spawn a thread to close a connection: {e}");
    }
}

/// Logs pool errors with their whole cause chain (r2d2's default prints only "db error").
#[derive(Debug)]
struct LogChain;

impl r2d2::HandleError<postgres::Error> for LogChain {
    fn handle_error(&self, error: postgres::Error) {
        log::warn!("pgqueuer pool: {}", chain(&error));
    }
}

/// Options of [`connect_with`]. Its `Debug` shows `listen_dsn` with any password
/// replaced by `***`.
#[derive(Clone)]
pub struct ConnectOptions {
    /// Most connections the pool opens. Defaults to 10.
    pub max_size: u32,
    /// Connections kept open when idle. Defaults to 1.
    pub min_idle: u32,
    /// How long `pool.get()` waits for a connection. Defaults to 10 s.
    pub connection_timeout: Duration,
    /// `application_name` when the DSN sets none. Defaults to `pgqueuer-rs`.
    pub application_name: String,
    /// What sits between the pool and PostgreSQL. Defaults to [`Pooler::Direct`] (also
    /// right for a pooler in session mode); `PGQUEUER_POOLER` sets it
    /// ([`ConnectOptions::from_env`]).
    pub pooler: Pooler,
    /// Through a transaction pooler, a DSN that reaches PostgreSQL directly (or through a
    /// pooler in session mode), where workers LISTEN; without one they poll. Ignored for
    /// [`Pooler::Direct`]. `PGQUEUER_LISTEN_DSN` sets it.
    pub listen_dsn: Option<String>,
    /// Every transaction of the pool's connections is read-only: the server refuses any
    /// write (`default_transaction_read_only`, set when each connection starts). For
    /// readers that must never write, such as `pgq mcp`. Defaults to false.
    pub read_only: bool,
    /// The statement timeout of the pool's connections (`statement_timeout`, set when
    /// each connection starts). Defaults to none (the server's own).
    pub statement_timeout: Option<Duration>,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("max_size", &self.max_size)
            .field("min_idle", &self.min_idle)
            .field("connection_timeout", &self.connection_timeout)
            .field("application_name", &self.application_name)
            .field("pooler", &self.pooler)
            .field("listen_dsn", &self.listen_dsn.as_deref().map(redact_dsn))
            .field("read_only", &self.read_only)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

/// `dsn` with its secrets replaced by `***`, in either form libpq reads: the URL's
/// `user:password@` and every `password` or `sslpassword` query parameter, its key
/// percent-decoded (`pass%77ord`), or every such `key = value` pair, spaced and quoted
/// as libpq allows. A connection string that does not read as either is not shown.
pub(crate) fn redact_dsn(dsn: &str) -> String {
    let secret = |key: &str| {
        let key = key.to_ascii_lowercase();
        key == "password" || key == "sslpassword"
    };
    let trimmed = dsn.trim_start();
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        return redact_url(dsn, &secret);
    }
    redact_pairs(dsn, &secret)
        .unwrap_or_else(|| "*** (a connection string that does not parse; not shown)".into())
}

fn redact_url(dsn: &str, secret: &dyn Fn(&str) -> bool) -> String {
    let mut out = dsn.to_owned();
    let Some(scheme_end) = out.find("://") else {
        return out;
    };
    let rest = scheme_end + 3;
    let authority_end = out[rest..]
        .find(['/', '?', '#'])
        .map_or(out.len(), |i| rest + i);
    if let Some(at) = out[rest..authority_end].rfind('@')
        && let Some(colon) = out[rest..rest + at].find(':')
    {
        out.replace_range(rest + colon + 1..rest + at, "***");
    }
    let Some(query) = out.find('?') else {
        return out;
    };
    let (head, tail) = out.split_at(query + 1);
    let params: Vec<String> = tail
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key, _)) if secret(&percent_decoded(key)) => format!("{key}=***"),
            _ => param.to_owned(),
        })
        .collect();
    format!("{head}{}", params.join("&"))
}

/// `text` with `%XX` escapes decoded (bytes that are not UTF-8 replaced), as libpq reads
/// a URL's keys.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// libpq's `key = value` form with secret values replaced, written back as `key=value`
/// pairs; `None` where it does not read (a key without `=`, an unclosed quote).
fn redact_pairs(dsn: &str, secret: &dyn Fn(&str) -> bool) -> Option<String> {
    let mut chars = dsn.chars().peekable();
    let mut pairs = Vec::new();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next()? {
                    '\\' => value.push(chars.next()?),
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next()?);
                } else {
                    value.push(c);
                }
            }
        }
        let shown = if secret(&key) {
            "***".to_owned()
        } else if value.is_empty() || value.contains([' ', '\'', '\\']) {
            format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
        } else {
            value
        };
        pairs.push(format!("{key}={shown}"));
    }
    Some(pairs.join(" "))
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            max_size: 10,
            min_idle: 1,
            connection_timeout: Duration::from_secs(10),
            application_name: "pgqueuer-rs".into(),
            pooler: Pooler::Direct,
            listen_dsn: None,
            read_only: false,
            statement_timeout: None,
        }
    }
}

impl ConnectOptions {
    /// The defaults, with `pooler` from `PGQUEUER_POOLER` (`direct`, `session`,
    /// `transaction` or `transaction-prepared`) and `listen_dsn` from
    /// `PGQUEUER_LISTEN_DSN` when they are set.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `PGQUEUER_POOLER` for a value it does not know.
    pub fn from_env() -> Result<ConnectOptions> {
        let mut options = ConnectOptions::default();
        if let Ok(pooler) = std::env::var("PGQUEUER_POOLER") {
            options.pooler = Pooler::parse(&pooler)?;
        }
        options.listen_dsn = std::env::var("PGQUEUER_LISTEN_DSN")
            .ok()
            .filter(|v| !v.trim().is_empty());
        Ok(options)
    }
}

/// Opens a pool with [`ConnectOptions::from_env`]: the defaults, with a pooler named by
/// `PGQUEUER_POOLER` and `PGQUEUER_LISTEN_DSN`. See [`connect_with`].
///
/// # Errors
/// As [`connect_with`], and [`Error::InvalidSetting`] for a bad `PGQUEUER_POOLER`.
pub fn connect(dsn: &str) -> Result<Pool> {
    connect_with(dsn, &ConnectOptions::from_env()?)
}

/// Opens a connection pool.
///
/// `dsn` is a `postgres://` URL or a libpq `key=value` string. When it is empty, it is read
/// from `PGQUEUER_DSN`, then `PGDSN`, then `DATABASE_URL`; when none is set the libpq
/// variables `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD` and `PGDATABASE` are used (host
/// `localhost`, port 5432, user and database named after the OS user by default).
///
/// Every connection gets TCP keepalives and a TCP user timeout, a 10 s connect timeout
/// unless the DSN sets one, and a bounded validity probe, so that no call waits forever
/// on a dead peer. One connection is opened before this returns, so a wrong host, password
/// or database is reported here.
///
/// # Errors
/// [`Error::ConnectionConfig`] for a DSN that cannot be parsed, [`Error::Connect`] naming
/// the target and the cause when the first connection fails.
pub fn connect_with(dsn: &str, options: &ConnectOptions) -> Result<Pool> {
    if options.max_size == 0 {
        return Err(Error::invalid(
            "max_size",
            "a pool needs at least one connection",
        ));
    }
    let env = |k: &str| std::env::var(k).ok();
    let mut target = resolve_target(dsn, &env, &options.application_name)?;
    // Session settings travel in the startup packet, so that no statement runs without
    // them (a pooler in transaction mode may refuse `options`: use a direct DSN then).
    let mut session = Vec::new();
    if options.read_only {
        session.push("-c default_transaction_read_only=on".to_owned());
    }
    if let Some(timeout) = options.statement_timeout {
        session.push(format!(
            "-c statement_timeout={}",
            timeout.as_millis().clamp(1, i32::MAX as u128)
        ));
    }
    if !session.is_empty() {
        let config = target.config_mut();
        let joined = match config.get_options() {
            Some(existing) if !existing.trim().is_empty() => {
                format!("{existing} {}", session.join(" "))
            }
            _ => session.join(" "),
        };
        config.options(&joined);
    }
    let listen = match (&options.pooler, &options.listen_dsn) {
        (Pooler::Transaction | Pooler::TransactionPrepared, Some(listen)) => Some(
            resolve_target(listen, &env, &options.application_name).map_err(|e| match e {
                Error::ConnectionConfig(reason) => {
                    Error::ConnectionConfig(format!("listen_dsn: {reason}"))
                }
                other => other,
            })?,
        ),
        _ => None,
    };
    let manager = Manager::with_target(target)
        .pooler(options.pooler, None)
        .listen_target(listen);
    let first = manager.open()?;
    let pool = r2d2::Pool::builder()
        .max_size(options.max_size)
        .min_idle(Some(options.min_idle.min(options.max_size)))
        .connection_timeout(options.connection_timeout)
        .test_on_check_out(true)
        .error_handler(Box::new(LogChain))
        .connection_customizer(Box::new(DropElsewhere))
        .build_unchecked(manager);
    // The probe connection proved the settings; let the pool open its own.
    drop(first);
    Ok(pool)
}

/// Opens one connection outside any pool, resolved exactly as [`connect_with`] resolves
/// `dsn` (environment fallbacks, timeouts, keepalives), with `application_name` set
/// unless the DSN sets one, and the pooler of `PGQUEUER_POOLER`.
///
/// For a connection that is held for a long time or changes session state, such as a
/// LISTEN connection (a LISTEN would outlive a pooled connection's return to its pool),
/// or for a one-shot tool that needs no pool.
///
/// # Errors
/// [`Error::ConnectionConfig`] for a DSN that cannot be parsed, [`Error::Connect`] naming
/// the target and the cause when the connection fails.
pub fn connect_one(dsn: &str, application_name: &str) -> Result<Conn> {
    let target = resolve_target(dsn, &|k| std::env::var(k).ok(), application_name)?;
    let pooler = ConnectOptions::from_env()?.pooler;
    Manager::with_target(target).pooler(pooler, None).open()
}

/// Resolves `dsn` (see [`connect_with`]) into a [`Target`], reading variables through
/// `env`: libpq's TLS settings, then the driver's configuration of the rest.
pub(crate) fn resolve_target(
    dsn: &str,
    env: &dyn Fn(&str) -> Option<String>,
    application_name: &str,
) -> Result<Target> {
    let dsn = if dsn.trim().is_empty() {
        ["PGQUEUER_DSN", "PGDSN", "DATABASE_URL"]
            .iter()
            .find_map(|k| env(k).filter(|v| !v.trim().is_empty()))
            .unwrap_or_default()
    } else {
        dsn.to_owned()
    };
    let (rest, tls_params) = crate::tls::split_dsn(&dsn)?;
    let tls = TlsSettings::resolve(&tls_params, env)?;
    let config = resolve_config(&rest, env, application_name)?;
    Target::new(config, tls)
}

/// Builds the driver's `Config` for `dsn`, which holds no TLS setting of libpq's (see
/// [`resolve_target`]), reading variables through `env`.
fn resolve_config(
    dsn: &str,
    env: &dyn Fn(&str) -> Option<String>,
    application_name: &str,
) -> Result<Config> {
    let mut config = if dsn.trim().is_empty() {
        config_from_libpq_env(env)?
    } else {
        check_scheme(dsn)?;
        dsn.parse::<Config>()
            .map_err(|e| Error::ConnectionConfig(format!("cannot parse the DSN: {}", chain(&e))))?
    };
    if config.get_hosts().is_empty() {
        config.host(&env("PGHOST").unwrap_or_else(|| "localhost".into()));
    }
    if config.get_ports().is_empty()
        && let Some(port) = env("PGPORT")
    {
        config.port(parse_port(&port)?);
    }
    if config.get_user().is_none()
        && let Some(user) = env("PGUSER").or_else(|| env("USER"))
    {
        config.user(&user);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    // The network deadline: data unacknowledged this long (TCP_USER_TIMEOUT), or an idle
    // connection whose keepalive probes go unanswered for about as long, fails the
    // connection, so a black-holed path is noticed within it and the pool reconnects.
    let deadline = config
        .get_tcp_user_timeout()
        .copied()
        .unwrap_or(NETWORK_DEADLINE);
    config
        .keepalives(true)
        .keepalives_idle((deadline / 2).max(Duration::from_secs(1)))
        .keepalives_interval((deadline / 6).max(Duration::from_secs(1)))
        .keepalives_retries(3)
        .tcp_user_timeout(deadline);
    Ok(config)
}

/// A URL whose scheme is not PostgreSQL's is refused by name (the driver's own message
/// for `mysql://...` is only "unexpected EOF").
fn check_scheme(dsn: &str) -> Result<()> {
    let Some((scheme, _)) = dsn.trim().split_once("://") else {
        return Ok(()); // the key=value form
    };
    // The driver reads these two, in lower case only.
    if scheme == "postgres" || scheme == "postgresql" {
        return Ok(());
    }
    Err(Error::ConnectionConfig(format!(
        "the DSN is a {scheme}:// URL; PgQueuer needs PostgreSQL: use a postgres:// or \
         postgresql:// URL, or key=value pairs (host=... dbname=...)"
    )))
}

fn config_from_libpq_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
    let mut config = Config::new();
    config.host(&env("PGHOST").unwrap_or_else(|| "localhost".into()));
    config.port(match env("PGPORT") {
        Some(port) => parse_port(&port)?,
        None => 5432,
    });
    let user = env("PGUSER").or_else(|| env("USER"));
    if let Some(user) = &user {
        config.user(user);
    }
    if let Some(password) = env("PGPASSWORD") {
        config.password(password);
    }
    if let Some(db) = env("PGDATABASE").or(user) {
        config.dbname(&db);
    }
    Ok(config)
}

fn parse_port(text: &str) -> Result<u16> {
    text.trim().parse().map_err(|_| Error::InvalidSetting {
        setting: "PGPORT",
        value: text.to_owned(),
        reason: "not a port number".into(),
    })
}

/// `user@host:port/dbname` of a config, for error messages (never the password).
pub(crate) fn describe_target(config: &Config) -> String {
    use postgres::config::Host;
    let host = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",");
    let port = config
        .get_ports()
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let port = if port.is_empty() {
        "5432".to_owned()
    } else {
        port
    };
    format!(
        "{}@{}:{}/{}",
        config.get_user().unwrap_or("?"),
        host,
        port,
        config
            .get_dbname()
            .unwrap_or_else(|| config.get_user().unwrap_or("?"))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(dsn: &str, pairs: &[(&str, &str)]) -> Result<Config> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        resolve_target(dsn, &move |k| map.get(k).cloned(), "test").map(|t| t.config().clone())
    }

    #[test]
    fn a_foreign_url_scheme_is_named() {
        let err = resolve("mysql://root@localhost/app", &[]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("mysql://") && text.contains("postgres://"),
            "{text}"
        );
        assert!(resolve("postgresql://u@h/db", &[]).is_ok());
        let upper = resolve("POSTGRES://u@h/db", &[]).unwrap_err().to_string();
        assert!(upper.contains("use a postgres://"), "{upper}");
        assert!(resolve("host=h dbname=db", &[]).is_ok());
    }

    #[test]
    fn empty_dsn_reads_pgqueuer_dsn_first() {
        let c = resolve(
            "",
            &[
                ("PGQUEUER_DSN", "postgres://a@h1:1/d1"),
                ("DATABASE_URL", "postgres://b@h2:2/d2"),
            ],
        )
        .unwrap();
        assert_eq!(describe_target(&c), "a@h1:1/d1");
        let c = resolve("", &[("DATABASE_URL", "postgres://b@h2:2/d2")]).unwrap();
        assert_eq!(describe_target(&c), "b@h2:2/d2");
    }

    #[test]
    fn libpq_variables_are_the_fallback() {
        let c = resolve(
            "",
            &[
                ("PGHOST", "10.1.2.3"),
                ("PGPORT", "6543"),
                ("PGUSER", "u"),
                ("PGDATABASE", "db"),
                ("PGPASSWORD", "secret"),
            ],
        )
        .unwrap();
        assert_eq!(describe_target(&c), "u@10.1.2.3:6543/db");
        assert_eq!(c.get_password(), Some(&b"secret"[..]));
        assert!(!describe_target(&c).contains("secret"));
    }

    #[test]
    fn bad_dsn_and_port_are_named() {
        let err = resolve("postgres://x@h/db?nonsense=1", &[]).unwrap_err();
        assert!(err.to_string().contains("nonsense"), "{err}");
        let err = resolve("", &[("PGPORT", "port")]).unwrap_err();
        assert!(err.to_string().contains("PGPORT"), "{err}");
    }

    #[test]
    fn passwords_never_reach_debug_output() {
        for (dsn, shown) in [
            (
                "postgres://app:s3cr3t@db.example:5432/q?sslmode=require",
                "postgres://app:***@db.example:5432/q?sslmode=require",
            ),
            (
                "postgres://app@db/q?password=s3cr3t&application_name=x",
                "postgres://app@db/q?password=***&application_name=x",
            ),
            (
                "host=db user=app password=s3cr3t dbname=q",
                "host=db user=app password=*** dbname=q",
            ),
            (
                "host=db password='s3 cr\\'3t' dbname=q",
                "host=db password=*** dbname=q",
            ),
            (
                "host=db password = s3cr3t dbname=q",
                "host=db password=*** dbname=q",
            ),
            (
                "host=db PASSWORD  =  's3cr3t' sslpassword=k3y",
                "host=db PASSWORD=*** sslpassword=***",
            ),
            (
                "postgres://app@db/q?pass%77ord=s3cr3t&sslpassword=k3y",
                "postgres://app@db/q?pass%77ord=***&sslpassword=***",
            ),
            (
                "postgresql://app:s3cr3t@db/q?PASSWORD=s3cr3t",
                "postgresql://app:***@db/q?PASSWORD=***",
            ),
            (
                "host=db password='unclosed s3cr3t",
                "*** (a connection string that does not parse; not shown)",
            ),
            ("postgres://db/q", "postgres://db/q"),
        ] {
            assert_eq!(redact_dsn(dsn), shown);
        }
        let options = ConnectOptions {
            listen_dsn: Some("postgres://app:s3cr3t@db/q".into()),
            ..ConnectOptions::default()
        };
        let debug = format!("{options:?}");
        assert!(
            !debug.contains("s3cr3t") && debug.contains("app:***@db"),
            "{debug}"
        );
    }

    #[test]
    fn timeouts_and_keepalives_are_always_set() {
        let c = resolve("postgres://u@127.0.0.1/db", &[]).unwrap();
        assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(10)));
        assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_secs(30)));
        assert_eq!(c.get_keepalives_idle(), Duration::from_secs(15));
        assert_eq!(c.get_keepalives_interval(), Some(Duration::from_secs(5)));
        assert_eq!(c.get_application_name(), Some("test"));
        // A DSN's own deadline sets the keepalives too.
        let c = resolve("postgres://u@127.0.0.1/db?tcp_user_timeout=4", &[]).unwrap();
        assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_secs(4)));
        assert_eq!(c.get_keepalives_idle(), Duration::from_secs(2));
        assert_eq!(c.get_keepalives_interval(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn poolers_parse_and_bad_ones_are_named() {
        assert_eq!(Pooler::parse("Transaction").unwrap(), Pooler::Transaction);
        assert_eq!(
            Pooler::parse("transaction-prepared").unwrap(),
            Pooler::TransactionPrepared
        );
        assert_eq!(Pooler::parse("session").unwrap(), Pooler::Direct);
        assert_eq!(Pooler::parse("").unwrap(), Pooler::Direct);
        let e = Pooler::parse("statement").unwrap_err().to_string();
        assert!(
            e.contains("PGQUEUER_POOLER") && e.contains("transaction"),
            "{e}"
        );
    }
}
