//! Runs the real Python PgQueuer 1.6.0 against a test database: its command line
//! (`python -m pgqueuer ...`) and the scripts in `tests/python/`.
//!
//! The interpreter is `PGQUEUER_PYTHON` when set; it must import `pgqueuer` 1.6.0 and
//! `asyncpg`. Otherwise the tests make their own environment on first use: a venv under
//! `target/tmp/` with [`PINS`] installed from PyPI, made once (under a file lock, so any
//! number of tests and test processes may ask at once) and reused by later runs. Only when
//! that cannot be done (no `python3`, no venv module, no PyPI) do the interop tests fail:
//! the first with what to install, the others with one line pointing at it. Each child
//! gets the test database in `PGDSN` and `PGQUEUER_DSN` (with `PGSSLMODE=disable`), none
//! of the caller's other `PG*` variables, and a deadline after which it is killed and the
//! test fails with whatever it printed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{TestDb, server};

/// The packages the interop tests need, pinned to versions known to work together.
pub const PINS: &str = "pgqueuer==1.6.0 asyncpg==0.32.0 pydantic==2.14.4 pydantic-settings==2.16.3 typer==0.29.2 \
     opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
     prometheus-client==0.21.1 mcp==1.30.0";

/// How long a Python child may run unless a test says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The checked interpreter, found (or made) once per test process.
///
/// # Panics
/// When there is none and none can be made: the first caller with the whole story, every
/// later one with a line that points at it.
pub fn interpreter() -> &'static Path {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    static REPORTED: AtomicBool = AtomicBool::new(false);
    match PYTHON.get_or_init(find_interpreter) {
        Ok(path) => path,
        Err(why) if !REPORTED.swap(true, Ordering::SeqCst) => panic!("{why}"),
        Err(_) => panic!(
            "no Python PgQueuer 1.6.0 for the interop tests (the reason is in the first \
             interop test's failure)"
        ),
    }
}

fn find_interpreter() -> Result<PathBuf, String> {
    match std::env::var_os("PGQUEUER_PYTHON") {
        Some(p) if !p.is_empty() => {
            let python = PathBuf::from(p);
            check_interpreter(&python).map_err(|why| {
                format!(
                    "PGQUEUER_PYTHON={} cannot run the interop tests: {why}\nUnset it to let \
                     the tests make their own environment, or install {PINS} into it.",
                    python.display()
                )
            })?;
            Ok(python)
        }
        _ => managed_environment(),
    }
}

/// Checks that `python` imports PgQueuer 1.6.0 and asyncpg.
fn check_interpreter(python: &Path) -> Result<(), String> {
    let probe = Command::new(python)
        .args([
            "-c",
            "import asyncpg, pgqueuer; print(pgqueuer.__version__, asyncpg.__version__)",
        ])
        .output()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let versions = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    if probe.status.success() && versions.starts_with("1.6.0 ") {
        Ok(())
    } else {
        Err(format!(
            "it does not provide pgqueuer 1.6.0 with asyncpg (printed {versions:?}; stderr: {})",
            String::from_utf8_lossy(&probe.stderr).trim()
        ))
    }
}

/// The tests' own venv under `target/tmp/`, made on first use. The marker file holds the
/// pins it was made with, so a change of [`PINS`] makes a new one.
fn managed_environment() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = root.join("pgqueuer-python");
    let python = dir.join("bin/python");
    let marker = dir.join("pins.txt");
    std::fs::create_dir_all(root).map_err(|e| format!("mkdir {}: {e}", root.display()))?;
    let lock_path = root.join("pgqueuer-python.lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    // Another test process may be making it right now: wait for it. (`File::lock` is
    // newer than the crate's rust-version, which binds the library and pgq; the tests run
    // on the current toolchain.)
    #[allow(clippy::incompatible_msrv)]
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == PINS)
        && check_interpreter(&python).is_ok()
    {
        return Ok(python);
    }
    eprintln!(
        "pgqueuer tests: making the Python environment for the interop tests in {} \
         ({PINS}, from PyPI); this happens once",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    let step = |what: &str, command: &mut Command, fix: &str| -> Result<(), String> {
        let out = command
            .output()
            .map_err(|e| format!("{what} could not run: {e}.\n{fix}"))?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "{what} failed:\n    {}\n{fix}",
            tail.join("\n    ")
        ))
    };
    step(
        "`python3 -m venv`",
        Command::new("python3").arg("-m").arg("venv").arg(&dir),
        "The interop tests need python3 with its venv module \
         (Debian: `apt-get install python3 python3-venv`), or PGQUEUER_PYTHON set to an \
         interpreter that has PgQueuer 1.6.0.",
    )?;
    let mut pip = Command::new(dir.join("bin/pip"));
    pip.args(["install", "--quiet", "--disable-pip-version-check"])
        .args(PINS.split(' '));
    step(
        "`pip install` from PyPI",
        &mut pip,
        "The interop tests install PgQueuer 1.6.0 from PyPI: check the network (or a \
         PIP_INDEX_URL mirror), or set PGQUEUER_PYTHON to an interpreter that has it.",
    )?;
    check_interpreter(&python).map_err(|why| format!("the new environment is unusable: {why}"))?;
    std::fs::write(&marker, PINS).map_err(|e| format!("write {}: {e}", marker.display()))?;
    Ok(python)
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
