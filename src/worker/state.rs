//! The few pieces the worker's threads share, each with the one job it does.
//!
//! - [`Doorbell`]: how anyone tells the dispatcher that claiming may have become
//!   worthwhile, and why.
//! - [`Idle`]: how many executor threads are free and not yet promised a job; the
//!   dispatcher never claims more.
//! - [`Handoff`]: claimed jobs on their way to executors, the one-at-a-time wake chain
//!   that starts them, and the count that keeps the jobs run at once within `threads`.
//! - [`Running`]: the jobs this worker holds, with their cancel flags.
//! - [`ConnSlot`]: a pool connection a thread keeps for its loop.
//! - [`warn_always`]: a warning that reaches stderr even when no logger is installed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};

use crate::connect::{Pool, PooledConn};
use crate::error::{Error, Result};
use crate::job::{Job, JobId};
use crate::shutdown::ShutdownHandle;
use crate::sqlstate;

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

    /// Rings [`Wake::ThreadFree`] if the dispatcher waits for threads and `free` of them
    /// are enough (see [`Doorbell::want_threads`]).
    pub(crate) fn thread_freed(&self, free: usize) {
        if free >= self.threads_wanted.load(Ordering::SeqCst) {
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

/// Room for claimed jobs: executor threads that are idle and not promised a handed-over
/// job, plus the jobs a claim may take ahead of the threads.
///
/// The dispatcher reserves room before it claims and gives back what the claim did not
/// fill; each executor gives one back when it finishes a job, whether it then takes a
/// handed-over job or goes idle: the count stays "idle threads minus jobs waiting for one,
/// plus the ahead allowance" either way.
///
/// Where a limit is at stake the allowance is zero: a claimed job of a limited entrypoint
/// holds a concurrency slot, and taking more than there are threads to start them would
/// keep slots from other workers. Elsewhere a claim may take up to one batch ahead, so
/// that the next batch is claimed (and its commit paid) while this one runs, instead of
/// after, but only while handlers are short ([`AHEAD_WHILE_SHORTER`]): a job claimed
/// ahead waits in the hand-off for a thread, and should wait about one short job's run,
/// not a long one while another worker's threads sit idle.
pub(crate) struct Idle {
    room: AtomicUsize,
    /// The room when every thread is idle and no job waits: `threads + ahead`.
    full: usize,
    ahead: usize,
    /// A running average of handler run times, in microseconds (`u64::MAX` before the
    /// first job ends: nothing is claimed ahead until handlers are known to be short).
    recent_us: AtomicU64,
}

/// Jobs are claimed ahead of free threads only while the running average of handler run
/// times is below this.
pub(crate) const AHEAD_WHILE_SHORTER: Duration = Duration::from_millis(1);

impl Idle {
    /// `threads` executors, and up to `ahead` jobs claimed beyond them.
    pub(crate) fn new(threads: usize, ahead: usize) -> Idle {
        Idle {
            room: AtomicUsize::new(threads + ahead),
            full: threads + ahead,
            ahead,
            recent_us: AtomicU64::new(u64::MAX),
        }
    }

    /// The allowance in force: `ahead` while handlers are short, else none.
    fn ahead_now(&self) -> usize {
        let short = u64::try_from(AHEAD_WHILE_SHORTER.as_micros()).unwrap_or(u64::MAX);
        if self.recent_us.load(Ordering::Relaxed) < short {
            self.ahead
        } else {
            0
        }
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
                Ok(_) => return take,
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives back room for `n` jobs.
    pub(crate) fn release(&self, n: usize) {
        self.room.fetch_add(n, Ordering::SeqCst);
    }

    /// The room (see [`Idle::enough`]) a claim would find now.
    pub(crate) fn room(&self) -> usize {
        self.usable(self.room.load(Ordering::SeqCst))
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

    /// Idle threads with no job waiting for them.
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

/// Claimed jobs waiting for an executor, and how idle executors are woken for them.
///
/// Nobody blocks on the job queue itself, so pushing wakes no thread. Instead one idle
/// executor is woken, and each taker wakes one more while jobs remain: a batch of short
/// jobs wakes only the few threads it keeps busy, rather than one per job (a wake of a
/// sleeping thread costs several microseconds of CPU, as much as PostgreSQL spends on a
/// good part of a short job). No job waits for a wake that never comes: an executor back
/// from a job takes the next waiting one before it sleeps.
///
/// Such a wake right after the claim's round trip is slow (the woken thread waits for a
/// core that PostgreSQL's backend still holds), so a lone job claimed by an idle worker
/// is run by the claiming thread instead (see `runner`).
pub(crate) struct Handoff {
    jobs_tx: Sender<Job>,
    jobs_rx: Receiver<Job>,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    /// A wake token is on its way to an idle executor that has not yet come round; while
    /// it is, takers send no more (each token wakes a thread).
    waking: AtomicBool,
    /// Jobs being run now, never more than `threads`. The worker has one thread more
    /// than `threads` (the one that leads), and a thread that has just given the lead
    /// away runs its own job while the lead waits for another: this count, not the
    /// number of threads, is what keeps the jobs run at once within `threads`.
    executing: AtomicUsize,
    threads: usize,
}

impl Handoff {
    /// A hand-off for `threads` jobs at once.
    pub(crate) fn new(threads: usize) -> Handoff {
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(threads + 1);
        Handoff {
            jobs_tx,
            jobs_rx,
            wake_tx,
            wake_rx,
            waking: AtomicBool::new(false),
            executing: AtomicUsize::new(0),
            threads: threads.max(1),
        }
    }

    /// Counts a job as running if fewer than `threads` are; false otherwise.
    pub(crate) fn start_own(&self) -> bool {
        self.executing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.threads).then_some(n + 1)
            })
            .is_ok()
    }

    /// A job taken from here, or one a thread kept ([`Handoff::start_own`]), has ended.
    pub(crate) fn finished(&self) {
        self.executing.fetch_sub(1, Ordering::SeqCst);
    }

    /// Queues claimed jobs and wakes one idle executor for them.
    pub(crate) fn push(&self, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        for job in jobs {
            // Cannot fail: this struct holds a receiver.
            let _ = self.jobs_tx.send(job);
        }
        self.wake_one();
    }

    /// A waiting job, if any and if fewer than `threads` jobs run (the job counts as
    /// running until [`Handoff::finished`]); wakes one more idle thread when others still
    /// wait.
    pub(crate) fn take(&self) -> Option<Job> {
        if self.jobs_rx.is_empty() {
            // The common case for a thread looking for work: nothing to count.
            return None;
        }
        if !self.start_own() {
            // Every permitted job runs; one of their threads takes this one when it ends.
            return None;
        }
        let Ok(job) = self.jobs_rx.try_recv() else {
            self.finished();
            return None;
        };
        if !self.jobs_rx.is_empty() {
            self.wake_one();
        }
        Some(job)
    }

    /// Takes every waiting job without a run grant: at shutdown, jobs that have not
    /// started go back to the queue at once rather than wait for a thread.
    pub(crate) fn drain(&self) -> Vec<Job> {
        self.jobs_rx.try_iter().collect()
    }

    /// How many jobs wait.
    pub(crate) fn len(&self) -> usize {
        self.jobs_rx.len()
    }

    /// Wakes one idle thread (unless a wake is already on its way to one): for jobs, or
    /// for the lead (see `dispatcher`), which a woken thread looks for first.
    pub(crate) fn wake_one(&self) {
        if !self.waking.swap(true, Ordering::SeqCst) {
            let _ = self.wake_tx.try_send(());
        }
    }

    /// Sleeps until woken for jobs, or until `done` disconnects (no job can come any
    /// more); returns false then.
    pub(crate) fn wait(&self, done: &Receiver<()>) -> bool {
        select! {
            recv(self.wake_rx) -> _ => {
                self.waking.store(false, Ordering::SeqCst);
                true
            }
            recv(done) -> _ => false,
        }
    }
}

/// Why a held job's handler should stop, as it sees it through its `Context`.
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

/// The jobs this worker holds (claimed and not yet written), each with its [`Stop`].
/// The dispatcher adds claimed jobs; executors read their job's flag; the completer
/// removes a job once its outcome is written (or the claim that folded it in does); the
/// heartbeat thread refreshes every id; the listener, the shutdown deadline and the
/// timeout watch stop handlers through it.
#[derive(Default)]
pub(crate) struct Running(Mutex<HashMap<JobId, Held>>);

/// A held job: its stop flag, and its entrypoint's position in registration order.
struct Held {
    stop: Arc<Stop>,
    entrypoint: usize,
}

impl Running {
    fn map(&self) -> MutexGuard<'_, HashMap<JobId, Held>> {
        lock(&self.0)
    }

    /// Holds `jobs`; `index` gives each one's entrypoint position. Returns the jobs that
    /// were not held already: a job this worker still holds can come back from a claim
    /// as a stale re-pick (its heartbeat lagged past the timeout while its handler ran,
    /// and the claim statement re-picks stale rows of any worker, this one included, as
    /// PgQueuer's does). Its running handler keeps it: running it a second time beside
    /// the first would break the limits and the handler's own assumptions.
    pub(crate) fn add(&self, jobs: Vec<Job>, index: impl Fn(&str) -> usize) -> Vec<Job> {
        let mut map = self.map();
        let mut fresh = Vec::with_capacity(jobs.len());
        for job in jobs {
            match map.entry(job.id) {
                std::collections::hash_map::Entry::Occupied(_) => {
                    log::warn!(
                        "pgqueuer: job {} ({}) was re-picked as stale while this worker still \
                         holds it (its heartbeat lagged past heartbeat_timeout); it stays with \
                         the run already under way",
                        job.id,
                        job.entrypoint
                    );
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(Held {
                        stop: Arc::new(Stop::default()),
                        entrypoint: index(&job.entrypoint),
                    });
                    fresh.push(job);
                }
            }
        }
        fresh
    }

    /// How many jobs of each of `n` entrypoints are held, leaving out `except`.
    pub(crate) fn per_entrypoint(&self, n: usize, except: &[JobId]) -> Vec<usize> {
        let map = self.map();
        let mut counts = vec![0usize; n];
        for held in map.values() {
            if let Some(c) = counts.get_mut(held.entrypoint) {
                *c += 1;
            }
        }
        // One lookup per excepted id rather than a scan of them per held job.
        for held in except.iter().filter_map(|id| map.get(id)) {
            if let Some(c) = counts.get_mut(held.entrypoint) {
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

    /// The [`Stop`] of `id`, if it is held.
    pub(crate) fn stop_of(&self, id: JobId) -> Option<Arc<Stop>> {
        self.map().get(&id).map(|h| h.stop.clone())
    }

    /// Cancels the held jobs among `ids`; returns how many were held.
    pub(crate) fn cancel(&self, ids: &[JobId]) -> usize {
        let map = self.map();
        ids.iter()
            .filter_map(|id| map.get(id))
            .map(|held| held.stop.cancel())
            .count()
    }

    /// Tells every held job's handler that the shutdown deadline has passed; returns
    /// how many jobs are held.
    pub(crate) fn shut_down_all(&self) -> usize {
        let map = self.map();
        for held in map.values() {
            held.stop.shut_down();
        }
        map.len()
    }

    /// The ids among `ids` that this worker holds.
    pub(crate) fn held_among(&self, ids: &[JobId]) -> Vec<JobId> {
        let map = self.map();
        ids.iter()
            .copied()
            .filter(|id| map.contains_key(id))
            .collect()
    }

    pub(crate) fn ids(&self) -> Vec<JobId> {
        self.map().keys().copied().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

/// A pool connection a thread keeps for its loop: checked out on first use, set to plan
/// with indexes only ([`crate::Conn::plan_with_indexes`]; the pool closes it when it is
/// given back rather than hand the setting to another user), and given back after an
/// error that means the connection is gone, so that the next use opens a fresh one.
pub(crate) struct ConnSlot<'a> {
    pool: &'a Pool,
    conn: Option<PooledConn>,
}

impl<'a> ConnSlot<'a> {
    pub(crate) fn new(pool: &'a Pool) -> ConnSlot<'a> {
        ConnSlot { pool, conn: None }
    }

    /// Runs `op` on the connection (checking one out first if needed); after a failure
    /// that lost the connection, gives it back.
    pub(crate) fn run<T>(&mut self, op: impl FnOnce(&mut PooledConn) -> Result<T>) -> Result<T> {
        if self.conn.is_none() {
            let mut conn = self.pool.get()?;
            conn.plan_with_indexes()?;
            self.conn = Some(conn);
        }
        let conn = self
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("set above"));
        let result = op(conn);
        if let Err(e) = &result {
            let lost = match e {
                Error::Db(db) => sqlstate::is_connection_lost(db),
                Error::Pool(_) => true,
                _ => false,
            };
            if lost || conn.is_closed() {
                self.conn = None;
            }
        }
        result
    }

    /// Gives the connection back (the pool closes it).
    pub(crate) fn release(&mut self) {
        self.conn = None;
    }
}

/// Locks a mutex, recovering from poisoning (a panicking handler never holds one, and
/// every update under these locks leaves the data consistent).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A small xorshift generator for jitter (no dependency, no shared state).
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: usize) -> Jitter {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Jitter(u64::from(time) ^ (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, max)`.
    pub(crate) fn duration(&mut self, max: Duration) -> Duration {
        max.mul_f64(self.unit())
    }
}

/// Sleeps for `d`, or less if shutdown comes first.
pub(crate) fn sleep_unless_shutdown(shutdown: &ShutdownHandle, d: Duration) {
    let _ = shutdown.receiver().recv_timeout(d);
}

/// True when no logger is installed: `log`'s max level is `Off`, as it is until a logger
/// is set up (`env_logger::init()` and its kin raise it).
pub(crate) fn no_logger() -> bool {
    log::max_level() == log::LevelFilter::Off
}

/// Logs at `warn`, and with no logger installed prints to stderr as well, as Python's
/// `logging` does with its last-resort handler: a failing handler must never go unseen.
pub(crate) fn warn_always(message: std::fmt::Arguments<'_>) {
    log::warn!("{message}");
    if no_logger() {
        eprintln!("pgqueuer: {message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_job(id: JobId) -> Job {
        Job {
            id,
            priority: 0,
            queue_manager_id: None,
            created: std::time::SystemTime::UNIX_EPOCH,
            updated: std::time::SystemTime::UNIX_EPOCH,
            heartbeat: std::time::SystemTime::UNIX_EPOCH,
            execute_after: std::time::SystemTime::UNIX_EPOCH,
            status: crate::job::Status::Picked,
            entrypoint: "e".into(),
            dedupe_key: None,
            payload: None,
            headers: None,
            attempts: 0,
            slot: None,
        }
    }

    #[test]
    fn jitter_stays_in_range() {
        let mut j = Jitter::new(3);
        for _ in 0..1000 {
            let u = j.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn idle_threads_are_reserved_and_given_back() {
        let idle = Idle::new(4, 0);
        assert_eq!(idle.reserve(3), 3);
        assert_eq!(idle.reserve(3), 1);
        assert_eq!(idle.reserve(1), 0);
        idle.release(2);
        assert_eq!(idle.room(), 2);
        assert_eq!(idle.enough(10), 1);
    }

    #[test]
    fn jobs_are_claimed_ahead_only_while_handlers_are_short() {
        let idle = Idle::new(4, 4);
        // Before any job has run nothing is claimed ahead.
        assert_eq!((idle.room(), idle.enough(4)), (4, 1));
        assert_eq!(idle.reserve(8), 4);
        assert_eq!(idle.reserve(8), 0);
        idle.ran(Duration::from_micros(50));
        // Short handlers: a whole batch more, and only a whole batch is worth a claim.
        assert_eq!((idle.room(), idle.enough(4)), (4, 4));
        assert_eq!(idle.reserve(8), 4);
        assert_eq!(idle.idle_threads(), 0);
        idle.release(8);
        assert_eq!(idle.idle_threads(), 4);
        // Long handlers: the allowance lapses, room held ahead included.
        for _ in 0..64 {
            idle.ran(Duration::from_millis(20));
        }
        assert_eq!((idle.room(), idle.enough(4)), (4, 1));
    }

    #[test]
    fn only_a_claim_on_an_idle_worker_is_all_it_has() {
        let idle = Idle::new(4, 2);
        assert_eq!(idle.reserve(3), 3);
        assert!(idle.only(3), "nothing else runs, waits or is reserved");
        assert!(!idle.only(2), "a reserved job not in this claim");
        idle.release(1);
        assert_eq!(idle.reserve(1), 1);
        assert!(!idle.only(1), "two other jobs are still reserved");
    }

    #[test]
    fn no_more_jobs_run_at_once_than_threads() {
        let handoff = Handoff::new(2);
        handoff.push((1..=3).map(test_job).collect());
        // The thread that gave the lead away runs its own job: one left for the others.
        assert!(handoff.start_own());
        assert_eq!(handoff.take().map(|j| j.id), Some(1));
        assert!(handoff.take().is_none(), "a third job would run beside two");
        assert!(!handoff.start_own());
        assert_eq!(handoff.len(), 2, "the jobs not taken stay");
        handoff.finished();
        assert_eq!(handoff.take().map(|j| j.id), Some(2));
        handoff.finished();
        handoff.finished();
        assert_eq!(handoff.take().map(|j| j.id), Some(3));
        assert!(handoff.take().is_none());
    }

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
    fn handed_over_jobs_wake_one_thread_at_a_time() {
        let handoff = Handoff::new(4);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        handoff.push(vec![test_job(1), test_job(2), test_job(3)]);
        // One token for the batch, not three.
        assert_eq!(handoff.wake_rx.len(), 1);
        assert!(handoff.wait(&done_rx));
        assert_eq!(handoff.take().map(|j| j.id), Some(1));
        // The taker woke the next one, since jobs remain.
        assert_eq!(handoff.wake_rx.len(), 1);
        assert_eq!(handoff.take().map(|j| j.id), Some(2));
        assert_eq!(
            handoff.wake_rx.len(),
            1,
            "no second token while one is on its way"
        );
        assert!(handoff.wait(&done_rx));
        assert_eq!(handoff.take().map(|j| j.id), Some(3));
        assert!(handoff.take().is_none());
        drop(done_tx);
        assert!(!handoff.wait(&done_rx));
    }
}
