//! Quickstart: install the schema, enqueue jobs, and drain them with a worker whose
//! `resize` entrypoint runs at most two jobs at a time across every worker.
//!
//! Run: `cargo run --example quickstart`
//!
//! Connects to `PGQUEUER_DSN`, `PGDSN` or `DATABASE_URL` (the first one set), as the
//! library does; when none is set, to a database `pgqueuer_quickstart` on 127.0.0.1:5432
//! as `postgres`, which it creates if missing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::{Entrypoint, NewJob, Queue, Worker};

fn dsn() -> Result<String, pgqueuer::Error> {
    for var in ["PGQUEUER_DSN", "PGDSN", "DATABASE_URL"] {
        if let Ok(dsn) = std::env::var(var)
            && !dsn.trim().is_empty()
        {
            println!("connecting to {var}");
            return Ok(dsn);
        }
    }
    // Make the quickstart's own database on the local server.
    let admin = pgqueuer::connect("postgres://postgres@127.0.0.1:5432/postgres")?;
    let mut conn = admin.get()?;
    let exists = conn
        .query_opt(
            "SELECT 1 FROM pg_database WHERE datname = 'pgqueuer_quickstart'",
            &[],
        )?
        .is_some();
    if !exists {
        conn.batch_execute("CREATE DATABASE pgqueuer_quickstart")?;
    }
    Ok("postgres://postgres@127.0.0.1:5432/pgqueuer_quickstart".into())
}

fn main() -> Result<(), pgqueuer::Error> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let dsn = dsn()?;
    let pool = pgqueuer::connect_with(
        &dsn,
        &pgqueuer::ConnectOptions {
            max_size: 8,
            ..Default::default()
        },
    )?;

    // 1. Install or upgrade the schema (safe to run at every start, from every process).
    let report = pgqueuer::upgrade(pool.get()?.client())?;
    println!(
        "schema: {}",
        if report.is_noop() {
            "up to date"
        } else {
            "installed/upgraded"
        }
    );

    // 2. Enqueue: one statement per batch.
    let queue = Queue::new(pool.clone());
    let emails: Vec<NewJob> = (0..200)
        .map(|i| NewJob::new("email", format!("user{i}@example.com").into_bytes()))
        .collect();
    let images: Vec<NewJob> = (0..20)
        .map(|i| NewJob::new("resize", format!("image-{i}.png").into_bytes()).priority(5))
        .collect();
    queue.enqueue_many(&emails)?;
    queue.enqueue_many(&images)?;
    println!(
        "enqueued {} emails and {} images",
        emails.len(),
        images.len()
    );

    // 3. A worker: handlers run on a fixed thread pool (10 threads by default, each
    //    claim up to 10 jobs); `resize` is limited to 2 at once across every worker.
    let done = Arc::new(AtomicUsize::new(0));
    let (d1, d2) = (done.clone(), done.clone());
    let worker = Worker::builder(pool)
        .entrypoint("email", move |job, _ctx| {
            let _address = job.payload_str().unwrap_or_default();
            d1.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .entrypoint(
            Entrypoint::new("resize").concurrency_limit(2),
            move |_job, ctx| {
                for _ in 0..5 {
                    if ctx.is_cancelled() {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                d2.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )
        .build()?;

    // 4. Drain the queue, printing progress.
    let total = emails.len() + images.len();
    let started = Instant::now();
    let summary = std::thread::scope(|scope| {
        let progress = scope.spawn(|| {
            while done.load(Ordering::Relaxed) < total
                && started.elapsed() < Duration::from_secs(60)
            {
                println!("  {:>4}/{total} jobs done", done.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        let summary = worker.run_until_empty();
        let _ = progress.join();
        summary
    })?;
    println!(
        "done in {:.2?}: {} succeeded, {} failed, {} retried",
        started.elapsed(),
        summary.succeeded,
        summary.failed,
        summary.retried
    );
    Ok(())
}
