//! Concurrent claims racing for the last slot, and a unique index of someone else's.

use std::time::Duration;

use pgqueuer::Claimer;

use crate::claim::insert_jobs;
use crate::harness::{TestDb, eventually, scalar, sessions_waiting_on_locks};

/// Worker A claims the last slot inside an open transaction; B sees nothing until A
/// rolls back, and nothing after A commits.
#[test]
fn a_claim_in_flight_blocks_the_last_slot() {
    for commit in [true, false] {
        let db = TestDb::new();
        let mut setup = db.client();
        let ids = insert_jobs(&mut setup, "one", 0, 1);
        let a = Claimer::builder().entrypoint("one", 1).build().unwrap();
        let b = Claimer::builder().entrypoint("one", 1).build().unwrap();
        let mut a_client = db.client();
        let mut tx = a_client.transaction().unwrap();
        assert_eq!(a.claim_in(&mut tx, 1).unwrap().jobs.len(), 1);
        let pool = db.pool(1);
        assert!(
            b.claim(&mut pool.get().unwrap(), 1)
                .unwrap()
                .jobs
                .is_empty(),
            "B while A is in flight"
        );
        if commit {
            tx.commit().unwrap();
            assert!(
                b.claim(&mut pool.get().unwrap(), 1)
                    .unwrap()
                    .jobs
                    .is_empty(),
                "B after A committed"
            );
        } else {
            tx.rollback().unwrap();
            let claim = b.claim(&mut pool.get().unwrap(), 1).unwrap();
            assert_eq!(
                claim.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
                ids,
                "B after A rolled back"
            );
        }
    }
}

/// The race counting alone cannot stop: while A's claim is uncommitted, a higher-priority
/// job arrives; B's count still sees a free slot and claims it, but the slot index makes
/// B wait for A and then lose (empty batch), so the limit holds.
#[test]
fn a_higher_priority_arrival_cannot_overshoot_the_limit() {
    for commit in [true, false] {
        let db = TestDb::new();
        let mut setup = db.client();
        insert_jobs(&mut setup, "one", 0, 1);
        let a = Claimer::builder().entrypoint("one", 1).build().unwrap();
        let b = Claimer::builder().entrypoint("one", 1).build().unwrap();
        let mut a_client = db.client();
        let mut tx = a_client.transaction().unwrap();
        assert_eq!(a.claim_in(&mut tx, 1).unwrap().jobs[0].slot, Some(0));
        let urgent = insert_jobs(&mut setup, "one", 100, 1)[0];
        let pool = db.pool(1);
        let b_thread = {
            let pool = pool.clone();
            std::thread::spawn(move || b.claim(&mut pool.get().unwrap(), 1).unwrap())
        };
        // B must be waiting on A's slot, not finished: its backend waits on a lock.
        eventually(Duration::from_secs(30), "B to wait on a lock", || {
            assert!(
                !b_thread.is_finished(),
                "B should wait for A's uncommitted slot"
            );
            sessions_waiting_on_locks(&mut setup) == 1
        });
        assert!(
            !b_thread.is_finished(),
            "B should wait for A's uncommitted slot"
        );
        if commit {
            tx.commit().unwrap();
            let claim = b_thread.join().unwrap();
            assert!(
                claim.jobs.is_empty() && claim.lost_race(),
                "B must lose the slot race: {claim:?}"
            );
            assert_eq!(
                scalar::<i64>(
                    &mut setup,
                    "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
                ),
                1
            );
        } else {
            tx.rollback().unwrap();
            let claim = b_thread.join().unwrap();
            assert_eq!(claim.jobs.len(), 1);
            assert_eq!((claim.jobs[0].id, claim.jobs[0].slot), (urgent, Some(0)));
        }
    }
}

/// A unique index of someone else's that a claim violates is an error naming that index,
/// not a lost slot race.
#[test]
fn a_unique_violation_on_another_index_is_an_error() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute("CREATE UNIQUE INDEX one_picked_per_entrypoint ON pgqueuer (entrypoint) WHERE status = 'picked'")
        .unwrap();
    insert_jobs(&mut client, "x", 0, 2);
    let pool = db.pool(1);
    let claimer = Claimer::builder().entrypoint("x", 5).build().unwrap();
    let err = claimer.claim(&mut pool.get().unwrap(), 2).unwrap_err();
    assert_eq!(
        err.sqlstate(),
        Some(&pgqueuer::postgres::error::SqlState::UNIQUE_VIOLATION)
    );
    assert!(
        err.to_string().contains("one_picked_per_entrypoint"),
        "{err}"
    );
}
