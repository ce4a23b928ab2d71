//! Heartbeats: every half heartbeat timeout, one statement refreshes every job this
//! worker holds, so no other worker takes them as stale.

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::builder::WorkerConfig;
use super::state::{ConnSlot, Running};

/// Runs until every executor has exited (`alive` disconnects).
pub(crate) fn run(config: &WorkerConfig, running: &Running, alive: &Receiver<()>) {
    let interval = config.heartbeat_interval();
    // After a failed beat, try again soon rather than a whole interval later.
    let retry = interval.min(std::time::Duration::from_secs(1));
    let mut conn = ConnSlot::new(&config.pool);
    let mut wait = interval;
    while let Err(RecvTimeoutError::Timeout) = alive.recv_timeout(wait) {
        let ids = running.ids();
        if ids.is_empty() {
            continue;
        }
        wait = interval;
        match conn.run(|c| config.claimer.heartbeat(c, &ids)) {
            Ok(refreshed) => log::trace!(
                "heartbeat: {} of {} held jobs refreshed",
                refreshed.len(),
                ids.len()
            ),
            Err(e) => {
                log::warn!(
                    "pgqueuer heartbeat failed for {} jobs (retrying in {retry:?}): {e}",
                    ids.len()
                );
                conn.release();
                wait = retry;
            }
        }
    }
}
