//! The limit audit: the most jobs of each entrypoint picked at once, from the log.

use std::time::{Duration, SystemTime};

use pgqueuer::{Entrypoint, NewJob, Queue, Settings, Worker, ops};

use super::create_runs_table;
use crate::harness::{TestDb, scalar};

/// A log written by hand (in time order, as workers write it) with three overlapping
/// runs of one entrypoint (one more than a limit of 2) is audited as a peak of 3, by the
/// log's order and by its clock; a run whose job is still picked counts until now; a
/// window that starts while a job runs counts that job.
#[test]
fn the_audit_reports_an_overlap_beyond_the_limit() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(
            "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, created) VALUES
               (1, 'queued',     'audited', 0, now() - interval '50 s'),
               (1, 'picked',     'audited', 0, now() - interval '40 s'),
               (2, 'picked',     'audited', 0, now() - interval '35 s'),
               (3, 'picked',     'audited', 0, now() - interval '30 s'),
               (5, 'picked',     'other',   0, now() - interval '30 s'),
               (3, 'successful', 'audited', 0, now() - interval '25 s'),
               (2, 'exception',  'audited', 0, now() - interval '20 s'),
               (1, 'successful', 'audited', 0, now() - interval '10 s'),
               (4, 'picked',     'audited', 0, now() - interval '10 s'),
               (4, 'successful', 'audited', 0, now() - interval '5 s')",
        )
        .unwrap();
    let settings = Settings::default();
    let audit = ops::limit_audit(
        &mut client,
        &settings,
        Duration::from_secs(60),
        None,
        ops::AUDIT_RESOLUTION,
    )
    .unwrap();
    assert_eq!(audit.rows_read, 10);
    assert!(audit.log_order_reliable);
    let audited = &audit.entrypoints[0];
    assert_eq!(audited.entrypoint, "audited");
    assert_eq!(
        (audited.peak, audited.clock_peak),
        (3, 3),
        "jobs 1, 2 and 3 overlap from -30 s to -25 s"
    );
    assert_eq!(audited.runs, 4);
    assert_eq!(audit.entrypoints[1].entrypoint, "other");
    assert_eq!(audit.entrypoints[1].peak, 1);
    // One entrypoint, over a window that starts while jobs 1 and 2 run.
    let audit = ops::limit_audit(
        &mut client,
        &settings,
        Duration::from_secs(32),
        Some("audited"),
        ops::AUDIT_RESOLUTION,
    )
    .unwrap();
    assert_eq!(audit.entrypoints.len(), 1);
    assert_eq!(audit.entrypoints[0].peak, 3);
    assert_eq!(audit.rows_read, 6);
}

/// The false alarm of a loaded machine: a claim stamped before the completion that
/// freed its slot (it waited for that commit; its transaction began first), by 2 ms and
/// by 2 s. The log's order says one run at a time, so `peak` stays 1; the clock's sweep
/// shows the overlap, apart, as `clock_peak`, and only beyond the resolution.
#[test]
fn overlaps_only_the_clock_shows_are_not_a_breach() {
    let db = TestDb::new();
    let mut client = db.client();
    client
        .batch_execute(
            "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, created) VALUES
               (1, 'picked',     'tight', 0, now() - interval '10 s'),
               (1, 'successful', 'tight', 0, now() - interval '9 s'),
               (2, 'picked',     'tight', 0, now() - interval '9.002 s'),
               (2, 'successful', 'tight', 0, now() - interval '8 s'),
               (3, 'picked',     'loaded', 0, now() - interval '10 s'),
               (3, 'successful', 'loaded', 0, now() - interval '5 s'),
               (4, 'picked',     'loaded', 0, now() - interval '7 s'),
               (4, 'successful', 'loaded', 0, now() - interval '1 s')",
        )
        .unwrap();
    let audit = |resolution| {
        let mut client = db.client();
        let audit = ops::limit_audit(
            &mut client,
            &Settings::default(),
            Duration::from_secs(60),
            None,
            resolution,
        )
        .unwrap();
        audit
            .entrypoints
            .iter()
            .map(|e| (e.entrypoint.clone(), e.peak, e.clock_peak))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        audit(ops::AUDIT_RESOLUTION),
        [("loaded".into(), 1, 2), ("tight".into(), 1, 1)]
    );
    assert_eq!(
        audit(Duration::ZERO),
        [("loaded".into(), 1, 2), ("tight".into(), 1, 2)]
    );
}

/// Under a limit of 3 the audit's peak equals the most handlers seen running at once by
/// the database clock, which is the limit itself.
#[test]
fn the_audit_agrees_with_the_handlers_under_a_limit() {
    let db = TestDb::new();
    let mut client = db.client();
    create_runs_table(&mut client);
    let queue = Queue::new(db.pool(2));
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| NewJob::new("limited", format!("{i}")))
        .collect();
    queue.enqueue_many(&jobs).unwrap();
    let pool = db.pool(6);
    let recorder = pool.clone();
    Worker::builder(pool)
        .threads(6)
        .entrypoint(
            Entrypoint::new("limited").concurrency_limit(3),
            move |job, _ctx| {
                let mut conn = recorder.get()?;
                let started: SystemTime = conn.query_one("SELECT clock_timestamp()", &[])?.get(0);
                std::thread::sleep(Duration::from_millis(20));
                conn.execute(
                    "INSERT INTO interop_runs VALUES ($1, $2, clock_timestamp(), 'rust')",
                    &[&job.id, &started],
                )?;
                Ok(())
            },
        )
        .build()
        .unwrap()
        .run_until_empty()
        .unwrap();
    let handlers: i64 = scalar(
        &mut client,
        "SELECT max(n)::bigint FROM (SELECT sum(d) OVER (ORDER BY t, d) AS n FROM (
             SELECT started AS t, 1 AS d FROM interop_runs
             UNION ALL SELECT finished, -1 FROM interop_runs) e) s",
    );
    let audit = ops::limit_audit(
        &mut client,
        &Settings::default(),
        Duration::from_secs(600),
        None,
        ops::AUDIT_RESOLUTION,
    )
    .unwrap();
    assert_eq!(handlers, 3, "the handlers reached the limit");
    assert_eq!(audit.entrypoints[0].peak, 3);
    assert_eq!(audit.entrypoints[0].runs, 60);
}
