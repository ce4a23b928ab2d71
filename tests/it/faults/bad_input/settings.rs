//! Settings that would make bad SQL.

use pgqueuer::{Queue, Settings, Worker};

use super::Tally;
use crate::harness::TestDb;

/// A prefix, schema, table name or channel that is not a valid name is rejected by the
/// worker and by the queue before any SQL runs, and so is SQL smuggled in through
/// `PGQUEUER_QUEUE_TABLE`.
#[test]
fn bad_settings_are_rejected_before_any_sql() {
    let mut tally = Tally::default();
    let db = TestDb::new();
    let pool = db.pool(6);
    let bad_settings = [
        (Settings::with_prefix("bad;prefix"), "prefix"),
        (Settings::default().schema("no such schema"), "schema"),
        (
            Settings {
                queue_table: "q".repeat(60),
                ..Settings::default()
            },
            "queue_table",
        ),
        (
            Settings {
                channel: String::new(),
                ..Settings::default()
            },
            "channel",
        ),
    ];
    for (settings, name) in bad_settings {
        let built = Worker::builder(pool.clone())
            .threads(1)
            .settings(&settings)
            .entrypoint("a", |_job, _ctx| Ok(()))
            .build()
            .map(drop);
        tally.expect_err(
            &format!("worker with a bad {name}"),
            built,
            &[&format!("invalid setting {name}")],
        );
        tally.expect_err(
            &format!("queue with a bad {name}"),
            Queue::with_settings(pool.clone(), &settings).map(drop),
            &[&format!("invalid setting {name}")],
        );
    }
    let from_env = Settings::from_lookup(|k| {
        (k == "PGQUEUER_QUEUE_TABLE").then(|| "jobs; DROP TABLE x".to_owned())
    });
    tally.expect_err(
        "PGQUEUER_QUEUE_TABLE with SQL in it",
        from_env.map(drop),
        &["invalid setting queue_table"],
    );
    // A reserved word is refused by name, `pgq upgrade` included, and the schema is
    // left as it was; the list covers every reserved word of the server at hand.
    let mut client = db.client();
    let reserved: Vec<String> = client
        .query(
            "SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(reserved.len() >= 100);
    for word in &reserved {
        let settings = Settings {
            queue_table: word.clone(),
            ..Settings::default()
        };
        let e = Queue::with_settings(pool.clone(), &settings)
            .map(drop)
            .expect_err(word);
        assert!(
            e.to_string().contains("reserved SQL keyword"),
            "{word}: {e}"
        );
    }
    let tables = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let before = tables(&mut client);
    let out = std::process::Command::new(crate::harness::pgq_binary())
        .args(["upgrade"])
        .env("PGQUEUER_DSN", db.dsn())
        .env("PGQUEUER_QUEUE_TABLE", "order")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("reserved SQL keyword") && !stderr.contains("syntax error"),
        "{stderr}"
    );
    assert_eq!(tables(&mut client), before, "nothing was created");
    tally.checks += 1;
    tally.finish("bad settings");
}
