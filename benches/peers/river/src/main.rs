//! Drains N pre-inserted no-op jobs with riverqueue and prints one JSON line.
//!
//! Usage: `pgqueuer-peer-river <connection string> [jobs] [max_workers] [fetch cooldown ms]`
//!
//! The database is prepared as for every system: schema migrated, CHECKPOINT on empty
//! tables, one bulk insert (`insert_many` in chunks), VACUUM ANALYZE.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use riverqueue::migrate::PostgresMigrator;
use riverqueue::sqlx::PgPool;
use riverqueue::{BoxError, Client, Job, JobArgs, QueueConfig, WorkContext, WorkOutcome, Workers};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "noop")]
struct Noop {
    i: usize,
}

static DONE: AtomicUsize = AtomicUsize::new(0);

async fn noop(_context: WorkContext, _job: Job<Noop>) -> Result<WorkOutcome, BoxError> {
    DONE.fetch_add(1, Ordering::Relaxed);
    Ok(WorkOutcome::Complete)
}

/// Busy jiffies of the whole machine (user through steal, without idle and iowait).
fn machine_busy() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    fields.iter().sum::<u64>() - fields[3] - fields[4]
}

/// This process's user and system jiffies.
fn own_cpu() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let after = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    fields[11] + fields[12]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let conn = args.get(1).ok_or(
        "usage: pgqueuer-peer-river <connection string> [jobs] [max_workers] [cooldown ms]",
    )?;
    let jobs: usize = args.get(2).map_or(Ok(50_000), |a| a.parse())?;
    let max_workers: usize = args.get(3).map_or(Ok(100), |a| a.parse())?;
    let cooldown_ms: u64 = args.get(4).map_or(Ok(1), |a| a.parse())?;

    let pool = PgPool::connect(conn).await?;
    PostgresMigrator::new(pool.clone()).migrate_up().await?;
    riverqueue::sqlx::query("CHECKPOINT").execute(&pool).await?;

    let mut workers = Workers::new();
    workers.add_fn(noop)?;
    let cooldown = Duration::from_millis(cooldown_ms);
    let client = Client::builder(pool.clone())
        .workers(workers)
        .fetch_cooldown(cooldown)
        .queue(
            "default",
            QueueConfig::new(max_workers).with_fetch_poll_interval(Duration::from_millis(100)),
        )
        .build()?;
    for start in (0..jobs).step_by(5_000) {
        let end = (start + 5_000).min(jobs);
        client.insert_many((start..end).map(|i| Noop { i })).await?;
    }
    riverqueue::sqlx::query("VACUUM ANALYZE")
        .execute(&pool)
        .await?;

    let (t0, m0, p0) = (Instant::now(), machine_busy(), own_cpu());
    let mut run = client.start()?;
    while DONE.load(Ordering::Relaxed) < jobs {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let (m1, p1) = (machine_busy(), own_cpu());
    run.stop().await?;
    let per_job = |ticks: u64| ticks as f64 / 100.0 / jobs as f64 * 1e6;
    println!(
        "{{\"system\":\"river (riverqueue)\",\"version\":\"0.5.0\",\"settings\":{{\"max_workers\":{max_workers},\"fetch_cooldown_ms\":{cooldown_ms}}},\"shape\":\"drain {jobs}\",\"jobs_per_s\":{},\"cpu_per_job_us\":{{\"machine\":{},\"process\":{}}}}}",
        jobs as f64 / secs,
        per_job(m1 - m0),
        per_job(p1 - p0)
    );
    Ok(())
}
