//! Schema: each side accepts the other's install.

use pgqueuer::{Entrypoint, NewJob, Queue, Settings};

use super::drain;
use crate::harness::{TestDb, log_of, statement_functions};
use crate::python;

/// `pgq upgrade --plan` printed no SQL statement (it prints the delta on stdout, headed by
/// comments, and its verdict on stderr).
#[track_caller]
fn assert_nothing_planned(plan: &python::Output) {
    let statements: Vec<&str> = plan
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("--"))
        .collect();
    assert!(
        statements.is_empty(),
        "pgq upgrade --plan wants to change our schema: {statements:#?}\n{plan:?}"
    );
    assert!(
        plan.stderr.contains("already up to date"),
        "pgq upgrade --plan did not report an up-to-date schema: {plan:?}"
    );
}

/// Our `upgrade()` satisfies Python's `pgq verify` and leaves `pgq upgrade --plan` with
/// nothing to do; Python's `pgq install` satisfies our `verify()`, leaves our `upgrade()`
/// with nothing to change, and our worker runs a job on it.
#[test]
fn schemas_are_accepted_both_ways() {
    let ours = TestDb::empty();
    let report = pgqueuer::upgrade(&mut ours.client()).unwrap();
    assert!(
        !report.is_noop(),
        "upgrade() on an empty database did nothing"
    );

    let verify = python::pgq(&ours, &["verify", "--expect", "present"]).success();
    assert!(
        verify
            .stdout
            .contains("All required PgQueuer database objects are present."),
        "{verify:?}"
    );
    assert_nothing_planned(&python::pgq(&ours, &["upgrade", "--plan"]).success());

    // The same with a prefix and a schema: PgQueuer names every object after them.
    let prefixed = TestDb::empty();
    let settings = Settings::with_prefix("app_").schema("myq");
    pgqueuer::upgrade_with(&mut prefixed.client(), &settings).unwrap();
    let env = [("PGQUEUER_PREFIX", "app_"), ("PGQUEUER_SCHEMA", "myq")];
    python::pgq_with_env(&prefixed, &env, &["verify", "--expect", "present"]).success();
    assert_nothing_planned(
        &python::pgq_with_env(&prefixed, &env, &["upgrade", "--plan"]).success(),
    );

    let theirs = TestDb::empty();
    let install = python::pgq(&theirs, &["install"]).success();
    eprintln!("pgq install: {}", install.stderr.trim());
    let mut client = theirs.client();
    pgqueuer::verify(&mut client).unwrap();
    let report = pgqueuer::upgrade(&mut client).unwrap();
    assert!(
        report.is_noop(),
        "our upgrade() changed PgQueuer's own install: {:#?}",
        report.changes
    );
    assert!(
        !report.statement_functions.is_empty(),
        "our upgrade() made no statement function on PgQueuer's install"
    );
    let pool = theirs.pool(4);
    let id = Queue::new(pool.clone())
        .enqueue(NewJob::new("on_their_schema", b"hello".to_vec()))
        .unwrap();
    let summary = drain(&pool, Entrypoint::new("on_their_schema"));
    assert_eq!(summary.succeeded, 1);
    assert_eq!(log_of(&mut client, id), ["queued", "picked", "successful"]);
}

/// PgQueuer's own `pgq uninstall` removes its schema from a database our `upgrade()` made,
/// although our statement functions stay (no object of PgQueuer's depends on them, nor
/// they on one), and our `upgrade()` installs it again.
#[test]
fn python_uninstall_works_over_our_statement_functions() {
    let db = TestDb::new();
    let mut client = db.client();
    assert!(
        statement_functions(&mut client) > 0,
        "upgrade() made no statement function"
    );
    let out = python::pgq(&db, &["uninstall"]).success();
    eprintln!("pgq uninstall: {}", out.stderr.trim());
    let left = pgqueuer::describe_schema(&mut client, &Settings::default()).unwrap();
    assert!(left.is_empty(), "pgq uninstall left: {left:#?}");
    pgqueuer::upgrade(&mut client).unwrap();
    pgqueuer::verify(&mut client).unwrap();
}
