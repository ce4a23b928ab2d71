//! How claims are ended: successful jobs are deleted plainly (a row lock is waited for,
//! up to a lock timeout that also ends a deadlock with a claim waiting on a slot), and the
//! careful statement (which locks with `SKIP LOCKED` and never waits) ends other outcomes
//! and rows another session keeps locked.

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

/// Rows that hold a slot end plainly too: a limited claimer's, and a stale re-pick's
/// slotted row among an unlimited claimer's. Every job still ends once.
#[test]
fn slotted_rows_end_plainly() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(2);
    let ids = insert_jobs(&mut client, "limited", 0, 2);
    let limited = Claimer::builder().entrypoint("limited", 2).build().unwrap();
    let mut conn = pool.get().unwrap();
    claim_and_end_plainly(&limited, &mut conn, &ids);
    assert_ended_once(&mut client, &ids, "successful");

    let ids = insert_jobs(&mut client, "mixed", 0, 4);
    let claimer = Claimer::builder().entrypoint("mixed", 0).build().unwrap();
    let mut conn = pool.get().unwrap();
    assert_eq!(claimer.claim(&mut conn, 4).unwrap().jobs.len(), 4);
    client
        .execute("UPDATE pgqueuer SET slot = 3 WHERE id = $1", &[&ids[1]])
        .unwrap();
    let mut done = claimer.complete(&mut conn, &success(ids.clone())).unwrap();
    done.sort_unstable();
    assert_eq!(done, ids, "the slotted row is ended too");
    assert_eq!(endings_prepared(&mut conn), (true, false));
    assert_ended_once(&mut client, &ids, "successful");
}

/// Outcomes other than success go to the careful statement alone, each status logged.
#[test]
fn other_outcomes_are_ended_carefully() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(1);
    let claimer = Claimer::builder().entrypoint("mixed", 2).build().unwrap();
    let ids = insert_jobs(&mut client, "mixed", 0, 2);
    let mut conn = pool.get().unwrap();
    assert_eq!(claimer.claim(&mut conn, 2).unwrap().jobs.len(), 2);
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
}

/// The one deadlock a plain ending can meet, built by hand: a claim holds the lock of a
/// row being ended (as a claim does after locking a row that was queued in its snapshot
/// and has been claimed and run since), and takes the slot another row of that ending
/// holds, so it waits, in the slot index, for the ending, which comes to wait for its row
/// lock. The ending deletes the slot's row first and the locked row last, 20,000 rows
/// later, so the claim is waiting well before the ending is. (The jobs are marked picked
/// by this claimer, each at a slot of its own, as a claim leaves them.) PostgreSQL's own deadlock
/// check is put off for a minute for the ending and a second for the claim, so that
/// without the ending's lock timeout the claim would be the deadlock's victim (40P01).
/// With it, the ending gives up and writes nothing, the claim meets the slot still held
/// (23505, a lost race for a worker), and the careful statement then ends every job once.
#[test]
fn a_plain_ending_ends_a_deadlock_with_a_claim_waiting_on_its_slot() {
    const BETWEEN: i64 = 20_000;
    let db = TestDb::new();
    db.client()
        .batch_execute(&format!(
            "ALTER DATABASE {} SET deadlock_timeout = '1min'",
            db.name
        ))
        .unwrap();
    let mut client = db.client();
    let pool = db.pool(1);
    let ids = insert_jobs(&mut client, "tight", 0, BETWEEN + 3);
    let ended = &ids[..ids.len() - 1];
    let (ended_first, locked, queued) = (ids[0], ids[ids.len() - 2], ids[ids.len() - 1]);
    let claimer = Claimer::builder()
        .entrypoint("tight", u32::try_from(ids.len()).unwrap())
        .build()
        .unwrap();
    let mut conn = pool.get().unwrap();
    // Picked by this claimer, each at its own slot, as a claim leaves them (one claim of
    // this many would take far longer than the test needs).
    client
        .execute(
            "UPDATE pgqueuer SET status = 'picked', queue_manager_id = $1, slot = id - $2 \
             WHERE id >= $2 AND id < $3",
            &[&claimer.worker_id(), &ended_first, &queued],
        )
        .unwrap();
    let slot: i64 = 0;
    let mut claiming = db.client();
    claiming
        .batch_execute("SET deadlock_timeout = '1s'")
        .unwrap();
    let mut claim_tx = claiming.transaction().unwrap();
    claim_tx
        .execute(
            "SELECT 1 FROM pgqueuer WHERE id = $1 FOR UPDATE",
            &[&locked],
        )
        .unwrap();
    std::thread::scope(|scope| {
        let ending = scope.spawn(|| {
            claimer
                .complete(&mut conn, &success(ended.to_vec()))
                .unwrap()
        });
        // The ending has deleted the first row (its transaction is the row's `xmax`) and
        // goes on through the others.
        eventually(
            Duration::from_secs(20),
            "the ending deleting the first row",
            || {
                scalar::<String>(
                    &mut client,
                    &format!("SELECT xmax::text FROM pgqueuer WHERE id = {ended_first}"),
                ) != "0"
            },
        );
        let err = claim_tx
            .execute(
                "UPDATE pgqueuer SET status = 'picked', slot = $2, queue_manager_id = gen_random_uuid() \
                 WHERE id = $1",
                &[&queued, &slot],
            )
            .expect_err("the slot is still held once the ending has given up");
        assert_eq!(
            err.code(),
            Some(&pgqueuer::postgres::error::SqlState::UNIQUE_VIOLATION),
            "{err:?}"
        );
        claim_tx.rollback().unwrap();
        let done = ending.join().unwrap();
        assert_eq!(done.len(), ended.len());
    });
    // One `successful` row per job, and no job left but the queued one.
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'",
            &[],
        )
        .unwrap();
    let ended_count = i64::try_from(ended.len()).unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (ended_count, ended_count)
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        1
    );
    assert_eq!(
        scalar::<String>(
            &mut client,
            &format!("SELECT status::text FROM pgqueuer WHERE id = {queued}")
        ),
        "queued"
    );
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
