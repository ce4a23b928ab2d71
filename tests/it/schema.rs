//! Schema lifecycle: install == upgrade, convergence from older PgQueuer releases,
//! verify, prefix/schema naming, concurrency of upgrade().

use std::collections::BTreeSet;

use pgqueuer::{Error, Settings, describe_schema, upgrade_with, verify_with};

use crate::harness::{TestDb, fixture, scalar, statement_functions};

fn fixture_lines(name: &str) -> Vec<String> {
    fixture(name)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Asserts two catalog descriptions are equal, printing only the differing facts.
fn assert_same_catalog(actual: &[String], expected: &[String], what: &str) {
    let a: BTreeSet<&String> = actual.iter().collect();
    let e: BTreeSet<&String> = expected.iter().collect();
    let missing: Vec<_> = e.difference(&a).collect();
    let extra: Vec<_> = a.difference(&e).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: catalog differs from PgQueuer 1.6.0's install\nmissing: {missing:#?}\nunexpected: {extra:#?}"
    );
}

#[test]
fn fresh_upgrade_equals_pgqueuer_1_6_0_install() {
    let db = TestDb::empty();
    let mut client = db.client();
    let report = pgqueuer::upgrade(&mut client).unwrap();
    assert!(!report.is_noop());
    let facts = describe_schema(&mut client, &Settings::default()).unwrap();
    assert_same_catalog(
        &facts,
        &fixture_lines("pgqueuer-1.6.0.catalog"),
        "fresh install",
    );
    pgqueuer::verify(&mut client).unwrap();
}

#[test]
fn a_second_upgrade_changes_nothing() {
    let db = TestDb::new();
    let mut client = db.client();
    let report = pgqueuer::upgrade(&mut client).unwrap();
    assert!(
        report.is_noop(),
        "second upgrade changed: {:#?}",
        report.changes
    );
}

#[test]
fn schema_and_prefix_match_pgqueuer_and_coexist_with_defaults() {
    let db = TestDb::new();
    let mut client = db.client();
    let custom = Settings::with_prefix("app_").schema("myq");
    upgrade_with(&mut client, &custom).unwrap();
    let facts = describe_schema(&mut client, &custom).unwrap();
    assert_same_catalog(
        &facts,
        &fixture_lines("pgqueuer-1.6.0-myq-app.catalog"),
        "myq/app_",
    );
    // A second prefix in the default schema, beside the default install.
    let other = Settings::with_prefix("other_");
    upgrade_with(&mut client, &other).unwrap();
    for settings in [Settings::default(), custom, other] {
        verify_with(&mut client, &settings).unwrap();
    }
    let public = describe_schema(&mut client, &Settings::default()).unwrap();
    assert!(
        public
            .iter()
            .any(|l| l.starts_with("table other_pgqueuer "))
    );
    assert!(public.iter().any(|l| l.starts_with("table pgqueuer ")));
    assert!(
        public
            .iter()
            .any(|l| l.contains("other_pgqueuer_picked_slot_idx"))
    );
    assert!(
        public
            .iter()
            .any(|l| l.starts_with("trigger CREATE TRIGGER other_tg_pgqueuer_changed"))
    );
}

/// Loads an older release's fixture, upgrades it, and checks catalog and rows.
/// `has_slots`: the release already had the slot column and index (so verify() passes).
fn upgrade_from(release: &str, has_slots: bool) {
    let db = TestDb::empty();
    let mut client = db.client();
    client
        .batch_execute(&fixture(&format!("pgqueuer-{release}.sql")))
        .unwrap();
    let rows_before: Vec<(i64, String, Option<Vec<u8>>)> = client
        .query(
            "SELECT id::bigint, status::text, payload FROM pgqueuer ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert!(rows_before.len() >= 5, "fixture {release} has too few rows");
    let slots_before: Vec<Option<i64>> = if has_slots {
        let rows = client
            .query(
                "SELECT slot FROM pgqueuer WHERE status = 'picked' ORDER BY id",
                &[],
            )
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    } else {
        Vec::new()
    };
    match pgqueuer::verify(&mut client) {
        Ok(()) => assert!(
            has_slots,
            "{release}: verify() passed without the slot column"
        ),
        Err(Error::Schema { missing, .. }) => {
            assert!(!has_slots, "{release}: verify() failed: {missing:?}");
            assert!(
                missing.contains(&"column pgqueuer.slot".to_owned()),
                "{missing:?}"
            );
        }
        Err(e) => panic!("{release}: {e}"),
    }

    let report = pgqueuer::upgrade(&mut client).unwrap();
    assert!(!report.is_noop());
    let facts = describe_schema(&mut client, &Settings::default()).unwrap();
    // PgQueuer keeps the retired statistics.time_in_queue column (relaxed to NULL).
    let facts: Vec<String> = facts
        .into_iter()
        .filter(|l| !l.contains(".time_in_queue "))
        .collect();
    assert_same_catalog(&facts, &fixture_lines("pgqueuer-1.6.0.catalog"), release);
    pgqueuer::verify(&mut client).unwrap();

    let rows_after: Vec<(i64, String, Option<Vec<u8>>)> = client
        .query(
            "SELECT id, status::text, payload FROM pgqueuer ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(rows_before, rows_after, "{release}: rows changed");
    let slots: Vec<Option<i64>> = client
        .query(
            "SELECT slot FROM pgqueuer WHERE status = 'picked' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    if has_slots {
        assert_eq!(slots, slots_before, "{release}: slots changed");
    } else {
        assert!(
            slots.iter().all(Option::is_none),
            "{release}: pre-slot picked rows must keep slot NULL"
        );
    }
    assert!(
        pgqueuer::upgrade(&mut client).unwrap().is_noop(),
        "{release}: second upgrade not a no-op"
    );
}

#[test]
fn upgrade_from_0_18_10_without_log_table_or_slot() {
    upgrade_from("0.18.10", false);
}

#[test]
fn upgrade_from_1_3_2_before_slots() {
    upgrade_from("1.3.2", false);
}

#[test]
fn upgrade_from_1_4_0_with_slots_but_older_indexes() {
    upgrade_from("1.4.0", true);
}

/// Eight processes' upgrades at once on an empty database converge on PgQueuer's
/// catalog, and between them report every change exactly once: the same changes and
/// statement functions, each once, as one upgrade alone reports (each step runs under the
/// upgrade lock and is reported by whoever made it).
#[test]
fn eight_concurrent_upgrades_on_an_empty_database() {
    let alone = {
        let db = TestDb::empty();
        let report = pgqueuer::upgrade(&mut db.client()).unwrap();
        let mut changes = report.changes;
        changes.extend(report.statement_functions);
        changes.sort();
        changes
    };
    assert!(!alone.is_empty());
    assert!(
        alone.iter().any(|c| c.starts_with("pgqueuer_rs_")),
        "{alone:?}"
    );
    let db = TestDb::empty();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let config = db.config();
            std::thread::spawn(move || {
                let mut client = config.connect(pgqueuer::postgres::NoTls).unwrap();
                pgqueuer::upgrade(&mut client).map(|r| [r.changes, r.statement_functions].concat())
            })
        })
        .collect();
    let mut reported: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap().unwrap())
        .collect();
    reported.sort();
    assert_eq!(
        reported, alone,
        "the eight reports together name each change once"
    );
    let mut client = db.client();
    let facts = describe_schema(&mut client, &Settings::default()).unwrap();
    assert_same_catalog(
        &facts,
        &fixture_lines("pgqueuer-1.6.0.catalog"),
        "concurrent install",
    );
}

#[test]
fn verify_names_a_missing_slot_column_and_index() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute("DROP INDEX pgqueuer_picked_slot_idx")
        .unwrap();
    let err = pgqueuer::verify(&mut client).unwrap_err();
    let Error::Schema { missing, .. } = &err else {
        panic!("unexpected {err:?}")
    };
    assert_eq!(missing, &["unique index pgqueuer_picked_slot_idx"]);
    assert!(err.to_string().contains("upgrade"), "{err}");

    client
        .batch_execute("ALTER TABLE pgqueuer DROP COLUMN slot")
        .unwrap();
    let Err(Error::Schema { missing, .. }) = pgqueuer::verify(&mut client) else {
        panic!("verify passed")
    };
    assert_eq!(
        missing,
        [
            "column pgqueuer.slot",
            "unique index pgqueuer_picked_slot_idx"
        ]
    );

    let report = pgqueuer::upgrade(&mut client).unwrap();
    assert!(
        report
            .changes
            .iter()
            .any(|c| c.starts_with("+ column pgqueuer.slot bigint")),
        "{:?}",
        report.changes
    );
    pgqueuer::verify(&mut client).unwrap();
}

#[test]
fn verify_on_an_empty_database_names_every_table() {
    let db = TestDb::empty();
    let mut client = db.client();
    let Err(Error::Schema { missing, .. }) = pgqueuer::verify(&mut client) else {
        panic!("verify passed")
    };
    for object in [
        "table pgqueuer",
        "table pgqueuer_log",
        "type pgqueuer_status",
        "function fn_pgqueuer_changed",
    ] {
        assert!(
            missing.iter().any(|m| m == object),
            "{object} not in {missing:?}"
        );
    }
}

#[test]
fn uninstall_removes_everything_and_upgrade_reinstalls() {
    let db = TestDb::new();
    let mut client = db.client();
    let made = statement_functions(&mut client);
    assert!(made > 0, "upgrade() made no statement function");
    pgqueuer::uninstall(&mut client).unwrap();
    let facts = describe_schema(&mut client, &Settings::default()).unwrap();
    assert!(facts.is_empty(), "left behind: {facts:#?}");
    assert_eq!(
        statement_functions(&mut client),
        0,
        "statement functions left behind"
    );
    pgqueuer::upgrade(&mut client).unwrap();
    pgqueuer::verify(&mut client).unwrap();
    assert_eq!(statement_functions(&mut client), made);
}

#[test]
fn durability_levels_set_table_persistence() {
    let db = TestDb::empty();
    let mut client = db.client();
    let settings = Settings {
        durability: pgqueuer::Durability::Balanced,
        ..Settings::default()
    };
    upgrade_with(&mut client, &settings).unwrap();
    let facts = describe_schema(&mut client, &settings).unwrap();
    for (table, p) in [
        ("pgqueuer", "p"),
        ("pgqueuer_schedules", "p"),
        ("pgqueuer_log", "u"),
        ("pgqueuer_statistics", "u"),
    ] {
        let line = format!("table {table} persistence={p}");
        assert!(facts.contains(&line), "{line} missing");
    }
}

/// Applies each planned statement on its own, as `pgq upgrade --plan | psql` would.
fn apply(client: &mut pgqueuer::postgres::Client, plan: &pgqueuer::UpgradePlan, what: &str) {
    for statement in &plan.statements {
        client
            .batch_execute(statement)
            .unwrap_or_else(|e| panic!("{what}: planned statement failed: {e:?}\n{statement}"));
    }
}

/// The catalog without the retired `time_in_queue` column PgQueuer keeps.
fn catalog_of(client: &mut pgqueuer::postgres::Client, settings: &Settings) -> Vec<String> {
    describe_schema(client, settings)
        .unwrap()
        .into_iter()
        .filter(|l| !l.contains(".time_in_queue "))
        .collect()
}

/// `upgrade_plan` is exactly what each database needs: nothing when it is up to
/// date; from nothing, and from each older release's schema, statements that, each run
/// on its own, end in PgQueuer 1.6.0's catalog (where upgrade() ends), keep every row,
/// and leave nothing more to plan.
#[test]
fn upgrade_plans_are_exactly_the_delta_each_database_needs() {
    let current = TestDb::new();
    let mut client = current.client();
    let plan = pgqueuer::upgrade_plan(&mut client, &Settings::default()).unwrap();
    assert!(plan.is_empty(), "an up-to-date database: {plan:#?}");
    assert!(plan.notes.is_empty(), "{plan:#?}");

    for (release, expected) in [
        (None, "pgqueuer-1.6.0.catalog"),
        (Some("0.18.10"), "pgqueuer-1.6.0.catalog"),
        (Some("1.3.2"), "pgqueuer-1.6.0.catalog"),
        (Some("1.4.0"), "pgqueuer-1.6.0.catalog"),
    ] {
        let what = release.unwrap_or("an empty database");
        let db = TestDb::empty();
        let mut client = db.client();
        if let Some(release) = release {
            client
                .batch_execute(&fixture(&format!("pgqueuer-{release}.sql")))
                .unwrap();
        }
        let rows = |c: &mut pgqueuer::postgres::Client| -> i64 {
            scalar(
                c,
                "SELECT count(*) FROM pg_class WHERE relname = 'pgqueuer' AND relkind = 'r'",
            )
        };
        let jobs_before = if rows(&mut client) > 0 {
            scalar(&mut client, "SELECT count(*) FROM pgqueuer")
        } else {
            0
        };
        let plan = pgqueuer::upgrade_plan(&mut client, &Settings::default()).unwrap();
        assert!(!plan.is_empty(), "{what}: nothing planned");
        apply(&mut client, &plan, what);
        assert_same_catalog(
            &catalog_of(&mut client, &Settings::default()),
            &fixture_lines(expected),
            what,
        );
        let again = pgqueuer::upgrade_plan(&mut client, &Settings::default()).unwrap();
        assert!(
            again.is_empty(),
            "{what}: a second plan is not empty: {again:#?}"
        );
        assert!(
            pgqueuer::upgrade(&mut client).unwrap().is_noop(),
            "{what}: upgrade() found more to do than the plan"
        );
        if release.is_some() {
            assert_eq!(
                scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
                jobs_before,
                "{what}: rows lost"
            );
        }
        eprintln!("{what}: {} statements planned", plan.statements.len());
    }

    // The same with a prefix and a schema of its own.
    let db = TestDb::empty();
    let mut client = db.client();
    let settings = Settings::with_prefix("app_").schema("myq");
    let plan = pgqueuer::upgrade_plan(&mut client, &settings).unwrap();
    assert!(plan.statements[0].starts_with("CREATE SCHEMA"), "{plan:#?}");
    apply(&mut client, &plan, "myq/app_");
    assert_same_catalog(
        &catalog_of(&mut client, &settings),
        &fixture_lines("pgqueuer-1.6.0-myq-app.catalog"),
        "myq/app_",
    );
    assert!(
        pgqueuer::upgrade_plan(&mut client, &settings)
            .unwrap()
            .is_empty()
    );
}

/// The 1.3.2 plan is what PgQueuer's own planner prints for that database, statement for
/// statement (fixtures/pgqueuer-1.3.2.upgrade-plan.sql, captured from PgQueuer 1.6.0).
#[test]
fn the_plan_for_1_3_2_matches_pgqueuers_own() {
    let db = TestDb::empty();
    let mut client = db.client();
    client
        .batch_execute(&fixture("pgqueuer-1.3.2.sql"))
        .unwrap();
    let plan = pgqueuer::upgrade_plan(&mut client, &Settings::default()).unwrap();
    let ours: Vec<String> = plan
        .statements
        .iter()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let theirs = fixture("pgqueuer-1.3.2.upgrade-plan.sql");
    // PgQueuer rebuilds a changed index beside the old one and renames it; we drop and
    // create it. The fold before the statistics index is written differently too.
    let rebuilt: Vec<String> = ours
        .iter()
        .filter_map(|s| s.strip_prefix("DROP INDEX IF EXISTS "))
        .map(|name| format!(" INDEX {name} ON "))
        .collect();
    for statement in &ours {
        if statement.starts_with("WITH ranked")
            || statement.starts_with("DROP INDEX")
            || rebuilt.iter().any(|r| statement.contains(r.as_str()))
        {
            continue;
        }
        let normalized = theirs.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            normalized.contains(statement.as_str()),
            "{statement:?} is not in PgQueuer's plan:\n{theirs}"
        );
    }
    assert!(
        ours.iter()
            .any(|s| s == "ALTER TABLE pgqueuer ADD COLUMN slot bigint"),
        "{ours:#?}"
    );
}

/// upgrade() lets no NOTICE through to the client (its IF NOT EXISTS guards would send
/// dozens on every start), on an empty and on an up-to-date database, and leaves the
/// session's own client_min_messages as it found it.
#[test]
fn upgrade_sends_the_client_no_notices() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let db = TestDb::empty();
    let notices = Arc::new(AtomicUsize::new(0));
    let seen = notices.clone();
    let mut config = db.config();
    config.notice_callback(move |notice| {
        eprintln!("notice: {}", notice.message());
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let mut client = config.connect(pgqueuer::postgres::NoTls).unwrap();
    client
        .batch_execute("SET client_min_messages = log")
        .unwrap();
    // The callback works: a NOTICE of our own reaches it.
    client
        .batch_execute("DO $$ BEGIN RAISE NOTICE 'probe'; END $$")
        .unwrap();
    assert_eq!(notices.swap(0, Ordering::SeqCst), 1);

    assert!(!pgqueuer::upgrade(&mut client).unwrap().is_noop());
    assert!(pgqueuer::upgrade(&mut client).unwrap().is_noop());
    assert_eq!(
        notices.load(Ordering::SeqCst),
        0,
        "upgrade() let notices through"
    );
    let level: String = scalar(&mut client, "SHOW client_min_messages");
    assert_eq!(level, "log");
}

/// A role that may use the queue's tables but not create functions in the schema (an
/// application role; its owner installed the schema) still gets a working `upgrade()`
/// from its startup hook: nothing changed, no statement function made, no error. The
/// owner's next `upgrade()` makes them.
#[test]
fn upgrade_by_a_role_that_cannot_create_functions_succeeds_without_them() {
    let db = TestDb::new();
    let mut owner = db.client();
    owner
        .batch_execute(
            "DO $$ DECLARE f regprocedure; BEGIN
                 FOR f IN SELECT oid::regprocedure FROM pg_proc
                          WHERE proname ~ '^pgqueuer_rs_[0-9a-f]{16}$'
                 LOOP EXECUTE 'DROP FUNCTION ' || f; END LOOP;
             END $$;",
        )
        .unwrap();
    assert_eq!(statement_functions(&mut owner), 0);
    let mut app = db
        .app_role_dsn()
        .parse::<pgqueuer::postgres::Config>()
        .unwrap()
        .connect(pgqueuer::postgres::NoTls)
        .unwrap();
    let report = pgqueuer::upgrade(&mut app).unwrap();
    assert!(
        report.is_noop() && report.statement_functions.is_empty(),
        "{report:?}"
    );
    pgqueuer::verify(&mut app).unwrap();
    assert_eq!(statement_functions(&mut owner), 0);
    let report = pgqueuer::upgrade(&mut owner).unwrap();
    assert!(!report.statement_functions.is_empty(), "{report:?}");
    assert_eq!(
        statement_functions(&mut owner),
        i64::try_from(report.statement_functions.len()).unwrap()
    );
}
