//! How claims are ended: a claimer without limits deletes successful jobs plainly, and
//! leaves to the careful statement (which locks with `SKIP LOCKED` and never waits) the
//! rows that hold a slot, other outcomes, and rows another session keeps locked.

use std::time::Duration;

use pgqueuer::postgres::Client;
use pgqueuer::{Claimer, Conn, Outcome, RateLimit, Status};

use super::{insert_jobs, success};
use crate::harness::{TestDb, eventually, log_of, scalar};

/// Which of the two ending statements this connection has prepared: (plain, careful).
/// Each is prepared on its first use, so this says which ran.
fn endings_prepared(conn: &mut Conn) -> (bool, bool) {
    let texts: Vec<String> = conn
        .query("SELECT statement FROM pg_prepared_statements", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    (
        texts.iter().any(|t| t.starts_with("WITH\ndeleted AS")),
        texts.iter().any(|t| t.starts_with("WITH\njob_status AS")),
    )
}

/// Claims the jobs `ids` with `claimer` and ends them as successful: every one is
/// written, and by the plain statement alone.
fn claim_and_end_plainly(claimer: &Claimer, conn: &mut Conn, ids: &[i64]) {
    assert_eq!(
        claimer.claim(conn, ids.len()).unwrap().jobs.len(),
        ids.len()
    );
    let mut done = claimer.complete(conn, &success(ids.to_vec())).unwrap();
    done.sort_unstable();
    let mut expected = ids.to_vec();
    expected.sort_unstable();
    assert_eq!(done, expected);
    assert_eq!(endings_prepared(conn), (true, false));
}

/// Every id's log: its `picked` row, then one row of `status`.
fn assert_ended_once(client: &mut Client, ids: &[i64], status: &str) {
    for &id in ids {
        assert_eq!(log_of(client, id), ["picked", status], "job {id}");
    }
}

/// Successful jobs of a claimer without concurrency limits (a rate limit takes no slot)
/// are ended by the plain statement alone, which deletes and logs them like the careful
/// one.
#[test]
fn successful_jobs_without_limits_end_plainly() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(2);
    let mut conn = pool.get().unwrap();
    let ids = insert_jobs(&mut client, "plain", 0, 5);
    let claimer = Claimer::builder().entrypoint("plain", 0).build().unwrap();
    claim_and_end_plainly(&claimer, &mut conn, &ids);
    assert_ended_once(&mut client, &ids, "successful");
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0
    );

    let ids = insert_jobs(&mut client, "paced", 0, 3);
    let paced = Claimer::builder()
        .entrypoint("paced", 0)
        .rate_limit("paced", RateLimit::per_second(1_000))
        .build()
        .unwrap();
    paced.provision_rate_limits(&mut client).unwrap();
    let mut conn = pool.get().unwrap();
    claim_and_end_plainly(&paced, &mut conn, &ids);
    assert_ended_once(&mut client, &ids, "successful");
}

/// A row that holds a slot (a stale re-pick of a limited job, say) is left to the careful
/// statement: deleting it without the lock step could deadlock against a claim waiting
/// in the slot index. Every job still ends once. Other outcomes, and every outcome of a
/// claimer with limits, go to the careful statement only.
#[test]
fn slotted_rows_and_other_outcomes_are_ended_carefully() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(3);
    let ids = insert_jobs(&mut client, "mixed", 0, 4);
    let claimer = Claimer::builder().entrypoint("mixed", 0).build().unwrap();
    let mut conn = pool.get().unwrap();
    claimer.claim(&mut conn, 4).unwrap();
    client
        .execute("UPDATE pgqueuer SET slot = 3 WHERE id = $1", &[&ids[1]])
        .unwrap();
    let mut done = claimer.complete(&mut conn, &success(ids.clone())).unwrap();
    done.sort_unstable();
    assert_eq!(done, ids, "the slotted row is ended too");
    assert_eq!(endings_prepared(&mut conn), (true, true));
    assert_ended_once(&mut client, &ids, "successful");

    // An exception among successes: the careful statement alone, each status logged.
    let ids = insert_jobs(&mut client, "mixed", 0, 2);
    let mut conn = pool.get().unwrap();
    claimer.claim(&mut conn, 2).unwrap();
    let outcomes = [
        Outcome {
            id: ids[0],
            status: Status::Successful,
            traceback: None,
        },
        Outcome {
            id: ids[1],
            status: Status::Exception,
            traceback: Some(serde_json::json!({"exception_type": "ValueError"})),
        },
    ];
    assert_eq!(claimer.complete(&mut conn, &outcomes).unwrap().len(), 2);
    assert_eq!(endings_prepared(&mut conn), (false, true));
    assert_eq!(log_of(&mut client, ids[0]), ["picked", "successful"]);
    assert_eq!(log_of(&mut client, ids[1]), ["picked", "exception"]);

    // A claimer with a limit: its rows hold slots, so the plain statement would end none.
    let ids = insert_jobs(&mut client, "limited", 0, 2);
    let limited = Claimer::builder().entrypoint("limited", 2).build().unwrap();
    let mut conn = pool.get().unwrap();
    limited.claim(&mut conn, 2).unwrap();
    assert_eq!(limited.complete(&mut conn, &success(ids)).unwrap().len(), 2);
    assert_eq!(endings_prepared(&mut conn), (false, true));
}

/// A row another session keeps locked fails the plain statement within its lock timeout
/// (nothing written), and the careful one ends the others at once while it retries the
/// locked row until the lock is gone. The lock timeout is the statement's own: the
/// connection's setting is untouched afterwards.
#[test]
fn a_long_row_lock_holds_up_no_other_outcome_of_a_plain_ending() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(1);
    let ids = insert_jobs(&mut client, "held", 0, 3);
    let claimer = Claimer::builder().entrypoint("held", 0).build().unwrap();
    let mut conn = pool.get().unwrap();
    claimer.claim(&mut conn, 3).unwrap();
    let mut locker = db.client();
    let mut lock = locker.transaction().unwrap();
    lock.execute(
        "SELECT 1 FROM pgqueuer WHERE id = $1 FOR UPDATE",
        &[&ids[0]],
    )
    .unwrap();
    std::thread::scope(|scope| {
        let ending = scope.spawn(|| {
            let done = claimer.complete(&mut conn, &success(ids.clone())).unwrap();
            let timeout: String = conn.query_one("SHOW lock_timeout", &[]).unwrap().get(0);
            (done, timeout)
        });
        eventually(
            Duration::from_secs(20),
            "the unlocked jobs' outcomes while the first row is locked",
            || {
                ids[1..].iter().all(|&id| {
                    log_of(&mut client, id).last().map(String::as_str) == Some("successful")
                })
            },
        );
        assert_eq!(
            log_of(&mut client, ids[0]).last().map(String::as_str),
            Some("picked"),
            "the locked row cannot be ended while the lock is held"
        );
        lock.rollback().unwrap();
        let (mut done, timeout) = ending.join().unwrap();
        done.sort_unstable();
        assert_eq!(done, ids);
        assert_eq!(
            timeout, "0",
            "the plain statement's lock timeout outlived it"
        );
    });
    assert_ended_once(&mut client, &ids, "successful");
}

/// The plain statement writes to the queue's own objects under a prefix and a schema (its
/// `successful` is the prefixed status type's).
#[test]
fn a_prefixed_queue_in_a_schema_ends_plainly() {
    let db = TestDb::new();
    let settings = pgqueuer::Settings::with_prefix("app_").schema("myq");
    let mut client = db.client();
    pgqueuer::upgrade_with(&mut client, &settings).unwrap();
    let pool = db.pool(1);
    let queue = pgqueuer::Queue::with_settings(pool.clone(), &settings).unwrap();
    let ids = queue
        .enqueue_many(&[
            pgqueuer::NewJob::new("own", Vec::new()),
            pgqueuer::NewJob::new("own", Vec::new()),
        ])
        .unwrap();
    let claimer = Claimer::builder()
        .settings(&settings)
        .entrypoint("own", 0)
        .build()
        .unwrap();
    let mut conn = pool.get().unwrap();
    claim_and_end_plainly(&claimer, &mut conn, &ids);
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM myq.app_pgqueuer_log WHERE status = 'successful'"
        ),
        2
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM myq.app_pgqueuer"),
        0
    );
}
