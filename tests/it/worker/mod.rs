//! The worker runtime: LISTEN-driven latency, heartbeats and stale re-picks, fencing
//! tokens, per-job timeouts, cancellation, retries, hold, panics, reconnects and shutdown
//! (its limits are tested in `limits`). One file
//! per concern; the helpers they share are here.

use std::time::{Duration, Instant};

use pgqueuer::Worker;

mod ahead;
mod failures;
mod fencing;
mod hardening;
mod horizon;
mod recovery;
mod startup;
mod stopping;
mod timeouts;
mod wakeups;

/// Counts handlers running at once, and the most that ever did.
#[derive(Clone, Default)]
pub struct Overlap {
    now: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    peak: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Overlap {
    /// Runs `f` counted as one of the handlers running now.
    pub fn during<T>(&self, f: impl FnOnce() -> T) -> T {
        use std::sync::atomic::Ordering::SeqCst;
        self.peak
            .fetch_max(self.now.fetch_add(1, SeqCst) + 1, SeqCst);
        let out = f();
        self.now.fetch_sub(1, SeqCst);
        out
    }

    /// How many handlers run now (in a handler: counting itself).
    pub fn now(&self) -> usize {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The most handlers that ran at once.
    pub fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Jobs that wait at a gate: each announces its id as it starts and then waits for one
/// message on `open` (30 s at most).
pub struct Gate {
    pub open: crossbeam_channel::Sender<()>,
    pub started: crossbeam_channel::Receiver<i64>,
    open_rx: crossbeam_channel::Receiver<()>,
    started_tx: crossbeam_channel::Sender<i64>,
}

impl Gate {
    pub fn new() -> Gate {
        let (open, open_rx) = crossbeam_channel::unbounded();
        let (started_tx, started) = crossbeam_channel::unbounded();
        Gate {
            open,
            started,
            open_rx,
            started_tx,
        }
    }

    /// The handler of gated jobs.
    pub fn handler(
        &self,
    ) -> impl Fn(&pgqueuer::Job, &pgqueuer::Context<'_>) -> pgqueuer::HandlerResult + Send + Sync + 'static
    {
        let (open, started) = (self.open_rx.clone(), self.started_tx.clone());
        move |job, _ctx| {
            let _ = started.send(job.id);
            open.recv_timeout(Duration::from_secs(30))
                .map_err(|_| "the test never opened the gate")?;
            Ok(())
        }
    }

    /// Opens the gate for `n` jobs.
    pub fn let_through(&self, n: usize) {
        for _ in 0..n {
            self.open.send(()).unwrap();
        }
    }

    /// Waits for `n` gated jobs to start (30 s each at most: room for a busy machine).
    #[track_caller]
    pub fn wait_started(&self, n: usize) -> Vec<i64> {
        (0..n)
            .map(|_| {
                self.started
                    .recv_timeout(Duration::from_secs(30))
                    .expect("a gated job never started")
            })
            .collect()
    }
}

/// How often a scenario that depends on the worker claiming ahead is tried (see
/// [`claiming_ahead`]).
pub const AHEAD_ATTEMPTS: usize = 5;

/// Runs `attempt` until it returns `Some`, at most [`AHEAD_ATTEMPTS`] times. For
/// scenarios that need the worker to claim ahead: it does so only while the running
/// average of its handler run times is under 1 ms, and on a busy machine one warm-up job
/// preempted mid-run lifts the average over that for the next several jobs. An attempt
/// that sees no claim ahead gives up (cleaning up after itself) and a fresh worker is
/// tried; a worker that never claims ahead fails the test.
#[track_caller]
pub fn claiming_ahead<T>(mut attempt: impl FnMut() -> Option<T>) -> T {
    for n in 1..=AHEAD_ATTEMPTS {
        if let Some(t) = attempt() {
            return t;
        }
        eprintln!("attempt {n}: no claim ahead (a warm-up job was slow?); trying again");
    }
    panic!("the worker claimed nothing ahead in {AHEAD_ATTEMPTS} attempts");
}

/// A running worker with a 60 s dequeue timeout whose `entrypoint` handler sends the
/// instant it starts each job.
pub fn start_timing_worker(
    pool: &pgqueuer::Pool,
    threads: usize,
    entrypoint: &str,
) -> (
    pgqueuer::RunningWorker,
    crossbeam_channel::Receiver<Instant>,
) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let worker = Worker::builder(pool.clone())
        .threads(threads)
        .dequeue_timeout(Duration::from_secs(60))
        .entrypoint(entrypoint, move |_job, _ctx| {
            tx.send(Instant::now()).unwrap();
            Ok(())
        })
        .build()
        .unwrap()
        .start()
        .unwrap();
    (worker, rx)
}
