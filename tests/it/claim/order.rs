//! What a claim takes: order, the per-worker budget, what is due next, bad options.

use std::time::Duration;

use pgqueuer::postgres::Client;
use pgqueuer::{Claimer, Status};

use super::{insert_jobs, success};
use crate::harness::{TestDb, scalar};

/// A claim takes the highest priority first, then the lowest id, only of its own
/// entrypoints, logs a `picked` row per job, and completing them logs and deletes them.
#[test]
fn claims_in_priority_then_id_order_and_logs_picks() {
    let db = TestDb::new();
    let mut client = db.client();
    let low = insert_jobs(&mut client, "a", 0, 2);
    let high = insert_jobs(&mut client, "b", 5, 2);
    insert_jobs(&mut client, "other", 9, 1);
    let pool = db.pool(1);
    let claimer = Claimer::builder()
        .entrypoint("a", 0)
        .entrypoint("b", 0)
        .build()
        .unwrap();
    let claim = claimer.claim(&mut pool.get().unwrap(), 3).unwrap();
    let ids: Vec<i64> = claim.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [high[0], high[1], low[0]]);
    for job in &claim.jobs {
        assert_eq!(job.status, Status::Picked);
        assert_eq!(job.queue_manager_id, Some(claimer.worker_id()));
        assert_eq!(job.slot, None, "unlimited entrypoints take no slot");
    }
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'picked'"
        ),
        3
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'other' AND status = 'queued'"
        ),
        1
    );
    let done = claimer
        .complete(&mut pool.get().unwrap(), &success(ids.clone()))
        .unwrap();
    assert_eq!(done.len(), 3);
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ),
        3
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        2
    );
}

/// A claimer without entrypoints, with one twice or with a zero heartbeat timeout is
/// not built, and a claim of batch size 0 is refused.
#[test]
fn bad_claimer_options_are_rejected() {
    assert!(
        Claimer::builder()
            .build()
            .unwrap_err()
            .to_string()
            .contains("entrypoint")
    );
    let err = Claimer::builder()
        .entrypoint("a", 0)
        .entrypoint("a", 1)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    let err = Claimer::builder()
        .entrypoint("a", 0)
        .heartbeat_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("heartbeat_timeout"), "{err}");
    let db = TestDb::new();
    let pool = db.pool(1);
    let claimer = Claimer::builder().entrypoint("a", 0).build().unwrap();
    let err = claimer.claim(&mut pool.get().unwrap(), 0).unwrap_err();
    assert!(err.to_string().contains("batch_size"), "{err}");
}

/// `max_concurrent_tasks` caps the jobs one claimer holds at once, across claims.
#[test]
fn the_budget_caps_what_one_worker_holds() {
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "a", 0, 10);
    let pool = db.pool(1);
    let claimer = Claimer::builder()
        .entrypoint("a", 0)
        .max_concurrent_tasks(4)
        .build()
        .unwrap();
    let mut conn = pool.get().unwrap();
    assert_eq!(claimer.claim(&mut conn, 3).unwrap().jobs.len(), 3);
    assert_eq!(claimer.claim(&mut conn, 3).unwrap().jobs.len(), 1);
    assert_eq!(claimer.claim(&mut conn, 3).unwrap().jobs.len(), 0);
}

/// `next_due` is how long until the earliest queued job of the claimer's own
/// entrypoints is due (zero when one already is), ignoring other entrypoints and picked
/// rows.
#[test]
fn next_due_is_the_earliest_queued_job_of_any_own_entrypoint() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(1);
    let mut conn = pool.get().unwrap();
    let claimer = Claimer::builder()
        .entrypoint("a", 0)
        .entrypoint("b", 0)
        .build()
        .unwrap();
    assert_eq!(claimer.next_due(&mut conn).unwrap(), None, "nothing queued");
    let defer = |client: &mut Client, entrypoint: &str, seconds: i32, count: i64| {
        let ids = insert_jobs(client, entrypoint, 0, count);
        client
            .execute(
                "UPDATE pgqueuer SET execute_after = NOW() + $2 * INTERVAL '1 second' \
                 WHERE id = ANY($1)",
                &[&ids, &f64::from(seconds)],
            )
            .unwrap();
    };
    // Each entrypoint's earliest counts, however many later jobs it has; other
    // entrypoints and picked rows do not.
    defer(&mut client, "a", 600, 50);
    defer(&mut client, "a", 300, 1);
    defer(&mut client, "b", 100, 1);
    defer(&mut client, "b", 900, 50);
    defer(&mut client, "other", 1, 1);
    let due = claimer.next_due(&mut conn).unwrap().unwrap();
    // b's 100 s, less the time since it was set (seconds at most on a busy machine):
    // not other's 1 s, nor a's 300 s.
    assert!(
        due > Duration::from_secs(95) && due <= Duration::from_secs(100),
        "{due:?}"
    );
    defer(&mut client, "a", -5, 1);
    assert_eq!(
        claimer.next_due(&mut conn).unwrap(),
        Some(Duration::ZERO),
        "a job already due"
    );
    let claim = claimer.claim(&mut conn, 10).unwrap();
    assert_eq!(claim.jobs.len(), 1, "only the due job is claimed");
    let due = claimer.next_due(&mut conn).unwrap().unwrap();
    assert!(
        due > Duration::from_secs(95),
        "a picked job is not queued: {due:?}"
    );
}
