//! Prompt rescue: an idle worker takes over a dead worker's jobs as soon as they go
//! stale, not at its next poll.

use std::time::{Duration, SystemTime};

use pgqueuer::{NewJob, Queue};
use uuid::Uuid;

use super::checks::{RUNS_DDL, outcomes, successful, wait_all_done};
use super::process::{Proc, worker_args};
use super::summary::{Row, report};
use crate::harness::{TestDb, eventually, wait_listeners};

/// The heartbeat timeout both workers run with. The dequeue timeout is the default
/// 30 s, so a rescue found only by polling would take up to that long.
const HEARTBEAT_TIMEOUT_S: u64 = 4;

/// Worker A holds two long jobs; worker B, idle with the default `dequeue_timeout`,
/// waits. A is SIGKILLed: B re-picks both within `heartbeat_timeout` + 5 s of their last
/// heartbeat (on the database's clock; a poll would take up to 30 s) and runs them.
#[test]
fn an_idle_worker_rescues_a_dead_workers_jobs_within_the_heartbeat_timeout() {
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let timeout = HEARTBEAT_TIMEOUT_S.to_string();
    // 20 s jobs: A is still in them when it is killed, however slowly B starts.
    let args = worker_args(
        &[("slow", 0, 20_000, 0)],
        &[
            "--threads",
            "2",
            "--heartbeat-timeout",
            &timeout,
            "--record",
        ],
    );
    let mut a = Proc::spawn("a", &db.dsn(), &args);
    let a_id: Uuid = a.wait_running(Duration::from_secs(20)).parse().unwrap();
    let queue = Queue::new(db.pool(2));
    let ids = queue
        .enqueue_many(&[NewJob::new("slow", "1"), NewJob::new("slow", "2")])
        .unwrap();
    let held_by = |client: &mut pgqueuer::postgres::Client, worker: &Uuid| -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM pgqueuer WHERE status = 'picked' \
                     AND queue_manager_id = $1 AND id = ANY($2::bigint[])",
                &[worker, &ids],
            )
            .unwrap()
            .get(0)
    };
    eventually(Duration::from_secs(60), "A holds both jobs", || {
        held_by(&mut client, &a_id) == 2
    });
    let mut b = Proc::spawn("b", &db.dsn(), &args);
    let b_id: Uuid = b.wait_running(Duration::from_secs(20)).parse().unwrap();
    // B is idle and listening: nothing is queued, and A's jobs are fresh.
    wait_listeners(&mut client, &db.name, 2, &[], Duration::from_secs(30));
    assert_eq!(
        held_by(&mut client, &a_id),
        2,
        "A no longer holds both jobs"
    );
    a.kill9();
    // A is dead: its jobs' heartbeats are the last they get.
    let last_beat: SystemTime = client
        .query_one(
            "SELECT max(heartbeat) FROM pgqueuer WHERE id = ANY($1::bigint[])",
            &[&ids],
        )
        .unwrap()
        .get(0);
    let since_kill = eventually(Duration::from_secs(60), "B re-picks A's jobs", || {
        let finished: i64 = client
            .query_one(
                "SELECT count(*) FROM pgqueuer_example_runs r JOIN unnest($1::bigint[]) i(id) \
                     ON r.job_id = i.id WHERE r.pid = $2",
                &[&ids, &i32::try_from(b.pid()).unwrap()],
            )
            .unwrap()
            .get(0);
        held_by(&mut client, &b_id) + finished == 2
    });
    // When each job was picked again, after its last heartbeat, on the database's clock.
    let rescue: f64 = client
        .query_one(
            "SELECT max(EXTRACT(EPOCH FROM created - $2::timestamptz))::float8 FROM pgqueuer_log \
             WHERE job_id = ANY($1::bigint[]) AND status = 'picked' AND created > $2",
            &[&ids, &last_beat],
        )
        .unwrap()
        .get(0);
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(90));
    let done = outcomes(&mut client, &ids);
    eprintln!(
        "rescue: B re-picked A's jobs {rescue:.2} s after their last heartbeat, held them \
         {since_kill:?} after the kill (heartbeat timeout {HEARTBEAT_TIMEOUT_S} s, dequeue \
         timeout 30 s); outcomes {done:?}"
    );
    report(Row {
        test: "rescue after SIGKILL",
        faults: format!("SIGKILL; re-picked after {rescue:.1} s"),
        enqueued: ids.len(),
        completed: successful(&done),
        lost: lost.len(),
        concurrency: "-".into(),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    // Stale at the timeout; 5 s more for a busy machine is still far from the 30 s poll.
    let bound = Duration::from_secs(HEARTBEAT_TIMEOUT_S + 5).as_secs_f64();
    assert!(
        rescue <= bound,
        "the rescue came {rescue:.2} s after the last heartbeat, more than the heartbeat \
         timeout + 5 s"
    );
    let _ = b.terminate();
}
