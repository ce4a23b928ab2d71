//! Keeping handler starts where the rate limit's units say they are.
//!
//! A claim stamps a unit per job with the database's clock while the claim runs; the job's
//! handler starts after the commit and the hand-over to a thread. The window between two
//! uses of a unit is its length plus a guard (see `crate::rate`), so a handler that
//! starts within the guard of its claim keeps the limit exactly, whatever the clocks of
//! the machines say: the time from sending the claim to the start, measured here, is at
//! least the time from the stamp to the start.
//!
//! A handler that would start later (a busy machine, a long hand-over) first spends fresh
//! units of its own, stamped as it starts; the units its claim spent stay spent, so a
//! late start costs one unit more. Where none is free it waits for one, as a claim would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::claim::Claimer;
use crate::job::{Job, JobId};
use crate::lock::lock;
use crate::shutdown::ShutdownHandle;

use super::builder::WorkerConfig;

/// The shortest wait between two tries of a late start's units.
const RETRY_MIN: Duration = Duration::from_millis(1);

/// When each claimed job of a rate-limited entrypoint was claimed (the claim statement's
/// send), until its handler starts.
#[derive(Default)]
pub(crate) struct RateGate {
    /// Per job: when its claim was sent, and how late after that it may start.
    claimed: Mutex<HashMap<JobId, (Instant, Duration)>>,
    /// The claimer of the latest rate-limited claim (the limits in force then), for late
    /// starts' units.
    claimer: Mutex<Option<Arc<Claimer>>>,
}

impl RateGate {
    /// Records that `jobs` were claimed by a statement sent at `sent` (only those of
    /// rate-limited entrypoints are kept).
    pub(crate) fn claimed(&self, claimer: &Claimer, jobs: &[Job], sent: Instant) {
        let mut claimed = lock(&self.claimed);
        let mut any = false;
        for job in jobs {
            if let Some(allowance) = claimer.start_allowance(&job.entrypoint) {
                claimed.insert(job.id, (sent, allowance));
                any = true;
            }
        }
        if any {
            *lock(&self.claimer) = Some(Arc::new(claimer.clone()));
        }
    }

    /// Called as `job`'s handler is about to start: true when it may start now, after
    /// spending fresh units if its claim's are too old; false when shutdown (or the job's
    /// cancellation, `cancelled`) came first, the job not started.
    pub(crate) fn start(
        &self,
        config: &WorkerConfig,
        shutdown: &ShutdownHandle,
        job: &Job,
        cancelled: impl Fn() -> bool,
    ) -> bool {
        let Some((sent, allowance)) = lock(&self.claimed).remove(&job.id) else {
            return true;
        };
        if sent.elapsed() <= allowance {
            return true;
        }
        let Some(claimer) = lock(&self.claimer).clone() else {
            return true;
        };
        let mut backoff = Duration::from_millis(50);
        loop {
            if shutdown.is_shutdown() || cancelled() {
                return false;
            }
            log::debug!(
                "job {} ({}) starts more than {allowance:?} after its claim: spending fresh \
                 rate-limit units for it",
                job.id,
                job.entrypoint
            );
            let sent = Instant::now();
            let spent = config
                .pool
                .get()
                .map_err(crate::Error::from)
                .and_then(|mut c| claimer.spend_late_start(c.client(), &job.entrypoint));
            match spent {
                Ok(None) if sent.elapsed() <= allowance => return true,
                // Spent, but too long ago again: another try spends another unit.
                Ok(None) => {}
                Ok(Some(wait)) => shutdown.sleep(wait.max(RETRY_MIN)),
                Err(e) => {
                    log::warn!(
                        "pgqueuer could not spend rate-limit units for job {} ({}), retrying \
                         in {backoff:?}: {e}",
                        job.id,
                        job.entrypoint
                    );
                    shutdown.sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}
