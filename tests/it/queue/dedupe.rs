//! Dedupe keys: the three conflict modes, racing producers, and other unique indexes.

use std::sync::{Arc, Barrier};

use pgqueuer::postgres::Client;
use pgqueuer::postgres::error::SqlState;
use pgqueuer::{Error, OnConflict, Queue};

use super::{field_of, job};
use crate::harness::{TestDb, scalar};

/// With the default conflict mode a dedupe key already held, or repeated in the batch,
/// fails the whole batch with `DuplicateJob` naming the keys; a held (failed) job frees
/// its key.
#[test]
fn raise_fails_the_whole_batch_on_a_held_or_repeated_key() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let held = queue.enqueue(job("ep").dedupe_key("k")).unwrap();
    let err = queue
        .enqueue_many(&[
            job("ep").dedupe_key("a"),
            job("ep"),
            job("ep").dedupe_key("k"),
        ])
        .unwrap_err();
    let Error::DuplicateJob { keys, .. } = &err else {
        panic!("expected DuplicateJob, got {err:?}");
    };
    assert_eq!(keys, &["a", "k"]);
    assert!(err.is_duplicate());
    assert_eq!(err.sqlstate().map(SqlState::code), Some("23505"));
    assert!(err.to_string().contains("\"k\""), "{err}");
    // A key repeated within one call fails the call too.
    let err = queue
        .enqueue_many(&[job("ep").dedupe_key("b"), job("ep").dedupe_key("b")])
        .unwrap_err();
    assert!(err.is_duplicate(), "{err:?}");
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        1
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_log"),
        1
    );
    // A held (failed) job frees its key.
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&held],
        )
        .unwrap();
    let again = queue.enqueue(job("ep").dedupe_key("k")).unwrap();
    assert_ne!(again, held);
}

/// `OnConflict::Skip` enqueues the rest of the batch and leaves `None` where a key is
/// held or repeated (keeping the first occurrence).
#[test]
fn skip_leaves_none_where_a_key_is_held_or_repeated() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let held = queue.enqueue(job("ep").dedupe_key("k")).unwrap();
    let ids = queue
        .enqueue_deduplicated(
            &[
                job("ep").dedupe_key("k"),
                job("ep").dedupe_key("x"),
                job("ep").dedupe_key("x"),
                job("ep"),
            ],
            OnConflict::Skip,
        )
        .unwrap();
    assert!(ids[0].is_none() && ids[2].is_none(), "{ids:?}");
    let (x, plain) = (ids[1].unwrap(), ids[3].unwrap());
    assert!(held < x && x < plain);
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        3
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_log"),
        3
    );
    assert_eq!(
        queue
            .enqueue_deduplicated(&[job("ep").dedupe_key("k")], OnConflict::Skip)
            .unwrap(),
        [None]
    );
    // The first occurrence in the batch is the one kept.
    let kept: String = client
        .query_one("SELECT dedupe_key FROM pgqueuer WHERE id = $1", &[&x])
        .unwrap()
        .get(0);
    assert_eq!(kept, "x");
}

/// `OnConflict::UpdatePriority` raises (never lowers) the holder's priority and returns
/// its id without logging it again; a key twice in one call is refused.
#[test]
fn update_priority_raises_the_held_job_and_returns_its_id() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let held = queue
        .enqueue(job("ep").dedupe_key("k").priority(1))
        .unwrap();
    let ids = queue
        .enqueue_deduplicated(
            &[
                job("ep").dedupe_key("k").priority(5),
                job("ep").dedupe_key("n"),
            ],
            OnConflict::UpdatePriority,
        )
        .unwrap();
    assert_eq!(ids[0], Some(held));
    let new = ids[1].unwrap();
    assert_ne!(new, held);
    let priority = |client: &mut Client| -> i32 {
        client
            .query_one("SELECT priority FROM pgqueuer WHERE id = $1", &[&held])
            .unwrap()
            .get(0)
    };
    assert_eq!(priority(&mut client), 5);
    // A lower priority does not lower it.
    let again = queue
        .enqueue_deduplicated(
            &[job("ep").dedupe_key("k").priority(2)],
            OnConflict::UpdatePriority,
        )
        .unwrap();
    assert_eq!(again, [Some(held)]);
    assert_eq!(priority(&mut client), 5);
    // The held job is not logged again: one queued row per job.
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_log"),
        2
    );
    // A key twice in one call is refused before any SQL.
    let err = queue
        .enqueue_deduplicated(
            &[job("ep").dedupe_key("z"), job("ep").dedupe_key("z")],
            OnConflict::UpdatePriority,
        )
        .unwrap_err();
    assert_eq!(field_of(err), "jobs[1].dedupe_key");
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        2
    );
}

/// Eight producers enqueueing one dedupe key at once: one job, seven duplicate errors.
#[test]
fn racing_producers_with_one_key_yield_one_job_and_seven_duplicates() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let barrier = Arc::new(Barrier::new(8));
    let results: Vec<Result<i64, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (queue, barrier) = (queue.clone(), barrier.clone());
                let mut client = db.client();
                scope.spawn(move || {
                    barrier.wait();
                    queue
                        .on(&mut client)
                        .enqueue(job("race").dedupe_key("same"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let duplicates = results
        .iter()
        .filter(|r| matches!(r, Err(e) if e.is_duplicate()))
        .count();
    assert_eq!((ok, duplicates), (1, 7), "{results:?}");
    let mut client = db.client();
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        1
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_log"),
        1
    );
}

/// A unique index other than the dedupe key's is a database error, not a duplicate.
#[test]
fn a_unique_violation_on_another_index_is_a_database_error() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    client
        .batch_execute(
            "CREATE UNIQUE INDEX only_one_solo ON pgqueuer (entrypoint) WHERE entrypoint = 'solo'",
        )
        .unwrap();
    queue.enqueue(job("solo")).unwrap();
    let err = queue.enqueue(job("solo").dedupe_key("fresh")).unwrap_err();
    assert!(matches!(err, Error::Db(_)), "{err:?}");
    assert!(!err.is_duplicate());
    assert_eq!(err.sqlstate().map(SqlState::code), Some("23505"));
    assert!(err.to_string().contains("only_one_solo"), "{err}");
}
