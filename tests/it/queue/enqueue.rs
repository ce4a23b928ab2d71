//! Enqueueing: ids in input order, one statement per batch, and transactions.

use std::collections::HashMap;
use std::time::Duration;

use pgqueuer::events::Event;
use pgqueuer::{NewJob, Queue};

use super::{Listener, field_of, is_insert, job, one_connection_behind_a_counting_proxy};
use crate::harness::{TestDb, scalar};

/// The priority the ordering test gives the job at position `i`.
fn prio(i: usize) -> i32 {
    i32::try_from(i % 5).unwrap()
}

/// A batch of 1, 10 or 10,000 jobs is one statement and one round trip, its ids in
/// input order, one `queued` log row per job; inside a caller's transaction too.
#[test]
fn ids_come_back_in_input_order_from_one_statement_per_batch() {
    let (db, proxy, pool) = one_connection_behind_a_counting_proxy();
    let queue = Queue::new(pool);
    // Warm the connection and its prepared statement.
    queue.enqueue(job("warm")).unwrap();
    let mut client = db.client();
    for n in [1usize, 10, 10_000] {
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| NewJob::new(format!("ep{}", i % 7), i.to_string()).priority(prio(i)))
            .collect();
        let (executes, syncs, simple) = (proxy.count(b'E'), proxy.count(b'S'), proxy.count(b'Q'));
        let ids = queue.enqueue_many(&jobs).unwrap();
        assert_eq!(proxy.count(b'E') - executes, 1, "batch of {n}: statements");
        assert_eq!(proxy.count(b'S') - syncs, 1, "batch of {n}: round trips");
        // At most the pool's empty validity probe on checkout, never SQL of ours.
        assert!(
            proxy.count(b'Q') - simple <= 1,
            "batch of {n}: simple queries"
        );
        assert_eq!(ids.len(), n);
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids rise in input order"
        );
        // Each id is the row made from the job at its position.
        let rows = client
            .query(
                "SELECT id, convert_from(payload, 'UTF8'), entrypoint, priority FROM pgqueuer WHERE id = ANY($1)",
                &[&ids],
            )
            .unwrap();
        let by_id: HashMap<i64, (String, String, i32)> = rows
            .iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3))))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            let (payload, entrypoint, priority) = &by_id[id];
            assert_eq!(payload, &i.to_string());
            assert_eq!(entrypoint, &format!("ep{}", i % 7));
            assert_eq!(*priority, prio(i));
        }
        let logged: i64 = client
            .query_one(
                "SELECT count(*) FROM pgqueuer_log WHERE job_id = ANY($1) AND status = 'queued'",
                &[&ids],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            logged,
            i64::try_from(n).unwrap(),
            "one queued log row per job"
        );
    }
    // Inside a caller's transaction the batch is one round trip too (a typed query).
    let config: pgqueuer::postgres::Config = proxy.dsn(&db.name).parse().unwrap();
    let mut direct = config.connect(pgqueuer::postgres::NoTls).unwrap();
    let (executes, syncs) = (proxy.count(b'E'), proxy.count(b'S'));
    let ids = queue
        .on(&mut direct)
        .enqueue_many(&[job("a"), job("b"), job("c")])
        .unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(proxy.count(b'E') - executes, 1);
    assert_eq!(proxy.count(b'S') - syncs, 1);
}

/// Enqueueing on a held connection prepares the statement once for every batch and sends
/// no validity probe between them; bad input sends nothing.
#[test]
fn a_held_connection_enqueues_with_one_prepared_statement_and_no_probe() {
    let (db, proxy, pool) = one_connection_behind_a_counting_proxy();
    let queue = Queue::new(pool.clone());
    let mut conn = pool.get().unwrap();
    let mut client = db.client();
    let (parses, simple) = (proxy.count(b'P'), proxy.count(b'Q'));
    let mut all = Vec::new();
    for round in 0..5 {
        let jobs: Vec<NewJob> = (0..10)
            .map(|i| NewJob::new("held", format!("{round}-{i}")))
            .collect();
        let (executes, syncs) = (proxy.count(b'E'), proxy.count(b'S'));
        let ids = queue.on(&mut *conn).enqueue_many(&jobs).unwrap();
        assert_eq!(proxy.count(b'E') - executes, 1, "round {round}: statements");
        // The first batch also prepares the statement (one more round trip).
        let expected = if round == 0 { 2 } else { 1 };
        assert_eq!(
            proxy.count(b'S') - syncs,
            expected,
            "round {round}: round trips"
        );
        assert_eq!(ids.len(), 10);
        for (i, id) in ids.iter().enumerate() {
            let payload: String = client
                .query_one(
                    "SELECT convert_from(payload, 'UTF8') FROM pgqueuer WHERE id = $1",
                    &[id],
                )
                .unwrap()
                .get(0);
            assert_eq!(payload, format!("{round}-{i}"), "ids in input order");
        }
        all.extend(ids);
    }
    assert_eq!(
        proxy.count(b'P') - parses,
        1,
        "prepared once for five batches"
    );
    assert_eq!(
        proxy.count(b'Q') - simple,
        0,
        "no validity probe between batches"
    );
    // Bad input is refused before anything is sent, and nothing is stored.
    let executes = proxy.count(b'E');
    let err = queue
        .on(&mut *conn)
        .enqueue_many(&[job("held"), job("")])
        .unwrap_err();
    assert_eq!(field_of(err), "jobs[1].entrypoint");
    assert_eq!(proxy.count(b'E'), executes);
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'held'"
        ),
        50
    );
    assert_eq!(all.len(), 50);
}

/// Jobs enqueued in a transaction that rolls back leave no row, no log row and no
/// notification.
#[test]
fn a_rolled_back_enqueue_leaves_no_job_and_sends_nothing() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut listener = Listener::new(&db);
    let mut client = db.client();
    {
        let mut tx = client.transaction().unwrap();
        let id = queue.on(&mut tx).enqueue(job("tx")).unwrap();
        assert!(id > 0);
        let ids = queue
            .on(&mut tx)
            .enqueue_many(&[job("tx"), job("tx")])
            .unwrap();
        assert_eq!(ids.len(), 2);
        tx.rollback().unwrap();
    }
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer"),
        0
    );
    assert_eq!(
        scalar::<i64>(&mut client, "SELECT count(*) FROM pgqueuer_log"),
        0
    );
    assert_eq!(
        listener.collect(Duration::from_millis(300)),
        Vec::<String>::new()
    );
}

/// A job enqueued in a transaction is announced to listeners at the commit, not before.
#[test]
fn a_committed_enqueue_wakes_a_listener() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut listener = Listener::new(&db);
    let mut client = db.client();
    let mut tx = client.transaction().unwrap();
    let id = queue.on(&mut tx).enqueue(job("tx")).unwrap();
    // Nothing is announced before the commit.
    assert_eq!(
        listener.collect(Duration::from_millis(200)),
        Vec::<String>::new()
    );
    tx.commit().unwrap();
    let payload = listener
        .first(Duration::from_secs(5), is_insert)
        .expect("an insert event after the commit");
    let Event::TableChanged(event) = Event::parse(&payload).unwrap() else {
        unreachable!()
    };
    assert_eq!(event.table, "pgqueuer");
    assert_eq!(event.channel, "ch_pgqueuer");
    assert_eq!(queue.jobs(&[id]).unwrap().len(), 1);
}
