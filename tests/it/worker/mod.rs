//! The worker runtime: exactly-once under limits, LISTEN-driven latency, heartbeats and
//! stale re-picks, cancellation, retries, hold, panics, reconnects and shutdown. One file
//! per concern; the helpers they share are here.

use std::time::{Duration, Instant};

use pgqueuer::Worker;

mod ahead;
mod failures;
mod full_slots;
mod hardening;
mod limits;
mod recovery;
mod startup;
mod stopping;
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

    /// Waits for `n` gated jobs to start.
    #[track_caller]
    pub fn wait_started(&self, n: usize) -> Vec<i64> {
        (0..n)
            .map(|_| {
                self.started
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a gated job never started")
            })
            .collect()
    }
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
