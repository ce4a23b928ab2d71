//! A real PgBouncer in front of the test server, started on a free port in a directory
//! of its own (as user `postgres` when run as root, which PgBouncer refuses to be),
//! stopped and removed on drop. Debian's `pgbouncer` package (1.18), installed on first
//! use when missing (`apt.rs`); `PGQUEUER_PGBOUNCER` names another binary.

use std::io::Read;
use std::path::PathBuf;
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

pub struct PgBouncer {
    pub port: u16,
    dir: PathBuf,
    child: Child,
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
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let binary = binary();
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
             admin_users = postgres\n",
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
