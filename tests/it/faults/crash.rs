//! Server crash: the server is stopped as a crash would stop it (`pg_ctl stop -m
//! immediate`, no checkpoint, WAL replayed at the next start) under a running fleet.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use pgqueuer::postgres::NoTls;

use super::checks::{Producer, RUNS_DDL, assert_limits, max_overlap, outcomes, wait_all_done};
use super::process::{assert_running, digest, spawn_fleet, terminate_all, worker_args};
use super::summary::{Ended, report_all_done};
use crate::harness::Throwaway;

/// A server of the test's own crashes mid-run (immediate stop, 2 s down) while two
/// worker processes run and a producer enqueues: both recover without being restarted,
/// every job ends, and the slots came back from the WAL with the rows: sampled through
/// the recovery, no limited entrypoint ever has more than its limit picked, and no two
/// recorded runs of it overlap beyond the limit.
#[test]
fn a_server_crash_mid_run_loses_nothing_and_keeps_the_limits() {
    let server = Throwaway::new(&[]).unwrap_or_else(|e| panic!("throwaway server: {e}"));
    let mut admin = server.admin();
    admin.batch_execute("CREATE DATABASE faults").unwrap();
    drop(admin);
    let dsn = server.dsn("faults");
    let connect = || server.server.config("faults").connect(NoTls).unwrap();
    let mut client = connect();
    pgqueuer::upgrade(&mut client).unwrap();
    client.batch_execute(RUNS_DDL).unwrap();
    let plan = [("lim", 2, 40, 0), ("one", 1, 20, 0), ("free", 0, 10, 0)];
    let limits: Vec<(&str, u32)> = plan.iter().map(|p| (p.0, p.1)).collect();
    let args = worker_args(
        &plan,
        &[
            "--threads",
            "3",
            "--heartbeat-timeout",
            "10",
            "--dequeue-timeout",
            "0.5",
            "--record",
        ],
    );
    let mut procs = spawn_fleet(2, &dsn, &args);
    let producer = Producer::start(&dsn, &["lim", "one", "free"], Duration::from_millis(60));
    std::thread::sleep(Duration::from_millis(1_500));
    let crashed_at = SystemTime::now();
    server.crash().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    server.start().unwrap();
    // Sample the picked rows while the fleet reconnects and catches up.
    let mut client = connect();
    let mut most_picked: BTreeMap<String, i64> = BTreeMap::new();
    let sampling = Instant::now();
    while sampling.elapsed() < Duration::from_secs(3) {
        for row in client
            .query(
                "SELECT entrypoint, count(*) FROM pgqueuer WHERE status = 'picked' GROUP BY 1",
                &[],
            )
            .unwrap()
        {
            let (ep, n): (String, i64) = (row.get(0), row.get(1));
            let most = most_picked.entry(ep).or_default();
            *most = (*most).max(n);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let produced = producer.finish();
    let ids = &produced.ids;
    let lost = wait_all_done(&mut client, ids, Duration::from_secs(60));
    assert_running(&mut procs);
    let max = max_overlap(&mut client);
    let done = outcomes(&mut client, ids);
    let after: BTreeMap<i32, i64> = client
        .query(
            "SELECT pid, count(*) FROM pgqueuer_example_runs WHERE started > $1 GROUP BY pid",
            &[&crashed_at],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for p in &procs {
        eprintln!("worker {} reported {:?}", p.label, digest(&p.stderr()));
    }
    eprintln!(
        "server crash: {} jobs, outcomes {done:?}, producer errors {} (first: {:?}), most \
         picked while recovering {most_picked:?}, runs per pid after the crash {after:?}, \
         overlap {max:?}",
        ids.len(),
        produced.errors,
        produced.first_errors,
    );
    report_all_done(
        "server crash",
        format!(
            "immediate stop, 2 s down; {} producer errors",
            produced.errors
        ),
        &Ended {
            ids,
            lost: &lost,
            done: &done,
            max: &max,
            limits: &limits,
        },
    );
    assert!(produced.errors > 0, "the producer never saw the crash");
    assert!(
        produced.ids_after_failure > 0,
        "the producer did not recover"
    );
    for p in &procs {
        let pid = i32::try_from(p.pid()).unwrap();
        assert!(
            after.contains_key(&pid),
            "worker {} ran nothing after the crash: {}",
            p.label,
            p.stderr()
        );
    }
    for (ep, limit) in &limits {
        if *limit > 0 {
            let most = most_picked.get(*ep).copied().unwrap_or(0);
            assert!(
                most <= i64::from(*limit),
                "{ep}: {most} picked at once while recovering, limit {limit}"
            );
        }
    }
    assert_limits(&max, &limits);
    terminate_all(&mut procs);
}
