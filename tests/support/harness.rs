//! The test harness: a PostgreSQL server to talk to, and a fresh database per test.
//!
//! The server is `PGQUEUER_TEST_DSN` when set (an admin DSN: a superuser, any database),
//! else 127.0.0.1:5432 as `postgres`. When nothing answers there and PostgreSQL's server
//! binaries are installed, a throwaway server is started in a temporary directory (as the
//! `postgres` user when run as root) and stopped when the test process exits. Otherwise
//! the tests fail with a message saying how to get a server. Nothing is ever skipped.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::postgres::types::FromSql;
use pgqueuer::postgres::{Client, Config, NoTls};

/// Where the test server is.
#[derive(Debug, Clone)]
pub struct Server {
    pub host: String,
    pub port: u16,
    pub user: String,
}

impl Server {
    pub fn config(&self, dbname: &str) -> Config {
        let mut c = Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(dbname)
            .connect_timeout(Duration::from_secs(10))
            .application_name("pgqueuer-tests");
        c
    }

    pub fn dsn(&self, dbname: &str) -> String {
        if self.host.starts_with('/') {
            format!(
                "host={} port={} user={} dbname={dbname}",
                self.host, self.port, self.user
            )
        } else {
            format!(
                "postgres://{}@{}:{}/{dbname}",
                self.user, self.host, self.port
            )
        }
    }

    pub fn admin(&self) -> Client {
        self.config("postgres")
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("cannot connect to the test server {self:?}: {e:?}"))
    }
}

/// The test server, found (or started) once per test process.
///
/// # Panics
/// When there is none: the first caller with what to do, every later one with a line
/// that points at it (so a missing server is reported once, not once per test).
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    static REPORTED: AtomicBool = AtomicBool::new(false);
    match SERVER.get_or_init(find_or_start_server) {
        Ok(server) => server,
        Err(why) if !REPORTED.swap(true, Ordering::SeqCst) => panic!("{why}"),
        Err(_) => panic!("no PostgreSQL server for the tests (see the one failure that says why)"),
    }
}

fn find_or_start_server() -> Result<Server, String> {
    if let Ok(dsn) = std::env::var("PGQUEUER_TEST_DSN") {
        let config: Config = dsn
            .parse()
            .map_err(|e| format!("PGQUEUER_TEST_DSN={dsn:?} does not parse: {e}"))?;
        let host = match config.get_hosts().first() {
            Some(pgqueuer::postgres::config::Host::Tcp(h)) => h.clone(),
            Some(pgqueuer::postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "127.0.0.1".into(),
        };
        let server = Server {
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            user: config.get_user().unwrap_or("postgres").to_owned(),
        };
        if let Err(e) = server.config("postgres").connect(NoTls) {
            return Err(format!(
                "PGQUEUER_TEST_DSN={dsn:?} is set but its server does not answer: {e:?}"
            ));
        }
        return Ok(server);
    }
    let local = Server {
        host: "127.0.0.1".into(),
        port: 5432,
        user: "postgres".into(),
    };
    if local.config("postgres").connect(NoTls).is_ok() {
        return Ok(local);
    }
    start_throwaway_server().map_err(|why| {
        format!(
            "no PostgreSQL server for the tests: nothing answers at 127.0.0.1:5432 as user \
             postgres, and a throwaway server could not be started ({why}).\n\
             Start one (e.g. `pg_ctlcluster 15 main start`, or `apt-get install postgresql`), \
             or point PGQUEUER_TEST_DSN at a superuser DSN."
        )
    })
}

/// The fallback server of the whole test process: a [`Throwaway`] that lives until the
/// process exits (its watchdog stops it then).
fn start_throwaway_server() -> Result<Server, String> {
    let throwaway = Throwaway::new(&[])?;
    let server = throwaway.server.clone();
    // Kept for the life of the process; the watchdog stops the server after it exits.
    std::mem::forget(throwaway);
    Ok(server)
}

/// A PostgreSQL server of a test's own: initdb into a temporary directory (as user
/// `postgres` when run as root), trust authentication unless told otherwise, a free
/// port on 127.0.0.1, fsync off. It can be stopped, started and restarted with the same
/// data directory and port (`pg_ctl`, fast shutdown: sessions are terminated). Dropping
/// it stops the server and removes the directory; a watchdog process does the same if
/// the test process dies first.
pub struct Throwaway {
    pub server: Server,
    dir: PathBuf,
    data: PathBuf,
    bindir: PathBuf,
    as_root: bool,
}

impl Throwaway {
    /// initdb and start. `hba_first` lines go at the top of `pg_hba.conf`, before the
    /// trust lines (e.g. `host all someone 127.0.0.1/32 scram-sha-256`).
    pub fn new(hba_first: &[&str]) -> Result<Throwaway, String> {
        Throwaway::with_conf(hba_first, &[])
    }

    /// As [`Throwaway::new`], with `conf` lines appended to `postgresql.conf` before the
    /// first start (e.g. `ssl = on`).
    pub fn with_conf(hba_first: &[&str], conf: &[&str]) -> Result<Throwaway, String> {
        Throwaway::initdb(hba_first, conf, true)
    }

    /// A data directory made by initdb, not started: for a standby, whose directory
    /// `pg_basebackup` fills instead (see [`Throwaway::standby_of`]).
    fn initdb(hba_first: &[&str], conf: &[&str], init: bool) -> Result<Throwaway, String> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let bindir = find_server_bindir().ok_or("PostgreSQL server binaries (initdb) not found")?;
        let dir = std::env::temp_dir().join(format!(
            "pgqueuer-test-server-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.starts_with(b"0\n"))
            .unwrap_or(false);
        if as_root {
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status();
            if !matches!(status, Ok(s) if s.success()) {
                return Err(
                    "running as root and cannot hand the data directory to user postgres".into(),
                );
            }
        }
        let port = free_port()?;
        let throwaway = Throwaway {
            server: Server {
                host: "127.0.0.1".into(),
                port,
                user: "postgres".into(),
            },
            data: dir.join("data"),
            dir,
            bindir,
            as_root,
        };
        if !init {
            throwaway.spawn_watchdog()?;
            return Ok(throwaway);
        }
        let data = throwaway.data_str()?;
        let out = throwaway
            .command(
                "initdb",
                &["-D", &data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            )
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if !conf.is_empty() {
            let path = throwaway.data.join("postgresql.conf");
            let mut text =
                std::fs::read_to_string(&path).map_err(|e| format!("read postgresql.conf: {e}"))?;
            text.push('\n');
            text.push_str(&conf.join("\n"));
            text.push('\n');
            std::fs::write(&path, text).map_err(|e| format!("write postgresql.conf: {e}"))?;
        }
        if !hba_first.is_empty() {
            let path = throwaway.data.join("pg_hba.conf");
            let old = std::fs::read_to_string(&path).map_err(|e| format!("read pg_hba: {e}"))?;
            let new = format!("{}\n{old}", hba_first.join("\n"));
            std::fs::write(&path, new).map_err(|e| format!("write pg_hba: {e}"))?;
        }
        throwaway.spawn_watchdog()?;
        throwaway.start()?;
        eprintln!(
            "pgqueuer tests: started a throwaway PostgreSQL on 127.0.0.1:{port} in {}",
            throwaway.dir.display()
        );
        Ok(throwaway)
    }

    fn data_str(&self) -> Result<String, String> {
        self.data
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| "non-UTF-8 temp dir".to_owned())
    }

    /// A server program run as the user owning the data directory.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let program = self.bindir.join(program);
        if self.as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program).args(args);
            c
        } else {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let data = self.data_str()?;
        let mut all = vec!["-D", &data, "-w", "-t", "60"];
        all.extend_from_slice(args);
        let out = self
            .command("pg_ctl", &all)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("pg_ctl {args:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Starts the server (same data directory and port) and waits until it accepts
    /// connections.
    pub fn start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off",
            self.server.port,
            self.dir.display()
        );
        let log = self.log_path()?;
        self.pg_ctl(&["-l", &log, "-o", &options, "start"])?;
        self.wait_ready()
    }

    /// Stops the server with a fast shutdown (open sessions are terminated) and waits.
    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "fast", "stop"])
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`: every process
    /// quits at once, nothing is checkpointed; the next start replays the WAL).
    pub fn crash(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "immediate", "stop"])
    }

    /// Stops and starts the server (fast shutdown) and waits until it accepts connections.
    pub fn restart(&self) -> Result<(), String> {
        // `-l` here too: a server writing to pg_ctl's stdout would hold our pipe open.
        let log = self.log_path()?;
        self.pg_ctl(&["-l", &log, "-m", "fast", "restart"])?;
        self.wait_ready()
    }

    fn log_path(&self) -> Result<String, String> {
        self.dir
            .join("server.log")
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| "non-UTF-8 temp dir".to_owned())
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.server.config("postgres").connect(NoTls) {
                Ok(_) => return Ok(()),
                // A server that answers with a refusal (a hostssl-only pg_hba.conf, say)
                // is up; one still starting says 57P03.
                Err(e)
                    if e.as_db_error().is_some_and(|d| {
                        d.code() != &pgqueuer::postgres::error::SqlState::CANNOT_CONNECT_NOW
                    }) =>
                {
                    return Ok(());
                }
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("throwaway server did not start: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// A process that outlives this one: once the test process is gone it stops the
    /// server at once and removes the directory.
    fn spawn_watchdog(&self) -> Result<(), String> {
        let data = self.data_str()?;
        let script = format!(
            "while [ -d /proc/{parent} ]; do sleep 1; done; \
             {pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
            parent = std::process::id(),
            pg_ctl = self.bindir.join("pg_ctl").display(),
            dir = self.dir.display(),
        );
        let mut c = if self.as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "/bin/sh", "-c", &script]);
            c
        } else {
            let mut c = Command::new("/bin/sh");
            c.args(["-c", &script]);
            c
        };
        // A process group of its own: whatever signals the test's group (`timeout`, a
        // terminal's ^C) must not take the watchdog with it.
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        c.spawn()
            .map_err(|e| format!("starting the watchdog: {e}"))?;
        Ok(())
    }

    /// A streaming standby of `primary` (which must allow replication connections, as
    /// initdb's trust lines do): `pg_basebackup -R` into a directory of its own, started
    /// on a port of its own.
    pub fn standby_of(primary: &Throwaway) -> Result<Throwaway, String> {
        let standby = Throwaway::initdb(&[], &[], false)?;
        let data = standby.data_str()?;
        let port = primary.server.port.to_string();
        let out = standby
            .command(
                "pg_basebackup",
                &[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-D",
                    &data,
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                ],
            )
            .output()
            .map_err(|e| format!("pg_basebackup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        standby.start()?;
        Ok(standby)
    }

    /// Promotes a standby to primary and waits until it accepts writes.
    pub fn promote(&self) -> Result<(), String> {
        self.pg_ctl(&["promote"])?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let writable = self
                .server
                .config("postgres")
                .connect(NoTls)
                .and_then(|mut c| c.query_one("SELECT NOT pg_is_in_recovery()", &[]))
                .map(|row| row.get::<_, bool>(0));
            match writable {
                Ok(true) => return Ok(()),
                _ if Instant::now() > deadline => {
                    return Err("the promoted standby never accepted writes".into());
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The DSN of `dbname` on this server.
    pub fn dsn(&self, dbname: &str) -> String {
        self.server.dsn(dbname)
    }

    /// A superuser connection to database `postgres`.
    pub fn admin(&self) -> Client {
        self.server.admin()
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        if let Err(e) = self.pg_ctl(&["-m", "immediate", "stop"]) {
            // Already stopped by the test, or never started.
            let _ = e;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_server_bindir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn unique_name(kind: &str) -> String {
    format!(
        "pgqtest_{}_{kind}{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Drops databases left by earlier test processes that are no longer running.
fn drop_leftovers(admin: &mut Client) {
    let rows = admin
        .query(
            "SELECT datname::text FROM pg_database WHERE datname LIKE 'pgqtest\\_%'",
            &[],
        )
        .expect("list databases");
    for row in rows {
        let name: String = row.get(0);
        let pid: Option<u32> = name.split('_').nth(1).and_then(|p| p.parse().ok());
        let alive = pid
            .is_some_and(|p| p == std::process::id() || Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

/// The name of a database with the default-named schema installed by `upgrade()`, made
/// once per test process and used as the template of [`TestDb::new`].
fn template() -> &'static str {
    static TEMPLATE: OnceLock<String> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let server = server();
        let mut admin = server.admin();
        drop_leftovers(&mut admin);
        let name = unique_name("template");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create template");
        let mut client = server
            .config(&name)
            .connect(NoTls)
            .expect("connect to template");
        pgqueuer::upgrade(&mut client).expect("upgrade() on an empty database");
        drop(client);
        name
    })
}

/// Log records of level WARN and above from this crate, as `thread: message`, for tests
/// that check what a worker reported (bounded: the oldest go first).
static CAPTURED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The test logger: `env_logger` (RUST_LOG, output captured per test) plus a record of
/// this crate's warnings (see [`captured`]). Installed once; later calls do nothing.
pub fn init_logging() {
    struct Capture(env_logger::Logger);
    impl log::Log for Capture {
        fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
            metadata.level() <= log::Level::Warn || self.0.enabled(metadata)
        }
        fn log(&self, record: &log::Record<'_>) {
            if record.level() <= log::Level::Warn && record.target().starts_with("pgqueuer") {
                let line = format!(
                    "{}: {}",
                    std::thread::current().name().unwrap_or("?"),
                    record.args()
                );
                let mut lines = CAPTURED
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if lines.len() >= 20_000 {
                    lines.drain(..10_000);
                }
                lines.push(line);
            }
            if self.0.matches(record) {
                self.0.log(record);
            }
        }
        fn flush(&self) {
            self.0.flush();
        }
    }
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let inner = env_logger::Builder::from_default_env()
            .is_test(true)
            .build();
        let level = inner.filter().max(log::LevelFilter::Warn);
        if log::set_boxed_logger(Box::new(Capture(inner))).is_ok() {
            log::set_max_level(level);
        }
    });
}

/// Captured warnings (see [`init_logging`]) that contain `needle`.
pub fn captured(needle: &str) -> Vec<String> {
    CAPTURED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|l| l.contains(needle))
        .cloned()
        .collect()
}

/// A database of its own for one test, dropped when the value is dropped.
pub struct TestDb {
    pub name: String,
}

impl TestDb {
    /// A fresh database with the default schema installed.
    pub fn new() -> TestDb {
        Self::create(template())
    }

    /// A fresh, empty database.
    pub fn empty() -> TestDb {
        Self::create("template0")
    }

    /// A fresh, empty database in the `SQL_ASCII` encoding, whose text columns hold
    /// whatever bytes were written (not always UTF-8): what another program's rows can
    /// look like.
    pub fn sql_ascii() -> TestDb {
        Self::create("template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'")
    }

    fn create(template: &str) -> TestDb {
        init_logging();
        let server = server();
        let mut admin = server.admin();
        let name = unique_name("db");
        let mut tries = 0;
        loop {
            match admin.batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}")) {
                Ok(()) => break,
                // "source database is being accessed by other users": another test's
                // CREATE DATABASE from the same template holds it for a moment.
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("CREATE DATABASE {name}: {e:?}"),
            }
        }
        TestDb { name }
    }

    pub fn config(&self) -> Config {
        server().config(&self.name)
    }

    pub fn dsn(&self) -> String {
        server().dsn(&self.name)
    }

    /// The DSN of an application role, `pgq_app_writer` (made once per server), that may
    /// read and write this database's tables in `public` but owns nothing and is no
    /// superuser: what a worker runs as when another role installed the schema.
    pub fn app_role_dsn(&self) -> String {
        self.client()
            .batch_execute(
                "DO $$ BEGIN
                     IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgq_app_writer') THEN
                         CREATE ROLE pgq_app_writer LOGIN;
                     END IF;
                 END $$;
                 GRANT USAGE ON SCHEMA public TO pgq_app_writer;
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO pgq_app_writer;
                 GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO pgq_app_writer;",
            )
            .expect("make the application role");
        let s = server();
        format!(
            "host={} port={} user=pgq_app_writer dbname={}",
            s.host, s.port, self.name
        )
    }

    pub fn client(&self) -> Client {
        self.config()
            .connect(NoTls)
            .expect("connect to the test database")
    }

    /// A pool of at most `max_size` connections.
    pub fn pool(&self, max_size: u32) -> pgqueuer::Pool {
        let options = pgqueuer::ConnectOptions {
            max_size,
            min_idle: 0,
            ..Default::default()
        };
        pgqueuer::connect_with(&self.dsn(), &options).expect("connect_with")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let mut admin = server().admin();
        if let Err(e) = admin.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )) {
            eprintln!("could not drop test database {}: {e:?}", self.name);
        }
    }
}

/// A program of this package (`--example worker`, `--bin pgq`), built once per test
/// process with the cargo and profile running these tests, and its executable. The
/// `pgq` binary needs the `cli` feature, which `cargo test` does not turn on: building
/// it here lets a plain `cargo test` test it.
pub fn program(kind: &str, name: &str, features: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{kind} {name}");
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, path)) = built.iter().find(|(k, _)| *k == key) {
        return path.clone();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let exe = std::env::current_exe().expect("current_exe");
    // The test binary lives in target/<profile>/deps.
    let release = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .is_some_and(|p| p == "release");
    let mut build = Command::new(&cargo);
    build
        .args(["build", &format!("--{kind}"), name, "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .arg("--message-format=json-render-diagnostics")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    if !features.is_empty() {
        build.args(["--features", &features.join(",")]);
    }
    if release {
        build.arg("--release");
    }
    let output = build
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo} to build {kind} {name}: {e}"));
    assert!(
        output.status.success(),
        "`cargo build --{kind} {name}` failed (its errors are above)"
    );
    let path = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no executable for {kind} {name}"));
    built.push((key, path.clone()));
    path
}

/// The `pgq` program (built with the `cli` feature).
pub fn pgq_binary() -> PathBuf {
    program("bin", "pgq", &["cli"])
}

/// The contents of a file under tests/fixtures.
pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The first column of the first row of `sql` (a count, a setting, a status...).
pub fn scalar<T: for<'a> FromSql<'a>>(client: &mut Client, sql: &str) -> T {
    client.query_one(sql, &[]).unwrap().get(0)
}

/// How many sessions of this client's database wait for a lock (a row's, a transaction's).
pub fn sessions_waiting_on_locks(client: &mut Client) -> i64 {
    scalar(
        client,
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
}

/// How many statement functions (`pgqueuer_rs_<hash>`, no prefix) the database holds.
pub fn statement_functions(client: &mut Client) -> i64 {
    scalar(
        client,
        "SELECT count(*) FROM pg_proc WHERE proname ~ '^pgqueuer_rs_[0-9a-f]{16}$'",
    )
}

/// Held by tests that measure a rate against the clock and by tests that load both of the
/// machine's cores on purpose, so that the two kinds never run at once (the harness runs
/// two tests at a time on two cores): a rate measured beside a deliberate overload says
/// more about the overload than about the rate.
pub fn timing_lock() -> std::sync::MutexGuard<'static, ()> {
    static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TIMING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Polls `f` every 20 ms until it is true, failing the test after `limit`; returns how
/// long it took.
#[track_caller]
pub fn eventually(limit: Duration, what: &str, f: impl FnMut() -> bool) -> Duration {
    eventually_explained(limit, what, f, String::new)
}

/// [`eventually`], whose failure message adds what `explain` says of the state then (what
/// is left, and where), for waits whose timeout alone would not tell why.
#[track_caller]
pub fn eventually_explained(
    limit: Duration,
    what: &str,
    mut f: impl FnMut() -> bool,
    mut explain: impl FnMut() -> String,
) -> Duration {
    let started = Instant::now();
    while !f() {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}{}",
            explain()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// The statuses of a job's log rows, oldest first.
pub fn log_of(client: &mut Client, id: i64) -> Vec<String> {
    client
        .query(
            "SELECT status::text FROM pgqueuer_log WHERE job_id = $1 ORDER BY id",
            &[&id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The backends of database `db` that listen, by pid: their `application_name` ends in
/// `-listen` (the LISTEN connections of workers, `wait_for` and the dashboard) and they
/// have run a statement (a listener's first is its LISTEN, to its end; later ones, its
/// health checks). `query` alone is no test: after a health check it no longer says
/// LISTEN.
pub fn listener_pids(client: &mut Client, db: &str) -> Vec<i32> {
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 \
             AND application_name LIKE '%-listen' AND query <> '' \
             AND NOT (state = 'active' AND query LIKE 'LISTEN%') ORDER BY pid",
            &[&db],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Waits (up to `limit`) until database `db` has `n` listeners (see [`listener_pids`])
/// none of which is in `gone` (backends terminated, perhaps not yet away); returns them.
#[track_caller]
pub fn wait_listeners(
    client: &mut Client,
    db: &str,
    n: usize,
    gone: &[i32],
    limit: Duration,
) -> Vec<i32> {
    let mut pids = Vec::new();
    eventually(limit, &format!("{n} listeners on {db}"), || {
        pids = listener_pids(client, db);
        pids.retain(|p| !gone.contains(p));
        pids.len() == n
    });
    pids
}
