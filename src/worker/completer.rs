//! Outcomes of finished handlers, and the thread that writes them.
//!
//! A finished job's outcome waits in [`Unwritten`]. When seats are scarce (some
//! concurrency limit is no larger than the worker's thread count) and may be reused
//! (`WorkerBuilder::reuse_seats`), the next claim takes the ends (not the retries) along
//! and writes them in its own statement and commit
//! ([`crate::Claimer::complete_and_claim`]): their seats are free to that very claim, so
//! a seat turns over with one commit instead of two. Otherwise ends are left to the
//! completer, which writes them on its own connection while claims run on theirs (taken
//! along, they would lengthen every claim, and claims are what a busy worker waits on).
//! The completer writes whatever is waiting [`LINGER`] after the first of it arrived, in
//! one statement per batch.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::executor::{Wake, drop_if_broken};
use super::{Run, lock};
use crate::claim::Outcome;
use crate::connect::PooledConn;
use crate::job::JobId;

/// A job to put back in the queue after `delay`, logging `queued` with the reason.
pub(crate) struct Retry {
    pub(crate) id: JobId,
    pub(crate) delay: Duration,
    pub(crate) traceback: serde_json::Value,
}

/// Outcomes not yet written.
#[derive(Default)]
pub(crate) struct Unwritten {
    /// Deletes (or holds, for `Failed`) with their log rows.
    pub(crate) ends: Vec<Outcome>,
    /// Written by the completer only, without waiting.
    pub(crate) retries: Vec<Retry>,
}

/// Most outcomes written by one statement.
const MAX_BATCH: usize = 500;

/// How long the completer waits for more outcomes after the first before writing: one
/// statement and one commit for all that finish meanwhile. Each completion takes
/// PostgreSQL's NOTIFY lock through its commit, the same lock every enqueue needs, so
/// fewer and larger completions leave producers more room.
const LINGER: Duration = Duration::from_millis(5);

/// [`LINGER`] when seats are scarce and not reused (`WorkerBuilder::reuse_seats`): a
/// finished job holds its seat until its row is written.
const SCARCE_LINGER: Duration = Duration::from_millis(1);

impl Run {
    /// Queues an end for the next claim (or the completer), and tells the completer.
    pub(crate) fn finished(&self, outcome: Outcome, signal: &Sender<()>) {
        lock(&self.unwritten).ends.push(outcome);
        let _ = signal.try_send(());
    }

    /// Queues a retry for the completer, which writes it at once.
    pub(crate) fn retry_later(&self, retry: Retry, signal: &Sender<()>) {
        lock(&self.unwritten).retries.push(retry);
        let _ = signal.try_send(());
    }

    /// Takes up to a batch of unwritten ends, for a claim to take along.
    pub(crate) fn take_ends(&self) -> Vec<Outcome> {
        let mut unwritten = lock(&self.unwritten);
        let n = unwritten.ends.len().min(MAX_BATCH);
        unwritten.ends.drain(..n).collect()
    }

    /// After a claim that took `ends` along: the ids in `written` are no longer held;
    /// the others go back for the completer, which retries rows that were locked.
    pub(crate) fn ends_written(&self, ends: Vec<Outcome>, written: &[JobId], signal: &Sender<()>) {
        let (done, rest): (Vec<Outcome>, Vec<Outcome>) =
            ends.into_iter().partition(|o| written.contains(&o.id));
        if !done.is_empty() {
            let mut running = self.running();
            for o in &done {
                running.remove(&o.id);
            }
        }
        if !rest.is_empty() {
            lock(&self.unwritten).ends.extend(rest);
            let _ = signal.try_send(());
        }
    }

    /// True when ends are waiting for a claim to take them along.
    pub(crate) fn ends_waiting(&self) -> bool {
        !lock(&self.unwritten).ends.is_empty()
    }
}

/// Runs until every executor has exited (the signal disconnects) and everything left is
/// written.
///
/// Each signal is answered after [`LINGER`] ([`SCARCE_LINGER`] when seats are scarce and
/// not reused; at once when a retry waits): whatever no claim took meanwhile is written in one
/// statement. When seats are scarce a claimer is also woken after each write, as
/// seats are free now, before the NOTIFY of the deletion comes round.
pub(crate) fn run(run: &Run, signal: &Receiver<()>, wake: &Sender<Wake>) {
    let mut conn: Option<PooledConn> = None;
    let scarce = run.inner.seats_scarce;
    // When claims take ends along, what is left here is what no claim took: no hurry.
    let linger = if scarce && !run.inner.ends_ride_claims {
        SCARCE_LINGER
    } else {
        LINGER
    };
    loop {
        let open = signal.recv().is_ok();
        if open && lock(&run.unwritten).retries.is_empty() {
            // One sleep for the whole wait: waking per finished job would cost more than
            // the write. A retry is written at once (its delay runs from its write).
            std::thread::sleep(linger);
        }
        // Everything waiting now, and nothing that comes during the writes: that is the
        // next signal's, after its own wait.
        let (ends, retries) = {
            let mut unwritten = lock(&run.unwritten);
            (
                std::mem::take(&mut unwritten.ends),
                std::mem::take(&mut unwritten.retries),
            )
        };
        for chunk in ends.chunks(MAX_BATCH) {
            write(run, &mut conn, chunk, &[]);
        }
        if !retries.is_empty() {
            write(run, &mut conn, &[], &retries);
        }
        if scarce && !(ends.is_empty() && retries.is_empty()) {
            let _ = wake.try_send(Wake::Claim);
        }
        if !open {
            return;
        }
    }
}

/// Writes ends in one statement, then each retry, retrying with backoff while the
/// database is unreachable. Outcomes are never dropped while the worker runs; after
/// shutdown it gives up after a bounded time (the rows then go stale and are re-picked:
/// at-least-once).
fn write(run: &Run, conn: &mut Option<PooledConn>, ends: &[Outcome], retries: &[Retry]) {
    if !ends.is_empty() {
        let written = persist(run, conn, "outcomes", |claimer, c| {
            claimer.complete(c, ends)
        });
        if let Some(written) = written {
            log::trace!("completed {} jobs in one statement", ends.len());
            if written.len() < ends.len() {
                log::info!(
                    "{} finished jobs were no longer held by this worker (cancelled or re-picked)",
                    ends.len() - written.len()
                );
            }
        }
    }
    for r in retries {
        let owned = persist(run, conn, "a retry", |claimer, c| {
            claimer.retry(c, r.id, r.delay, &r.traceback)
        });
        if owned == Some(false) {
            log::warn!("job {} was no longer ours when its retry was written", r.id);
        }
    }
    let mut running = run.running();
    for id in ends
        .iter()
        .map(|o| o.id)
        .chain(retries.iter().map(|r| r.id))
    {
        running.remove(&id);
    }
}

/// Runs `op` on the completer's connection until it succeeds, or until shutdown plus a
/// bounded time (`None`).
fn persist<T>(
    run: &Run,
    conn: &mut Option<PooledConn>,
    what: &str,
    mut op: impl FnMut(&crate::Claimer, &mut PooledConn) -> crate::Result<T>,
) -> Option<T> {
    let mut backoff = Duration::from_millis(20);
    let mut waited = Duration::ZERO;
    loop {
        let result = match conn {
            Some(c) => op(&run.inner.claimer, c),
            None => match run.checkout() {
                Ok(c) => {
                    *conn = Some(c);
                    continue;
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(value) => return Some(value),
            Err(e) => {
                log::warn!("pgqueuer could not write {what} (retrying in {backoff:?}): {e}");
                drop_if_broken(conn, &e);
                if run.stopping() && waited > Duration::from_secs(30) {
                    log::error!("giving up on {what} after shutdown; the jobs will be re-picked");
                    return None;
                }
                std::thread::sleep(backoff);
                waited += backoff;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
