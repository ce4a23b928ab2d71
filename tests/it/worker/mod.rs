//! The worker runtime: exactly-once under limits, LISTEN-driven latency, heartbeats and
//! stale re-picks, cancellation, retries, hold, panics, reconnects and shutdown. One file
//! per concern; the helpers they share are here.

use std::time::{Duration, Instant};

use pgqueuer::Worker;

mod ahead;
mod failures;
mod full_slots;
mod limits;
mod recovery;
mod startup;
mod stopping;
mod wakeups;

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
