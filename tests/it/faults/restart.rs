//! Server restart: the server is stopped and restarted under a running fleet.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use pgqueuer::postgres::NoTls;

use super::checks::{Producer, RUNS_DDL, assert_limits, max_overlap, outcomes, wait_all_done};
use super::process::{assert_running, digest, spawn_fleet, terminate_all, worker_args};
use super::summary::{Ended, report_all_done};
use crate::harness::Throwaway;

/// A server of the test's own is stopped (2 s down) and later restarted while two worker
/// processes run and a producer enqueues: both recover without being restarted, every
/// job ends, nothing stays picked, limits hold.
#[test]
fn a_server_restart_mid_run_loses_nothing() {
    let server = Throwaway::new(&[]).unwrap_or_else(|e| panic!("throwaway server: {e}"));
    let mut admin = server.admin();
    admin.batch_execute("CREATE DATABASE faults").unwrap();
    drop(admin);
    let dsn = server.dsn("faults");
    let connect = || {
        let mut c = server.server.config("faults").connect(NoTls).unwrap();
        c.batch_execute("SET application_name = 'fault-test'")
            .unwrap();
        c
    };
    let mut client = connect();
    pgqueuer::upgrade(&mut client).unwrap();
    client.batch_execute(RUNS_DDL).unwrap();
    let plan = [("lim", 2, 40, 0), ("free", 0, 10, 0)];
    let limits: Vec<(&str, u32)> = plan.iter().map(|p| (p.0, p.1)).collect();
    // Heartbeats outlast the outage, so nothing is re-picked while still running.
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
    let producer = Producer::start(&dsn, &["lim", "free"], Duration::from_millis(60));
    std::thread::sleep(Duration::from_millis(1_500));
    let stopped_at = SystemTime::now();
    server.stop().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    server.start().unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    server.restart().unwrap();
    let restarted_at = SystemTime::now();
    std::thread::sleep(Duration::from_millis(1_500));
    let produced = producer.finish();
    let mut client = connect();
    let ids = &produced.ids;
    let lost = wait_all_done(&mut client, ids, Duration::from_secs(60));
    assert_running(&mut procs);
    let max = max_overlap(&mut client);
    let done = outcomes(&mut client, ids);
    // Recorded runs per worker process id that started after `at`.
    let after = |at: SystemTime| -> BTreeMap<i32, i64> {
        let mut c = connect();
        c.query(
            "SELECT pid, count(*) FROM pgqueuer_example_runs WHERE started > $1 GROUP BY pid",
            &[&at],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    };
    let after_stop = after(stopped_at);
    let after_restart = after(restarted_at);
    let reconnects: Vec<usize> = procs
        .iter()
        .map(|p| p.stderr().matches("listener lost its connection").count())
        .collect();
    for p in &procs {
        eprintln!("worker {} reported {:?}", p.label, digest(&p.stderr()));
    }
    eprintln!(
        "server restart: {} jobs, outcomes {done:?}, producer errors {} (first: {:?}), \
         {} enqueued after the first failure, runs per pid after the stop {after_stop:?}, \
         after the restart {after_restart:?}, listener reconnects {reconnects:?}, overlap {max:?}",
        ids.len(),
        produced.errors,
        produced.first_errors,
        produced.ids_after_failure
    );
    report_all_done(
        "server stop+restart",
        format!("stop 2 s + restart; {} producer errors", produced.errors),
        &Ended {
            ids,
            lost: &lost,
            done: &done,
            max: &max,
            limits: &limits,
        },
    );
    assert!(produced.errors > 0, "the producer never saw the outage");
    assert!(
        produced.ids_after_failure > 0,
        "the producer did not recover"
    );
    for p in &procs {
        let pid = i32::try_from(p.pid()).unwrap();
        assert!(
            after_stop.contains_key(&pid),
            "worker {} ran nothing after the outage: {}",
            p.label,
            p.stderr()
        );
    }
    assert!(
        !after_restart.is_empty(),
        "no job ran after the second restart"
    );
    assert_limits(&max, &limits);
    terminate_all(&mut procs);
}
