//! Whether a worker's own loops make progress: each loop stamps its turns here, and
//! `StatsHandle::health` reads the stamps against their deadlines.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When each of the worker's loops last made progress, in microseconds since the worker
/// was built (0: never), for `StatsHandle::health`: the claim loop, the completer (and
/// since when its writes fail, 0 while they succeed), the listener (and whether it is
/// connected). Each loop writes its own; the health check reads them.
pub(crate) struct Liveness {
    origin: Instant,
    claim_loop: AtomicU64,
    writes_failing_since: AtomicU64,
    listener: AtomicU64,
    listening: AtomicBool,
    /// Whether the worker LISTENs at all (it polls through a transaction pooler).
    listens: AtomicBool,
    running: AtomicBool,
    /// The claim loop's longest honest wait (its `dequeue_timeout`), in microseconds.
    claim_wait: AtomicU64,
}

impl Liveness {
    pub(crate) fn new() -> Liveness {
        Liveness {
            origin: Instant::now(),
            claim_loop: AtomicU64::new(0),
            writes_failing_since: AtomicU64::new(0),
            listener: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            listens: AtomicBool::new(true),
            running: AtomicBool::new(false),
            claim_wait: AtomicU64::new(30_000_000),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn age(&self, at: &AtomicU64) -> Option<Duration> {
        match at.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Duration::from_micros(self.now().saturating_sub(t))),
        }
    }

    /// The worker started running (`run`), waiting up to `claim_wait` between claims,
    /// listening or not.
    pub(crate) fn started(&self, claim_wait: Duration, listens: bool) {
        self.claim_wait.store(
            u64::try_from(claim_wait.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.listens.store(listens, Ordering::Relaxed);
        self.claim_loop.store(self.now(), Ordering::Relaxed);
        self.running.store(true, Ordering::Relaxed);
    }

    pub(crate) fn stopped(&self) {
        self.running.store(false, Ordering::Relaxed);
    }

    /// The claim loop went round (a claim, or a wait that ended).
    pub(crate) fn claim_loop_ran(&self) {
        self.claim_loop.store(self.now(), Ordering::Relaxed);
    }

    /// A write of outcomes succeeded.
    pub(crate) fn write_succeeded(&self) {
        self.writes_failing_since.store(0, Ordering::Relaxed);
    }

    /// A write of outcomes failed (the first failure since a success is kept).
    pub(crate) fn write_failed(&self) {
        let now = self.now();
        let _ = self.writes_failing_since.compare_exchange(
            0,
            now,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// The listener went round its loop, connected or not.
    pub(crate) fn listener_ran(&self, connected: bool) {
        self.listener.store(self.now(), Ordering::Relaxed);
        self.listening.store(connected, Ordering::Relaxed);
    }
}

/// How long the completer's writes may fail before the worker calls itself unhealthy.
const UNWRITTEN_DEADLINE: Duration = Duration::from_secs(5);
/// How long the listener may go without a turn of its loop, or disconnected.
const LISTENER_DEADLINE: Duration = Duration::from_secs(30);

/// Whether a worker's own loops make progress (`StatsHandle::health`): the claim loop
/// went round within twice its `dequeue_timeout` (or every thread is busy), the
/// completer's writes have not failed for 5 s on end, and the listener is connected and
/// went round within 30 s. What a process serves from its
/// liveness probe; the database's view of the whole fleet is [`crate::ops::health`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerHealth {
    /// True when every loop makes progress (and the worker runs).
    pub healthy: bool,
    /// What is wrong, in words; empty when healthy.
    pub problems: Vec<String>,
}

impl Liveness {
    /// The verdict: `busy` when every thread runs a job (the claim loop then waits
    /// rightly), `last_failure` the completer's last write error.
    pub(crate) fn health(&self, busy: bool, last_failure: impl FnOnce() -> String) -> WorkerHealth {
        let mut problems = Vec::new();
        if !self.running.load(Ordering::Relaxed) {
            problems.push("the worker is not running".to_owned());
        } else {
            let wait = Duration::from_micros(self.claim_wait.load(Ordering::Relaxed));
            if let Some(age) = self.age(&self.claim_loop)
                && age > (wait * 2).max(Duration::from_secs(10))
                && !busy
            {
                problems.push(format!(
                    "the claim loop has not run for {age:?}, with threads idle"
                ));
            }
            if let Some(age) = self.age(&self.writes_failing_since)
                && age > UNWRITTEN_DEADLINE
            {
                problems.push(format!(
                    "outcomes have not been written for {age:?}: {}",
                    last_failure()
                ));
            }
            if self.listens.load(Ordering::Relaxed) {
                match self.age(&self.listener) {
                    Some(age) if age > LISTENER_DEADLINE => {
                        problems.push(format!("the listener has not run for {age:?}"));
                    }
                    Some(_) if !self.listening.load(Ordering::Relaxed) => {
                        problems.push("the listener is not connected".to_owned());
                    }
                    _ => {}
                }
            }
        }
        WorkerHealth {
            healthy: problems.is_empty(),
            problems,
        }
    }
}
