//! Room for claimed jobs: how many a claim may take (idle threads, plus a batch ahead
//! while handlers are short and no limit is at stake).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Room for claimed jobs: executor threads that are idle and not promised a handed-over
/// job, plus the jobs a claim may take ahead of the threads.
///
/// The dispatcher reserves room before it claims and gives back what the claim did not
/// fill; each executor gives one back when it finishes a job, whether it then takes a
/// handed-over job or goes idle: the count stays "idle threads minus jobs waiting for one,
/// plus the ahead allowance" either way.
///
/// Where a limit binds, or may soon, the allowance is zero: a claimed job of a limited
/// entrypoint holds a concurrency slot, and taking more than there are threads to start
/// them would keep slots from other workers. While every limit is far from full, and
/// where there is none, a claim may take up to one batch ahead, so
/// that the next batch is claimed (and its commit paid) while this one runs, instead of
/// after, but only while handlers are short ([`AHEAD_WHILE_SHORTER`]): a job claimed
/// ahead waits in the hand-off for a thread, and should wait about one short job's run,
/// not a long one while another worker's threads sit idle.
pub(crate) struct Room {
    room: AtomicUsize,
    /// The room when every thread is idle and no job waits: `threads + ahead`.
    full: usize,
    ahead: usize,
    /// Jobs may be claimed ahead at all: always without limits; with them, only while
    /// the limits are far from binding (the dispatcher says so after each claim).
    ahead_allowed: AtomicBool,
    /// A running average of handler run times, in microseconds (`u64::MAX` before the
    /// first job ends: nothing is claimed ahead until handlers are known to be short).
    recent_us: AtomicU64,
    /// Reservations made so far: a claim begun between two looks changes it (see
    /// [`Room::reservations`]).
    reservations: AtomicU64,
}

/// Jobs are claimed ahead of free threads only while the running average of handler run
/// times is below this.
pub(crate) const AHEAD_WHILE_SHORTER: Duration = Duration::from_millis(1);

impl Room {
    /// `threads` executors, and up to `ahead` jobs claimed beyond them while
    /// `ahead_allowed` (see [`Room::allow_ahead`]).
    pub(crate) fn new(threads: usize, ahead: usize, ahead_allowed: bool) -> Room {
        Room {
            room: AtomicUsize::new(threads + ahead),
            full: threads + ahead,
            ahead,
            ahead_allowed: AtomicBool::new(ahead_allowed),
            recent_us: AtomicU64::new(u64::MAX),
            reservations: AtomicU64::new(0),
        }
    }

    /// Whether jobs may be claimed ahead from now on (while handlers are short).
    pub(crate) fn allow_ahead(&self, allowed: bool) {
        self.ahead_allowed.store(allowed, Ordering::Relaxed);
    }

    /// The allowance in force: `ahead` while it is allowed and handlers are short, else
    /// none.
    fn ahead_now(&self) -> usize {
        if self.ahead_allowed.load(Ordering::Relaxed) && self.recent_below(AHEAD_WHILE_SHORTER) {
            self.ahead
        } else {
            0
        }
    }

    /// True when the running average of handler run times is below `limit` (false
    /// before the first job ends).
    pub(crate) fn recent_below(&self, limit: Duration) -> bool {
        let limit = u64::try_from(limit.as_micros()).unwrap_or(u64::MAX);
        self.recent_us.load(Ordering::Relaxed) < limit
    }

    /// The room beyond the allowance not in force.
    fn usable(&self, room: usize) -> usize {
        room.saturating_sub(self.ahead - self.ahead_now())
    }

    /// Reserves room for up to `want` jobs; returns how many (0 when there is none).
    pub(crate) fn reserve(&self, want: usize) -> usize {
        let mut current = self.room.load(Ordering::SeqCst);
        loop {
            let take = self.usable(current).min(want);
            if take == 0 {
                return 0;
            }
            match self.room.compare_exchange(
                current,
                current - take,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    self.reservations.fetch_add(1, Ordering::SeqCst);
                    return take;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// How many reservations have been made: equal at two looks when no claim began in
    /// between. (Counted after the room is taken, so a look that finds the room whole
    /// and then this count unchanged later saw no claim begin after the first look.)
    pub(crate) fn reservations(&self) -> u64 {
        self.reservations.load(Ordering::SeqCst)
    }

    /// Gives back room for `n` jobs.
    pub(crate) fn release(&self, n: usize) {
        self.room.fetch_add(n, Ordering::SeqCst);
    }

    /// The room (see [`Room::enough`]) a claim would find now.
    pub(crate) fn room(&self) -> usize {
        self.usable(self.room.load(Ordering::SeqCst))
    }

    /// The most room there can be now: every thread idle, plus the allowance in force.
    /// A wait for more than this (asked for while the allowance was in force, say) would
    /// never end: see [`super::doorbell::Doorbell::thread_freed`].
    pub(crate) fn most(&self) -> usize {
        self.full - self.ahead + self.ahead_now()
    }

    /// The least room worth a claim of up to `batch`: one idle thread, or, claiming
    /// ahead, a whole batch (a thread coming back then takes a waiting job; claiming for
    /// it alone would pay a commit for one job).
    pub(crate) fn enough(&self, batch: usize) -> usize {
        (self.ahead_now() + 1).min(batch).max(1)
    }

    /// True when the `n` jobs of a claim just made are all the worker has: no other job
    /// runs, waits for a thread or is reserved. (A concurrent reservation or a job still
    /// running makes it false, never wrongly true.)
    pub(crate) fn only(&self, n: usize) -> bool {
        self.room.load(Ordering::SeqCst) + n == self.full
    }

    /// Room threads with no job waiting for them.
    pub(crate) fn idle_threads(&self) -> usize {
        self.room.load(Ordering::SeqCst).saturating_sub(self.ahead)
    }

    /// A handler ran for `took`.
    pub(crate) fn ran(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let old = self.recent_us.load(Ordering::Relaxed);
        let new = if old == u64::MAX {
            us
        } else {
            // The last 8 or so jobs count; a lost update between threads costs nothing.
            old - old / 8 + us / 8
        };
        self.recent_us.store(new, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_threads_are_reserved_and_given_back() {
        let room = Room::new(4, 0, true);
        assert_eq!(room.reserve(3), 3);
        assert_eq!(room.reserve(3), 1);
        assert_eq!(room.reserve(1), 0);
        room.release(2);
        assert_eq!(room.room(), 2);
        assert_eq!(room.enough(10), 1);
    }

    #[test]
    fn jobs_are_claimed_ahead_only_while_handlers_are_short() {
        let room = Room::new(4, 4, true);
        // Before any job has run nothing is claimed ahead.
        assert_eq!((room.room(), room.enough(4)), (4, 1));
        assert_eq!(room.reserve(8), 4);
        assert_eq!(room.reserve(8), 0);
        room.ran(Duration::from_micros(50));
        // Short handlers: a whole batch more, and only a whole batch is worth a claim.
        assert_eq!((room.room(), room.enough(4)), (4, 4));
        assert_eq!(room.reserve(8), 4);
        assert_eq!(room.idle_threads(), 0);
        room.release(8);
        assert_eq!(room.idle_threads(), 4);
        // Long handlers: the allowance lapses, room held ahead included.
        for _ in 0..64 {
            room.ran(Duration::from_millis(20));
        }
        assert_eq!((room.room(), room.enough(4)), (4, 1));
    }

    #[test]
    fn nothing_is_claimed_ahead_while_a_limit_may_bind() {
        let room = Room::new(4, 4, false);
        room.ran(Duration::from_micros(50));
        // Short handlers, but a limit near binding: idle threads only.
        assert_eq!((room.room(), room.enough(4)), (4, 1));
        assert_eq!(room.reserve(8), 4);
        room.release(4);
        // The limits are far from full again: a batch ahead, as without limits.
        room.allow_ahead(true);
        assert_eq!((room.room(), room.enough(4)), (8, 4));
        assert_eq!(room.reserve(8), 8);
        // Near the limit once more with jobs held ahead: no further room until they run.
        room.allow_ahead(false);
        assert_eq!(room.room(), 0);
        room.release(8);
        assert_eq!(room.idle_threads(), 4);
    }

    #[test]
    fn only_a_claim_on_an_idle_worker_is_all_it_has() {
        let room = Room::new(4, 2, true);
        assert_eq!(room.reserve(3), 3);
        assert!(room.only(3), "nothing else runs, waits or is reserved");
        assert!(!room.only(2), "a reserved job not in this claim");
        room.release(1);
        assert_eq!(room.reserve(1), 1);
        assert!(!room.only(1), "two other jobs are still reserved");
    }
}
