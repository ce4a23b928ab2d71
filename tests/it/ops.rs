//! `pgqueuer::ops` against a real server: the aggregation lock (PgQueuer's key, yielding,
//! no double counting under concurrency), pruning waiting for an aggregator, every
//! statement with a prefix and schema, and LISTEN quoting.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::ops::{self, Aggregation, Autovacuum};
use pgqueuer::postgres::Client;
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{Durability, Error, Settings};

use crate::harness::scalar;
use crate::harness::{TestDb, eventually};

fn add_log_rows(client: &mut Client, entrypoint: &str, n: i64) {
    client
        .execute(
            "INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint) \
             SELECT g, 'successful', 0, $1 FROM generate_series(1, $2::bigint) g",
            &[&entrypoint, &n],
        )
        .unwrap();
}

/// `aggregate_log` returns `Busy` at once while another session holds PgQueuer's
/// statistics lock (its key is PgQueuer's), and aggregates once the lock is free.
#[test]
fn aggregation_yields_to_a_holder_of_pgqueuers_lock() {
    let db = TestDb::new();
    let mut client = db.client();
    let settings = Settings::default();
    // PgQueuer's key for default names (the spec's figure).
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT hashtext('pgqueuer_statistics')::bigint"
        ),
        -605_165_042
    );
    add_log_rows(&mut client, "a", 5);

    let mut holder = db.client();
    holder
        .execute("SELECT pg_advisory_lock(-605165042)", &[])
        .unwrap();
    assert_eq!(
        ops::aggregate_log(&mut client, &settings).unwrap(),
        Aggregation::Busy
    );
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pgqueuer_log WHERE aggregated"
        ),
        0
    );
    holder
        .execute("SELECT pg_advisory_unlock(-605165042)", &[])
        .unwrap();

    assert_eq!(
        ops::aggregate_log(&mut client, &settings).unwrap(),
        Aggregation::Folded {
            log_rows: 5,
            buckets: 1
        }
    );
    assert_eq!(
        ops::aggregate_log(&mut client, &settings).unwrap(),
        Aggregation::Folded {
            log_rows: 0,
            buckets: 0
        }
    );
    let rows = ops::throughput(&mut client, &settings, Duration::from_secs(60)).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].entrypoint.as_str(), rows[0].count), ("a", 5));
}

/// Two aggregators running at once beside a writer count every log row exactly once.
#[test]
fn concurrent_aggregations_count_every_row_once() {
    let db = TestDb::new();
    let settings = Settings::default();
    let stop = Arc::new(AtomicBool::new(false));
    let aggregators: Vec<_> = (0..2)
        .map(|_| {
            let mut client = db.client();
            let settings = settings.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut busy = 0;
                while !stop.load(Ordering::Relaxed) {
                    if ops::aggregate_log(&mut client, &settings).unwrap() == Aggregation::Busy {
                        busy += 1;
                    }
                }
                busy
            })
        })
        .collect();
    let mut writer = db.client();
    for round in 0..40 {
        add_log_rows(&mut writer, if round % 2 == 0 { "x" } else { "y" }, 25);
    }
    stop.store(true, Ordering::Relaxed);
    for a in aggregators {
        a.join().unwrap();
    }
    ops::aggregate_log(&mut writer, &settings).unwrap();
    assert_eq!(
        scalar::<i64>(
            &mut writer,
            "SELECT sum(count)::bigint FROM pgqueuer_statistics"
        ),
        1000
    );
    assert_eq!(
        scalar::<i64>(
            &mut writer,
            "SELECT count(*) FROM pgqueuer_log WHERE NOT aggregated"
        ),
        0
    );
}

/// `prune_log` waits while another session holds the aggregation lock, then aggregates
/// and deletes the old rows.
#[test]
fn pruning_waits_for_a_running_aggregator() {
    let db = TestDb::new();
    let mut client = db.client();
    add_log_rows(&mut client, "old", 3);
    client
        .batch_execute("UPDATE pgqueuer_log SET created = now() - interval '2 days'")
        .unwrap();
    let mut holder = db.client();
    holder
        .execute(
            "SELECT pg_advisory_lock(hashtext('pgqueuer_statistics'))",
            &[],
        )
        .unwrap();
    let pruner = std::thread::spawn(move || {
        ops::prune_log(
            &mut client,
            &Settings::default(),
            Duration::from_secs(86_400),
        )
    });
    // The pruner's backend waits on the advisory lock: it had its chance to go on.
    eventually(
        Duration::from_secs(30),
        "prune_log to wait on the lock",
        || {
            assert!(!pruner.is_finished(), "prune_log must wait for the lock");
            scalar::<i64>(
                &mut holder,
                &format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' \
                 AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                    db.name
                ),
            ) == 1
        },
    );
    assert!(!pruner.is_finished(), "prune_log must wait for the lock");
    holder
        .execute(
            "SELECT pg_advisory_unlock(hashtext('pgqueuer_statistics'))",
            &[],
        )
        .unwrap();
    let pruned = pruner.join().unwrap().unwrap();
    assert_eq!((pruned.aggregated, pruned.deleted), (3, 3));
    assert_eq!(
        scalar::<i64>(
            &mut holder,
            "SELECT sum(count)::bigint FROM pgqueuer_statistics"
        ),
        3
    );
    let err = ops::prune_log(&mut holder, &Settings::default(), Duration::MAX).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { ref field, .. } if field == "older_than"));
}

/// Every operation works on prefixed tables in a schema of their own, locking on the
/// qualified statistics table name as PgQueuer does.
#[test]
fn every_operation_works_with_a_prefix_and_schema() {
    let db = TestDb::empty();
    let mut client = db.client();
    let settings = Settings::with_prefix("app_").schema("myq");
    pgqueuer::upgrade_with(&mut client, &settings).unwrap();
    client
        .batch_execute(
            "INSERT INTO myq.app_pgqueuer (priority, entrypoint, status, queue_manager_id, heartbeat) \
             VALUES (0, 'p', 'picked', gen_random_uuid(), now() - interval '1 hour'), \
                    (0, 'q', 'queued', NULL, now()); \
             INSERT INTO myq.app_pgqueuer_log (job_id, status, priority, entrypoint) VALUES (1, 'picked', 0, 'p')",
        )
        .unwrap();
    // The lock key is the qualified statistics table name, as PgQueuer renders it.
    let mut holder = db.client();
    holder
        .execute(
            "SELECT pg_advisory_lock(hashtext('myq.app_pgqueuer_statistics'))",
            &[],
        )
        .unwrap();
    assert_eq!(
        ops::aggregate_log(&mut client, &settings).unwrap(),
        Aggregation::Busy
    );
    holder
        .execute(
            "SELECT pg_advisory_unlock(hashtext('myq.app_pgqueuer_statistics'))",
            &[],
        )
        .unwrap();
    assert!(matches!(
        ops::aggregate_log(&mut client, &settings).unwrap(),
        Aggregation::Folded { log_rows: 1, .. }
    ));
    assert_eq!(
        ops::throughput(&mut client, &settings, Duration::from_secs(60))
            .unwrap()
            .len(),
        1
    );
    let stale = ops::stale_jobs(&mut client, &settings, Duration::from_secs(60), 10).unwrap();
    assert_eq!(stale.len(), 1);
    assert!(stale[0].seconds_since_heartbeat > 3599.0);
    // The job's row, without its data.
    assert_eq!(stale[0].job.status, pgqueuer::Status::Picked);
    assert!(stale[0].job.payload.is_none() && stale[0].job.headers.is_none());
    assert_eq!(
        ops::active_workers(&mut client, &settings).unwrap().len(),
        1
    );
    let ages = ops::queue_age(&mut client, &settings).unwrap();
    assert_eq!(ages.len(), 1);
    assert_eq!(ages[0].entrypoint, "q");

    ops::set_durability(&mut client, &settings, Durability::Volatile).unwrap();
    assert_eq!(
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'myq' AND c.relkind = 'r' AND c.relpersistence = 'u'"
        ),
        4
    );
    ops::autovacuum(&mut client, &settings, Autovacuum::Tune).unwrap();
    ops::autovacuum(&mut client, &settings, Autovacuum::Reset).unwrap();
    let pruned = ops::prune_log(&mut client, &settings, Duration::ZERO).unwrap();
    assert_eq!(pruned.deleted, 1);
}

/// `ops::listen` quotes the channel (mixed case and punctuation arrive) and refuses
/// names PostgreSQL cannot take.
#[test]
fn listen_quotes_the_channel() {
    let db = TestDb::new();
    let mut client = db.client();
    ops::listen(&mut client, "Mixed.Case-ch").unwrap();
    let mut sender = db.client();
    sender
        .execute("SELECT pg_notify('Mixed.Case-ch', 'hi')", &[])
        .unwrap();
    let started = Instant::now();
    let note = client
        .notifications()
        .timeout_iter(Duration::from_secs(5))
        .next()
        .unwrap()
        .expect("the notification arrives");
    assert_eq!((note.channel(), note.payload()), ("Mixed.Case-ch", "hi"));
    assert!(started.elapsed() < Duration::from_secs(5));
    for bad in ["", "a\0b", &"c".repeat(64)] {
        let err = ops::listen(&mut client, bad).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { ref field, .. } if field == "channel"));
    }
}
