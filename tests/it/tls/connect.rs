//! Connecting over TLS: every mode, every connection the crate opens, and each failure
//! named with what to change.

use std::time::Duration;

use pgqueuer::{ConnectOptions, NewJob, Queue, Worker};

use super::{CERT_USER, tls_server};
use crate::harness::{Throwaway, eventually, pgq_binary};
use crate::worker::Gate;

fn pool(dsn: &str) -> pgqueuer::Result<pgqueuer::Pool> {
    pgqueuer::connect_with(
        dsn,
        &ConnectOptions {
            max_size: 6,
            min_idle: 0,
            ..ConnectOptions::default()
        },
    )
}

fn encrypted(pool: &pgqueuer::Pool) -> bool {
    let mut conn = pool.get().unwrap();
    pgqueuer::ops::connection_tls(&mut **conn)
        .unwrap()
        .encrypted
}

/// A server that accepts only TLS refuses `sslmode=disable` with an error that says so
/// and what to set; `prefer` (the default) encrypts there.
#[test]
fn plaintext_is_refused_with_what_to_change() {
    let tls = tls_server();
    let e = pool(&tls.dsn("postgres", "sslmode=disable")).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("accepts only encrypted connections") && text.contains("sslmode=require"),
        "{text}"
    );
    for extra in ["sslmode=prefer", ""] {
        assert!(
            encrypted(&pool(&tls.dsn("postgres", extra)).unwrap()),
            "{extra:?}"
        );
    }
}

/// `require`, `verify-ca` and `verify-full` connect, and every connection a worker and
/// `wait_for` open is encrypted: the pool's, the worker's LISTEN connection and
/// `wait_for`'s, as `pg_stat_ssl` shows them.
#[test]
fn every_connection_the_crate_opens_is_encrypted() {
    let tls = tls_server();
    let ca = tls.certs.ca().display().to_string();
    for extra in [
        "sslmode=require".to_owned(),
        format!("sslmode=verify-ca sslrootcert={ca}"),
        format!("sslmode=verify-full sslrootcert={ca}"),
        format!("sslmode=require sslrootcert={ca}"),
    ] {
        assert!(
            encrypted(&pool(&tls.dsn("postgres", &extra)).unwrap()),
            "{extra}"
        );
    }
    let pool = pool(&tls.verified_dsn()).unwrap();
    let queue = Queue::new(pool.clone());
    let gate = Gate::new();
    let worker = Worker::builder(pool.clone())
        .threads(2)
        .entrypoint("tls_gated", gate.handler())
        .build()
        .unwrap()
        .start()
        .unwrap();
    let id = queue.enqueue(NewJob::new("tls_gated", Vec::new())).unwrap();
    gate.wait_started(1);
    let waiter = {
        let queue = queue.clone();
        std::thread::spawn(move || queue.wait_for(&[id], Duration::from_secs(30)))
    };
    let mut conn = pool.get().unwrap();
    // The worker's listener and wait_for's, both LISTENing over TLS.
    eventually(Duration::from_secs(20), "two LISTEN connections", || {
        conn.query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name LIKE '%-listen' AND s.ssl",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
            >= 2
    });
    let (all, plain): (i64, i64) = {
        let row = conn
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE NOT s.ssl) FROM pg_stat_activity a \
                 JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.backend_type = 'client backend' AND a.datname = 'postgres'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert!(
        all >= 4,
        "the pool, the worker and wait_for: {all} connections"
    );
    assert_eq!(plain, 0, "a connection in plaintext");
    drop(conn);
    gate.let_through(1);
    let statuses = waiter.join().unwrap().unwrap();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    worker.join().unwrap();
}

/// `verify-full` refuses a certificate issued for other names, naming what it holds;
/// `verify-ca` accepts the same server (it checks the chain alone).
#[test]
fn verify_full_names_a_certificate_of_other_names() {
    let tls = tls_server();
    let ca = tls.certs.ca().display().to_string();
    let port = tls.server.server.port;
    let dsn = |mode: &str| {
        format!(
            "host=db.wrong.test hostaddr=127.0.0.1 port={port} user=postgres dbname=postgres \
             sslmode={mode} sslrootcert={ca}"
        )
    };
    let text = pool(&dsn("verify-full")).unwrap_err().to_string();
    assert!(
        text.contains("not valid for db.wrong.test") && text.contains("localhost"),
        "{text}"
    );
    assert!(encrypted(&pool(&dsn("verify-ca")).unwrap()));
}

/// A root certificate that did not sign the server's fails verification, naming the
/// root used.
#[test]
fn a_wrong_root_certificate_fails_verification() {
    let tls = tls_server();
    let other = tls.certs.other_ca().display().to_string();
    for mode in ["verify-ca", "verify-full", "require"] {
        let text = pool(&tls.dsn("postgres", &format!("sslmode={mode} sslrootcert={other}")))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("does not verify against") && text.contains(&other),
            "{mode}: {text}"
        );
    }
}

/// `cert` authentication: the client certificate logs in as its user; without it the
/// server refuses; a key others can read is refused before any connection.
#[test]
fn a_client_certificate_authenticates() {
    let tls = tls_server();
    let certs = &tls.certs;
    let with_cert = format!(
        "sslmode=verify-full sslrootcert={} sslcert={} sslkey={}",
        certs.ca().display(),
        certs.client_cert().display(),
        certs.client_key().display()
    );
    let pool_ok = pool(&tls.dsn(CERT_USER, &with_cert)).unwrap();
    let user: String = pool_ok
        .get()
        .unwrap()
        .query_one("SELECT current_user::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(user, CERT_USER);
    let without = format!("sslmode=verify-full sslrootcert={}", certs.ca().display());
    let text = pool(&tls.dsn(CERT_USER, &without)).unwrap_err().to_string();
    assert!(text.contains("certificate"), "{text}");
    // A copy of the key that others may read.
    let loose = certs.dir.join("loose.key");
    std::fs::copy(certs.client_key(), &loose).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let loose_dsn = with_cert.replace(
        &certs.client_key().display().to_string(),
        &loose.display().to_string(),
    );
    let text = pool(&tls.dsn(CERT_USER, &loose_dsn))
        .unwrap_err()
        .to_string();
    assert!(text.contains("chmod 0600"), "{text}");
}

/// The `PGSSL*` variables alone, with no DSN at all (`PG*` for the rest), give `pgq
/// verify` a verified, certificate-authenticated connection, and it says it is encrypted.
#[test]
fn the_pgssl_variables_alone_do_the_same() {
    let tls = tls_server();
    let certs = &tls.certs;
    let out = std::process::Command::new(pgq_binary())
        .arg("verify")
        .env_remove("PGQUEUER_DSN")
        .env_remove("PGDSN")
        .env_remove("DATABASE_URL")
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", tls.server.server.port.to_string())
        .env("PGUSER", CERT_USER)
        .env("PGDATABASE", "postgres")
        .env("PGSSLMODE", "verify-full")
        .env("PGSSLROOTCERT", certs.ca())
        .env("PGSSLCERT", certs.client_cert())
        .env("PGSSLKEY", certs.client_key())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("encrypted (TLS") && stdout.contains("sslmode=verify-full"),
        "{stdout}"
    );
}

/// A server without TLS: `require` fails saying the server does not offer it, and
/// `prefer` connects in plaintext (and says so).
#[test]
fn a_server_without_tls_is_named_when_tls_is_required() {
    let plain = Throwaway::new(&[]).expect("a throwaway server without TLS");
    let dsn = |mode: &str| {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode={mode}",
            plain.server.port
        )
    };
    let text = pool(&dsn("require")).unwrap_err().to_string();
    assert!(text.contains("does not offer TLS"), "{text}");
    assert!(!encrypted(&pool(&dsn("prefer")).unwrap()));
}
