//! Connecting: errors name the target and the cause; the pool works and stays bounded.

use std::time::{Duration, Instant};

use crate::harness::{TestDb, server};

#[test]
fn a_refused_connection_names_host_port_and_cause() {
    let started = Instant::now();
    let err = pgqueuer::connect("postgres://nobody@127.0.0.1:1/nothing").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("nobody@127.0.0.1:1/nothing"), "{text}");
    assert!(text.contains("refused"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn an_unknown_database_is_named_with_the_server_message() {
    let dsn = server().dsn("pgqueuer_no_such_database");
    let text = pgqueuer::connect(&dsn).unwrap_err().to_string();
    assert!(text.contains("pgqueuer_no_such_database"), "{text}");
    assert!(text.contains("does not exist"), "{text}");
}

#[test]
fn an_unparsable_dsn_is_a_config_error() {
    let err = pgqueuer::connect("postgres://u@h/db?bogus_option=1").unwrap_err();
    assert!(
        matches!(err, pgqueuer::Error::ConnectionConfig(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("bogus_option"), "{err}");
}

#[test]
fn pooled_connections_cache_prepared_statements() {
    let db = TestDb::new();
    let pool = db.pool(2);
    let mut conn = pool.get().unwrap();
    for _ in 0..3 {
        let statement = conn.prepare_cached("SELECT 1::int").unwrap();
        let one: i32 = conn.query_one(&statement, &[]).unwrap().get(0);
        assert_eq!(one, 1);
    }
    // The simple protocol prepares nothing, so the count is the cache's alone.
    let prepared = conn
        .simple_query("SELECT count(*) FROM pg_prepared_statements")
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            pgqueuer::postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap();
    assert_eq!(prepared, "1", "three uses, one server-side statement");
    let mut client = db.client();
    pgqueuer::verify(&mut client).unwrap();
}

fn show(conn: &mut pgqueuer::Conn, setting: &str) -> (String, i32) {
    let row = conn
        .query_one(
            &format!("SELECT current_setting('{setting}'), pg_backend_pid()"),
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn a_connection_planning_with_indexes_is_closed_not_reused() {
    let db = TestDb::new();
    let pool = db.pool(1);
    let mut conn = pool.get().unwrap();
    let (_, tuned_pid) = show(&mut conn, "enable_seqscan");
    conn.plan_with_indexes().unwrap();
    conn.plan_with_indexes().unwrap();
    const SETTINGS: [&str; 4] = ["enable_seqscan", "enable_bitmapscan", "enable_sort", "jit"];
    for setting in SETTINGS {
        assert_eq!(show(&mut conn, setting).0, "off", "{setting}");
    }
    assert_eq!(show(&mut conn, "plan_cache_mode").0, "force_generic_plan");
    drop(conn);
    // The only connection the pool may hold: the next user gets a fresh session.
    let mut next = pool.get().unwrap();
    let pid = show(&mut next, "enable_seqscan").1;
    for setting in SETTINGS {
        assert_eq!(
            show(&mut next, setting).0,
            "on",
            "{setting} leaked to the next user of the pool"
        );
    }
    assert_eq!(show(&mut next, "plan_cache_mode").0, "auto");
    assert_ne!(pid, tuned_pid, "the tuned session was handed out again");
    // An untouched connection is reused as before.
    drop(next);
    assert_eq!(show(&mut pool.get().unwrap(), "enable_seqscan").1, pid);
}
