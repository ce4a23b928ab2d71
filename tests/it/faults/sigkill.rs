//! SIGKILL: worker processes killed while they hold jobs.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use pgqueuer::postgres::Client;
use pgqueuer::{JobId, Queue};

use super::checks::{
    RUNS_DDL, assert_audit, assert_limits, count, enqueue_plan, max_overlap, outcomes,
    wait_all_done,
};
use super::process::{Proc, assert_running, spawn_fleet, terminate_all, worker_args};
use super::summary::{Ended, report_all_done};
use crate::harness::{TestDb, eventually, scalar};

/// (entrypoint, limit, handler millis, jobs) of the run.
const PLAN: [(&str, u32, u64, usize); 3] = [
    ("lim2", 2, 150, 40),
    ("lim1", 1, 100, 15),
    ("free", 0, 20, 200),
];

/// The heartbeat timeout of the workers, in seconds: a beat every 2 s, so that one late
/// by a second on a busy machine does not let a live worker's job be re-picked.
const HEARTBEAT_TIMEOUT_S: u64 = 4;

/// How many kills to make (fewer if the queue empties first).
const KILLS: usize = 6;

/// What the kills did.
struct Kills {
    kills: usize,
    /// Kills of a process that still held jobs once its last statement had ended.
    mid_job: usize,
    /// Jobs orphaned, counting a job orphaned twice twice.
    orphanings: usize,
    /// The orphaned jobs, sorted, each once.
    orphans: Vec<JobId>,
    /// Each orphaning: the job and its last heartbeat (the database's clock), read
    /// once its holder's backends were gone.
    orphaned_at: Vec<(JobId, SystemTime)>,
}

/// Worker processes SIGKILLed while they hold jobs: the orphans are re-picked after the
/// heartbeat timeout (4 s after their last heartbeat) and completed, no job is lost, and the recorded runs of a
/// limited entrypoint never overlap beyond its limit.
#[test]
fn sigkilled_workers_lose_no_job_and_limits_hold() {
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let queue = Queue::new(db.pool(2));
    let limits: Vec<(&str, u32)> = PLAN.iter().map(|p| (p.0, p.1)).collect();
    let ids = enqueue_plan(&queue, &PLAN);
    let args = worker_args(
        &PLAN,
        &[
            "--threads",
            "3",
            "--batch",
            "3",
            "--heartbeat-timeout",
            &HEARTBEAT_TIMEOUT_S.to_string(),
            "--dequeue-timeout",
            "0.5",
            "--record",
        ],
    );
    let mut procs = spawn_fleet(3, &db.dsn(), &args);
    let started = Instant::now();
    let k = kill_the_busiest(&mut client, &mut procs, &db.dsn(), &args);
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(120));
    let elapsed = started.elapsed();
    assert_running(&mut procs);
    let max = max_overlap(&mut client);
    assert_audit(
        &mut client,
        elapsed + Duration::from_secs(60),
        &max,
        &limits,
    );
    let done = outcomes(&mut client, &ids);
    let runs: i64 = scalar(&mut client, "SELECT count(*) FROM pgqueuer_example_runs");
    let distinct: i64 = scalar(
        &mut client,
        "SELECT count(DISTINCT job_id) FROM pgqueuer_example_runs",
    );
    let repicked = repicks(&mut client, &k.orphans);
    let delays = repick_delays(&mut client, &k.orphaned_at);
    let fastest = delays.iter().copied().fold(f64::INFINITY, f64::min);
    let slowest = delays.iter().copied().fold(0.0, f64::max);
    eprintln!("sigkill: orphans re-picked {fastest:.2}..{slowest:.2} s after their last heartbeat");
    eprintln!(
        "sigkill: {} kills ({} mid-job, {} jobs orphaned, {} distinct), \
         {} jobs in {elapsed:?}, outcomes {done:?}, {runs} recorded runs of {distinct} jobs \
         ({} re-runs), overlap {max:?}",
        k.kills,
        k.mid_job,
        k.orphanings,
        k.orphans.len(),
        ids.len(),
        runs - distinct
    );
    report_all_done(
        "sigkill workers",
        format!("{} SIGKILL ({} jobs orphaned)", k.kills, k.orphanings),
        &Ended {
            ids: &ids,
            lost: &lost,
            done: &done,
            max: &max,
            limits: &limits,
        },
    );
    assert!(
        k.mid_job >= 3,
        "only {} kills hit a worker mid-job",
        k.mid_job
    );
    // Every orphan was picked again (after its heartbeat went stale) and completed.
    assert_eq!(repicked.len(), k.orphans.len());
    for (id, picks, last) in &repicked {
        assert!(*picks >= 2, "orphan {id} was picked {picks} times");
        assert_eq!(last, "successful", "orphan {id}");
    }
    assert_eq!(distinct, count(ids.len()), "every job ran to completion");
    // Both times are the database's: a re-pick takes a heartbeat older than the timeout.
    let timeout = Duration::from_secs(HEARTBEAT_TIMEOUT_S).as_secs_f64();
    assert!(
        delays.iter().all(|d| *d >= timeout),
        "an orphan was re-picked before its heartbeat went stale: {delays:?}"
    );
    assert_limits(&max, &limits);
    terminate_all(&mut procs);
}

/// Every 700 ms, SIGKILLs the live process holding the most picked jobs and starts a
/// fresh one in its place, [`KILLS`] times or until the queue table is empty.
fn kill_the_busiest(client: &mut Client, procs: &mut [Proc], dsn: &str, args: &[String]) -> Kills {
    let (mut kills, mut mid_job) = (0, 0);
    let mut orphans: Vec<JobId> = Vec::new();
    let mut orphaned_at: Vec<(JobId, SystemTime)> = Vec::new();
    let mut spawned = procs.len();
    while kills < KILLS {
        std::thread::sleep(Duration::from_millis(700));
        let Some(i) = busiest(client, procs) else {
            if scalar::<i64>(client, "SELECT count(*) FROM pgqueuer") == 0 {
                break;
            }
            continue;
        };
        let worker_id = procs[i].worker_id_now().unwrap();
        let ports = client_ports(procs[i].pid());
        assert!(
            !ports.is_empty(),
            "no connections of {} found",
            procs[i].label
        );
        procs[i].kill9();
        kills += 1;
        // A statement the process sent just before dying still runs to its end on the
        // server (a completion, say): what is still held once its backends are gone is
        // orphaned, with the last heartbeat it will get.
        eventually(
            Duration::from_secs(30),
            "the killed worker's backends to end",
            || {
                client
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY($1::int[])",
                        &[&ports],
                    )
                    .unwrap()
                    .get::<_, i64>(0)
                    == 0
            },
        );
        let held: Vec<(JobId, SystemTime)> = client
            .query(
                "SELECT id, heartbeat FROM pgqueuer WHERE status = 'picked' \
                 AND queue_manager_id = $1::text::uuid",
                &[&worker_id],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let orphaned: Vec<JobId> = held.iter().map(|(id, _)| *id).collect();
        eprintln!(
            "kill {kills}: SIGKILL {} (pid {}) holding {:?}",
            procs[i].label,
            procs[i].pid(),
            orphaned
        );
        if !orphaned.is_empty() {
            mid_job += 1;
        }
        orphaned_at.extend(held);
        orphans.extend(orphaned);
        procs[i] = Proc::spawn(&format!("w{spawned}"), dsn, args);
        spawned += 1;
    }
    // A re-picked orphan may be orphaned again by a later kill.
    let orphanings = orphans.len();
    orphans.sort_unstable();
    orphans.dedup();
    Kills {
        kills,
        mid_job,
        orphanings,
        orphans,
        orphaned_at,
    }
}

/// The index of the live process holding the most picked jobs, if any holds one.
fn busiest(client: &mut Client, procs: &[Proc]) -> Option<usize> {
    let held: HashMap<String, i64> = client
        .query(
            "SELECT queue_manager_id::text, count(*) FROM pgqueuer \
             WHERE status = 'picked' GROUP BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    procs
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let n = held.get(&p.worker_id_now()?).copied().unwrap_or(0);
            (n > 0).then_some((i, n))
        })
        .max_by_key(|(_, n)| *n)
        .map(|(i, _)| i)
}

/// For each orphan: its id, how often it was picked, and its last logged status.
fn repicks(client: &mut Client, orphans: &[JobId]) -> Vec<(JobId, i64, String)> {
    client
        .query(
            "SELECT job_id, count(*) FILTER (WHERE status = 'picked'), \
                    (array_agg(status::text ORDER BY id DESC))[1] \
             FROM pgqueuer_log WHERE job_id = ANY($1::bigint[]) GROUP BY job_id",
            &[&orphans],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// How long after its last heartbeat each orphan was picked again, in seconds (both on
/// the database's clock): more than the heartbeat timeout. NaN for an orphan never
/// picked again.
fn repick_delays(client: &mut Client, orphaned_at: &[(JobId, SystemTime)]) -> Vec<f64> {
    orphaned_at
        .iter()
        .map(|(id, at)| {
            client
                .query_one(
                    "SELECT EXTRACT(EPOCH FROM min(created) - $2::timestamptz)::float8 \
                     FROM pgqueuer_log WHERE job_id = $1 AND status = 'picked' AND created > $2",
                    &[id, at],
                )
                .unwrap()
                .get::<_, Option<f64>>(0)
                .unwrap_or(f64::NAN)
        })
        .collect()
}

/// The local ports of process `pid`'s TCP sockets (its connections to the server, which
/// `pg_stat_activity.client_port` names), from /proc.
fn client_ports(pid: u32) -> Vec<i32> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9 && inodes.iter().any(|i| i == fields[9]) {
                let port = fields[1].rsplit(':').next().unwrap_or("");
                if let Ok(port) = i32::from_str_radix(port, 16) {
                    ports.push(port);
                }
            }
        }
    }
    ports
}
