//! Failures, usage errors, help and shell completions.

use super::pgq_env;

/// Connection failures exit 1 naming the target (never a password); usage errors exit 2
/// in one form with a pointer to `--help`; help works for every command without a
/// database.
#[test]
fn failures_exit_non_zero_with_an_actionable_message() {
    // A DSN that cannot connect names the target (never a password).
    let run = pgq_env(
        Some("postgres://nobody:secret@127.0.0.1:1/nodb"),
        &["sizes"],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("nobody@127.0.0.1:1/nodb"), "{run:?}");
    assert!(!run.stderr.contains("secret"), "{run:?}");
    assert!(run.stderr.contains("hint:"), "{run:?}");
    let run = pgq_env(
        None,
        &["--dsn", "postgres://someone@127.0.0.1:1/db", "stale"],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("someone@127.0.0.1:1/db"), "{run:?}");
    let run = pgq_env(None, &["--dsn", "postgres://x@h/db?nonsense=1", "workers"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("nonsense"), "{run:?}");

    // A DSN of another database system is named as such.
    let run = pgq_env(None, &["--dsn", "mysql://root@127.0.0.1/app", "sizes"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("mysql://") && run.stderr.contains("postgres://"),
        "{run:?}"
    );

    // Usage errors: exit 2, one form ("pgq: error: ..."), the usage line and a pointer
    // to --help; no terminal escapes into a pipe.
    let usage = |args: &[&str], says: &[&str]| {
        let run = pgq_env(None, args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.starts_with("pgq: error: "), "{run:?}");
        assert!(run.stderr.contains("'--help'"), "{run:?}");
        assert!(!run.stderr.contains('\x1b'), "{run:?}");
        for text in says {
            assert!(
                run.stderr.contains(text),
                "{args:?} does not say {text:?}: {run:?}"
            );
        }
    };
    usage(&["frobnicate"], &["unrecognized subcommand 'frobnicate'"]);
    usage(&["wokers"], &["a similar subcommand exists: 'workers'"]);
    usage(&[], &["requires a subcommand"]);
    usage(
        &["failed", "--limit", "many"],
        &["'many' for '--limit <N>'", "expected a whole number"],
    );
    usage(
        &["backlog", "--verbose"],
        &["unexpected argument '--verbose'"],
    );
    usage(&["queue"], &["<ENTRYPOINT>", "Usage: pgq queue"]);
    usage(
        &["queue", "ep", "--priority", "high"],
        &["'high' for '--priority <N>'"],
    );
    let run = pgq_env(None, &["--prefix", "1bad", "sizes"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("prefix"), "{run:?}");

    // Help for the program and for every command, without a database.
    let help = pgq_env(None, &["--help"]).ok();
    for heading in [
        "Schema:",
        "Jobs:",
        "Monitoring:",
        "Options:",
        "Environment:",
        "--dsn",
    ] {
        assert!(help.contains(heading), "--help lacks {heading:?}:\n{help}");
    }
    assert_eq!(pgq_env(None, &["help"]).ok(), help);
    for command in [
        "install",
        "upgrade",
        "verify",
        "uninstall",
        "sql",
        "durability",
        "autovac",
        "queue",
        "job",
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
        "completions",
    ] {
        let help = pgq_env(None, &[command, "--help"]).ok();
        assert!(
            help.contains(&format!("Usage: pgq {command}")),
            "{command}: {help}"
        );
        assert_eq!(pgq_env(None, &["help", command]).ok(), help);
    }
}

/// `pgq completions SHELL` prints a completion script that knows the commands.
#[test]
fn completions_are_printed_for_each_shell() {
    let bash = pgq_env(None, &["completions", "bash"]).ok();
    assert!(
        bash.contains("_pgq()") && bash.contains("prune-log"),
        "{bash}"
    );
    let zsh = pgq_env(None, &["completions", "zsh"]).ok();
    assert!(zsh.starts_with("#compdef pgq"), "{zsh}");
    for shell in ["fish", "elvish", "powershell"] {
        assert!(
            pgq_env(None, &["completions", shell])
                .ok()
                .contains("dashboard"),
            "{shell}"
        );
    }
    assert_eq!(pgq_env(None, &["completions", "tcsh"]).code, 2);
}
