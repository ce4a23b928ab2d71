//! A configurable worker process: entrypoints with limits and simulated work time,
//! thread count, batch size, drain or continuous mode, SIGINT/SIGTERM for a clean stop.
//!
//! Run: `cargo run --example worker -- --entrypoint email --entrypoint pdf:2:50 --threads 8`
//!
//! Options:
//!   --dsn DSN                 connection (default: PGQUEUER_DSN, DATABASE_URL, PG* variables)
//!   --entrypoint NAME[:LIMIT[:MILLIS]]   handle NAME, at most LIMIT at once (0 = no limit),
//!                             each job sleeping MILLIS (repeatable; default `default:0:0`)
//!   --rate NAME=N/WINDOW      at most N starts of NAME in any WINDOW, fleet-wide
//!                             (`api=50/s`, `api=1000/m`; repeatable, windows stack)
//!   --threads N               executor threads (default 10, the library's)
//!   --batch N                 most jobs per claim (default 10)
//!   --heartbeat-timeout SECS  (default 30)
//!   --dequeue-timeout SECS    (default 30)
//!   --enqueue N               enqueue N jobs spread over the entrypoints first
//!   --drain                   stop when the queue is empty (default: run until signalled)
//!   --record                  record each run in table `pgqueuer_example_runs`
//!                             (job_id, entrypoint, started, finished, pid) for checks;
//!                             `pid` is this process's id; `finished` is the server's
//!                             clock when the row is written. A failed write is retried
//!                             for up to a minute (the server may be restarting).
//!   --pool N                  most pool connections (default threads + 3)
//!   --hold-connection         each handler holds a pool connection while it runs, as
//!                             handlers that query the database do; with --record, its
//!                             start is the server's clock read on that connection
//!   --quiet                   no progress lines

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::postgres::types::Type;
use pgqueuer::{Entrypoint, NewJob, Queue, Worker};

struct Options {
    dsn: String,
    entrypoints: Vec<(String, u32, u64)>,
    rates: Vec<(String, pgqueuer::RateLimit)>,
    threads: usize,
    batch: usize,
    heartbeat_timeout: f64,
    dequeue_timeout: f64,
    enqueue: usize,
    drain: bool,
    record: bool,
    pool: Option<u32>,
    hold_connection: bool,
    quiet: bool,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        dsn: String::new(),
        entrypoints: Vec::new(),
        rates: Vec::new(),
        threads: 10,
        batch: 10,
        heartbeat_timeout: 30.0,
        dequeue_timeout: 30.0,
        enqueue: 0,
        drain: false,
        record: false,
        pool: None,
        hold_connection: false,
        quiet: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        let number = |v: String, what: &str| {
            v.parse::<f64>()
                .map_err(|_| format!("{what}: {v:?} is not a number"))
        };
        match arg.as_str() {
            "--dsn" => o.dsn = value()?,
            "--entrypoint" => {
                let spec = value()?;
                let mut parts = spec.split(':');
                let name = parts.next().unwrap_or_default().to_owned();
                let limit = parts
                    .next()
                    .unwrap_or("0")
                    .parse()
                    .map_err(|_| format!("bad limit in {spec:?}"))?;
                let millis = parts
                    .next()
                    .unwrap_or("0")
                    .parse()
                    .map_err(|_| format!("bad millis in {spec:?}"))?;
                o.entrypoints.push((name, limit, millis));
            }
            "--rate" => {
                let spec = value()?;
                let (name, rate) = spec
                    .split_once('=')
                    .ok_or(format!("--rate {spec:?}: expected NAME=N/WINDOW"))?;
                let rate = pgqueuer::RateLimit::parse(rate).map_err(|e| e.to_string())?;
                o.rates.push((name.to_owned(), rate));
            }
            "--threads" => o.threads = number(value()?, "--threads")? as usize,
            "--batch" => o.batch = number(value()?, "--batch")? as usize,
            "--heartbeat-timeout" => o.heartbeat_timeout = number(value()?, "--heartbeat-timeout")?,
            "--dequeue-timeout" => o.dequeue_timeout = number(value()?, "--dequeue-timeout")?,
            "--enqueue" => o.enqueue = number(value()?, "--enqueue")? as usize,
            "--drain" => o.drain = true,
            "--record" => o.record = true,
            "--pool" => o.pool = Some(number(value()?, "--pool")? as u32),
            "--hold-connection" => o.hold_connection = true,
            "--quiet" => o.quiet = true,
            "-h" | "--help" => return Err(HELP.to_owned()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.entrypoints.is_empty() {
        o.entrypoints.push(("default".into(), 0, 0));
    }
    Ok(o)
}

/// `--help`: the options above, as this file's header lists them.
const HELP: &str = "\
worker: a configurable worker process (examples/worker.rs)

usage: worker [OPTIONS]

  --dsn DSN                 connection (default: PGQUEUER_DSN, PGDSN, DATABASE_URL, PG* variables)
  --entrypoint NAME[:LIMIT[:MILLIS]]
                            handle NAME, at most LIMIT at once (0 = no limit), each job
                            sleeping MILLIS (repeatable; default `default:0:0`)
  --rate NAME=N/WINDOW      at most N starts of NAME in any WINDOW, fleet-wide
                            (api=50/s, api=1000/m; repeatable, windows stack)
  --threads N               executor threads (default 10)
  --batch N                 most jobs per claim (default 10)
  --heartbeat-timeout SECS  (default 30)
  --dequeue-timeout SECS    (default 30)
  --enqueue N               enqueue N jobs spread over the entrypoints first
  --drain                   stop when the queue is empty (default: run until signalled)
  --record                  record each run in table pgqueuer_example_runs
                            (job_id, entrypoint, started, finished, pid) for checks
  --pool N                  most pool connections (default threads + 3)
  --hold-connection         each handler holds a pool connection while it runs; with
                            --record, its start is the server's clock on that connection
  --quiet                   no progress lines
  -h, --help                this text

SIGINT or SIGTERM stops it cleanly: running jobs finish first.";

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let options = match parse() {
        Ok(o) => o,
        Err(message) if message == HELP => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("worker: {message}\nRun 'worker --help' for the options.");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes one run's row, retrying while the database is unreachable (a run that cannot
/// be recorded fails its job after a minute).
fn record_run(
    pool: &pgqueuer::Pool,
    job: &pgqueuer::Job,
    started: std::time::SystemTime,
) -> Result<(), pgqueuer::Error> {
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut backoff = Duration::from_millis(20);
    loop {
        let written = pool.get().map_err(pgqueuer::Error::from).and_then(|mut c| {
            // Idempotent: when a commit's answer is lost (a terminated connection), the
            // retry must not record the same run twice.
            // `query_cached` with the parameter types: prepared once per connection, or
            // unnamed through a transaction pooler (PGQUEUER_POOLER=transaction).
            c.query_cached(
                "INSERT INTO pgqueuer_example_runs \
                 SELECT $1::bigint, $2::text, $3::timestamptz, clock_timestamp(), $4::int \
                 WHERE NOT EXISTS (SELECT 1 FROM pgqueuer_example_runs \
                                   WHERE job_id = $1 AND started = $3 AND pid = $4)",
                &[
                    (&job.id, Type::INT8),
                    (&job.entrypoint, Type::TEXT),
                    (&started, Type::TIMESTAMPTZ),
                    (&pid, Type::INT4),
                ],
            )
        });
        match written {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                eprintln!("worker: recording job {} failed, retrying: {e}", job.id);
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

fn run(o: &Options) -> Result<(), pgqueuer::Error> {
    let connect = pgqueuer::ConnectOptions {
        max_size: o.pool.unwrap_or_else(|| {
            u32::try_from(o.threads)
                .unwrap_or(u32::MAX)
                .saturating_add(3)
        }),
        // PGQUEUER_POOLER and PGQUEUER_LISTEN_DSN, for runs through PgBouncer.
        ..pgqueuer::ConnectOptions::from_env()?
    };
    let pool = pgqueuer::connect_with(&o.dsn, &connect)?;
    pgqueuer::upgrade(pool.get()?.client())?;
    if o.record {
        pool.get()?.batch_execute(
            "CREATE TABLE IF NOT EXISTS pgqueuer_example_runs (
                 job_id bigint NOT NULL, entrypoint text NOT NULL,
                 started timestamptz NOT NULL, finished timestamptz NOT NULL, pid int NOT NULL)",
        )?;
    }
    if o.enqueue > 0 {
        let queue = Queue::new(pool.clone());
        let jobs: Vec<NewJob> = (0..o.enqueue)
            .map(|i| {
                NewJob::new(
                    o.entrypoints[i % o.entrypoints.len()].0.clone(),
                    i.to_string().into_bytes(),
                )
            })
            .collect();
        for chunk in jobs.chunks(5_000) {
            queue.enqueue_many(chunk)?;
        }
    }
    let done = Arc::new(AtomicU64::new(0));
    let mut builder = Worker::builder(pool.clone())
        .threads(o.threads)
        .batch_size(o.batch)
        .heartbeat_timeout(Duration::from_secs_f64(o.heartbeat_timeout))
        .dequeue_timeout(Duration::from_secs_f64(o.dequeue_timeout));
    for (name, limit, millis) in &o.entrypoints {
        let (done, pool, record, millis) = (done.clone(), pool.clone(), o.record, *millis);
        let hold = o.hold_connection;
        let mut entrypoint = Entrypoint::new(name).concurrency_limit(*limit);
        for (_, rate) in o.rates.iter().filter(|(n, _)| n == name) {
            entrypoint = entrypoint.rate_limit(rate.starts(), rate.per());
        }
        builder = builder.entrypoint(entrypoint, move |job, ctx| {
            let mut started = std::time::SystemTime::now();
            let held = if hold {
                let mut conn = pool.get()?;
                started = conn.query_one("SELECT clock_timestamp()", &[])?.get(0);
                Some(conn)
            } else {
                None
            };
            let until = Instant::now() + Duration::from_millis(millis);
            while Instant::now() < until && !ctx.is_cancelled() {
                std::thread::sleep(Duration::from_millis(millis.min(10)));
            }
            drop(held);
            if record {
                record_run(&pool, job, started)?;
            }
            done.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
    }
    let worker = builder.build()?;
    let stop = worker.shutdown_handle();
    ctrlc::set_handler(move || stop.shutdown())
        .map_err(|e| pgqueuer::Error::Worker(format!("cannot install the signal handler: {e}")))?;
    if !o.quiet {
        println!(
            "worker {} running {:?} with {} threads",
            worker.id(),
            o.entrypoints,
            o.threads
        );
    }
    let started = Instant::now();
    let stopped = std::sync::atomic::AtomicBool::new(false);
    let summary = std::thread::scope(|scope| {
        if !o.quiet {
            scope.spawn(|| {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(500));
                    let n = done.load(Ordering::Relaxed);
                    println!(
                        "  {n} jobs done ({:.0}/s)",
                        n as f64 / started.elapsed().as_secs_f64()
                    );
                }
            });
        }
        let summary = if o.drain {
            worker.run_until_empty()
        } else {
            worker.run()
        };
        stopped.store(true, Ordering::Relaxed);
        summary
    })?;
    if !o.quiet {
        println!("stopped after {:.1?}: {summary:?}", started.elapsed());
    }
    Ok(())
}
