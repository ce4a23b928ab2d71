//! Through a real PgBouncer in transaction mode: the schema upgrade, producers, a worker
//! (limits, retries, cancellation), the scheduler, the operator functions and `pgq` work,
//! and leave no session setting behind; a pool not told about the pooler fails with an
//! error naming the setting. (The fleet runs, in both modes, are in the fault suite.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgqueuer::postgres::NoTls;
use pgqueuer::{
    Claimer, ConnectOptions, Entrypoint, NewJob, OnConflict, Pool, Pooler, Queue, RetryPolicy,
    Scheduler, Status, Worker,
};

use crate::harness::{TestDb, server};
use crate::pgbouncer::{Mode, PgBouncer, Release};

/// A pool through `bouncer` that knows it is a transaction pooler, listening directly.
fn pool_through(bouncer: &PgBouncer, db: &TestDb, max_size: u32) -> Pool {
    let options = ConnectOptions {
        max_size,
        min_idle: 0,
        pooler: Pooler::Transaction,
        listen_dsn: Some(db.dsn()),
        ..ConnectOptions::default()
    };
    pgqueuer::connect_with(&bouncer.dsn(&db.name), &options).expect("pool through PgBouncer")
}

/// A worker of 4 threads on `pool`, run until nothing is left of its `free` jobs and its
/// `lim` jobs (limit 1, 2 ms each): every one of the `jobs` ran once, and the limit held.
fn drain_free_and_limited(pool: &Pool, jobs: u64) -> Worker {
    let runs = Arc::new(AtomicU32::new(0));
    let (running, peak) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let worker = {
        let (runs, runs_lim, running, peak) =
            (runs.clone(), runs.clone(), running.clone(), peak.clone());
        Worker::builder(pool.clone())
            .threads(4)
            .entrypoint("free", move |_job, _ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .entrypoint(
                Entrypoint::new("lim").concurrency_limit(1),
                move |_job, _ctx| {
                    runs_lim.fetch_add(1, Ordering::SeqCst);
                    peak.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .build()
            .unwrap()
    };
    let summary = worker.run_until_empty().unwrap();
    assert_eq!(summary.succeeded, jobs, "{summary:?}");
    assert_eq!(
        u64::from(runs.load(Ordering::SeqCst)),
        jobs,
        "a job ran twice or never"
    );
    assert_eq!(
        peak.load(Ordering::SeqCst),
        1,
        "the limit of 1 did not hold"
    );
    worker
}

fn upstream() -> (String, u16) {
    let s = server();
    (s.host.clone(), s.port)
}

/// Everything a producer, a worker and an operator do, through PgBouncer in transaction
/// mode with two server connections for all of it (so that consecutive statements land
/// on different ones): the upgrade of an empty database; single, batch, in-transaction
/// and held-connection enqueues; a worker with a limited entrypoint, a retry and a
/// cancelled job; `wait_for`; the operator functions; and afterwards no server
/// connection carries a setting of ours.
#[test]
fn a_transaction_pooler_serves_every_part() {
    let db = TestDb::empty();
    let (host, port) = upstream();
    let bouncer = PgBouncer::start(Mode::Transaction, (&host, port), 2);
    let pool = pool_through(&bouncer, &db, 8);
    let report = pgqueuer::upgrade(pool.get().unwrap().client()).unwrap();
    assert!(!report.is_noop(), "the upgrade installed the schema");
    assert!(
        pgqueuer::upgrade(pool.get().unwrap().client())
            .unwrap()
            .is_noop()
    );

    let queue = Queue::new(pool.clone());
    let mut ids = vec![queue.enqueue(NewJob::new("free", "one")).unwrap()];
    ids.extend(
        queue
            .enqueue_many(
                &(0..20)
                    .map(|i| NewJob::new("lim", i.to_string()))
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
    );
    {
        let mut conn = pool.get().unwrap();
        let mut held = queue.on(&mut *conn);
        ids.extend(held.enqueue_many(&[NewJob::new("free", "held")]).unwrap());
        let mut tx = conn.client().transaction().unwrap();
        ids.push(
            queue
                .on(&mut tx)
                .enqueue(NewJob::new("flaky", "tx"))
                .unwrap(),
        );
        tx.commit().unwrap();
    }
    let skipped = queue
        .enqueue_deduplicated(
            &[
                NewJob::new("free", "k").dedupe_key("k"),
                NewJob::new("free", "k2").dedupe_key("k"),
            ],
            OnConflict::Skip,
        )
        .unwrap();
    ids.extend(skipped.into_iter().flatten());
    let cancelled = queue.enqueue(NewJob::new("slow", "cancel me")).unwrap();

    let running_lim = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let flaky_runs = Arc::new(AtomicU32::new(0));
    let started_slow = Arc::new(Mutex::new(false));
    let worker = {
        let (running_lim, peak, flaky_runs, started_slow) = (
            running_lim.clone(),
            peak.clone(),
            flaky_runs.clone(),
            started_slow.clone(),
        );
        Worker::builder(pool.clone())
            .threads(6)
            .entrypoint("free", |_job, _ctx| Ok(()))
            .entrypoint(
                Entrypoint::new("lim").concurrency_limit(2),
                move |_job, _ctx| {
                    let now = running_lim.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    running_lim.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .entrypoint(
                Entrypoint::new("flaky").retry(
                    RetryPolicy::exponential(
                        3,
                        Duration::from_millis(20),
                        Duration::from_millis(20),
                    )
                    .jitter(0.0),
                ),
                move |_job, _ctx| {
                    if flaky_runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err("first run fails".into())
                    } else {
                        Ok(())
                    }
                },
            )
            .entrypoint("slow", move |_job, ctx| {
                *started_slow.lock().unwrap() = true;
                // A minute: the cancel comes after every other job ended, which a busy
                // machine can make take a while.
                let until = std::time::Instant::now() + Duration::from_secs(60);
                while std::time::Instant::now() < until {
                    if ctx.is_cancelled() {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err("never cancelled".into())
            })
            .build()
            .unwrap()
    };
    let running = worker.start().unwrap();
    let statuses = queue.wait_for(&ids, Duration::from_secs(60)).unwrap();
    assert!(
        statuses.values().all(|s| *s == Status::Successful),
        "{statuses:?}"
    );
    crate::harness::eventually(Duration::from_secs(30), "the slow job starts", || {
        *started_slow.lock().unwrap()
    });
    assert_eq!(queue.cancel(&[cancelled]).unwrap(), vec![cancelled]);
    let status = queue
        .wait_for(&[cancelled], Duration::from_secs(30))
        .unwrap();
    assert_eq!(status[&cancelled], Status::Canceled);
    let summary = running.stats().jobs;
    running.shutdown_handle().shutdown();
    running.join().unwrap();
    assert!(peak.load(Ordering::SeqCst) <= 2, "limit 2 exceeded");
    assert_eq!(flaky_runs.load(Ordering::SeqCst), 2);
    assert_eq!(summary.retried, 1);

    // Operator functions and inspection.
    let mut conn = pool.get().unwrap();
    let settings = pgqueuer::Settings::default();
    assert!(pgqueuer::ops::active_workers(conn.client(), &settings).is_ok());
    assert!(pgqueuer::ops::slots_in_use(conn.client(), &settings).is_ok());
    assert!(pgqueuer::ops::aggregate_log(conn.client(), &settings).is_ok());
    assert!(pgqueuer::ops::prune_log(conn.client(), &settings, Duration::from_secs(3600)).is_ok());
    let audit = pgqueuer::ops::limit_audit(
        conn.client(),
        &settings,
        Duration::from_secs(600),
        Some("lim"),
        pgqueuer::ops::AUDIT_RESOLUTION,
    )
    .unwrap();
    assert!(audit.entrypoints.iter().all(|e| e.peak <= 2), "{audit:?}");
    assert!(queue.explain(ids[0]).is_ok());
    assert!(queue.history(ids[0]).unwrap().len() >= 3);
    drop(conn);

    // No setting of ours is left on any server connection.
    let mut probe = bouncer
        .dsn(&db.name)
        .parse::<pgqueuer::postgres::Config>()
        .unwrap()
        .connect(NoTls)
        .unwrap();
    for _ in 0..20 {
        let rows = probe.simple_query("SHOW enable_seqscan").unwrap();
        let value = rows.iter().find_map(|m| match m {
            pgqueuer::postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some("on"), "a session setting leaked");
    }
    drop(bouncer);
}

/// A scheduler through a transaction pooler fires and releases its schedule.
#[test]
fn a_scheduler_works_through_a_transaction_pooler() {
    let db = TestDb::new();
    let (host, port) = upstream();
    let bouncer = PgBouncer::start(Mode::Transaction, (&host, port), 2);
    let pool = pool_through(&bouncer, &db, 4);
    let fired = Arc::new(AtomicU32::new(0));
    let count = fired.clone();
    let scheduler = Scheduler::builder(pool)
        .threads(1)
        .schedule("tick", "* * * * * *", move |_| {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    crate::harness::eventually(Duration::from_secs(10), "two firings", || {
        fired.load(Ordering::SeqCst) >= 2
    });
    scheduler.join().unwrap();
    drop(bouncer);
}

/// `pgq` through a transaction pooler: told with `PGQUEUER_POOLER`, its commands work.
#[test]
fn pgq_works_through_a_transaction_pooler() {
    let db = TestDb::new();
    let (host, port) = upstream();
    let bouncer = PgBouncer::start(Mode::Transaction, (&host, port), 2);
    let dsn = bouncer.dsn(&db.name);
    let run = |args: &[&str]| {
        let out = crate::cli::command(Some(&dsn), args)
            .env("PGQUEUER_POOLER", "transaction")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "pgq {args:?}: {text}");
        text
    };
    run(&["upgrade"]);
    run(&["verify"]);
    assert!(run(&["queue", "hello", "world"]).contains("Enqueued"));
    assert!(run(&["sizes"]).contains("hello"));
    run(&["dashboard", "--json"]);
    run(&["workers"]);
    run(&["limits"]);
    drop(bouncer);
}

/// The error of a pool set to `pooler` through Debian's PgBouncer 1.18 in transaction
/// mode (two server connections), which keeps no prepared statement: a claim prepared (and
/// first run) on the server connection PgBouncer hands out first runs again while another
/// client's open transaction holds that connection (PgBouncer reuses the most recently
/// used one), so it lands on the other.
fn pooler_mismatch(pooler: Pooler) -> String {
    let db = TestDb::new();
    let (host, port) = upstream();
    let bouncer = PgBouncer::start(Mode::Transaction, (&host, port), 2);
    let options = ConnectOptions {
        max_size: 1,
        min_idle: 0,
        pooler,
        listen_dsn: pooler.is_transaction_mode().then(|| db.dsn()),
        ..ConnectOptions::default()
    };
    let pool = pgqueuer::connect_with(&bouncer.dsn(&db.name), &options).unwrap();
    let claimer = Claimer::builder().entrypoint("x", 0).build().unwrap();
    let mut conn = pool.get().unwrap();
    claimer.claim(&mut conn, 1).unwrap();
    let mut holder = bouncer
        .dsn(&db.name)
        .parse::<pgqueuer::postgres::Config>()
        .unwrap()
        .connect(NoTls)
        .unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.batch_execute("SELECT 1").unwrap();
    let err = claimer.claim(&mut conn, 1).unwrap_err();
    assert!(err.is_pooler_mismatch(), "{err:?}");
    tx.rollback().unwrap();
    drop(bouncer);
    err.to_string()
}

/// A pool that was not told about the transaction pooler: the error says which setting to
/// use.
#[test]
fn a_pool_not_told_of_a_transaction_pooler_names_the_setting() {
    let text = pooler_mismatch(Pooler::Direct);
    assert!(
        text.contains("PGQUEUER_POOLER=transaction") && text.contains("Pooler::Transaction"),
        "{text}"
    );
}

/// A pool set to `Pooler::TransactionPrepared` through a pooler that does not keep
/// prepared statements: the error says what to set.
#[test]
fn a_prepared_pool_through_a_pooler_that_drops_them_is_told_what_to_set() {
    let text = pooler_mismatch(Pooler::TransactionPrepared);
    assert!(
        text.contains("max_prepared_statements") && text.contains("Pooler::Transaction,"),
        "{text}"
    );
}

/// Through a transaction pooler a worker's and a producer's per-job statements run as the
/// statement functions `upgrade()` made (PostgreSQL's function statistics count their
/// calls), and what they return is what the statements return: every job runs once, a
/// limit of 1 holds, and the log rows are PgQueuer's.
#[test]
fn per_job_statements_run_as_statement_functions() {
    let db = TestDb::new();
    db.client()
        .batch_execute(&format!(
            "ALTER DATABASE {} SET track_functions = 'pl'",
            db.name
        ))
        .unwrap();
    let (host, port) = upstream();
    let bouncer = PgBouncer::start(Mode::Transaction, (&host, port), 2);
    let pool = pool_through(&bouncer, &db, 4);
    let queue = Queue::new(pool.clone());
    let mut jobs: Vec<NewJob> = (0..30)
        .map(|i| NewJob::new("free", i.to_string()))
        .collect();
    jobs.extend((0..10).map(|i| NewJob::new("lim", i.to_string())));
    let ids = queue.enqueue_many(&jobs).unwrap();
    let worker = drain_free_and_limited(&pool, 40);
    let mut client = db.client();
    for id in [ids[0], ids[35]] {
        assert_eq!(
            crate::harness::log_of(&mut client, id),
            ["queued", "picked", "successful"]
        );
    }
    // The server connections end with PgBouncer, and a backend's statistics are flushed
    // when it exits.
    drop((worker, pool));
    drop(bouncer);
    let mut called = Vec::new();
    crate::harness::eventually(
        Duration::from_secs(30),
        "statement functions in pg_stat_user_functions",
        || {
            called = client
                .query(
                    "SELECT funcname::text, calls FROM pg_stat_user_functions \
                     WHERE funcname ~ '^pgqueuer_rs_[0-9a-f]{16}$' AND calls > 0",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
                .collect::<Vec<_>>();
            // An insert, a claim of the limited shape, and a claim or completion that ends
            // jobs, at least.
            called.len() >= 3
        },
    );
    let calls: i64 = called.iter().map(|(_, n)| n).sum();
    assert!(calls >= 3, "{called:?}");
}

/// A connection through a transaction pooler calls only statement functions its own role
/// (or a superuser) owns: functions of the same names and signatures that another role
/// made, in a schema of its own that everyone may use, are never run (each would raise),
/// and the statements run unnamed instead.
#[test]
fn statement_functions_of_another_role_are_never_called() {
    let db = TestDb::new();
    let mut admin = db.client();
    // Our functions move to a stranger's schema, owned by the stranger, each with a body
    // that raises; their signatures stay, so a call would resolve to them.
    admin
        .batch_execute(
            "DO $$ DECLARE f record; BEGIN
                 IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgq_stranger') THEN
                     CREATE ROLE pgq_stranger;
                 END IF;
                 CREATE SCHEMA stranger AUTHORIZATION pgq_stranger;
                 GRANT USAGE ON SCHEMA stranger TO PUBLIC;
                 FOR f IN SELECT p.oid, p.proname FROM pg_proc p
                          WHERE p.proname ~ '^pgqueuer_rs_[0-9a-f]{16}$'
                 LOOP
                     EXECUTE format(
                         'CREATE FUNCTION stranger.%I(%s) RETURNS %s LANGUAGE plpgsql AS '
                         '$b$ BEGIN RAISE EXCEPTION ''a stranger''''s function ran''; END $b$',
                         f.proname, pg_get_function_identity_arguments(f.oid),
                         pg_get_function_result(f.oid));
                     EXECUTE format('ALTER FUNCTION stranger.%I(%s) OWNER TO pgq_stranger',
                         f.proname, pg_get_function_identity_arguments(f.oid));
                     EXECUTE 'DROP FUNCTION ' || f.oid::regprocedure;
                 END LOOP;
             END $$;",
        )
        .unwrap();
    let planted: i64 = crate::harness::scalar(
        &mut admin,
        "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname = 'stranger'",
    );
    assert!(planted > 0, "no function was planted");
    assert_eq!(crate::harness::statement_functions(&mut admin), planted);
    // As an application role (a superuser is a member of every role, so it would trust
    // the stranger), straight to PostgreSQL but told it is a transaction pooler, so that
    // it looks for statement functions.
    let dsn = db.app_role_dsn();
    let options = ConnectOptions {
        max_size: 4,
        min_idle: 0,
        pooler: Pooler::Transaction,
        listen_dsn: Some(dsn.clone()),
        ..ConnectOptions::default()
    };
    let pool = pgqueuer::connect_with(&dsn, &options).unwrap();
    let queue = Queue::new(pool.clone());
    let jobs: Vec<NewJob> = (0..5).map(|i| NewJob::new("lim", i.to_string())).collect();
    queue.enqueue_many(&jobs).unwrap();
    let summary = Worker::builder(pool)
        .threads(2)
        .entrypoint(Entrypoint::new("lim").concurrency_limit(1), |_job, _ctx| {
            Ok(())
        })
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    assert_eq!(summary.succeeded, 5, "{summary:?}");
}

/// PgBouncer's counters for `dbname` from its admin console: (client parses, server
/// parses, binds) of named prepared statements.
fn parse_and_bind_counts(bouncer: &PgBouncer, dbname: &str) -> (i64, i64, i64) {
    let mut admin = bouncer
        .dsn("pgbouncer")
        .parse::<pgqueuer::postgres::Config>()
        .unwrap()
        .connect(NoTls)
        .unwrap();
    let messages = admin.simple_query("SHOW STATS").unwrap();
    let mut columns = None;
    for message in &messages {
        match message {
            pgqueuer::postgres::SimpleQueryMessage::RowDescription(c) => {
                columns = Some(c.iter().map(|c| c.name().to_owned()).collect::<Vec<_>>());
            }
            pgqueuer::postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some(dbname) => {
                let names = columns.as_ref().expect("SHOW STATS describes its rows");
                let value = |name: &str| -> i64 {
                    let i = names
                        .iter()
                        .position(|n| n == name)
                        .unwrap_or_else(|| panic!("SHOW STATS has no {name}: {names:?}"));
                    row.get(i).unwrap().parse().unwrap()
                };
                return (
                    value("total_client_parse_count"),
                    value("total_server_parse_count"),
                    value("total_bind_count"),
                );
            }
            _ => {}
        }
    }
    panic!("SHOW STATS has no row for {dbname}");
}

/// Through PgBouncer 1.24 with `max_prepared_statements`, a pool set to
/// `Pooler::TransactionPrepared` prepares each per-job statement (the call of its
/// statement function) once per client connection: 400 single enqueues and a worker's
/// claims and completions, over two server connections, take a few dozen parses at most
/// and hundreds of binds, while every job runs once and a limit of 1 holds.
#[test]
fn a_pooler_that_keeps_prepared_statements_parses_each_statement_once() {
    let db = TestDb::new();
    let (host, port) = upstream();
    let bouncer = PgBouncer::start_release(Release::Prepared, Mode::Transaction, (&host, port), 2);
    let options = ConnectOptions {
        max_size: 4,
        min_idle: 0,
        pooler: Pooler::TransactionPrepared,
        listen_dsn: Some(db.dsn()),
        ..ConnectOptions::default()
    };
    let pool = pgqueuer::connect_with(&bouncer.dsn(&db.name), &options).unwrap();
    let queue = Queue::new(pool.clone());
    let mut ids = Vec::new();
    {
        let mut conn = pool.get().unwrap();
        let mut held = queue.on(&mut *conn);
        for i in 0..400 {
            let entrypoint = if i % 10 == 0 { "lim" } else { "free" };
            ids.push(
                held.enqueue(NewJob::new(entrypoint, i.to_string()))
                    .unwrap(),
            );
        }
    }
    let worker = drain_free_and_limited(&pool, 400);
    let statuses = queue.wait_for(&ids, Duration::from_secs(10)).unwrap();
    assert!(statuses.values().all(|s| *s == Status::Successful));
    drop((worker, pool));
    let (client_parses, server_parses, binds) = parse_and_bind_counts(&bouncer, &db.name);
    eprintln!(
        "PgBouncer: {client_parses} client parses, {server_parses} server parses, {binds} binds"
    );
    assert!(
        binds >= 400,
        "{binds} binds: the statements did not run prepared"
    );
    // A handful of statements on each of at most 4 client connections (the pool and
    // the run's own), whatever the number of runs.
    assert!(
        client_parses <= 60,
        "{client_parses} parses for {binds} binds: statements were prepared again"
    );
    assert!(
        server_parses >= 1,
        "PgBouncer prepared nothing on the server"
    );
    let log = bouncer.log();
    assert!(!log.contains("ERROR"), "PgBouncer logged an error: {log}");
}
