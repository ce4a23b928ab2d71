//! The worker's figures through the `metrics` facade, read back from an in-memory
//! recorder, against a workload whose every outcome is known; and the worker's own
//! snapshot of the same figures.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use pgqueuer::{
    Claimer, Entrypoint, NewJob, OnFailure, Outcome, Queue, RetryPolicy, Status, Worker,
    WorkerStats,
};

use crate::harness::{TestDb, eventually, eventually_explained, sessions_waiting_on_locks};

/// One metric as the recorder saw it: its kind, name and sorted labels.
type Key = (MetricKind, String, Vec<(String, String)>);

fn read(recorder: &metrics_util::debugging::Snapshotter) -> HashMap<Key, DebugValue> {
    recorder
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _unit, _help, value)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            ((kind, key.name().to_owned(), labels), value)
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = pairs
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    labels.sort();
    labels
}

fn counter(m: &HashMap<Key, DebugValue>, name: &str, pairs: &[(&str, &str)]) -> u64 {
    match m.get(&(MetricKind::Counter, name.to_owned(), labels(pairs))) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("counter {name} {pairs:?}: {other:?}"),
    }
}

fn histogram_count(m: &HashMap<Key, DebugValue>, name: &str, pairs: &[(&str, &str)]) -> u64 {
    match m.get(&(MetricKind::Histogram, name.to_owned(), labels(pairs))) {
        Some(DebugValue::Histogram(values)) => values.len() as u64,
        other => panic!("histogram {name} {pairs:?}: {other:?}"),
    }
}

fn gauge(m: &HashMap<Key, DebugValue>, name: &str, pairs: &[(&str, &str)]) -> f64 {
    match m.get(&(MetricKind::Gauge, name.to_owned(), labels(pairs))) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("gauge {name} {pairs:?}: {other:?}"),
    }
}

/// What each entrypoint of the workload must end with: claimed, successful, exception,
/// failed, retried, handler runs.
const EXPECTED: [(&str, [u64; 6]); 5] = [
    ("work", [4, 4, 0, 0, 0, 4]),
    ("fails", [1, 0, 1, 0, 0, 1]),
    ("fails_hold", [1, 0, 0, 1, 0, 1]),
    ("flaky", [2, 1, 0, 0, 1, 2]),
    ("one", [1, 1, 0, 0, 0, 1]),
];

/// Four successes, a failure deleted and one held, a job that fails once and is retried
/// by its policy, and a limited job whose first claim loses the slot race to a claim
/// held open elsewhere (23505, as the claim race tests force it): every counter has
/// its exact value, every histogram one sample per run, and the snapshot agrees.
#[test]
fn the_recorder_counts_a_known_workload_exactly() {
    crate::harness::init_logging();
    let db = TestDb::new();
    let pool = db.pool(5);
    let queue = Queue::new(pool.clone());
    let mut setup = db.client();
    // Another worker holds "one"'s only slot in an open transaction.
    let rival = Claimer::builder().entrypoint("one", 1).build().unwrap();
    queue.enqueue(NewJob::new("one", "held elsewhere")).unwrap();
    let mut rival_client = db.client();
    let mut tx = rival_client.transaction().unwrap();
    let held = rival.claim_in(&mut tx, 1).unwrap().jobs;
    assert_eq!(held.len(), 1);
    let mut jobs: Vec<NewJob> = (0..4)
        .map(|i| NewJob::new("work", format!("{i}")))
        .collect();
    jobs.push(NewJob::new("fails", "x"));
    jobs.push(NewJob::new("fails_hold", "x"));
    jobs.push(NewJob::new("flaky", "x"));
    // Above the held job: our claim counts no slot in use and takes slot 0, then waits
    // on the slot index for the rival's uncommitted row.
    jobs.push(NewJob::new("one", "ours").priority(100));
    queue.enqueue_many(&jobs).unwrap();

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let flaky_runs = Arc::new(AtomicU32::new(0));
    let worker = metrics::with_local_recorder(&recorder, || {
        let flaky_runs = flaky_runs.clone();
        Worker::builder(pool.clone())
            .threads(4)
            .entrypoint("work", |_job, _ctx| Ok(()))
            .entrypoint("fails", |_job, _ctx| Err("refused".into()))
            .entrypoint(
                Entrypoint::new("fails_hold").on_failure(OnFailure::Hold),
                |_job, _ctx| Err("refused and held".into()),
            )
            .entrypoint(
                Entrypoint::new("flaky").retry(
                    RetryPolicy::exponential(
                        3,
                        Duration::from_millis(10),
                        Duration::from_millis(10),
                    )
                    .jitter(0.0),
                ),
                move |_job, _ctx| {
                    if flaky_runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err("first run fails".into())
                    } else {
                        Ok(())
                    }
                },
            )
            .entrypoint(Entrypoint::new("one").concurrency_limit(1), |_job, _ctx| {
                Ok(())
            })
            .build()
            .unwrap()
    });
    let stats = worker.stats_handle();
    let running = worker.start().unwrap();
    eventually(
        Duration::from_secs(10),
        "our claim waits on the slot index",
        || sessions_waiting_on_locks(&mut setup) == 1,
    );
    tx.commit().unwrap();
    // The rival finishes its job, freeing the slot.
    rival
        .complete(
            &mut pool.get().unwrap(),
            &[Outcome {
                id: held[0].id,
                status: Status::Successful,
                traceback: None,
            }],
        )
        .unwrap();
    eventually_explained(
        Duration::from_secs(20),
        "every job to end",
        || {
            let s = stats.snapshot();
            s.jobs.succeeded == 6 && s.jobs.failed == 2
        },
        // Which jobs are left, and where.
        || {
            let rows: Vec<(i64, String, String, Option<i64>, bool, i64)> = setup
                .query(
                    "SELECT id, entrypoint, status::text, slot, queue_manager_id IS NOT NULL, \
                     (EXTRACT(EPOCH FROM execute_after - NOW()) * 1000)::int8 FROM pgqueuer",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
                .collect();
            format!(": {:?}; rows left: {rows:?}", stats.snapshot().jobs)
        },
    );
    running.shutdown_handle().shutdown();
    running.join().unwrap();
    // Read after the join, as the recorder is: a claim made between a snapshot taken
    // while running and the shutdown would count in one and not the other.
    let snapshot: WorkerStats = stats.snapshot();
    let m = read(&snapshotter);

    for (entrypoint, [claimed, successful, exception, failed, retried, runs]) in EXPECTED {
        let e = [("entrypoint", entrypoint)];
        let ended = |status: &str| {
            counter(
                &m,
                "pgqueuer_jobs_ended_total",
                &[("entrypoint", entrypoint), ("status", status)],
            )
        };
        let got = [
            counter(&m, "pgqueuer_jobs_claimed_total", &e),
            ended("successful"),
            ended("exception"),
            ended("failed"),
            counter(&m, "pgqueuer_jobs_retried_total", &e),
            histogram_count(&m, "pgqueuer_handler_duration_seconds", &e),
        ];
        assert_eq!(
            got,
            [claimed, successful, exception, failed, retried, runs],
            "{entrypoint}: claimed, successful, exception, failed, retried, runs"
        );
        assert_eq!(
            histogram_count(&m, "pgqueuer_start_latency_seconds", &e),
            runs,
            "{entrypoint}: start latencies"
        );
        assert_eq!(ended("canceled"), 0, "{entrypoint}: canceled");
        // The snapshot says the same.
        let s = snapshot.entrypoint(entrypoint).unwrap();
        assert_eq!(
            [
                s.claimed,
                s.successful,
                s.exception,
                s.failed,
                s.retried,
                s.handler.count
            ],
            got,
            "{entrypoint}: the snapshot"
        );
        assert_eq!(s.start_latency.count, runs);
        assert_eq!(s.canceled, 0);
    }
    assert_eq!(counter(&m, "pgqueuer_slot_races_lost_total", &[]), 1);
    assert_eq!(snapshot.slot_races_lost, 1);
    assert_eq!(counter(&m, "pgqueuer_deadlocks_retried_total", &[]), 0);
    assert_eq!(snapshot.deadlocks_retried, 0);
    let claims = counter(&m, "pgqueuer_claims_total", &[]);
    assert!(
        claims >= 3,
        "at least the lost claim and two more: {claims}"
    );
    assert_eq!(snapshot.claims, claims);
    assert_eq!(
        histogram_count(&m, "pgqueuer_claim_duration_seconds", &[]),
        claims
    );
    assert_eq!(snapshot.claim_duration.count, claims);
    assert_eq!(
        (
            snapshot.jobs.succeeded,
            snapshot.jobs.failed,
            snapshot.jobs.retried
        ),
        (6, 2, 1)
    );
    // Gauges: the last claim's load, and the slots held (the heartbeat thread's look).
    let threads = gauge(&m, "pgqueuer_threads_idle", &[]);
    assert!((0.0..=4.0).contains(&threads), "idle threads {threads}");
    assert_eq!(threads as u64, snapshot.idle_threads);
    assert_eq!(
        gauge(&m, "pgqueuer_jobs_running", &[]) as u64,
        snapshot.running
    );
    let slots_in_use = gauge(&m, "pgqueuer_slots_in_use", &[("entrypoint", "one")]);
    assert!(
        slots_in_use == 0.0 || slots_in_use == 1.0,
        "slots held {slots_in_use}"
    );
}

/// A recorder installed after the worker was built sees nothing of it (the handles are
/// registered at build time, as docs/operating.md says), and one around `build()` sees only
/// that worker: two workers in one process keep their figures apart.
#[test]
fn handles_belong_to_the_recorder_around_build() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    queue
        .enqueue_many(&[NewJob::new("a", "1"), NewJob::new("a", "2")])
        .unwrap();
    let first = DebuggingRecorder::new();
    let first_snap = first.snapshotter();
    let worker = metrics::with_local_recorder(&first, || {
        Worker::builder(pool.clone())
            .threads(2)
            .entrypoint("a", |_job, _ctx| Ok(()))
            .build()
            .unwrap()
    });
    let later = DebuggingRecorder::new();
    let later_snap = later.snapshotter();
    let summary = metrics::with_local_recorder(&later, || worker.run_until_empty().unwrap());
    assert_eq!(summary.succeeded, 2);
    let m = read(&first_snap);
    assert_eq!(
        counter(
            &m,
            "pgqueuer_jobs_ended_total",
            &[("entrypoint", "a"), ("status", "successful")]
        ),
        2
    );
    assert!(
        read(&later_snap).is_empty(),
        "a recorder set after build() sees nothing"
    );
}

/// A write the database refuses counts in `pgqueuer_outcome_write_failures_total` (and
/// the snapshot's `outcome_write_failures`), so a completer that cannot write is seen
/// by the metrics stack, not only in the log.
#[test]
fn refused_outcome_writes_are_counted() {
    let db = TestDb::new();
    let pool = db.pool(4);
    let queue = Queue::new(pool.clone());
    let id = queue.enqueue(NewJob::new("a", "x")).unwrap();
    db.client()
        .batch_execute(&format!(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.job_id = {id} AND NEW.status = 'successful' THEN
                     RAISE EXCEPTION 'refused' USING ERRCODE = '22023';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER refuse BEFORE INSERT ON pgqueuer_log
                 FOR EACH ROW EXECUTE FUNCTION refuse();"
        ))
        .unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let worker = metrics::with_local_recorder(&recorder, || {
        Worker::builder(pool.clone())
            .threads(2)
            .entrypoint("a", |_job, _ctx| Ok(()))
            .build()
            .unwrap()
    });
    let stats = worker.stats_handle();
    worker.run_until_empty().unwrap();
    let m = read(&snapshotter);
    let failures = counter(&m, "pgqueuer_outcome_write_failures_total", &[]);
    assert!(failures >= 1, "{failures}");
    assert_eq!(stats.snapshot().outcome_write_failures, failures);
    let status: String = db
        .client()
        .query_one(
            "SELECT status::text FROM pgqueuer_log WHERE job_id = $1 ORDER BY id DESC LIMIT 1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "exception");
}

/// On the second claim lane's thread, holds each claim that took jobs `pause` between its
/// commit and the hand-over of its jobs, or, with `release`, until the test sends on it;
/// every other metric is dropped. The claim counter (incremented for every claim, empty
/// ones too) arms the hold, and the claim's first claimed job (the jobs counter, which
/// follows it in the same window) takes it: a claim that found nothing, because the
/// primary lane had already taken every job, is not held.
struct PausedSecondLane {
    pause: Duration,
    paused: Arc<AtomicU32>,
    release: Option<crossbeam_channel::Receiver<()>>,
    armed: AtomicBool,
}

fn on_second_lane() -> bool {
    std::thread::current().name() == Some("pgqueuer-lane-1")
}

/// The claim counter's handle: arms [`PausedSecondLane`].
struct ArmOnClaim(Arc<PausedSecondLane>);

impl metrics::CounterFn for ArmOnClaim {
    fn increment(&self, _value: u64) {
        if on_second_lane() {
            self.0.armed.store(true, Ordering::SeqCst);
        }
    }

    fn absolute(&self, _value: u64) {}
}

impl metrics::CounterFn for PausedSecondLane {
    fn increment(&self, _value: u64) {
        if on_second_lane() && self.armed.swap(false, Ordering::SeqCst) {
            self.paused.fetch_add(1, Ordering::SeqCst);
            match &self.release {
                Some(release) => {
                    let _ = release.recv_timeout(self.pause);
                }
                None => std::thread::sleep(self.pause),
            }
        }
    }

    fn absolute(&self, _value: u64) {}
}

struct PauseRecorder(Arc<PausedSecondLane>);

impl metrics::Recorder for PauseRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        match key.name() {
            "pgqueuer_claims_total" => {
                metrics::Counter::from_arc(Arc::new(ArmOnClaim(self.0.clone())))
            }
            "pgqueuer_jobs_claimed_total" => metrics::Counter::from_arc(self.0.clone()),
            _ => metrics::Counter::noop(),
        }
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// 1,000 jobs of `entrypoint` queued (enough that the second lane claims some before the
/// primary lane has taken them all), and a worker of 16 threads claiming 10 whose second
/// lane's claims are held as `pause` says; with the count of claims held and of handler
/// runs.
fn with_a_paused_second_lane(
    db: &TestDb,
    entrypoint: &'static str,
    pause: Duration,
    release: Option<crossbeam_channel::Receiver<()>>,
) -> (Worker, Arc<AtomicU32>, Arc<AtomicU32>) {
    let pool = db.pool(6);
    let jobs: Vec<NewJob> = (0..1_000)
        .map(|i| NewJob::new(entrypoint, format!("{i}")))
        .collect();
    Queue::new(pool.clone()).enqueue_many(&jobs).unwrap();
    let paused = Arc::new(AtomicU32::new(0));
    let pause = Arc::new(PausedSecondLane {
        pause,
        paused: paused.clone(),
        release,
        armed: AtomicBool::new(false),
    });
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let worker = metrics::with_local_recorder(&PauseRecorder(pause), || {
        Worker::builder(pool)
            .threads(16)
            .batch_size(10)
            .entrypoint(entrypoint, move |_job, _ctx| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .build()
            .unwrap()
    });
    (worker, paused, runs)
}

/// A drain returns only once every job it claimed has run, the second lane's included.
/// A claim that has committed but not yet handed its jobs to the threads is still in
/// flight: the primary lane, finding the queue empty right after that commit and none of
/// the claim's jobs owned yet, must wait for it, not stop the drain (which sent the
/// claim's jobs back to the queue unrun, one full batch in 200 drains of a benchmark).
/// The recorder holds each of the second lane's claims that took jobs 100 ms in that
/// window; every job runs, the queue is empty afterwards, and the second lane did claim.
#[test]
fn a_drain_waits_for_a_second_lane_claim_between_its_commit_and_its_hand_over() {
    let db = TestDb::new();
    let (worker, paused, runs) =
        with_a_paused_second_lane(&db, "drained", Duration::from_millis(100), None);
    worker.run_until_empty().unwrap();
    let left: i64 = db
        .client()
        .query_one("SELECT COUNT(*) FROM pgqueuer", &[])
        .unwrap()
        .get(0);
    assert!(
        paused.load(Ordering::SeqCst) > 0,
        "the second lane never claimed: the test did not hold a claim in the window"
    );
    assert_eq!(
        (runs.load(Ordering::SeqCst), left),
        (1_000, 0),
        "jobs run, and jobs left in the queue, after the drain"
    );
}

/// A shutdown that comes while the second lane's claim sits between its commit and its
/// hand-over loses none of that claim's jobs: once the worker has stopped, no job is
/// left `picked`, and every job either ran once (and is gone) or is queued again.
#[test]
fn a_shutdown_gives_back_a_second_lane_claim_caught_between_its_commit_and_its_hand_over() {
    let db = TestDb::new();
    // The second lane's first claim that takes jobs is held until the shutdown has been
    // asked for.
    let (release_tx, release) = crossbeam_channel::bounded::<()>(1);
    let (worker, paused, runs) =
        with_a_paused_second_lane(&db, "stopped", Duration::from_secs(30), Some(release));
    let worker = worker.start().unwrap();
    eventually(Duration::from_secs(30), "the second lane claims", || {
        paused.load(Ordering::SeqCst) > 0
    });
    worker.shutdown_handle().shutdown();
    // Releases the held claim, and lets any later one through at once.
    drop(release_tx);
    worker.join().unwrap();
    let mut client = db.client();
    let count = |client: &mut postgres::Client, status: &str| -> i64 {
        client
            .query_one(
                "SELECT COUNT(*) FROM pgqueuer WHERE status::text = $1",
                &[&status],
            )
            .unwrap()
            .get(0)
    };
    let (picked, queued) = (count(&mut client, "picked"), count(&mut client, "queued"));
    let ran = i64::from(runs.load(Ordering::SeqCst));
    assert_eq!(picked, 0, "jobs left picked after the worker stopped");
    assert_eq!(ran + queued, 1_000, "{ran} jobs ran, {queued} queued again");
    assert!(
        queued >= 10,
        "the paused claim's batch went back: {queued} queued"
    );
}
