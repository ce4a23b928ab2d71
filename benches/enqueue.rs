//! Enqueue rate: one job per call against batches of 10, 100 and 1000 jobs per call
//! (each batch one statement), printed as a table of jobs/s with the batch/single ratio.
//!
//! Run: `cargo bench --bench enqueue`
//!
//! - `PGQUEUER_BENCH_DSN`: an admin DSN (a role that may create databases); default
//!   `postgres://postgres@127.0.0.1:5432/postgres`.
//! - `PGQ_BENCH_JOBS`: jobs enqueued per mode (default 5000; CI runs a tiny pass with
//!   e.g. `PGQ_BENCH_JOBS=50`).
//! - `PGQ_BENCH_PAYLOAD`: payload bytes per job (default 64).
//!
//! It creates its own database `pgq_bench_enqueue_<pid>`, installs the schema with
//! `upgrade()`, and drops the database at the end (also when a step fails). Every call
//! goes through the pool as an application's would, including its checkout probe.

use std::time::{Duration, Instant};

use pgqueuer::postgres::{Client, Config, NoTls};
use pgqueuer::{Manager, NewJob, Queue};

type BoxError = Box<dyn std::error::Error>;

/// Drops the benchmark database when the run ends, however it ends.
struct TempDatabase {
    admin: Config,
    name: String,
}

impl TempDatabase {
    fn create(admin: &Config) -> Result<TempDatabase, BoxError> {
        let name = format!("pgq_bench_enqueue_{}", std::process::id());
        let mut client = admin.connect(NoTls)?;
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
        client.batch_execute(&format!("CREATE DATABASE {name}"))?;
        Ok(TempDatabase {
            admin: admin.clone(),
            name,
        })
    }

    fn config(&self) -> Config {
        let mut config = self.admin.clone();
        config.dbname(&self.name);
        config
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        let dropped = self.admin.connect(NoTls).and_then(|mut c| {
            c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
        });
        if let Err(e) = dropped {
            eprintln!("could not drop {}: {e:?}", self.name);
        }
    }
}

fn env_usize(name: &str, default: usize) -> Result<usize, BoxError> {
    match std::env::var(name) {
        Ok(v) => Ok(v.trim().parse().map_err(|e| format!("{name}={v:?}: {e}"))?),
        Err(_) => Ok(default),
    }
}

fn main() -> Result<(), BoxError> {
    let dsn = std::env::var("PGQUEUER_BENCH_DSN")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let jobs = env_usize("PGQ_BENCH_JOBS", 5000)?.max(1);
    let payload_len = env_usize("PGQ_BENCH_PAYLOAD", 64)?;
    let mut admin: Config = dsn.parse()?;
    admin.connect_timeout(Duration::from_secs(10));

    let db = TempDatabase::create(&admin)?;
    let mut client = db.config().connect(NoTls)?;
    pgqueuer::upgrade(&mut client)?;
    let pool = pgqueuer::r2d2::Pool::builder()
        .max_size(2)
        .min_idle(Some(1))
        .build(Manager::new(db.config()))?;
    let queue = Queue::new(pool);
    let payload = vec![b'x'; payload_len];
    let job =
        |i: usize| NewJob::new("bench", payload.clone()).priority(i32::from(i.is_multiple_of(3)));

    let settings = client.query_one(
        "SELECT current_setting('server_version'), current_setting('fsync'), \
         current_setting('synchronous_commit')",
        &[],
    )?;
    println!(
        "enqueue benchmark: {jobs} jobs per mode, {payload_len}-byte payloads; \
         PostgreSQL {} (fsync={}, synchronous_commit={})",
        settings.get::<_, String>(0),
        settings.get::<_, String>(1),
        settings.get::<_, String>(2),
    );

    // Warm up the pool's connection and its prepared statement.
    for i in 0..10 {
        queue.enqueue(job(i))?;
    }

    let mut results: Vec<(String, usize, Duration)> = Vec::new();
    for batch in [1usize, 10, 100, 1000] {
        reset(&mut client)?;
        let all: Vec<NewJob> = (0..jobs).map(job).collect();
        let started = Instant::now();
        if batch == 1 {
            for j in &all {
                queue.enqueue(j)?;
            }
        } else {
            for chunk in all.chunks(batch) {
                queue.enqueue_many(chunk)?;
            }
        }
        let elapsed = started.elapsed();
        let stored: i64 = client
            .query_one("SELECT count(*) FROM pgqueuer", &[])?
            .get(0);
        assert_eq!(
            usize::try_from(stored)?,
            jobs,
            "every job of the {batch} run was stored"
        );
        let mode = if batch == 1 {
            "single (enqueue)".to_owned()
        } else {
            format!("batch of {batch} (enqueue_many)")
        };
        results.push((mode, jobs, elapsed));
    }
    reset(&mut client)?;

    let single_rate = rate(results[0].1, results[0].2);
    println!();
    println!(
        "{:<28} {:>8} {:>10} {:>12} {:>10}",
        "mode", "jobs", "seconds", "jobs/s", "vs single"
    );
    for (mode, n, elapsed) in &results {
        let r = rate(*n, *elapsed);
        println!(
            "{:<28} {:>8} {:>10.3} {:>12.0} {:>9.1}x",
            mode,
            n,
            elapsed.as_secs_f64(),
            r,
            r / single_rate
        );
    }
    drop(queue);
    drop(client);
    drop(db);
    Ok(())
}

fn reset(client: &mut Client) -> Result<(), BoxError> {
    client.batch_execute("TRUNCATE pgqueuer, pgqueuer_log")?;
    client.batch_execute("VACUUM ANALYZE pgqueuer")?;
    Ok(())
}

fn rate(jobs: usize, elapsed: Duration) -> f64 {
    jobs as f64 / elapsed.as_secs_f64().max(1e-9)
}
