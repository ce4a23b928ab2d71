//! The schema: `install`, `verify`, `upgrade [--plan]`, `uninstall` and `sql`.

use pgqueuer::Settings;
use pgqueuer::postgres::Client;

use super::{command, pgq, pgq_env};
use crate::harness::{TestDb, fixture, scalar};

/// `install`, `verify`, `upgrade` and `uninstall` manage the schema, and a command that
/// needs the schema says how to get it.
#[test]
fn install_verify_and_uninstall_through_the_program() {
    let db = TestDb::empty();
    let missing = pgq(&db, &["verify"]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stdout.contains("missing table pgqueuer"),
        "{missing:?}"
    );
    // A command that needs the schema says how to get it.
    let sizes = pgq(&db, &["sizes"]);
    assert_eq!(sizes.code, 1, "{sizes:?}");
    assert!(sizes.stderr.contains("pgq upgrade"), "{sizes:?}");

    assert!(
        pgq(&db, &["install", "-d", "balanced"])
            .ok()
            .starts_with("Installed PgQueuer schema (durability=balanced")
    );
    let again = pgq(&db, &["install"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("already installed"), "{again:?}");
    assert!(
        pgq(&db, &["verify"])
            .ok()
            .contains("All required PgQueuer database objects are present.")
    );
    assert_eq!(
        pgq(&db, &["upgrade"]).ok().trim(),
        "PgQueuer schema is already up to date."
    );
    let mut client = db.client();
    // This crate's own tables are checked too, and `upgrade` makes a missing one again.
    client
        .batch_execute("DROP TABLE pgqueuer_rs_declared")
        .unwrap();
    let own = pgq(&db, &["verify"]);
    assert_eq!(own.code, 1, "{own:?}");
    assert!(
        own.stdout.contains("missing table pgqueuer_rs_declared")
            && own.stderr.contains("run 'pgq upgrade'"),
        "{own:?}"
    );
    pgq(&db, &["upgrade"]).ok();
    assert!(
        pgq(&db, &["verify"])
            .ok()
            .contains("This crate's own tables (rate limits, stored limits) are present.")
    );
    let log_persistence: String = scalar(
        &mut client,
        "SELECT relpersistence::text FROM pg_class WHERE relname = 'pgqueuer_log'",
    );
    assert_eq!(log_persistence, "u");

    assert_eq!(
        pgq(&db, &["uninstall"]).ok().trim(),
        "Removed every PgQueuer object."
    );
    assert!(
        pgq(&db, &["verify", "--expect", "absent"])
            .ok()
            .contains("No PgQueuer database objects found.")
    );
    assert_eq!(pgq(&db, &["verify", "--expect", "maybe"]).code, 2);
}

/// `pgq sql ...` prints the SQL the library would run, names included, without
/// connecting to anything.
#[test]
fn sql_commands_print_without_connecting() {
    // Nothing listens on port 1: any connection attempt would fail.
    let nowhere = Some("postgres://nobody@127.0.0.1:1/none");
    let install = pgq_env(nowhere, &["sql", "install"]).ok();
    assert!(install.contains("CREATE TABLE"), "{install}");
    assert_eq!(
        install,
        pgq_env(nowhere, &["sql", "upgrade"]).ok(),
        "installing is upgrading"
    );
    let volatile = pgq_env(nowhere, &["sql", "install", "--durability", "volatile"]).ok();
    assert!(volatile.contains("UNLOGGED"), "{volatile}");
    for step in pgqueuer::upgrade_sql(&Settings::default()).unwrap() {
        assert!(install.contains(step.trim_end()), "every step is printed");
    }

    let uninstall = pgq_env(nowhere, &["sql", "uninstall"]).ok();
    assert_eq!(
        uninstall,
        pgqueuer::uninstall_sql(&Settings::default()).unwrap()
    );
    let named = pgq_env(
        nowhere,
        &["--prefix", "app_", "sql", "uninstall", "--schema", "MyQ"],
    )
    .ok();
    assert!(
        named.contains("DROP TABLE IF EXISTS myq.app_pgqueuer;"),
        "{named}"
    );

    // A name set explicitly wins over --prefix, as in Python.
    let out = command(nowhere, &["--prefix", "app_", "sql", "uninstall"])
        .env("PGQUEUER_QUEUE_TABLE", "jobs")
        .output()
        .unwrap();
    let explicit = String::from_utf8(out.stdout).unwrap();
    assert!(
        explicit.contains("DROP TABLE IF EXISTS jobs;"),
        "{explicit}"
    );
    assert!(
        explicit.contains("DROP TABLE IF EXISTS app_pgqueuer_log;"),
        "{explicit}"
    );

    let durability = pgq_env(nowhere, &["sql", "durability", "balanced"]).ok();
    assert_eq!(durability.lines().count(), 4);
    assert!(
        durability.contains("ALTER TABLE pgqueuer_log SET UNLOGGED;"),
        "{durability}"
    );
    let tune = pgq_env(nowhere, &["sql", "autovac"]).ok();
    assert!(tune.contains("fillfactor = 70"), "{tune}");
    let reset = pgq_env(nowhere, &["sql", "autovac", "--rollback"]).ok();
    assert!(reset.contains("RESET (") && !reset.contains('='), "{reset}");

    for bad in [
        &["sql"][..],
        &["sql", "nothing"],
        &["sql", "durability"],
        &["sql", "install", "--plan"],
    ] {
        assert_eq!(pgq_env(nowhere, bad).code, 2, "{bad:?}");
    }
}

/// `pgq upgrade --plan` prints the delta this database needs: nothing on an up-to-date
/// database, the install on an empty one, a few statements on a 1.3.2 one; it changes
/// nothing.
#[test]
fn upgrade_plan_prints_only_what_this_database_needs() {
    let current = TestDb::new();
    let out = pgq(&current, &["upgrade", "--plan"]).ok();
    assert!(out.contains("is up to date: nothing to apply"), "{out}");
    assert!(!out.contains("CREATE") && !out.contains("ALTER"), "{out}");

    let empty = TestDb::empty();
    let out = pgq(&empty, &["upgrade", "--plan"]).ok();
    assert!(
        out.contains("CREATE TABLE IF NOT EXISTS pgqueuer ("),
        "{out}"
    );
    let mut client = empty.client();
    assert!(describe_nothing(&mut client), "--plan changed the database");

    let old = TestDb::empty();
    let mut client = old.client();
    client
        .batch_execute(&fixture("pgqueuer-1.3.2.sql"))
        .unwrap();
    let out = pgq(&old, &["upgrade", "--plan"]).ok();
    assert!(
        out.contains("\nALTER TABLE pgqueuer ADD COLUMN slot bigint;\n")
            && out.contains("CREATE INDEX pgqueuer_picked_heartbeat_idx ON pgqueuer USING btree")
            && !out.contains("CREATE TABLE"),
        "{out}"
    );
    assert!(
        pgqueuer::verify(&mut client).is_err(),
        "--plan applied something"
    );
}

fn describe_nothing(client: &mut Client) -> bool {
    pgqueuer::describe_schema(client, &Settings::default())
        .unwrap()
        .is_empty()
}

/// On a database without the schema, a command's error names that database and says how
/// to get the schema there (the easy mistake: no DSN, and a default database that is the
/// user's name).
#[test]
fn a_missing_schema_names_the_database_it_looked_in() {
    let empty = TestDb::empty();
    let run = pgq(&empty, &["sizes"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("relation \"pgqueuer\" does not exist")
            && run.stderr.contains(&format!("/{}?", empty.name))
            && run.stderr.contains("Run 'pgq upgrade' there"),
        "{run:?}"
    );
    let run = pgq(&empty, &["verify"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout.contains("missing table pgqueuer")
            && run.stderr.contains(&empty.name)
            && run.stderr.contains("pgq upgrade"),
        "{run:?}"
    );
}
