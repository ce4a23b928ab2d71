//! Heartbeats: every half heartbeat timeout, one statement refreshes every job this
//! worker holds, so no other worker takes them as stale.

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::Run;
use crate::connect::PooledConn;
use crate::job::JobId;

/// Runs until every executor has exited (`alive` disconnects).
pub(crate) fn run(run: &Run, alive: &Receiver<()>) {
    let interval = run.inner.heartbeat_timeout / 2;
    // After a failed beat, try again soon rather than a whole interval later.
    let retry = interval.min(std::time::Duration::from_secs(1));
    let mut conn: Option<PooledConn> = None;
    let mut wait = interval;
    while let Err(RecvTimeoutError::Timeout) = alive.recv_timeout(wait) {
        let ids: Vec<JobId> = run.running().keys().copied().collect();
        if ids.is_empty() {
            continue;
        }
        wait = interval;
        let result = match conn.as_mut() {
            Some(c) => run.inner.claimer.heartbeat(c, &ids),
            None => match run.checkout() {
                Ok(mut c) => {
                    let beat = run.inner.claimer.heartbeat(&mut c, &ids);
                    conn = Some(c);
                    beat
                }
                Err(e) => Err(e),
            },
        };
        match result {
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
                conn.take();
                wait = retry;
            }
        }
    }
}
