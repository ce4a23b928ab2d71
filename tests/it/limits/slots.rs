//! Capacity slots: the lowest free ones, reused by the claim that ends their jobs, kept
//! by a stale re-pick, and shared with rows picked before slots existed.

use std::time::Duration;

use pgqueuer::{Claimer, Outcome, Status};

use crate::claim::{insert_jobs, success};
use crate::harness::{TestDb, scalar};

/// A limited entrypoint's claims take the lowest free slots, none once the limit is full,
/// and a completed job's slot goes to the next claim.
#[test]
fn limited_claims_take_the_lowest_free_slots() {
    let db = TestDb::new();
    let mut client = db.client();
    let ids = insert_jobs(&mut client, "pdf", 0, 4);
    let pool = db.pool(1);
    let claimer = Claimer::builder().entrypoint("pdf", 3).build().unwrap();
    let mut conn = pool.get().unwrap();
    let claim = claimer.claim(&mut conn, 10).unwrap();
    let slots: Vec<Option<i64>> = claim.jobs.iter().map(|j| j.slot).collect();
    assert_eq!(slots, [Some(0), Some(1), Some(2)]);
    assert!(
        claimer.claim(&mut conn, 10).unwrap().jobs.is_empty(),
        "the limit is full"
    );
    // Finishing the job in slot 0 frees that slot for the fourth job.
    claimer.complete(&mut conn, &success([ids[0]])).unwrap();
    let claim = claimer.claim(&mut conn, 10).unwrap();
    assert_eq!(claim.jobs.len(), 1);
    assert_eq!((claim.jobs[0].id, claim.jobs[0].slot), (ids[3], Some(0)));
}

/// Ending claims and claiming in one statement: the slots of the ended rows (deleted, or
/// held as `failed`) go to this very claim, outcomes of rows not owned are skipped, and
/// a bad status changes nothing.
#[test]
fn ending_and_claiming_in_one_statement_reuses_the_freed_slots() {
    let db = TestDb::new();
    let mut client = db.client();
    let ids = insert_jobs(&mut client, "pdf", 0, 6);
    let pool = db.pool(1);
    let claimer = Claimer::builder().entrypoint("pdf", 3).build().unwrap();
    let mut conn = pool.get().unwrap();
    let claim = claimer.claim(&mut conn, 10).unwrap();
    assert_eq!(
        claim.jobs.iter().map(|j| j.slot).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2)]
    );

    let bad = [Outcome {
        id: ids[1],
        status: Status::Picked,
        traceback: None,
    }];
    let err = claimer.complete_and_claim(&mut conn, &bad, 10).unwrap_err();
    assert!(err.to_string().contains("picked"), "{err}");
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
        ),
        3,
        "a rejected call changes nothing"
    );

    // Slot 1's job succeeded and slot 2's failed (held); an id never claimed is skipped.
    let outcomes = [
        success([ids[1]]).remove(0),
        Outcome {
            id: ids[2],
            status: Status::Failed,
            traceback: Some(serde_json::json!({"exception_type": "X"})),
        },
        success([ids[5]]).remove(0),
    ];
    let claim = claimer
        .complete_and_claim(&mut conn, &outcomes, 10)
        .unwrap();
    let mut ended = claim.ended.clone();
    ended.sort_unstable();
    assert_eq!(ended, [ids[1], ids[2]]);
    let taken: Vec<(i64, Option<i64>)> = claim.jobs.iter().map(|j| (j.id, j.slot)).collect();
    assert_eq!(taken, [(ids[3], Some(1)), (ids[4], Some(2))]);
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
        ),
        3
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            &format!(
                "SELECT count(*) FROM pgqueuer WHERE id = {} AND status = 'failed'",
                ids[2]
            )
        ),
        1,
        "a failed job is held"
    );
    let logged: Vec<(i64, String)> = client
        .query(
            "SELECT job_id, status::text FROM pgqueuer_log WHERE status IN ('successful', 'failed') ORDER BY job_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        logged,
        [
            (ids[1], "successful".to_owned()),
            (ids[2], "failed".to_owned())
        ]
    );
    // With nothing left to claim, the outcomes are still written.
    let claim = claimer
        .complete_and_claim(&mut conn, &success([ids[0], ids[3]]), 10)
        .unwrap();
    assert!(claim.jobs.iter().all(|j| j.id == ids[5]));
    let mut ended = claim.ended;
    ended.sort_unstable();
    assert_eq!(ended, [ids[0], ids[3]]);
}

/// Ending claims and claiming in one statement frees what the ended rows held there too:
/// under a per-worker budget they no longer count against it, and an unlimited claim
/// takes the next job in the same statement.
#[test]
fn ending_and_claiming_in_one_statement_frees_the_budget_and_unlimited_claims() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(1);
    let mut conn = pool.get().unwrap();
    // With a per-worker budget the ended rows no longer count against it either.
    let budgeted = Claimer::builder()
        .entrypoint("b", 5)
        .max_concurrent_tasks(2)
        .build()
        .unwrap();
    let more = insert_jobs(&mut client, "b", 0, 3);
    assert_eq!(
        budgeted.claim(&mut conn, 10).unwrap().jobs.len(),
        2,
        "the budget"
    );
    let next = budgeted
        .complete_and_claim(&mut conn, &success([more[0]]), 10)
        .unwrap();
    assert_eq!(next.ended, [more[0]]);
    assert_eq!(
        next.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [more[2]]
    );
    // And the unlimited shape does the same.
    let free = Claimer::builder().entrypoint("free", 0).build().unwrap();
    let more = insert_jobs(&mut client, "free", 0, 2);
    let first = free.claim(&mut conn, 1).unwrap();
    assert_eq!(first.jobs[0].id, more[0]);
    let next = free
        .complete_and_claim(&mut conn, &success([more[0]]), 5)
        .unwrap();
    assert_eq!(next.ended, [more[0]]);
    assert_eq!(
        next.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [more[1]]
    );
}

/// A job whose heartbeat went stale is re-picked by another claimer in its own slot even
/// though the limit is full, and the dead claimer can no longer complete it.
#[test]
fn a_stale_repick_keeps_its_slot_and_ignores_a_full_limit() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(1);
    let ids = insert_jobs(&mut client, "one", 0, 2);
    let dead = Claimer::builder().entrypoint("one", 2).build().unwrap();
    let claim = dead.claim(&mut pool.get().unwrap(), 2).unwrap();
    assert_eq!(
        claim.jobs.iter().map(|j| j.slot).collect::<Vec<_>>(),
        [Some(0), Some(1)]
    );
    // The first worker dies: its heartbeats stop.
    client
        .execute(
            "UPDATE pgqueuer SET heartbeat = NOW() - INTERVAL '1 hour' WHERE id = $1",
            &[&ids[1]],
        )
        .unwrap();
    let rescuer = Claimer::builder()
        .entrypoint("one", 2)
        .heartbeat_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let claim = rescuer.claim(&mut pool.get().unwrap(), 5).unwrap();
    assert_eq!(claim.jobs.len(), 1, "only the stale job is re-picked");
    let job = &claim.jobs[0];
    assert_eq!(
        (job.id, job.slot, job.queue_manager_id),
        (ids[1], Some(1), Some(rescuer.worker_id()))
    );
    // The dead worker can no longer finish the job it lost.
    assert!(
        dead.complete(&mut pool.get().unwrap(), &success([ids[1]]))
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        rescuer
            .complete(&mut pool.get().unwrap(), &success([ids[1]]))
            .unwrap(),
        [ids[1]]
    );
}

/// Rows picked without a slot (before the slot column existed) count toward the limit,
/// and as they end their places are taken by slotted claims.
#[test]
fn rows_picked_before_slots_existed_count_toward_the_limit_and_drain() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(1);
    let legacy: Vec<i64> = client
        .query(
            "INSERT INTO pgqueuer (priority, entrypoint, status, queue_manager_id, slot) \
             SELECT 0, 'two', 'picked', gen_random_uuid(), NULL FROM generate_series(1, 2) RETURNING id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    insert_jobs(&mut client, "two", 0, 3);
    let claimer = Claimer::builder().entrypoint("two", 2).build().unwrap();
    let mut conn = pool.get().unwrap();
    assert!(
        claimer.claim(&mut conn, 5).unwrap().jobs.is_empty(),
        "two slotless holders fill limit 2"
    );
    client
        .execute("DELETE FROM pgqueuer WHERE id = $1", &[&legacy[0]])
        .unwrap();
    let first = claimer.claim(&mut conn, 5).unwrap();
    assert_eq!(
        first.jobs.iter().map(|j| j.slot).collect::<Vec<_>>(),
        [Some(0)]
    );
    client
        .execute("DELETE FROM pgqueuer WHERE id = $1", &[&legacy[1]])
        .unwrap();
    let second = claimer.claim(&mut conn, 5).unwrap();
    assert_eq!(
        second.jobs.iter().map(|j| j.slot).collect::<Vec<_>>(),
        [Some(1)]
    );
}
