//! Claim+complete rate of the slot-claiming dequeue: unlimited vs limit 10 vs limit 5,000.
//!
//! Run: `cargo bench --bench dequeue` (needs PostgreSQL; admin DSN from
//! `PGQUEUER_BENCH_DSN`, default `postgres://postgres@127.0.0.1:5432/postgres`).
//! Sizes: `PGQ_BENCH_JOBS` (jobs per run, default 20000), `PGQ_BENCH_ROUNDS` (default 3),
//! `PGQ_BENCH_THREADS` (default 2) and `PGQ_BENCH_BATCH` (default 5). Threads × batch
//! stays at or under 10 so limit 10 never throttles: the runs compare the cost of the
//! claim statement itself. Creates and drops its own database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::postgres::{Client, Config, NoTls};
use pgqueuer::{Claimer, Outcome, Status};

#[allow(
    dead_code,
    reason = "shared by the benchmarks; this one reads no memory figure"
)]
#[path = "support/common.rs"]
mod common;

use common::env_or;

struct BenchDb {
    admin: Client,
    name: String,
    config: Config,
}

impl BenchDb {
    fn create() -> BenchDb {
        let admin_dsn = std::env::var("PGQUEUER_BENCH_DSN")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let admin_config: Config = admin_dsn.parse().expect("PGQUEUER_BENCH_DSN parses");
        let mut admin = admin_config
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {admin_dsn}: {e:?} (start it, or set PGQUEUER_BENCH_DSN)"));
        let name = format!("pgqbench_dequeue_{}", std::process::id());
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let mut config = admin_config.clone();
        config.dbname(&name);
        let mut client = config.connect(NoTls).unwrap();
        pgqueuer::upgrade(&mut client).unwrap();
        BenchDb {
            admin,
            name,
            config,
        }
    }
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        let _ = self.admin.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// Enqueues `jobs`, then `threads` workers claim batches and complete them until the
/// queue is empty. Returns jobs per second.
fn run(
    db: &BenchDb,
    pool: &pgqueuer::Pool,
    limit: u32,
    jobs: i64,
    threads: usize,
    batch: usize,
) -> f64 {
    let mut client = db.config.connect(NoTls).unwrap();
    client
        .batch_execute("TRUNCATE pgqueuer, pgqueuer_log")
        .unwrap();
    client
        .execute(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status) \
             SELECT 0, 'bench', NULL, 'queued' FROM generate_series(1, $1::bigint)",
            &[&jobs],
        )
        .unwrap();
    client.batch_execute("VACUUM ANALYZE pgqueuer").unwrap();
    let (claims, lost) = (AtomicU64::new(0), AtomicU64::new(0));
    let (claim_us, complete_us) = (AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let claimer = Claimer::builder()
                    .entrypoint("bench", limit)
                    .build()
                    .unwrap();
                let mut conn = pool.get().unwrap();
                conn.plan_with_indexes().unwrap();
                let mut empty_in_a_row = 0;
                loop {
                    let t0 = Instant::now();
                    let claim = claimer.claim(&mut conn, batch).unwrap();
                    claim_us.fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                    if claim.lost_race() {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                    if claim.jobs.is_empty() && claim.lost_race() {
                        // Another claim took the candidates first: claim again at once.
                        continue;
                    }
                    if claim.jobs.is_empty() {
                        empty_in_a_row += 1;
                        if empty_in_a_row > 3 {
                            return;
                        }
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                    claims.fetch_add(1, Ordering::Relaxed);
                    empty_in_a_row = 0;
                    let outcomes: Vec<Outcome> = claim
                        .jobs
                        .iter()
                        .map(|j| Outcome {
                            id: j.id,
                            status: Status::Successful,
                            traceback: None,
                        })
                        .collect();
                    let t0 = Instant::now();
                    claimer.complete(&mut conn, &outcomes).unwrap();
                    complete_us.fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let left: i64 = client
        .query_one("SELECT count(*) FROM pgqueuer", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the run left jobs behind");
    eprintln!(
        "    limit {limit}: {} claims, {} lost races, claim {} us, complete {} us",
        claims.load(Ordering::Relaxed),
        lost.load(Ordering::Relaxed),
        claim_us.load(Ordering::Relaxed) / claims.load(Ordering::Relaxed).max(1),
        complete_us.load(Ordering::Relaxed) / claims.load(Ordering::Relaxed).max(1)
    );
    jobs as f64 / elapsed
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let jobs: i64 = env_or("PGQ_BENCH_JOBS", 20_000);
    let rounds: usize = env_or("PGQ_BENCH_ROUNDS", 3);
    let threads: usize = env_or("PGQ_BENCH_THREADS", 2);
    let batch: usize = env_or("PGQ_BENCH_BATCH", 5);
    let db = BenchDb::create();
    let options = pgqueuer::ConnectOptions {
        max_size: u32::try_from(threads).unwrap() + 1,
        ..Default::default()
    };
    let dsn = format!(
        "host=127.0.0.1 port={} user={} dbname={} sslmode=disable",
        db.config.get_ports().first().copied().unwrap_or(5432),
        db.config.get_user().unwrap_or("postgres"),
        db.name
    );
    let pool = pgqueuer::connect_with(&dsn, &options).unwrap();
    let modes: [(&str, u32); 3] = [("unlimited", 0), ("limit 10", 10), ("limit 5000", 5000)];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    eprintln!(
        "dequeue bench: {jobs} jobs per run, {rounds} rounds, {threads} threads x batch {batch}"
    );
    for round in 1..=rounds {
        for (i, (name, limit)) in modes.iter().enumerate() {
            let rate = run(&db, &pool, *limit, jobs, threads, batch);
            eprintln!("  round {round}: {name:<11} {rate:>9.0} jobs/s");
            rates[i].push(rate);
        }
    }
    let medians: Vec<f64> = rates.into_iter().map(median).collect();
    println!();
    println!("| mode        | claim+complete jobs/s (median of {rounds}) | vs unlimited |");
    println!("|-------------|-------------------------------:|-------------:|");
    for ((name, _), rate) in modes.iter().zip(&medians) {
        println!(
            "| {name:<11} | {rate:>30.0} | {:>11.2}x |",
            rate / medians[0]
        );
    }
    let ratio = medians[2] / medians[1];
    println!();
    println!("limit 5000 / limit 10 = {ratio:.3} (target: within 0.90..1.10)");
}
