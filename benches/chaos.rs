//! Chaos soak: three worker processes whose handlers at random panic, fail with NUL bytes
//! in their errors, ask for retries too long to store and overrun their timeouts, each
//! holding a connection of its worker's own pool while it runs, while the processes are
//! stopped with SIGTERM (a 300 ms shutdown deadline, SIGKILL 1.5 s later if they have not
//! exited) or SIGKILL and started again every one to three seconds. Between those, every
//! backend of the database but the orchestrator's is terminated now and then, and a storm
//! of forged notifications (insert events and payloads that do not parse) is sent. A
//! producer keeps adding jobs, some with headers serde_json cannot hold (a 401-digit
//! number, arrays nested 300 deep) written by SQL. When the chaos ends, three calm
//! workers drain what is left, and the run checks:
//!
//! - every job enqueued has exactly one terminal log row (`successful`, `exception` or
//!   `failed`), and none is left `queued` or `picked`;
//! - the handler sweep (each run's start and end on the database clock, a killed run
//!   ending when its process died) never shows more than the limit of 2 at once, nor
//!   two runs of one job at once;
//! - no finished run waited more than 5 s for its outcome to be written, unless its
//!   process was killed first.
//!
//! It prints a table and exits with status 1 on any breach.
//!
//! Run: `cargo bench --bench chaos` (60 s of chaos; `PGQ_CHAOS_SECS=600` for the long
//! run; admin DSN from `PGQUEUER_BENCH_DSN`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`).

use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use pgqueuer::postgres::{Client, Config, NoTls};
use pgqueuer::{Entrypoint, NewJob, OnFailure, Queue, Retry, RetryPolicy, Worker};

#[path = "support/common.rs"]
#[allow(dead_code)] // shared with the other benchmarks
mod common;

/// The `application_name` of the orchestrator's own connections, which the backend kills
/// spare.
const ORCHESTRATOR: &str = "chaos-orchestrator";

/// The concurrency limit of the `limited` entrypoint, which the sweep checks.
const LIMIT: u32 = 2;
/// The producer adds `limited` jobs only while fewer than this many wait.
const LIMITED_BACKLOG: i64 = 100;
/// Worker processes at once.
const PROCESSES: usize = 3;
/// Most time a finished run may wait for its outcome to be written.
const WRITE_BOUND: Duration = Duration::from_secs(5);
/// Entrypoints: (name, concurrency limit, timeout in ms, hold failures).
const ENTRYPOINTS: [(&str, u32, u64, bool); 3] = [
    ("limited", LIMIT, 200, false),
    ("free", 0, 100, false),
    ("held", 0, 150, true),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--chaos-worker") {
        return match worker(&args[at + 1], args[at + 2].parse().unwrap_or(1)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("chaos worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.iter().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    let secs: u64 = common::env_or("PGQ_CHAOS_SECS", 60);
    match orchestrate(Duration::from_secs(secs)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chaos: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A number from a seed, a job and its attempt: which chaos a run gets.
fn mix(seed: u64, id: i64, attempts: i32) -> u64 {
    let mut z = seed
        ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from(attempts.unsigned_abs()).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One worker process: chaotic handlers that record each run's start and end.
fn worker(dsn: &str, seed: u64) -> Result<(), pgqueuer::Error> {
    let options = pgqueuer::ConnectOptions {
        max_size: 6,
        ..pgqueuer::ConnectOptions::default()
    };
    let pool = pgqueuer::connect_with(dsn, &options)?;
    let handlers_pool = pool.clone();
    let record = pgqueuer::connect_with(
        dsn,
        &pgqueuer::ConnectOptions {
            max_size: 4,
            ..pgqueuer::ConnectOptions::default()
        },
    )?;
    let mut builder = Worker::builder(pool)
        .threads(4)
        .batch_size(4)
        .heartbeat_timeout(Duration::from_secs(2))
        .dequeue_timeout(Duration::from_secs(1))
        .shutdown_deadline(Duration::from_millis(300));
    for (name, limit, timeout_ms, hold) in ENTRYPOINTS {
        let record = record.clone();
        let handlers_pool = handlers_pool.clone();
        let options = Entrypoint::new(name)
            .concurrency_limit(limit)
            .timeout(Duration::from_millis(timeout_ms))
            .on_failure(if hold {
                OnFailure::Hold
            } else {
                OnFailure::Delete
            })
            .retry(RetryPolicy::exponential(
                1,
                Duration::from_millis(10),
                Duration::from_millis(50),
            ));
        builder = builder.entrypoint(options, move |job, ctx| {
            // As a handler that queries the database does: one of the worker's own pool
            // connections, held while it runs (heartbeats and outcomes must not wait
            // behind it).
            let _held = handlers_pool.get_timeout(Duration::from_millis(500)).ok();
            let started = record_start(&record, job);
            let roll = mix(seed, job.id, job.attempts) % 100;
            let end = |record: &pgqueuer::Pool| record_end(record, started);
            let result = match roll {
                0..=49 => {
                    std::thread::sleep(Duration::from_millis(roll % 20));
                    Ok(())
                }
                50..=59 => {
                    end(&record);
                    panic!("chaos: a panicking handler\0with a NUL");
                }
                60..=69 => Err(format!("chaos error for job {}: bad\0byte", job.id).into()),
                70..=74 => Err(Retry::after(Duration::MAX).reason("for ever\0").into()),
                75..=84 if job.attempts < 2 => Err(Retry::after(Duration::from_millis(10))
                    .reason("again\0soon")
                    .into()),
                85..=94 => {
                    // Overruns its timeout, not looking at the context.
                    std::thread::sleep(Duration::from_millis(300));
                    Ok(())
                }
                _ => {
                    let until = Instant::now() + Duration::from_secs(2);
                    while !ctx.is_cancelled() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    if ctx.shutting_down() {
                        Err(Retry::after(Duration::ZERO).reason("shutdown").into())
                    } else {
                        Ok(())
                    }
                }
            };
            end(&record);
            result
        });
    }
    let worker = builder.build()?;
    let stop = worker.shutdown_handle();
    ctrlc::set_handler(move || stop.shutdown())
        .map_err(|e| pgqueuer::Error::Worker(format!("cannot install the signal handler: {e}")))?;
    println!("ready");
    let _ = std::io::stdout().flush();
    worker.run()?;
    Ok(())
}

/// Records a run's start on the database clock; `None` when the database cannot be
/// reached (the run then goes unrecorded, which only weakens the sweep).
/// Backends are terminated now and then: a record is tried a few times, each on a
/// connection the pool has checked (a terminated one fails its check and is replaced),
/// under a key of the run's own, so that a retried insert whose first commit's answer
/// was lost records the run once.
fn record_start(record: &pgqueuer::Pool, job: &pgqueuer::Job) -> Option<i64> {
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let key = i64::from_ne_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().ok()?);
    (0..5).find_map(|_| {
        let mut conn = record.get().ok()?;
        conn.execute(
            "INSERT INTO chaos_runs (key, job_id, entrypoint, pid, started) \
             VALUES ($1, $2, $3, $4, clock_timestamp()) ON CONFLICT (key) DO NOTHING",
            &[&key, &job.id, &job.entrypoint, &pid],
        )
        .ok()
        .map(|_| key)
    })
}

fn record_end(record: &pgqueuer::Pool, run: Option<i64>) {
    let Some(key) = run else { return };
    for _ in 0..5 {
        if let Ok(mut conn) = record.get()
            && conn
                .execute(
                    "UPDATE chaos_runs SET finished = clock_timestamp() WHERE key = $1 AND finished IS NULL",
                    &[&key],
                )
                .is_ok()
        {
            return;
        }
    }
}

/// One round of the producer: 30 jobs over the entrypoints, and every fifth round two
/// with headers serde_json cannot hold, written by SQL as another program would; each
/// recorded in `chaos_jobs` in the same transaction. Returns how many.
fn produce(
    pool: &pgqueuer::Pool,
    queue: &Queue,
    enqueued: usize,
    round: usize,
) -> Result<usize, String> {
    let mut conn = pool.get().map_err(|e| e.to_string())?;
    // Two slots under chaos run fewer jobs than a third of the trickle, so the limited
    // entrypoint gets jobs only while its backlog is short: a long soak then ends with a
    // backlog the calm drain can finish.
    let limited_backlog: i64 = conn
        .query_one(
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'limited' AND status = 'queued'",
            &[],
        )
        .map_err(|e| format!("{e:?}"))?
        .get(0);
    let names: Vec<&str> = ENTRYPOINTS
        .iter()
        .filter(|(_, limit, _, _)| *limit == 0 || limited_backlog < LIMITED_BACKLOG)
        .map(|(name, _, _, _)| *name)
        .collect();
    let jobs: Vec<NewJob> = (0..30)
        .map(|i| NewJob::new(names[(enqueued + i) % names.len()], Vec::new()))
        .collect();
    let mut tx = conn.transaction().map_err(|e| format!("{e:?}"))?;
    let mut ids = queue
        .on(&mut tx)
        .enqueue_many(&jobs)
        .map_err(|e| e.to_string())?;
    if round.is_multiple_of(5) {
        let poison: Vec<i64> = tx
            .query(
                "INSERT INTO pgqueuer (priority, entrypoint, payload, headers, status)                  VALUES (0, 'free', NULL, '{\"n\": 1e400}', 'queued'),                         (0, 'held', NULL, (repeat('[', 300) || repeat(']', 300))::jsonb, 'queued')                  RETURNING id",
                &[],
            )
            .map_err(|e| format!("{e:?}"))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        ids.extend(poison);
    }
    tx.execute(
        "INSERT INTO chaos_jobs SELECT unnest($1::bigint[])",
        &[&ids],
    )
    .map_err(|e| format!("{e:?}"))?;
    tx.commit().map_err(|e| format!("{e:?}"))?;
    Ok(ids.len())
}

/// A worker process under the orchestrator's control.
struct Process {
    child: Child,
    started: Instant,
}

struct Chaos {
    dsn: String,
    client: Client,
    seed: u64,
    terms: usize,
    kills: usize,
    starts: usize,
    /// Backends terminated (every one of the database but the orchestrator's).
    backends_killed: usize,
    /// Forged notifications sent.
    forged: usize,
}

impl Chaos {
    /// Terminates every backend of the database but the orchestrator's own (its
    /// `application_name`): the workers' pools, listeners, heartbeats and outcome
    /// writers, the handlers' records, the producer.
    fn kill_backends(&mut self) {
        match self.client.query(
            "WITH t AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name <> $1) \
             SELECT pid FROM t WHERE pg_terminate_backend(pid)",
            &[&ORCHESTRATOR],
        ) {
            Ok(rows) => self.backends_killed += rows.len(),
            Err(e) => eprintln!("chaos: terminating backends failed: {e:?}"),
        }
    }

    /// A storm of forged notifications: insert events, as any role may send them, and
    /// as many payloads that do not parse.
    fn forge_notifications(&mut self, n: usize) {
        for i in 0..n {
            let insert = format!(
                "{{\"channel\" : \"ch_pgqueuer\", \"operation\" : \"insert\", \
                 \"sent_at\" : \"2026-01-01T00:00:00.{i:06}+00:00\", \
                 \"table\" : \"pgqueuer\", \"type\" : \"table_changed_event\"}}"
            );
            for payload in [insert, format!("forged {i}")] {
                if self
                    .client
                    .execute("SELECT pg_notify('ch_pgqueuer', $1)", &[&payload])
                    .is_ok()
                {
                    self.forged += 1;
                }
            }
        }
    }

    fn spawn(&mut self) -> Process {
        self.seed += 1;
        self.starts += 1;
        let child = Command::new(std::env::current_exe().expect("the bench's own path"))
            .args(["--chaos-worker", &self.dsn, &self.seed.to_string()])
            .env("RUST_LOG", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("a worker process starts");
        Process {
            child,
            started: Instant::now(),
        }
    }

    /// Stops `p` by SIGTERM (SIGKILL if it has not exited within 1.5 s) or by SIGKILL,
    /// and records when it died on the database clock.
    fn stop(&mut self, mut p: Process, gently: bool) {
        let pid = i32::try_from(p.child.id()).unwrap_or(i32::MAX);
        let mut how = "kill";
        if gently {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let until = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < until {
                if let Ok(Some(_)) = p.child.try_wait() {
                    how = "term";
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if how == "kill" {
            let _ = p.child.kill();
            self.kills += 1;
        } else {
            self.terms += 1;
        }
        let _ = p.child.wait();
        self.client
            .execute(
                "INSERT INTO chaos_exits (pid, died, how) VALUES ($1, clock_timestamp(), $2)",
                &[&pid, &how],
            )
            .expect("the orchestrator records an exit");
    }
}

fn orchestrate(chaos_for: Duration) -> Result<bool, String> {
    let admin_dsn = std::env::var("PGQUEUER_BENCH_DSN")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let admin_config: Config = admin_dsn
        .parse()
        .map_err(|e| format!("PGQUEUER_BENCH_DSN does not parse: {e}"))?;
    let mut admin = admin_config.connect(NoTls).map_err(|e| {
        format!(
            "cannot reach PostgreSQL at {admin_dsn}: {e:?} (start it, or set PGQUEUER_BENCH_DSN)"
        )
    })?;
    let name = format!("pgq_chaos_{}", std::process::id());
    for statement in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin
            .batch_execute(&statement)
            .map_err(|e| format!("cannot create {name}: {e:?}"))?;
    }
    let mut config = admin_config.clone();
    config.dbname(&name);
    let host = admin_config
        .get_hosts()
        .first()
        .map(|h| match h {
            pgqueuer::postgres::config::Host::Tcp(h) => h.clone(),
            #[allow(unreachable_patterns)]
            _ => "127.0.0.1".into(),
        })
        .unwrap_or_else(|| "127.0.0.1".into());
    let port = admin_config.get_ports().first().copied().unwrap_or(5432);
    let user = admin_config.get_user().unwrap_or("postgres").to_owned();
    let dsn = format!("postgres://{user}@{host}:{port}/{name}");
    let outcome = run(&dsn, &config, chaos_for);
    let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    outcome
}

fn run(dsn: &str, config: &Config, chaos_for: Duration) -> Result<bool, String> {
    let db_error = |e: pgqueuer::postgres::Error| format!("{e:?}");
    let mut config = config.clone();
    config.application_name(ORCHESTRATOR);
    let config = &config;
    let mut client = config.connect(NoTls).map_err(db_error)?;
    pgqueuer::upgrade(&mut client).map_err(|e| e.to_string())?;
    client
        .batch_execute(
            "CREATE TABLE chaos_runs (id bigserial PRIMARY KEY, key bigint UNIQUE, job_id bigint NOT NULL,
                 entrypoint text NOT NULL, pid int NOT NULL, started timestamptz NOT NULL, finished timestamptz);
             CREATE TABLE chaos_exits (pid int NOT NULL, died timestamptz NOT NULL, how text NOT NULL);
             CREATE TABLE chaos_jobs (id bigint PRIMARY KEY);",
        )
        .map_err(db_error)?;
    let pool = pgqueuer::connect_with(
        dsn,
        &pgqueuer::ConnectOptions {
            max_size: 2,
            ..pgqueuer::ConnectOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let queue = Queue::new(pool.clone());
    println!(
        "chaos: {PROCESSES} worker processes for {chaos_for:?}, SIGTERM or SIGKILL every 1-3 s"
    );
    // The producer: a steady trickle of jobs over the three entrypoints, recorded.
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (queue, producing, pool) = (queue.clone(), producing.clone(), pool.clone());
        std::thread::spawn(move || -> Result<usize, String> {
            let mut enqueued = 0usize;
            let mut round = 0usize;
            while producing.load(Ordering::SeqCst) {
                round += 1;
                // Backends are terminated now and then: a round that fails is tried again
                // (an enqueue whose commit's answer was lost may then add its jobs twice;
                // only the recorded ids count).
                match produce(&pool, &queue, enqueued, round) {
                    Ok(n) => enqueued += n,
                    Err(e) => eprintln!("chaos producer: {e} (trying again)"),
                }
                std::thread::sleep(Duration::from_millis(400));
            }
            Ok(enqueued)
        })
    };
    let mut chaos = Chaos {
        dsn: dsn.to_owned(),
        client: config.connect(NoTls).map_err(db_error)?,
        seed: u64::from(std::process::id()) << 16,
        terms: 0,
        kills: 0,
        starts: 0,
        backends_killed: 0,
        forged: 0,
    };
    let mut procs: Vec<Option<Process>> = (0..PROCESSES).map(|_| Some(chaos.spawn())).collect();
    let began = Instant::now();
    let mut next_report = Duration::from_secs(10);
    let mut tick = 0i64;
    while began.elapsed() < chaos_for {
        tick += 1;
        let pause = 1000 + mix(chaos.seed, tick, 0) % 2000;
        std::thread::sleep(Duration::from_millis(pause));
        let slot = (mix(chaos.seed, tick, 1) % PROCESSES as u64) as usize;
        if let Some(p) = procs[slot].take() {
            if p.started.elapsed() > Duration::from_millis(500) {
                let gently = mix(chaos.seed, tick, 2).is_multiple_of(2);
                chaos.stop(p, gently);
            } else {
                procs[slot] = Some(p);
            }
        }
        for p in &mut procs {
            if p.is_none() {
                *p = Some(chaos.spawn());
            }
        }
        match mix(chaos.seed, tick, 3) % 4 {
            0 => chaos.kill_backends(),
            1 => chaos.forge_notifications(300),
            _ => {}
        }
        if began.elapsed() >= next_report {
            println!(
                "  {:>4.0} s: {} starts, {} SIGTERM, {} SIGKILL, {} backends terminated, \
                 {} forged notifications",
                began.elapsed().as_secs_f64(),
                chaos.starts,
                chaos.terms,
                chaos.kills,
                chaos.backends_killed,
                chaos.forged
            );
            next_report += Duration::from_secs(10);
        }
    }
    producing.store(false, Ordering::SeqCst);
    let enqueued = producer
        .join()
        .map_err(|_| "the producer panicked".to_owned())??;
    // Calm: the processes running now drain what is left (stale jobs of killed ones are
    // re-picked after 2 s).
    let drained = Instant::now();
    let left = loop {
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM pgqueuer WHERE status IN ('queued', 'picked')",
                &[],
            )
            .map_err(db_error)?
            .get(0);
        if left == 0 || drained.elapsed() > Duration::from_secs(120) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for p in procs.iter_mut().filter_map(Option::take) {
        chaos.stop(p, true);
    }
    println!("chaos: drained in {:.1?}; checking", drained.elapsed());
    check(&mut client, enqueued, left, &chaos)
}

fn check(client: &mut Client, confirmed: usize, left: i64, chaos: &Chaos) -> Result<bool, String> {
    let db_error = |e: pgqueuer::postgres::Error| format!("{e:?}");
    let one = |client: &mut Client, sql: &str| -> Result<i64, String> {
        Ok(client.query_one(sql, &[]).map_err(db_error)?.get(0))
    };
    // The jobs enqueued are those recorded: a round whose commit's answer was lost to a
    // terminated backend committed all the same (its jobs and their record in one
    // transaction), uncounted by the producer.
    let enqueued = usize::try_from(one(client, "SELECT count(*) FROM chaos_jobs")?).unwrap_or(0);
    // Each recorded job: how many terminal log rows it has.
    let terminal_counts = client
        .query(
            "SELECT coalesce(t.n, 0)::bigint AS n, count(*)::bigint FROM chaos_jobs j
               LEFT JOIN (SELECT job_id, count(*) AS n FROM pgqueuer_log
                           WHERE status IN ('successful', 'exception', 'failed', 'canceled', 'deleted')
                           GROUP BY job_id) t ON t.job_id = j.id
              GROUP BY 1 ORDER BY 1",
            &[],
        )
        .map_err(db_error)?
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)))
        .collect::<HashMap<i64, i64>>();
    let exactly_one = terminal_counts.get(&1).copied().unwrap_or(0);
    let not_one: i64 = terminal_counts
        .iter()
        .filter(|(n, _)| **n != 1)
        .map(|(_, c)| c)
        .sum();
    let gone_without = one(
        client,
        "SELECT count(*) FROM chaos_jobs j WHERE NOT EXISTS (SELECT 1 FROM pgqueuer q WHERE q.id = j.id)
           AND NOT EXISTS (SELECT 1 FROM pgqueuer_log l WHERE l.job_id = j.id
                            AND l.status IN ('successful', 'exception', 'failed', 'canceled', 'deleted'))",
    )?;
    // The handler sweep of the limited entrypoint: a run ends when it finished, or when
    // its process died.
    let peak = one(
        client,
        "WITH runs AS (
             SELECT r.started AS t0,
                    coalesce(r.finished, (SELECT min(e.died) FROM chaos_exits e
                                           WHERE e.pid = r.pid AND e.died >= r.started),
                             'infinity') AS t1
               FROM chaos_runs r WHERE r.entrypoint = 'limited'
         ), events AS (SELECT t0 AS t, 1 AS d FROM runs UNION ALL SELECT t1, -1 FROM runs)
         SELECT coalesce(max(n), 0)::bigint FROM (SELECT sum(d) OVER (ORDER BY t, d) AS n FROM events) s",
    )?;
    // Two runs of one job at once (each ending when it finished, or when its process
    // died): a live worker's job re-picked while it ran.
    let overlaps = one(
        client,
        "WITH runs AS (
             SELECT r.id, r.job_id, r.started AS t0,
                    coalesce(r.finished, (SELECT min(e.died) FROM chaos_exits e
                                           WHERE e.pid = r.pid AND e.died >= r.started),
                             'infinity') AS t1
               FROM chaos_runs r
         )
         SELECT count(*) FROM runs a JOIN runs b
             ON a.job_id = b.job_id AND a.id < b.id AND a.t0 < b.t1 AND b.t0 < a.t1",
    )?;
    // Finished runs whose outcome took more than the bound, their process alive.
    let slow_writes = one(
        client,
        &format!(
            "SELECT count(*) FROM chaos_runs r
              WHERE r.finished IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pgqueuer_log l WHERE l.job_id = r.job_id
                                 AND l.status <> 'picked' AND l.created >= r.started
                                 AND l.created <= r.finished + interval '{} ms')
                AND NOT EXISTS (SELECT 1 FROM chaos_exits e WHERE e.pid = r.pid
                                 AND e.died >= r.finished
                                 AND e.died <= r.finished + interval '{} ms')",
            WRITE_BOUND.as_millis(),
            WRITE_BOUND.as_millis()
        ),
    )?;
    let runs = one(client, "SELECT count(*) FROM chaos_runs")?;
    let statuses = client
        .query(
            "SELECT status::text, count(*) FROM pgqueuer_log
              WHERE status NOT IN ('queued', 'picked') GROUP BY 1 ORDER BY 1",
            &[],
        )
        .map_err(db_error)?
        .iter()
        .map(|r| format!("{} {}", r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect::<Vec<_>>()
        .join(", ");
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    println!();
    println!("| Check | Found | Bound |");
    println!("|---|---:|---:|");
    println!("| jobs enqueued (the producer saw {confirmed} commits) | {enqueued} | - |");
    println!("| handler runs | {runs} | - |");
    println!(
        "| worker starts / SIGTERM / SIGKILL | {} / {} / {} | - |",
        chaos.starts, chaos.terms, chaos.kills
    );
    println!("| jobs with exactly one terminal log row | {exactly_one} | {enqueued} |");
    let none = terminal_counts.get(&0).copied().unwrap_or(0);
    println!("| jobs with none or several | {not_one} ({none} with none) | 0 |");
    println!("| jobs gone without a terminal row | {gone_without} | 0 |");
    println!("| jobs left queued or picked | {left} | 0 |");
    println!("| most `limited` handlers at once | {peak} | {LIMIT} |");
    println!("| runs of one job overlapping | {overlaps} | 0 |");
    println!(
        "| backends terminated / forged notifications | {} / {} | - |",
        chaos.backends_killed, chaos.forged
    );
    println!(
        "| finished runs unwritten after {} s (process alive) | {slow_writes} | 0 |",
        WRITE_BOUND.as_secs()
    );
    println!("\noutcomes: {statuses} (unix time {at})");
    let ok = i64::try_from(enqueued).unwrap_or(i64::MAX) == exactly_one
        && not_one == 0
        && gone_without == 0
        && left == 0
        && peak <= i64::from(LIMIT)
        && overlaps == 0
        && slow_writes == 0;
    println!(
        "{}",
        if ok {
            "chaos: every check held"
        } else {
            "chaos: A CHECK FAILED"
        }
    );
    Ok(ok)
}
