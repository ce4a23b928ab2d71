//! Table maintenance: `prune-log`, `durability` and `autovac`.

use pgqueuer::Status;
use pgqueuer::postgres::Client;

use super::{pgq, process};
use crate::claim::insert_jobs;
use crate::harness::{TestDb, scalar};

/// `prune-log --older-than` deletes old log rows only after counting them in the
/// statistics, and pruning again counts nothing twice.
#[test]
fn prune_log_keeps_the_counts() {
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "old", 0, 4);
    process(&db, "old", Status::Successful);
    // The log rows of these jobs (picked, successful) are made ten days old; one more
    // recent row stays.
    client
        .batch_execute(
            "UPDATE pgqueuer_log SET created = now() - interval '10 days'; \
             INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint) VALUES (99, 'queued', 0, 'new')",
        )
        .unwrap();
    let logged: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer_log");

    let out = pgq(&db, &["prune-log", "--older-than", "7d"]).ok();
    assert_eq!(
        out.trim(),
        format!(
            "Aggregated {logged} log row(s) into the statistics; deleted {} log row(s) older than 7d.",
            logged - 1
        )
    );
    let left: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer_log");
    assert_eq!(left, 1, "the recent row stays");
    let counted: i64 = scalar(
        &mut client,
        "SELECT sum(count)::bigint FROM pgqueuer_statistics",
    );
    assert_eq!(
        counted, logged,
        "every pruned row is counted in the statistics"
    );
    let successes: i64 = scalar(
        &mut client,
        "SELECT sum(count)::bigint FROM pgqueuer_statistics WHERE status = 'successful'",
    );
    assert_eq!(successes, 4);

    // Pruning again deletes nothing and counts nothing twice.
    let again = pgq(&db, &["prune-log", "--older-than", "1h30m"]).ok();
    assert!(
        again.contains("Aggregated 0 log row(s)") && again.contains("deleted 0"),
        "{again}"
    );

    for bad in [
        &["prune-log"][..],
        &["prune-log", "--older-than", "7"],
        &["prune-log", "--older-than", "7y"],
    ] {
        let run = pgq(&db, bad);
        assert_eq!(run.code, 2, "{bad:?}: {run:?}");
        assert!(
            run.stderr.starts_with("pgq: error: ")
                && run.stderr.contains("--older-than")
                && run.stderr.contains("'--help'"),
            "{run:?}"
        );
    }
}

/// `(relname, relpersistence, reloptions)` of the four tables, by name.
fn table_storage(client: &mut Client) -> Vec<(String, String, Option<Vec<String>>)> {
    client
        .query(
            "SELECT relname::text, relpersistence::text, reloptions FROM pg_class \
              WHERE relkind = 'r' AND relname IN ('pgqueuer', 'pgqueuer_log', 'pgqueuer_statistics', 'pgqueuer_schedules') \
              ORDER BY relname",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// `durability` switches the tables between logged and unlogged without losing rows, and
/// `autovac` applies and rolls back the recommended storage options.
#[test]
fn durability_and_autovac_change_the_tables() {
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "kept", 0, 2);
    let persistence = |client: &mut Client| -> Vec<String> {
        table_storage(client)
            .into_iter()
            .map(|(name, p, _)| format!("{name}={p}"))
            .collect()
    };

    assert_eq!(
        pgq(&db, &["durability", "balanced"]).ok().trim(),
        "Set PgQueuer durability to balanced."
    );
    assert_eq!(
        persistence(&mut client),
        [
            "pgqueuer=p",
            "pgqueuer_log=u",
            "pgqueuer_schedules=p",
            "pgqueuer_statistics=u"
        ]
    );
    pgq(&db, &["durability", "volatile"]).ok();
    assert!(persistence(&mut client).iter().all(|p| p.ends_with("=u")));
    pgq(&db, &["durability", "DURABLE"]).ok();
    assert!(persistence(&mut client).iter().all(|p| p.ends_with("=p")));
    let kept: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer");
    assert_eq!(kept, 2, "rows survive the rewrites");

    assert_eq!(
        pgq(&db, &["autovac"]).ok().trim(),
        "Applied recommended autovacuum settings."
    );
    let storage = table_storage(&mut client);
    let options = |name: &str| {
        storage
            .iter()
            .find(|t| t.0 == name)
            .unwrap()
            .2
            .clone()
            .unwrap_or_default()
    };
    assert!(
        options("pgqueuer").contains(&"fillfactor=70".to_owned()),
        "{storage:?}"
    );
    assert!(options("pgqueuer_schedules").contains(&"autovacuum_vacuum_cost_delay=0".to_owned()));
    assert!(options("pgqueuer_log").contains(&"autovacuum_vacuum_threshold=1000000".to_owned()));
    assert_eq!(options("pgqueuer_statistics").len(), 4);
    assert_eq!(options("pgqueuer").len(), 7);

    assert_eq!(
        pgq(&db, &["autovac", "--rollback"]).ok().trim(),
        "Reset autovacuum settings to defaults."
    );
    assert!(
        table_storage(&mut client).iter().all(|t| t.2.is_none()),
        "every option reset"
    );

    let bad = pgq(&db, &["durability", "forever"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(
        bad.stderr.contains("volatile, balanced or durable"),
        "{bad:?}"
    );
    assert_eq!(pgq(&db, &["durability"]).code, 2);
}
