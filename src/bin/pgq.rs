//! `pgq`: manage a PgQueuer schema from the command line.
//!
//! Reads the same environment as the library (`PGQUEUER_DSN`, `DATABASE_URL`, the libpq
//! `PG*` variables, `PGQUEUER_PREFIX`, `PGQUEUER_SCHEMA`, ...). Run `pgq --help`.

use std::process::ExitCode;

use pgqueuer::{Durability, Error, Settings};

const USAGE: &str = "\
pgq: manage a PgQueuer (1.6-compatible) schema in PostgreSQL

USAGE:
    pgq [GLOBAL OPTIONS] <COMMAND> [OPTIONS]

COMMANDS:
    install [--durability LEVEL]   create the schema (fails if it already exists)
    upgrade [--plan]               install or bring the schema up to date (--plan: print SQL only)
    verify [--expect present|absent]
                                   check that every object exists (default: present)
    uninstall                      drop every PgQueuer object and all jobs

GLOBAL OPTIONS:
    --dsn DSN        connection string (default: PGQUEUER_DSN, PGDSN, DATABASE_URL, then PG* variables)
    --prefix P       prefix for every object name (env PGQUEUER_PREFIX)
    --schema S       schema for every object (env PGQUEUER_SCHEMA)
    -h, --help       print this help
";

struct Args {
    dsn: String,
    settings: Settings,
    command: String,
    rest: Vec<String>,
}

fn parse_args(mut argv: Vec<String>) -> Result<Option<Args>, String> {
    let mut settings = Settings::from_env().map_err(|e| e.to_string())?;
    let mut dsn = String::new();
    let mut prefix: Option<String> = None;
    let mut schema: Option<String> = None;
    let mut command = None;
    let mut rest = Vec::new();
    argv.reverse();
    while let Some(arg) = argv.pop() {
        let mut value = |name: &str| argv.pop().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" if command.is_none() => return Ok(None),
            "--dsn" | "--pg-dsn" if command.is_none() => dsn = value(&arg)?,
            "--prefix" if command.is_none() => prefix = Some(value(&arg)?),
            "--schema" if command.is_none() => schema = Some(value(&arg)?),
            _ if command.is_none() => {
                if arg.starts_with('-') {
                    return Err(format!("unknown option {arg}"));
                }
                command = Some(arg);
            }
            _ => rest.push(arg),
        }
    }
    if let Some(prefix) = prefix {
        let schema = settings.schema.take();
        settings = Settings::with_prefix(&prefix);
        settings.schema = schema;
    }
    if let Some(schema) = schema {
        settings.schema = Some(schema.to_lowercase());
    }
    settings.validate().map_err(|e| e.to_string())?;
    let command = command.ok_or("no command given")?;
    Ok(Some(Args {
        dsn,
        settings,
        command,
        rest,
    }))
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("pgq: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pgq: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Takes `--flag VALUE` out of `rest`.
fn take_option(rest: &mut Vec<String>, flag: &str) -> Result<Option<String>, Error> {
    let Some(i) = rest.iter().position(|a| a == flag) else {
        return Ok(None);
    };
    if i + 1 >= rest.len() {
        return Err(pgqueuer_invalid(flag, "needs a value"));
    }
    let value = rest.remove(i + 1);
    rest.remove(i);
    Ok(Some(value))
}

fn take_flag(rest: &mut Vec<String>, flag: &str) -> bool {
    let found = rest.iter().position(|a| a == flag);
    if let Some(i) = found {
        rest.remove(i);
    }
    found.is_some()
}

fn pgqueuer_invalid(field: &str, reason: &str) -> Error {
    Error::InvalidInput {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

fn no_more(rest: &[String]) -> Result<(), Error> {
    match rest.first() {
        Some(extra) => Err(pgqueuer_invalid(
            "argument",
            &format!("unexpected {extra:?} (see pgq --help)"),
        )),
        None => Ok(()),
    }
}

fn client(dsn: &str) -> Result<pgqueuer::PooledConn, Error> {
    let options = pgqueuer::ConnectOptions {
        max_size: 1,
        min_idle: 0,
        ..Default::default()
    };
    let pool = pgqueuer::connect_with(dsn, &options)?;
    Ok(pool.get()?)
}

fn run(mut args: Args) -> Result<ExitCode, Error> {
    let settings = &mut args.settings;
    let rest = &mut args.rest;
    match args.command.as_str() {
        "install" => {
            if let Some(level) = take_option(rest, "--durability")?.or(take_option(rest, "-d")?) {
                settings.durability = Durability::parse(&level)?;
            }
            no_more(rest)?;
            let mut conn = client(&args.dsn)?;
            let present = pgqueuer::describe_with(&mut conn, settings)?;
            let table = format!("table {} ", settings.queue_table);
            if present.iter().any(|l| l.starts_with(&table)) {
                eprintln!(
                    "pgq: PgQueuer is already installed ({} exists). Run 'pgq upgrade' to bring it up to date.",
                    settings.queue_table
                );
                return Ok(ExitCode::FAILURE);
            }
            let report = pgqueuer::upgrade_with(&mut conn, settings)?;
            println!(
                "Installed PgQueuer schema ({} objects).",
                report.changes.len()
            );
        }
        "upgrade" => {
            let plan = take_flag(rest, "--plan");
            no_more(rest)?;
            if plan {
                println!(
                    "-- pgqueuer-rs {} upgrade: idempotent steps, each run as its own transaction",
                    env!("CARGO_PKG_VERSION")
                );
                for step in pgqueuer::upgrade_sql(settings)? {
                    println!("{}\n", step.trim_end());
                }
                return Ok(ExitCode::SUCCESS);
            }
            let mut conn = client(&args.dsn)?;
            let report = pgqueuer::upgrade_with(&mut conn, settings)?;
            if report.is_noop() {
                println!("PgQueuer schema is already up to date.");
            } else {
                for change in &report.changes {
                    println!("{change}");
                }
                println!("Upgraded: {} catalog changes.", report.changes.len());
            }
        }
        "verify" => {
            let expect = take_option(rest, "--expect")?.unwrap_or_else(|| "present".into());
            no_more(rest)?;
            let mut conn = client(&args.dsn)?;
            match expect.as_str() {
                "present" => match pgqueuer::verify_with(&mut conn, settings) {
                    Ok(()) => println!("All required PgQueuer database objects are present."),
                    Err(Error::Schema { missing }) => {
                        for object in missing {
                            println!("missing {object}");
                        }
                        eprintln!("pgq: run 'pgq upgrade' to create the missing objects");
                        return Ok(ExitCode::FAILURE);
                    }
                    Err(e) => return Err(e),
                },
                "absent" => {
                    let facts = pgqueuer::describe_with(&mut conn, settings)?;
                    let ours: Vec<&String> = facts
                        .iter()
                        .filter(|l| {
                            l.starts_with(&format!("table {} ", settings.queue_table))
                                || l.starts_with(&format!("table {} ", settings.queue_table_log))
                                || l.starts_with(&format!("table {} ", settings.statistics_table))
                                || l.starts_with(&format!("table {} ", settings.schedules_table))
                                || l.starts_with(&format!("function {} ", settings.function))
                        })
                        .collect();
                    if ours.is_empty() {
                        println!("No PgQueuer database objects found.");
                    } else {
                        for line in ours {
                            println!(
                                "unexpected {}",
                                line.split(" persistence=").next().unwrap_or(line)
                            );
                        }
                        return Ok(ExitCode::FAILURE);
                    }
                }
                other => {
                    return Err(pgqueuer_invalid(
                        "--expect",
                        &format!("{other:?}: expected present or absent"),
                    ));
                }
            }
        }
        "uninstall" => {
            no_more(rest)?;
            let mut conn = client(&args.dsn)?;
            pgqueuer::uninstall_with(&mut conn, settings)?;
            println!("Removed every PgQueuer object.");
        }
        other => {
            return Err(pgqueuer_invalid(
                "command",
                &format!("unknown command {other:?} (see pgq --help)"),
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}
