//! The producer API against a real server: enqueue (order, statement count, transactions,
//! dedupe modes and races), headers and payloads, bad input, cancel, inspection, requeue,
//! and waiting for completion.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pgqueuer::events::{Event, Operation};
use pgqueuer::postgres::Client;
use pgqueuer::postgres::error::SqlState;
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{ConnectOptions, Error, NewJob, OnConflict, Queue, Settings, Status};

use crate::harness::TestDb;
use crate::proxy::CountingProxy;

fn count(client: &mut Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).unwrap().get(0)
}

fn job(entrypoint: &str) -> NewJob {
    NewJob::new(entrypoint, b"p".to_vec())
}

fn field_of(err: Error) -> String {
    match err {
        Error::InvalidInput { field, .. } => field,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// A connection LISTENing on the default channel, as a worker's listener would.
struct Listener {
    client: Client,
}

impl Listener {
    fn new(db: &TestDb) -> Listener {
        let mut client = db.client();
        client.batch_execute("LISTEN \"ch_pgqueuer\"").unwrap();
        Listener { client }
    }

    /// Every payload that arrives until `quiet` passes without one.
    fn collect(&mut self, quiet: Duration) -> Vec<String> {
        let mut notes = self.client.notifications();
        let mut it = notes.timeout_iter(quiet);
        let mut payloads = Vec::new();
        while let Some(note) = it.next().unwrap() {
            payloads.push(note.payload().to_owned());
        }
        payloads
    }

    /// The first event for which `wanted` holds, waiting at most `timeout`.
    fn first(&mut self, timeout: Duration, wanted: impl Fn(&Event) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut notes = self.client.notifications();
            let note = notes.timeout_iter(left).next().unwrap()?;
            let payload = note.payload().to_owned();
            if wanted(&Event::parse(&payload).unwrap()) {
                return Some(payload);
            }
        }
    }
}

fn is_insert(e: &Event) -> bool {
    matches!(e, Event::TableChanged(t) if t.operation == Operation::Insert)
}

/// The priority the ordering test gives the job at position `i`.
fn prio(i: usize) -> i32 {
    i32::try_from(i % 5).unwrap()
}

/// A database, a proxy counting the protocol messages sent to it, and a pool of one
/// connection through that proxy.
fn one_connection_behind_a_counting_proxy() -> (TestDb, CountingProxy, pgqueuer::Pool) {
    let db = TestDb::new();
    let proxy = CountingProxy::start();
    let options = ConnectOptions {
        max_size: 1,
        min_idle: 0,
        ..Default::default()
    };
    let pool = pgqueuer::connect_with(&proxy.dsn(&db.name), &options).unwrap();
    (db, proxy, pool)
}

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
        count(
            &mut client,
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'held'"
        ),
        50
    );
    assert_eq!(all.len(), 50);
}

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
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 0);
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer_log"), 0);
    assert_eq!(
        listener.collect(Duration::from_millis(300)),
        Vec::<String>::new()
    );
}

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
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 1);
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer_log"), 1);
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

#[test]
fn skip_leaves_none_where_a_key_is_held_or_repeated() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let held = queue.enqueue(job("ep").dedupe_key("k")).unwrap();
    let ids = queue
        .enqueue_with(
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
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 3);
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer_log"), 3);
    assert_eq!(
        queue
            .enqueue_with(&[job("ep").dedupe_key("k")], OnConflict::Skip)
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

#[test]
fn update_priority_raises_the_held_job_and_returns_its_id() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let held = queue
        .enqueue(job("ep").dedupe_key("k").priority(1))
        .unwrap();
    let ids = queue
        .enqueue_with(
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
        .enqueue_with(
            &[job("ep").dedupe_key("k").priority(2)],
            OnConflict::UpdatePriority,
        )
        .unwrap();
    assert_eq!(again, [Some(held)]);
    assert_eq!(priority(&mut client), 5);
    // The held job is not logged again: one queued row per job.
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer_log"), 2);
    // A key twice in one call is refused before any SQL.
    let err = queue
        .enqueue_with(
            &[job("ep").dedupe_key("z"), job("ep").dedupe_key("z")],
            OnConflict::UpdatePriority,
        )
        .unwrap_err();
    assert_eq!(field_of(err), "jobs[1].dedupe_key");
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 2);
}

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
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 1);
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer_log"), 1);
}

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

#[test]
fn headers_written_by_us_and_by_python_read_back() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let with = queue
        .enqueue(job("h").header("trace", "abc").header("n", 3))
        .unwrap();
    let without = queue.enqueue(job("h")).unwrap();
    // What Python writes (jsonb null), and a row with SQL NULL.
    let python: i64 = client
        .query_one(
            "INSERT INTO pgqueuer (priority, entrypoint, status, headers) \
             VALUES (0, 'h', 'queued', 'null'::jsonb) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    let sql_null: i64 = client
        .query_one(
            "INSERT INTO pgqueuer (priority, entrypoint, status, headers) \
             VALUES (0, 'h', 'queued', NULL) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    // We store "no headers" as Python does: jsonb null, not SQL NULL.
    let kind: Option<String> = client
        .query_one(
            "SELECT jsonb_typeof(headers) FROM pgqueuer WHERE id = $1",
            &[&without],
        )
        .unwrap()
        .get(0);
    assert_eq!(kind.as_deref(), Some("null"));
    let jobs: HashMap<i64, pgqueuer::Job> = queue
        .jobs(&[with, without, python, sql_null])
        .unwrap()
        .into_iter()
        .map(|j| (j.id, j))
        .collect();
    assert_eq!(
        jobs[&with].headers,
        Some(serde_json::json!({"trace": "abc", "n": 3}))
    );
    assert_eq!(jobs[&without].headers, None);
    assert_eq!(jobs[&python].headers, None);
    assert_eq!(jobs[&sql_null].headers, None);
    assert_eq!(jobs[&python].payload, None);
}

#[test]
fn payloads_round_trip_exactly() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let big: Vec<u8> = (0..20_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let payloads: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0xff, 0xfe, 0x00, 0xc3, 0x28, 0x00],
        b"plain text".to_vec(),
        big,
    ];
    let jobs: Vec<NewJob> = payloads
        .iter()
        .map(|p| NewJob::new("bytes", p.clone()))
        .collect();
    let mut ids = queue.enqueue_many(&jobs).unwrap();
    ids.push(queue.enqueue(NewJob::without_payload("bytes")).unwrap());
    let read = queue.jobs(&ids).unwrap();
    assert_eq!(read.len(), 5);
    for (job, expected) in read.iter().zip(&payloads) {
        assert_eq!(job.payload.as_ref(), Some(expected), "job {}", job.id);
    }
    assert_eq!(read[4].payload, None);
    assert_eq!(read[2].payload_str(), Some("plain text"));
}

#[test]
fn bad_input_names_the_field_sends_nothing_and_inserts_nothing() {
    let (db, proxy, pool) = one_connection_behind_a_counting_proxy();
    let queue = Queue::new(pool);
    let mut direct = db.client();
    let before = proxy.total();
    let cases: Vec<(NewJob, &str)> = vec![
        (job(""), "entrypoint"),
        (
            job(&"e".repeat(NewJob::MAX_ENTRYPOINT_BYTES + 1)),
            "entrypoint",
        ),
        (job("nul\0"), "entrypoint"),
        (job("ep").dedupe_key(""), "dedupe_key"),
        (job("ep").dedupe_key("nul\0"), "dedupe_key"),
        (job("ep").headers(serde_json::json!("text")), "headers"),
        (job("ep").headers(serde_json::json!([1])), "headers"),
        (job("ep").header("k", "\0"), "headers"),
        (job("ep").execute_after(Duration::MAX), "execute_after"),
        (
            job("ep").execute_after(Duration::from_secs(u64::MAX / 1_000_000)),
            "execute_after",
        ),
    ];
    for (bad, field) in &cases {
        let err = queue.enqueue(bad).unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
        assert_eq!(field_of(err), *field);
        let err = queue.on(&mut direct).enqueue(bad).unwrap_err();
        assert_eq!(field_of(err), *field);
        let batch = [job("fine"), bad.clone()];
        let err = queue.enqueue_many(&batch).unwrap_err();
        assert_eq!(field_of(err), format!("jobs[1].{field}"));
        let err = queue.enqueue_with(&batch, OnConflict::Skip).unwrap_err();
        assert_eq!(field_of(err), format!("jobs[1].{field}"));
    }
    // A batch over the size limit (zeroed memory is lazy: this allocates nothing real).
    let quarter = Queue::MAX_BATCH_BYTES / 4;
    let huge: Vec<NewJob> = (0..5)
        .map(|_| NewJob::new("big", vec![0u8; quarter]))
        .collect();
    assert_eq!(field_of(queue.enqueue_many(&huge).unwrap_err()), "jobs");
    assert_eq!(proxy.total(), before, "no message reached the server");
    assert_eq!(count(&mut direct, "SELECT count(*) FROM pgqueuer"), 0);
    assert_eq!(count(&mut direct, "SELECT count(*) FROM pgqueuer_log"), 0);
    // The limits themselves are accepted.
    queue
        .enqueue(
            job(&"e".repeat(NewJob::MAX_ENTRYPOINT_BYTES))
                .dedupe_key("k".repeat(NewJob::MAX_DEDUPE_KEY_BYTES))
                .execute_after(NewJob::MAX_EXECUTE_AFTER),
        )
        .unwrap();
}

#[test]
fn execute_after_is_an_exact_delay_from_the_enqueuing_transaction() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let delay = Duration::new(3 * 86_400 + 5, 7_000);
    let id = queue.enqueue(job("later").execute_after(delay)).unwrap();
    let gap: String = client
        .query_one(
            "SELECT (extract(epoch FROM execute_after) - extract(epoch FROM created))::text \
             FROM pgqueuer WHERE id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(gap, "259205.000007");
    let now = queue.enqueue(job("now")).unwrap();
    let due: bool = client
        .query_one(
            "SELECT execute_after = created FROM pgqueuer WHERE id = $1",
            &[&now],
        )
        .unwrap()
        .get(0);
    assert!(due);
}

#[test]
fn cancel_deletes_queued_and_picked_jobs_logs_them_and_announces_them() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let ids = queue
        .enqueue_many(&[job("c"), job("c"), job("c"), job("c")])
        .unwrap();
    let (queued, picked, held, untouched) = (ids[0], ids[1], ids[2], ids[3]);
    client
        .execute(
            "UPDATE pgqueuer SET status = 'picked', queue_manager_id = gen_random_uuid() WHERE id = $1",
            &[&picked],
        )
        .unwrap();
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&held],
        )
        .unwrap();
    let mut listener = Listener::new(&db);
    let cancelled = queue.cancel(&[picked, 999_999, queued, held]).unwrap();
    assert_eq!(cancelled, [queued, picked]);
    let payload = listener
        .first(Duration::from_secs(5), |e| {
            matches!(e, Event::Cancellation(_))
        })
        .expect("a cancellation event");
    // Exactly Python's field set, compact, with tz-aware times.
    let value: serde_json::Value = serde_json::from_str(&payload).unwrap();
    let keys: BTreeSet<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["channel", "sent_at", "type", "received_at", "ids"])
    );
    assert!(!payload.contains(": "), "compact JSON: {payload}");
    assert!(
        value["sent_at"].as_str().unwrap().ends_with('Z'),
        "{payload}"
    );
    let Event::Cancellation(event) = Event::parse(&payload).unwrap() else {
        unreachable!()
    };
    assert_eq!(event.ids, [queued, picked]);
    assert_eq!(event.channel, "ch_pgqueuer");
    let remaining: Vec<i64> = client
        .query("SELECT id FROM pgqueuer ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(remaining, [held, untouched]);
    let logged: Vec<i64> = client
        .query(
            "SELECT job_id FROM pgqueuer_log WHERE status = 'canceled' ORDER BY job_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(logged, [queued, picked]);
    // Cancelling again, or nothing, is not an error.
    assert_eq!(queue.cancel(&[queued, picked]).unwrap(), Vec::<i64>::new());
    assert_eq!(queue.cancel(&[]).unwrap(), Vec::<i64>::new());
}

#[test]
fn cancelling_many_jobs_splits_events_under_the_notify_payload_limit() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let jobs: Vec<NewJob> = (0..1000).map(|_| job("many")).collect();
    let ids = queue.enqueue_many(&jobs).unwrap();
    let mut listener = Listener::new(&db);
    assert_eq!(queue.cancel(&ids).unwrap(), ids);
    let mut seen = Vec::new();
    for payload in listener.collect(Duration::from_millis(500)) {
        assert!(payload.len() < 8000);
        if let Event::Cancellation(c) = Event::parse(&payload).unwrap() {
            seen.extend(c.ids);
        }
    }
    assert_eq!(seen, ids);
}

#[test]
fn sizes_clear_list_failed_and_requeue_failed() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let mut client = db.client();
    let a = queue
        .enqueue_many(&[job("a"), job("a"), job("a").priority(2)])
        .unwrap();
    let b = queue.enqueue_many(&[job("b"), job("b")]).unwrap();
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed', attempts = 3 WHERE id = ANY($1)",
            &[&b],
        )
        .unwrap();
    let sizes: Vec<(String, i32, Status, u64)> = queue
        .sizes()
        .unwrap()
        .into_iter()
        .map(|s| (s.entrypoint, s.priority, s.status, s.count))
        .collect();
    assert_eq!(
        sizes,
        [
            ("a".to_owned(), 0, Status::Queued, 2),
            ("a".to_owned(), 2, Status::Queued, 1),
            ("b".to_owned(), 0, Status::Failed, 2),
        ]
    );
    let failed = queue.list_failed(10).unwrap();
    assert_eq!(failed.iter().map(|j| j.job.id).collect::<Vec<_>>(), b);
    assert!(failed.iter().all(|j| j.job.status == Status::Failed));
    assert_eq!(queue.list_failed(1).unwrap().len(), 1);

    let mut listener = Listener::new(&db);
    let requeued = queue.requeue_failed(&[b[0], a[0], 424_242]).unwrap();
    assert_eq!(requeued, [b[0]]);
    let back = &queue.jobs(&[b[0]]).unwrap()[0];
    assert_eq!((back.status, back.attempts), (Status::Queued, 0));
    assert_eq!(queue.job_statuses(&[b[0]]).unwrap()[&b[0]], Status::Queued);
    // Workers are woken although the trigger announces no UPDATE.
    listener
        .first(Duration::from_secs(5), |e| {
            matches!(e, Event::TableChanged(t) if t.operation == Operation::Update && t.table == "pgqueuer")
        })
        .expect("an update event after a requeue");

    assert_eq!(queue.clear(&["a"]).unwrap(), 3);
    assert_eq!(queue.clear(&[] as &[&str]).unwrap(), 0);
    let deleted = count(
        &mut client,
        "SELECT count(*) FROM pgqueuer_log WHERE status = 'deleted'",
    );
    assert_eq!(deleted, 3);
    assert_eq!(
        queue.job_statuses(&a).unwrap(),
        a.iter().map(|id| (*id, Status::Deleted)).collect()
    );
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 2);
}

#[test]
fn job_statuses_reports_the_latest_log_status() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(1));
    let mut client = db.client();
    let ids = queue.enqueue_many(&[job("s"), job("s")]).unwrap();
    client
        .execute(
            "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
             VALUES ($1, 'picked', 's', 0), ($1, 'exception', 's', 0)",
            &[&ids[0]],
        )
        .unwrap();
    let statuses = queue.job_statuses(&[ids[0], ids[1], 777]).unwrap();
    assert_eq!(statuses.len(), 2);
    assert_eq!(statuses[&ids[0]], Status::Exception);
    assert_eq!(statuses[&ids[1]], Status::Queued);
}

/// Finishes a job the way a worker's completion statement does: the row deleted and the
/// terminal log row written in one transaction.
fn complete(client: &mut Client, id: i64, status: &str) {
    let mut tx = client.transaction().unwrap();
    tx.execute(
        &format!(
            "WITH gone AS (DELETE FROM pgqueuer WHERE id = $1 RETURNING id, entrypoint, priority) \
             INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
             SELECT id, '{status}', entrypoint, priority FROM gone"
        ),
        &[&id],
    )
    .unwrap();
    tx.commit().unwrap();
}

#[test]
fn wait_for_returns_promptly_when_another_thread_completes_the_job() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let ids = queue.enqueue_many(&[job("w"), job("w")]).unwrap();
    let mut worker = db.client();
    let started = Instant::now();
    let statuses = std::thread::scope(|scope| {
        let finisher = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            complete(&mut worker, ids[0], "successful");
            complete(&mut worker, ids[1], "exception");
        });
        let statuses = queue.wait_for(&ids, Duration::from_secs(20)).unwrap();
        finisher.join().unwrap();
        statuses
    });
    let elapsed = started.elapsed();
    assert_eq!(statuses[&ids[0]], Status::Successful);
    assert_eq!(statuses[&ids[1]], Status::Exception);
    // Polling looks once a second; an answer well before that came from the NOTIFY.
    assert!(elapsed < Duration::from_millis(850), "took {elapsed:?}");
}

#[test]
fn wait_for_sees_a_cancellation() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(job("w")).unwrap();
    let statuses = std::thread::scope(|scope| {
        let canceller = queue.clone();
        scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            canceller.cancel(&[id]).unwrap();
        });
        queue.wait_for(&[id], Duration::from_secs(20)).unwrap()
    });
    assert_eq!(statuses, HashMap::from([(id, Status::Canceled)]));
}

#[test]
fn wait_for_polls_when_no_notification_comes() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(job("w")).unwrap();
    let mut client = db.client();
    // A terminal log row without a DELETE: nothing is announced on the channel.
    let started = Instant::now();
    let statuses = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            client
                .execute(
                    "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) \
                     VALUES ($1, 'successful', 'w', 0)",
                    &[&id],
                )
                .unwrap();
        });
        queue.wait_for(&[id], Duration::from_secs(20)).unwrap()
    });
    assert_eq!(statuses[&id], Status::Successful);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn wait_for_times_out_on_unfinished_jobs() {
    let db = TestDb::new();
    let queue = Queue::new(db.pool(2));
    let id = queue.enqueue(job("never")).unwrap();
    let mut client = db.client();
    // A held job is not finished.
    client
        .execute(
            "UPDATE pgqueuer SET status = 'failed' WHERE id = $1",
            &[&id],
        )
        .unwrap();
    let started = Instant::now();
    let err = queue
        .wait_for(&[id], Duration::from_millis(400))
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err, Error::Timeout(d) if d == Duration::from_millis(400)),
        "{err:?}"
    );
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(queue.wait_for(&[], Duration::ZERO).unwrap().is_empty());
}

#[test]
fn a_queue_with_prefix_and_schema_uses_its_own_objects() {
    let db = TestDb::new();
    let settings = Settings::with_prefix("app_").schema("myq");
    let mut client = db.client();
    pgqueuer::upgrade_with(&mut client, &settings).unwrap();
    let queue = Queue::with_settings(db.pool(2), &settings).unwrap();
    client.batch_execute("LISTEN \"app_ch_pgqueuer\"").unwrap();
    let ids = queue
        .enqueue_with(
            &[job("p").dedupe_key("k"), job("p").dedupe_key("k")],
            OnConflict::Skip,
        )
        .unwrap();
    assert!(ids[0].is_some() && ids[1].is_none());
    assert_eq!(
        count(&mut client, "SELECT count(*) FROM myq.app_pgqueuer"),
        1
    );
    assert_eq!(count(&mut client, "SELECT count(*) FROM pgqueuer"), 0);
    let err = queue.enqueue(job("p").dedupe_key("k")).unwrap_err();
    assert!(err.is_duplicate(), "{err:?}");
    let id = ids[0].unwrap();
    assert_eq!(queue.cancel(&[id]).unwrap(), [id]);
    let statuses = queue.wait_for(&[id], Duration::from_secs(5)).unwrap();
    assert_eq!(statuses[&id], Status::Canceled);
    let mut kinds = Vec::new();
    let mut notes = client.notifications();
    let mut it = notes.timeout_iter(Duration::from_millis(300));
    while let Some(n) = it.next().unwrap() {
        let event = Event::parse(n.payload()).unwrap();
        assert_eq!(event.channel(), "app_ch_pgqueuer");
        kinds.push(event.kind());
    }
    assert!(kinds.contains(&"cancellation_event"), "{kinds:?}");
    let bad = Settings {
        channel: "no good".into(),
        ..Settings::default()
    };
    assert!(matches!(
        Queue::with_settings(db.pool(1), &bad),
        Err(Error::InvalidSetting { .. })
    ));
}
