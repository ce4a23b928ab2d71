//! Through a held horizon: a steady offered load while another session holds a snapshot
//! open (a report, `pg_dump`, a forgotten `BEGIN`), so that PostgreSQL can remove no row
//! version that died after it began. Prints one row per window, as the run goes and
//! again at the end: completions per second, enqueue-to-start p50, p99 and max, the queue's
//! depth, the queue table's dead tuples, and the worker's mean claim time.
//!
//! Run: `cargo bench --bench horizon` (needs PostgreSQL; admin DSN from
//! `PGQUEUER_BENCH_DSN`, default `postgres://postgres@127.0.0.1:5432/postgres`; makes and
//! drops a database of its own). Its variables:
//! - `PGQ_HORIZON_RATE` jobs offered per second (default 800), in batches of
//!   `PGQ_HORIZON_BATCH` (40) spread evenly over each second;
//! - `PGQ_HORIZON_HANDLER_MS` each handler's sleep (1), `PGQ_HORIZON_THREADS` (32);
//! - `PGQ_HORIZON_HOLD_AT` seconds before the snapshot is taken (60),
//!   `PGQ_HORIZON_HOLD_SECS` how long it is held (600; 0: none), `PGQ_HORIZON_AFTER` seconds
//!   run after it ends (30), `PGQ_HORIZON_WINDOW` seconds per row (30);
//! - `PGQ_HORIZON_LIMIT` the entrypoint's concurrency limit (0: none) and
//!   `PGQ_HORIZON_RATE_LIMIT` its rate limit (`N/s`, default none);
//! - `PGQ_HORIZON_DEFERRED` jobs of the same entrypoint deferred to tomorrow, enqueued
//!   first (0);
//! - `PGQ_HORIZON_KILL=1`: a second worker process beside the first, SIGKILLed halfway
//!   through the hold; the jobs it held are rescued by the first once stale (heartbeat
//!   timeout 5 s), and the table says how many and how long they waited.
//!
//! - `PGQ_HORIZON_PYTHON=PATH`: the same shape for Python PgQueuer 1.6.0 instead
//!   (`benches/horizon_py.py` run by that interpreter, which must import `pgqueuer` 1.6.0
//!   and `asyncpg`, such as the tests' `target/tmp/pgqueuer-python/bin/python`): one
//!   consumer with `batch_size` 10, on the database this bench makes;
//! - `PGQ_HORIZON_EXPLAIN=1`: at the end of each window, `EXPLAIN (ANALYZE, BUFFERS)` of
//!   the claim statement (rolled back) and of the stale search, summarized to their time
//!   and buffers.
//!
//! The run exits 1 when a window's handlers of a limited entrypoint overlapped past the
//! limit (in this process), or a job offered was never run.

use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgqueuer::postgres::{Client, Config, NoTls};
use pgqueuer::{Entrypoint, NewJob, Queue, Worker};

#[path = "support/common.rs"]
#[allow(dead_code)] // shared with the other benchmarks
mod common;

const ENTRYPOINT: &str = "held";

struct Options {
    rate: u64,
    batch: u64,
    handler: Duration,
    threads: usize,
    hold_at: Duration,
    hold_for: Duration,
    after: Duration,
    window: Duration,
    limit: u32,
    rate_limit: Option<pgqueuer::RateLimit>,
    deferred: usize,
    kill: bool,
    explain: bool,
}

impl Options {
    fn from_env() -> Result<Options, String> {
        let secs = |key: &str, default: u64| Duration::from_secs(common::env_or(key, default));
        let rate_limit = match std::env::var("PGQ_HORIZON_RATE_LIMIT") {
            Ok(text) if !text.is_empty() => {
                Some(pgqueuer::RateLimit::parse(&text).map_err(|e| e.to_string())?)
            }
            _ => None,
        };
        Ok(Options {
            rate: common::env_or("PGQ_HORIZON_RATE", 800),
            batch: common::env_or("PGQ_HORIZON_BATCH", 40),
            handler: Duration::from_millis(common::env_or("PGQ_HORIZON_HANDLER_MS", 1)),
            threads: common::env_or("PGQ_HORIZON_THREADS", 32),
            hold_at: secs("PGQ_HORIZON_HOLD_AT", 60),
            hold_for: secs("PGQ_HORIZON_HOLD_SECS", 600),
            after: secs("PGQ_HORIZON_AFTER", 30),
            window: secs("PGQ_HORIZON_WINDOW", 30),
            limit: common::env_or("PGQ_HORIZON_LIMIT", 0),
            rate_limit,
            deferred: common::env_or("PGQ_HORIZON_DEFERRED", 0),
            kill: common::env_or("PGQ_HORIZON_KILL", 0) == 1,
            explain: matches!(
                std::env::var("PGQ_HORIZON_EXPLAIN").as_deref(),
                Ok("1" | "full")
            ),
        })
    }
}

/// Microseconds since the Unix epoch.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What the handlers record, per window.
#[derive(Default)]
struct Window {
    /// Enqueue-to-start latencies, in milliseconds.
    waits: Vec<f64>,
    done: u64,
    /// Most handlers running at once.
    peak: i64,
}

struct Recorder {
    started: Instant,
    window: Duration,
    windows: Mutex<Vec<Window>>,
    running: AtomicI64,
    ran: AtomicU64,
}

impl Recorder {
    fn index(&self) -> usize {
        (self.started.elapsed().as_secs_f64() / self.window.as_secs_f64()) as usize
    }

    fn with<T>(&self, f: impl FnOnce(&mut Window) -> T) -> T {
        let i = self.index();
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while windows.len() <= i {
            windows.push(Window::default());
        }
        f(&mut windows[i])
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--horizon-worker") {
        return match second_worker(&args[at + 1]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("horizon worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.iter().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    match Options::from_env().and_then(|o| run(&o)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("horizon: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The worker process that is SIGKILLed halfway through the hold.
fn second_worker(dsn: &str) -> Result<(), pgqueuer::Error> {
    let o = Options::from_env().map_err(pgqueuer::Error::Worker)?;
    let pool = pgqueuer::connect_with(
        dsn,
        &pgqueuer::ConnectOptions {
            max_size: 4,
            ..pgqueuer::ConnectOptions::default()
        },
    )?;
    let handler = o.handler;
    Worker::builder(pool)
        .threads(o.threads.min(8))
        .heartbeat_timeout(Duration::from_secs(5))
        .entrypoint(entrypoint(&o), move |_job, _ctx| {
            std::thread::sleep(handler);
            Ok(())
        })
        .build()?
        .run()?;
    Ok(())
}

fn entrypoint(o: &Options) -> Entrypoint {
    let mut e = Entrypoint::new(ENTRYPOINT).concurrency_limit(o.limit);
    if let Some(rate) = &o.rate_limit {
        e = e.rate_limit(rate.starts(), rate.per());
    }
    e
}

fn run(o: &Options) -> Result<bool, String> {
    let admin_dsn = std::env::var("PGQUEUER_BENCH_DSN")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let admin_config: Config = admin_dsn
        .parse()
        .map_err(|e| format!("PGQUEUER_BENCH_DSN does not parse: {e}"))?;
    let mut admin = admin_config
        .connect(NoTls)
        .map_err(|e| format!("cannot reach PostgreSQL at {admin_dsn}: {e:?}"))?;
    let name = format!("pgq_horizon_{}", std::process::id());
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .map_err(|e| format!("{e:?}"))?;
    let mut config = admin_config.clone();
    config.dbname(&name);
    let dsn = match admin_dsn.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => return Err("PGQUEUER_BENCH_DSN needs a URL form".into()),
    };
    let outcome = match std::env::var("PGQ_HORIZON_PYTHON") {
        Ok(python) if !python.is_empty() => python_shape(o, &python, &dsn, &config),
        _ => measure(o, &dsn, &config),
    };
    let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    outcome
}

/// The shape for Python PgQueuer: the schema, then `benches/horizon_py.py`.
fn python_shape(o: &Options, python: &str, dsn: &str, config: &Config) -> Result<bool, String> {
    let mut client = config.connect(NoTls).map_err(|e| format!("{e:?}"))?;
    pgqueuer::upgrade(&mut client).map_err(|e| e.to_string())?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/horizon_py.py");
    let status = Command::new(python)
        .arg(script)
        .args(["--dsn", dsn])
        .args([
            "--rate",
            &o.rate.to_string(),
            "--batch",
            &o.batch.to_string(),
        ])
        .args(["--handler-ms", &o.handler.as_millis().to_string()])
        .args(["--hold-at", &o.hold_at.as_secs().to_string()])
        .args(["--hold-secs", &o.hold_for.as_secs().to_string()])
        .args(["--after", &o.after.as_secs().to_string()])
        .args(["--window", &o.window.as_secs().to_string()])
        .status()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    Ok(status.success())
}

fn measure(o: &Options, dsn: &str, config: &Config) -> Result<bool, String> {
    let db = |e: pgqueuer::postgres::Error| format!("{e:?}");
    let mut client = config.connect(NoTls).map_err(db)?;
    pgqueuer::upgrade(&mut client).map_err(|e| e.to_string())?;
    let pool = pgqueuer::connect_with(
        dsn,
        &pgqueuer::ConnectOptions {
            max_size: 6,
            ..pgqueuer::ConnectOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let queue = Queue::new(pool.clone());
    if o.deferred > 0 {
        let later: Vec<NewJob> = (0..o.deferred)
            .map(|_| {
                NewJob::new(ENTRYPOINT, b"0".to_vec()).execute_after(Duration::from_secs(86_400))
            })
            .collect();
        for chunk in later.chunks(5_000) {
            queue.enqueue_many(chunk).map_err(|e| e.to_string())?;
        }
        client.batch_execute("ANALYZE pgqueuer").map_err(db)?;
    }
    let total = o.hold_at + o.hold_for + o.after;
    println!(
        "horizon: {} jobs/s offered in batches of {}, {} threads, {:?} handlers, limit {}, \
         rate {:?}, {} deferred; snapshot held from {:?} for {:?}, {:?} in all",
        o.rate,
        o.batch,
        o.threads,
        o.handler,
        o.limit,
        o.rate_limit,
        o.deferred,
        o.hold_at,
        o.hold_for,
        total
    );
    let recorder = Arc::new(Recorder {
        started: Instant::now(),
        window: o.window,
        windows: Mutex::new(Vec::new()),
        running: AtomicI64::new(0),
        ran: AtomicU64::new(0),
    });
    let worker = {
        let (recorder, handler) = (recorder.clone(), o.handler);
        Worker::builder(
            pgqueuer::connect_with(
                dsn,
                &pgqueuer::ConnectOptions {
                    max_size: 4,
                    ..pgqueuer::ConnectOptions::default()
                },
            )
            .map_err(|e| e.to_string())?,
        )
        .threads(o.threads)
        .heartbeat_timeout(Duration::from_secs(5))
        .entrypoint(entrypoint(o), move |job, _ctx| {
            let sent: i64 = job.payload_str().and_then(|p| p.parse().ok()).unwrap_or(0);
            let running = recorder.running.fetch_add(1, Ordering::SeqCst) + 1;
            let wait = (now_us() - sent) as f64 / 1000.0;
            recorder.with(|w| {
                w.waits.push(wait);
                w.peak = w.peak.max(running);
            });
            std::thread::sleep(handler);
            recorder.running.fetch_sub(1, Ordering::SeqCst);
            recorder.with(|w| w.done += 1);
            recorder.ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .build()
        .map_err(|e| e.to_string())?
        .start()
        .map_err(|e| e.to_string())?
    };
    let mut second: Option<Child> = if o.kill {
        Some(
            Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
                .args(["--horizon-worker", dsn])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    // The producer: batches spread evenly over each second, each payload its send time.
    let offered = Arc::new(AtomicU64::new(0));
    let producer = {
        let (queue, offered) = (queue.clone(), offered.clone());
        let (rate, batch) = (o.rate.max(1), o.batch.max(1));
        let every = Duration::from_secs_f64(batch as f64 / rate as f64);
        std::thread::spawn(move || {
            let began = Instant::now();
            let mut next = began;
            while began.elapsed() < total {
                let sent = now_us().to_string();
                let jobs: Vec<NewJob> = (0..batch)
                    .map(|_| NewJob::new(ENTRYPOINT, sent.clone().into_bytes()))
                    .collect();
                if queue.enqueue_many(&jobs).is_ok() {
                    offered.fetch_add(batch, Ordering::SeqCst);
                }
                next += every;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        })
    };
    let mut holder: Option<Client> = None;
    let mut printed = 0usize;
    let mut claims_seen = worker.stats().claim_duration;
    let mut rows: Vec<String> = Vec::new();
    println!(
        "\n| t (s) | held | done/s | p50 ms | p99 ms | max ms | queued | dead tuples | claim ms |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    while recorder.started.elapsed() < total + o.window {
        std::thread::sleep(Duration::from_millis(200));
        let t = recorder.started.elapsed();
        if holder.is_none() && t >= o.hold_at && t < o.hold_at + o.hold_for {
            let mut c = config.connect(NoTls).map_err(db)?;
            c.batch_execute(
                "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current(); \
                 SELECT count(*) FROM pgqueuer;",
            )
            .map_err(db)?;
            holder = Some(c);
            println!("  (snapshot taken at {:.0} s)", t.as_secs_f64());
        }
        if t >= o.hold_at + o.hold_for
            && let Some(mut c) = holder.take()
        {
            let _ = c.batch_execute("COMMIT");
            println!("  (snapshot released at {:.0} s)", t.as_secs_f64());
        }
        if let Some(child) = second.as_mut()
            && t >= o.hold_at + o.hold_for / 2
        {
            let _ = child.kill();
            let _ = child.wait();
            second = None;
            println!("  (second worker SIGKILLed at {:.0} s)", t.as_secs_f64());
        }
        let done_windows = recorder.index();
        while printed < done_windows {
            let end = o.window * u32::try_from(printed + 1).unwrap_or(u32::MAX);
            let held = end > o.hold_at && end <= o.hold_at + o.hold_for + o.window;
            let (queued, dead) = depth_and_dead(&mut client);
            let now_claims = worker.stats().claim_duration;
            let claims = now_claims.count.saturating_sub(claims_seen.count);
            let claim_ms = if claims > 0 {
                (now_claims.sum.saturating_sub(claims_seen.sum)).as_secs_f64() * 1000.0
                    / claims as f64
            } else {
                0.0
            };
            claims_seen = now_claims;
            let row = recorder.with_index(printed, |w| {
                let mut waits = w.waits.clone();
                waits.sort_by(f64::total_cmp);
                format!(
                    "| {:.0} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {queued} | {dead} | {claim_ms:.2} |",
                    end.as_secs_f64(),
                    if held { "yes" } else { "no" },
                    w.done as f64 / o.window.as_secs_f64(),
                    pct(&waits, 0.50),
                    pct(&waits, 0.99),
                    waits.last().copied().unwrap_or(0.0),
                )
            });
            println!("{row}");
            rows.push(row);
            printed += 1;
            if o.explain {
                for line in explain(&mut client, o) {
                    println!("    {line}");
                }
            }
        }
    }
    let _ = producer.join();
    if let Some(mut child) = second.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
    // Whatever is left is drained (stale jobs of a killed worker included).
    let drained = Instant::now();
    while depth_and_dead(&mut client).0 > 0 && drained.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let stats = worker.stats();
    worker.shutdown_handle().shutdown();
    let _ = worker.join();
    let offered = offered.load(Ordering::SeqCst);
    let never_ran: i64 = client
        .query_one(
            "SELECT count(*) FROM pgqueuer WHERE execute_after < now() + interval '1 hour'",
            &[],
        )
        .map_err(db)?
        .get(0);
    let rescued: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT job_id FROM pgqueuer_log WHERE status = 'picked' \
             GROUP BY job_id HAVING count(*) > 1) r",
            &[],
        )
        .map_err(db)?
        .get(0);
    let peak = recorder
        .windows
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|w| w.peak)
        .max()
        .unwrap_or(0);
    println!("\n{}", rows.join("\n"));
    println!(
        "\noffered {offered}, ran {} here, {never_ran} never ran, {rescued} re-picked; most \
         handlers at once here {peak}{}; {} claims",
        recorder.ran.load(Ordering::SeqCst),
        if o.limit > 0 {
            format!(" (limit {})", o.limit)
        } else {
            String::new()
        },
        stats.claims
    );
    let ok = never_ran == 0 && (o.limit == 0 || peak <= i64::from(o.limit));
    if !ok {
        println!("horizon: A CHECK FAILED");
    }
    Ok(ok)
}

impl Recorder {
    fn with_index<T>(&self, i: usize, f: impl FnOnce(&Window) -> T) -> T {
        let windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(windows.get(i).unwrap_or(&Window::default()))
    }
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of a claim of 10 (in a transaction rolled back) and of
/// the stale search alone, each as its execution time and the buffers its top node read.
fn explain(client: &mut Client, o: &Options) -> Vec<String> {
    let claimer = match pgqueuer::Claimer::builder()
        .entrypoint(ENTRYPOINT, o.limit)
        .build()
    {
        Ok(c) => c,
        Err(e) => return vec![format!("no claimer: {e}")],
    };
    let sql = claimer.claim_sql().to_owned();
    let limited = o.limit > 0;
    let args = if limited {
        format!(
            "10, '{{{ENTRYPOINT}}}', '{}', 30000000, '{{{}}}', 0.0",
            claimer.worker_id(),
            o.limit
        )
    } else {
        format!(
            "10, '{{{ENTRYPOINT}}}', '{}', 30000000",
            claimer.worker_id()
        )
    };
    // The worker's own session settings (`Conn::plan_with_indexes`), so that the plans are
    // the ones its claims get.
    let _ = client.batch_execute(
        "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_sort = off; \
         SET jit = off; SET plan_cache_mode = force_generic_plan",
    );
    let mut out = Vec::new();
    let mut summary = |label: &str, rows: Result<Vec<pgqueuer::postgres::Row>, _>| match rows {
        Ok(rows) => {
            let lines: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
            let time = lines
                .iter()
                .find(|l| l.starts_with("Execution Time"))
                .cloned()
                .unwrap_or_default();
            let buffers = lines
                .iter()
                .find(|l| l.trim_start().starts_with("Buffers"))
                .cloned()
                .unwrap_or_default();
            out.push(format!("{label}: {time}; {}", buffers.trim()));
            if std::env::var("PGQ_HORIZON_EXPLAIN").as_deref() == Ok("full") {
                out.extend(lines);
            }
        }
        Err(e) => out.push(format!("{label}: {e:?}")),
    };
    let claim = (|| {
        // PREPARE is not undone by a rollback.
        client.batch_execute("DEALLOCATE ALL")?;
        let mut tx = client.transaction()?;
        tx.batch_execute(&format!("PREPARE horizon_claim AS {sql}"))?;
        let rows = tx.query(
            &format!("EXPLAIN (ANALYZE, BUFFERS) EXECUTE horizon_claim({args})"),
            &[],
        );
        tx.rollback()?;
        rows
    })();
    summary("claim", claim);
    let stale = client.query(
        "EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM pgqueuer WHERE status = 'picked'          AND entrypoint = ANY('{held}') AND heartbeat < now() - interval '30 seconds'          AND execute_after < now() ORDER BY priority DESC, id ASC LIMIT 10",
        &[],
    );
    summary("stale search", stale);
    let due = client.query(
        "EXPLAIN (ANALYZE, BUFFERS) SELECT execute_after FROM pgqueuer          WHERE status = 'queued' AND entrypoint = 'held' ORDER BY execute_after LIMIT 1",
        &[],
    );
    summary("next due", due);
    out
}

/// Queued jobs (due or not) and the queue table's dead tuples as the statistics say.
fn depth_and_dead(client: &mut Client) -> (i64, i64) {
    let queued = client
        .query_one(
            "SELECT count(*) FROM pgqueuer WHERE status = 'queued' \
             AND execute_after < now() + interval '1 hour'",
            &[],
        )
        .map(|r| r.get(0))
        .unwrap_or(-1);
    let dead = client
        .query_one(
            "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relname = 'pgqueuer'",
            &[],
        )
        .map(|r| r.get(0))
        .unwrap_or(-1);
    (queued, dead)
}

/// The `q` quantile of sorted values (0 when there are none).
fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
