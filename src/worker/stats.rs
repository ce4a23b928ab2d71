//! What a worker can say about itself. Every figure is recorded once, into a `Count`,
//! `Timing` or `Level` (see `figures`) that keeps the worker's own value (read by
//! [`StatsHandle::snapshot`], for programs without a metrics stack) and, with the
//! `metrics` feature, forwards it to a handle of the `metrics` facade (for theirs;
//! `docs/operating.md` has the table of names).
//!
//! The facade's handles are registered once, when the worker is built, with whatever
//! recorder is installed then (the global one, or a local one around `build()`): the
//! per-job cost is then a call through a handle, which is a no-op without a recorder,
//! instead of building a key with labels on every call.

use std::sync::Arc;
use std::time::Duration;

use super::entrypoint::Registry;
use super::fast_map::FastMap;
use super::figures::{Count, Level, Timing, TimingStats};
use super::limits::{LimitStats, LimitWatch, RateStats};
use super::liveness::{Liveness, WorkerHealth};
use crate::job::Status;

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Jobs whose handler returned `Ok`.
    pub succeeded: u64,
    /// Jobs that failed for good (`exception` or `failed`).
    pub failed: u64,
    /// Jobs put back in the queue to run again.
    pub retried: u64,
    /// Jobs cancelled while claimed or running.
    pub cancelled: u64,
    /// Jobs claimed and given back to the queue unstarted at shutdown.
    pub released: u64,
}

/// The metric names the `metrics` feature records (`docs/operating.md` has them in a table).
pub(crate) mod names {
    pub(crate) const CLAIMS: &str = "pgqueuer_claims_total";
    pub(crate) const RELAXED_CLAIMS: &str = "pgqueuer_relaxed_claims_total";
    pub(crate) const CLAIM_DURATION: &str = "pgqueuer_claim_duration_seconds";
    pub(crate) const JOBS_CLAIMED: &str = "pgqueuer_jobs_claimed_total";
    pub(crate) const JOBS_ENDED: &str = "pgqueuer_jobs_ended_total";
    pub(crate) const JOBS_RETRIED: &str = "pgqueuer_jobs_retried_total";
    pub(crate) const SLOT_RACES_LOST: &str = "pgqueuer_slot_races_lost_total";
    pub(crate) const DEADLOCKS_RETRIED: &str = "pgqueuer_deadlocks_retried_total";
    pub(crate) const HANDLER_DURATION: &str = "pgqueuer_handler_duration_seconds";
    pub(crate) const START_LATENCY: &str = "pgqueuer_start_latency_seconds";
    pub(crate) const JOBS_RUNNING: &str = "pgqueuer_jobs_running";
    pub(crate) const THREADS_IDLE: &str = "pgqueuer_threads_idle";
    pub(crate) const SLOTS_IN_USE: &str = "pgqueuer_slots_in_use";
    pub(crate) const RATE_STARTS: &str = "pgqueuer_rate_starts";
    pub(crate) const RATE_LIMIT: &str = "pgqueuer_rate_limit_starts";
    pub(crate) const JOBS_RELEASED: &str = "pgqueuer_jobs_released_total";
    pub(crate) const WRITE_FAILURES: &str = "pgqueuer_outcome_write_failures_total";
    pub(crate) const LOCK_WAITS: &str = "pgqueuer_outcome_lock_waits_total";
}

/// One entrypoint's figures.
struct PerEntrypoint {
    claimed: Count,
    successful: Count,
    exception: Count,
    failed: Count,
    canceled: Count,
    retried: Count,
    handler: Timing,
    start_latency: Timing,
    /// Entrypoints with a concurrency limit in force only (made when one first is).
    slots_in_use: std::sync::OnceLock<Level>,
}

impl PerEntrypoint {
    fn new(entrypoint: &str, limited: bool) -> PerEntrypoint {
        let e = [("entrypoint", entrypoint)];
        let ended = |status: Status| {
            Count::new(
                names::JOBS_ENDED,
                &[("entrypoint", entrypoint), ("status", status.as_str())],
            )
        };
        PerEntrypoint {
            claimed: Count::new(names::JOBS_CLAIMED, &e),
            successful: ended(Status::Successful),
            exception: ended(Status::Exception),
            failed: ended(Status::Failed),
            canceled: ended(Status::Canceled),
            retried: Count::new(names::JOBS_RETRIED, &e),
            handler: Timing::new(names::HANDLER_DURATION, &e),
            start_latency: Timing::new(names::START_LATENCY, &e),
            slots_in_use: {
                let level = std::sync::OnceLock::new();
                if limited {
                    let _ = level.set(Level::new(names::SLOTS_IN_USE, &e));
                }
                level
            },
        }
    }

    fn ended(&self, status: Status) -> &Count {
        match status {
            Status::Successful => &self.successful,
            Status::Canceled => &self.canceled,
            Status::Failed => &self.failed,
            _ => &self.exception,
        }
    }
}

/// The levels of one rate-limit window: its starts within the last window and its limit.
struct RateLevels {
    entrypoint: String,
    per: Duration,
    starts: Level,
    limit: Level,
}

impl RateLevels {
    fn new(entrypoint: &str, limit: crate::rate::RateLimit) -> RateLevels {
        let window = format!("{}", limit.per().as_secs_f64());
        let labels = [("entrypoint", entrypoint), ("window_seconds", &window)];
        let levels = RateLevels {
            entrypoint: entrypoint.to_owned(),
            per: limit.per(),
            starts: Level::new(names::RATE_STARTS, &labels),
            limit: Level::new(names::RATE_LIMIT, &labels),
        };
        levels.limit.set(u64::from(limit.starts()));
        levels
    }
}

/// How a claim that came back empty lost its race (for the counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// 23505 on the slot index: a concurrent claim took the same slot.
    SlotRace,
    /// 40P01: a deadlock victim, retried.
    Deadlock,
}

/// A worker's shared figures: written by its threads, read by [`StatsHandle`].
pub(crate) struct Stats {
    /// Per entrypoint, in registration order.
    entrypoints: Vec<(String, PerEntrypoint)>,
    index: FastMap<String, usize>,
    claims: Count,
    relaxed_claims: Count,
    claim_duration: Timing,
    races_lost: Count,
    deadlocks: Count,
    running: Level,
    idle_threads: Level,
    released: Count,
    /// Statements writing outcomes that failed (each attempt counts).
    write_failures: Count,
    /// The completer's pauses for rows another session keeps locked.
    lock_waits: Count,
    /// The last such failure, for [`WorkerStats::last_write_failure`].
    last_write_failure: std::sync::Mutex<Option<String>>,
    /// What [`StatsHandle::health`] reads: when each loop last made progress.
    pub(crate) liveness: Liveness,
    /// Per rate-limit window in force (entrypoint, window): the starts within the last
    /// window at the limit watch's last look, and the limit's starts. A window stored
    /// while the worker runs gets its levels when first seen.
    rates: std::sync::Mutex<Vec<RateLevels>>,
}

impl Stats {
    pub(crate) fn new(registry: &Registry) -> Stats {
        #[cfg(feature = "metrics")]
        describe();
        let limits = registry.limits();
        let entrypoints: Vec<(String, PerEntrypoint)> = registry
            .order
            .iter()
            .map(|name| {
                let limited = limits.iter().any(|(e, limit)| e == name && *limit > 0);
                (name.clone(), PerEntrypoint::new(name, limited))
            })
            .collect();
        let index = entrypoints
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
        Stats {
            entrypoints,
            index,
            claims: Count::new(names::CLAIMS, &[]),
            relaxed_claims: Count::new(names::RELAXED_CLAIMS, &[]),
            claim_duration: Timing::new(names::CLAIM_DURATION, &[]),
            races_lost: Count::new(names::SLOT_RACES_LOST, &[]),
            deadlocks: Count::new(names::DEADLOCKS_RETRIED, &[]),
            running: Level::new(names::JOBS_RUNNING, &[]),
            idle_threads: Level::new(names::THREADS_IDLE, &[]),
            released: Count::new(names::JOBS_RELEASED, &[]),
            write_failures: Count::new(names::WRITE_FAILURES, &[]),
            lock_waits: Count::new(names::LOCK_WAITS, &[]),
            last_write_failure: std::sync::Mutex::new(None),
            liveness: Liveness::new(),
            rates: std::sync::Mutex::new(
                registry
                    .order
                    .iter()
                    .flat_map(|name| {
                        registry.by_name[name]
                            .options
                            .rate_limits
                            .iter()
                            .map(|limit| RateLevels::new(name, *limit))
                    })
                    .collect(),
            ),
        }
    }

    /// `n` unstarted jobs went back to the queue at shutdown.
    pub(crate) fn released(&self, n: usize) {
        self.released.add(n as u64);
    }

    /// A statement writing outcomes failed with `error`.
    pub(crate) fn write_failed(&self, error: &str) {
        self.write_failures.add(1);
        self.liveness.write_failed();
        *crate::lock::lock(&self.last_write_failure) = Some(error.to_owned());
    }

    /// The completer paused before its next round: rows it was ending were locked by
    /// another session.
    pub(crate) fn waited_for_locked_rows(&self) {
        self.lock_waits.add(1);
    }

    fn of(&self, entrypoint: &str) -> Option<&PerEntrypoint> {
        self.index.get(entrypoint).map(|&i| &self.entrypoints[i].1)
    }

    /// A claim statement ran for `took` and took these jobs (possibly none).
    pub(crate) fn claimed<'a>(
        &self,
        took: Duration,
        entrypoints: impl Iterator<Item = &'a str>,
        lost: Option<Lost>,
        relaxed: bool,
    ) {
        self.claims.add(1);
        if relaxed {
            self.relaxed_claims.add(1);
        }
        self.claim_duration.record(took);
        for entrypoint in entrypoints {
            if let Some(e) = self.of(entrypoint) {
                e.claimed.add(1);
            }
        }
        match lost {
            Some(Lost::SlotRace) => self.races_lost.add(1),
            Some(Lost::Deadlock) => self.deadlocks.add(1),
            None => {}
        }
    }

    /// The figures of the entrypoint registered `index`th (see `Registry`).
    fn at(&self, index: usize) -> Option<&PerEntrypoint> {
        self.entrypoints.get(index).map(|(_, e)| e)
    }

    /// A handler of the `index`th entrypoint started `waited` after its job became due.
    pub(crate) fn started(&self, index: usize, waited: Duration) {
        if let Some(e) = self.at(index) {
            e.start_latency.record(waited);
        }
    }

    /// A handler returned after `took`.
    pub(crate) fn ran(&self, index: usize, took: Duration) {
        if let Some(e) = self.at(index) {
            e.handler.record(took);
        }
    }

    /// A job ended with `status` (its outcome goes to the completer).
    pub(crate) fn ended(&self, index: usize, status: Status) {
        if let Some(e) = self.at(index) {
            e.ended(status).add(1);
        }
    }

    /// A job was put back in the queue to run again.
    pub(crate) fn retried(&self, index: usize) {
        if let Some(e) = self.at(index) {
            e.retried.add(1);
        }
    }

    /// How many jobs the worker owns and how many threads are idle, now.
    pub(crate) fn load(&self, running: usize, idle: usize) {
        self.running.set(running as u64);
        self.idle_threads.set(idle as u64);
    }

    /// The limit watch has looked at the slots: publish those held per limited
    /// entrypoint.
    pub(crate) fn slots_seen(&self, limits: &LimitWatch) {
        let mut rates = crate::lock::lock(&self.rates);
        for r in limits.rate_stats() {
            let at = rates
                .iter()
                .position(|l| l.entrypoint == r.entrypoint && l.per == r.limit.per());
            let levels = match at {
                Some(i) => &rates[i],
                None => {
                    rates.push(RateLevels::new(&r.entrypoint, r.limit));
                    &rates[rates.len() - 1]
                }
            };
            levels.starts.set(r.starts_in_window);
            levels.limit.set(u64::from(r.limit.starts()));
        }
        drop(rates);
        for l in limits.stats() {
            if let Some(e) = self.of(&l.entrypoint) {
                e.slots_in_use
                    .get_or_init(|| {
                        Level::new(names::SLOTS_IN_USE, &[("entrypoint", &l.entrypoint)])
                    })
                    .set(l.slots_in_use);
            }
        }
    }

    /// Job outcomes so far, summed over the entrypoints.
    pub(crate) fn summary(&self) -> RunSummary {
        let mut summary = RunSummary::default();
        for (_, e) in &self.entrypoints {
            summary.succeeded += e.successful.get();
            summary.failed += e.exception.get() + e.failed.get();
            summary.retried += e.retried.get();
            summary.cancelled += e.canceled.get();
        }
        summary.released = self.released.get();
        summary
    }
}

/// Gives every metric its unit and help text (Prometheus's `# HELP`).
#[cfg(feature = "metrics")]
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(names::CLAIMS, Unit::Count, "Claim statements run.");
    describe_counter!(
        names::RELAXED_CLAIMS,
        Unit::Count,
        "Claims of a worker with limits made while every limit was far from binding."
    );
    describe_histogram!(
        names::CLAIM_DURATION,
        Unit::Seconds,
        "Run time of each claim statement (with the outcomes folded into it)."
    );
    describe_counter!(names::JOBS_CLAIMED, Unit::Count, "Jobs claimed.");
    describe_gauge!(
        names::RATE_STARTS,
        Unit::Count,
        "Starts within the last window of a rate limit, by every worker declaring it (read \
         every 10 s)."
    );
    describe_gauge!(
        names::RATE_LIMIT,
        Unit::Count,
        "The starts a rate limit allows in its window."
    );
    describe_counter!(
        names::JOBS_ENDED,
        Unit::Count,
        "Jobs ended, by final status."
    );
    describe_counter!(
        names::JOBS_RETRIED,
        Unit::Count,
        "Jobs put back in the queue to run again."
    );
    describe_counter!(
        names::SLOT_RACES_LOST,
        Unit::Count,
        "Claims that lost a concurrency-slot race (23505) and came back empty."
    );
    describe_counter!(
        names::DEADLOCKS_RETRIED,
        Unit::Count,
        "Claims that were deadlock victims (40P01) and came back empty."
    );
    describe_histogram!(
        names::HANDLER_DURATION,
        Unit::Seconds,
        "Run time of each handler."
    );
    describe_histogram!(
        names::START_LATENCY,
        Unit::Seconds,
        "From when a job became due to its handler's start."
    );
    describe_gauge!(
        names::JOBS_RUNNING,
        Unit::Count,
        "Jobs this worker owns (claimed, not yet written)."
    );
    describe_gauge!(
        names::THREADS_IDLE,
        Unit::Count,
        "Executor threads idle and not promised a job."
    );
    describe_counter!(
        names::JOBS_RELEASED,
        Unit::Count,
        "Jobs claimed and given back to the queue unstarted at shutdown."
    );
    describe_counter!(
        names::WRITE_FAILURES,
        Unit::Count,
        "Statements writing job outcomes that failed (each attempt counts)."
    );
    describe_counter!(
        names::LOCK_WAITS,
        Unit::Count,
        "Pauses of the outcome writer for job rows another session keeps locked."
    );
    describe_gauge!(
        names::SLOTS_IN_USE,
        Unit::Count,
        "Concurrency slots in use by every worker, at the last look."
    );
}

/// One entrypoint's figures in a [`WorkerStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntrypointStats {
    /// The entrypoint.
    pub entrypoint: String,
    /// Jobs claimed (fresh picks and stale re-picks).
    pub claimed: u64,
    /// Jobs ended `successful`.
    pub successful: u64,
    /// Jobs ended `exception` (deleted after a failure).
    pub exception: u64,
    /// Jobs held `failed`.
    pub failed: u64,
    /// Jobs ended `canceled`.
    pub canceled: u64,
    /// Jobs put back in the queue to run again.
    pub retried: u64,
    /// Handler run times.
    pub handler: TimingStats,
    /// From when a job became due (enqueued, or its `execute_after`) to its handler's
    /// start, by the worker's clock against the database's timestamps.
    pub start_latency: TimingStats,
}

/// A snapshot of a worker's figures (see [`StatsHandle`]): the same figures the
/// `metrics` feature records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Job outcomes so far.
    pub jobs: RunSummary,
    /// Claim statements run.
    pub claims: u64,
    /// Of them, claims of a worker with concurrency limits made while every limit was far
    /// from binding: those may take jobs ahead of free threads and run on a second
    /// connection. The rest of a limited worker's claims take jobs for free threads only.
    pub relaxed_claims: u64,
    /// Their run times.
    pub claim_duration: TimingStats,
    /// Claims that lost a slot race (23505 on the slot index) and came back empty.
    pub slot_races_lost: u64,
    /// Claims that were deadlock victims and came back empty, to be retried.
    pub deadlocks_retried: u64,
    /// Jobs held (claimed and not yet written) at the last claim.
    pub running: u64,
    /// Executor threads idle and not promised a job at the last claim.
    pub idle_threads: u64,
    /// Statements writing job outcomes that failed (each attempt counts; the completer
    /// retries, or writes the others apart and records the one it cannot write as an
    /// exception). Growing while jobs finish means outcomes are not reaching the
    /// database.
    pub outcome_write_failures: u64,
    /// The error of the last such failure.
    pub last_write_failure: Option<String>,
    /// Times the completer paused (10 ms) before writing again because rows it was
    /// ending stayed locked by another session for more than 100 ms (a `SELECT ... FOR
    /// UPDATE` left open, say; a concurrent claim's brief lock is waited out within the
    /// write). Zero unless something holds job rows locked that long.
    pub outcome_lock_waits: u64,
    /// Per entrypoint, in registration order.
    pub entrypoints: Vec<EntrypointStats>,
    /// Each limited entrypoint: this worker's limit, the slots in use at the last look,
    /// and whether another worker evidently declares a larger limit.
    pub limits: Vec<LimitStats>,
    /// Each rate-limit window: the limit, the starts within the last window fleet-wide at
    /// the last look, and whether some worker claims without declaring it.
    pub rates: Vec<RateStats>,
}

impl WorkerStats {
    /// The figures of `entrypoint`, if the worker serves it.
    pub fn entrypoint(&self, entrypoint: &str) -> Option<&EntrypointStats> {
        self.entrypoints.iter().find(|e| e.entrypoint == entrypoint)
    }
}

/// Reads a worker's figures from any thread, while it runs and after. Cheap to clone.
#[derive(Clone)]
pub struct StatsHandle {
    pub(crate) stats: Arc<Stats>,
    pub(crate) limits: Arc<LimitWatch>,
}

impl StatsHandle {
    /// The figures now.
    pub fn snapshot(&self) -> WorkerStats {
        let s = &self.stats;
        WorkerStats {
            jobs: s.summary(),
            claims: s.claims.get(),
            relaxed_claims: s.relaxed_claims.get(),
            claim_duration: s.claim_duration.snapshot(),
            slot_races_lost: s.races_lost.get(),
            deadlocks_retried: s.deadlocks.get(),
            running: s.running.get(),
            idle_threads: s.idle_threads.get(),
            outcome_write_failures: s.write_failures.get(),
            outcome_lock_waits: s.lock_waits.get(),
            last_write_failure: crate::lock::lock(&s.last_write_failure).clone(),
            entrypoints: s
                .entrypoints
                .iter()
                .map(|(name, e)| EntrypointStats {
                    entrypoint: name.clone(),
                    claimed: e.claimed.get(),
                    successful: e.successful.get(),
                    exception: e.exception.get(),
                    failed: e.failed.get(),
                    canceled: e.canceled.get(),
                    retried: e.retried.get(),
                    handler: e.handler.snapshot(),
                    start_latency: e.start_latency.snapshot(),
                })
                .collect(),
            limits: self.limits.stats(),
            rates: self.limits.rate_stats(),
        }
    }
}

impl StatsHandle {
    /// Whether the worker's own loops make progress (see [`WorkerHealth`]): for a
    /// process's liveness probe.
    pub fn health(&self) -> WorkerHealth {
        let s = &self.stats;
        let busy = s.idle_threads.get() == 0 && s.running.get() > 0;
        s.liveness.health(busy, || {
            crate::lock::lock(&s.last_write_failure)
                .clone()
                .unwrap_or_default()
        })
    }
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StatsHandle")
            .field(&self.snapshot())
            .finish()
    }
}
