//! Prompt rescue: an idle worker takes over a dead worker's jobs as soon as they go
//! stale, not at its next poll.

use std::time::Duration;

use pgqueuer::{NewJob, Queue};
use uuid::Uuid;

use super::checks::{RUNS_DDL, outcomes, successful, wait_all_done};
use super::process::{Proc, worker_args};
use super::summary::{Row, report};
use crate::harness::{TestDb, eventually, scalar};

/// The heartbeat timeout both workers run with. The dequeue timeout is the default
/// 30 s, so a rescue found only by polling would take up to that long.
const HEARTBEAT_TIMEOUT_S: u64 = 4;

/// Worker A holds two long jobs; worker B, idle with the default `dequeue_timeout`,
/// waits. A is SIGKILLed: B re-picks both within `heartbeat_timeout` + 2 s of the kill
/// (the last heartbeat was at most half the timeout before it) and runs them.
#[test]
fn an_idle_worker_rescues_a_dead_workers_jobs_within_the_heartbeat_timeout() {
    let db = TestDb::new();
    let mut client = db.client();
    client.batch_execute(RUNS_DDL).unwrap();
    let timeout = HEARTBEAT_TIMEOUT_S.to_string();
    let args = worker_args(
        &[("slow", 0, 2_000, 0)],
        &[
            "--threads",
            "2",
            "--heartbeat-timeout",
            &timeout,
            "--record",
        ],
    );
    let mut a = Proc::spawn("a", &db.dsn(), &args);
    a.wait_running(Duration::from_secs(20));
    let queue = Queue::new(db.pool(2));
    let ids = queue
        .enqueue_many(&[NewJob::new("slow", "1"), NewJob::new("slow", "2")])
        .unwrap();
    eventually(Duration::from_secs(10), "A holds both jobs", || {
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'",
        ) == 2
    });
    let mut b = Proc::spawn("b", &db.dsn(), &args);
    let b_id: Uuid = b.wait_running(Duration::from_secs(20)).parse().unwrap();
    // B is idle: nothing is queued, and A's jobs are fresh.
    std::thread::sleep(Duration::from_millis(500));
    a.kill9();
    let since_kill = eventually(Duration::from_secs(40), "B re-picks A's jobs", || {
        let held: i64 = client
            .query_one(
                "SELECT count(*) FROM pgqueuer WHERE status = 'picked' \
                     AND queue_manager_id = $1",
                &[&b_id],
            )
            .unwrap()
            .get(0);
        let finished: i64 = client
            .query_one(
                "SELECT count(*) FROM pgqueuer_example_runs r JOIN unnest($1::bigint[]) i(id) \
                     ON r.job_id = i.id WHERE r.pid = $2",
                &[&ids, &i32::try_from(b.pid()).unwrap()],
            )
            .unwrap()
            .get(0);
        held + finished == 2
    });
    let lost = wait_all_done(&mut client, &ids, Duration::from_secs(30));
    let done = outcomes(&mut client, &ids);
    eprintln!(
        "rescue: B held A's jobs {since_kill:?} after the kill (heartbeat timeout \
         {HEARTBEAT_TIMEOUT_S} s, dequeue timeout 30 s); outcomes {done:?}"
    );
    report(Row {
        test: "rescue after SIGKILL",
        faults: format!("SIGKILL; re-picked after {:.1} s", since_kill.as_secs_f64()),
        enqueued: ids.len(),
        completed: successful(&done),
        lost: lost.len(),
        concurrency: "-".into(),
    });
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert!(
        since_kill <= Duration::from_secs(HEARTBEAT_TIMEOUT_S + 2),
        "the rescue took {since_kill:?}, more than the heartbeat timeout + 2 s"
    );
    let _ = b.terminate();
}
