//! Outcomes of finished jobs waiting to be written: what executors leave for the
//! completer (and, where slots are scarce and reused, for the dispatcher's next claim).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::claim::Outcome;
use crate::job::JobId;
use crate::lock::lock;

/// A job to put back in the queue after `delay`, logging `queued` with the reason.
pub(crate) struct Requeue {
    pub(crate) id: JobId,
    /// For the log line, should the retry not be written.
    pub(crate) entrypoint: String,
    pub(crate) delay: Duration,
    pub(crate) traceback: serde_json::Value,
}

/// Most outcomes written by one statement.
pub(crate) const MAX_BATCH: usize = 500;

/// Ends enough for a write to be worth its commit without lingering for more: as many as
/// a large claim takes. They pile up this far while the previous write runs, in a drain
/// or a busy flow; lingering then would only leave the server idle.
pub(crate) const ENOUGH_TO_WRITE: usize = 128;

/// Outcomes not yet written.
#[derive(Default)]
pub(crate) struct Pending {
    /// Deletes (or holds, for `Failed`) with their log rows.
    pub(crate) ends: Vec<Outcome>,
    /// Written by the completer only, without waiting.
    pub(crate) requeues: Vec<Requeue>,
    /// Jobs not started before shutdown, to give back to the queue, without waiting.
    pub(crate) releases: Vec<JobId>,
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty() && self.requeues.is_empty() && self.releases.is_empty()
    }
}

/// Where executors leave outcomes for the completer (and, when it so decides, for the
/// dispatcher's next claim).
pub(crate) struct Outcomes {
    pending: std::sync::Mutex<Pending>,
    /// Tells the completer that outcomes wait (a token; several coalesce).
    signal_tx: Sender<()>,
    pub(crate) signal_rx: Receiver<()>,
    /// Claims take ends along (see the module docs).
    fold: bool,
    /// A drain's claims came back short: its last jobs are running, and their ends are
    /// written as they come rather than gathered (see [`Outcomes::hurry`]).
    hurry: AtomicBool,
}

impl Outcomes {
    /// Outcomes for a worker whose claims take ends along when `fold`.
    pub(crate) fn new(fold: bool) -> Outcomes {
        let (signal_tx, signal_rx) = crossbeam_channel::bounded(1);
        Outcomes {
            pending: std::sync::Mutex::new(Pending::default()),
            signal_tx,
            signal_rx,
            fold,
            hurry: AtomicBool::new(false),
        }
    }

    /// Says whether the completer should write ends as they come (`true`) rather than
    /// gather them for the completer's linger: a drain sets it once a claim finds
    /// fewer jobs than it asked for, since no batch will follow to gather with, and
    /// `run_until_empty` returns only after the last write.
    pub(crate) fn hurry(&self, now: bool) {
        self.hurry.store(now, Ordering::SeqCst);
    }

    /// An executor's finished job: deleted or held, with its log row.
    pub(crate) fn finished(&self, outcome: Outcome) {
        lock(&self.pending).ends.push(outcome);
        let _ = self.signal_tx.try_send(());
    }

    /// An executor's job to run again later.
    pub(crate) fn requeue(&self, requeue: Requeue) {
        lock(&self.pending).requeues.push(requeue);
        let _ = self.signal_tx.try_send(());
    }

    /// A job not started before shutdown, to give back to the queue.
    pub(crate) fn release(&self, id: JobId) {
        lock(&self.pending).releases.push(id);
        let _ = self.signal_tx.try_send(());
    }

    /// The ends the next claim should write (up to a batch), or none when claims do not
    /// take ends along.
    pub(crate) fn for_claim(&self) -> Vec<Outcome> {
        if !self.fold {
            return Vec::new();
        }
        let mut pending = lock(&self.pending);
        let n = pending.ends.len().min(MAX_BATCH);
        pending.ends.drain(..n).collect()
    }

    /// Ends a claim took along but could not write (rows locked for a moment): back to
    /// the completer, which retries them.
    pub(crate) fn not_folded(&self, rest: Vec<Outcome>) {
        if !rest.is_empty() {
            lock(&self.pending).ends.extend(rest);
            let _ = self.signal_tx.try_send(());
        }
    }

    /// The jobs whose ends the next claim would take along (none when claims do not).
    pub(crate) fn foldable_ids(&self) -> Vec<JobId> {
        if !self.fold {
            return Vec::new();
        }
        let pending = lock(&self.pending);
        pending.ends.iter().take(MAX_BATCH).map(|o| o.id).collect()
    }

    /// True when ends wait for a claim to take them along.
    pub(crate) fn waiting_for_claim(&self) -> bool {
        self.fold && !lock(&self.pending).ends.is_empty()
    }

    /// Everything waiting, taken at once (the completer's next round).
    pub(crate) fn take_all(&self) -> Pending {
        std::mem::take(&mut *lock(&self.pending))
    }

    /// True when what waits is to be written without a linger: requeues and releases,
    /// ends enough for a write ([`ENOUGH_TO_WRITE`]) unless claims take ends along
    /// (then they wait for the next claim), and any end while a drain hurries
    /// ([`Outcomes::hurry`]).
    pub(crate) fn write_at_once(&self) -> bool {
        let pending = lock(&self.pending);
        !pending.requeues.is_empty()
            || !pending.releases.is_empty()
            || (!self.fold && pending.ends.len() >= ENOUGH_TO_WRITE)
            || (!pending.ends.is_empty() && self.hurry.load(Ordering::SeqCst))
    }

    /// True when nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        lock(&self.pending).is_empty()
    }

    /// Signals the completer to look again (rows it handed back).
    pub(crate) fn signal(&self) {
        let _ = self.signal_tx.try_send(());
    }

    /// Puts back what a write could not finish (rows locked by another session); true
    /// when there was any.
    pub(crate) fn hand_back(
        &self,
        ends: Vec<Outcome>,
        requeues: Vec<Requeue>,
        releases: Vec<JobId>,
    ) -> bool {
        if ends.is_empty() && requeues.is_empty() && releases.is_empty() {
            return false;
        }
        let mut pending = lock(&self.pending);
        pending.ends.extend(ends);
        pending.requeues.extend(requeues);
        pending.releases.extend(releases);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Status;

    fn end(id: usize) -> Outcome {
        Outcome {
            id: JobId::try_from(id).unwrap(),
            status: Status::Successful,
            traceback: None,
        }
    }

    #[test]
    fn ends_are_written_without_lingering_once_enough_wait_or_a_drain_hurries() {
        let outcomes = Outcomes::new(false);
        for id in 1..ENOUGH_TO_WRITE {
            outcomes.finished(end(id));
        }
        assert!(!outcomes.write_at_once(), "one short of a write's worth");
        outcomes.finished(end(0));
        assert!(outcomes.write_at_once());
        outcomes.take_all();
        assert!(!outcomes.write_at_once(), "taken");

        let hurried = Outcomes::new(false);
        hurried.hurry(true);
        assert!(!hurried.write_at_once(), "nothing waits");
        hurried.finished(end(1));
        assert!(
            hurried.write_at_once(),
            "a drain's last end, written as it comes"
        );
        hurried.hurry(false);
        assert!(!hurried.write_at_once(), "gathered again");

        let folding = Outcomes::new(true);
        for id in 0..ENOUGH_TO_WRITE * 2 {
            folding.finished(end(id));
        }
        assert!(!folding.write_at_once(), "ends wait for the next claim");
    }
}
