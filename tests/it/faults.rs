//! The fault suite: real worker processes (`examples/worker`), a real server, faults
//! injected while jobs flow, and bad input everywhere. Each test proves that no job is
//! lost, that concurrency limits hold and that errors name their cause, and adds a row
//! to a summary (printed once every fault test has reported, and written to
//! `target/fault-summary.txt` after each one).
//!
//! Everything runs on loopback and every wait is bounded. The server-restart test starts
//! a PostgreSQL of its own ([`Throwaway`]); the others use their own database on the
//! shared server and only ever terminate backends of that database. The soak runs
//! 20,000 jobs unless `PGQ_SOAK_JOBS` asks for more.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use pgqueuer::postgres::{Client, NoTls};
use pgqueuer::{ConnectOptions, Error, JobId, NewJob, Queue, Settings, Status, Worker};
use serde_json::json;

use crate::harness::{TestDb, Throwaway, captured};
use crate::harness::{eventually, scalar};

// ---------------------------------------------------------------------------------------
// The summary
// ---------------------------------------------------------------------------------------

/// How many tests report a row; the table is printed when the last one has.
const FAULT_TESTS: usize = 8;

struct Row {
    test: &'static str,
    faults: String,
    enqueued: usize,
    completed: usize,
    lost: usize,
    /// `entrypoint max/limit` for each limited entrypoint, or `-`.
    concurrency: String,
}

static ROWS: Mutex<Vec<Row>> = Mutex::new(Vec::new());

fn summary_path() -> PathBuf {
    // target/<profile>/deps/it-<hash> -> target/
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(3)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("fault-summary.txt")
}

fn render(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<24} {:<44} {:>9} {:>9} {:>5}  {}\n",
        "test", "faults injected", "enqueued", "completed", "lost", "max concurrency/limit"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<24} {:<44} {:>9} {:>9} {:>5}  {}\n",
            r.test, r.faults, r.enqueued, r.completed, r.lost, r.concurrency
        ));
    }
    out
}

/// Adds a test's row; rewrites the summary file; prints the row, and the whole table
/// once every fault test has reported.
fn report(row: Row) {
    let mut rows = ROWS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    eprintln!("fault summary row:\n{}", render(std::slice::from_ref(&row)));
    rows.push(row);
    let table = render(&rows);
    let path = summary_path();
    if let Err(e) = std::fs::write(&path, &table) {
        eprintln!("could not write {}: {e}", path.display());
    }
    if rows.len() == FAULT_TESTS {
        eprintln!("\n== fault suite summary ({})\n{table}", path.display());
    }
}

fn concurrency(max: &BTreeMap<String, i64>, limits: &[(&str, u32)]) -> String {
    let parts: Vec<String> = limits
        .iter()
        .filter(|(_, limit)| *limit > 0)
        .map(|(ep, limit)| format!("{ep} {}/{limit}", max.get(*ep).copied().unwrap_or(0)))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

// ---------------------------------------------------------------------------------------
// Worker processes
// ---------------------------------------------------------------------------------------

/// The `examples/worker` binary.
fn worker_binary() -> PathBuf {
    crate::harness::program("example", "worker", &[])
}

/// One `examples/worker` process. Its stdout is read for the worker id, its stderr kept
/// for checks. Dropping it kills it (SIGKILL) if it still runs.
struct Proc {
    child: Child,
    label: String,
    worker_id: Arc<Mutex<Option<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(label: &str, dsn: &str, args: &[String]) -> Proc {
        let mut child = Command::new(worker_binary())
            .arg("--dsn")
            .arg(dsn)
            .args(args)
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

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The worker id once the process has printed it.
    fn worker_id_now(&self) -> Option<String> {
        self.worker_id.lock().unwrap().clone()
    }

    /// Waits until the worker is running (it printed its id).
    fn wait_running(&mut self, within: Duration) -> String {
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

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (the worker's clean shutdown), then waits up to 20 s.
    fn terminate(&mut self) -> ExitStatus {
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

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process's resident set size in KiB (`VmRSS` of /proc/<pid>/status).
    fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
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
fn digest(stderr: &str) -> BTreeMap<String, usize> {
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
fn worker_args(plan: &[(&str, u32, u64, usize)], rest: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    for (ep, limit, millis, _) in plan {
        args.push("--entrypoint".to_owned());
        args.push(format!("{ep}:{limit}:{millis}"));
    }
    args.extend(rest.iter().map(|s| (*s).to_owned()));
    args
}

// ---------------------------------------------------------------------------------------
// Database checks
// ---------------------------------------------------------------------------------------

/// The table `examples/worker --record` writes; created here so that concurrent worker
/// processes do not race to create it.
const RUNS_DDL: &str = "CREATE TABLE pgqueuer_example_runs (job_id bigint NOT NULL, \
     entrypoint text NOT NULL, started timestamptz NOT NULL, finished timestamptz NOT NULL, \
     pid int NOT NULL)";

const TERMINAL: &str = "('successful', 'exception', 'canceled', 'deleted')";

/// A count as the database's bigint.
fn count(n: usize) -> i64 {
    i64::try_from(n).expect("a count fits an i64")
}

/// Enqueues `count` jobs per entrypoint of the plan, interleaved; returns every id.
fn enqueue_plan(queue: &Queue, plan: &[(&str, u32, u64, usize)]) -> Vec<JobId> {
    let most = plan.iter().map(|p| p.3).max().unwrap_or(0);
    let mut jobs = Vec::new();
    for i in 0..most {
        for (ep, _, _, count) in plan {
            if i < *count {
                jobs.push(NewJob::new(*ep, i.to_string().into_bytes()));
            }
        }
    }
    let mut ids = Vec::new();
    for chunk in jobs.chunks(2_000) {
        ids.extend(queue.enqueue_many(chunk).unwrap());
    }
    ids
}

/// Ids of `ids` without a terminal log row.
fn unfinished(client: &mut Client, ids: &[JobId]) -> Vec<JobId> {
    client
        .query(
            &format!(
                "SELECT i.id FROM unnest($1::bigint[]) AS i(id) WHERE NOT EXISTS \
                 (SELECT 1 FROM pgqueuer_log l WHERE l.job_id = i.id AND l.status IN {TERMINAL}) \
                 ORDER BY 1"
            ),
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Waits until every id has a terminal log row and the queue table is empty; returns
/// the ids still unfinished when `limit` passed (the lost ones).
fn wait_all_done(client: &mut Client, ids: &[JobId], limit: Duration) -> Vec<JobId> {
    let started = Instant::now();
    loop {
        let left = unfinished(client, ids);
        let rows = scalar(client, "SELECT count(*) FROM pgqueuer");
        if left.is_empty() && rows == 0 {
            return left;
        }
        if started.elapsed() > limit {
            let picked: Vec<String> = client
                .query(
                    "SELECT id::text || ' ' || status::text || ' ' || coalesce(queue_manager_id::text, '-') \
                     || ' hb ' || (now() - heartbeat)::text FROM pgqueuer ORDER BY id LIMIT 20",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            eprintln!(
                "after {limit:?}: {} of {} jobs unfinished, {rows} rows in the queue table: {picked:?}",
                left.len(),
                ids.len()
            );
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Statuses of the terminal log rows of `ids`: status -> count.
fn outcomes(client: &mut Client, ids: &[JobId]) -> BTreeMap<String, i64> {
    client
        .query(
            &format!(
                "SELECT status::text, count(*) FROM pgqueuer_log \
                 WHERE job_id = ANY($1::bigint[]) AND status IN {TERMINAL} GROUP BY 1"
            ),
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The most recorded runs (`pgqueuer_example_runs`) of each entrypoint that overlapped
/// in time. A run ending exactly when another starts does not overlap it. A run is
/// (job, process, start): should a record be written twice (its first commit's answer
/// lost with a terminated connection), it still counts once.
fn max_overlap(client: &mut Client) -> BTreeMap<String, i64> {
    client
        .query(
            "WITH runs AS (SELECT entrypoint, started, min(finished) AS finished \
                           FROM pgqueuer_example_runs GROUP BY job_id, entrypoint, pid, started), \
                  ev AS (SELECT entrypoint, started AS t, 1 AS d FROM runs \
                         UNION ALL SELECT entrypoint, finished, -1 FROM runs) \
             SELECT entrypoint, max(c)::bigint FROM ( \
                 SELECT entrypoint, sum(d) OVER (PARTITION BY entrypoint ORDER BY t, d \
                                                 ROWS UNBOUNDED PRECEDING) AS c FROM ev) x \
             GROUP BY entrypoint",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn assert_limits(max: &BTreeMap<String, i64>, limits: &[(&str, u32)]) {
    for (ep, limit) in limits {
        if *limit > 0 {
            let seen = max.get(*ep).copied().unwrap_or(0);
            assert!(
                seen <= i64::from(*limit),
                "{ep}: {seen} runs overlapped, limit {limit}"
            );
        }
    }
}

/// A producer thread enqueueing a few jobs every `every` until stopped, retrying each
/// batch through failures (the same `Queue` throughout: no restart).
struct Producer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Produced>,
}

#[derive(Default)]
struct Produced {
    ids: Vec<JobId>,
    /// Ids enqueued after the first failure had been overcome.
    ids_after_failure: usize,
    errors: usize,
    first_errors: Vec<String>,
}

impl Producer {
    fn start(dsn: &str, entrypoints: &[&'static str], every: Duration) -> Producer {
        let options = ConnectOptions {
            max_size: 2,
            min_idle: 0,
            connection_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let queue = Queue::new(pgqueuer::connect_with(dsn, &options).expect("producer pool"));
        let stop = Arc::new(AtomicBool::new(false));
        let entrypoints = entrypoints.to_vec();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Produced::default();
            let mut n = 0usize;
            while !flag.load(Ordering::SeqCst) {
                let batch: Vec<NewJob> = (0..6)
                    .map(|i| {
                        n += 1;
                        NewJob::new(entrypoints[i % entrypoints.len()], n.to_string())
                    })
                    .collect();
                let started = Instant::now();
                loop {
                    match queue.enqueue_many(&batch) {
                        Ok(ids) => {
                            if out.errors > 0 {
                                out.ids_after_failure += ids.len();
                            }
                            out.ids.extend(ids);
                            break;
                        }
                        Err(e) => {
                            out.errors += 1;
                            if out.first_errors.len() < 3 {
                                out.first_errors.push(e.to_string());
                            }
                            assert!(
                                started.elapsed() < Duration::from_secs(60),
                                "the producer could not enqueue for 60 s: {e}"
                            );
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
                std::thread::sleep(every);
            }
            out
        });
        Producer { stop, thread }
    }

    fn finish(self) -> Produced {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("producer thread")
    }
}

// ---------------------------------------------------------------------------------------
// 1. SIGKILL
// ---------------------------------------------------------------------------------------

/// Worker processes SIGKILLed while they hold jobs: the orphans are re-picked after the
/// heartbeat timeout (2 s) and completed, no job is lost, and the recorded runs of a
/// limited entrypoint never overlap beyond its limit.
#[test]
fn sigkilled_workers_lose_no_job_and_limits_hold() {
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let queue = Queue::new(db.pool(2));
    let plan = [
        ("lim2", 2, 150, 40),
        ("lim1", 1, 100, 15),
        ("free", 0, 20, 200),
    ];
    let limits: Vec<(&str, u32)> = plan.iter().map(|p| (p.0, p.1)).collect();
    let ids = enqueue_plan(&queue, &plan);
    let args = worker_args(
        &plan,
        &[
            "--threads",
            "3",
            "--batch",
            "3",
            "--heartbeat-timeout",
            "2",
            "--dequeue-timeout",
            "0.5",
            "--record",
        ],
    );
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| Proc::spawn(&format!("w{i}"), &db.dsn(), &args))
        .collect();
    for p in &mut procs {
        p.wait_running(Duration::from_secs(20));
    }
    let started = Instant::now();
    let (mut kills, mut mid_job) = (0, 0);
    let mut orphans: Vec<JobId> = Vec::new();
    let mut orphaned_at: Vec<(JobId, SystemTime)> = Vec::new();
    let mut spawned = procs.len();
    while kills < 6 {
        std::thread::sleep(Duration::from_millis(700));
        let held: HashMap<String, i64> = client
            .query(
                "SELECT queue_manager_id::text, count(*) FROM pgqueuer \
                 WHERE status = 'picked' GROUP BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        // The live process holding the most jobs.
        let victim = procs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let n = held.get(&p.worker_id_now()?).copied().unwrap_or(0);
                (n > 0).then_some((i, n))
            })
            .max_by_key(|(_, n)| *n)
            .map(|(i, _)| i);
        let Some(i) = victim else {
            if scalar(&mut client, "SELECT count(*) FROM pgqueuer") == 0 {
                break;
            }
            continue;
        };
        let worker_id = procs[i].worker_id_now().unwrap();
        procs[i].kill9();
        let killed_at = SystemTime::now();
        kills += 1;
        // A statement the process sent just before dying still runs to its end on the
        // server (a completion, say); what is still held after that is orphaned.
        std::thread::sleep(Duration::from_millis(300));
        let orphaned: Vec<JobId> = client
            .query(
                "SELECT id FROM pgqueuer WHERE status = 'picked' AND queue_manager_id = $1::text::uuid",
                &[&worker_id],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        eprintln!(
            "kill {kills}: SIGKILL {} (pid {}) holding {:?}",
            procs[i].label,
            procs[i].pid(),
            orphaned
        );
        if !orphaned.is_empty() {
            mid_job += 1;
        }
        orphaned_at.extend(orphaned.iter().map(|id| (*id, killed_at)));
        orphans.extend(orphaned);
        procs[i] = Proc::spawn(&format!("w{spawned}"), &db.dsn(), &args);
        spawned += 1;
    }
    // A re-picked orphan may be orphaned again by a later kill.
    let kill_orphanings = orphans.len();
    orphans.sort_unstable();
    orphans.dedup();
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(60));
    let elapsed = started.elapsed();
    for p in &mut procs {
        assert!(p.running(), "worker {} died: {}", p.label, p.stderr());
    }
    let max = max_overlap(&mut client);
    let done = outcomes(&mut client, &ids);
    let runs = scalar(&mut client, "SELECT count(*) FROM pgqueuer_example_runs");
    let distinct = scalar(
        &mut client,
        "SELECT count(DISTINCT job_id) FROM pgqueuer_example_runs",
    );
    // Every orphan was picked again (after its heartbeat went stale) and completed.
    let repicked: Vec<(JobId, i64, String)> = client
        .query(
            "SELECT job_id, count(*) FILTER (WHERE status = 'picked'), \
                    (array_agg(status::text ORDER BY id DESC))[1] \
             FROM pgqueuer_log WHERE job_id = ANY($1::bigint[]) GROUP BY job_id",
            &[&orphans],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    // How long after each kill its orphans were picked again: the heartbeat timeout
    // (2 s) after their last heartbeat, which was about 1 s (the beat interval) or less
    // before the kill.
    let delays: Vec<f64> = orphaned_at
        .iter()
        .map(|(id, at)| {
            client
                .query_one(
                    "SELECT EXTRACT(EPOCH FROM min(created) - $2::timestamptz)::float8 \
                     FROM pgqueuer_log WHERE job_id = $1 AND status = 'picked' AND created > $2",
                    &[id, at],
                )
                .unwrap()
                .get::<_, Option<f64>>(0)
                .unwrap_or(f64::NAN)
        })
        .collect();
    let fastest = delays.iter().copied().fold(f64::INFINITY, f64::min);
    let slowest = delays.iter().copied().fold(0.0, f64::max);
    eprintln!("sigkill: orphans re-picked {fastest:.2}..{slowest:.2} s after their kill");
    eprintln!(
        "sigkill: {kills} kills ({mid_job} mid-job, {kill_orphanings} jobs orphaned, {} distinct), \
         {} jobs in {elapsed:?}, outcomes {done:?}, {runs} recorded runs of {distinct} jobs \
         ({} re-runs), overlap {max:?}",
        orphans.len(),
        ids.len(),
        runs - distinct
    );
    report(Row {
        test: "sigkill workers",
        faults: format!("{kills} SIGKILL ({kill_orphanings} jobs orphaned)"),
        enqueued: ids.len(),
        completed: usize::try_from(done.get("successful").copied().unwrap_or(0)).unwrap(),
        lost: lost.len(),
        concurrency: concurrency(&max, &limits),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(done.get("successful").copied(), Some(count(ids.len())));
    assert!(mid_job >= 3, "only {mid_job} kills hit a worker mid-job");
    assert_eq!(repicked.len(), orphans.len());
    for (id, picks, last) in &repicked {
        assert!(*picks >= 2, "orphan {id} was picked {picks} times");
        assert_eq!(last, "successful", "orphan {id}");
    }
    assert_eq!(distinct, count(ids.len()), "every job ran to completion");
    assert!(
        delays.iter().all(|d| *d >= 0.5),
        "an orphan was re-picked before its heartbeat went stale: {delays:?}"
    );
    assert_limits(&max, &limits);
    for p in &mut procs {
        let status = p.terminate();
        assert!(status.success(), "{}: {status} {}", p.label, p.stderr());
    }
}

// ---------------------------------------------------------------------------------------
// 2. Server restart
// ---------------------------------------------------------------------------------------

/// A server of the test's own is stopped (2 s down) and later restarted while two worker
/// processes run and a producer enqueues: both recover without being restarted, every
/// job ends, nothing stays picked, limits hold.
#[test]
fn a_server_restart_mid_run_loses_nothing() {
    let server = Throwaway::new(&[]).unwrap_or_else(|e| panic!("throwaway server: {e}"));
    let mut admin = server.admin();
    admin.batch_execute("CREATE DATABASE faults").unwrap();
    drop(admin);
    let dsn = server.dsn("faults");
    let connect = || {
        let mut c = server.server.config("faults").connect(NoTls).unwrap();
        c.batch_execute("SET application_name = 'fault-test'")
            .unwrap();
        c
    };
    let mut client = connect();
    pgqueuer::upgrade(&mut client).unwrap();
    client.batch_execute(RUNS_DDL).unwrap();
    let plan = [("lim", 2, 40, 0), ("free", 0, 10, 0)];
    let limits: Vec<(&str, u32)> = plan.iter().map(|p| (p.0, p.1)).collect();
    // Heartbeats outlast the outage, so nothing is re-picked while still running.
    let args = worker_args(
        &plan,
        &[
            "--threads",
            "3",
            "--heartbeat-timeout",
            "10",
            "--dequeue-timeout",
            "0.5",
            "--record",
        ],
    );
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| Proc::spawn(&format!("w{i}"), &dsn, &args))
        .collect();
    for p in &mut procs {
        p.wait_running(Duration::from_secs(20));
    }
    let producer = Producer::start(&dsn, &["lim", "free"], Duration::from_millis(60));
    std::thread::sleep(Duration::from_millis(1_500));
    let stopped_at = SystemTime::now();
    server.stop().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    server.start().unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    server.restart().unwrap();
    let restarted_at = SystemTime::now();
    std::thread::sleep(Duration::from_millis(1_500));
    let produced = producer.finish();
    let mut client = connect();
    let ids = &produced.ids;
    let lost = wait_all_done(&mut client, ids, Duration::from_secs(60));
    for p in &mut procs {
        assert!(p.running(), "worker {} died: {}", p.label, p.stderr());
    }
    let max = max_overlap(&mut client);
    let done = outcomes(&mut client, ids);
    let after = |at: SystemTime| -> BTreeMap<i32, i64> {
        let mut c = connect();
        c.query(
            "SELECT pid, count(*) FROM pgqueuer_example_runs WHERE started > $1 GROUP BY pid",
            &[&at],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    };
    let after_stop = after(stopped_at);
    let after_restart = after(restarted_at);
    let reconnects: Vec<usize> = procs
        .iter()
        .map(|p| p.stderr().matches("listener lost its connection").count())
        .collect();
    for p in &procs {
        eprintln!("worker {} reported {:?}", p.label, digest(&p.stderr()));
    }
    eprintln!(
        "server restart: {} jobs, outcomes {done:?}, producer errors {} (first: {:?}), \
         {} enqueued after the first failure, runs per pid after the stop {after_stop:?}, \
         after the restart {after_restart:?}, listener reconnects {reconnects:?}, overlap {max:?}",
        ids.len(),
        produced.errors,
        produced.first_errors,
        produced.ids_after_failure
    );
    report(Row {
        test: "server stop+restart",
        faults: format!("stop 2 s + restart; {} producer errors", produced.errors),
        enqueued: ids.len(),
        completed: usize::try_from(done.get("successful").copied().unwrap_or(0)).unwrap(),
        lost: lost.len(),
        concurrency: concurrency(&max, &limits),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(done.get("successful").copied(), Some(count(ids.len())));
    assert!(produced.errors > 0, "the producer never saw the outage");
    assert!(
        produced.ids_after_failure > 0,
        "the producer did not recover"
    );
    for p in &procs {
        let pid = i32::try_from(p.pid()).unwrap();
        assert!(
            after_stop.contains_key(&pid),
            "worker {} ran nothing after the outage: {}",
            p.label,
            p.stderr()
        );
    }
    assert!(
        !after_restart.is_empty(),
        "no job ran after the second restart"
    );
    assert_limits(&max, &limits);
    for p in &mut procs {
        let status = p.terminate();
        assert!(status.success(), "{}: {status} {}", p.label, p.stderr());
    }
}

// ---------------------------------------------------------------------------------------
// 3. pg_terminate_backend
// ---------------------------------------------------------------------------------------

/// For 5 s, every 300 ms, the listeners' backends or every backend of the test database
/// (workers' pools, listeners, the producer) are terminated: nothing is lost, limits
/// hold, and both worker processes end up listening again.
#[test]
fn terminated_backends_lose_nothing() {
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let plan = [("lim", 2, 30, 0), ("free", 0, 10, 0)];
    let limits: Vec<(&str, u32)> = plan.iter().map(|p| (p.0, p.1)).collect();
    let args = worker_args(
        &plan,
        &[
            "--threads",
            "3",
            "--heartbeat-timeout",
            "4",
            "--dequeue-timeout",
            "1",
            "--record",
        ],
    );
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| Proc::spawn(&format!("w{i}"), &db.dsn(), &args))
        .collect();
    for p in &mut procs {
        p.wait_running(Duration::from_secs(20));
    }
    let producer = Producer::start(&db.dsn(), &["lim", "free"], Duration::from_millis(50));
    let (mut rounds, mut listeners_killed, mut backends_killed) = (0, 0, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(300));
        let only_listeners = rounds % 3 == 0;
        let filter = if only_listeners {
            " AND query LIKE 'LISTEN%'"
        } else {
            ""
        };
        let killed = client
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid(){filter}"
                ),
                &[&db.name],
            )
            .unwrap()
            .get::<_, i64>(0);
        if only_listeners {
            listeners_killed += killed;
        } else {
            backends_killed += killed;
        }
        rounds += 1;
    }
    let produced = producer.finish();
    let ids = &produced.ids;
    let lost = wait_all_done(&mut client, ids, Duration::from_secs(60));
    // Both listeners are back (each worker LISTENs on one connection of its own).
    let relisten = eventually(
        Duration::from_secs(10),
        "both listeners to reconnect",
        || {
            scalar(
                &mut client,
                &format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND query LIKE 'LISTEN%'",
                    db.name
                ),
            ) == 2
        },
    );
    for p in &mut procs {
        assert!(p.running(), "worker {} died: {}", p.label, p.stderr());
    }
    let max = max_overlap(&mut client);
    let done = outcomes(&mut client, ids);
    let reconnects: Vec<usize> = procs
        .iter()
        .map(|p| p.stderr().matches("listener lost its connection").count())
        .collect();
    for p in &procs {
        eprintln!("worker {} reported {:?}", p.label, digest(&p.stderr()));
    }
    eprintln!(
        "terminate: {rounds} rounds, {listeners_killed} listener and {backends_killed} other \
         backends terminated; {} jobs, outcomes {done:?}; producer errors {}; listener \
         reconnects logged {reconnects:?}; listening again {relisten:?} after the end; overlap {max:?}",
        ids.len(),
        produced.errors
    );
    report(Row {
        test: "pg_terminate_backend",
        faults: format!(
            "{} backends killed ({listeners_killed} listeners)",
            listeners_killed + backends_killed
        ),
        enqueued: ids.len(),
        completed: usize::try_from(done.get("successful").copied().unwrap_or(0)).unwrap(),
        lost: lost.len(),
        concurrency: concurrency(&max, &limits),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(done.get("successful").copied(), Some(count(ids.len())));
    assert!(listeners_killed >= 2 && backends_killed >= 10);
    assert!(reconnects.iter().all(|n| *n >= 1), "{reconnects:?}");
    assert_limits(&max, &limits);
    for p in &mut procs {
        let status = p.terminate();
        assert!(status.success(), "{}: {status} {}", p.label, p.stderr());
    }
}

// ---------------------------------------------------------------------------------------
// 4. A handler blocking past the heartbeat timeout
// ---------------------------------------------------------------------------------------

/// Handlers that block for 3.5 s, 3.5× the heartbeat timeout, keep their jobs: the
/// heartbeat thread refreshes them while the executors are stuck, so another worker
/// process polling every 100 ms never gets them, and each runs once.
#[test]
fn a_blocked_handler_keeps_its_job() {
    // Built (if need be) before the clock starts: the poller must start quickly.
    worker_binary();
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let pool = db.pool(5);
    let queue = Queue::new(pool.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = {
        let runs = runs.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .heartbeat_timeout(Duration::from_secs(1))
            .dequeue_timeout(Duration::from_millis(200))
            .entrypoint("long", move |_job, _ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                // Blocks without looking at anything: only the heartbeat thread speaks.
                std::thread::sleep(Duration::from_millis(3_500));
                Ok(())
            })
            .build()
            .unwrap()
    };
    let owner = worker.id().to_string();
    let ids = queue
        .enqueue_many(&[NewJob::new("long", "a"), NewJob::new("long", "b")])
        .unwrap();
    let running = worker.start().unwrap();
    eventually(Duration::from_secs(5), "both long jobs to start", || {
        runs.load(Ordering::SeqCst) == 2
    });
    let mut other = Proc::spawn(
        "poller",
        &db.dsn(),
        &worker_args(
            &[("long", 0, 0, 0)],
            &[
                "--threads",
                "2",
                "--heartbeat-timeout",
                "1",
                "--dequeue-timeout",
                "0.1",
                "--record",
            ],
        ),
    );
    let mut other_up = None;
    let mut beats: HashMap<JobId, Vec<String>> = HashMap::new();
    let mut max_age = 0.0f64;
    let mut owners = std::collections::HashSet::new();
    let started = Instant::now();
    while !unfinished(&mut client, &ids).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "jobs never finished"
        );
        if other_up.is_none() && other.worker_id_now().is_some() {
            other_up = Some(Instant::now());
        }
        for row in client
            .query(
                "SELECT id, heartbeat::text, EXTRACT(EPOCH FROM clock_timestamp() - heartbeat)::float8, \
                        queue_manager_id::text FROM pgqueuer WHERE id = ANY($1::bigint[])",
                &[&ids],
            )
            .unwrap()
        {
            let beat: String = row.get(1);
            let list = beats.entry(row.get(0)).or_default();
            if list.last() != Some(&beat) {
                list.push(beat);
            }
            max_age = max_age.max(row.get(2));
            owners.insert(row.get::<_, String>(3));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let finished = Instant::now();
    let summary = running.join().unwrap();
    let polled = other_up.map(|t| finished - t);
    let stolen = scalar(&mut client, "SELECT count(*) FROM pgqueuer_example_runs");
    let refreshes: Vec<usize> = ids
        .iter()
        .map(|id| beats.get(id).map_or(0, Vec::len))
        .collect();
    eprintln!(
        "blocked handler: runs {}, another worker polled for {polled:?} while the jobs ran, \
         heartbeat values seen per job {refreshes:?}, oldest heartbeat {max_age:.2} s, owners {owners:?}",
        runs.load(Ordering::SeqCst)
    );
    let done = outcomes(&mut client, &ids);
    report(Row {
        test: "blocked handler",
        faults: "2 handlers blocked 3.5 s (timeout 1 s)".into(),
        enqueued: ids.len(),
        completed: usize::try_from(done.get("successful").copied().unwrap_or(0)).unwrap(),
        lost: unfinished(&mut client, &ids).len(),
        concurrency: "-".into(),
    });
    assert_eq!(runs.load(Ordering::SeqCst), 2, "a job ran twice");
    assert_eq!(summary.succeeded, 2);
    assert_eq!(
        stolen, 0,
        "the other worker ran a job that was still running"
    );
    assert_eq!(owners.len(), 1, "the jobs changed hands: {owners:?}");
    assert!(owners.contains(&owner));
    assert!(
        polled.is_some_and(|d| d >= Duration::from_millis(1_500)),
        "the other worker was not polling long enough to prove anything: {polled:?}"
    );
    assert!(max_age < 1.0, "a heartbeat got {max_age:.2} s old");
    assert!(refreshes.iter().all(|n| *n >= 4), "{refreshes:?}");
    for id in &ids {
        let log: Vec<String> = client
            .query(
                "SELECT status::text FROM pgqueuer_log WHERE job_id = $1 ORDER BY id",
                &[id],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(log, ["queued", "picked", "successful"], "job {id}");
    }
    let status = other.terminate();
    assert!(status.success(), "{status} {}", other.stderr());
}

// ---------------------------------------------------------------------------------------
// 5. statement_timeout and pool exhaustion
// ---------------------------------------------------------------------------------------

/// With `statement_timeout = 300ms` on the database, a hog holds an ACCESS EXCLUSIVE
/// lock on the queue table for 3 s in the middle of a run: the worker process's claims
/// and completions are cancelled, it logs the cause and backs off, and once the lock is
/// gone it finishes every job.
#[test]
fn statement_timeouts_are_logged_and_the_worker_recovers() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET statement_timeout = '300ms'",
            db.name
        ))
        .unwrap();
    let queue = Queue::new(db.pool(2));
    let ids = enqueue_plan(&queue, &[("st", 0, 10, 300)]);
    let mut worker = Proc::spawn(
        "st",
        &db.dsn(),
        &worker_args(
            &[("st", 0, 10, 0)],
            &[
                "--threads",
                "2",
                "--heartbeat-timeout",
                "10",
                "--dequeue-timeout",
                "0.5",
                "--quiet",
            ],
        ),
    );
    let successful = |c: &mut Client| {
        scalar(
            c,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
        )
    };
    eventually(Duration::from_secs(20), "30 jobs done", || {
        successful(&mut client) >= 30
    });
    let mut hog = db.client();
    hog.batch_execute("SET statement_timeout = 0").unwrap();
    let mut tx = hog.transaction().unwrap();
    tx.batch_execute("LOCK TABLE pgqueuer IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let before = successful(&mut client);
    std::thread::sleep(Duration::from_secs(3));
    let during = successful(&mut client);
    tx.commit().unwrap();
    let recovered = eventually(
        Duration::from_secs(20),
        "a job to complete after the lock",
        || successful(&mut client) > during,
    );
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(30));
    let stderr = worker.stderr();
    let cancelled = stderr
        .matches("canceling statement due to statement timeout")
        .count();
    let backoffs: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("claim failed (retrying in "))
        .filter_map(|l| l.split("retrying in ").nth(1)?.split(')').next())
        .collect();
    let outcome_retries = stderr.matches("could not write").count();
    eprintln!("worker reported {:?}", digest(&stderr));
    let done = outcomes(&mut client, &ids);
    eprintln!(
        "statement_timeout: {cancelled} statements cancelled, claim backoffs {backoffs:?}, \
         {outcome_retries} completion batches retried; completed {before} before the lock, \
         {during} at its end, first completion {recovered:?} after release; outcomes {done:?}"
    );
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} RESET statement_timeout",
            db.name
        ))
        .unwrap();
    report(Row {
        test: "statement_timeout",
        faults: format!("3 s lock hog; {cancelled} statements timed out"),
        enqueued: ids.len(),
        completed: usize::try_from(done.get("successful").copied().unwrap_or(0)).unwrap(),
        lost: lost.len(),
        concurrency: "-".into(),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(done.get("successful").copied(), Some(count(ids.len())));
    assert_eq!(before, during, "jobs completed through an exclusive lock?");
    assert!(cancelled >= 2, "no timeout was logged: {stderr}");
    assert!(
        backoffs.iter().any(|b| *b != "50ms"),
        "the claim did not back off: {backoffs:?}"
    );
    assert!(recovered < Duration::from_secs(10), "{recovered:?}");
    let status = worker.terminate();
    assert!(status.success(), "{status} {stderr}");
}

/// A hog takes every connection of the worker's pool: enqueueing through that pool
/// fails with an error naming the cause, the worker logs its failed claims and backs off,
/// and once the hog lets go it runs every job.
#[test]
fn pool_exhaustion_is_reported_and_the_worker_recovers() {
    let db = TestDb::new();
    let mut client = db.client();
    let options = ConnectOptions {
        max_size: 3,
        min_idle: 0,
        connection_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let pool = pgqueuer::connect_with(&db.dsn(), &options).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let worker = {
        let done = done.clone();
        Worker::builder(pool.clone())
            .threads(1)
            .heartbeat_timeout(Duration::from_secs(5))
            .dequeue_timeout(Duration::from_millis(500))
            .entrypoint("p", move |_job, _ctx| {
                done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .build()
            .unwrap()
    };
    let hogged: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    let err = Queue::new(pool.clone())
        .enqueue(NewJob::new("p", "x"))
        .unwrap_err();
    assert!(matches!(err, Error::Pool(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("no database connection available: timed out waiting for connection"),
        "{err}"
    );
    let running = worker.start().unwrap();
    let ids = enqueue_plan(&Queue::new(db.pool(2)), &[("p", 0, 0, 20)]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "a job ran without a connection"
    );
    drop(hogged);
    let recovered = eventually(Duration::from_secs(15), "every job to run", || {
        done.load(Ordering::SeqCst) == 20
    });
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(20));
    let summary = running.join().unwrap();
    let lines: Vec<String> = captured("claim failed")
        .into_iter()
        .filter(|l| {
            l.starts_with("pgqueuer-dispatch") && l.contains("timed out waiting for connection")
        })
        .collect();
    eprintln!(
        "pool exhaustion: enqueue said {err:?} ({err}); {} failed claims logged, e.g. {:?}; \
         all 20 ran {recovered:?} after the hog let go",
        lines.len(),
        lines.first()
    );
    report(Row {
        test: "pool exhaustion",
        faults: format!("pool hogged 2 s; {} claims timed out", lines.len()),
        enqueued: ids.len(),
        completed: usize::try_from(summary.succeeded).unwrap(),
        lost: lost.len(),
        concurrency: "-".into(),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(summary.succeeded, 20);
    assert!(!lines.is_empty(), "the failed claims were not logged");
}

// ---------------------------------------------------------------------------------------
// 6. Bad input
// ---------------------------------------------------------------------------------------

/// FNV-1a, to compare payloads without keeping copies.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Bad connection input (an unparsable DSN, an invalid port, a refused port, a wrong
/// password, an unknown role, an unknown database), a database without the schema,
/// invalid settings, jobs for entrypoints nobody here handles, payloads of 0 bytes,
/// 50 MiB and not UTF-8, headers that are not objects: each gets a clear error or is
/// handled, and nothing is corrupted.
#[test]
fn bad_input_gets_clear_errors_and_corrupts_nothing() {
    let mut checks = 0usize;
    let mut expect_err = |what: &str, result: Result<(), Error>, needles: &[&str]| {
        let err = result.expect_err(what);
        let text = err.to_string();
        for needle in needles {
            assert!(text.contains(needle), "{what}: {needle:?} not in {text:?}");
        }
        eprintln!("bad input: {what}: {text}");
        checks += 1;
    };

    // Connection strings.
    let connect = |dsn: &str| pgqueuer::connect(dsn).map(drop);
    expect_err(
        "unknown DSN option",
        connect("postgres://u@127.0.0.1/db?bogus_option=1"),
        &["invalid connection settings", "bogus_option"],
    );
    expect_err(
        "not a DSN at all",
        connect("this is not a dsn"),
        &["invalid connection settings"],
    );
    expect_err(
        "port out of range",
        connect("postgres://u@127.0.0.1:99999/db"),
        &["invalid connection settings"],
    );
    expect_err(
        "refused port",
        connect("postgres://u@127.0.0.1:1/db"),
        &["could not connect to u@127.0.0.1:1/db", "refused"],
    );

    // Authentication, on a server of our own that asks one role for a password.
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
    expect_err(
        "wrong password",
        Err(wrong),
        &[
            &format!("pgq_pw@127.0.0.1:{port}/postgres"),
            "password authentication failed",
        ],
    );
    expect_err(
        "unknown role",
        connect(&format!("postgres://nobody_here@127.0.0.1:{port}/postgres")),
        &["role \"nobody_here\" does not exist"],
    );
    expect_err(
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

    // No schema: the worker names what is missing; a producer gets the server's error.
    let empty = TestDb::empty();
    let pool = empty.pool(4);
    let err = Worker::builder(pool.clone())
        .threads(1)
        .entrypoint("a", |_job, _ctx| Ok(()))
        .build()
        .unwrap_err();
    match &err {
        Error::Schema { missing, .. } => {
            assert!(
                missing.iter().any(|m| m.contains("pgqueuer_log")),
                "{missing:?}"
            );
            assert!(missing.len() >= 4, "{missing:?}");
        }
        other => panic!("expected Error::Schema, got {other:?}"),
    }
    expect_err(
        "worker without a schema",
        Err(err),
        &["run pgqueuer::upgrade()"],
    );
    expect_err(
        "enqueue without a schema",
        Queue::new(pool).enqueue(NewJob::new("a", "x")).map(drop),
        &["relation \"pgqueuer\" does not exist"],
    );
    drop(empty);

    // Invalid settings: rejected before any SQL runs.
    let db = TestDb::new();
    let mut client = db.client();
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
            .settings(settings.clone())
            .entrypoint("a", |_job, _ctx| Ok(()))
            .build()
            .map(drop);
        expect_err(
            &format!("worker with a bad {name}"),
            built,
            &[&format!("invalid setting {name}")],
        );
        expect_err(
            &format!("queue with a bad {name}"),
            Queue::with_settings(pool.clone(), &settings).map(drop),
            &[&format!("invalid setting {name}")],
        );
    }
    // An entrypoint name PostgreSQL cannot store would fail every claim at run time.
    expect_err(
        "worker entrypoint with a NUL",
        Worker::builder(pool.clone())
            .threads(1)
            .entrypoint("bad\0name", |_job, _ctx| Ok(()))
            .build()
            .map(drop),
        &["entrypoint", "NUL"],
    );
    expect_err(
        "claimer entrypoint with a NUL",
        pgqueuer::Claimer::builder()
            .entrypoint("bad\0name", 1)
            .build()
            .map(drop),
        &["entrypoint", "NUL"],
    );
    let from_env = Settings::from_lookup(|k| {
        (k == "PGQUEUER_QUEUE_TABLE").then(|| "jobs; DROP TABLE x".to_owned())
    });
    expect_err(
        "PGQUEUER_QUEUE_TABLE with SQL in it",
        from_env.map(drop),
        &["invalid setting queue_table"],
    );

    // Bad jobs: rejected, nothing inserted.
    let queue = Queue::new(pool.clone());
    let bad_jobs = [
        (NewJob::new("", "x"), "entrypoint"),
        (NewJob::new("e".repeat(300), "x"), "entrypoint"),
        (NewJob::new("echo", "x").headers(json!([1, 2])), "headers"),
        (NewJob::new("echo", "x").headers(json!("text")), "headers"),
        (
            NewJob::new("echo", "x").header("k", "nul\0inside"),
            "headers",
        ),
    ];
    for (job, field) in bad_jobs {
        expect_err(
            &format!("job with a bad {field}"),
            queue.enqueue(job).map(drop),
            &[field],
        );
    }
    assert_eq!(scalar(&mut client, "SELECT count(*) FROM pgqueuer"), 0);

    // Odd but valid jobs run with their bytes intact; jobs of other entrypoints are left
    // alone; rows written by another producer with non-object headers are handled.
    let strangers = queue
        .enqueue_many(
            &(0..5)
                .map(|i| NewJob::new("stranger", vec![i]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let big: Vec<u8> = (0..50u32 << 20)
        .map(|i| (i.wrapping_mul(31) % 251) as u8)
        .collect();
    let non_utf8 = vec![0xff, 0xfe, 0x00, 0xc3, 0x28];
    let mut expected: Vec<(JobId, Option<usize>, u64, Option<serde_json::Value>)> = Vec::new();
    let started = Instant::now();
    let big_id = queue.enqueue(NewJob::new("echo", big.clone())).unwrap();
    let enqueue_big = started.elapsed();
    expected.push((big_id, Some(big.len()), fnv(&big), None));
    drop(big);
    for (job, payload, headers) in [
        (NewJob::new("echo", Vec::new()), Some(Vec::new()), None),
        (NewJob::without_payload("echo"), None, None),
        (NewJob::new("echo", non_utf8.clone()), Some(non_utf8), None),
        (
            NewJob::new("echo", "h")
                .header("trace", "abc")
                .header("n", 5),
            Some(b"h".to_vec()),
            Some(json!({"trace": "abc", "n": 5})),
        ),
    ] {
        let id = queue.enqueue(job).unwrap();
        let len = payload.as_ref().map(Vec::len);
        let hash = fnv(payload.as_deref().unwrap_or_default());
        expected.push((id, len, hash, headers));
    }
    for headers in [json!([1, 2]), json!("just text"), json!(42)] {
        let id: JobId = client
            .query_one(
                "INSERT INTO pgqueuer (priority, entrypoint, payload, headers, status) \
                 VALUES (0, 'echo', 'raw', $1, 'queued') RETURNING id",
                &[&headers],
            )
            .unwrap()
            .get(0);
        expected.push((id, Some(3), fnv(b"raw"), Some(headers)));
    }
    type Seen = HashMap<JobId, (Option<usize>, u64, Option<serde_json::Value>, bool)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let worker = {
        let seen = seen.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .batch_size(1)
            .entrypoint("echo", move |job, _ctx| {
                let payload = job.payload.as_deref();
                seen.lock().unwrap().insert(
                    job.id,
                    (
                        payload.map(<[u8]>::len),
                        fnv(payload.unwrap_or_default()),
                        job.headers.clone(),
                        job.payload_str().is_some(),
                    ),
                );
                Ok(())
            })
            .build()
            .unwrap()
    };
    let started = Instant::now();
    let summary = worker.run_until_empty().unwrap();
    let drained = started.elapsed();
    let seen = seen.lock().unwrap();
    for (id, len, hash, headers) in &expected {
        let got = seen.get(id).unwrap_or_else(|| panic!("job {id} never ran"));
        assert_eq!((&got.0, &got.1, &got.2), (len, hash, headers), "job {id}");
    }
    assert!(
        !seen[&expected[3].0].3,
        "the non-UTF-8 payload read as text"
    );
    assert_eq!(summary.succeeded, expected.len() as u64);
    let ids: Vec<JobId> = expected.iter().map(|e| e.0).collect();
    assert!(unfinished(&mut client, &ids).is_empty());
    // The strangers were never touched.
    let statuses = queue.job_statuses(&strangers).unwrap();
    assert!(strangers.iter().all(|id| statuses[id] == Status::Queued));
    assert_eq!(
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'stranger' \
             AND attempts = 0 AND queue_manager_id IS NULL"
        ),
        5
    );
    assert_eq!(
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log l JOIN pgqueuer q ON q.id = l.job_id WHERE l.status <> 'queued'"
        ),
        0
    );
    // A worker process that knows only other entrypoints drains and leaves them too.
    let out = Command::new(worker_binary())
        .args([
            "--dsn",
            &db.dsn(),
            "--entrypoint",
            "known",
            "--drain",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'queued'"
        ),
        5
    );
    pgqueuer::verify(&mut client).expect("the schema is intact");
    eprintln!(
        "bad input: {checks} errors checked; 50 MiB payload enqueued in {enqueue_big:?}, \
         {} odd jobs drained in {drained:?}; 5 foreign jobs untouched",
        expected.len()
    );
    report(Row {
        test: "bad input",
        faults: format!("{checks} bad inputs rejected, 5 foreign jobs kept"),
        enqueued: expected.len() + strangers.len(),
        completed: usize::try_from(summary.succeeded).unwrap(),
        lost: 0,
        concurrency: "-".into(),
    });
}

// ---------------------------------------------------------------------------------------
// 7. Soak
// ---------------------------------------------------------------------------------------

/// Many jobs through one worker process while a producer keeps a backlog of at most
/// 20,000: its RSS, sampled every second, stays flat. `PGQ_SOAK_JOBS` sets the count
/// (default 20,000; the full soak is 1,000,000).
#[test]
fn soak_keeps_worker_memory_flat() {
    let total: usize = std::env::var("PGQ_SOAK_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        ))
        .unwrap();
    let queue = Queue::new(db.pool(2));
    let mut worker = Proc::spawn(
        "soak",
        &db.dsn(),
        &worker_args(
            &[("soak", 0, 0, 0)],
            &[
                "--threads",
                "2",
                "--batch",
                "20",
                "--heartbeat-timeout",
                "10",
                "--dequeue-timeout",
                "1",
            ],
        ),
    );
    worker.wait_running(Duration::from_secs(20));
    let samples: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (samples, stop, pid) = (samples.clone(), stop.clone(), worker.pid());
        std::thread::spawn(move || {
            let path = format!("/proc/{pid}/status");
            while !stop.load(Ordering::SeqCst) {
                let rss = std::fs::read_to_string(&path).ok().and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.split_whitespace().next()?.parse().ok())
                });
                if let Some(kib) = rss {
                    samples.lock().unwrap().push(kib);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    // Without autovacuum (the CI server runs with it off) the queue table fills with
    // dead rows and every claim slows down; vacuum it as autovacuum would.
    let autovacuum = client
        .query_one("SHOW autovacuum", &[])
        .unwrap()
        .get::<_, String>(0)
        == "on";
    let mut vacuumed = Instant::now();
    let mut vacuums = 0;
    let mut housekeeping = |c: &mut Client| {
        if !autovacuum && vacuumed.elapsed() > Duration::from_secs(10) {
            c.batch_execute("VACUUM pgqueuer").unwrap();
            vacuumed = Instant::now();
            vacuums += 1;
        }
    };
    let started = Instant::now();
    let mut enqueued = 0usize;
    let backlog = |c: &mut Client| scalar(c, "SELECT count(*) FROM pgqueuer");
    while enqueued < total {
        housekeeping(&mut client);
        if backlog(&mut client) > 20_000 {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let n = (total - enqueued).min(5_000);
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| NewJob::new("soak", (enqueued + i).to_string()))
            .collect();
        queue.enqueue_many(&jobs).unwrap();
        enqueued += n;
    }
    let limit = Duration::from_secs(60 + (total / 500) as u64);
    eventually(limit, "the soak to drain", || {
        housekeeping(&mut client);
        backlog(&mut client) == 0
    });
    let elapsed = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    assert!(
        worker.running(),
        "the soak worker died: {}",
        worker.stderr()
    );
    let rss = worker.rss_kib();
    let status = worker.terminate();
    let successful = scalar(
        &mut client,
        "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    );
    let samples = samples.lock().unwrap().clone();
    let first = samples.first().copied().unwrap_or(0);
    let last = rss.or(samples.last().copied()).unwrap_or(0);
    let max = samples.iter().copied().max().unwrap_or(0).max(last);
    // The curve at every tenth of the run, to tell a creep from a plateau.
    let curve: Vec<u64> = (0..=10)
        .filter_map(|i| {
            samples
                .get((samples.len().saturating_sub(1)) * i / 10)
                .copied()
        })
        .collect();
    eprintln!("soak: RSS KiB at each tenth of the run {curve:?}");
    // Allocators settle within the first seconds; growth after that is what matters.
    let settled = samples.get(3).copied().unwrap_or(first);
    eprintln!(
        "soak: {total} jobs in {elapsed:.1?} ({:.0}/s; autovacuum {}, {vacuums} manual vacuums); \
         worker RSS first {first} KiB, after 3 s {settled} KiB, last {last} KiB, max {max} KiB \
         over {} samples",
        total as f64 / elapsed.as_secs_f64(),
        if autovacuum { "on" } else { "off" },
        samples.len()
    );
    report(Row {
        test: "soak",
        faults: format!("none; RSS KiB first {first} last {last} max {max}"),
        enqueued: total,
        completed: usize::try_from(successful).unwrap(),
        lost: total - usize::try_from(successful).unwrap().min(total),
        concurrency: "-".into(),
    });
    assert!(status.success(), "{status} {}", worker.stderr());
    assert_eq!(successful, count(total));
    assert!(samples.len() >= 2, "too few RSS samples: {samples:?}");
    // Flat: no more than 8 MiB above the settled size at the end, 16 MiB at any time.
    assert!(
        last <= settled.max(first) + 8 * 1024,
        "RSS grew: {samples:?}"
    );
    assert!(
        max <= settled.max(first) + 16 * 1024,
        "RSS peaked: {samples:?}"
    );
}
