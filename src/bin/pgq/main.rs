//! `pgq`: manage, inspect and operate a PgQueuer queue from the command line.
//!
//! Reads the same environment as the library (`PGQUEUER_DSN`, `PGDSN`, `DATABASE_URL`,
//! the libpq `PG*` variables, `PGQUEUER_PREFIX`, `PGQUEUER_SCHEMA`, ...) and accepts
//! PgQueuer's commands and flags where they apply. Run `pgq --help`, or
//! `pgq <command> --help`.
//!
//! The work is done by the library (`pgqueuer::ops`, `pgqueuer::Queue`, the schema
//! functions); these modules parse arguments (`args`, with `clap`) and format output.
//! Exit status: 0 on success, 1 on failure (the message on stderr), 2 on a usage error.
//! Every message the program itself prints on stderr starts with `pgq: `.

mod args;
mod jobs;
mod monitor;
mod output;
mod schema;

use std::cell::RefCell;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use pgqueuer::postgres::error::SqlState;
use pgqueuer::{Error, Queue, Settings};

use crate::args::{Cli, Command};

/// `application_name` of every connection `pgq` opens.
const APPLICATION_NAME: &str = "pgq";

/// Why `pgq` stops without success (exit 1). Usage errors are clap's (exit 2).
#[derive(Debug)]
enum Failure {
    /// The library failed.
    Failed(Error),
    /// A command's own finding, said in words.
    Message(String),
    /// A command that reported already and chose its exit status (`pgq health`).
    Exit(u8),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Failed(e)
    }
}

impl From<pgqueuer::postgres::Error> for Failure {
    fn from(e: pgqueuer::postgres::Error) -> Failure {
        Failure::Failed(Error::Db(e))
    }
}

fn fail(message: impl Into<String>) -> Failure {
    Failure::Message(message.into())
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_target(false)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = e.exit_code();
            if e.use_stderr() {
                // clap's text starts with "error:"; every message of ours starts "pgq: ".
                let text = e.render();
                if std::io::stderr().is_terminal() {
                    eprint!("pgq: {}", text.ansi());
                } else {
                    eprint!("pgq: {text}");
                }
            } else {
                let _ = e.print();
            }
            return ExitCode::from(u8::try_from(code).unwrap_or(2));
        }
    };
    let ctx = match Context::new(&cli) {
        Ok(ctx) => ctx,
        Err(e) => return report(&e, None),
    };
    match run(&ctx, cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(&failure, ctx.target.borrow().as_deref()),
    }
}

/// Prints a failure on stderr (with a hint where one helps) and returns exit status 1.
fn report(failure: &Failure, target: Option<&str>) -> ExitCode {
    match failure {
        Failure::Failed(e) => {
            eprintln!("pgq: error: {e}");
            if let Some(hint) = hint(e, target) {
                eprintln!("pgq: hint: {hint}");
            }
        }
        Failure::Message(message) => eprintln!("pgq: error: {message}"),
        Failure::Exit(code) => return ExitCode::from(*code),
    }
    ExitCode::FAILURE
}

/// What to try next after an error, when something useful can be said.
fn hint(e: &Error, target: Option<&str>) -> Option<String> {
    match e {
        // The error says what to change already.
        Error::Connect { advice, .. } if !advice.is_empty() => None,
        Error::Connect { .. } | Error::ConnectionConfig(_) | Error::Pool(_) => Some(
            "check --dsn, PGQUEUER_DSN (or PGDSN, DATABASE_URL) or the PG* variables, \
             and that the server is running and accepts this user"
                .to_owned(),
        ),
        _ if matches!(
            e.sqlstate(),
            Some(&SqlState::UNDEFINED_TABLE | &SqlState::UNDEFINED_OBJECT)
        ) =>
        {
            let place = target.map_or_else(String::new, |t| format!(" in {t}"));
            Some(format!(
                "is the PgQueuer schema installed{place}? Run 'pgq upgrade' there (with the \
                 same --prefix/--schema), point --dsn or PGQUEUER_DSN at the database that \
                 has it, or check PGQUEUER_PREFIX and PGQUEUER_SCHEMA"
            ))
        }
        _ => None,
    }
}

/// The object names from the environment, with `--prefix` and `--schema` taking the
/// place of `PGQUEUER_PREFIX` and `PGQUEUER_SCHEMA` (as Python's CLI does by setting
/// them), so a name set explicitly (`PGQUEUER_QUEUE_TABLE`) still wins over the prefix.
fn settings_of(cli: &Cli) -> Result<Settings, Error> {
    Settings::from_lookup(|key| match key {
        "PGQUEUER_PREFIX" if cli.prefix.is_some() => cli.prefix.clone(),
        "PGQUEUER_SCHEMA" if cli.schema.is_some() => cli.schema.clone(),
        _ => std::env::var(key).ok(),
    })
}

fn run(ctx: &Context, command: Command) -> Outcome {
    match command {
        Command::Install(a) => schema::install(ctx, a.durability),
        Command::Upgrade { plan } => schema::upgrade(ctx, plan),
        Command::Verify { expect } => schema::verify(ctx, expect),
        Command::Uninstall => schema::uninstall(ctx),
        Command::Sql { what } => schema::sql(ctx, what),
        Command::Durability { level } => schema::durability(ctx, level),
        Command::Autovac(a) => schema::autovac(ctx, &a),
        Command::Queue {
            entrypoint,
            payload,
            priority,
            delay,
            dedupe_key,
            on_conflict,
        } => jobs::enqueue(
            ctx,
            jobs::Enqueue {
                entrypoint,
                payload,
                priority,
                delay,
                dedupe_key,
                on_conflict,
            },
        ),
        Command::Job { id, json } => jobs::show(ctx, id, json),
        Command::Cancel(ids) => jobs::cancel(ctx, &ids.ids),
        Command::Failed { limit, json } => jobs::failed(ctx, limit.limit, json),
        Command::Requeue(ids) => jobs::requeue(ctx, &ids.ids),
        Command::Explain {
            id,
            heartbeat_timeout,
            json,
        } => jobs::explain(ctx, id, heartbeat_timeout, json),
        Command::Limits { action: None, json } => monitor::limits(ctx, json),
        Command::Limits {
            action: Some(action),
            ..
        } => monitor::change_limits(ctx, action),
        Command::Mcp { statement_timeout } => mcp(ctx, statement_timeout),
        Command::Health {
            stall_after,
            stale_after,
            window,
            limits,
            horizon_after,
            horizon_xid_after,
            probe,
            json,
        } => {
            let mut options = pgqueuer::ops::HealthOptions::default();
            options.stall_after = stall_after;
            options.stale_after = stale_after;
            options.window = window;
            options.limits = limits;
            options.horizon_after = horizon_after;
            options.horizon_xid_after = horizon_xid_after;
            let probe = probe.as_deref().and_then(pgqueuer::ops::Probe::parse);
            monitor::health(ctx, &options, probe, json)
        }
        Command::Audit {
            since,
            entrypoint,
            resolution,
            json,
        } => monitor::audit(ctx, since, entrypoint.as_deref(), resolution, json),
        Command::Stale {
            threshold,
            limit,
            json,
        } => monitor::stale(ctx, threshold, limit.limit, json.json),
        Command::Workers(json) => monitor::workers(ctx, json.json),
        Command::Schedules { remove, json } => monitor::schedules(ctx, &remove, json.json),
        Command::Backlog(json) => monitor::backlog(ctx, json.json),
        Command::Sizes(json) => monitor::sizes(ctx, json.json),
        Command::Dashboard {
            interval,
            limit,
            count,
            json,
        } => monitor::dashboard(ctx, interval, limit.limit, count, json),
        Command::Listen {
            channel,
            count,
            timeout,
        } => monitor::listen(ctx, channel, count, timeout),
        Command::PruneLog { older_than } => schema::prune_log(ctx, older_than),
        Command::Web {
            host,
            port,
            allowed_hosts,
        } => web(ctx, &host, port, allowed_hosts),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "pgq", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// What every command needs.
struct Context {
    dsn: String,
    settings: Settings,
    /// `user@host:port/dbname` of the last connection opened, for hints.
    target: RefCell<Option<String>>,
}

impl Context {
    fn new(cli: &Cli) -> Result<Context, Failure> {
        Ok(Context {
            dsn: cli.dsn.clone().unwrap_or_default(),
            settings: settings_of(cli)?,
            target: RefCell::new(None),
        })
    }

    /// One connection of its own.
    fn connect(&self) -> Result<pgqueuer::Conn, Error> {
        let conn = pgqueuer::connect_one(&self.dsn, APPLICATION_NAME)?;
        self.remember(&conn);
        Ok(conn)
    }

    /// Keeps where `conn` goes, for the hints of a later failure.
    fn remember(&self, conn: &pgqueuer::Conn) {
        *self.target.borrow_mut() = Some(conn.target());
    }

    /// A [`Queue`] on a pool of one connection.
    fn queue(&self) -> Result<Queue, Error> {
        let options = pgqueuer::ConnectOptions {
            max_size: 1,
            min_idle: 0,
            application_name: APPLICATION_NAME.into(),
            ..pgqueuer::ConnectOptions::from_env()?
        };
        let pool = pgqueuer::connect_with(&self.dsn, &options)?;
        if let Ok(conn) = pool.get() {
            self.remember(&conn);
        }
        Queue::with_settings(pool, &self.settings)
    }
}

/// `pgq mcp`: a read-only pool of its own, and the MCP server on stdin and stdout until
/// stdin ends. Diagnostics go to stderr only: stdout carries the protocol.
fn mcp(ctx: &Context, statement_timeout: std::time::Duration) -> Outcome {
    let options = pgqueuer::ConnectOptions {
        max_size: 2,
        min_idle: 0,
        connection_timeout: std::time::Duration::from_secs(5),
        application_name: "pgq mcp".into(),
        read_only: true,
        statement_timeout: Some(statement_timeout),
        ..pgqueuer::ConnectOptions::from_env()?
    };
    let pool = pgqueuer::connect_with(&ctx.dsn, &options)?;
    let server = pgqueuer::mcp::McpServer::with_settings(pool, &ctx.settings)?;
    let stdin = std::io::stdin();
    server.serve(stdin.lock(), std::io::stdout().lock())?;
    Ok(())
}

/// `pgq web`: a pool of its own (a connection per request thread, the LISTEN
/// connection outside it), served until the process is stopped.
fn web(ctx: &Context, host: &str, port: u16, allowed_hosts: Vec<String>) -> Outcome {
    let mut web_options = pgqueuer::web::WebOptions::from_env()?;
    // Checked by `serve`, which names the option of a bad one (and warns when 0.0.0.0
    // is bound with none listed).
    web_options.allowed_hosts.extend(allowed_hosts);
    let options = pgqueuer::ConnectOptions {
        max_size: u32::try_from(web_options.threads).unwrap_or(4) + 1,
        min_idle: 1,
        connection_timeout: web_options.checkout_timeout,
        application_name: "pgq web".into(),
        ..pgqueuer::ConnectOptions::from_env()?
    };
    let pool = pgqueuer::connect_with(&ctx.dsn, &options)?;
    if let Ok(conn) = pool.get() {
        ctx.remember(&conn);
    }
    let open = web_options.credentials.is_none();
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let server = pgqueuer::web::Dashboard::with_settings(pool, &ctx.settings)?
        .options(web_options)
        .serve(&addr)?;
    let bound = server.addr();
    if open && !bound.ip().is_loopback() {
        eprintln!(
            "pgq: WARNING: serving {bound} without authentication: anyone who can reach it can \
             read every job and requeue or cancel jobs. Set PGQUEUER_WEB_USER and \
             PGQUEUER_WEB_PASSWORD, or use --host 127.0.0.1."
        );
    }
    println!("pgq web: serving http://{bound}/ (metrics at /metrics); Ctrl-C stops");
    server.wait();
    Ok(())
}

/// `sql` subcommands that take a durability level, with the settings' level otherwise.
fn with_durability(settings: &Settings, level: Option<pgqueuer::Durability>) -> Settings {
    let mut settings = settings.clone();
    if let Some(level) = level {
        settings.durability = level;
    }
    settings
}
