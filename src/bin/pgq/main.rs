//! `pgq`: manage, inspect and operate a PgQueuer queue from the command line.
//!
//! Reads the same environment as the library (`PGQUEUER_DSN`, `PGDSN`, `DATABASE_URL`,
//! the libpq `PG*` variables, `PGQUEUER_PREFIX`, `PGQUEUER_SCHEMA`, ...) and accepts
//! PgQueuer's commands and flags where they apply. Run `pgq --help`, or
//! `pgq <command> --help`.
//!
//! The work is done by the library (`pgqueuer::ops`, `pgqueuer::Queue`, the schema
//! functions); these modules parse arguments and format output. Exit status: 0 on success,
//! 1 on failure (the message on stderr), 2 on a usage error.

mod args;
mod help;
mod jobs;
mod monitor;
mod output;
mod schema;

use std::process::ExitCode;

use pgqueuer::postgres::error::SqlState;
use pgqueuer::{Error, Queue, Settings};

use crate::help::{COMMAND_HELP, USAGE, help_of};

/// `application_name` of every connection `pgq` opens.
const APPLICATION_NAME: &str = "pgq";

/// Why `pgq` stops without success.
#[derive(Debug)]
enum Failure {
    /// The command line is wrong (exit 2). `command` is named in the hint.
    Usage {
        message: String,
        command: Option<String>,
    },
    /// The operation failed (exit 1).
    Failed(Error),
    /// The failure was reported already (exit 1).
    Reported,
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

type Outcome = Result<(), Failure>;

fn usage(command: &str, message: impl Into<String>) -> Failure {
    Failure::Usage {
        message: message.into(),
        command: Some(command.to_owned()),
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage { message, command }) => {
            let help = match command {
                Some(command) => format!("pgq {command} --help"),
                None => "pgq --help".to_owned(),
            };
            eprintln!("pgq: {message}\nTry '{help}'.");
            ExitCode::from(2)
        }
        Err(Failure::Failed(e)) => {
            eprintln!("pgq: error: {e}");
            if let Some(hint) = hint(&e) {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
        Err(Failure::Reported) => ExitCode::FAILURE,
    }
}

/// What to try next after an error, when something useful can be said.
fn hint(e: &Error) -> Option<&'static str> {
    match e {
        Error::Connect { .. } | Error::ConnectionConfig(_) | Error::Pool(_) => Some(
            "check --dsn, PGQUEUER_DSN (or PGDSN, DATABASE_URL) or the PG* variables, \
             and that the server is running and accepts this user",
        ),
        _ if matches!(
            e.sqlstate(),
            Some(&SqlState::UNDEFINED_TABLE | &SqlState::UNDEFINED_OBJECT)
        ) =>
        {
            Some(
                "is the PgQueuer schema installed here? Run 'pgq upgrade' (with the same \
                 --prefix/--schema), or check PGQUEUER_PREFIX and PGQUEUER_SCHEMA",
            )
        }
        _ => None,
    }
}

/// The options that apply to every command.
struct Globals {
    dsn: String,
    prefix: Option<String>,
    schema: Option<String>,
    help: bool,
}

/// Takes the global options out of `argv` (anywhere before a `--`); returns them and
/// what is left.
fn split_globals(argv: Vec<String>) -> Result<(Globals, Vec<String>), Failure> {
    let mut globals = Globals {
        dsn: String::new(),
        prefix: None,
        schema: None,
        help: false,
    };
    let mut rest = Vec::new();
    let mut args = argv.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            rest.push(arg);
            rest.extend(args.by_ref());
            break;
        }
        if arg == "-h" || arg == "--help" {
            globals.help = true;
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let slot = match name {
            "--dsn" | "--pg-dsn" => 0,
            "--prefix" => 1,
            "--schema" => 2,
            _ => {
                rest.push(arg);
                continue;
            }
        };
        let value = match inline {
            Some(value) => value,
            None => args.next().ok_or_else(|| Failure::Usage {
                message: format!("{name} needs a value"),
                command: None,
            })?,
        };
        match slot {
            0 => globals.dsn = value,
            1 => globals.prefix = Some(value),
            _ => globals.schema = Some(value),
        }
    }
    Ok((globals, rest))
}

/// The object names from the environment, with `--prefix` and `--schema` taking the
/// place of `PGQUEUER_PREFIX` and `PGQUEUER_SCHEMA` (as Python's CLI does by setting
/// them), so a name set explicitly (`PGQUEUER_QUEUE_TABLE`) still wins over the prefix.
fn settings_of(globals: &Globals) -> Result<Settings, Failure> {
    Ok(Settings::from_lookup(|key| match key {
        "PGQUEUER_PREFIX" if globals.prefix.is_some() => globals.prefix.clone(),
        "PGQUEUER_SCHEMA" if globals.schema.is_some() => globals.schema.clone(),
        _ => std::env::var(key).ok(),
    })?)
}

fn run(argv: Vec<String>) -> Outcome {
    let (globals, mut rest) = split_globals(argv)?;
    if rest.first().is_some_and(|a| a == "help") {
        rest.remove(0);
        return match rest.first() {
            None => {
                print!("{USAGE}");
                Ok(())
            }
            Some(command) => match help_of(command) {
                Some(text) => {
                    print!("{text}");
                    Ok(())
                }
                None => Err(unknown_command(command)),
            },
        };
    }
    let Some(command) = rest.first().cloned() else {
        if globals.help {
            print!("{USAGE}");
            return Ok(());
        }
        return Err(Failure::Usage {
            message: "no command given".into(),
            command: None,
        });
    };
    if command.starts_with('-') {
        return Err(Failure::Usage {
            message: format!("unknown option {command}"),
            command: None,
        });
    }
    rest.remove(0);
    let Some(help) = help_of(&command) else {
        return Err(unknown_command(&command));
    };
    if globals.help {
        print!("{help}");
        return Ok(());
    }
    let settings = settings_of(&globals)?;
    let ctx = Context {
        dsn: globals.dsn,
        settings,
    };
    match command.as_str() {
        "install" => schema::install(&ctx, rest),
        "upgrade" => schema::upgrade(&ctx, rest),
        "verify" => schema::verify(&ctx, rest),
        "uninstall" => schema::uninstall(&ctx, rest),
        "sql" => schema::sql(&ctx, rest),
        "durability" => schema::durability(&ctx, rest),
        "autovac" => schema::autovac(&ctx, rest),
        "queue" => jobs::enqueue(&ctx, rest),
        "cancel" => jobs::cancel(&ctx, rest),
        "failed" => jobs::failed(&ctx, rest),
        "requeue" => jobs::requeue(&ctx, rest),
        "stale" => monitor::stale(&ctx, rest),
        "workers" => monitor::workers(&ctx, rest),
        "backlog" => monitor::backlog(&ctx, rest),
        "schedules" => monitor::schedules(&ctx, rest),
        "sizes" => monitor::sizes(&ctx, rest),
        "dashboard" => monitor::dashboard(&ctx, rest),
        "listen" => monitor::listen(&ctx, rest),
        "prune-log" => schema::prune_log(&ctx, rest),
        other => Err(unknown_command(other)),
    }
}

fn unknown_command(command: &str) -> Failure {
    let close = COMMAND_HELP
        .iter()
        .map(|(name, _)| *name)
        .find(|name| name.starts_with(command) || command.starts_with(name));
    let message = match close {
        Some(name) => format!("unknown command {command:?}; did you mean '{name}'?"),
        None => format!("unknown command {command:?}"),
    };
    Failure::Usage {
        message,
        command: None,
    }
}

/// What every command needs.
struct Context {
    dsn: String,
    settings: Settings,
}

impl Context {
    /// One connection of its own.
    fn connect(&self) -> Result<pgqueuer::Conn, Error> {
        pgqueuer::connect_one(&self.dsn, APPLICATION_NAME)
    }

    /// A [`Queue`] on a pool of one connection.
    fn queue(&self) -> Result<Queue, Error> {
        let options = pgqueuer::ConnectOptions {
            max_size: 1,
            min_idle: 0,
            application_name: APPLICATION_NAME.into(),
            ..Default::default()
        };
        let pool = pgqueuer::connect_with(&self.dsn, &options)?;
        Queue::with_settings(pool, &self.settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn globals_are_taken_anywhere_before_dashes() {
        let (globals, rest) = split_globals(strings(&[
            "queue",
            "--dsn",
            "postgres://x",
            "ep",
            "--schema=s",
            "--",
            "--prefix",
        ]))
        .unwrap();
        assert_eq!(globals.dsn, "postgres://x");
        assert_eq!(globals.schema.as_deref(), Some("s"));
        assert!(globals.prefix.is_none());
        assert_eq!(rest, ["queue", "ep", "--", "--prefix"]);
    }
}
