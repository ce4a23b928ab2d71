//! The help texts: the program's usage and one text per command.

pub(crate) const USAGE: &str = "\
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
    schedules     list (and --remove) cron schedules
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
pub(crate) const COMMAND_HELP: &[(&str, &str)] = &[
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
        "schedules",
        "\
pgq schedules [-r|--remove ID|ENTRYPOINT]... [--json]

Lists the cron schedules (PgQueuer's schedules table), after removing the ones named by
--remove: an all-digit value is a schedule id, anything else an entrypoint (all of its
schedules). Repeat --remove to remove several.

OPTIONS:
    -r, --remove ID|ENTRYPOINT   remove first (repeatable)
    --json                       a JSON array
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

/// The help text of `command`, if it is one.
pub(crate) fn help_of(command: &str) -> Option<&'static str> {
    COMMAND_HELP
        .iter()
        .find(|(name, _)| *name == command)
        .map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            "schedules",
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
}
