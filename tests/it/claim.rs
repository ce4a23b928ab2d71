//! The slot-claiming dequeue: order, slots, races, stale re-picks, bounded slot search,
//! and a multi-connection stress run whose limits are checked by a running-handler count.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgqueuer::postgres::{Client, NoTls};
use pgqueuer::{Claimer, Outcome, Status};

use crate::harness::TestDb;
use crate::harness::scalar;

/// Inserts `count` queued jobs of `entrypoint` at `priority` with plain SQL; returns ids.
pub fn insert_jobs(client: &mut Client, entrypoint: &str, priority: i32, count: i64) -> Vec<i64> {
    client
        .query(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status) \
             SELECT $1, $2, convert_to(g::text, 'UTF8'), 'queued' FROM generate_series(1, $3::bigint) g RETURNING id",
            &[&priority, &entrypoint, &count],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn success(ids: impl IntoIterator<Item = i64>) -> Vec<Outcome> {
    ids.into_iter()
        .map(|id| Outcome {
            id,
            status: Status::Successful,
            traceback: None,
        })
        .collect()
}

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
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'picked'"
        ),
        3
    );
    assert_eq!(
        scalar(
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
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ),
        3
    );
    assert_eq!(scalar(&mut client, "SELECT count(*) FROM pgqueuer"), 2);
}

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
        scalar(
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
        scalar(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
        ),
        3
    );
    assert_eq!(
        scalar(
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
        // B must be waiting on A's slot, not finished.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !b_thread.is_finished(),
            "B should wait for A's uncommitted slot"
        );
        if commit {
            tx.commit().unwrap();
            let claim = b_thread.join().unwrap();
            assert!(
                claim.jobs.is_empty() && claim.lost_race,
                "B must lose the slot race: {claim:?}"
            );
            assert_eq!(
                scalar(
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

/// Rows produced by the slot search (`generate_series`) in the claim's actual plan.
fn slot_rows(
    client: &mut Client,
    claimer: &Claimer,
    batch: i32,
    ep: &str,
    limit: i64,
) -> (i64, usize) {
    let names = vec![ep.to_owned()];
    let limits = vec![limit];
    let worker = claimer.worker_id();
    let timeout: i64 = 30_000_000;
    let mut tx = client.transaction().unwrap();
    let plan: serde_json::Value = tx
        .query_one(
            &format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", claimer.claim_sql()),
            &[&batch, &names, &worker, &timeout, &limits],
        )
        .unwrap()
        .get(0);
    tx.rollback().unwrap();
    fn walk(node: &serde_json::Value, slots: &mut i64, nodes: &mut usize) {
        *nodes += 1;
        if node["Function Name"] == "generate_series" {
            *slots +=
                node["Actual Rows"].as_i64().unwrap() * node["Actual Loops"].as_i64().unwrap();
        }
        if let Some(children) = node["Plans"].as_array() {
            for child in children {
                walk(child, slots, nodes);
            }
        }
    }
    let (mut slots, mut nodes) = (0, 0);
    walk(&plan[0]["Plan"], &mut slots, &mut nodes);
    (slots, nodes)
}

/// Limits 10 and 5,000 search the same number of slots (held + take), so a claim costs
/// the same whatever the limit.
#[test]
fn the_slot_search_is_bounded_by_held_plus_take() {
    let db = TestDb::new();
    let mut client = db.client();
    let mut results = Vec::new();
    for (ep, limit) in [("ten", 10u32), ("many", 5000)] {
        insert_jobs(&mut client, ep, 0, 30);
        let pool = db.pool(1);
        let holder = Claimer::builder().entrypoint(ep, limit).build().unwrap();
        assert_eq!(
            holder
                .claim(&mut pool.get().unwrap(), 5)
                .unwrap()
                .jobs
                .len(),
            5
        );
        let claimer = Claimer::builder().entrypoint(ep, limit).build().unwrap();
        results.push(slot_rows(&mut client, &claimer, 3, ep, i64::from(limit)));
    }
    assert_eq!(results[0].0, 5 + 3, "limit 10: slots searched");
    assert_eq!(
        results[0], results[1],
        "limit 10 vs 5000: (slots searched, plan nodes)"
    );
}

/// Tiny deterministic PRNG for the stress test (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// 8 threads, each with its own connection, claim and complete 20,000 jobs over limits
/// 1, 3, 7 and unlimited while a producer injects more; running handlers per entrypoint
/// never exceed the limit and every job completes exactly once. Half of the threads end
/// their jobs in the statement of their next claim, which reuses the freed slots.
#[test]
fn stress_limits_hold_and_every_job_runs_once() {
    const THREADS: usize = 8;
    const TOTAL: i64 = 20_000;
    const UPFRONT: i64 = 12_000;
    let entrypoints: [(&str, u32); 4] = [("l1", 1), ("l3", 3), ("l7", 7), ("free", 0)];
    let db = TestDb::new();
    let mut setup = db.client();
    setup
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        ))
        .unwrap();
    // Unlimited entrypoints drain fastest; give them most of the jobs so the run is short.
    let share = |ep: &str| match ep {
        "free" => 55,
        "l7" => 25,
        "l3" => 13,
        _ => 7,
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let enqueue = |client: &mut Client, n: i64, rng: &mut Rng| {
        for (ep, _) in entrypoints {
            let count = n * share(ep) / 100;
            let priority = i32::try_from(rng.next() % 10).unwrap();
            insert_jobs(client, ep, priority, count);
        }
    };
    enqueue(&mut setup, UPFRONT, &mut rng);
    let upfront: i64 = scalar(&mut setup, "SELECT count(*) FROM pgqueuer");

    let running: Arc<HashMap<&str, (AtomicI64, AtomicI64)>> = Arc::new(
        entrypoints
            .iter()
            .map(|(ep, _)| (*ep, (AtomicI64::new(0), AtomicI64::new(0))))
            .collect(),
    );
    let completed = Arc::new(Mutex::new(Vec::<i64>::with_capacity(TOTAL as usize)));
    let producing = Arc::new(AtomicBool::new(true));
    let enqueued = Arc::new(AtomicUsize::new(usize::try_from(upfront).unwrap()));
    let pool = db.pool(THREADS as u32);
    let started = Instant::now();
    std::thread::scope(|scope| {
        {
            let (producing, enqueued, config) = (producing.clone(), enqueued.clone(), db.config());
            scope.spawn(move || {
                let mut client = config.connect(NoTls).unwrap();
                let mut rng = Rng(42);
                for _ in 0..16 {
                    std::thread::sleep(Duration::from_millis(50));
                    enqueue(&mut client, (TOTAL - UPFRONT) / 16, &mut rng);
                    let n: i64 = entrypoints
                        .iter()
                        .map(|(ep, _)| (TOTAL - UPFRONT) / 16 * share(ep) / 100)
                        .sum();
                    enqueued.fetch_add(usize::try_from(n).unwrap(), Ordering::SeqCst);
                }
                producing.store(false, Ordering::SeqCst);
            });
        }
        for t in 0..THREADS {
            let (pool, running, completed, producing, enqueued) = (
                pool.clone(),
                running.clone(),
                completed.clone(),
                producing.clone(),
                enqueued.clone(),
            );
            scope.spawn(move || {
                let mut builder = Claimer::builder();
                for (ep, limit) in entrypoints {
                    builder = builder.entrypoint(ep, limit);
                }
                let claimer = builder.build().unwrap();
                let mut conn = pool.get().unwrap();
                // Odd threads end their jobs in their next claim's statement.
                let folding = t % 2 == 1;
                let mut unwritten: Vec<i64> = Vec::new();
                loop {
                    let claim = claimer
                        .complete_and_claim(&mut conn, &success(unwritten.clone()), 1 + t % 4)
                        .unwrap();
                    if !unwritten.is_empty() {
                        // Rows a concurrent claim held locked are ended on their own.
                        let rest: Vec<i64> = unwritten
                            .iter()
                            .copied()
                            .filter(|id| !claim.ended.contains(id))
                            .collect();
                        let logged = claimer.complete(&mut conn, &success(rest.clone())).unwrap();
                        assert_eq!(logged.len(), rest.len(), "a claimed job was no longer ours");
                        let mut done = completed.lock().unwrap();
                        done.extend(&claim.ended);
                        done.extend(logged);
                        unwritten.clear();
                    }
                    if claim.jobs.is_empty() {
                        let done = completed.lock().unwrap().len();
                        if !producing.load(Ordering::SeqCst)
                            && done >= enqueued.load(Ordering::SeqCst)
                        {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    let mut finished = Vec::with_capacity(claim.jobs.len());
                    for job in &claim.jobs {
                        let limit = entrypoints
                            .iter()
                            .find(|(ep, _)| *ep == job.entrypoint)
                            .unwrap()
                            .1;
                        let (now, max) = &running[job.entrypoint.as_str()];
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(n, Ordering::SeqCst);
                        if limit > 0 {
                            assert!(
                                n <= i64::from(limit),
                                "{} running {n} > limit {limit}",
                                job.entrypoint
                            );
                        }
                        // Work long enough for handlers of one entrypoint to overlap.
                        std::thread::sleep(Duration::from_micros(300));
                        now.fetch_sub(1, Ordering::SeqCst);
                        finished.push(job.id);
                    }
                    if folding {
                        unwritten = finished;
                        continue;
                    }
                    let logged = claimer
                        .complete(&mut conn, &success(finished.clone()))
                        .unwrap();
                    assert_eq!(
                        logged.len(),
                        finished.len(),
                        "a claimed job was no longer ours"
                    );
                    completed.lock().unwrap().extend(logged);
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let mut done = completed.lock().unwrap().clone();
    let total = enqueued.load(Ordering::SeqCst);
    assert!(
        total >= usize::try_from(TOTAL).unwrap() - 100,
        "only {total} jobs enqueued"
    );
    done.sort_unstable();
    let before_dedup = done.len();
    done.dedup();
    assert_eq!(before_dedup, done.len(), "a job completed twice");
    assert_eq!(done.len(), total, "every job completes");
    assert_eq!(scalar(&mut setup, "SELECT count(*) FROM pgqueuer"), 0);
    assert_eq!(
        scalar(
            &mut setup,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        ),
        i64::try_from(total).unwrap()
    );
    for (ep, limit) in entrypoints {
        let max = running[ep].1.load(Ordering::SeqCst);
        eprintln!("stress: {ep} limit {limit} max running {max}");
        if limit > 0 {
            assert!(max <= i64::from(limit));
        }
    }
    // The checker saw real overlap, so it could have caught an overshoot.
    assert_eq!(running["l1"].1.load(Ordering::SeqCst), 1);
    assert!(
        running["l3"].1.load(Ordering::SeqCst) >= 2,
        "no overlap seen on l3"
    );
    assert!(
        running["l7"].1.load(Ordering::SeqCst) >= 3,
        "no overlap seen on l7"
    );
    eprintln!("stress: {total} jobs in {elapsed:?}");
}

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
    assert!(
        due > Duration::from_secs(98) && due <= Duration::from_secs(100),
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
        due > Duration::from_secs(98),
        "a picked job is not queued: {due:?}"
    );
}

/// Scans so far of the queue table, of its `(entrypoint, execute_after)` index and of its
/// `(entrypoint, priority, id)` index, from the statistics every backend has flushed.
fn scan_counts(client: &mut Client) -> [i64; 3] {
    client
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .unwrap();
    let row = client
        .query_one(
            "SELECT t.seq_scan, \
                    (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'pgqueuer_ep_ea_idx'), \
                    (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'pgqueuer_ep_prio_id_idx') \
             FROM pg_stat_user_tables t WHERE t.relname = 'pgqueuer'",
            &[],
        )
        .unwrap();
    [row.get(0), row.get(1), row.get(2)]
}

#[test]
fn plans_made_on_an_empty_table_stay_on_the_right_indexes_when_it_grows() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(2);
    let mut conn = pool.get().unwrap();
    conn.plan_with_indexes().unwrap();
    let unlimited = Claimer::builder().entrypoint("u", 0).build().unwrap();
    let limited = Claimer::builder().entrypoint("l", 5_000).build().unwrap();
    // Prepared statements settle on a generic plan at their sixth run: make it happen
    // while the table holds one job at a time and has never been analyzed.
    for _ in 0..8 {
        for (claimer, entrypoint) in [(&unlimited, "u"), (&limited, "l")] {
            insert_jobs(&mut client, entrypoint, 0, 1);
            let claim = claimer.claim(&mut conn, 10).unwrap();
            assert_eq!(claim.jobs.len(), 1);
            claimer
                .complete(&mut conn, &success(claim.jobs.iter().map(|j| j.id)))
                .unwrap();
            claimer.next_due(&mut conn).unwrap();
        }
    }
    // The table grows a thousandfold, still unanalyzed.
    insert_jobs(&mut client, "u", 0, 20_000);
    insert_jobs(&mut client, "l", 0, 20_000);
    let flush = |conn: &mut pgqueuer::Conn| {
        conn.batch_execute("SELECT pg_stat_force_next_flush()")
            .unwrap();
        conn.batch_execute("SELECT 1").unwrap();
    };
    flush(&mut conn);
    let before = scan_counts(&mut client);
    for _ in 0..20 {
        for claimer in [&unlimited, &limited] {
            let claim = claimer.claim(&mut conn, 10).unwrap();
            assert_eq!(claim.jobs.len(), 10);
            let ids: Vec<i64> = claim.jobs.iter().map(|j| j.id).collect();
            claimer.heartbeat(&mut conn, &ids).unwrap();
            claimer.complete(&mut conn, &success(ids)).unwrap();
            claimer.next_due(&mut conn).unwrap();
        }
    }
    flush(&mut conn);
    let after = scan_counts(&mut client);
    assert_eq!(
        after[0], before[0],
        "claims, heartbeats or completions scanned the whole queue table"
    );
    // next_due reads that index once per call (40 calls); a claim must not read it.
    assert_eq!(
        after[1] - before[1],
        40,
        "claims walked the (entrypoint, execute_after) index"
    );
    // One ordered read per claim (the unlimited claim's candidates, the limited claim's
    // window); a limited claim re-checks its candidates by primary key, not through here.
    assert_eq!(
        after[2] - before[2],
        40,
        "claims walked the (entrypoint, priority, id) index more than once each"
    );
}
