//! The command line, declared with `clap`: every command, its flags and their value
//! parsers. The spellings are PgQueuer's wherever a command exists in both.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use pgqueuer::Durability;

/// The grouped command list of `pgq --help` (clap lists subcommands in one flat group).
const COMMANDS: &str = "\
Schema:
  install      create the schema (fails if it already exists)
  upgrade      install or bring the schema up to date (--plan: print what it would run)
  verify       check that every object exists (--expect absent: that none does)
  uninstall    drop every PgQueuer object and all jobs
  sql          print install, upgrade, uninstall, durability or autovac SQL, offline
  durability   switch the tables between LOGGED and UNLOGGED
  autovac      apply PgQueuer's recommended autovacuum settings (--rollback: reset)

Jobs:
  queue        enqueue a job
  job          one job: its row, payload, headers and whole log history
  cancel       cancel queued or picked jobs
  failed       list jobs held with status 'failed', with their reason
  requeue      put failed jobs back in the queue
  explain      why a job is not running (deferred, behind a full limit, stale, ...)

Monitoring:
  sizes        jobs per entrypoint, priority and status
  backlog      queued jobs per entrypoint, and how old they are
  schedules    list (and --remove) cron schedules
  stale        picked jobs whose heartbeat is old
  workers      workers holding picked jobs
  dashboard    throughput, backlog and workers (refreshing with --interval)
  listen       print the events on the NOTIFY channel as they arrive
  web          serve the web dashboard and the Prometheus endpoint
  limits       concurrency slots in use per entrypoint, and the limits they imply
  audit        from the log: the most jobs of each entrypoint picked at once
  health       OK, DEGRADED or STALLED, with the reasons (exit status 0, 1, 2)
  mcp          an MCP server on stdio: read-only tools for an assistant
  prune-log    fold the log into the statistics, then delete old log rows

Shell:
  completions  print a completion script for bash, zsh, fish, elvish or powershell
";

const AFTER_HELP: &str = "\
Environment:
  PGQUEUER_DSN, PGDSN, DATABASE_URL, then PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE:
      where to connect, in that order, unless --dsn is given
  PGQUEUER_POOLER: transaction when connecting through a pooler in transaction mode
      (PgBouncer pool_mode = transaction), transaction-prepared when that pooler keeps
      prepared statements (PgBouncer 1.21+, max_prepared_statements); direct (the
      default) otherwise
  PGQUEUER_LISTEN_DSN: with PGQUEUER_POOLER=transaction, a direct DSN for pgq listen
      and for pgq web's live updates
  PGQUEUER_WEB_USER, PGQUEUER_WEB_PASSWORD: HTTP Basic credentials for pgq web
  PGQUEUER_WEB_ALLOWED_HOSTS: host names pgq web answers for besides loopback
  PGQUEUER_QUEUE_TABLE, PGQUEUER_CHANNEL, ...: single object names, as in PgQueuer
  PGQUEUER_TABLEFMT (or TABLEFMT): table style: pretty (default), simple, plain, github
  RUST_LOG: log level of the program's own diagnostics (default warn)

Exit status: 0 success, 1 failure, 2 usage error.
Run 'pgq COMMAND --help' for the details of a command.";

/// `pgq`: manage and inspect a PgQueuer (1.6-compatible) queue in PostgreSQL.
#[derive(Debug, Parser)]
#[command(
    name = "pgq",
    version,
    about = "pgq: manage and inspect a PgQueuer (1.6-compatible) queue in PostgreSQL",
    help_template = "{about-with-newline}\n{usage-heading} {usage}\n\n{before-help}\nOptions:\n{options}\n\n{after-help}\n",
    before_help = COMMANDS,
    after_help = AFTER_HELP,
    subcommand_required = true,
    arg_required_else_help = false,
    disable_help_subcommand = false,
)]
pub(crate) struct Cli {
    /// Connection string (default: PGQUEUER_DSN, PGDSN, DATABASE_URL, then the libpq
    /// variables PGHOST, PGPORT, PGUSER, ...).
    #[arg(long, global = true, visible_alias = "pg-dsn", value_name = "DSN")]
    pub(crate) dsn: Option<String>,

    /// Prefix of every object name (default: PGQUEUER_PREFIX).
    #[arg(long, global = true, value_name = "P")]
    pub(crate) prefix: Option<String>,

    /// Schema holding every object (default: PGQUEUER_SCHEMA).
    #[arg(long, global = true, value_name = "S")]
    pub(crate) schema: Option<String>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the PgQueuer schema. Fails (exit 1) if the queue table already exists; use
    /// 'pgq upgrade' to bring an existing schema up to date.
    Install(DurabilityArg),

    /// Install the schema or bring it up to date, converging to PgQueuer 1.6.0's catalog.
    /// Idempotent; safe while workers run.
    Upgrade {
        /// Print the statements this database still needs instead of running them (none
        /// when it is up to date). 'pgq sql upgrade' prints the whole script.
        #[arg(long)]
        plan: bool,
    },

    /// Check that every PgQueuer object exists (present) or that none does (absent).
    /// Prints each divergence and exits 1 when there is one.
    Verify {
        /// What to expect.
        #[arg(long, value_enum, default_value_t = Expect::Present)]
        expect: Expect,
    },

    /// Drop the trigger, the function, the four tables (with every job, log row,
    /// statistic and schedule) and the enum types.
    Uninstall,

    /// Print the SQL of the command of the same name on stdout, without connecting.
    /// 'install' and 'upgrade' print the same idempotent script: installing is upgrading
    /// from nothing. Run each step as its own transaction (psql's default autocommit does).
    Sql {
        #[command(subcommand)]
        what: SqlCommand,
    },

    /// Switch the four tables' persistence in one transaction (ALTER TABLE ... SET
    /// LOGGED|UNLOGGED, rows kept). Each switch rewrites its table under an exclusive
    /// lock: run it when the queue is quiet.
    #[command(after_help = DURABILITY_LEVELS)]
    Durability {
        /// volatile, balanced or durable.
        #[arg(value_parser = parse_durability, value_name = "LEVEL")]
        level: Durability,
    },

    /// Apply PgQueuer's recommended autovacuum settings: aggressive on the queue and
    /// schedules tables (fillfactor 70), relaxed on the append-only log and statistics.
    Autovac(AutovacArgs),

    /// Enqueue one job. The payload is the UTF-8 bytes of the argument (none when
    /// omitted). Prints 'Enqueued job ID.'. Put -- before a payload that starts with '-'.
    Queue {
        /// The handler's name.
        entrypoint: String,
        /// The job's payload.
        payload: Option<String>,
        /// Higher runs sooner.
        #[arg(
            long,
            default_value = "0",
            value_parser = parse_priority,
            allow_negative_numbers = true,
            value_name = "N"
        )]
        priority: i32,
        /// Run no earlier than this many seconds from now.
        #[arg(long, value_parser = parse_seconds, value_name = "SECONDS")]
        delay: Option<Duration>,
        /// Refuse while a queued or picked job has this key.
        #[arg(long, value_name = "KEY")]
        dedupe_key: Option<String>,
        /// When the key is taken: raise exits 1, skip prints 'Skipped: ...' and exits 0.
        #[arg(long, value_enum, default_value_t = OnConflictArg::Raise)]
        on_conflict: OnConflictArg,
    },

    /// Show one job: its row (while it is in the queue table), payload (text, or hex
    /// when not UTF-8), headers and whole log history with tracebacks, also for jobs that
    /// have finished.
    Job {
        /// The job's id.
        #[arg(value_parser = parse_id)]
        id: i64,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },

    /// Cancel jobs: each queued or picked one is deleted and logged 'canceled', and a
    /// cancellation event tells the workers running them to stop. Failed (held) and
    /// finished jobs are left alone and named on stderr.
    Cancel(Ids),

    /// List jobs held with status 'failed' for manual intervention, oldest first, with
    /// the exception that put each there.
    Failed {
        #[command(flatten)]
        limit: Limit,
        /// A JSON array; each payload is reported by size only (payload_bytes).
        #[arg(long)]
        json: bool,
    },

    /// Put failed (held) jobs back in the queue, due now, attempts reset. Ids that are
    /// not held as failed are ignored and named on stderr.
    Requeue(Ids),

    /// Say why a job is not running, or that it is, or how it ended: unknown, finished,
    /// held as failed, deferred, running, stale (its worker presumed dead), or waiting
    /// behind other jobs or behind the jobs holding its entrypoint's concurrency slots.
    Explain {
        /// The job's id.
        #[arg(value_parser = parse_id)]
        id: i64,
        /// The workers' heartbeat timeout: a picked job whose heartbeat is older is stale.
        #[arg(long, value_parser = parse_seconds, default_value = "30", value_name = "SECONDS")]
        heartbeat_timeout: Duration,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },

    /// List picked jobs whose last heartbeat is older than the threshold, stalest first.
    Stale {
        /// Seconds without a heartbeat.
        #[arg(short, long, value_parser = parse_seconds, default_value = "300", value_name = "SECONDS")]
        threshold: Duration,
        #[command(flatten)]
        limit: Limit,
        #[command(flatten)]
        json: Json,
    },

    /// List the workers (queue managers) holding picked jobs.
    Workers(Json),

    /// List the cron schedules (PgQueuer's schedules table), after removing the ones
    /// named by --remove: an all-digit value is a schedule id, anything else an entrypoint
    /// (all of its schedules).
    Schedules {
        /// Remove first (repeatable).
        #[arg(short, long, value_name = "ID|ENTRYPOINT")]
        remove: Vec<String>,
        #[command(flatten)]
        json: Json,
    },

    /// Show how many jobs wait in 'queued' per entrypoint (deferred ones included), and
    /// how old they are.
    Backlog(Json),

    /// Count the jobs in the queue table per entrypoint, priority and status.
    Sizes(Json),

    /// Fold the log into the statistics (under PgQueuer's aggregation lock, so it never
    /// counts a row twice against a running worker), then print throughput per
    /// entrypoint and status over the last minute, the backlog per entrypoint and the
    /// active workers.
    Dashboard {
        /// Refresh every SECONDS until Ctrl-C, clearing the screen when the output is a
        /// terminal (default: print once).
        #[arg(short, long, value_parser = parse_interval, value_name = "SECONDS")]
        interval: Option<Duration>,
        #[command(flatten)]
        limit: Limit,
        /// With --interval: stop after N refreshes.
        #[arg(long, value_parser = parse_positive, requires = "interval", value_name = "N")]
        count: Option<u64>,
        /// One JSON object per frame (throughput, backlog, workers), one per line.
        #[arg(long)]
        json: bool,
    },

    /// Serve the web dashboard and the Prometheus endpoint (/metrics) until Ctrl-C.
    /// HTTP Basic authentication when PGQUEUER_WEB_USER and PGQUEUER_WEB_PASSWORD are set.
    Web {
        /// The address to bind.
        #[arg(long, env = "PGQUEUER_WEB_HOST", default_value = "127.0.0.1")]
        host: String,
        /// The port to bind (0 picks a free one and prints it).
        #[arg(long, env = "PGQUEUER_WEB_PORT", default_value_t = 8080)]
        port: u16,
        /// Answer requests for NAME too (`name`, `name:port`, or `*` for any name), in
        /// addition to PGQUEUER_WEB_ALLOWED_HOSTS (comma-separated). Always answered: the
        /// bound address and localhost, 127.0.0.1 and `[::1]` on the port; other names get
        /// 421 (a defence against DNS rebinding). Needed behind a reverse proxy and for
        /// --host 0.0.0.0 reached by a name or another address. Repeatable.
        #[arg(long = "allowed-host", value_name = "NAME", value_delimiter = ',')]
        allowed_hosts: Vec<String>,
    },

    /// Listen on the NOTIFY channel and print each event as it arrives, one line each:
    /// the event type, then the payload as sent. Runs until Ctrl-C.
    Listen {
        /// Default: the settings' channel (PGQUEUER_CHANNEL, ch_pgqueuer).
        #[arg(long, value_name = "CHANNEL")]
        channel: Option<String>,
        /// Stop after N events.
        #[arg(long, value_parser = parse_positive, value_name = "N")]
        count: Option<u64>,
        /// Stop after SECONDS; exit 1 if --count events had not arrived.
        #[arg(long, value_parser = parse_seconds, value_name = "SECONDS")]
        timeout: Option<Duration>,
    },

    /// Show, per entrypoint with picked jobs, the concurrency slots held and the highest
    /// one (a worker that took slot N declares a limit above N, so a highest slot at or
    /// above a worker's limit shows that workers disagree on the limit), the limits stored
    /// with 'pgq limits set' and their latest changes; or change the stored limits.
    Limits {
        #[command(subcommand)]
        action: Option<LimitsCommand>,
        /// A JSON array (one object per entrypoint, with its stored limits).
        #[arg(long)]
        json: bool,
    },

    /// Audit concurrency limits after the fact: from the log rows of the window (each
    /// job's pick and its next transition), the most jobs of each entrypoint that were
    /// picked at the same instant, next to the highest slot in use now. Says how many log
    /// rows it read.
    Audit {
        /// How far back: a number with a unit (30m, 1h, 7d).
        #[arg(long, value_parser = parse_span, default_value = "1h", value_name = "DURATION")]
        since: Duration,
        /// Only this entrypoint.
        entrypoint: Option<String>,
        /// Overlaps shorter than this are not counted: the log times each transition when
        /// its statement starts, and a claim may wait there for the commit that frees its
        /// slot.
        #[arg(long, value_parser = parse_seconds, default_value = "0.01", value_name = "SECONDS")]
        resolution: Duration,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },

    /// Say whether the queue is healthy, from the database alone (so it holds for a mixed
    /// Python and Rust fleet): STALLED when due work waits and nothing was picked or
    /// finished for --stall-after, or the schema would stop workers from starting;
    /// DEGRADED for stale picked jobs, a backlog growing faster than throughput, held
    /// failures, or more slots held than a --limit. Exit status 0 (OK), 1 (DEGRADED),
    /// 2 (STALLED), 3 when the check itself fails.
    Health {
        /// Due work that waited this long with nothing picked or finished is a stall.
        #[arg(long, value_parser = parse_span, default_value = "60s", value_name = "DURATION")]
        stall_after: Duration,
        /// A picked job whose heartbeat is older than this is stale.
        #[arg(long, value_parser = parse_span, default_value = "30s", value_name = "DURATION")]
        stale_after: Duration,
        /// Arrivals and completions are compared over this window.
        #[arg(long, value_parser = parse_span, default_value = "5m", value_name = "DURATION")]
        window: Duration,
        /// A concurrency limit declared for an entrypoint, to check the slots held
        /// against (repeatable).
        #[arg(long = "limit", value_parser = parse_declared_limit, value_name = "ENTRYPOINT=N")]
        limits: Vec<(String, u32)>,
        /// A session or prepared transaction holding the MVCC horizon this long is named
        /// (DEGRADED): no row version that died since can be removed.
        #[arg(long, value_parser = parse_span, default_value = "5m", value_name = "DURATION")]
        horizon_after: Duration,
        /// A replication slot or standby is named once the oldest row version it keeps is
        /// this many transactions old.
        #[arg(long, default_value_t = 500_000, value_name = "TRANSACTIONS")]
        horizon_xid_after: i64,
        /// Answer as a probe: `liveness` exits non-zero only when the database cannot be
        /// read or the schema lacks what a worker needs; `readiness` also when work
        /// stalls or the backlog grows. Held failures, stale jobs and a held horizon are
        /// reported, and exit 0.
        #[arg(long, value_parser = ["liveness", "readiness"], value_name = "KIND")]
        probe: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },

    /// Serve PgQueuer's read-only MCP tools (and explain_job, limits, limit_audit and
    /// health) on stdin and stdout, for an assistant. Every connection is read-only and
    /// every statement has a timeout.
    Mcp {
        /// The statement timeout of every tool's reads.
        #[arg(long, value_parser = parse_seconds, default_value = "5", value_name = "SECONDS")]
        statement_timeout: Duration,
    },

    /// Fold every log row into the statistics (so the counts survive), then delete log
    /// rows older than DURATION, all in one transaction. Prints how many. (PgQueuer has
    /// no such command; its log grows forever.)
    PruneLog {
        /// A number with a unit, or several: 7d, 12h, 30m, 90s, 1h30m.
        #[arg(long, value_parser = parse_span, value_name = "DURATION")]
        older_than: Duration,
    },

    /// Print a completion script for SHELL on stdout, e.g.
    /// `pgq completions bash > /etc/bash_completion.d/pgq`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

const DURABILITY_LEVELS: &str = "\
Levels:
  volatile   all four tables UNLOGGED (fastest; emptied by a crash, not replicated)
  balanced   queue and schedules LOGGED, log and statistics UNLOGGED
  durable    all four LOGGED";

#[derive(Debug, Subcommand)]
pub(crate) enum LimitsCommand {
    /// Store limits for ENTRYPOINT that override what workers of this crate declare:
    /// running workers take them within a second. Lowering a concurrency limit cancels no
    /// running job: the extra slots drain. Python PgQueuer workers do not read them.
    Set {
        /// The entrypoint.
        entrypoint: String,
        /// A rate limit, N/WINDOW (100/s, 1000/h, 5/250ms); repeat to stack windows. Keeps
        /// the stored rate limits when absent.
        #[arg(long = "rate", value_name = "N/WINDOW")]
        rates: Vec<String>,
        /// Store "no rate limit", overriding declared ones.
        #[arg(long, conflicts_with = "rates")]
        no_rate: bool,
        /// The concurrency limit (0: none). Keeps the stored one when absent.
        #[arg(long, value_name = "N")]
        concurrency: Option<u32>,
        /// Who makes the change, for the log [default: $USER].
        #[arg(long, value_name = "WHO")]
        by: Option<String>,
    },
    /// Delete ENTRYPOINT's stored limits: workers go back to what they declare.
    Unset {
        /// The entrypoint.
        entrypoint: String,
        /// Who makes the change, for the log [default: $USER].
        #[arg(long, value_name = "WHO")]
        by: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SqlCommand {
    /// The install script (the same as 'sql upgrade').
    Install(DurabilityArg),
    /// The idempotent upgrade script.
    Upgrade(DurabilityArg),
    /// The uninstall script.
    Uninstall,
    /// The statements of 'pgq durability LEVEL'.
    #[command(after_help = DURABILITY_LEVELS)]
    Durability {
        /// volatile, balanced or durable.
        #[arg(value_parser = parse_durability, value_name = "LEVEL")]
        level: Durability,
    },
    /// The statements of 'pgq autovac'.
    Autovac(AutovacArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DurabilityArg {
    /// volatile, balanced or durable (default: PGQUEUER_DURABILITY, else durable).
    #[arg(short, long, value_parser = parse_durability, value_name = "LEVEL")]
    pub(crate) durability: Option<Durability>,
}

#[derive(Debug, Args)]
pub(crate) struct AutovacArgs {
    /// Reset the same settings to the server defaults instead.
    #[arg(long, overrides_with = "no_rollback")]
    pub(crate) rollback: bool,
    /// Apply them (the default).
    #[arg(long, overrides_with = "rollback")]
    pub(crate) no_rollback: bool,
}

#[derive(Debug, Args)]
pub(crate) struct Ids {
    /// Job ids.
    #[arg(required = true, value_parser = parse_id, value_name = "ID")]
    pub(crate) ids: Vec<i64>,
}

#[derive(Debug, Args)]
pub(crate) struct Limit {
    /// At most N rows.
    #[arg(short = 'n', long = "limit", default_value = "25", value_parser = parse_count, value_name = "N")]
    pub(crate) limit: usize,
}

#[derive(Debug, Args)]
pub(crate) struct Json {
    /// A JSON array.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Expect {
    Present,
    Absent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnConflictArg {
    Raise,
    Skip,
}

fn parse_durability(text: &str) -> Result<Durability, String> {
    Durability::parse(text).map_err(|e| e.to_string())
}

fn parse_count(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| "expected a whole number, 0 or more".to_owned())
}

fn parse_positive(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a whole number, 1 or more".to_owned()),
    }
}

fn parse_priority(text: &str) -> Result<i32, String> {
    text.trim()
        .parse::<i32>()
        .map_err(|_| format!("expected a whole number from {} to {}", i32::MIN, i32::MAX))
}

fn parse_id(text: &str) -> Result<i64, String> {
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "not a job id (a whole number, 1 or more)".to_owned())
}

/// Seconds as a decimal number, 0 or more.
pub(crate) fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_owned())?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err("expected a number of seconds, 0 or more".into());
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| "too long".into())
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    match parse_seconds(text)? {
        d if d.is_zero() => Err("must be more than 0 seconds".into()),
        d => Ok(d),
    }
}

/// A span such as `7d`, `12h`, `30m`, `90s`, `1h30m` or `1.5h`: numbers, each with a
/// unit (`w`, `d`, `h`, `m`, `s`). A bare number is refused, as its unit would be a
/// guess.
/// `ENTRYPOINT=N`, a declared concurrency limit.
pub(crate) fn parse_declared_limit(text: &str) -> Result<(String, u32), String> {
    let (name, limit) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("{text:?} is not ENTRYPOINT=N"))?;
    let limit: u32 = limit
        .trim()
        .parse()
        .map_err(|_| format!("{limit:?} is not a limit (a whole number)"))?;
    if name.is_empty() || limit == 0 {
        return Err(format!(
            "{text:?}: give an entrypoint and a limit of 1 or more"
        ));
    }
    Ok((name.to_owned(), limit))
}

pub(crate) fn parse_span(text: &str) -> Result<Duration, String> {
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
pub(crate) fn format_span(d: Duration) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_grouped_list_names_every_command() {
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            if name == "help" {
                continue;
            }
            assert!(
                COMMANDS.contains(&format!("\n  {name} ")),
                "{name} is missing from the grouped command list"
            );
        }
    }

    #[test]
    fn globals_are_taken_anywhere() {
        let cli = Cli::try_parse_from([
            "pgq",
            "queue",
            "--dsn",
            "postgres://x",
            "ep",
            "--schema=s",
            "--",
            "--prefix",
        ])
        .unwrap();
        assert_eq!(cli.dsn.as_deref(), Some("postgres://x"));
        assert_eq!(cli.schema.as_deref(), Some("s"));
        assert!(cli.prefix.is_none());
        match cli.command {
            Command::Queue {
                entrypoint,
                payload,
                ..
            } => {
                assert_eq!(entrypoint, "ep");
                assert_eq!(payload.as_deref(), Some("--prefix"));
            }
            other => panic!("{other:?}"),
        }
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
        assert!(parse_interval("0").is_err());
    }
}
