//! Authentication failures, on a server of the test's own.

use std::process::Command;

use super::Tally;
use crate::faults::process::worker_binary;
use crate::harness::Throwaway;

/// On a server that asks one role for a password: a wrong password (SQLSTATE 28P01),
/// an unknown role and an unknown database are errors naming the target and the
/// server's reason, and the worker process reports the same and exits with a failure.
#[test]
fn wrong_password_unknown_role_and_unknown_database_are_named() {
    let mut tally = Tally::default();
    let connect = |dsn: &str| pgqueuer::connect(dsn).map(drop);
    let server = Throwaway::new(&["host all pgq_pw 127.0.0.1/32 scram-sha-256"])
        .unwrap_or_else(|e| panic!("throwaway server: {e}"));
    server
        .admin()
        .batch_execute("CREATE ROLE pgq_pw LOGIN PASSWORD 'right'")
        .unwrap();
    let port = server.server.port;
    connect(&format!(
        "postgres://pgq_pw:right@127.0.0.1:{port}/postgres"
    ))
    .expect("the right password");
    let wrong = pgqueuer::connect(&format!(
        "postgres://pgq_pw:wrong@127.0.0.1:{port}/postgres"
    ))
    .unwrap_err();
    assert_eq!(
        wrong
            .sqlstate()
            .map(pgqueuer::postgres::error::SqlState::code),
        Some("28P01"),
        "{wrong}"
    );
    tally.expect_err(
        "wrong password",
        Err(wrong),
        &[
            &format!("pgq_pw@127.0.0.1:{port}/postgres"),
            "password authentication failed",
        ],
    );
    tally.expect_err(
        "unknown role",
        connect(&format!("postgres://nobody_here@127.0.0.1:{port}/postgres")),
        &["role \"nobody_here\" does not exist"],
    );
    tally.expect_err(
        "unknown database",
        connect(&server.dsn("no_such_db")),
        &["database \"no_such_db\" does not exist"],
    );
    // The worker process reports the same, and exits with a failure status.
    let out = Command::new(worker_binary())
        .args([
            "--dsn",
            &format!("postgres://pgq_pw:wrong@127.0.0.1:{port}/postgres"),
            "--quiet",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("password authentication failed for user \"pgq_pw\""),
        "{stderr}"
    );
    drop(server);
    tally.finish("authentication");
}
