//! What a worker can say about itself while it runs, for programs without a metrics
//! stack: [`StatsHandle::snapshot`] returns a [`WorkerStats`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::RunSummary;
use super::limits::{LimitStats, LimitWatch};

/// A worker's shared figures: written by its threads, read by [`StatsHandle`].
pub(crate) struct Stats {
    pub(crate) counters: Counters,
    pub(crate) limits: LimitWatch,
}

/// Counters of job outcomes, updated by executor threads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) succeeded: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) cancelled: AtomicU64,
}

impl Counters {
    pub(crate) fn summary(&self) -> RunSummary {
        RunSummary {
            succeeded: self.succeeded.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of a worker's figures (see [`StatsHandle`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Job outcomes so far.
    pub jobs: RunSummary,
    /// Each limited entrypoint: this worker's limit, the slots in use at the last look,
    /// and whether another worker evidently declares a larger limit.
    pub limits: Vec<LimitStats>,
}

/// Reads a worker's figures from any thread, while it runs and after. Cheap to clone.
#[derive(Clone)]
pub struct StatsHandle(pub(crate) Arc<Stats>);

impl StatsHandle {
    /// The figures now.
    pub fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            jobs: self.0.counters.summary(),
            limits: self.0.limits.stats(),
        }
    }
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StatsHandle")
            .field(&self.snapshot())
            .finish()
    }
}
