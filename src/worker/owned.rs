//! The jobs a worker owns (claimed and not yet written), each with its [`Stop`].

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::job::{Job, JobId};
use crate::lock::lock;

use super::fast_map::FastMap;

/// Why an owned job's handler should stop, as it sees it through its `Context`.
///
/// The reasons are kept apart because they end a job differently: only a cancellation
/// (the job's row deleted by `cancel`, confirmed against the database) records
/// `canceled`; a timeout records a `TimeoutError`; after the shutdown deadline a
/// handler that returns gets the outcome it returned.
#[derive(Debug, Default)]
pub(crate) struct Stop(AtomicU8);

impl Stop {
    const CANCELLED: u8 = 1;
    const TIMED_OUT: u8 = 2;
    const ENDED: u8 = 4;
    const SHUTDOWN: u8 = 8;

    /// The job was cancelled: its row is gone (a `cancellation_event` named it and the
    /// database confirmed it, or a heartbeat found the row no longer ours).
    pub(crate) fn cancel(&self) {
        self.0.fetch_or(Self::CANCELLED, Ordering::SeqCst);
    }

    /// The job's row is this worker's again (re-picked by its own claim after another
    /// worker had taken it): the cancellation that taking set no longer holds.
    pub(crate) fn reinstate(&self) {
        self.0.fetch_and(!Self::CANCELLED, Ordering::SeqCst);
    }

    /// The worker's shutdown deadline passed while the handler ran.
    pub(crate) fn shut_down(&self) {
        self.0.fetch_or(Self::SHUTDOWN, Ordering::SeqCst);
    }

    /// The job's timeout passed; false (and nothing set) once its handler has returned.
    pub(crate) fn time_out(&self) -> bool {
        let before = self.0.fetch_or(Self::TIMED_OUT, Ordering::SeqCst);
        before & Self::ENDED == 0
    }

    /// The handler returned.
    pub(crate) fn end(&self) {
        self.0.fetch_or(Self::ENDED, Ordering::SeqCst);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst) & Self::CANCELLED != 0
    }

    pub(crate) fn is_timed_out(&self) -> bool {
        self.0.load(Ordering::SeqCst) & Self::TIMED_OUT != 0
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.0.load(Ordering::SeqCst) & Self::SHUTDOWN != 0
    }

    /// Cancelled, timed out or shut down: the handler should return.
    pub(crate) fn should_stop(&self) -> bool {
        self.0.load(Ordering::SeqCst) & (Self::CANCELLED | Self::TIMED_OUT | Self::SHUTDOWN) != 0
    }

    pub(crate) fn has_ended(&self) -> bool {
        self.0.load(Ordering::SeqCst) & Self::ENDED != 0
    }
}

/// The jobs this worker owns (claimed and not yet written), each with its [`Stop`].
/// The dispatcher adds claimed jobs; executors read their job's flag; the completer
/// removes a job once its outcome is written (or the claim that folded it in does); the
/// heartbeat thread refreshes every id; the listener, the shutdown deadline and the
/// timeout watch stop handlers through it.
#[derive(Default)]
pub(crate) struct Owned(Mutex<FastMap<JobId, Entry>>);

/// An owned job: its stop flag, its entrypoint's position in registration order, and
/// how many times this worker's claims have taken it since it was first owned.
struct Entry {
    stop: Arc<Stop>,
    entrypoint: usize,
    claims: u32,
}

/// An owned job as the heartbeat saw it before its statement: the id, and which of this
/// worker's claims of it was the latest then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ownership {
    pub(crate) id: JobId,
    claim: u32,
}

impl Owned {
    fn map(&self) -> MutexGuard<'_, FastMap<JobId, Entry>> {
        lock(&self.0)
    }

    /// Owns `jobs`; `index` gives each one's entrypoint position. Returns the jobs that
    /// were not owned already: a job this worker still owns can come back from a claim
    /// as a stale re-pick (its heartbeat lagged past the timeout while its handler ran,
    /// and the claim statement re-picks stale rows of any worker, this one included, as
    /// PgQueuer's does). Its running handler keeps it: running it a second time beside
    /// the first would break the limits and the handler's own assumptions. The row is
    /// this worker's again, so a cancellation set when another worker had re-picked it
    /// in between (a heartbeat found the row not ours) is lifted: otherwise the job would
    /// be written `canceled`, its row deleted, although nobody cancelled it.
    pub(crate) fn add(&self, jobs: Vec<Job>, index: impl Fn(&str) -> usize) -> Vec<Job> {
        let mut map = self.map();
        let mut fresh = Vec::with_capacity(jobs.len());
        for job in jobs {
            match map.entry(job.id) {
                std::collections::hash_map::Entry::Occupied(mut owned) => {
                    let entry = owned.get_mut();
                    entry.claims = entry.claims.wrapping_add(1);
                    entry.stop.reinstate();
                    log::warn!(
                        "pgqueuer: job {} ({}) was re-picked as stale while this worker still \
                         owns it (its heartbeat lagged past heartbeat_timeout); it stays with \
                         the run already under way",
                        job.id,
                        job.entrypoint
                    );
                }
                std::collections::hash_map::Entry::Vacant(vacant) => {
                    vacant.insert(Entry {
                        stop: Arc::new(Stop::default()),
                        entrypoint: index(&job.entrypoint),
                        claims: 0,
                    });
                    fresh.push(job);
                }
            }
        }
        fresh
    }

    /// How many jobs of each of `n` entrypoints are owned, leaving out `except`.
    pub(crate) fn per_entrypoint(&self, n: usize, except: &[JobId]) -> Vec<usize> {
        let map = self.map();
        let mut counts = vec![0usize; n];
        for entry in map.values() {
            if let Some(c) = counts.get_mut(entry.entrypoint) {
                *c += 1;
            }
        }
        // One lookup per excepted id rather than a scan of them per owned job.
        for entry in except.iter().filter_map(|id| map.get(id)) {
            if let Some(c) = counts.get_mut(entry.entrypoint) {
                *c = c.saturating_sub(1);
            }
        }
        counts
    }

    pub(crate) fn remove(&self, ids: impl IntoIterator<Item = JobId>) {
        let mut map = self.map();
        for id in ids {
            map.remove(&id);
        }
    }

    /// The [`Stop`] of `id`, if it is owned.
    pub(crate) fn stop_of(&self, id: JobId) -> Option<Arc<Stop>> {
        self.map().get(&id).map(|h| h.stop.clone())
    }

    /// Cancels the jobs among `seen` that no claim of this worker has taken again since
    /// `seen` was read; returns how many. A heartbeat that found a row not ours read the
    /// row before a re-pick of ours committed: cancelling now would undo the re-pick's
    /// reinstatement, and a handler that stopped on it would have its job written
    /// `canceled` and deleted although the row is ours and nobody cancelled it.
    pub(crate) fn cancel_unclaimed(&self, seen: &[Ownership]) -> usize {
        let map = self.map();
        seen.iter()
            .filter_map(|h| map.get(&h.id).filter(|entry| entry.claims == h.claim))
            .map(|entry| entry.stop.cancel())
            .count()
    }

    /// Every owned job with its latest claim, for [`Owned::cancel_unclaimed`].
    pub(crate) fn ownerships(&self) -> Vec<Ownership> {
        self.map()
            .iter()
            .map(|(&id, entry)| Ownership {
                id,
                claim: entry.claims,
            })
            .collect()
    }

    /// Tells every owned job's handler that the shutdown deadline has passed; returns
    /// how many jobs are owned.
    pub(crate) fn shut_down_all(&self) -> usize {
        let map = self.map();
        for entry in map.values() {
            entry.stop.shut_down();
        }
        map.len()
    }

    /// The ids among `ids` that this worker owns.
    pub(crate) fn owned_among(&self, ids: &[JobId]) -> Vec<JobId> {
        let map = self.map();
        ids.iter()
            .copied()
            .filter(|id| map.contains_key(id))
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn ids(&self) -> Vec<JobId> {
        self.map().keys().copied().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}
