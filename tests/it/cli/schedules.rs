//! `schedules`: listing and removing cron schedules.

use super::pgq;
use crate::harness::{TestDb, scalar};

/// `schedules` lists every schedule with its fields, and `--remove` takes ids and
/// entrypoints alike.
#[test]
fn schedules_lists_and_removes_by_id_and_entrypoint() {
    let db = TestDb::new();
    let mut client = db.client();
    let ids: Vec<i64> = client
        .query(
            "INSERT INTO pgqueuer_schedules (expression, entrypoint) VALUES \
             ('* * * * *', 'every_minute'), ('0 0 * * *', 'nightly'), ('*/5 * * * *', 'nightly') \
             RETURNING id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let listed = pgq(&db, &["schedules", "--json"]).json();
    assert_eq!(listed.len(), 3);
    for row in &listed {
        for key in [
            "id",
            "expression",
            "entrypoint",
            "next_run",
            "last_run",
            "status",
            "heartbeat",
        ] {
            assert!(row.get(key).is_some(), "{key} missing in {row}");
        }
    }
    let table = pgq(&db, &["schedules"]).ok();
    assert!(
        table.contains("every_minute") && table.contains("0 0 * * *"),
        "{table}"
    );

    let first = ids[0].to_string();
    let run = pgq(
        &db,
        &["schedules", "--remove", &first, "-r", "nightly", "--json"],
    );
    assert!(run.stderr.contains("pgq: removed 3 schedule(s)"), "{run:?}");
    assert!(run.json().is_empty());
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_schedules"),
        0
    );
    assert!(pgq(&db, &["schedules"]).ok().contains("No schedules"));
}
