//! Worker processes (`examples/worker`): spawning, watching, stopping, and reading
//! what they report.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `examples/worker` binary.
pub fn worker_binary() -> PathBuf {
    crate::harness::program("example", "worker", &[])
}

/// One `examples/worker` process. Its stdout is read for the worker id, its stderr kept
/// for checks. Dropping it kills it (SIGKILL) if it still runs.
pub struct Proc {
    child: Child,
    pub label: String,
    worker_id: Arc<Mutex<Option<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    pub fn spawn(label: &str, dsn: &str, args: &[String]) -> Proc {
        Proc::spawn_env(label, dsn, args, &[])
    }

    /// As [`Proc::spawn`], with these variables set too (`PGQUEUER_POOLER`, say).
    pub fn spawn_env(label: &str, dsn: &str, args: &[String], env: &[(&str, &str)]) -> Proc {
        let mut child = Command::new(worker_binary())
            .arg("--dsn")
            .arg(dsn)
            .args(args)
            .env_remove("PGQUEUER_POOLER")
            .env_remove("PGQUEUER_LISTEN_DSN")
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", worker_binary().display()));
        let worker_id = Arc::new(Mutex::new(None));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().expect("piped stdout");
        let id = worker_id.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // "worker <uuid> running [...] with N threads"
                if let Some(rest) = line.strip_prefix("worker ")
                    && let Some(uuid) = rest.split_whitespace().next()
                {
                    *id.lock().unwrap() = Some(uuid.to_owned());
                }
            }
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let text = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                text.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Proc {
            child,
            label: label.to_owned(),
            worker_id,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The worker id once the process has printed it.
    pub fn worker_id_now(&self) -> Option<String> {
        self.worker_id.lock().unwrap().clone()
    }

    /// Waits until the worker is running (it printed its id).
    pub fn wait_running(&mut self, within: Duration) -> String {
        let started = Instant::now();
        loop {
            if let Some(id) = self.worker_id_now() {
                return id;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "worker {} exited ({status}) before running: {}",
                    self.label,
                    self.stderr()
                );
            }
            assert!(
                started.elapsed() < within,
                "worker {} did not start within {within:?}: {}",
                self.label,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (the worker's clean shutdown), then waits up to 20 s.
    pub fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if started.elapsed() > Duration::from_secs(20) {
                self.kill9();
                panic!(
                    "worker {} did not stop within 20 s of SIGTERM: {}",
                    self.label,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process's resident set size in KiB (`VmRSS` of /proc/<pid>/status).
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib_of(self.pid())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.running() {
            self.kill9();
        }
    }
}

/// What a worker process reported on stderr, by kind: the first words of each line
/// (after env_logger's `[time LEVEL target]`), up to a colon or parenthesis, counted.
pub fn digest(stderr: &str) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for line in stderr.lines() {
        let text = match line.split_once("] ") {
            Some((_, rest)) if line.starts_with('[') => rest,
            _ => line,
        };
        let head = text.split([':', '(']).next().unwrap_or(text);
        let kind: Vec<&str> = head
            .split_whitespace()
            .filter(|w| !w.chars().any(|c| c.is_ascii_digit()))
            .take(6)
            .collect();
        *kinds.entry(kind.join(" ")).or_insert(0) += 1;
    }
    kinds
}

/// `--entrypoint name:limit:millis` for each entry of a plan, then `rest`.
pub fn worker_args(plan: &[(&str, u32, u64, usize)], rest: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    for (ep, limit, millis, _) in plan {
        args.push("--entrypoint".to_owned());
        args.push(format!("{ep}:{limit}:{millis}"));
    }
    args.extend(rest.iter().map(|s| (*s).to_owned()));
    args
}

/// The resident set size in KiB of process `pid` (`VmRSS` of /proc/<pid>/status).
pub fn rss_kib_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `n` worker processes `w0`, `w1`, ... on `dsn`, each waited for until it runs (20 s).
pub fn spawn_fleet(n: usize, dsn: &str, args: &[String]) -> Vec<Proc> {
    let mut procs: Vec<Proc> = (0..n)
        .map(|i| Proc::spawn(&format!("w{i}"), dsn, args))
        .collect();
    for p in &mut procs {
        p.wait_running(Duration::from_secs(20));
    }
    procs
}

/// Asserts that every process of the fleet still runs.
#[track_caller]
pub fn assert_running(procs: &mut [Proc]) {
    for p in procs {
        assert!(p.running(), "worker {} died: {}", p.label, p.stderr());
    }
}

/// Stops every process of the fleet with SIGTERM and asserts that each exits cleanly.
#[track_caller]
pub fn terminate_all(procs: &mut [Proc]) {
    for p in procs {
        let status = p.terminate();
        assert!(status.success(), "{}: {status} {}", p.label, p.stderr());
    }
}
