//! A real PgBouncer in front of the test server, started on a free port in a directory
//! of its own (as user `postgres` when run as root, which PgBouncer refuses to be),
//! stopped and removed on drop. Debian's `pgbouncer` package (1.18), installed on first
//! use when missing (`apt.rs`); `PGQUEUER_PGBOUNCER` names another binary.
//!
//! Protocol-level prepared statements in transaction mode came with PgBouncer 1.21, which
//! Debian 12 does not package: [`Release::Prepared`] runs PgBouncer 1.24.1 built from
//! Debian 13's source tarball (checked against its SHA-256) on first use, once per
//! machine, into the temporary directory (`PGQUEUER_PGBOUNCER_PREPARED` names another
//! binary of 1.21 or later).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// PgBouncer's pooling mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Session,
    Transaction,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Session => "session",
            Mode::Transaction => "transaction",
        }
    }
}

/// Which PgBouncer to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Debian 12's 1.18: no prepared statements in transaction mode.
    Debian,
    /// 1.24.1 with `max_prepared_statements = 200`: it keeps its clients' protocol-level
    /// prepared statements in transaction mode.
    Prepared,
}

pub struct PgBouncer {
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

/// The source of the PgBouncer built for [`Release::Prepared`], and its SHA-256 (as
/// Debian's `Sources` index gives it).
const SOURCE: &str =
    "https://deb.debian.org/debian/pool/main/p/pgbouncer/pgbouncer_1.24.1.orig.tar.gz";
const SOURCE_SHA256: &str = "da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0";

/// PgBouncer 1.24.1, built on first use (see the module's documentation).
fn prepared_binary() -> PathBuf {
    if let Ok(path) = std::env::var("PGQUEUER_PGBOUNCER_PREPARED") {
        return PathBuf::from(path);
    }
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let home = std::env::temp_dir().join("pgqueuer-pgbouncer-1.24.1");
    let binary = home.join("pgbouncer");
    let _one = BUILD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if binary.exists() {
        return binary;
    }
    let why = "the tests of Pooler::TransactionPrepared build PgBouncer 1.24.1 from source";
    super::apt::binary(&["/usr/include/event2/event.h"], "libevent-dev", why);
    super::apt::binary(&["/usr/bin/pkg-config"], "pkg-config", why);
    super::apt::binary(&["/usr/bin/make"], "make", why);
    super::apt::binary(&["/usr/bin/curl"], "curl", why);
    let work = home.with_extension(format!("build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("a directory to build PgBouncer in");
    eprintln!("pgqueuer tests: building PgBouncer 1.24.1 from {SOURCE} (once per machine)");
    let run = |what: &str, dir: &Path, command: &mut Command| {
        let out = command
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e} ({why})"));
        assert!(
            out.status.success(),
            "{what} failed ({why}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(
        "curl",
        &work,
        Command::new("curl").args(["-fsSL", "--retry", "3", "-o", "source.tar.gz", SOURCE]),
    );
    let sum = run(
        "sha256sum",
        &work,
        Command::new("sha256sum").arg("source.tar.gz"),
    );
    assert!(
        sum.starts_with(SOURCE_SHA256),
        "{SOURCE} is not the tarball Debian lists (sha256 {sum}, expected {SOURCE_SHA256})"
    );
    run(
        "tar",
        &work,
        Command::new("tar").args(["xzf", "source.tar.gz"]),
    );
    let source = work.join("pgbouncer-1.24.1");
    run(
        "configure",
        &source,
        Command::new("./configure").args([
            "--without-openssl",
            "--without-cares",
            "--without-pam",
            "--without-systemd",
        ]),
    );
    run("make", &source, Command::new("make").arg("-j2"));
    std::fs::create_dir_all(&home).expect("the PgBouncer directory");
    // Renamed into place whole, so that no other process runs a half-copied binary.
    std::fs::rename(source.join("pgbouncer"), &binary).expect("install the built PgBouncer");
    let _ = std::fs::remove_dir_all(&work);
    binary
}

fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("PGQUEUER_PGBOUNCER") {
        return PathBuf::from(path);
    }
    super::apt::binary(
        &[
            "/usr/sbin/pgbouncer",
            "/usr/bin/pgbouncer",
            "/usr/local/bin/pgbouncer",
        ],
        "pgbouncer",
        "the pooler tests run a real PgBouncer (PGQUEUER_PGBOUNCER names another binary)",
    )
}

/// A port nothing listens on now (for a server about to start).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl PgBouncer {
    /// PgBouncer in `mode` on a free port, pooling `default_pool_size` server connections
    /// per database to `upstream` (host, port), trusting user `postgres`.
    pub fn start(mode: Mode, upstream: (&str, u16), default_pool_size: u32) -> PgBouncer {
        PgBouncer::start_release(Release::Debian, mode, upstream, default_pool_size)
    }

    /// As [`PgBouncer::start`], running `release`.
    pub fn start_release(
        release: Release,
        mode: Mode,
        upstream: (&str, u16),
        default_pool_size: u32,
    ) -> PgBouncer {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let (binary, prepared) = match release {
            Release::Debian => (binary(), ""),
            Release::Prepared => (prepared_binary(), "max_prepared_statements = 200\n"),
        };
        let dir = std::env::temp_dir().join(format!(
            "pgqueuer-test-pgbouncer-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("pgbouncer directory");
        let port = free_port();
        let ini = format!(
            "[databases]\n\
             * = host={host} port={upstream_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/users.txt\n\
             pool_mode = {mode}\n\
             default_pool_size = {default_pool_size}\n\
             max_client_conn = 1000\n\
             ignore_startup_parameters = extra_float_digits,options,search_path\n\
             logfile = {dir}/pgbouncer.log\n\
             admin_users = postgres\n\
             server_tls_sslmode = disable\n\
             {prepared}",
            host = upstream.0,
            upstream_port = upstream.1,
            dir = dir.display(),
            mode = mode.as_str(),
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("write pgbouncer.ini");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("write users.txt");
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let mut command = Command::new(&binary);
        if as_root {
            let owned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status();
            assert!(
                matches!(owned, Ok(s) if s.success()),
                "cannot hand {} to user postgres",
                dir.display()
            );
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut bouncer = PgBouncer { port, dir, child };
        bouncer.wait_ready();
        eprintln!(
            "pgqueuer tests: PgBouncer ({}) on 127.0.0.1:{port}, pool size {default_pool_size}",
            mode.as_str()
        );
        bouncer
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("pgbouncer exited ({status}): {err}{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "pgbouncer did not listen on {} within 20 s: {}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A DSN for `dbname` through this PgBouncer.
    pub fn dsn(&self, dbname: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={dbname} sslmode=disable",
            self.port
        )
    }

    /// PgBouncer's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
