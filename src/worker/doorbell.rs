//! How anyone tells the dispatcher that claiming may have become worthwhile, and why.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, select};

use crate::shutdown::ShutdownHandle;

/// Why the dispatcher is rung. Several reasons can be pending at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Wake {
    /// The queue table gained jobs (an insert or a requeue): jobs may have become
    /// claimable.
    Changed = 1,
    /// The listener (re)connected: notifications sent meanwhile were lost.
    Resync = 2,
    /// An executor finished a job: a thread is free (rung only while the dispatcher
    /// waits for one, see [`Doorbell::want`]).
    ThreadFree = 4,
    /// Finished jobs were written, so their concurrency slots are free.
    Written = 8,
    /// Outcomes wait to be folded into the next claim (see `completer`).
    Outcomes = 16,
    /// A job left the queue table where a concurrency limit is ours: its slot is free.
    Freed = 32,
    /// The limits in force changed: the limit watch paused or resumed an entrypoint
    /// (see `limits`), so claims now take other entrypoints than before.
    LimitsChanged = 64,
    /// The stored limits may have changed (their notification came): the dispatcher
    /// reads them before its next claim, and only a change ends a quiet spell.
    LimitsStored = 128,
}

/// How the dispatcher is woken: a set of pending [`Wake`] reasons and a token that
/// unparks it. Ringing costs a thread wake only while the dispatcher sleeps on it, and
/// senders that are not always relevant ([`Wake::ThreadFree`], [`Wake::Outcomes`]) ring
/// only while the dispatcher says it waits for them.
pub(crate) struct Doorbell {
    /// Reasons rung and not yet taken by the dispatcher.
    pending: AtomicU8,
    /// Reasons the dispatcher currently waits for beyond the always-relevant ones.
    wanted: AtomicU8,
    /// While [`Wake::ThreadFree`] is wanted: how many free threads are worth a ring.
    threads_wanted: AtomicUsize,
    token_tx: Sender<()>,
    token_rx: Receiver<()>,
}

impl Doorbell {
    pub(crate) fn new() -> Doorbell {
        let (token_tx, token_rx) = crossbeam_channel::bounded(1);
        Doorbell {
            pending: AtomicU8::new(0),
            wanted: AtomicU8::new(0),
            threads_wanted: AtomicUsize::new(1),
            token_tx,
            token_rx,
        }
    }

    /// Records `why` and wakes the dispatcher if it sleeps.
    pub(crate) fn ring(&self, why: Wake) {
        self.pending.fetch_or(why as u8, Ordering::SeqCst);
        let _ = self.token_tx.try_send(());
    }

    /// Rings only if the dispatcher is waiting for `why` (see [`Doorbell::want`]).
    pub(crate) fn ring_if_wanted(&self, why: Wake) {
        if self.wanted.load(Ordering::SeqCst) & why as u8 != 0 {
            self.ring(why);
        }
    }

    /// Records `why` whether or not the dispatcher waits for it, and wakes it only if it
    /// does: the reason stays pending for the dispatcher's next look (see
    /// [`Doorbell::is_pending`]), where [`Doorbell::ring_if_wanted`] would drop it.
    pub(crate) fn note(&self, why: Wake) {
        self.pending.fetch_or(why as u8, Ordering::SeqCst);
        if self.wanted.load(Ordering::SeqCst) & why as u8 != 0 {
            let _ = self.token_tx.try_send(());
        }
    }

    /// Says that `free` is the room for jobs now (an executor finished a job, or a claim
    /// gave back room it did not fill), of `most` there can be now (see `Room::most`).
    /// Rings [`Wake::ThreadFree`] if the dispatcher waits for threads and `free` is as
    /// many as it waits for ([`Doorbell::want_threads`]), or as many as there can be: the
    /// allowance for jobs claimed ahead may have lapsed since the wait began (a handler
    /// ran long), and a wait for room that cannot come would last until the dequeue
    /// timeout.
    pub(crate) fn thread_freed(&self, free: usize, most: usize) {
        if free >= self.threads_wanted.load(Ordering::SeqCst).min(most) {
            self.ring_if_wanted(Wake::ThreadFree);
        }
    }

    /// How many free threads [`Doorbell::thread_freed`] waits for before it rings.
    pub(crate) fn want_threads(&self, n: usize) {
        self.threads_wanted.store(n.max(1), Ordering::SeqCst);
    }

    /// Says which of the conditional reasons the dispatcher waits for from now on.
    pub(crate) fn want(&self, reasons: &[Wake]) {
        let bits = reasons.iter().fold(0, |acc, r| acc | *r as u8);
        self.wanted.store(bits, Ordering::SeqCst);
    }

    /// Takes `why` if it is pending.
    pub(crate) fn take(&self, why: Wake) -> bool {
        self.pending.fetch_and(!(why as u8), Ordering::SeqCst) & why as u8 != 0
    }

    /// Whether `why` is pending, leaving it so.
    pub(crate) fn is_pending(&self, why: Wake) -> bool {
        self.pending.load(Ordering::SeqCst) & why as u8 != 0
    }

    /// Sleeps until rung, shutdown or `deadline`. The reasons stay pending for
    /// [`Doorbell::take`] and [`Doorbell::is_pending`].
    pub(crate) fn wait(&self, shutdown: &ShutdownHandle, deadline: Instant) {
        select! {
            recv(self.token_rx) -> _ => {},
            recv(shutdown.receiver()) -> _ => {},
            default(deadline.saturating_duration_since(Instant::now())) => {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doorbell_keeps_reasons_until_taken_and_rings_wanted_ones_only() {
        let bell = Doorbell::new();
        bell.ring_if_wanted(Wake::ThreadFree);
        assert!(!bell.is_pending(Wake::ThreadFree));
        bell.want(&[Wake::ThreadFree]);
        bell.ring_if_wanted(Wake::ThreadFree);
        bell.ring(Wake::Changed);
        assert!(bell.is_pending(Wake::Changed) && bell.is_pending(Wake::ThreadFree));
        assert!(bell.take(Wake::Changed));
        assert!(!bell.take(Wake::Changed));
        assert!(bell.is_pending(Wake::ThreadFree));
    }

    #[test]
    fn a_noted_reason_stays_pending_unwanted_and_wakes_only_when_wanted() {
        let bell = Doorbell::new();
        // Not waited for: kept for the next look, and no wake.
        bell.note(Wake::Written);
        assert!(bell.is_pending(Wake::Written));
        assert!(
            bell.token_rx.try_recv().is_err(),
            "woke a dispatcher not waiting"
        );
        // Where `ring_if_wanted` drops it.
        assert!(bell.take(Wake::Written));
        bell.ring_if_wanted(Wake::Written);
        assert!(!bell.is_pending(Wake::Written));
        // Waited for: kept, and the waiter woken.
        bell.want(&[Wake::Written]);
        bell.note(Wake::Written);
        assert!(bell.is_pending(Wake::Written));
        assert!(bell.token_rx.try_recv().is_ok());
    }

    #[test]
    fn a_wait_for_more_room_than_there_can_be_ends_once_all_there_is_is_free() {
        let bell = Doorbell::new();
        bell.want(&[Wake::ThreadFree]);
        // Asked for while ten jobs could be claimed ahead of four threads...
        bell.want_threads(10);
        bell.thread_freed(4, 14);
        assert!(
            !bell.is_pending(Wake::ThreadFree),
            "six short of what was asked"
        );
        // ... and the allowance lapsed: four is all there can be.
        bell.thread_freed(3, 4);
        assert!(!bell.is_pending(Wake::ThreadFree), "a thread still busy");
        bell.thread_freed(4, 4);
        assert!(bell.is_pending(Wake::ThreadFree));
    }
}
