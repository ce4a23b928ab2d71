//! A black-holed network: the path between the workers and the server stops carrying
//! packets, with no FIN or RST, and comes back.

use std::time::{Duration, Instant, SystemTime};

use super::checks::{Producer, RUNS_DDL, assert_limits, max_overlap, outcomes, wait_all_done};
use super::process::{assert_running, digest, spawn_fleet, terminate_all, worker_args};
use super::summary::{Ended, report_all_done};
use crate::harness::{TestDb, wait_listeners};
use crate::proxy::CountingProxy;

/// The network deadline the workers run with (`tcp_user_timeout` in their DSN): a
/// connection with a statement in flight fails this long after the path went silent.
const DEADLINE_S: u64 = 3;

/// How long the path stays silent: well past the deadline, so every connection the
/// workers hold is found dead while it lasts.
const FROZEN: Duration = Duration::from_secs(9);

/// Two worker processes reach the server only through a proxy whose port is then
/// black-holed for 9 s (or until both have noticed, 30 s at most) while a producer keeps
/// enqueueing directly: the workers' pool connections, listeners and heartbeats notice
/// the network deadline (3 s), reconnect by themselves once the path returns, and every
/// job ends with the limit held.
#[test]
fn a_black_holed_network_is_noticed_and_survived() {
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let proxy = CountingProxy::start();
    let through = format!(
        "{}&tcp_user_timeout={DEADLINE_S}&connect_timeout=2",
        proxy.dsn(&db.name)
    );
    let plan = [("lim", 2, 30, 0), ("free", 0, 5, 0)];
    let limits: Vec<(&str, u32)> = plan.iter().map(|p| (p.0, p.1)).collect();
    // Heartbeats outlast the silence: a job held through it is not re-picked meanwhile.
    // A 120 s dequeue timeout: jobs that start within seconds were announced by NOTIFY.
    let args = worker_args(
        &plan,
        &[
            "--threads",
            "3",
            "--heartbeat-timeout",
            "30",
            "--dequeue-timeout",
            "120",
            "--record",
        ],
    );
    let mut procs = spawn_fleet(2, &through, &args);
    let before = wait_listeners(&mut client, &db.name, 2, &[], Duration::from_secs(30));
    let producer = Producer::start(&db.dsn(), &["lim", "free"], Duration::from_millis(50));
    std::thread::sleep(Duration::from_millis(1_500));
    let frozen = proxy.freeze();
    let frozen_at = SystemTime::now();
    std::thread::sleep(FROZEN);
    // Every worker notices within the deadline when idle; the silence goes on (30 s at
    // most) until each has, on a busy machine: its connections are failing, not waiting.
    let silent = Instant::now();
    while !procs.iter().all(|p| noticed(&p.stderr())) && silent.elapsed() < Duration::from_secs(21)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let noticed: Vec<bool> = procs.iter().map(|p| noticed(&p.stderr())).collect();
    drop(frozen);
    let thawed = Instant::now();
    let thawed_at = SystemTime::now();
    let first_run_after = first_run_after(&mut client, thawed_at, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(1_500));
    let produced = producer.finish();
    let ids = &produced.ids;
    let lost = wait_all_done(&mut client, ids, Duration::from_secs(120));
    let recovered = thawed.elapsed();
    // Both listeners are back, on new backends (the old ones may linger on the server).
    wait_listeners(&mut client, &db.name, 2, &before, Duration::from_secs(60));
    // With a 120 s dequeue timeout, a job enqueued now starts within seconds only if the
    // workers' listeners reconnected and hear its NOTIFY.
    let queue = pgqueuer::Queue::new(db.pool(1));
    let mut latencies = Vec::new();
    for i in 0..4 {
        let sent = Instant::now();
        let id = queue
            .enqueue(pgqueuer::NewJob::new("free", format!("after {i}")))
            .unwrap();
        let _ = queue.wait_for(&[id], Duration::from_secs(40));
        latencies.push(sent.elapsed());
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_running(&mut procs);
    let max = max_overlap(&mut client);
    let done = outcomes(&mut client, ids);
    for p in &procs {
        eprintln!("worker {} reported {:?}", p.label, digest(&p.stderr()));
    }
    let ran_during: i64 = client
        .query_one(
            "SELECT count(*) FROM pgqueuer_example_runs WHERE started > $1 AND started < $2",
            &[&(frozen_at + Duration::from_secs(1)), &thawed_at],
        )
        .unwrap()
        .get(0);
    eprintln!(
        "black hole: {} jobs, outcomes {done:?}, noticed {noticed:?}, first run {:?} after \
         the path returned, all done {recovered:?} after it, runs started while frozen \
         {ran_during}, latencies after {latencies:?}, overlap {max:?}",
        ids.len(),
        first_run_after
    );
    report_all_done(
        "network black hole",
        format!("{FROZEN:?} silent path (deadline {DEADLINE_S} s)"),
        &Ended {
            ids,
            lost: &lost,
            done: &done,
            max: &max,
            limits: &limits,
        },
    );
    // Milliseconds when idle; 10 s is room for a busy machine, far below the poll.
    assert!(
        latencies.iter().all(|l| *l < Duration::from_secs(10)),
        "jobs enqueued after the path returned waited {latencies:?}: a listener did not \
         reconnect"
    );
    assert!(
        noticed.iter().all(|n| *n),
        "a worker did not notice the silent path within {FROZEN:?}: {noticed:?}"
    );
    assert_eq!(ran_during, 0, "no job can start while the path is silent");
    // Seconds when idle (reconnects, the claim backoff of at most 5 s); 30 s is room for
    // a busy machine and still shows the fleet recovering by itself.
    assert!(
        first_run_after.is_some_and(|d| d < Duration::from_secs(30)),
        "the fleet took {first_run_after:?} to run a job after the path returned"
    );
    assert_limits(&max, &limits);
    terminate_all(&mut procs);
}

/// A worker's stderr shows that a connection was found dead (a failed statement or a
/// reconnect), not merely slow.
fn noticed(stderr: &str) -> bool {
    [
        "timed out",
        "connection",
        "Connection",
        "listener lost",
        "cannot connect",
    ]
    .iter()
    .any(|needle| stderr.contains(needle))
}

/// How long after `at` the first recorded run started, waiting up to `limit`.
fn first_run_after(
    client: &mut pgqueuer::postgres::Client,
    at: SystemTime,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let first: Option<SystemTime> = client
            .query_one(
                "SELECT min(started) FROM pgqueuer_example_runs WHERE started >= $1",
                &[&at],
            )
            .unwrap()
            .get(0);
        if let Some(first) = first {
            return Some(first.duration_since(at).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
