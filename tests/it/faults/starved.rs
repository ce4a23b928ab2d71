//! Handlers that use the worker's pool: heartbeats and outcomes have connections of
//! their own, so no handler can keep a live worker's jobs from their heartbeats.

use std::time::{Duration, Instant};

use pgqueuer::{JobId, NewJob, Queue};

use super::checks::{RUNS_DDL, outcomes, runs_twice, wait_all_done};
use super::process::{assert_running, spawn_fleet, worker_args};
use super::summary::{Row, report};
use crate::harness::{TestDb, scalar};

/// Two worker processes whose pools (five connections) are all but filled by four
/// handlers that each hold a connection while they run; in each of 20 rounds, once the
/// round's four jobs run, every backend of the database is terminated (the pools', the
/// listeners', the heartbeats', the outcomes'). The heartbeats reconnect on their own
/// connections while the handlers still hold theirs, so no job goes stale and none runs
/// twice at once (runs as the server's clock has them); each ends once.
#[test]
fn handlers_holding_the_pool_never_starve_the_heartbeat() {
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let heartbeat_timeout = 2.0;
    // Each job runs well past the heartbeat timeout after the kill.
    let job_millis = 3_000;
    let args = worker_args(
        &[("hold", 0, job_millis, 0)],
        &[
            "--threads",
            "4",
            "--pool",
            "5",
            "--heartbeat-timeout",
            &heartbeat_timeout.to_string(),
            "--dequeue-timeout",
            "1",
            "--hold-connection",
            "--batch",
            "4",
            "--record",
        ],
    );
    let mut procs = spawn_fleet(2, &db.dsn(), &args);
    let queue = Queue::new(db.pool(2));
    let mut ids: Vec<JobId> = Vec::new();
    let mut killed = 0usize;
    let rounds = 20;
    for round in 0..rounds {
        let jobs: Vec<NewJob> = (0..4)
            .map(|i| NewJob::new("hold", format!("{round}.{i}")))
            .collect();
        let these = queue.enqueue_many(&jobs).unwrap();
        // Every job of the round picked, its handler holding a connection.
        let started = Instant::now();
        while scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
        ) < 4
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "round {round}: the jobs were not all picked within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        killed += client
            .query(
                "WITH t AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()) \
                 SELECT pid FROM t WHERE pg_terminate_backend(pid)",
                &[&db.name],
            )
            .unwrap()
            .len();
        let lost = wait_all_done(&mut client, &these, Duration::from_secs(60));
        assert!(lost.is_empty(), "round {round}: jobs never ended: {lost:?}");
        ids.extend(these);
        assert_running(&mut procs);
    }
    let twice = runs_twice(&mut client);
    let runs: i64 = scalar(
        &mut client,
        "SELECT count(DISTINCT (job_id, pid, started)) FROM pgqueuer_example_runs",
    );
    let overlapping: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM pgqueuer_example_runs a JOIN pgqueuer_example_runs b \
         ON a.job_id = b.job_id AND (a.pid, a.started) < (b.pid, b.started) \
         AND a.started < b.finished AND b.started < a.finished",
    );
    let done = outcomes(&mut client, &ids);
    report(Row {
        test: "pool held by handlers",
        faults: format!("{rounds} rounds, {killed} backends terminated"),
        enqueued: ids.len(),
        completed: super::checks::successful(&done),
        lost: 0,
        concurrency: "-".into(),
    });
    assert_eq!(overlapping, 0, "jobs ran twice at once:\n{twice}");
    assert_eq!(runs, i64::try_from(ids.len()).unwrap(), "runs:\n{twice}");
    assert_eq!(done.get("successful").copied(), Some(4 * i64::from(rounds)));
    for p in &mut procs {
        p.terminate();
    }
}
