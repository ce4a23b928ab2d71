//! Limits that do not bind are claimed as if there were none (ahead of free threads, on
//! two lanes); near the limit, carefully. Exactness never rests on that reckoning: the
//! slot index decides every claim.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgqueuer::{Entrypoint, JobId, NewJob, Queue, RunningWorker, Worker};

use crate::harness::{TestDb, eventually, scalar};
use crate::worker::Overlap;

/// A worker of `threads` threads claiming batches of `batch` on two lanes (its pool has
/// room for the second), whose `flow` handlers run inside `sweep`: 0 to 3 ms in a lull,
/// 25 to 28 ms in a burst, long enough for 16 threads to press on the limit.
fn flowing(
    db: &TestDb,
    limit: u32,
    threads: usize,
    batch: usize,
    sweep: &Overlap,
    seen: &Arc<Mutex<HashSet<i64>>>,
) -> RunningWorker {
    let (sweep, seen) = (sweep.clone(), seen.clone());
    Worker::builder(db.pool(6))
        .threads(threads)
        .batch_size(batch)
        // Jobs another claimer holds here never go stale, however slow a busy machine
        // makes the test: their slots must stay held.
        .heartbeat_timeout(Duration::from_secs(3600))
        .entrypoint(
            Entrypoint::new("flow").concurrency_limit(limit),
            move |job, _ctx| {
                assert!(
                    seen.lock().unwrap().insert(job.id),
                    "job {} ran twice",
                    job.id
                );
                let mut run = Duration::from_micros(job.id as u64 % 3_000);
                if job.payload.as_deref() != Some(b"lull".as_slice()) {
                    run += Duration::from_millis(25);
                }
                sweep.during(|| std::thread::sleep(run));
                Ok(())
            },
        )
        .build()
        .unwrap()
        .start()
        .unwrap()
}

/// Enqueues `n` short jobs of `flow` (a lull's, 0 to 3 ms each); returns their ids.
fn lulls(queue: &Queue, n: usize) -> Vec<JobId> {
    let jobs: Vec<NewJob> = (0..n)
        .map(|_| NewJob::new("flow", b"lull".to_vec()))
        .collect();
    queue.enqueue_many(&jobs).unwrap()
}

/// One worker's two lanes keep to their own halves of a limit far from binding: in a drain
/// of 6,000 jobs at a limit of 600, where the lane that claims more often laps the other
/// every few dozen claims, both lanes claim and no slot is ever taken by both (each
/// claim's connection and slots are recorded by a trigger in its own transaction).
#[test]
fn one_workers_two_lanes_never_take_each_others_slots() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..6_000)
        .map(|_| NewJob::new("drain", Vec::new()))
        .collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    db.client()
        .batch_execute(
            "CREATE TABLE slots_taken (backend int NOT NULL, slot bigint NOT NULL);
             CREATE FUNCTION record_slot() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO slots_taken VALUES (pg_backend_pid(), NEW.slot); RETURN NEW; END $$;
             CREATE TRIGGER record_slot AFTER UPDATE OF slot ON pgqueuer
             FOR EACH ROW WHEN (NEW.slot IS NOT NULL) EXECUTE FUNCTION record_slot();",
        )
        .unwrap();
    let worker = Worker::builder(db.pool(6))
        .threads(8)
        .batch_size(10)
        .entrypoint(
            Entrypoint::new("drain").concurrency_limit(600),
            |_job, _ctx| Ok(()),
        )
        .build()
        .unwrap()
        .start()
        .unwrap();
    queue.wait_for(&ids, Duration::from_secs(120)).unwrap();
    let stats = worker.stats();
    assert_eq!(worker.join().unwrap().failed, 0);
    assert!(stats.relaxed_claims > 0, "no relaxed claim ran");
    let mut client = db.client();
    let lanes: i64 = scalar(
        &mut client,
        "SELECT count(DISTINCT backend) FROM slots_taken",
    );
    assert!(lanes >= 2, "only {lanes} connection claimed");
    let shared: Vec<i64> = client
        .query(
            "SELECT slot FROM slots_taken GROUP BY slot HAVING count(DISTINCT backend) > 1 ORDER BY slot",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        shared.is_empty(),
        "slots taken on more than one connection ({} claims, {} slot races lost): {shared:?}",
        stats.claims,
        stats.slot_races_lost
    );
}

/// Two workers of 8 threads, each with two claim lanes, at a limit of 12, with jobs
/// flowing in bursts: between bursts the limit is far from binding and they claim
/// relaxed (ahead, on both lanes), in a burst their 16 threads would take more than 12
/// slots. Across every switch, the handlers running at once never exceed the limit, no
/// slot outside `0..12` is ever taken, and every job runs once.
#[test]
fn two_lanes_and_two_workers_at_a_limit_about_to_bind_never_exceed_it() {
    const LIMIT: u32 = 12;
    let db = TestDb::new();
    let sweep = Overlap::default();
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let workers = [
        flowing(&db, LIMIT, 8, 1, &sweep, &seen),
        flowing(&db, LIMIT, 8, 1, &sweep, &seen),
    ];
    // Every slot any claim takes, recorded by a trigger in the claim's own transaction.
    db.client()
        .batch_execute(
            "CREATE TABLE slots_taken (slot bigint NOT NULL);
             CREATE FUNCTION record_slot() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO slots_taken VALUES (NEW.slot); RETURN NEW; END $$;
             CREATE TRIGGER record_slot AFTER UPDATE OF slot ON pgqueuer
             FOR EACH ROW WHEN (NEW.slot IS NOT NULL) EXECUTE FUNCTION record_slot();",
        )
        .unwrap();
    let queue = Queue::new(db.pool(2));
    let mut ids = Vec::new();
    for burst in 0..30 {
        // A lull of single jobs, then a burst of 40.
        for _ in 0..5 {
            ids.push(queue.enqueue(NewJob::new("flow", "lull")).unwrap());
            std::thread::sleep(Duration::from_millis(4));
        }
        let jobs: Vec<NewJob> = (0..40)
            .map(|i| NewJob::new("flow", format!("{burst}.{i}")))
            .collect();
        ids.extend(queue.enqueue_many(&jobs).unwrap());
    }
    let statuses = queue.wait_for(&ids, Duration::from_secs(120)).unwrap();
    assert_eq!(statuses.len(), ids.len());
    let relaxed: u64 = workers.iter().map(|w| w.stats().relaxed_claims).sum();
    let careful: u64 = workers.iter().map(|w| w.stats().claims).sum::<u64>() - relaxed;
    for w in workers {
        assert_eq!(w.join().unwrap().failed, 0);
    }
    let (lowest, highest): (Option<i64>, Option<i64>) = {
        let row = db
            .client()
            .query_one("SELECT min(slot), max(slot) FROM slots_taken", &[])
            .unwrap();
        (row.get(0), row.get(1))
    };
    eprintln!(
        "relaxed claims {relaxed}, careful {careful}, peak {} of {LIMIT}, slots {lowest:?}..{highest:?}",
        sweep.peak()
    );
    assert!(
        sweep.peak() <= LIMIT as usize,
        "{} handlers at once",
        sweep.peak()
    );
    assert!(
        lowest >= Some(0) && highest < Some(i64::from(LIMIT)),
        "slots {lowest:?}..{highest:?} taken under a limit of {LIMIT}"
    );
    assert_eq!(seen.lock().unwrap().len(), ids.len());
    // Both ways of claiming were exercised, and the limit bound in the bursts.
    assert!(relaxed > 0, "no claim was made relaxed");
    assert!(careful > 0, "no claim was made carefully");
    assert!(
        sweep.peak() >= 8,
        "the bursts never filled the limit: peak {}",
        sweep.peak()
    );
    eventually(Duration::from_secs(10), "the queue to empty", || {
        scalar::<i64>(&mut db.client(), "SELECT count(*) FROM pgqueuer") == 0
    });
}

/// Relaxed claims take slots in turn from where their lane left off, without looking:
/// here two thirds of the slots (0 to 39 of a limit of 60) are held by another claimer,
/// so a lane's turn often falls on held slots, and the slot index rejects that claim. The
/// worker claims again elsewhere and runs every job once; its own handlers never run
/// beside more than the 20 slots left, and the held jobs keep their slots.
#[test]
fn relaxed_claims_that_meet_held_slots_claim_again_elsewhere() {
    const LIMIT: u32 = 60;
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let holder = pgqueuer::Claimer::builder()
        .entrypoint("flow", LIMIT)
        .build()
        .unwrap();
    let held: Vec<NewJob> = (0..40)
        .map(|i| NewJob::new("flow", format!("{i}")))
        .collect();
    queue.enqueue_many(&held).unwrap();
    let pool = db.pool(1);
    let mut conn = pool.get().unwrap();
    let mut taken = 0;
    while taken < 40 {
        taken += holder.claim(&mut conn, 40 - taken).unwrap().jobs.len();
    }
    let sweep = Overlap::default();
    let seen: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let ids = lulls(&queue, 300);
    // Two threads, batches of two: a margin of 8, so the 20 free slots count as far from
    // full and the worker claims relaxed.
    let worker = flowing(&db, LIMIT, 2, 2, &sweep, &seen);
    queue.wait_for(&ids, Duration::from_secs(120)).unwrap();
    let stats = worker.stats();
    worker.join().unwrap();
    eprintln!(
        "relaxed claims {}, slot races lost {}",
        stats.relaxed_claims, stats.slot_races_lost
    );
    assert_eq!(seen.lock().unwrap().len(), 300, "every job ran once");
    assert!(stats.relaxed_claims > 0, "the worker never claimed relaxed");
    assert!(sweep.peak() <= 20, "{} of ours ran at once", sweep.peak());
    let mut client = db.client();
    let slots: Vec<i32> = client
        .query(
            "SELECT slot::int FROM pgqueuer WHERE status = 'picked' ORDER BY slot",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        slots,
        (0..40).collect::<Vec<i32>>(),
        "the held jobs keep their slots"
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        40,
        "only the held jobs are left"
    );
}

/// One job of `flow` claimed by another claimer (its limit `holder_limit`), whose slot is
/// then rewritten to `slot` as another program might; the job, its holder, and the pool
/// the holder claimed on.
fn hold_one(
    db: &TestDb,
    queue: &Queue,
    holder_limit: u32,
    slot: Option<i64>,
) -> (JobId, pgqueuer::Claimer, pgqueuer::Pool) {
    let id = queue
        .enqueue(NewJob::new("flow", b"held".to_vec()))
        .unwrap();
    let holder = pgqueuer::Claimer::builder()
        .entrypoint("flow", holder_limit)
        .build()
        .unwrap();
    let pool = db.pool(1);
    assert_eq!(
        holder
            .claim(&mut pool.get().unwrap(), 1)
            .unwrap()
            .jobs
            .len(),
        1
    );
    db.client()
        .execute("UPDATE pgqueuer SET slot = $2 WHERE id = $1", &[&id, &slot])
        .unwrap();
    (id, holder, pool)
}

/// A job held where the slot index cannot see it is outside its reach, so a worker claims
/// carefully, counting it, while one is held (relaxed claims count the slots in use only
/// now and then): here no relaxed claim runs while a job holds `slot` under a limit of 60,
/// though the limit is otherwise far from full; once that job has ended, the worker
/// claims relaxed again.
fn a_held_job_out_of_the_index_keeps_claims_careful(slot: Option<i64>) {
    const LIMIT: u32 = 60;
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let (id, holder, pool) = hold_one(&db, &queue, 100, slot);
    let mut conn = pool.get().unwrap();
    let sweep = Overlap::default();
    let seen: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let ids = lulls(&queue, 100);
    let worker = flowing(&db, LIMIT, 2, 2, &sweep, &seen);
    queue.wait_for(&ids, Duration::from_secs(60)).unwrap();
    let careful = worker.stats();
    assert_eq!(
        careful.relaxed_claims, 0,
        "a relaxed claim ran beside a job at slot {slot:?} ({} claims)",
        careful.claims
    );
    let outcome = pgqueuer::Outcome {
        id,
        status: pgqueuer::Status::Successful,
        traceback: None,
    };
    assert_eq!(holder.complete(&mut conn, &[outcome]).unwrap().len(), 1);
    let ids = lulls(&queue, 100);
    queue.wait_for(&ids, Duration::from_secs(60)).unwrap();
    let after = worker.stats();
    worker.join().unwrap();
    assert!(
        after.relaxed_claims > 0,
        "no relaxed claim once slot {slot:?} was free ({} claims)",
        after.claims - careful.claims
    );
    assert_eq!(seen.lock().unwrap().len(), 200, "every job ran once");
}

/// A slot held at or above the limit: left by a larger limit lowered since, or taken by a
/// worker that declares a larger one.
#[test]
fn a_slot_held_above_the_limit_keeps_claims_careful() {
    a_held_job_out_of_the_index_keeps_claims_careful(Some(70));
}

/// A slot below zero, written by another program (no index or check stops it).
#[test]
fn a_slot_held_below_zero_keeps_claims_careful() {
    a_held_job_out_of_the_index_keeps_claims_careful(Some(-3));
}

/// A job held with no slot: picked before the slot column existed, or by a worker that
/// declares no limit for the entrypoint.
#[test]
fn a_job_held_without_a_slot_keeps_claims_careful() {
    a_held_job_out_of_the_index_keeps_claims_careful(None);
}

/// A slot written by another program below zero (no index or check stops it) is outside
/// every slot a claim takes, but its job still holds one of the limit's places: with a
/// limit of 4 and such a job held, a worker of 4 threads never runs more than 3 at once,
/// and the row keeps its odd slot.
#[test]
fn a_negative_slot_still_counts_toward_the_limit() {
    const LIMIT: u32 = 4;
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let (id, _holder, _pool) = hold_one(&db, &queue, LIMIT, Some(-3));
    let mut client = db.client();
    let sweep = Overlap::default();
    let seen: Arc<Mutex<HashSet<i64>>> = Arc::default();
    // Jobs of a burst (25 ms and more), so that 4 threads press on the limit.
    let jobs: Vec<NewJob> = (0..40)
        .map(|i| NewJob::new("flow", format!("{i}")))
        .collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    let worker = flowing(&db, LIMIT, 4, 1, &sweep, &seen);
    queue.wait_for(&ids, Duration::from_secs(60)).unwrap();
    worker.join().unwrap();
    assert_eq!(seen.lock().unwrap().len(), 40, "every job ran once");
    assert!(
        sweep.peak() <= 3,
        "{} ran at once beside the job holding slot -3",
        sweep.peak()
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            &format!("SELECT slot::bigint FROM pgqueuer WHERE id = {id} AND status = 'picked'")
        ),
        -3,
        "the held job keeps its slot"
    );
}

/// What only the relaxed claim shapes contain: the slot a fresh row takes from its place
/// in the claim (`relaxed_tail` in src/sql/claim.rs).
const RELAXED_MARK: &str = "array_position(ARRAY(SELECT tid FROM eligible), job.ctid)";

/// One relaxed claim takes jobs of several entrypoints at once: each fresh job of a limited
/// one takes a slot below its own limit (each row's limit is looked up by its entrypoint),
/// one of an unlimited entrypoint takes none, and a stale job it re-picks keeps the slot
/// its dead holder had. A trigger records every claimed row with its transaction and
/// whether the claiming statement was a relaxed shape. (The stale job's entrypoint has no
/// other job, so no fresh claim can meet its slot and turn the worker careful.)
#[test]
fn a_relaxed_claim_slots_each_entrypoint_by_its_own_limit_and_keeps_a_stale_jobs_slot() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    db.client()
        .batch_execute(&format!(
            "CREATE TABLE claimed_rows (id bigint, entrypoint text, was text, slot bigint,
                                        xact bigint, relaxed bool);
             CREATE FUNCTION record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO claimed_rows VALUES (NEW.id, NEW.entrypoint, OLD.status::text,
                     NEW.slot, txid_current(), strpos(current_query(), '{RELAXED_MARK}') > 0);
                 RETURN NEW;
             END $$;
             CREATE TRIGGER record_claim AFTER UPDATE OF status ON pgqueuer
             FOR EACH ROW WHEN (NEW.status = 'picked') EXECUTE FUNCTION record_claim();"
        ))
        .unwrap();
    let mixed = |n: usize| -> Vec<NewJob> {
        (0..n)
            .map(|i| NewJob::new(["a", "b", "c"][i % 3], Vec::new()))
            .collect()
    };
    let ids = queue.enqueue_many(&mixed(600)).unwrap();
    let worker = Worker::builder(db.pool(6))
        .threads(4)
        .batch_size(10)
        .entrypoint(Entrypoint::new("a").concurrency_limit(400), |_job, _ctx| {
            Ok(())
        })
        .entrypoint(Entrypoint::new("b").concurrency_limit(300), |_job, _ctx| {
            Ok(())
        })
        .entrypoint(Entrypoint::new("c"), |_job, _ctx| Ok(()))
        .entrypoint(Entrypoint::new("d").concurrency_limit(50), |_job, _ctx| {
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    queue.wait_for(&ids, Duration::from_secs(120)).unwrap();
    // Every job has ended, so no slot is held. A job of `d` held at slot 7 by a worker that
    // died an hour ago, ahead of every other job: the worker's next claim re-picks it.
    let mut client = db.client();
    let stale: i64 = scalar(
        &mut client,
        "INSERT INTO pgqueuer (priority, entrypoint, status, queue_manager_id, slot, heartbeat)
         VALUES (10, 'd', 'picked', gen_random_uuid(), 7, NOW() - INTERVAL '1 hour')
         RETURNING id",
    );
    let more = queue.enqueue_many(&mixed(60)).unwrap();
    queue.wait_for(&more, Duration::from_secs(120)).unwrap();
    eventually(Duration::from_secs(60), "the stale job to end", || {
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer") == 0
    });
    let stats = worker.stats();
    assert_eq!(worker.join().unwrap().failed, 0);
    assert!(stats.relaxed_claims > 0, "the worker never claimed relaxed");

    let rows: Vec<(i64, String, String, Option<i64>, i64, bool)> = client
        .query("SELECT * FROM claimed_rows ORDER BY xact, id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect();
    assert_eq!(rows.len(), 661, "every job claimed once: {rows:?}");
    for (id, entrypoint, was, slot, _, _) in &rows {
        let limit = match entrypoint.as_str() {
            "a" => Some(400),
            "b" => Some(300),
            "d" => Some(50),
            _ => None,
        };
        match (limit, slot) {
            (Some(limit), Some(slot)) => assert!(
                (0..limit).contains(slot),
                "job {id} of {entrypoint} took slot {slot}, outside 0..{limit}"
            ),
            (None, None) => {}
            _ => panic!("job {id} of {entrypoint} ({was}) claimed with slot {slot:?}"),
        }
    }
    let repick = rows
        .iter()
        .find(|r| r.0 == stale)
        .expect("the stale job was re-picked");
    assert_eq!(
        (repick.2.as_str(), repick.3, repick.5),
        ("picked", Some(7), true),
        "the stale job is re-picked by a relaxed claim in the slot it held"
    );
    // Some relaxed claim took fresh jobs of both limited entrypoints and the unlimited one.
    let mut by_claim: std::collections::HashMap<i64, HashSet<&str>> = Default::default();
    for (_, entrypoint, was, _, xact, relaxed) in &rows {
        if *relaxed && was == "queued" {
            by_claim.entry(*xact).or_default().insert(entrypoint);
        }
    }
    assert!(
        by_claim.values().any(|eps| eps.len() == 3),
        "no relaxed claim took jobs of all three entrypoints: {by_claim:?}"
    );
}
