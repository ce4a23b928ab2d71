//! What the database says about a run (unfinished jobs, outcomes, overlapping runs),
//! and a producer thread that keeps enqueueing through failures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgqueuer::postgres::Client;
use pgqueuer::{ConnectOptions, JobId, NewJob, Queue};

use crate::harness::scalar;

/// The table `examples/worker --record` writes; created here so that concurrent worker
/// processes do not race to create it.
pub const RUNS_DDL: &str = "CREATE TABLE pgqueuer_example_runs (job_id bigint NOT NULL, \
     entrypoint text NOT NULL, started timestamptz NOT NULL, finished timestamptz NOT NULL, \
     pid int NOT NULL)";

const TERMINAL: &str = "('successful', 'exception', 'canceled', 'deleted')";

/// A count as the database's bigint.
pub fn count(n: usize) -> i64 {
    i64::try_from(n).expect("a count fits an i64")
}

/// Enqueues `count` jobs per entrypoint of the plan, interleaved; returns every id.
pub fn enqueue_plan(queue: &Queue, plan: &[(&str, u32, u64, usize)]) -> Vec<JobId> {
    let most = plan.iter().map(|p| p.3).max().unwrap_or(0);
    let mut jobs = Vec::new();
    for i in 0..most {
        for (ep, _, _, count) in plan {
            if i < *count {
                jobs.push(NewJob::new(*ep, i.to_string().into_bytes()));
            }
        }
    }
    let mut ids = Vec::new();
    for chunk in jobs.chunks(2_000) {
        ids.extend(queue.enqueue_many(chunk).unwrap());
    }
    ids
}

/// Ids of `ids` without a terminal log row.
pub fn unfinished(client: &mut Client, ids: &[JobId]) -> Vec<JobId> {
    client
        .query(
            &format!(
                "SELECT i.id FROM unnest($1::bigint[]) AS i(id) WHERE NOT EXISTS \
                 (SELECT 1 FROM pgqueuer_log l WHERE l.job_id = i.id AND l.status IN {TERMINAL}) \
                 ORDER BY 1"
            ),
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Waits until every id has a terminal log row and the queue table is empty; returns
/// the ids still unfinished when `limit` passed (the lost ones).
pub fn wait_all_done(client: &mut Client, ids: &[JobId], limit: Duration) -> Vec<JobId> {
    let started = Instant::now();
    loop {
        let left = unfinished(client, ids);
        let rows = scalar::<i64>(client, "SELECT count(*) FROM pgqueuer");
        if left.is_empty() && rows == 0 {
            return left;
        }
        if started.elapsed() > limit {
            let picked: Vec<String> = client
                .query(
                    "SELECT id::text || ' ' || status::text || ' ' || coalesce(queue_manager_id::text, '-') \
                     || ' hb ' || (now() - heartbeat)::text FROM pgqueuer ORDER BY id LIMIT 20",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            eprintln!(
                "after {limit:?}: {} of {} jobs unfinished, {rows} rows in the queue table: {picked:?}",
                left.len(),
                ids.len()
            );
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Statuses of the terminal log rows of `ids`: status -> count.
pub fn outcomes(client: &mut Client, ids: &[JobId]) -> BTreeMap<String, i64> {
    client
        .query(
            &format!(
                "SELECT status::text, count(*) FROM pgqueuer_log \
                 WHERE job_id = ANY($1::bigint[]) AND status IN {TERMINAL} GROUP BY 1"
            ),
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// How many of `outcomes` were successful.
pub fn successful(outcomes: &BTreeMap<String, i64>) -> usize {
    usize::try_from(outcomes.get("successful").copied().unwrap_or(0)).unwrap()
}

/// Every job recorded (`pgqueuer_example_runs`) more than once, a line per run with its
/// process, start and end, and the job's log rows: what a "ran twice" failure needs to
/// tell a re-pick (two processes, or one process twice) from a record written twice (the
/// same process and start).
pub fn runs_twice(client: &mut Client) -> String {
    let rows = client
        .query(
            "SELECT r.job_id, r.pid, r.started::text, r.finished::text, \
                    coalesce((SELECT string_agg(l.status::text || ' ' || l.created::text, ', ' \
                                                ORDER BY l.created) \
                              FROM pgqueuer_log l WHERE l.job_id = r.job_id), '') \
             FROM pgqueuer_example_runs r \
             WHERE r.job_id IN (SELECT job_id FROM pgqueuer_example_runs GROUP BY job_id \
                                HAVING count(*) > 1) \
             ORDER BY r.job_id, r.started LIMIT 60",
            &[],
        )
        .unwrap();
    rows.iter()
        .map(|r| {
            format!(
                "job {} pid {} ran {} to {}; log: {}\n",
                r.get::<_, i64>(0),
                r.get::<_, i32>(1),
                r.get::<_, String>(2),
                r.get::<_, String>(3),
                r.get::<_, String>(4)
            )
        })
        .collect()
}

/// The most recorded runs (`pgqueuer_example_runs`) of each entrypoint that overlapped
/// in time. A run ending exactly when another starts does not overlap it. A run is
/// (job, process, start): should a record be written twice (its first commit's answer
/// lost with a terminated connection), it still counts once.
pub fn max_overlap(client: &mut Client) -> BTreeMap<String, i64> {
    client
        .query(
            "WITH runs AS (SELECT entrypoint, started, min(finished) AS finished \
                           FROM pgqueuer_example_runs GROUP BY job_id, entrypoint, pid, started), \
                  ev AS (SELECT entrypoint, started AS t, 1 AS d FROM runs \
                         UNION ALL SELECT entrypoint, finished, -1 FROM runs) \
             SELECT entrypoint, max(c)::bigint FROM ( \
                 SELECT entrypoint, sum(d) OVER (PARTITION BY entrypoint ORDER BY t, d \
                                                 ROWS UNBOUNDED PRECEDING) AS c FROM ev) x \
             GROUP BY entrypoint",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Asserts that no limited entrypoint of `limits` had more runs overlapping (`max`,
/// from [`max_overlap`]) than its limit.
#[track_caller]
pub fn assert_limits(max: &BTreeMap<String, i64>, limits: &[(&str, u32)]) {
    for (ep, limit) in limits {
        if *limit > 0 {
            let seen = max.get(*ep).copied().unwrap_or(0);
            assert!(
                seen <= i64::from(*limit),
                "{ep}: {seen} runs overlapped, limit {limit}"
            );
        }
    }
}

/// The limit audit over the last `window` agrees with the recorded runs: for each
/// limited entrypoint, the most jobs picked at once (from the log) is at most its limit
/// and at least the most handlers that overlapped (`max`, from [`max_overlap`]); a job
/// is picked a little before its handler starts and until its outcome is written, so
/// the two are equal whenever the handlers reached the limit.
#[track_caller]
pub fn assert_audit(
    client: &mut Client,
    window: Duration,
    max: &BTreeMap<String, i64>,
    limits: &[(&str, u32)],
) {
    let audit = pgqueuer::ops::limit_audit(
        client,
        &pgqueuer::Settings::default(),
        window,
        None,
        pgqueuer::ops::AUDIT_RESOLUTION,
    )
    .expect("the limit audit");
    eprintln!(
        "audit: {} log rows read, peaks {:?}",
        audit.rows_read,
        audit
            .entrypoints
            .iter()
            .map(|e| (e.entrypoint.as_str(), e.peak))
            .collect::<Vec<_>>()
    );
    for (ep, limit) in limits {
        if *limit == 0 {
            continue;
        }
        let picked = audit
            .entrypoints
            .iter()
            .find(|e| e.entrypoint == *ep)
            .map_or(0, |e| i64::try_from(e.peak).unwrap());
        let handlers = max.get(*ep).copied().unwrap_or(0);
        assert!(
            picked <= i64::from(*limit),
            "{ep}: the audit saw {picked} picked at once, limit {limit}"
        );
        assert!(
            handlers <= picked,
            "{ep}: {handlers} handlers overlapped but the audit saw only {picked} picked"
        );
    }
}

/// A producer thread enqueueing a few jobs every `every` until stopped, retrying each
/// batch through failures (the same `Queue` throughout: no restart).
pub struct Producer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Produced>,
}

#[derive(Default)]
pub struct Produced {
    pub ids: Vec<JobId>,
    /// Ids enqueued after the first failure had been overcome.
    pub ids_after_failure: usize,
    pub errors: usize,
    pub first_errors: Vec<String>,
}

impl Producer {
    pub fn start(dsn: &str, entrypoints: &[&'static str], every: Duration) -> Producer {
        let options = ConnectOptions {
            max_size: 2,
            min_idle: 0,
            connection_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let queue = Queue::new(pgqueuer::connect_with(dsn, &options).expect("producer pool"));
        let stop = Arc::new(AtomicBool::new(false));
        let entrypoints = entrypoints.to_vec();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Produced::default();
            let mut n = 0usize;
            while !flag.load(Ordering::SeqCst) {
                let batch: Vec<NewJob> = (0..6)
                    .map(|i| {
                        n += 1;
                        NewJob::new(entrypoints[i % entrypoints.len()], n.to_string())
                    })
                    .collect();
                let started = Instant::now();
                loop {
                    match queue.enqueue_many(&batch) {
                        Ok(ids) => {
                            if out.errors > 0 {
                                out.ids_after_failure += ids.len();
                            }
                            out.ids.extend(ids);
                            break;
                        }
                        Err(e) => {
                            out.errors += 1;
                            if out.first_errors.len() < 3 {
                                out.first_errors.push(e.to_string());
                            }
                            assert!(
                                started.elapsed() < Duration::from_secs(60),
                                "the producer could not enqueue for 60 s: {e}"
                            );
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
                std::thread::sleep(every);
            }
            out
        });
        Producer { stop, thread }
    }

    pub fn finish(self) -> Produced {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("producer thread")
    }
}
