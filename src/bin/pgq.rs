//! `pgq`: manage, inspect and operate a PgQueuer queue from the command line.
//!
//! Reads the same environment as the library (`PGQUEUER_DSN`, `PGDSN`, `DATABASE_URL`,
//! the libpq `PG*` variables, `PGQUEUER_PREFIX`, `PGQUEUER_SCHEMA`, ...) and accepts
//! PgQueuer's commands and flags where they apply. Run `pgq --help`, or
//! `pgq <command> --help`.
//!
//! The work is done by the library (`pgqueuer::ops`, `pgqueuer::Queue`, the schema
//! functions); this file parses arguments and formats output. Exit status: 0 on success,
//! 1 on failure (the message on stderr), 2 on a usage error.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use pgqueuer::ops::{self, Aggregation, Autovacuum};
use pgqueuer::postgres::error::SqlState;
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{Durability, Error, NewJob, OnConflict, Queue, Settings};
use serde_json::{Value, json};

/// `application_name` of every connection `pgq` opens.
const APPLICATION_NAME: &str = "pgq";

const USAGE: &str = "\
pgq: manage and inspect a PgQueuer (1.6-compatible) queue in PostgreSQL

USAGE:
    pgq [GLOBAL OPTIONS] <COMMAND> [ARGUMENTS] [OPTIONS]
    pgq <COMMAND> --help            details of one command

SCHEMA:
    install       create the schema (fails if it already exists)
    upgrade       install or bring the schema up to date (--plan: print the SQL only)
    verify        check that every object exists (--expect absent: that none does)
    uninstall     drop every PgQueuer object and all jobs
    sql           print install, upgrade, uninstall, durability or autovac SQL, offline
    durability    switch the tables between LOGGED and UNLOGGED
    autovac       apply PgQueuer's recommended autovacuum settings (--rollback: reset)

JOBS:
    queue         enqueue a job
    cancel        cancel queued or picked jobs
    failed        list jobs held with status 'failed'
    requeue       put failed jobs back in the queue

MONITORING:
    sizes         jobs per entrypoint, priority and status
    backlog       queued jobs per entrypoint, and how old they are
    stale         picked jobs whose heartbeat is old
    workers       workers holding picked jobs
    dashboard     throughput, backlog and workers (refreshing with --interval)
    listen        print the events on the NOTIFY channel as they arrive
    prune-log     fold the log into the statistics, then delete old log rows

GLOBAL OPTIONS (before or after the command):
    --dsn DSN     connection string, also --pg-dsn (default: PGQUEUER_DSN, PGDSN,
                  DATABASE_URL, then the libpq variables PGHOST, PGPORT, PGUSER, ...)
    --prefix P    prefix of every object name (env PGQUEUER_PREFIX)
    --schema S    schema holding every object (env PGQUEUER_SCHEMA)
    -h, --help    print help

ENVIRONMENT:
    PGQUEUER_QUEUE_TABLE, PGQUEUER_CHANNEL, ... name single objects, as in PgQueuer.
    PGQUEUER_TABLEFMT (or TABLEFMT): table style, pretty (default), simple, plain, github.

EXIT STATUS: 0 success, 1 failure, 2 usage error.
";

/// Help of each command: (name, text).
const COMMAND_HELP: &[(&str, &str)] = &[
    (
        "install",
        "\
pgq install [-d|--durability LEVEL]

Creates the PgQueuer schema. Fails (exit 1) if the queue table already exists; use
'pgq upgrade' to bring an existing schema up to date.

OPTIONS:
    -d, --durability LEVEL   volatile, balanced or durable (default: PGQUEUER_DURABILITY,
                             else durable)
",
    ),
    (
        "upgrade",
        "\
pgq upgrade [--plan]

Installs the schema or brings it up to date, converging to PgQueuer 1.6.0's catalog.
Idempotent; safe while workers run.

OPTIONS:
    --plan    print the SQL instead of running it (no connection)
",
    ),
    (
        "verify",
        "\
pgq verify [--expect present|absent]

Checks that every PgQueuer object exists (present, the default) or that none does
(absent). Prints each divergence and exits 1 when there is one.
",
    ),
    (
        "uninstall",
        "\
pgq uninstall

Drops the trigger, the function, the four tables (with every job, log row, statistic
and schedule) and the enum types.
",
    ),
    (
        "sql",
        "\
pgq sql install [-d|--durability LEVEL]
pgq sql upgrade [-d|--durability LEVEL]
pgq sql uninstall
pgq sql durability LEVEL
pgq sql autovac [--rollback]

Prints the SQL of the command of the same name on stdout, without connecting.
'install' and 'upgrade' print the same idempotent script: installing is upgrading from
nothing. Run each step as its own transaction (psql's default autocommit does).
",
    ),
    (
        "durability",
        "\
pgq durability LEVEL

Switches the four tables' persistence, in one transaction (ALTER TABLE ... SET
LOGGED|UNLOGGED, rows kept):
    volatile   all four UNLOGGED (fastest; emptied by a crash, not replicated)
    balanced   queue and schedules LOGGED, log and statistics UNLOGGED
    durable    all four LOGGED
Each switch rewrites its table under an exclusive lock: run it when the queue is quiet.
",
    ),
    (
        "autovac",
        "\
pgq autovac [--rollback]

Applies PgQueuer's recommended autovacuum settings: aggressive on the queue and
schedules tables (fillfactor 70), relaxed on the append-only log and statistics.

OPTIONS:
    --rollback      reset the same settings to the server defaults instead
    --no-rollback   apply them (the default)
",
    ),
    (
        "queue",
        "\
pgq queue ENTRYPOINT [PAYLOAD] [OPTIONS]

Enqueues one job. The payload is the UTF-8 bytes of the argument (none when omitted).
Prints 'Enqueued job ID.'.

OPTIONS:
    --priority N               higher runs sooner (default 0)
    --delay SECONDS            run no earlier than this many seconds from now (default 0)
    --dedupe-key KEY           refuse while a queued or picked job has this key
    --on-conflict raise|skip   when the key is taken: raise exits 1 (default), skip
                               prints 'Skipped: ...' and exits 0
Put -- before a payload that starts with '-'.
",
    ),
    (
        "cancel",
        "\
pgq cancel ID...

Cancels jobs: each queued or picked one is deleted and logged 'canceled', and a
cancellation event tells the workers running them to stop. Failed (held) and finished
jobs are left alone and named on stderr.
",
    ),
    (
        "failed",
        "\
pgq failed [-n|--limit N] [--json]

Lists jobs held with status 'failed' for manual intervention, oldest first.

OPTIONS:
    -n, --limit N   at most N jobs (default 25)
    --json          a JSON array; each payload is reported by size only (payload_bytes)
",
    ),
    (
        "requeue",
        "\
pgq requeue ID...

Puts failed (held) jobs back in the queue, due now, attempts reset. Ids that are not
held as failed are ignored and named on stderr.
",
    ),
    (
        "stale",
        "\
pgq stale [-t|--threshold SECONDS] [-n|--limit N] [--json]

Lists picked jobs whose last heartbeat is older than the threshold, stalest first.

OPTIONS:
    -t, --threshold SECONDS   default 300
    -n, --limit N             at most N jobs (default 25)
    --json                    a JSON array
",
    ),
    (
        "workers",
        "\
pgq workers [--json]

Lists the workers (queue managers) holding picked jobs.

OPTIONS:
    --json   a JSON array
",
    ),
    (
        "backlog",
        "\
pgq backlog [--json]

Shows how many jobs wait in 'queued' per entrypoint (deferred ones included), and how
old they are.

OPTIONS:
    --json   a JSON array, one object per entrypoint
",
    ),
    (
        "sizes",
        "\
pgq sizes [--json]

Counts the jobs in the queue table per entrypoint, priority and status.

OPTIONS:
    --json   a JSON array
",
    ),
    (
        "dashboard",
        "\
pgq dashboard [-i|--interval SECONDS] [-n|--limit N] [--count N]

Folds the log into the statistics (under PgQueuer's aggregation lock, so it never
counts a row twice against a running worker), then prints throughput per entrypoint and
status over the last minute, the backlog per entrypoint and the active workers.

OPTIONS:
    -i, --interval SECONDS   refresh every SECONDS, clearing the screen, until Ctrl-C
                             (default: print once)
    -n, --limit N            at most N rows per table (default 25)
    --count N                with --interval: stop after N refreshes
",
    ),
    (
        "listen",
        "\
pgq listen [--channel CHANNEL] [--count N] [--timeout SECONDS]

Listens on the NOTIFY channel and prints each event as it arrives, one line each: the
event type, then the payload as sent. Runs until Ctrl-C.

OPTIONS:
    --channel CHANNEL   default: the settings' channel (PGQUEUER_CHANNEL, ch_pgqueuer)
    --count N           stop after N events
    --timeout SECONDS   stop after SECONDS; exit 1 if --count events had not arrived
",
    ),
    (
        "prune-log",
        "\
pgq prune-log --older-than DURATION

Folds every log row into the statistics (so the counts survive), then deletes log rows
older than DURATION, all in one transaction. Prints how many. DURATION is a number with
a unit, or several: 7d, 12h, 30m, 90s, 1h30m. (PgQueuer has no such command; its log
grows forever.)
",
    ),
];

/// Why `pgq` stops without success.
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

/// The object names: the environment, then `--prefix` and `--schema`.
fn settings_of(globals: &Globals) -> Result<Settings, Failure> {
    let mut settings = Settings::from_env()?;
    if let Some(prefix) = &globals.prefix {
        let schema = settings.schema.take();
        let durability = settings.durability;
        settings = Settings::with_prefix(prefix);
        settings.schema = schema;
        settings.durability = durability;
    }
    if let Some(schema) = &globals.schema {
        let schema = schema.trim().to_lowercase();
        settings.schema = (!schema.is_empty()).then_some(schema);
    }
    settings.validate()?;
    Ok(settings)
}

fn help_of(command: &str) -> Option<&'static str> {
    COMMAND_HELP
        .iter()
        .find(|(name, _)| *name == command)
        .map(|(_, text)| *text)
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
        "install" => install(&ctx, rest),
        "upgrade" => upgrade(&ctx, rest),
        "verify" => verify(&ctx, rest),
        "uninstall" => uninstall(&ctx, rest),
        "sql" => sql(&ctx, rest),
        "durability" => durability(&ctx, rest),
        "autovac" => autovac(&ctx, rest),
        "queue" => enqueue(&ctx, rest),
        "cancel" => cancel(&ctx, rest),
        "failed" => failed(&ctx, rest),
        "requeue" => requeue(&ctx, rest),
        "stale" => stale(&ctx, rest),
        "workers" => workers(&ctx, rest),
        "backlog" => backlog(&ctx, rest),
        "sizes" => sizes(&ctx, rest),
        "dashboard" => dashboard(&ctx, rest),
        "listen" => listen(&ctx, rest),
        "prune-log" => prune_log(&ctx, rest),
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

// ---------------------------------------------------------------------------------------
// Argument parsing

/// One option of a command.
struct Flag {
    long: &'static str,
    short: Option<&'static str>,
    /// Whether it takes a value (`--limit 5`) or is a switch (`--json`).
    takes_value: bool,
}

const fn switch(long: &'static str) -> Flag {
    Flag {
        long,
        short: None,
        takes_value: false,
    }
}

const fn valued(long: &'static str, short: Option<&'static str>) -> Flag {
    Flag {
        long,
        short,
        takes_value: true,
    }
}

/// A command's arguments, parsed against its flags.
struct Args {
    command: String,
    values: Vec<(&'static str, String)>,
    switches: Vec<&'static str>,
    positionals: Vec<String>,
}

impl Args {
    fn parse(command: &str, flags: &[Flag], argv: Vec<String>) -> Result<Args, Failure> {
        let mut args = Args {
            command: command.to_owned(),
            values: Vec::new(),
            switches: Vec::new(),
            positionals: Vec::new(),
        };
        let mut it = argv.into_iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                args.positionals.extend(it.by_ref());
                break;
            }
            if !arg.starts_with('-') || arg == "-" {
                args.positionals.push(arg);
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
                _ => (arg.as_str(), None),
            };
            let Some(flag) = flags
                .iter()
                .find(|f| f.long == name || f.short == Some(name))
            else {
                return Err(usage(
                    command,
                    format!("unknown option {name} for 'pgq {command}'"),
                ));
            };
            if flag.takes_value {
                let value = match inline {
                    Some(value) => value,
                    None => it
                        .next()
                        .ok_or_else(|| usage(command, format!("{name} needs a value")))?,
                };
                args.values.push((flag.long, value));
            } else if inline.is_some() {
                return Err(usage(command, format!("{name} takes no value")));
            } else {
                args.switches.push(flag.long);
            }
        }
        Ok(args)
    }

    /// The last value given for `long`.
    fn value(&self, long: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(name, _)| *name == long)
            .map(|(_, v)| v.as_str())
    }

    fn switch(&self, long: &str) -> bool {
        self.switches.contains(&long)
    }

    /// Parses the value of `long` with `parse`, naming the flag in a usage error.
    fn parsed<T>(
        &self,
        long: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, Failure> {
        self.value(long)
            .map(|v| parse(v).map_err(|why| self.bad(&format!("{long} {v:?}: {why}"))))
            .transpose()
    }

    fn bad(&self, message: &str) -> Failure {
        usage(&self.command, message)
    }

    /// Exactly `min..=max` positional arguments, named `what` in the error.
    fn positionals(&self, min: usize, max: usize, what: &str) -> Result<&[String], Failure> {
        let n = self.positionals.len();
        if n < min {
            return Err(self.bad(&format!("missing {what}")));
        }
        if n > max {
            return Err(self.bad(&format!("unexpected argument {:?}", self.positionals[max])));
        }
        Ok(&self.positionals)
    }

    fn none(&self) -> Result<(), Failure> {
        self.positionals(0, 0, "").map(|_| ())
    }

    /// Positional job ids, at least one.
    fn ids(&self) -> Result<Vec<i64>, Failure> {
        let ids = self.positionals(1, usize::MAX, "job ids")?;
        ids.iter()
            .map(|id| {
                id.parse::<i64>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| self.bad(&format!("{id:?} is not a job id")))
            })
            .collect()
    }
}

fn parse_count(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| "expected a whole number, 0 or more".to_owned())
}

fn parse_positive(text: &str) -> Result<u64, String> {
    match parse_count(text)? {
        0 => Err("expected a whole number, 1 or more".into()),
        n => Ok(n),
    }
}

fn parse_priority(text: &str) -> Result<i32, String> {
    text.trim()
        .parse::<i32>()
        .map_err(|_| format!("expected a whole number from {} to {}", i32::MIN, i32::MAX))
}

/// Seconds as a decimal number, 0 or more.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_owned())?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err("expected a number of seconds, 0 or more".into());
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| "too long".into())
}

/// A span such as `7d`, `12h`, `30m`, `90s`, `1h30m` or `1.5h`: numbers, each with a
/// unit (`w`, `d`, `h`, `m`, `s`). A bare number is refused, as its unit would be a
/// guess.
fn parse_span(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty".into());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("each number needs a unit: w, d, h, m or s (e.g. 7d, 12h, 90s)")?;
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{:?} is not a number", &rest[..digits]))?;
        let unit_len = rest[digits..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len() - digits);
        let unit = &rest[digits..digits + unit_len];
        let seconds = match unit {
            "w" => 604_800.0,
            "d" => 86_400.0,
            "h" => 3_600.0,
            "m" | "min" => 60.0,
            "s" => 1.0,
            other => return Err(format!("unknown unit {other:?}; use w, d, h, m or s")),
        };
        total += number * seconds;
        rest = &rest[digits + unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| "too long".into())
}

/// `1d2h3m4s`-style text of a span (whole seconds), for messages.
fn format_span(d: Duration) -> String {
    let mut s = d.as_secs();
    if s == 0 {
        return format!("{}ms", d.as_millis());
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if s >= size {
            out.push_str(&format!("{}{unit}", s / size));
            s %= size;
        }
    }
    out
}

fn durability_arg(args: &Args) -> Result<Durability, Failure> {
    let level = args.positionals(1, 1, "LEVEL (volatile, balanced or durable)")?;
    Durability::parse(&level[0]).map_err(|e| args.bad(&e.to_string()))
}

// ---------------------------------------------------------------------------------------
// Output

/// Table styles, as `PGQUEUER_TABLEFMT` names them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TableStyle {
    Pretty,
    Simple,
    Plain,
    Github,
}

fn table_style() -> TableStyle {
    let name = std::env::var("PGQUEUER_TABLEFMT")
        .or_else(|_| std::env::var("TABLEFMT"))
        .unwrap_or_default();
    match name.trim() {
        "" | "pretty" => TableStyle::Pretty,
        "simple" => TableStyle::Simple,
        "plain" => TableStyle::Plain,
        "github" => TableStyle::Github,
        other => {
            log::warn!("PGQUEUER_TABLEFMT={other:?} is not supported here; using pretty");
            TableStyle::Pretty
        }
    }
}

/// One cell: numbers are right-aligned, text left-aligned.
enum Cell {
    Text(String),
    Number(String),
}

fn text(s: impl Into<String>) -> Cell {
    Cell::Text(s.into())
}

fn number(n: impl ToString) -> Cell {
    Cell::Number(n.to_string())
}

impl Cell {
    fn as_str(&self) -> &str {
        match self {
            Cell::Text(s) | Cell::Number(s) => s,
        }
    }
}

/// Renders a table in the style of `PGQUEUER_TABLEFMT`.
fn table(headers: &[&str], rows: &[Vec<Cell>]) -> String {
    let style = table_style();
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(width(cell.as_str()));
        }
    }
    let numeric: Vec<bool> = (0..headers.len())
        .map(|i| !rows.is_empty() && rows.iter().all(|r| matches!(r[i], Cell::Number(_))))
        .collect();
    let pad = |s: &str, i: usize| {
        let fill = " ".repeat(widths[i] - width(s));
        if numeric[i] {
            format!("{fill}{s}")
        } else {
            format!("{s}{fill}")
        }
    };
    let line = |cells: Vec<String>| match style {
        TableStyle::Pretty | TableStyle::Github => format!("| {} |\n", cells.join(" | ")),
        TableStyle::Simple | TableStyle::Plain => format!("{}\n", cells.join("  ").trim_end()),
    };
    let header_cells: Vec<String> = headers.iter().enumerate().map(|(i, h)| pad(h, i)).collect();
    let rule = |corner: &str, fill: &str| {
        let parts: Vec<String> = widths.iter().map(|w| fill.repeat(w + 2)).collect();
        format!("{corner}{}{corner}\n", parts.join(corner))
    };
    let mut out = String::new();
    match style {
        TableStyle::Pretty => {
            out.push_str(&rule("+", "-"));
            out.push_str(&line(header_cells));
            out.push_str(&rule("+", "-"));
        }
        TableStyle::Github => {
            out.push_str(&line(header_cells));
            let parts: Vec<String> = widths
                .iter()
                .zip(&numeric)
                .map(|(w, num)| {
                    if *num {
                        format!("{}:", "-".repeat(w + 1))
                    } else {
                        format!(":{}", "-".repeat(w + 1))
                    }
                })
                .collect();
            out.push_str(&format!("|{}|\n", parts.join("|")));
        }
        TableStyle::Simple => {
            out.push_str(&line(header_cells));
            let parts: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&format!("{}\n", parts.join("  ")));
        }
        TableStyle::Plain => out.push_str(&line(header_cells)),
    }
    for row in rows {
        let cells = row
            .iter()
            .enumerate()
            .map(|(i, c)| pad(c.as_str(), i))
            .collect();
        out.push_str(&line(cells));
    }
    if style == TableStyle::Pretty {
        out.push_str(&rule("+", "-"));
    }
    out
}

/// An ISO 8601 timestamp from the JSON form (`2026-01-02T03:04:05.123456Z`) as PgQueuer's
/// tables show it (`2026-01-02 03:04:05`, UTC).
fn short_time(iso: &Value) -> String {
    let iso = iso.as_str().unwrap_or_default();
    iso.get(..19).unwrap_or(iso).replacen('T', " ", 1)
}

fn print_json(items: Vec<Value>) {
    println!("{}", Value::Array(items));
}

/// The time of day in UTC, `HH:MM:SS`.
fn clock() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

// ---------------------------------------------------------------------------------------
// Schema commands

fn install(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("install", &[valued("--durability", Some("-d"))], argv)?;
    args.none()?;
    let mut settings = ctx.settings.clone();
    if let Some(level) = args.parsed("--durability", |v| {
        Durability::parse(v).map_err(|e| e.to_string())
    })? {
        settings.durability = level;
    }
    let mut conn = ctx.connect()?;
    let present = pgqueuer::describe_with(&mut conn, &settings)?;
    let table = format!("table {} ", settings.queue_table);
    if present.iter().any(|l| l.starts_with(&table)) {
        eprintln!(
            "pgq: PgQueuer is already installed ({} exists). Run 'pgq upgrade' to bring it up to date.",
            settings.queue_table
        );
        return Err(Failure::Reported);
    }
    let report = pgqueuer::upgrade_with(&mut conn, &settings)?;
    println!(
        "Installed PgQueuer schema (durability={}, {} objects).",
        settings.durability.as_str(),
        report.changes.len()
    );
    Ok(())
}

/// The upgrade script, one step per paragraph, with a header line.
fn upgrade_script(settings: &Settings) -> Result<String, Error> {
    let mut out = format!(
        "-- pgqueuer-rs {}: idempotent steps converging to PgQueuer 1.6.0; run each as its own transaction\n",
        env!("CARGO_PKG_VERSION")
    );
    for step in pgqueuer::upgrade_sql(settings)? {
        out.push_str(step.trim_end());
        out.push_str("\n\n");
    }
    Ok(out)
}

fn upgrade(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("upgrade", &[switch("--plan")], argv)?;
    args.none()?;
    if args.switch("--plan") {
        print!("{}", upgrade_script(&ctx.settings)?);
        return Ok(());
    }
    let mut conn = ctx.connect()?;
    let report = pgqueuer::upgrade_with(&mut conn, &ctx.settings)?;
    if report.is_noop() {
        println!("PgQueuer schema is already up to date.");
    } else {
        for change in &report.changes {
            println!("{change}");
        }
        println!("Upgraded: {} catalog changes.", report.changes.len());
    }
    Ok(())
}

fn verify(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("verify", &[valued("--expect", None)], argv)?;
    args.none()?;
    let expect = args.value("--expect").unwrap_or("present");
    if expect != "present" && expect != "absent" {
        return Err(args.bad(&format!("--expect {expect:?}: expected present or absent")));
    }
    let settings = &ctx.settings;
    let mut conn = ctx.connect()?;
    if expect == "present" {
        return match pgqueuer::verify_with(&mut conn, settings) {
            Ok(()) => {
                println!("All required PgQueuer database objects are present.");
                Ok(())
            }
            Err(Error::Schema { missing }) => {
                for object in missing {
                    println!("missing {object}");
                }
                eprintln!("pgq: run 'pgq upgrade' to create the missing objects");
                Err(Failure::Reported)
            }
            Err(e) => Err(e.into()),
        };
    }
    let facts = pgqueuer::describe_with(&mut conn, settings)?;
    let ours: Vec<&String> = facts
        .iter()
        .filter(|l| {
            [
                &settings.queue_table,
                &settings.queue_table_log,
                &settings.statistics_table,
                &settings.schedules_table,
            ]
            .iter()
            .any(|t| l.starts_with(&format!("table {t} ")))
                || l.starts_with(&format!("function {} ", settings.function))
        })
        .collect();
    if ours.is_empty() {
        println!("No PgQueuer database objects found.");
        return Ok(());
    }
    for line in ours {
        println!(
            "unexpected {}",
            line.split(" persistence=").next().unwrap_or(line)
        );
    }
    Err(Failure::Reported)
}

fn uninstall(ctx: &Context, argv: Vec<String>) -> Outcome {
    Args::parse("uninstall", &[], argv)?.none()?;
    let mut conn = ctx.connect()?;
    pgqueuer::uninstall_with(&mut conn, &ctx.settings)?;
    println!("Removed every PgQueuer object.");
    Ok(())
}

fn sql(ctx: &Context, mut argv: Vec<String>) -> Outcome {
    if argv.is_empty() || argv[0].starts_with('-') {
        return Err(usage(
            "sql",
            "missing what to print: install, upgrade, uninstall, durability or autovac",
        ));
    }
    let what = argv.remove(0);
    let mut settings = ctx.settings.clone();
    let script = match what.as_str() {
        "install" | "upgrade" => {
            let args = Args::parse("sql", &[valued("--durability", Some("-d"))], argv)?;
            args.none()?;
            if let Some(level) = args.parsed("--durability", |v| {
                Durability::parse(v).map_err(|e| e.to_string())
            })? {
                settings.durability = level;
            }
            upgrade_script(&settings)?
        }
        "uninstall" => {
            Args::parse("sql", &[], argv)?.none()?;
            pgqueuer::uninstall_sql(&settings)?
        }
        "durability" => {
            let args = Args::parse("sql", &[], argv)?;
            ops::durability_sql(&settings, durability_arg(&args)?)?
        }
        "autovac" => {
            let args = Args::parse(
                "sql",
                &[switch("--rollback"), switch("--no-rollback")],
                argv,
            )?;
            args.none()?;
            ops::autovacuum_sql(&settings, autovacuum_mode(&args))?
        }
        other => {
            return Err(usage(
                "sql",
                format!(
                    "unknown SQL {other:?}: expected install, upgrade, uninstall, durability or autovac"
                ),
            ));
        }
    };
    print!("{script}");
    Ok(())
}

fn durability(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("durability", &[], argv)?;
    let level = durability_arg(&args)?;
    let mut conn = ctx.connect()?;
    ops::set_durability(&mut *conn, &ctx.settings, level)?;
    println!("Set PgQueuer durability to {}.", level.as_str());
    Ok(())
}

fn autovacuum_mode(args: &Args) -> Autovacuum {
    // The last of --rollback / --no-rollback wins, as with any repeated flag.
    let rollback = args
        .switches
        .iter()
        .rev()
        .find(|s| **s == "--rollback" || **s == "--no-rollback");
    if rollback == Some(&"--rollback") {
        Autovacuum::Reset
    } else {
        Autovacuum::Tune
    }
}

fn autovac(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "autovac",
        &[switch("--rollback"), switch("--no-rollback")],
        argv,
    )?;
    args.none()?;
    let mode = autovacuum_mode(&args);
    let mut conn = ctx.connect()?;
    ops::autovacuum(&mut *conn, &ctx.settings, mode)?;
    println!(
        "{}",
        match mode {
            Autovacuum::Tune => "Applied recommended autovacuum settings.",
            Autovacuum::Reset => "Reset autovacuum settings to defaults.",
        }
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Job commands

fn enqueue(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "queue",
        &[
            valued("--priority", None),
            valued("--delay", None),
            valued("--dedupe-key", None),
            valued("--on-conflict", None),
        ],
        argv,
    )?;
    let positionals = args.positionals(1, 2, "ENTRYPOINT")?;
    let entrypoint = &positionals[0];
    let mut job = match positionals.get(1) {
        Some(payload) => NewJob::new(entrypoint.as_str(), payload.as_bytes()),
        None => NewJob::without_payload(entrypoint.as_str()),
    };
    if let Some(priority) = args.parsed("--priority", parse_priority)? {
        job = job.priority(priority);
    }
    if let Some(delay) = args.parsed("--delay", parse_seconds)? {
        job = job.execute_after(delay);
    }
    let key = args.value("--dedupe-key");
    if let Some(key) = key {
        job = job.dedupe_key(key);
    }
    let raise = match args.value("--on-conflict").unwrap_or("raise") {
        "raise" => true,
        "skip" => false,
        other => {
            return Err(args.bad(&format!("--on-conflict {other:?}: expected raise or skip")));
        }
    };
    // As PgQueuer does: always skip in SQL (no error in the server log); the choice only
    // decides the exit status.
    match ctx.queue()?.enqueue_with(job, OnConflict::Skip)? {
        Some(id) => println!("Enqueued job {id}."),
        None if raise => {
            eprintln!("Error: duplicate dedupe_key {:?}.", key.unwrap_or_default());
            return Err(Failure::Reported);
        }
        None => println!(
            "Skipped: duplicate dedupe_key {:?}.",
            key.unwrap_or_default()
        ),
    }
    Ok(())
}

/// Names on stderr the ids of `asked` that are not in `done`.
fn report_left_out(asked: &[i64], done: &[i64], why: &str) {
    let left: Vec<String> = asked
        .iter()
        .filter(|id| !done.contains(id))
        .map(i64::to_string)
        .collect();
    if !left.is_empty() {
        eprintln!("{why}: {}", left.join(", "));
    }
}

fn cancel(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("cancel", &[], argv)?;
    let ids = args.ids()?;
    let cancelled = ctx.queue()?.cancel(&ids)?;
    println!("Cancelled {} job(s).", cancelled.len());
    report_left_out(
        &ids,
        &cancelled,
        "Not cancelled (not queued or picked: unknown, finished or failed)",
    );
    Ok(())
}

fn failed(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "failed",
        &[valued("--limit", Some("-n")), switch("--json")],
        argv,
    )?;
    args.none()?;
    let limit = args.parsed("--limit", parse_count)?.unwrap_or(25);
    let jobs = ctx
        .queue()?
        .list_failed(usize::try_from(limit).unwrap_or(usize::MAX))?;
    let items: Vec<Value> = jobs.iter().map(ops::failed_job_json).collect();
    if args.switch("--json") {
        print_json(items);
        return Ok(());
    }
    if items.is_empty() {
        println!("No failed jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = items
        .iter()
        .map(|j| {
            vec![
                number(&j["id"]),
                text(j["entrypoint"].as_str().unwrap_or_default()),
                number(&j["attempts"]),
                text(short_time(&j["created"])),
                number(&j["payload_bytes"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["ID", "Entrypoint", "Attempts", "Created", "Payload bytes"],
            &rows
        )
    );
    Ok(())
}

fn requeue(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("requeue", &[], argv)?;
    let ids = args.ids()?;
    let requeued = ctx.queue()?.requeue_failed(&ids)?;
    println!("Re-queued {} job(s).", requeued.len());
    report_left_out(&ids, &requeued, "Not re-queued (not held as failed)");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Monitoring commands

fn stale(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "stale",
        &[
            valued("--threshold", Some("-t")),
            valued("--limit", Some("-n")),
            switch("--json"),
        ],
        argv,
    )?;
    args.none()?;
    let threshold = args
        .parsed("--threshold", parse_seconds)?
        .unwrap_or(Duration::from_secs(300));
    let limit = args.parsed("--limit", parse_count)?.unwrap_or(25);
    let mut conn = ctx.connect()?;
    let jobs = ops::stale_jobs(
        &mut *conn,
        &ctx.settings,
        threshold,
        usize::try_from(limit).unwrap_or(usize::MAX),
    )?;
    if args.switch("--json") {
        print_json(jobs.iter().map(ops::StaleJob::to_json).collect());
        return Ok(());
    }
    if jobs.is_empty() {
        println!("No stale jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = jobs
        .iter()
        .map(|j| {
            let v = j.to_json();
            vec![
                number(j.id),
                text(&j.entrypoint),
                text(
                    j.queue_manager_id
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                ),
                text(short_time(&v["heartbeat"])),
                number(format!("{:.0}", j.seconds_since_heartbeat)),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "ID",
                "Entrypoint",
                "Queue manager",
                "Heartbeat",
                "Seconds since heartbeat"
            ],
            &rows
        )
    );
    Ok(())
}

fn worker_rows(workers: &[ops::ActiveWorker]) -> Vec<Vec<Cell>> {
    workers
        .iter()
        .map(|w| {
            let v = w.to_json();
            vec![
                text(w.queue_manager_id.to_string()),
                number(w.active_jobs),
                text(short_time(&v["oldest_heartbeat"])),
                text(short_time(&v["newest_heartbeat"])),
                text(w.entrypoints.join(", ")),
            ]
        })
        .collect()
}

const WORKER_HEADERS: [&str; 5] = [
    "Queue manager",
    "Picked jobs",
    "Oldest heartbeat",
    "Newest heartbeat",
    "Entrypoints",
];

fn workers(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("workers", &[switch("--json")], argv)?;
    args.none()?;
    let mut conn = ctx.connect()?;
    let active = ops::active_workers(&mut *conn, &ctx.settings)?;
    if args.switch("--json") {
        print_json(active.iter().map(ops::ActiveWorker::to_json).collect());
        return Ok(());
    }
    if active.is_empty() {
        println!("No workers are holding picked jobs.");
        return Ok(());
    }
    print!("{}", table(&WORKER_HEADERS, &worker_rows(&active)));
    Ok(())
}

fn backlog(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("backlog", &[switch("--json")], argv)?;
    args.none()?;
    let mut conn = ctx.connect()?;
    let ages = ops::queue_age(&mut *conn, &ctx.settings)?;
    if args.switch("--json") {
        print_json(ages.iter().map(ops::QueueAge::to_json).collect());
        return Ok(());
    }
    if ages.is_empty() {
        println!("No queued jobs.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = ages
        .iter()
        .map(|a| {
            let v = a.to_json();
            vec![
                text(&a.entrypoint),
                number(a.queued_count),
                text(short_time(&v["oldest_created"])),
                number(format!("{:.0}", a.oldest_age_seconds)),
                number(format!("{:.0}", a.avg_age_seconds)),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "Entrypoint",
                "Queued",
                "Oldest created",
                "Oldest age (s)",
                "Average age (s)"
            ],
            &rows
        )
    );
    Ok(())
}

fn sizes(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("sizes", &[switch("--json")], argv)?;
    args.none()?;
    let sizes = ctx.queue()?.sizes()?;
    if args.switch("--json") {
        print_json(
            sizes
                .iter()
                .map(|s| {
                    json!({
                        "entrypoint": s.entrypoint,
                        "priority": s.priority,
                        "status": s.status.as_str(),
                        "count": s.count,
                    })
                })
                .collect(),
        );
        return Ok(());
    }
    if sizes.is_empty() {
        println!("The queue is empty.");
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = sizes
        .iter()
        .map(|s| {
            vec![
                text(&s.entrypoint),
                number(s.priority),
                text(s.status.as_str()),
                number(s.count),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["Entrypoint", "Priority", "Status", "Count"], &rows)
    );
    Ok(())
}

/// The window of the dashboard's throughput table.
const DASHBOARD_WINDOW: Duration = Duration::from_secs(60);

/// One dashboard frame.
fn dashboard_frame(
    conn: &mut pgqueuer::Conn,
    settings: &Settings,
    limit: usize,
) -> Result<String, Error> {
    let aggregation = match ops::aggregate_log(&mut **conn, settings)? {
        Aggregation::Folded { log_rows, .. } => format!("{log_rows} new log rows aggregated"),
        Aggregation::Busy => "another session is aggregating the log".to_owned(),
    };
    let throughput = ops::throughput(&mut **conn, settings, DASHBOARD_WINDOW)?;
    let backlog = ops::queue_age(&mut **conn, settings)?;
    let workers = ops::active_workers(&mut **conn, settings)?;
    let window = DASHBOARD_WINDOW.as_secs();
    let mut out = format!("PgQueuer dashboard, {} UTC ({aggregation})\n\n", clock());

    out.push_str(&format!("Throughput, last {window} s\n"));
    if throughput.is_empty() {
        out.push_str("  (nothing)\n");
    } else {
        let rows: Vec<Vec<Cell>> = throughput
            .iter()
            .take(limit)
            .map(|t| {
                let rate = t.count as f64 / window as f64;
                vec![
                    text(&t.entrypoint),
                    text(t.status.as_str()),
                    number(t.count),
                    number(format!("{rate:.2}")),
                ]
            })
            .collect();
        out.push_str(&table(
            &["Entrypoint", "Status", "Count", "Per second"],
            &rows,
        ));
    }

    out.push_str("\nBacklog\n");
    if backlog.is_empty() {
        out.push_str("  (no queued jobs)\n");
    } else {
        let rows: Vec<Vec<Cell>> = backlog
            .iter()
            .take(limit)
            .map(|a| {
                vec![
                    text(&a.entrypoint),
                    number(a.queued_count),
                    number(format!("{:.0}", a.oldest_age_seconds)),
                ]
            })
            .collect();
        out.push_str(&table(&["Entrypoint", "Queued", "Oldest age (s)"], &rows));
    }

    out.push_str("\nWorkers\n");
    if workers.is_empty() {
        out.push_str("  (no worker holds a picked job)\n");
    } else {
        let shown = &workers[..workers.len().min(limit)];
        out.push_str(&table(&WORKER_HEADERS, &worker_rows(shown)));
    }
    Ok(out)
}

fn dashboard(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "dashboard",
        &[
            valued("--interval", Some("-i")),
            valued("--limit", Some("-n")),
            valued("--count", None),
        ],
        argv,
    )?;
    args.none()?;
    let interval = args.parsed("--interval", parse_seconds)?;
    if interval.is_some_and(|d| d.is_zero()) {
        return Err(args.bad("--interval must be more than 0 seconds"));
    }
    let limit = args.parsed("--limit", parse_count)?.unwrap_or(25);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let count = args.parsed("--count", parse_positive)?;
    if count.is_some() && interval.is_none() {
        return Err(args.bad("--count needs --interval (without it the dashboard prints once)"));
    }
    let mut conn = ctx.connect()?;
    let mut frames = 0u64;
    loop {
        let frame = dashboard_frame(&mut conn, &ctx.settings, limit)?;
        let mut stdout = std::io::stdout().lock();
        let written = if interval.is_some() {
            write!(stdout, "\x1b[2J\x1b[H{frame}")
        } else {
            write!(stdout, "{frame}")
        };
        if written.and_then(|()| stdout.flush()).is_err() {
            // stdout closed (a pipe reader went away): nothing more to show.
            return Ok(());
        }
        drop(stdout);
        frames += 1;
        match interval {
            Some(pause) if count.is_none_or(|c| frames < c) => std::thread::sleep(pause),
            _ => return Ok(()),
        }
    }
}

/// How long `listen` waits in silence before it checks that its connection still works.
const LISTEN_PROBE_AFTER: Duration = Duration::from_secs(30);

fn listen(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse(
        "listen",
        &[
            valued("--channel", None),
            valued("--count", None),
            valued("--timeout", None),
        ],
        argv,
    )?;
    args.none()?;
    let channel = args
        .value("--channel")
        .map_or_else(|| ctx.settings.channel.clone(), str::to_owned);
    let count = args.parsed("--count", parse_positive)?;
    let timeout = args.parsed("--timeout", parse_seconds)?;
    let mut conn = ctx.connect()?;
    ops::listen(&mut *conn, &channel)?;
    let deadline = timeout.map(|t| Instant::now() + t);
    eprintln!("Listening on channel {channel:?}; Ctrl-C to stop.");
    let mut seen = 0u64;
    let mut quiet_since = Instant::now();
    while count.is_none_or(|c| seen < c) {
        let now = Instant::now();
        let mut wait = LISTEN_PROBE_AFTER.saturating_sub(now - quiet_since);
        if let Some(deadline) = deadline {
            if now >= deadline {
                return match count {
                    Some(c) => {
                        eprintln!(
                            "pgq: timed out after {} with {seen} of {c} events",
                            format_span(timeout.unwrap_or_default())
                        );
                        Err(Failure::Reported)
                    }
                    None => Ok(()),
                };
            }
            wait = wait.min(deadline - now);
        }
        // A fresh timeout_iter per wait: one that has returned None stays exhausted.
        let next = conn.notifications().timeout_iter(wait).next();
        match next? {
            Some(note) => {
                let payload = note.payload();
                let kind = match pgqueuer::events::Event::parse(payload) {
                    Ok(event) => event.kind().to_owned(),
                    Err(e) => {
                        log::warn!("unparsable event: {e}");
                        "unparsable".to_owned()
                    }
                };
                let mut stdout = std::io::stdout().lock();
                if writeln!(stdout, "{kind} {payload}")
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    return Ok(());
                }
                seen += 1;
                quiet_since = Instant::now();
            }
            None => {
                if conn.is_closed() {
                    return Err(Failure::Failed(Error::Unexpected(
                        "the LISTEN connection was closed by the server".into(),
                    )));
                }
                if quiet_since.elapsed() >= LISTEN_PROBE_AFTER {
                    conn.is_valid(Duration::from_secs(5))?;
                    quiet_since = Instant::now();
                }
            }
        }
    }
    Ok(())
}

fn prune_log(ctx: &Context, argv: Vec<String>) -> Outcome {
    let args = Args::parse("prune-log", &[valued("--older-than", None)], argv)?;
    args.none()?;
    let Some(older_than) = args.parsed("--older-than", parse_span)? else {
        return Err(args.bad("--older-than DURATION is required (e.g. --older-than 7d)"));
    };
    let mut conn = ctx.connect()?;
    let pruned = ops::prune_log(&mut *conn, &ctx.settings, older_than)?;
    println!(
        "Aggregated {} log row(s) into the statistics; deleted {} log row(s) older than {}.",
        pruned.aggregated,
        pruned.deleted,
        format_span(older_than)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn spans_need_units() {
        assert_eq!(parse_span("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_span("12h").unwrap(), Duration::from_secs(12 * 3_600));
        assert_eq!(parse_span("30m").unwrap(), Duration::from_secs(1_800));
        assert_eq!(parse_span("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_span("1h30m").unwrap(), Duration::from_secs(5_400));
        assert_eq!(parse_span("1.5h").unwrap(), Duration::from_secs(5_400));
        assert!(parse_span("7").unwrap_err().contains("unit"));
        assert!(parse_span("7y").unwrap_err().contains("unknown unit"));
        assert!(parse_span("").is_err());
        assert!(parse_span("d").is_err());
        assert_eq!(format_span(Duration::from_secs(93_784)), "1d2h3m4s");
    }

    #[test]
    fn seconds_must_be_finite_and_not_negative() {
        assert_eq!(parse_seconds("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("NaN").is_err());
        assert!(parse_seconds("soon").is_err());
    }

    #[test]
    fn flags_take_values_inline_or_next_and_dashes_end_them() {
        let flags = [valued("--limit", Some("-n")), switch("--json")];
        let args = Args::parse(
            "failed",
            &flags,
            strings(&["-n", "3", "--json", "--limit=4", "--", "--json"]),
        )
        .unwrap();
        assert_eq!(args.value("--limit"), Some("4"));
        assert!(args.switch("--json"));
        assert_eq!(args.positionals, ["--json"]);
        assert!(matches!(
            Args::parse("failed", &flags, strings(&["--nope"])),
            Err(Failure::Usage { .. })
        ));
        assert!(matches!(
            Args::parse("failed", &flags, strings(&["--limit"])),
            Err(Failure::Usage { .. })
        ));
        assert!(matches!(
            Args::parse("failed", &flags, strings(&["--json=1"])),
            Err(Failure::Usage { .. })
        ));
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

    #[test]
    fn every_command_has_help() {
        for command in [
            "install",
            "upgrade",
            "verify",
            "uninstall",
            "sql",
            "durability",
            "autovac",
            "queue",
            "cancel",
            "failed",
            "requeue",
            "stale",
            "workers",
            "backlog",
            "sizes",
            "dashboard",
            "listen",
            "prune-log",
        ] {
            let help = help_of(command).unwrap_or_else(|| panic!("no help for {command}"));
            assert!(help.starts_with(&format!("pgq {command}")), "{command}");
            assert!(
                USAGE.contains(&format!("    {command} ")),
                "{command} not in USAGE"
            );
        }
    }

    #[test]
    fn tables_align_numbers_right() {
        let rows = vec![
            vec![number(5), text("email")],
            vec![number(123), text("pdf")],
        ];
        let out = table(&["ID", "Entrypoint"], &rows);
        assert_eq!(
            out,
            "+-----+------------+\n\
             | ID  | Entrypoint |\n\
             +-----+------------+\n\
             |   5 | email      |\n\
             | 123 | pdf        |\n\
             +-----+------------+\n"
        );
    }

    #[test]
    fn short_times_drop_the_fraction_and_zone() {
        assert_eq!(
            short_time(&json!("2026-01-02T03:04:05.123456Z")),
            "2026-01-02 03:04:05"
        );
        assert_eq!(
            short_time(&json!("2026-01-02T03:04:05Z")),
            "2026-01-02 03:04:05"
        );
    }
}
