//! Per-job timeouts ([`crate::Entrypoint::timeout`]): a thread that turns a
//! running job's [`Stop`] to "timed out" when its time is up, and warns about handlers
//! that go on long after.
//!
//! A blocking handler cannot be stopped from outside; the timeout is a request, seen
//! through `Context::is_cancelled`. Executors register each job with a timeout as it
//! starts; the watch sleeps until the earliest deadline. A job whose handler has
//! returned is skipped when its time comes ([`Stop::has_ended`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};

use super::owned::Stop;
use crate::job::JobId;

/// A handler still running at this many times its timeout is logged at `warn`.
const OVERRUN_WARNING: u32 = 3;

/// What an executor registers for a job with a timeout.
pub(crate) struct Armed {
    pub(crate) id: JobId,
    pub(crate) entrypoint: String,
    pub(crate) timeout: Duration,
    pub(crate) started: Instant,
    pub(crate) stop: Arc<Stop>,
}

/// Where executors register jobs, and the watch thread's receiving end.
pub(crate) struct Deadlines {
    tx: Sender<Armed>,
    rx: Receiver<Armed>,
}

impl Default for Deadlines {
    fn default() -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        Deadlines { tx, rx }
    }
}

/// One pending deadline: the first at the timeout, the second at the overrun warning.
struct Due {
    at: Instant,
    overrun: bool,
    armed: Arc<Armed>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

impl Deadlines {
    /// Registers a job that has just started.
    pub(crate) fn arm(&self, armed: Armed) {
        // Cannot fail: this struct holds a receiver.
        let _ = self.tx.send(armed);
    }

    /// The watch: runs until `alive` disconnects (every executor has exited).
    pub(crate) fn run(&self, alive: &Receiver<()>) {
        let mut heap: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
        loop {
            let wait = heap.peek().map_or(Duration::from_secs(3600), |Reverse(d)| {
                d.at.saturating_duration_since(Instant::now())
            });
            select! {
                recv(self.rx) -> armed => {
                    if let Ok(armed) = armed {
                        let at = armed.started + armed.timeout;
                        heap.push(Reverse(Due { at, overrun: false, armed: Arc::new(armed) }));
                    }
                }
                recv(alive) -> _ => return,
                default(wait) => {}
            }
            let now = Instant::now();
            while heap.peek().is_some_and(|Reverse(d)| d.at <= now) {
                let Some(Reverse(due)) = heap.pop() else {
                    break;
                };
                fire(&due, &mut heap);
            }
        }
    }
}

fn fire(due: &Due, heap: &mut BinaryHeap<Reverse<Due>>) {
    let armed = &due.armed;
    if armed.stop.has_ended() {
        return;
    }
    if due.overrun {
        super::warning::warn_always(format_args!(
            "job {} ({}) is still running {:?} after it started, {OVERRUN_WARNING} times its \
             timeout of {:?}: a handler cannot be stopped from outside, so its thread (and \
             its concurrency slot, if any) stay held until it returns; check \
             Context::is_cancelled() in long handlers",
            armed.id,
            armed.entrypoint,
            armed.started.elapsed(),
            armed.timeout
        ));
        return;
    }
    if armed.stop.time_out() {
        log::info!(
            "job {} ({}) passed its timeout of {:?}; asking its handler to stop",
            armed.id,
            armed.entrypoint,
            armed.timeout
        );
        heap.push(Reverse(Due {
            at: armed.started + armed.timeout * OVERRUN_WARNING,
            overrun: true,
            armed: armed.clone(),
        }));
    }
}
