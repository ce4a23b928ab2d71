//! pg_terminate_backend: the backends of a running fleet are terminated again and
//! again.

use std::time::{Duration, Instant};

use super::checks::{Producer, RUNS_DDL, assert_limits, max_overlap, outcomes, wait_all_done};
use super::process::{Proc, assert_running, digest, spawn_fleet, terminate_all, worker_args};
use super::summary::{Ended, report_all_done};
use crate::harness::{TestDb, wait_listeners};

/// For 5 s, every 300 ms (and on until each worker process lost its listener at least
/// once and at least ten other backends went), the listeners' backends or every backend
/// of the test database (workers' pools, listeners, the producer) are terminated:
/// nothing is lost, limits hold, and both worker processes end up listening again.
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
    let mut procs = spawn_fleet(2, &db.dsn(), &args);
    let producer = Producer::start(&db.dsn(), &["lim", "free"], Duration::from_millis(50));
    let (mut rounds, mut listeners_killed, mut backends_killed) = (0, 0, 0);
    let mut terminated: Vec<i32> = Vec::new();
    let lost_listener = |procs: &[Proc]| {
        procs
            .iter()
            .all(|p| p.stderr().contains("listener lost its connection"))
    };
    let started = Instant::now();
    // On a busy machine listeners reconnect late and rounds find fewer backends: the
    // rounds go on (a minute at most) until what the test checks has happened.
    while started.elapsed() < Duration::from_secs(5)
        || !(listeners_killed >= 2 && backends_killed >= 10 && lost_listener(&procs))
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "a minute of terminations: {listeners_killed} listeners and {backends_killed} \
             other backends, listener losses logged {:?}",
            procs
                .iter()
                .map(|p| p.stderr().matches("listener lost its connection").count())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(300));
        let only_listeners = rounds % 3 == 0;
        // Listeners by name: after a health check their `query` no longer says LISTEN.
        let filter = if only_listeners {
            " AND application_name LIKE '%-listen'"
        } else {
            ""
        };
        let pids: Vec<i32> = client
            .query(
                &format!(
                    "WITH t AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid(){filter}) \
                     SELECT pid FROM t WHERE pg_terminate_backend(pid)"
                ),
                &[&db.name],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let killed = pids.len();
        terminated.extend(pids);
        if only_listeners {
            listeners_killed += killed;
        } else {
            backends_killed += killed;
        }
        rounds += 1;
    }
    let produced = producer.finish();
    let ids = &produced.ids;
    let lost = wait_all_done(&mut client, ids, Duration::from_secs(120));
    // Both listeners are back (each worker LISTENs on one connection of its own).
    let since = Instant::now();
    wait_listeners(
        &mut client,
        &db.name,
        2,
        &terminated,
        Duration::from_secs(60),
    );
    let relisten = since.elapsed();
    assert_running(&mut procs);
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
    report_all_done(
        "pg_terminate_backend",
        format!(
            "{} backends killed ({listeners_killed} listeners)",
            listeners_killed + backends_killed
        ),
        &Ended {
            ids,
            lost: &lost,
            done: &done,
            max: &max,
            limits: &limits,
        },
    );
    assert!(listeners_killed >= 2 && backends_killed >= 10);
    assert!(reconnects.iter().all(|n| *n >= 1), "{reconnects:?}");
    assert_limits(&max, &limits);
    terminate_all(&mut procs);
}
