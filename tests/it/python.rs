//! Runs the real Python PgQueuer 1.6.0 against a test database: its command line
//! (`python -m pgqueuer ...`) and the scripts in `tests/python/`.
//!
//! The interpreter is `PGQUEUER_PYTHON`, else `<repo>/.venv/bin/python`. It must import
//! `pgqueuer` 1.6.0 and `asyncpg`. Without it the interop tests fail and say how to make
//! the venv; they never skip. Each child gets the test database in `PGDSN` and
//! `PGQUEUER_DSN` (with `PGSSLMODE=disable`), none of the caller's other `PG*`
//! variables, and a deadline after which it is killed and the test fails with whatever
//! it printed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{TestDb, server};

/// The packages the interop tests need, pinned to versions known to work together.
pub const PINS: &str =
    "pgqueuer==1.6.0 asyncpg==0.32.0 pydantic==2.14.4 pydantic-settings==2.16.3 typer==0.29.2";

/// How long a Python child may run unless a test says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn how_to_install() -> String {
    format!(
        "The interop tests run the real Python PgQueuer 1.6.0. Create its venv in the \
         repository root:\n\n    cd {repo} && python3 -m venv .venv && .venv/bin/pip install -q {PINS}\n\n\
         or set PGQUEUER_PYTHON to a Python interpreter that has those packages \
         (.ci/run does the former).",
        repo = repo().display()
    )
}

/// The checked interpreter (found and version-checked once per test process).
pub fn interpreter() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(find_interpreter)
}

fn find_interpreter() -> PathBuf {
    let (python, source) = match std::env::var_os("PGQUEUER_PYTHON") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), "PGQUEUER_PYTHON"),
        _ => (repo().join(".venv/bin/python"), "the repository's .venv"),
    };
    if !python.exists() {
        panic!(
            "no Python interpreter at {} (from {source}).\n{}",
            python.display(),
            how_to_install()
        );
    }
    let probe = Command::new(&python)
        .args([
            "-c",
            "import asyncpg, pgqueuer; print(pgqueuer.__version__, asyncpg.__version__)",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}\n{}", python.display(), how_to_install()));
    let versions = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    if !probe.status.success() || !versions.starts_with("1.6.0 ") {
        panic!(
            "{} (from {source}) does not provide pgqueuer 1.6.0 with asyncpg (got {versions:?}; \
             stderr: {}).\n{}",
            python.display(),
            String::from_utf8_lossy(&probe.stderr).trim(),
            how_to_install()
        );
    }
    python
}

/// The test database as a URL asyncpg understands (it does not read `key=value` DSNs).
pub fn python_dsn(db: &TestDb) -> String {
    let s = server();
    if s.host.starts_with('/') {
        format!(
            "postgresql://{}@/{}?host={}&port={}",
            s.user, db.name, s.host, s.port
        )
    } else {
        format!("postgresql://{}@{}:{}/{}", s.user, s.host, s.port, db.name)
    }
}

fn command(db: &TestDb, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(interpreter());
    c.args(args).current_dir(repo().join("tests/python"));
    // Only the test database: no PGQUEUER_PREFIX, PGHOST or PGOPTIONS of the caller's.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            c.env_remove(key);
        }
    }
    let dsn = python_dsn(db);
    c.env("PGDSN", &dsn)
        .env("PGQUEUER_DSN", &dsn)
        .env("PGSSLMODE", "disable")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// What a finished child printed.
#[derive(Debug)]
pub struct Output {
    pub what: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    /// Fails the test, showing everything the child printed, unless it exited 0.
    #[track_caller]
    pub fn success(self) -> Output {
        if !self.status.success() {
            panic!("{} failed: {}", self.what, self.describe());
        }
        self
    }

    /// The JSON document the child printed on stdout.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "{} did not print one JSON document ({e}): {}",
                self.what,
                self.describe()
            )
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// A running Python child. Dropping it kills the child (a failing test leaves nothing
/// behind).
pub struct Running {
    what: String,
    child: Option<Child>,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    started: Instant,
    deadline: Instant,
}

fn reader(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

impl Running {
    fn start(
        db: &TestDb,
        what: String,
        args: &[&str],
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Running {
        let mut child = command(db, args, env)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stdout = child.stdout.take().map(reader);
        let stderr = child.stderr.take().map(reader);
        Running {
            what,
            child: Some(child),
            stdout,
            stderr,
            started: Instant::now(),
            deadline: Instant::now() + timeout,
        }
    }

    /// True once the child has exited.
    pub fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Waits for the child to exit; kills it and fails the test at its deadline.
    #[track_caller]
    pub fn finish(mut self) -> Output {
        let mut child = self.child.take().expect("finished twice");
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= self.deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("waiting for {}: {e}", self.what),
            }
        };
        let take = |h: Option<JoinHandle<String>>| h.map(|h| h.join().unwrap_or_default());
        let stdout = take(self.stdout.take()).unwrap_or_default();
        let stderr = take(self.stderr.take()).unwrap_or_default();
        match status {
            Some(status) => {
                let elapsed = self.started.elapsed();
                eprintln!("python: {} ({status}) took {elapsed:?}", self.what);
                Output {
                    what: self.what.clone(),
                    status,
                    stdout,
                    stderr,
                    elapsed,
                }
            }
            None => panic!(
                "{} did not finish in time and was killed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
                self.what
            ),
        }
    }
}

impl Running {
    /// Kills the child at once (SIGKILL: no cleanup, as in a crash) and reaps it.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("python: killed {}", self.what);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `python -m pgqueuer <args>` (PgQueuer's `pgq`) to completion.
#[track_caller]
pub fn pgq(db: &TestDb, args: &[&str]) -> Output {
    pgq_with_env(db, &[], args)
}

/// Runs `python -m pgqueuer <args>` with extra environment variables (`PGQUEUER_PREFIX`...).
#[track_caller]
pub fn pgq_with_env(db: &TestDb, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut full = vec!["-m", "pgqueuer"];
    full.extend_from_slice(args);
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    let what = format!("{}pgq {}", shown.concat(), args.join(" "));
    Running::start(db, what, &full, env, DEFAULT_TIMEOUT).finish()
}

/// Starts `tests/python/<name>` with `spec` as its JSON argument.
pub fn spawn_script(db: &TestDb, name: &str, spec: &Value, timeout: Duration) -> Running {
    let path = repo().join("tests/python").join(name);
    assert!(path.exists(), "no script {}", path.display());
    let path = path.to_string_lossy().into_owned();
    let spec = spec.to_string();
    Running::start(db, format!("{name} {spec}"), &[&path, &spec], &[], timeout)
}

/// Runs `tests/python/<name>` with `spec`, requires exit 0 and returns its JSON answer.
#[track_caller]
pub fn script(db: &TestDb, name: &str, spec: &Value) -> Value {
    spawn_script(db, name, spec, DEFAULT_TIMEOUT)
        .finish()
        .success()
        .json()
}
