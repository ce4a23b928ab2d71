//! Query plans: the slot search stays bounded, and prepared claims stay on the right
//! indexes as the table grows.

use pgqueuer::Claimer;
use pgqueuer::postgres::Client;

use super::{insert_jobs, success};
use crate::harness::TestDb;

/// The actual plan (`EXPLAIN ANALYZE`, JSON) of `claimer`'s claim of `batch` jobs of `ep`
/// under `limit`, its slot search starting at `shift` (a fraction of the limit), run in a
/// transaction that is rolled back.
fn explain_claim(
    client: &mut Client,
    claimer: &Claimer,
    batch: i32,
    ep: &str,
    limit: i64,
    shift: f64,
) -> serde_json::Value {
    let names = vec![ep.to_owned()];
    let limits = vec![limit];
    let worker = claimer.worker_id();
    let timeout: i64 = 30_000_000;
    let mut tx = client.transaction().unwrap();
    let plan: serde_json::Value = tx
        .query_one(
            &format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", claimer.claim_sql()),
            // The lane's floors (none: a sweep) and the stale look.
            &[
                &batch,
                &names,
                &worker,
                &timeout,
                &limits,
                &shift,
                &vec![None::<i32>],
                &vec![None::<i64>],
                &true,
            ],
        )
        .unwrap()
        .get(0);
    tx.rollback().unwrap();
    plan
}

/// Calls `visit` with every node of `plan` (an `EXPLAIN (FORMAT JSON)` result).
fn each_node(plan: &serde_json::Value, visit: &mut impl FnMut(&serde_json::Value)) {
    fn walk(node: &serde_json::Value, visit: &mut impl FnMut(&serde_json::Value)) {
        visit(node);
        for child in node["Plans"].as_array().into_iter().flatten() {
            walk(child, visit);
        }
    }
    walk(&plan[0]["Plan"], visit);
}

/// Rows produced by the slot search (`generate_series`) in the claim's actual plan, its
/// search starting at `shift` (a fraction of the limit), and the plan's node count.
fn slot_rows(
    client: &mut Client,
    claimer: &Claimer,
    batch: i32,
    ep: &str,
    limit: i64,
    shift: f64,
) -> (i64, usize) {
    let plan = explain_claim(client, claimer, batch, ep, limit, shift);
    let (mut slots, mut nodes) = (0, 0);
    each_node(&plan, &mut |node| {
        nodes += 1;
        if node["Function Name"] == "generate_series" {
            slots += node["Actual Rows"].as_i64().unwrap() * node["Actual Loops"].as_i64().unwrap();
        }
    });
    (slots, nodes)
}

/// A careful claim's work grows with its batch, not with the batch's square: in the
/// generic plan a worker's session makes (its plan settings), a claim of 2,000 jobs under a
/// limit of 5,000 pairs its rows with their slots without a join that tests every row
/// against every other (its join filters turn away fewer rows than the batch holds; the
/// row-to-row joins they replaced turned away about eight million).
#[test]
fn a_careful_claim_pairs_its_rows_with_their_slots_in_linear_work() {
    const BATCH: i32 = 2_000;
    let db = TestDb::new();
    let mut client = db.client();
    insert_jobs(&mut client, "wide", 0, i64::from(BATCH) + 10);
    let pool = db.pool(1);
    let mut conn = pool.get().unwrap();
    conn.plan_with_indexes().unwrap();
    let claimer = Claimer::builder()
        .entrypoint("wide", 5_000)
        .build()
        .unwrap();
    let plan = explain_claim(conn.client(), &claimer, BATCH, "wide", 5_000, 0.25);
    let (mut turned_away, mut updated) = (0, 0);
    each_node(&plan, &mut |node| {
        let loops = node["Actual Loops"].as_i64().unwrap_or(1);
        turned_away += node["Rows Removed by Join Filter"].as_i64().unwrap_or(0) * loops;
        if node["Node Type"] == "ModifyTable" && node["Operation"] == "Update" {
            updated += node["Actual Rows"].as_i64().unwrap();
        }
    });
    assert_eq!(updated, i64::from(BATCH), "the claim takes the whole batch");
    assert!(
        turned_away < i64::from(BATCH),
        "join filters turned away {turned_away} rows for a claim of {BATCH}"
    );
}

/// Limits 10 and 5,000 search the same number of slots (held + take), so a claim costs
/// the same whatever the limit, and wherever in the limit its search starts.
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
        for shift in [0.0, 0.5] {
            results.push(slot_rows(
                &mut client,
                &claimer,
                3,
                ep,
                i64::from(limit),
                shift,
            ));
        }
    }
    assert_eq!(results[0].0, 5 + 3, "limit 10: slots searched");
    for other in &results[1..] {
        assert_eq!(
            results[0], *other,
            "limits 10 and 5000, shifts 0 and 0.5: (slots searched, plan nodes)"
        );
    }
}

/// Makes `conn`'s backend flush its statistics with its next statement
/// (`pg_stat_force_next_flush`), for [`scan_counts`] to read: backends otherwise flush
/// them at most once a second.
fn flush_stats(conn: &mut pgqueuer::Conn) {
    conn.batch_execute("SELECT pg_stat_force_next_flush()")
        .unwrap();
    conn.batch_execute("SELECT 1").unwrap();
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

/// Claims, heartbeats and completions prepared (and settled on a generic plan) while the
/// table was tiny and unanalyzed still use the right indexes, without a sequential scan,
/// once it holds 40,000 jobs.
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
    flush_stats(&mut conn);
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
    flush_stats(&mut conn);
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
    // Three ordered reads per claim, one range each (the priorities above the lane's
    // floor, the floor's own from its id on, those below: see `sql::claim::Tail`; a claim
    // from the top reads only the first): the unlimited claim's candidates, the limited
    // claim's window; a limited claim re-checks its candidates by primary key, not here.
    assert_eq!(
        after[2] - before[2],
        3 * 40,
        "claims walked the (entrypoint, priority, id) index more than three ranges each"
    );
}

/// `any_queued`, what a drain asks before it stops, says whether a job of the claimer's
/// own entrypoints is queued, due or not (not picked ones, not other entrypoints'), and
/// reads the index the claims walk, never the one by due time: right after a drain, that
/// one still holds an entry for every drained row, which `next_due`'s first look walks.
/// Asked on a connection with the worker's plan settings, its plan settled (generic)
/// after a drain of 2,000 jobs.
#[test]
fn whether_anything_is_queued_is_read_through_the_index_the_claims_walk() {
    let db = TestDb::new();
    let mut client = db.client();
    let pool = db.pool(1);
    let mut conn = pool.get().unwrap();
    conn.plan_with_indexes().unwrap();
    let claimer = Claimer::builder()
        .entrypoint("a", 0)
        .entrypoint("b", 0)
        .build()
        .unwrap();
    insert_jobs(&mut client, "a", 0, 2_000);
    loop {
        let claim = claimer.claim(&mut conn, 100).unwrap();
        if claim.jobs.is_empty() {
            break;
        }
        claimer
            .complete(&mut conn, &success(claim.jobs.iter().map(|j| j.id)))
            .unwrap();
    }
    // Past the sixth run, where a prepared statement settles on its generic plan.
    for _ in 0..7 {
        assert!(!claimer.any_queued(&mut conn).unwrap(), "drained");
    }
    flush_stats(&mut conn);
    let before = scan_counts(&mut client);
    // Another entrypoint's job and a picked one of its own do not count...
    insert_jobs(&mut client, "other", 0, 1);
    let picked = insert_jobs(&mut client, "b", 0, 1);
    client
        .execute(
            "UPDATE pgqueuer SET status = 'picked', queue_manager_id = gen_random_uuid() \
             WHERE id = ANY($1)",
            &[&picked],
        )
        .unwrap();
    assert!(
        !claimer.any_queued(&mut conn).unwrap(),
        "nothing of ours queued"
    );
    // ... a deferred one does.
    let deferred = insert_jobs(&mut client, "b", 0, 1);
    client
        .execute(
            "UPDATE pgqueuer SET execute_after = NOW() + INTERVAL '1 hour' WHERE id = ANY($1)",
            &[&deferred],
        )
        .unwrap();
    assert!(
        claimer.any_queued(&mut conn).unwrap(),
        "a deferred job of ours"
    );
    flush_stats(&mut conn);
    let after = scan_counts(&mut client);
    assert_eq!(after[0], before[0], "a sequential scan of the queue table");
    assert_eq!(
        after[1], before[1],
        "read the (entrypoint, execute_after) index"
    );
    // Two questions, two entrypoints each.
    assert_eq!(
        after[2] - before[2],
        4,
        "read the (entrypoint, priority, id) index once per entrypoint and question"
    );
}
