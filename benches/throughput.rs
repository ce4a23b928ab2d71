//! End-to-end throughput, latency and memory of the worker, in the shapes of PgQueuer's own
//! benchmark and a few others. Prints a table (and JSON lines with `PGQ_BENCH_JSON=path`).
//!
//! Run: `cargo bench --bench throughput` (needs PostgreSQL; admin DSN from
//! `PGQUEUER_BENCH_DSN`, default `postgres://postgres@127.0.0.1:5432/postgres`).
//! Creates and drops its own database (or uses `PGQ_BENCH_DATABASE`, keeping it). Sizes
//! from the environment:
//! - `PGQ_BENCH_WINDOW` seconds per flow measurement (default 10), after 2 s of warm-up;
//! - `PGQ_BENCH_DRAIN_JOBS` jobs for the drain runs (default 50000), and
//!   `PGQ_BENCH_DRAIN_THREADS` to run one drain shape (that many threads and, unless
//!   `PGQ_BENCH_DRAIN_BATCH` says otherwise, as large a batch); `PGQ_BENCH_FLOOR_BATCH`
//!   the floor's batch (default 128), `PGQ_BENCH_FLOOR_CONNECTIONS` further connection
//!   counts for the floor with the log rows (say `3,4`; it always runs 1 and 2);
//!   `PGQ_BENCH_PAIRS` the drain-floor shape's pairs (default 9, 1 when quick);
//!   `PGQ_BENCH_LIMIT_PAIRS` pairs of the limits-drain shape's ratios (default 0: none);
//! - `PGQ_BENCH_SHAPES` a comma-separated subset of
//!   `flow,drain,floor,drain-floor,limits,limits-drain,rates,latency,tls,memory,pgbouncer`,
//!   and `PGQ_BENCH_FLOW=text` for the flow shapes whose name contains `text`
//!   (`pgqueuer`: PgQueuer's shape only);
//! - `PGQ_BENCH_QUICK=1` a tiny pass (1 s windows, 2,000 drain jobs) for CI;
//! - `PGQ_BENCH_LIMITS` the limits of the `limits-drain` shape (default `0,10,1000,5000`; 0 is
//!   none);
//! - `PGQ_BENCH_DURABILITY` `durable` (the default), `balanced` (PgQueuer's variant with
//!   an UNLOGGED log table) or `volatile`, as `pgq durability` sets it;
//! - `PGQ_BENCH_LATENCY_JOBS` jobs for the idle latency run (default 200; the trickle
//!   sends five times as many), and `PGQ_BENCH_LATENCY_DUMP=FILE` to append every job's
//!   latency and its enqueue's commit time to `FILE`, for pooling rounds.
//!
//! Shapes:
//! - flow: producers enqueue batches while a worker runs no-op handlers; jobs/s is the
//!   number of handler calls inside the window. `pgqueuer` is PgQueuer's benchmark shape:
//!   one producer with batches of 10, claims of 10.
//! - drain: N queued jobs processed to empty by one worker (`run_until_empty`), with
//!   the CPU and the WAL each job cost, and how long after the last handler ended the
//!   drain returned (its tail: the last write, the claim that finds nothing, the stop).
//! - floor: the same N jobs taken through only the writes PgQueuer's schema requires of a
//!   job's life (claimed with its `picked` log row, then deleted with its `successful`
//!   log row), in plain batches of 128 on one and on two connections, with no worker: the
//!   server's least cost per job, against which the drain is measured. Once more without
//!   the log rows, to show what they cost.
//! - drain-floor: the 128-thread drain (or `PGQ_BENCH_DRAIN_THREADS`) and the
//!   two-connection floor, alternately, in pairs (one pair's drain first, the next's
//!   floor), each pair's ratio printed and their median recorded. On a machine whose
//!   speed wanders within seconds (the floor alone has read 34,000 to 63,000 jobs/s
//!   within an hour), one drain against one floor says little; the median of pairs run
//!   back to back is the figure the drain's target is read from.
//! - limits: the PgQueuer flow with the entrypoint limited to 10, 1,000 and 5,000.
//! - limits-drain: the same limits in a drain (16 threads claiming 10), where no producer
//!   competes with the worker for the machine's two cores. With `PGQ_BENCH_LIMIT_PAIRS=N`,
//!   each limit that cannot bind (above the 16 threads) is then run N more times, each right
//!   after (or before) an unlimited drain, and the median of those ratios is recorded
//!   against the target (>= 0.9x), with the interval that holds it. A binding limit (no more than
//!   the threads) gets a second row: its bound, the limit over the worker's mean claim
//!   round trip (a slot turns over in one claim with slot reuse), beside a bare commit's
//!   latency, and the fraction of the bound the drain reached.
//! - rates: the PgQueuer flow unlimited and with a rate limit that does not bind
//!   (100,000/s), alternately, three rounds each (medians and their ratio); then a rate
//!   of 500/s that binds, against the rate.
//! - latency: enqueue-to-handler-start on an idle worker (one job at a time) and under a
//!   steady trickle of 200 jobs/s, after three warm-up jobs (the producer's first
//!   enqueues open pool connections: 2 of 200 jobs, they once made the whole p99). The
//!   enqueue's own commit is part of every figure: on this machine it is about 1.9 ms of
//!   an idle job's 3.1 ms and most of its tail.
//! - memory: peak RSS of this process (a 16-thread worker plus producers) after the runs.
//! - tls: the 16-thread drain and PgQueuer's flow with `sslmode=require` against
//!   `sslmode=disable` (every other shape's), alternately, and their ratios.
//! - pgbouncer: PgQueuer's flow shape direct, direct with every statement unnamed (as
//!   through a transaction pooler: the cost of planning each execution), and through a real
//!   PgBouncer in transaction mode (8 server connections; the worker listens directly), and
//!   the pooled / direct ratio: Debian's 1.18 with statements unnamed (`Pooler::Transaction`),
//!   and 1.24 keeping prepared statements (`Pooler::TransactionPrepared`). Needs
//!   `pgbouncer` (installed with apt-get when missing and run as root;
//!   `PGQUEUER_PGBOUNCER` names another) and builds 1.24.1 from source on first use
//!   (`PGQUEUER_PGBOUNCER_PREPARED` names another).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::postgres::{Client, Config, NoTls};
use pgqueuer::{Entrypoint, NewJob, Pool, Pooler, Queue, RateLimit, Worker};

#[allow(
    dead_code,
    unreachable_pub,
    reason = "shared with the tests, which use all of it"
)]
#[path = "../tests/support/apt.rs"]
mod apt;
#[path = "support/common.rs"]
mod common;
#[path = "support/estimate.rs"]
mod estimate;
#[allow(
    dead_code,
    unreachable_pub,
    reason = "shared with the tests, which use all of it"
)]
#[path = "../tests/support/pgbouncer.rs"]
mod pgbouncer;

use common::{env_or, peak_rss_mib};
use estimate::MedianEstimate;

/// When the benchmark's process started: the clock of [`LAST_HANDLER_END`].
static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// When the latest handler call ended, in nanoseconds after [`EPOCH`]: a drain's tail is
/// the time from there to `run_until_empty`'s return (the last outcomes' write, the claim
/// that finds nothing, and the worker's stop).
static LAST_HANDLER_END: AtomicU64 = AtomicU64::new(0);

/// When the first handler call of a drain began, in nanoseconds after [`EPOCH`] (0 until
/// then): a drain's head is the time from `run_until_empty`'s call to there (the worker's
/// start: its connections, its checks of the schema, its threads).
static FIRST_HANDLER_START: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds from [`EPOCH`] to `at`.
fn since_epoch(at: Instant) -> u64 {
    u64::try_from(at.duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

struct BenchDb {
    admin: Client,
    name: String,
    /// The DSN of the database, with the `sslmode` of the shapes (`disable`, unless the
    /// `tls` shape says otherwise): the figures stay comparable with plaintext peers.
    dsn: String,
    /// The `sslmode` pools are opened with.
    sslmode: std::cell::Cell<&'static str>,
    /// Created (and so dropped) by this run.
    owned: bool,
}

impl BenchDb {
    fn create() -> BenchDb {
        let admin_dsn = std::env::var("PGQUEUER_BENCH_DSN")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let config: Config = admin_dsn.parse().expect("PGQUEUER_BENCH_DSN parses");
        let mut admin = config.connect(NoTls).unwrap_or_else(|e| {
            panic!("cannot reach PostgreSQL at {admin_dsn}: {e:?} (start it, or set PGQUEUER_BENCH_DSN)")
        });
        // An existing database (compare.sh) is used as is and kept; otherwise a fresh one.
        let (name, owned) = match std::env::var("PGQ_BENCH_DATABASE") {
            Ok(name) => (name, false),
            Err(_) => (format!("pgqbench_throughput_{}", std::process::id()), true),
        };
        if owned {
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
                .unwrap();
            admin
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .unwrap();
        }
        let host = match config.get_hosts().first() {
            Some(pgqueuer::postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".into(),
        };
        let dsn = format!(
            "host={host} port={} user={} dbname={name}",
            config.get_ports().first().copied().unwrap_or(5432),
            config.get_user().unwrap_or("postgres"),
        );
        let db = BenchDb {
            admin,
            name,
            dsn,
            sslmode: std::cell::Cell::new("disable"),
            owned,
        };
        let pool = db.pool(1);
        let mut conn = pool.get().unwrap();
        pgqueuer::upgrade(conn.client()).unwrap();
        if let Ok(level) = std::env::var("PGQ_BENCH_DURABILITY") {
            let level = pgqueuer::Durability::parse(&level).unwrap();
            pgqueuer::ops::set_durability(conn.client(), &pgqueuer::Settings::default(), level)
                .unwrap();
        }
        db
    }

    fn pool(&self, size: u32) -> Pool {
        let options = pgqueuer::ConnectOptions {
            max_size: size,
            min_idle: 0,
            ..Default::default()
        };
        let dsn = format!("{} sslmode={}", self.dsn, self.sslmode.get());
        pgqueuer::connect_with(&dsn, &options).unwrap()
    }

    /// The server's host and port, for a PgBouncer in front of it.
    fn upstream(&self) -> (String, u16) {
        let config: Config = self.dsn.parse().unwrap();
        let host = match config.get_hosts().first() {
            Some(pgqueuer::postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".into(),
        };
        (host, config.get_ports().first().copied().unwrap_or(5432))
    }

    /// Empties the tables and checkpoints, so every run starts alike.
    fn reset(&self, pool: &Pool) {
        let mut conn = pool.get().unwrap();
        conn.batch_execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
            .unwrap();
        conn.batch_execute("CHECKPOINT").unwrap();
    }
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = self.admin.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// One result row.
struct Row {
    shape: String,
    value: f64,
    unit: &'static str,
    note: String,
}

/// The limits of a shape's entrypoint: a concurrency limit (0: none) and a rate limit.
#[derive(Clone, Copy)]
struct Limit {
    concurrency: u32,
    rate: Option<RateLimit>,
}

impl From<u32> for Limit {
    fn from(concurrency: u32) -> Limit {
        Limit {
            concurrency,
            rate: None,
        }
    }
}

impl From<RateLimit> for Limit {
    fn from(rate: RateLimit) -> Limit {
        Limit {
            concurrency: 0,
            rate: Some(rate),
        }
    }
}

fn worker(
    pool: &Pool,
    threads: usize,
    batch: usize,
    limit: impl Into<Limit>,
    counter: &Arc<AtomicU64>,
) -> Worker {
    let counter = counter.clone();
    let limit = limit.into();
    let mut entrypoint = Entrypoint::new("fetch").concurrency_limit(limit.concurrency);
    if let Some(rate) = limit.rate {
        entrypoint = entrypoint.rate_limit(rate.starts(), rate.per());
    }
    Worker::builder(pool.clone())
        .threads(threads)
        .batch_size(batch)
        .entrypoint(entrypoint, move |_job, _ctx| {
            if FIRST_HANDLER_START.load(Ordering::Relaxed) == 0 {
                let now = since_epoch(Instant::now());
                let _ = FIRST_HANDLER_START.compare_exchange(
                    0,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            counter.fetch_add(1, Ordering::Relaxed);
            LAST_HANDLER_END.fetch_max(since_epoch(Instant::now()), Ordering::Relaxed);
            Ok(())
        })
        .build()
        .unwrap()
}

/// Producers and a worker at once; handler calls per second inside the window.
#[allow(
    clippy::too_many_arguments,
    reason = "a benchmark shape is its parameters"
)]
fn flow(
    db: &BenchDb,
    threads: usize,
    batch: usize,
    producers: usize,
    producer_batch: usize,
    limit: impl Into<Limit>,
    window: Duration,
) -> (f64, u64, String) {
    let pool = db.pool(u32::try_from(producers).unwrap() + 4);
    flow_on(
        &pool,
        db,
        threads,
        batch,
        producers,
        producer_batch,
        limit,
        window,
    )
}

/// [`flow`] on a pool of the caller's (through a pooler, say).
#[allow(
    clippy::too_many_arguments,
    reason = "a benchmark shape is its parameters"
)]
fn flow_on(
    pool: &Pool,
    db: &BenchDb,
    threads: usize,
    batch: usize,
    producers: usize,
    producer_batch: usize,
    limit: impl Into<Limit>,
    window: Duration,
) -> (f64, u64, String) {
    let pool = pool.clone();
    db.reset(&pool);
    // The commit counter is read on a direct connection of its own: the worker keeps a
    // connection per lane, the completer's and the heartbeat's, and the producers keep
    // theirs, so the shared pool may have none to spare for the meter.
    let meter = db.pool(1);
    let counter = Arc::new(AtomicU64::new(0));
    let w = worker(&pool, threads, batch, limit, &counter);
    let stats = w.stats_handle();
    let running = w.start().unwrap();
    let stop = AtomicBool::new(false);
    let (rate, cpu) = std::thread::scope(|scope| {
        // Should the measuring below panic, the producers stop, so that the scope can
        // end and the panic be reported rather than the bench hang.
        let _stop_producers = StopOnDrop(&stop);
        for _ in 0..producers {
            let queue = Queue::new(pool.clone());
            let stop = &stop;
            scope.spawn(move || {
                let jobs: Vec<NewJob> = (0..producer_batch)
                    .map(|i| NewJob::new("fetch", i.to_string().into_bytes()))
                    .collect();
                // A producer holds its connection, as PgQueuer's benchmark producer does.
                let mut conn = queue.pool().get().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    queue.on(&mut *conn).enqueue_many(&jobs).unwrap();
                }
            });
        }
        std::thread::sleep(Duration::from_secs(2));
        let commits0 = db_commits(&meter);
        let claims0 = stats.snapshot().claims;
        let (c0, t0, cpu0) = (counter.load(Ordering::Relaxed), Instant::now(), cpu_ticks());
        std::thread::sleep(window);
        let (c1, t1, cpu1) = (counter.load(Ordering::Relaxed), Instant::now(), cpu_ticks());
        let claims = stats.snapshot().claims - claims0;
        let commits = db_commits(&meter) - commits0;
        stop.store(true, Ordering::Relaxed);
        let cpu = report_cpu("flow", cpu0, cpu1, c1 - c0);
        // Statistics reach pg_stat_database about once a second: roughly the window's.
        eprintln!(
            "    flow: {:.3} commits per job; {claims} claims, {:.1} jobs per claim",
            commits as f64 / (c1 - c0).max(1) as f64,
            (c1 - c0) as f64 / claims.max(1) as f64
        );
        ((c1 - c0) as f64 / (t1 - t0).as_secs_f64(), cpu)
    });
    running.join().unwrap();
    let backlog: i64 = pool
        .get()
        .unwrap()
        .query_typed("SELECT count(*) FROM pgqueuer WHERE status = 'queued'", &[])
        .unwrap()[0]
        .get(0);
    (rate, u64::try_from(backlog).unwrap_or(0), cpu)
}

/// Sets its flag when dropped, on a panic as on a normal end.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Transactions committed in the bench database so far (flushed to the statistics about
/// once a second). Unnamed, as every statement through a transaction pooler must be.
fn db_commits(pool: &Pool) -> i64 {
    pool.get()
        .unwrap()
        .query_typed(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .unwrap()[0]
        .get(0)
}

/// The median time of one small write and its commit (an update of one row, autocommit)
/// over 200 tries: the least a claim statement can take, so that a limit of `n` slots
/// turns over at most about `n` times per commit (with `reuse_slots`, a slot is held from
/// one claim's commit to the next claim's, which ends it).
fn commit_latency(pool: &Pool) -> Duration {
    let mut conn = pool.get().unwrap();
    conn.batch_execute(
        "CREATE TABLE IF NOT EXISTS bench_commit (id int PRIMARY KEY, n bigint NOT NULL);
         INSERT INTO bench_commit VALUES (1, 0) ON CONFLICT DO NOTHING",
    )
    .unwrap();
    let mut took: Vec<Duration> = (0..200)
        .map(|_| {
            let started = Instant::now();
            conn.batch_execute("UPDATE bench_commit SET n = n + 1 WHERE id = 1")
                .unwrap();
            started.elapsed()
        })
        .collect();
    took.sort();
    took[took.len() / 2]
}

/// CPU time so far, in clock ticks: the whole machine's busy time (every core) and this
/// process's own (user + system). `None` off Linux.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = cpu.iter().take(8).sum::<u64>() - cpu.get(3)? - cpu.get(4)?;
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let fields: Vec<u64> = own
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    Some((busy, fields.iter().sum()))
}

/// Prints the CPU time per job between two [`cpu_ticks`] readings: the machine's and
/// this process's (worker and producers), so what PostgreSQL spent is the difference.
/// Returns the same for the table's note.
fn report_cpu(
    what: &str,
    before: Option<(u64, u64)>,
    after: Option<(u64, u64)>,
    jobs: u64,
) -> String {
    let (Some((busy0, own0)), Some((busy1, own1))) = (before, after) else {
        return String::new();
    };
    // Clock ticks are 10 ms on Linux: per job, in microseconds.
    let per_job = |ticks: u64| ticks as f64 * 10_000.0 / jobs.max(1) as f64;
    let (machine, own) = (per_job(busy1 - busy0), per_job(own1 - own0));
    eprintln!(
        "    {what}: CPU per job {machine:.1} us on the machine, {own:.1} us in this process"
    );
    format!("CPU/job {machine:.0} us machine, {own:.1} us process")
}

/// The server's WAL position and its count of WAL records so far. The records come from
/// the statistics, complete only for backends that have exited or been idle for a
/// second: hence the closed connections around each measurement.
fn wal_mark(pool: &Pool) -> (i64, i64) {
    let row = pool
        .get()
        .unwrap()
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, \
             (SELECT wal_records FROM pg_stat_wal)::bigint",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Prints WAL bytes and records per job between two [`wal_mark`]s (the second taken once
/// the connections that did the work have closed). Returns the same for the table's note.
fn report_wal(what: &str, before: (i64, i64), after: (i64, i64), jobs: usize) -> String {
    let bytes = (after.0 - before.0) as f64 / jobs as f64;
    let records = (after.1 - before.1) as f64 / jobs as f64;
    eprintln!("    {what}: WAL per job {bytes:.0} bytes, {records:.1} records");
    format!("WAL/job {bytes:.0} B, {records:.1} records")
}

/// `pairs` ratios of `a`'s rate to `b`'s, each pair run back to back and alternately
/// first, so that a machine slowing down (or speeding up) through the run favors
/// neither; each pair is printed, named by `label`.
fn ratios_in_pairs(
    pairs: usize,
    label: &str,
    a: impl Fn() -> f64,
    b: impl Fn() -> f64,
) -> Vec<f64> {
    (0..pairs)
        .map(|pair| {
            let (ra, rb) = if pair % 2 == 0 {
                let ra = a();
                (ra, b())
            } else {
                let rb = b();
                (a(), rb)
            };
            eprintln!(
                "    {label}, pair {}: {ra:.0} against {rb:.0} jobs/s: {:.2}",
                pair + 1,
                ra / rb
            );
            ra / rb
        })
        .collect()
}

/// The median of `ratios` and a table note reading `target` off it (see
/// [`MedianEstimate`]), with every pair listed.
fn read_target(ratios: &[f64], target: f64) -> (f64, String) {
    let estimate = MedianEstimate::of(ratios, 0.9);
    let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    let note = format!(
        "target >= {target}: {} ({}); pairs {}",
        estimate.verdict(target),
        estimate.describe(),
        listed.join(", ")
    );
    (estimate.median, note)
}

/// Queues `jobs` no-op jobs in one go and analyzes the table, as every drain starts, on
/// connections closed when it returns (so that their statistics are not counted later).
fn fill(db: &BenchDb, jobs: usize) {
    let pool = db.pool(1);
    let queue = Queue::new(pool.clone());
    let all: Vec<NewJob> = (0..jobs)
        .map(|i| NewJob::new("fetch", i.to_string().into_bytes()))
        .collect();
    for chunk in all.chunks(5_000) {
        queue.enqueue_many(chunk).unwrap();
    }
    pool.get()
        .unwrap()
        .batch_execute("VACUUM ANALYZE pgqueuer")
        .unwrap();
}

/// What PgQueuer's schema costs PostgreSQL per job at the least: no worker, only the
/// writes a job's life requires, in the plainest statements, `batch` jobs each, on
/// `lanes` connections at once. Each lane claims (the row becomes `picked` with an owner,
/// plus its `picked` log row) and commits, then ends what it claimed (the row deleted,
/// plus its `successful` log row) and commits, until nothing is left. With `log` false
/// the log rows are left out, which no PgQueuer reader would accept: the figure shows
/// what they cost.
fn floor(db: &BenchDb, jobs: usize, batch: i32, lanes: usize, log: bool) -> (f64, String) {
    let pool = db.pool(u32::try_from(lanes).unwrap() + 1);
    db.reset(&pool);
    fill(db, jobs);
    let (claim_log, end_log) = if log {
        (
            ", logged AS (INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
             SELECT id, 'picked', entrypoint, priority FROM claimed)",
            "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
             SELECT id, 'successful', entrypoint, priority FROM ended",
        )
    } else {
        ("", "SELECT 1")
    };
    let claim = format!(
        "WITH next AS (SELECT ctid AS tid FROM pgqueuer WHERE entrypoint = 'fetch' \
         AND status = 'queued' AND execute_after < NOW() ORDER BY priority DESC, id \
         LIMIT $1::int FOR UPDATE SKIP LOCKED), \
         claimed AS (UPDATE pgqueuer SET status = 'picked', updated = NOW(), \
         heartbeat = NOW(), queue_manager_id = $2 \
         WHERE ctid = ANY(ARRAY(SELECT tid FROM next)) RETURNING id, entrypoint, priority)\
         {claim_log} SELECT id FROM claimed"
    );
    let end = format!(
        "WITH ended AS (DELETE FROM pgqueuer WHERE id = ANY($1) AND queue_manager_id = $2 \
         RETURNING id, entrypoint, priority) {end_log}"
    );
    let meter = db.pool(1);
    std::thread::sleep(Duration::from_millis(1_100));
    let wal0 = wal_mark(&meter);
    let cpu0 = cpu_ticks();
    let started = Instant::now();
    let done = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..lanes {
            scope.spawn(|| {
                let mut conn = pool.get().unwrap();
                let owner = uuid::Uuid::new_v4();
                let claim = conn.prepare(&claim).unwrap();
                let end = conn.prepare(&end).unwrap();
                loop {
                    let ids: Vec<i64> = conn
                        .query(&claim, &[&batch, &owner])
                        .unwrap()
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    if ids.is_empty() {
                        break;
                    }
                    conn.execute(&end, &[&ids, &owner]).unwrap();
                    done.fetch_add(ids.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = report_cpu("floor", cpu0, cpu_ticks(), jobs as u64);
    drop(pool);
    std::thread::sleep(Duration::from_millis(1_100));
    let wal = report_wal("floor", wal0, wal_mark(&meter), jobs);
    assert_eq!(done.into_inner(), jobs as u64, "the floor missed jobs");
    (jobs as f64 / elapsed, format!("{cpu}; {wal}"))
}

/// `jobs` queued up front, then one worker drains them; jobs per second to empty.
fn drain(
    db: &BenchDb,
    jobs: usize,
    threads: usize,
    batch: usize,
    limit: impl Into<Limit>,
) -> (f64, String, Duration) {
    let pool = db.pool(4);
    db.reset(&pool);
    fill(db, jobs);
    let counter = Arc::new(AtomicU64::new(0));
    let w = worker(&pool, threads, batch, limit, &counter);
    let stats = w.stats_handle();
    // Counted on a connection of its own, once the worker's have closed (a backend's
    // statistics are complete when it exits).
    let meter = db.pool(1);
    std::thread::sleep(Duration::from_millis(1_100));
    let commits0 = db_commits(&meter);
    let wal0 = wal_mark(&meter);
    let cpu0 = cpu_ticks();
    FIRST_HANDLER_START.store(0, Ordering::Relaxed);
    let started = Instant::now();
    w.run_until_empty().unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let tail = since_epoch(Instant::now()).saturating_sub(LAST_HANDLER_END.load(Ordering::Relaxed));
    let head = FIRST_HANDLER_START
        .load(Ordering::Relaxed)
        .saturating_sub(since_epoch(started));
    eprintln!(
        "    drain: first handler {:.1} ms after the call, returned {:.1} ms after the last ended",
        head as f64 / 1e6,
        tail as f64 / 1e6
    );
    let cpu = report_cpu("drain", cpu0, cpu_ticks(), jobs as u64);
    drop((w, pool));
    std::thread::sleep(Duration::from_millis(1_100));
    let wal = report_wal("drain", wal0, wal_mark(&meter), jobs);
    let commits = db_commits(&meter) - commits0;
    eprintln!(
        "    drain: {:.3} commits per job",
        commits as f64 / jobs as f64
    );
    let figures = stats.snapshot();
    let claim_mean = figures
        .claim_duration
        .sum
        .checked_div(u32::try_from(figures.claim_duration.count.max(1)).unwrap_or(u32::MAX))
        .unwrap_or_default();
    eprintln!(
        "    drain: {} claims ({} relaxed), {} slot races lost, claim {:.2} ms mean",
        figures.claims,
        figures.relaxed_claims,
        figures.slot_races_lost,
        claim_mean.as_secs_f64() * 1e3
    );
    assert_eq!(
        counter.load(Ordering::Relaxed),
        jobs as u64,
        "the drain missed jobs"
    );
    (jobs as f64 / elapsed, format!("{cpu}; {wal}"), claim_mean)
}

/// Enqueue-to-start latencies (sorted) of `n` jobs sent `gap` apart to an idle worker.
///
/// With `PGQ_BENCH_LATENCY_DUMP=FILE`, every job's figures are appended to `FILE` in the
/// order the jobs were sent: the gap, the latency and the time the enqueue's own commit
/// took (both in µs). A tail made of slow commits is the disk's, not the worker's.
fn latency(db: &BenchDb, n: usize, gap: Duration) -> Vec<Duration> {
    let pool = db.pool(8);
    db.reset(&pool);
    let (tx, rx) = crossbeam_channel::unbounded::<(i64, Instant)>();
    let running = Worker::builder(pool.clone())
        .threads(4)
        .dequeue_timeout(Duration::from_secs(60))
        .entrypoint("ping", move |job, _ctx| {
            tx.send((job.id, Instant::now())).unwrap();
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let queue = Queue::new(pool.clone());
    // The producer's first enqueues open pool connections and prepare statements: they
    // measure the pool, not the worker.
    for _ in 0..3 {
        queue.enqueue(NewJob::new("ping", Vec::new())).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a warm-up job never started");
        std::thread::sleep(gap);
    }
    // Per job id: when the enqueue began and how long it took.
    let mut sent = std::collections::HashMap::new();
    let mut started = std::collections::HashMap::new();
    let producer_started = Instant::now();
    for i in 0..n {
        let due = producer_started + gap * u32::try_from(i).unwrap();
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let at = Instant::now();
        let id = queue.enqueue(NewJob::new("ping", Vec::new())).unwrap();
        sent.insert(id, (i, at, at.elapsed()));
        started.extend(rx.try_iter());
    }
    while started.len() < n {
        let (id, at) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a job never started");
        started.insert(id, at);
    }
    running.join().unwrap();
    let mut jobs: Vec<(usize, Duration, Duration)> = sent
        .iter()
        .map(|(id, &(i, at, commit))| (i, started[id] - at, commit))
        .collect();
    jobs.sort();
    if let Ok(path) = std::env::var("PGQ_BENCH_LATENCY_DUMP") {
        use std::io::Write;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open PGQ_BENCH_LATENCY_DUMP {path}: {e}"));
        for (_, latency, commit) in &jobs {
            let (latency, commit) = (latency.as_micros(), commit.as_micros());
            writeln!(out, "{} {latency} {commit}", gap.as_millis()).unwrap();
        }
    }
    let mut latencies: Vec<Duration> = jobs.iter().map(|j| j.1).collect();
    latencies.sort();
    latencies
}

/// `key` from the environment (or, unset, `default`; none without one) as a
/// comma-separated list of `what`; panics naming the variable on an item that does not
/// parse.
fn env_list<T: std::str::FromStr>(key: &str, default: Option<&str>, what: &str) -> Vec<T> {
    let Some(list) = std::env::var(key).ok().or(default.map(str::to_owned)) else {
        return Vec::new();
    };
    list.split(',')
        .map(str::trim)
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{key} is a comma-separated list of {what}: {s:?}"))
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() {
    let _ = env_logger::try_init();
    std::sync::LazyLock::force(&EPOCH);
    let quick = env_or("PGQ_BENCH_QUICK", 0) == 1;
    let window =
        Duration::from_secs_f64(env_or("PGQ_BENCH_WINDOW", if quick { 1.0 } else { 10.0 }));
    let drain_jobs: usize = env_or("PGQ_BENCH_DRAIN_JOBS", if quick { 2_000 } else { 50_000 });
    let shapes: String = env_or(
        "PGQ_BENCH_SHAPES",
        "flow,drain,floor,drain-floor,limits,limits-drain,rates,latency,tls,memory,pgbouncer"
            .to_owned(),
    );
    let wants = |s: &str| shapes.split(',').any(|x| x.trim() == s);
    let durability = match std::env::var("PGQ_BENCH_DURABILITY") {
        Ok(level) => format!(", durability {level}"),
        Err(_) => String::new(),
    };
    let db = BenchDb::create();
    let mut rows: Vec<Row> = Vec::new();
    let mut record = |shape: String, value: f64, unit: &'static str, note: String| {
        eprintln!("  {shape:<34} {value:>10.1} {unit} {note}");
        rows.push(Row {
            shape,
            value,
            unit,
            note,
        });
    };
    eprintln!("throughput bench: window {window:?}, drain {drain_jobs} jobs");
    if wants("flow") {
        let shapes: &[(&str, usize, usize, usize, usize)] = &[
            ("flow pgqueuer (1 producer x10, 16 thr x10)", 16, 10, 1, 10),
            ("flow 1 thread, batch 1", 1, 1, 1, 10),
            ("flow 4 threads, batch 10", 4, 10, 1, 10),
            ("flow 16 threads, batch 50", 16, 50, 1, 100),
            (
                "flow pgbench-like 4 producers x10, 32 thr x10",
                32,
                10,
                4,
                10,
            ),
            (
                "flow pgbench-like 8 producers x10, 32 thr x10",
                32,
                10,
                8,
                10,
            ),
            (
                "flow pgbench-like 8 producers x10, 64 thr x10",
                64,
                10,
                8,
                10,
            ),
            (
                "flow 64 threads, batch 64, 2 producers x100",
                64,
                64,
                2,
                100,
            ),
        ];
        // `PGQ_BENCH_FLOW=text` runs the shapes whose name contains it (`pgqueuer`:
        // PgQueuer's shape only).
        let only = std::env::var("PGQ_BENCH_FLOW").unwrap_or_default();
        for &(name, threads, batch, producers, pbatch) in shapes {
            if !name.contains(only.as_str()) {
                continue;
            }
            let (rate, backlog, cpu) = flow(&db, threads, batch, producers, pbatch, 0, window);
            record(
                name.into(),
                rate,
                "jobs/s",
                format!("backlog after: {backlog}; {cpu}"),
            );
        }
    }
    if wants("drain") {
        let mut drains = vec![(4, 10), (16, 50), (64, 64), (128, 128)];
        if let Ok(threads) = std::env::var("PGQ_BENCH_DRAIN_THREADS") {
            // One drain shape only: that many threads, batch of the same size.
            let threads: usize = threads
                .parse()
                .expect("PGQ_BENCH_DRAIN_THREADS is a number");
            let batch = env_or("PGQ_BENCH_DRAIN_BATCH", threads);
            drains = vec![(threads, batch)];
        }
        for (threads, batch) in drains {
            let (rate, note, _) = drain(&db, drain_jobs, threads, batch, 0);
            record(
                format!("drain {drain_jobs} ({threads} thr, batch {batch}){durability}"),
                rate,
                "jobs/s",
                note,
            );
        }
    }
    if wants("limits") {
        let limits = [0u32, 10, 1_000, 5_000];
        let mut rates = Vec::new();
        for limit in limits {
            let (rate, backlog, _) = flow(&db, 16, 10, 1, 10, limit, window);
            rates.push(rate);
            let name = if limit == 0 {
                "limits: unlimited".to_owned()
            } else {
                format!("limits: limit {limit}")
            };
            record(name, rate, "jobs/s", format!("backlog after: {backlog}"));
        }
        for (i, limit) in limits.iter().enumerate().skip(2) {
            record(
                format!("limits: limit {limit} / unlimited"),
                rates[i] / rates[0],
                "ratio",
                "target >= 0.9 (a limit that does not bind)".into(),
            );
        }
        record(
            "limits: limit 10 / unlimited".into(),
            rates[1] / rates[0],
            "ratio",
            "target >= 0.5".into(),
        );
    }
    if wants("rates") {
        // PgQueuer's flow shape, alternately without a limit and with a rate limit that
        // does not bind (100,000 a second, above what the flow reaches), three rounds;
        // then a rate that binds, against the starts it allows in the window.
        let free = RateLimit::per_second(100_000);
        let (mut unlimited, mut loose) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            unlimited.push(flow(&db, 16, 10, 1, 10, 0, window).0);
            loose.push(flow(&db, 16, 10, 1, 10, free, window).0);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (unlimited, loose) = (median(&mut unlimited), median(&mut loose));
        record(
            "rates: unlimited (median of 3)".into(),
            unlimited,
            "jobs/s",
            String::new(),
        );
        record(
            format!("rates: {free}, not binding (median of 3)"),
            loose,
            "jobs/s",
            String::new(),
        );
        record(
            format!("rates: {free} / unlimited"),
            loose / unlimited,
            "ratio",
            "target >= 0.8 (a rate limit that does not bind)".into(),
        );
        let binding = RateLimit::per_second(500);
        let (rate, backlog, _) = flow(&db, 16, 10, 1, 10, binding, window);
        record(
            format!("rates: {binding}, binding"),
            rate,
            "jobs/s",
            format!(
                "backlog after: {backlog}; {:.1}% of the rate (target >= 95%)",
                100.0 * rate / 500.0
            ),
        );
    }
    if wants("floor") {
        let batch: i32 = env_or("PGQ_BENCH_FLOOR_BATCH", 128);
        // More connections than the default two show whether the server, not the
        // statements' round trips, bounds the floor.
        let more: Vec<usize> = env_list("PGQ_BENCH_FLOOR_CONNECTIONS", None, "counts");
        let shapes = [(1, true), (2, true), (2, false)]
            .into_iter()
            .chain(more.into_iter().map(|lanes| (lanes, true)));
        for (lanes, log) in shapes {
            let (rate, note) = floor(&db, drain_jobs, batch, lanes, log);
            let what = if log {
                "required writes"
            } else {
                "without log rows"
            };
            record(
                format!("floor {drain_jobs}: {what} ({lanes} conn, batch {batch}){durability}"),
                rate,
                "jobs/s",
                note,
            );
        }
    }
    if wants("drain-floor") {
        let threads: usize = env_or("PGQ_BENCH_DRAIN_THREADS", 128);
        let batch: usize = env_or("PGQ_BENCH_DRAIN_BATCH", threads);
        let pairs: usize = env_or("PGQ_BENCH_PAIRS", if quick { 1 } else { 9 });
        let floor_batch: i32 = env_or("PGQ_BENCH_FLOOR_BATCH", 128);
        let ratios = ratios_in_pairs(
            pairs.max(1),
            "drain / floor",
            || drain(&db, drain_jobs, threads, batch, 0).0,
            || floor(&db, drain_jobs, floor_batch, 2, true).0,
        );
        let (median, note) = read_target(&ratios, 0.85);
        record(
            format!(
                "drain {drain_jobs} ({threads} thr, batch {batch}) / floor (2 conn), median of {}",
                ratios.len()
            ),
            median,
            "ratio",
            note,
        );
    }
    if wants("limits-drain") {
        // The limits without a producer competing for the machine: a drain of queued
        // jobs by 16 threads claiming 10.
        for limit in env_list::<u32>(
            "PGQ_BENCH_LIMITS",
            Some("0,10,1000,5000"),
            "limits (0: none)",
        ) {
            let (rate, note, claim_mean) = drain(&db, drain_jobs, 16, 10, limit);
            let name = if limit == 0 {
                "limits drain: unlimited".to_owned()
            } else {
                format!("limits drain: limit {limit}")
            };
            record(name, rate, "jobs/s", note);
            if limit > 0 && limit <= 16 {
                // A binding limit: its slots, not the threads, bound the rate. With slot
                // reuse a slot turns over in one claim (the ends it folds in, the jobs it
                // takes, and their commit), so the bound is the limit over the claim's
                // round trip; a bare commit is printed beside it, to show how little of
                // the round trip the disk's flush is.
                let commit = commit_latency(&db.pool(1));
                let bound = f64::from(limit) / claim_mean.as_secs_f64().max(1e-6);
                record(
                    format!("limits drain: limit {limit}, bound"),
                    bound,
                    "jobs/s",
                    format!(
                        "{limit} slots / one claim with its commit ({:.2} ms mean; a bare \
                         commit {:.2} ms median); reached {:.0}% (target >= 70%)",
                        claim_mean.as_secs_f64() * 1e3,
                        commit.as_secs_f64() * 1e3,
                        100.0 * rate / bound
                    ),
                );
            }
        }
        let pairs: usize = env_or("PGQ_BENCH_LIMIT_PAIRS", 0);
        for limit in env_list::<u32>(
            "PGQ_BENCH_LIMITS",
            Some("0,10,1000,5000"),
            "limits (0: none)",
        ) {
            if pairs == 0 || limit <= 16 {
                continue;
            }
            let ratios = ratios_in_pairs(
                pairs,
                &format!("limit {limit} / unlimited"),
                || drain(&db, drain_jobs, 16, 10, limit).0,
                || drain(&db, drain_jobs, 16, 10, 0).0,
            );
            let (median, note) = read_target(&ratios, 0.9);
            record(
                format!("limits drain: limit {limit} / unlimited, median of {pairs}"),
                median,
                "ratio",
                note,
            );
        }
    }
    if wants("latency") {
        let n = env_or("PGQ_BENCH_LATENCY_JOBS", if quick { 20 } else { 200 });
        let idle = latency(&db, n, Duration::from_millis(50));
        record(
            "latency idle: median".into(),
            percentile(&idle, 0.5).as_secs_f64() * 1e3,
            "ms",
            format!("{n} jobs, 50 ms apart"),
        );
        record(
            "latency idle: p99".into(),
            percentile(&idle, 0.99).as_secs_f64() * 1e3,
            "ms",
            String::new(),
        );
        let trickle = latency(&db, n * 5, Duration::from_millis(5));
        record(
            "latency trickle 200/s: median".into(),
            percentile(&trickle, 0.5).as_secs_f64() * 1e3,
            "ms",
            format!("{} jobs", n * 5),
        );
        record(
            "latency trickle 200/s: p99".into(),
            percentile(&trickle, 0.99).as_secs_f64() * 1e3,
            "ms",
            String::new(),
        );
    }
    if wants("tls") {
        // Over TLS (`sslmode=require`, this server's own certificate) against plaintext,
        // alternately, so that both see the same machine.
        let rounds = if quick { 1 } else { 3 };
        let (mut drains, mut flows) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for _ in 0..rounds {
            for (i, mode) in ["disable", "require"].into_iter().enumerate() {
                db.sslmode.set(mode);
                drains[i].push(drain(&db, drain_jobs, 16, 10, 0).0);
                flows[i].push(flow(&db, 16, 10, 1, 10, 0, window).0);
            }
        }
        db.sslmode.set("disable");
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        for (what, rates) in [
            ("drain (16 thr, batch 10)", &drains),
            ("pgqueuer flow", &flows),
        ] {
            let (plain, tls) = (mean(&rates[0]), mean(&rates[1]));
            record(
                format!("tls: {what}, plaintext"),
                plain,
                "jobs/s",
                format!("{rounds} rounds"),
            );
            record(
                format!("tls: {what}, sslmode=require"),
                tls,
                "jobs/s",
                String::new(),
            );
            record(
                format!("tls: {what}, TLS / plaintext"),
                tls / plain,
                "ratio",
                "target >= 0.9".into(),
            );
        }
    }
    if wants("pgbouncer") {
        let (host, port) = db.upstream();
        let bouncer = pgbouncer::PgBouncer::start(pgbouncer::Mode::Transaction, (&host, port), 8);
        let direct_dsn = format!("{} sslmode=disable", db.dsn);
        let options = pgqueuer::ConnectOptions {
            max_size: 6,
            min_idle: 0,
            pooler: Pooler::Transaction,
            listen_dsn: Some(direct_dsn.clone()),
            ..Default::default()
        };
        let through = pgqueuer::connect_with(&bouncer.dsn(&db.name), &options).unwrap();
        // The same pool straight to PostgreSQL, statements unnamed as through the pooler:
        // it splits the pooler's cost into parsing and planning every execution (this
        // one) and the extra hop (the rest).
        let unnamed = pgqueuer::connect_with(&direct_dsn, &options).unwrap();
        let (direct_rate, _, _) = flow(&db, 16, 10, 1, 10, 0, window);
        let (unnamed_rate, _, _) = flow_on(&unnamed, &db, 16, 10, 1, 10, 0, window);
        let (bouncer_rate, backlog, _) = flow_on(&through, &db, 16, 10, 1, 10, 0, window);
        drop(through);
        drop(bouncer);
        let bouncer = pgbouncer::PgBouncer::start_release(
            pgbouncer::Release::Prepared,
            pgbouncer::Mode::Transaction,
            (&host, port),
            8,
        );
        let prepared_options = pgqueuer::ConnectOptions {
            pooler: Pooler::TransactionPrepared,
            ..options.clone()
        };
        let through = pgqueuer::connect_with(&bouncer.dsn(&db.name), &prepared_options).unwrap();
        let (prepared_rate, prepared_backlog, _) = flow_on(&through, &db, 16, 10, 1, 10, 0, window);
        record(
            "pgbouncer: direct (pgqueuer flow)".into(),
            direct_rate,
            "jobs/s",
            String::new(),
        );
        record(
            "pgbouncer: direct, statements unnamed as through a pooler".into(),
            unnamed_rate,
            "jobs/s",
            format!("{:.2}x direct", unnamed_rate / direct_rate),
        );
        record(
            "pgbouncer: transaction mode".into(),
            bouncer_rate,
            "jobs/s",
            format!("backlog after: {backlog}"),
        );
        record(
            "pgbouncer: transaction / direct".into(),
            bouncer_rate / direct_rate,
            "ratio",
            "same run".into(),
        );
        record(
            "pgbouncer 1.24: transaction, prepared statements kept".into(),
            prepared_rate,
            "jobs/s",
            format!("backlog after: {prepared_backlog}"),
        );
        record(
            "pgbouncer 1.24: transaction, prepared / direct".into(),
            prepared_rate / direct_rate,
            "ratio",
            "same run; target >= 0.8".into(),
        );
        drop(through);
        drop(unnamed);
        drop(bouncer);
    }
    if wants("memory") {
        if !wants("flow") {
            flow(&db, 16, 10, 1, 10, 0, window);
        }
        record(
            "peak RSS (16-thread worker + producers)".into(),
            peak_rss_mib(),
            "MiB",
            "target < 30".into(),
        );
    }
    println!();
    println!("| shape | value | unit | note |");
    println!("|---|---:|---|---|");
    for r in &rows {
        println!("| {} | {:.2} | {} | {} |", r.shape, r.value, r.unit, r.note);
    }
    if let Ok(path) = std::env::var("PGQ_BENCH_JSON") {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        for r in &rows {
            let line = serde_json::json!({"impl": "rust", "shape": r.shape, "value": r.value, "unit": r.unit, "note": r.note});
            writeln!(file, "{line}").unwrap();
        }
    }
}
