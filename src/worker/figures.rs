//! The three kinds of figure a worker records, each keeping the worker's own value (for
//! `StatsHandle::snapshot`) and, with the `metrics` feature, forwarding it to a
//! handle of the `metrics` facade registered once, when the worker is built.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Labels of one figure: `entrypoint`, and `status` for ended jobs.
pub(crate) type Labels<'a> = &'a [(&'static str, &'a str)];

#[cfg(feature = "metrics")]
fn facade_labels(labels: Labels<'_>) -> Vec<metrics::Label> {
    labels
        .iter()
        .map(|&(k, v)| metrics::Label::new(k, v.to_owned()))
        .collect()
}

/// A counter.
pub(crate) struct Count {
    value: AtomicU64,
    #[cfg(feature = "metrics")]
    handle: metrics::Counter,
}

impl Count {
    pub(crate) fn new(name: &'static str, labels: Labels<'_>) -> Count {
        #[cfg(not(feature = "metrics"))]
        let _ = (name, labels);
        Count {
            value: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            handle: metrics::counter!(name, facade_labels(labels)),
        }
    }

    pub(crate) fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.handle.increment(n);
    }

    pub(crate) fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A histogram of durations: the worker keeps its count, sum and maximum.
pub(crate) struct Timing {
    count: AtomicU64,
    sum_us: AtomicU64,
    max_us: AtomicU64,
    #[cfg(feature = "metrics")]
    handle: metrics::Histogram,
}

impl Timing {
    pub(crate) fn new(name: &'static str, labels: Labels<'_>) -> Timing {
        #[cfg(not(feature = "metrics"))]
        let _ = (name, labels);
        Timing {
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            handle: metrics::histogram!(name, facade_labels(labels)),
        }
    }

    pub(crate) fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.handle.record(d.as_secs_f64());
    }

    pub(crate) fn snapshot(&self) -> TimingStats {
        TimingStats {
            count: self.count.load(Ordering::Relaxed),
            sum: Duration::from_micros(self.sum_us.load(Ordering::Relaxed)),
            max: Duration::from_micros(self.max_us.load(Ordering::Relaxed)),
        }
    }
}

/// A gauge of a count of things, now.
pub(crate) struct Level {
    value: AtomicU64,
    #[cfg(feature = "metrics")]
    handle: metrics::Gauge,
}

impl Level {
    pub(crate) fn new(name: &'static str, labels: Labels<'_>) -> Level {
        #[cfg(not(feature = "metrics"))]
        let _ = (name, labels);
        Level {
            value: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            handle: metrics::gauge!(name, facade_labels(labels)),
        }
    }

    pub(crate) fn set(&self, n: u64) {
        self.value.store(n, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        {
            #[allow(clippy::cast_precision_loss)] // counts of jobs and threads
            self.handle.set(n as f64);
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A histogram's figures in a `WorkerStats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimingStats {
    /// How many were recorded.
    pub count: u64,
    /// Their sum (to the microsecond).
    pub sum: Duration,
    /// The longest.
    pub max: Duration,
}
