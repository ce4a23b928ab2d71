//! The dispatcher: the one owner of claiming (River's producer). It decides when a claim
//! is worth its statement, how many jobs it takes (no more than idle executors, plus one
//! batch ahead while no limit binds and handlers are short: see `room::Room`), when a
//! second claim connection pays, and hands the claimed jobs to the executors.
//!
//! It claims on one or two *lanes*, each with a connection of its own. The primary lane
//! is run by whichever thread leads ([`Dispatcher::lead`], see `runner`), and its state
//! moves with the lead ([`Lead`]). It claims whenever threads are free and claiming is
//! not pointless: it keeps the quiet spells (after a claim that found nothing, no claim
//! until something changes or the next deferred job is due), folds finished jobs'
//! outcomes into its claims when the completer offers them ([`Ledger::for_claim`]), and
//! stops a drain. The second lane, a thread of its own, claims only while claims come back
//! as full batches and no limit is near binding: then the batch size, not idle threads,
//! bounds them, and a second claim in flight runs while the first waits for its commit. (With idle threads as the bound, two claims would
//! split them and pay two commits.)
//!
//! A worker with limits claims as one without them while every limit is far from
//! binding: claims report the slots in use fleet-wide (a relaxed claim counts them only
//! every [`COUNT_EVERY`], since counting reads every held job), and while each limit has
//! `relax_margin` to spare (this worker's threads, a batch ahead and a batch per lane)
//! claims go ahead of free threads and on both lanes, and take slots in turn from where
//! each lane left off, without searching (each lane keeps to its own half of the limit,
//! so they take different slots: [`SlotCursor`]); the slot index still decides every
//! claim, so exactness never rests on this reckoning. Nearer the limit the worker claims
//! for free threads only, on one lane, and a slot is never held by a job waiting for a
//! thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};

use super::alarms::FalseAlarms;
use super::builder::WorkerConfig;
use super::doorbell::{Doorbell, Wake};
use super::floors::Reader;
use super::jitter::Jitter;
use super::ledger::Ledger;
use super::limits::LimitWatch;
use super::rate_gate::RateGate;
use super::stats::{Lost, Stats};
use crate::claim::{Claim, Claimer, LostRace, NextWake};
use crate::job::Job;
use crate::lock::lock;
use crate::loop_conn::LoopConn;
use crate::shutdown::ShutdownHandle;

/// Shortest idle wait when work is known to be queued but could not be claimed (limits
/// full, rows locked): PgQueuer's `min_dequeue_poll_interval`.
const MIN_POLL: Duration = Duration::from_millis(100);

/// How long the dispatcher, with every thread busy on jobs of a full claim, waits for
/// more threads once the first comes back (or, with a binding limit's slots held by its
/// own short jobs, for more of their slots). Short jobs of one batch end within
/// microseconds of each other; claiming for the first thread alone would pay a commit for
/// one job. A job that runs long delays its successor by at most this.
const GATHER: Duration = Duration::from_micros(200);

/// Shortest wait for a rate limit's next start: the units a claim reports as due now may
/// still be held by a claim in flight, which commits within about this.
const RATE_MIN_WAIT: Duration = Duration::from_millis(1);

/// Most owned jobs (claimed, not yet written) beyond the thread count before claiming
/// pauses: their rows and slots stay held until written, so claiming on would only grow
/// the completer's debt.
const BACKLOG_LIMIT: usize = 500;

/// How long relaxed claims go by the slots in use that an earlier claim counted before
/// one of them counts again. Counting reads every job the limited entrypoints hold; the
/// slot index, not the count, keeps a relaxed claim within its limit, and the count only
/// tells when to turn careful, which a lost slot race also tells.
const COUNT_EVERY: Duration = Duration::from_millis(10);

/// When a claim last counted the slots in use, and for which claimer (see
/// [`COUNT_EVERY`]). A relaxed claim that is to count takes the window as it is sent, not
/// when its count comes back: the two lanes claim at once, and each used to count while
/// the other's count was still in flight, so a limited drain made more counting claims
/// than there were windows (docs/benchmarks.md). The window lasts at least twenty times
/// what the last count took: counting reads every version of the jobs held, which a held
/// snapshot keeps, and must not take over the claims' time then.
#[derive(Default)]
pub(crate) struct CountClock(std::sync::Mutex<CountWindow>);

/// See [`CountClock`].
#[derive(Default)]
pub(crate) struct CountWindow {
    last: Option<(Arc<Claimer>, Instant)>,
    /// How long a window lasts now.
    every: Option<Duration>,
}

impl CountWindow {
    fn every(&self) -> Duration {
        self.every.unwrap_or(COUNT_EVERY)
    }
}

impl CountClock {
    /// Whether a relaxed claim of `claimer` sent at `now` counts: yes unless a claim of
    /// the same claimer counted (or is counting) within the window before. A claim that
    /// counts takes the window.
    pub(crate) fn take(&self, claimer: &Arc<Claimer>, now: Instant) -> bool {
        let mut window = lock(&self.0);
        let every = window.every();
        let recent = window.last.as_ref().is_some_and(|(counted, at)| {
            Arc::ptr_eq(counted, claimer) && now.saturating_duration_since(*at) < every
        });
        if !recent {
            window.last = Some((Arc::clone(claimer), now));
        }
        !recent
    }

    /// A claim of `claimer` sent at `at` counted (careful claims always do), and came
    /// back at `back`: the window starts there, unless a later claim has taken it since,
    /// and lasts twenty times what the claim took, [`COUNT_EVERY`] at least.
    pub(crate) fn counted(&self, claimer: &Arc<Claimer>, at: Instant, back: Instant) {
        let mut window = lock(&self.0);
        window.every = Some(COUNT_EVERY.max(back.saturating_duration_since(at) * 20));
        if !window
            .last
            .as_ref()
            .is_some_and(|(counted, since)| Arc::ptr_eq(counted, claimer) && *since >= at)
        {
            window.last = Some((Arc::clone(claimer), at));
        }
    }

    /// When the window ends, if a claim has counted.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let window = lock(&self.0);
        let every = window.every();
        window.last.as_ref().map(|(_, at)| *at + every)
    }

    /// The claim sent at `at`, which took the window, brought no count back: the window
    /// is free again (if no other claim has taken it since).
    pub(crate) fn release(&self, at: Instant) {
        let mut window = lock(&self.0);
        if window.last.as_ref().is_some_and(|(_, since)| *since == at) {
            window.last = None;
        }
    }
}

/// The dispatcher's state, shared by its lanes.
pub(crate) struct Dispatcher<'a> {
    pub(crate) config: &'a WorkerConfig,
    pub(crate) doorbell: &'a Doorbell,
    /// Where claimed jobs are owned, handed over, and their outcomes wait.
    pub(crate) ledger: &'a Ledger,
    /// Which limited entrypoints are paused (a larger limit elsewhere, see `limits`).
    pub(crate) limits: &'a LimitWatch,
    /// Where each claim is counted.
    pub(crate) stats: &'a Stats,
    pub(crate) shutdown: &'a ShutdownHandle,
    /// Drain mode: stop once nothing is queued for our entrypoints and nothing runs.
    pub(crate) drain: bool,
    pub(crate) second: SecondLane,
    /// Every limit was far from binding at the last claim (always true without limits):
    /// claims may go ahead of free threads and on the second lane.
    pub(crate) relaxed: AtomicBool,
    /// When a claim last counted the slots in use: a relaxed claim of the same claimer
    /// within [`COUNT_EVERY`] does not count.
    pub(crate) count_clock: CountClock,
    /// Where the primary lane's half of each limit starts (a fraction of it); the second
    /// lane's half starts half a limit away (see [`SlotCursor`]).
    pub(crate) slot_shift: f64,
    /// An error no retry can fix (a transaction pooler the pool was not told about): the
    /// worker stops and `run()` returns it.
    pub(crate) fatal: std::sync::Mutex<Option<crate::Error>>,
    /// The primary lane's state while no thread leads (see [`Dispatcher::take_lead`]).
    pub(crate) parked_lead: std::sync::Mutex<Option<Lead<'a>>>,
    /// When each rate-limited job was claimed, for its start.
    pub(crate) rate_gate: &'a RateGate,
}

/// The primary lane's own state. It moves with the lead: whichever thread leads runs the
/// lane with it ([`Dispatcher::lead`]).
pub(crate) struct Lead<'a> {
    /// The lane's claim connection.
    conn: LoopConn<'a>,
    /// Where the lane takes its slots (see [`SlotCursor`]).
    slots: SlotCursor,
    /// Where the lane reads the queue from, and when it sweeps (see `floors`).
    reader: Reader,
    rng: Jitter,
    /// How long to wait after a failed claim.
    backoff: Duration,
    /// How long to wait before looking again when only rates bind and due jobs were left
    /// with no unit to wait for (see [`Dispatcher::after_empty_claim`]): doubling while
    /// it lasts, from a millisecond to [`MIN_POLL`].
    rate_poll: Duration,
    /// No claim is worth running before this unless the doorbell says something changed.
    quiet_until: Option<Instant>,
    /// The last claim filled every thread it reserved: more work is likely waiting.
    last_full: bool,
    /// A claim found due jobs it could not take: the limits, not the queue, are what
    /// bounds claims until a slot comes free (new jobs do not end a quiet spell).
    limit_full: bool,
    /// Each entrypoint's limit, where every one has a limit ([`Dispatcher::free_slots`]).
    slot_limits: Option<Vec<usize>>,
    /// Claims a new-jobs notification asked for that found nothing: past the budget, such
    /// a notification ends a quiet spell only at the budget's pace (see `alarms`).
    alarms: FalseAlarms,
    /// Held while the lane dispatches: its drop tells the threads that no job can be
    /// handed over any more.
    _dispatching: Sender<()>,
}

/// What the second lane waits on.
pub(crate) struct SecondLane {
    /// The last claim took a full batch with threads to spare: the second lane claims.
    batch_bound: AtomicBool,
    /// Wakes the second lane when claims become batch-bound.
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
}

impl Default for SecondLane {
    fn default() -> Self {
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        SecondLane {
            batch_bound: AtomicBool::new(false),
            wake_tx,
            wake_rx,
        }
    }
}

/// What a step of the primary lane leaves the loop to do.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per claim, moved once: boxing would allocate on the lone job's path"
)]
enum Step {
    /// Look again from the top (after a wait, a claim, an error).
    Again,
    /// This thread is to run the job (the lead is parked for the next free thread).
    Run(Job),
    /// Dispatching ends (shutdown requested, a drain finished, a fatal error).
    Stop,
}

impl<'a> Dispatcher<'a> {
    /// The primary lane's first state, holding `dispatching` until the lane stops. Whoever
    /// leads first takes it ([`Dispatcher::take_lead`]).
    pub(crate) fn first_lead(&self, dispatching: Sender<()>) {
        let lead = Lead {
            conn: LoopConn::new(&self.config.pool),
            slots: SlotCursor::new(self.slot_shift),
            // With a second lane, that lane sweeps and looks for stale jobs; a drain, which
            // must see every job before it stops, does both on this lane too.
            reader: Reader::new(
                Instant::now(),
                self.config.heartbeat_interval(),
                self.config.lanes < 2 || self.drain,
            ),
            rng: Jitter::new(0),
            backoff: Duration::from_millis(50),
            rate_poll: RATE_MIN_WAIT,
            quiet_until: None,
            last_full: false,
            limit_full: false,
            slot_limits: self.slot_limits(),
            alarms: FalseAlarms::new(Instant::now()),
            _dispatching: dispatching,
        };
        *lock(&self.parked_lead) = Some(lead);
    }

    /// The lead, if no thread holds it. A thread looking for work takes it before any
    /// job: a thread that took the lead runs no job until it gives the lead away.
    pub(crate) fn take_lead(&self) -> Option<Lead<'a>> {
        let lead = {
            let mut parked = lock(&self.parked_lead);
            // Every thread back from a job looks here first, and the lead is seldom
            // parked: `take` alone copies the whole (empty) state out each time.
            if parked.is_none() {
                return None;
            }
            parked.take()?
        };
        if self.ledger.waiting() > 0 {
            // The wake that brought this thread was meant for a job, perhaps.
            self.ledger.wake_one();
        }
        Some(lead)
    }

    /// Runs the primary lane on this thread until a claim takes a lone job on an idle
    /// worker: then the lead is parked for the next thread that looks for work, and this
    /// thread is to run the job returned. `None` once dispatching has ended (shutdown, a
    /// finished drain, a fatal error).
    ///
    /// Each round waits out what makes a claim pointless now, in this order, and looks
    /// again from the top after any wait: the completer's backlog, too few free threads,
    /// a quiet spell, every slot held by this worker's own jobs. Then it claims.
    pub(crate) fn lead(&self, mut lead: Lead<'a>) -> Option<Job> {
        while !self.shutdown.is_shutdown() {
            self.stats.liveness.claim_loop_ran();
            self.limits_in_force(&mut lead);
            if self.waited_for_completer()
                || self.waited_for_threads(&lead)
                || self.waited_out_quiet_spell(&mut lead)
            {
                continue;
            }
            let Some(free) = self.free_slots_or_wait(&lead) else {
                continue;
            };
            let take = self.ledger.reserve(self.config.batch_size.min(free));
            if take == 0 {
                continue;
            }
            match self.claim_and_hand_over(&mut lead, take) {
                Step::Again => {}
                Step::Run(job) => {
                    *lock(&self.parked_lead) = Some(lead);
                    self.ledger.wake_one();
                    self.wake_second_lane();
                    return Some(job);
                }
                Step::Stop => break,
            }
        }
        self.release_unstarted();
        None
    }

    /// Puts stored limits that changed in force before the next claim (see
    /// [`LimitWatch::reload`]): the claims run with them from now on, claiming carefully
    /// until a claim finds every limit far from full again.
    fn limits_in_force(&self, lead: &mut Lead<'_>) {
        self.doorbell.take(Wake::LimitsStored);
        match lead
            .conn
            .run(|c| self.limits.reload(c, &self.config.claimer))
        {
            Ok(false) => {}
            Ok(true) => {
                let current = self.limits.effective();
                self.relaxed
                    .store(!current.is_capacity_gated(), Ordering::SeqCst);
                self.ledger.allow_ahead(!current.is_capacity_gated());
                lead.slot_limits = slot_limits_of(&current);
                lead.quiet_until = None;
                lead.limit_full = false;
            }
            Err(e) => log::warn!("pgqueuer could not read the stored limits (trying again): {e}"),
        }
    }

    /// Waits while the completer is behind (so many jobs owned that their rows and slots
    /// would only pile up): claims resume once it has written what ran.
    fn waited_for_completer(&self) -> bool {
        let backlog = || self.ledger.owned() >= self.config.threads + BACKLOG_LIMIT;
        if !backlog() {
            return false;
        }
        let soon = Instant::now() + Duration::from_millis(50);
        self.wait_while(&[Wake::Written], soon, backlog);
        self.doorbell.take(Wake::Written);
        true
    }

    /// Waits while too few threads are free for a claim to be worth its commit (see
    /// [`super::room::Room::enough`]); after a full claim, gathers the threads coming
    /// back ([`GATHER`]).
    fn waited_for_threads(&self, lead: &Lead<'_>) -> bool {
        let enough = self.ledger.enough(self.config.batch_size);
        if self.ledger.room() >= enough {
            return false;
        }
        let poll = Instant::now() + self.config.dequeue_timeout;
        self.doorbell.want_threads(enough);
        self.wait_while(&[Wake::ThreadFree], poll, || self.ledger.room() < enough);
        self.doorbell.take(Wake::ThreadFree);
        if lead.last_full {
            self.gather();
        }
        true
    }

    /// Waits while a quiet spell lasts (after a claim that found nothing, until something
    /// rings that may change that, see [`Dispatcher::quiet_ends`], or the spell ends).
    fn waited_out_quiet_spell(&self, lead: &mut Lead<'_>) -> bool {
        let Some(until) = lead.quiet_until else {
            return false;
        };
        let limit_full = lead.limit_full;
        let now = Instant::now();
        let heard = lead.alarms.heard(now);
        if now < until && !self.quiet_ends(limit_full, heard) {
            // New jobs not heard yet are looked at once the budget allows.
            let until = if heard {
                until
            } else {
                until.min(lead.alarms.heard_from(now))
            };
            self.wait_while(&self.quiet_breakers(), until, || {
                !self.quiet_ends(limit_full, heard)
            });
            return true;
        }
        lead.quiet_until = None;
        false
    }

    /// The slots this worker's own jobs leave free (`usize::MAX` where some entrypoint
    /// has no limit); `None` after waiting, while this worker holds every slot (only its
    /// own jobs' ends can free one).
    fn free_slots_or_wait(&self, lead: &Lead<'_>) -> Option<usize> {
        let Some(limits) = lead.slot_limits.as_deref() else {
            return Some(usize::MAX);
        };
        let free = self.free_slots(limits);
        if free > 0 {
            return Some(self.gather_slots(limits, free));
        }
        let poll = Instant::now() + self.config.dequeue_timeout;
        self.wait_while(&[Wake::Outcomes, Wake::Written], poll, || {
            self.free_slots(limits) == 0
        });
        self.doorbell.take(Wake::Outcomes);
        self.doorbell.take(Wake::Written);
        None
    }

    /// With slots, not threads, bounding the claim (`free` of this worker's slots free,
    /// fewer than a claim could use) and this worker's own short jobs about to end, waits
    /// up to [`GATHER`] for their slots, so that one claim, and one commit, takes them
    /// all again rather than one claim for the first slot back and another for the rest.
    /// Returns the free slots then. A job that runs long delays the claim by at most
    /// this.
    fn gather_slots(&self, limits: &[usize], free: usize) -> usize {
        let usable = self
            .config
            .batch_size
            .min(self.config.threads)
            .min(limits.iter().fold(0, |a, l| a.saturating_add(*l)));
        let target = usable.min(free + self.ledger.owned());
        if free >= target || !self.ledger.handlers_shorter_than(GATHER) {
            return free;
        }
        let until = Instant::now() + GATHER;
        self.wait_while(&[Wake::Outcomes, Wake::Written], until, || {
            self.free_slots(limits) < target
        });
        self.free_slots(limits)
    }

    /// Claims up to `take` jobs (the room reserved for them) and hands them over, or
    /// keeps a lone one for this thread; after an empty claim, decides when to look
    /// again ([`Dispatcher::after_empty_claim`]).
    fn claim_and_hand_over(&self, lead: &mut Lead<'_>, take: usize) -> Step {
        // This claim's snapshot covers every change rung so far.
        let asked_by_new_jobs = self.doorbell.take(Wake::Changed);
        for why in [
            Wake::Freed,
            Wake::Resync,
            Wake::Written,
            Wake::Outcomes,
            Wake::LimitsChanged,
        ] {
            self.doorbell.take(why);
        }
        let claim = match self.claim(
            &mut lead.conn,
            &mut lead.slots,
            &mut lead.reader,
            take,
            true,
        ) {
            Ok(claim) => claim,
            Err(e) if e.is_pooler_mismatch() => {
                log::error!("pgqueuer claim failed; stopping the worker: {e}");
                *lock(&self.fatal) = Some(e);
                self.shutdown.shutdown();
                return Step::Stop;
            }
            Err(e) => {
                let backoff = lead.backoff;
                log::warn!("pgqueuer claim failed (retrying in {backoff:?}): {e}");
                self.shutdown.sleep(backoff);
                lead.backoff = (backoff * 2).min(Duration::from_secs(5));
                return Step::Again;
            }
        };
        lead.backoff = Duration::from_millis(50);
        let n = claim.jobs.len();
        if n > 0 {
            lead.rate_poll = RATE_MIN_WAIT;
        }
        lead.last_full = n == take;
        if self.drain && !claim.lost_race() {
            // The queue ran short: the jobs running now are the drain's last, and
            // gathering their ends would only delay its return.
            self.ledger.outcomes().hurry(n < take && !self.binding());
        }
        if n == 0 {
            if asked_by_new_jobs && !claim.lost_race() {
                lead.alarms.spent(Instant::now());
            }
            return self.after_empty_claim(lead, claim.lost_race(), claim.rate_wait);
        }
        lead.limit_full = false;
        if let Some(wait) = claim.rate_wait {
            // A rate limit held some of the due jobs back: the next claim is worth its
            // statement once a unit has rested.
            self.wait_for_rate(lead, wait);
        }
        // A partial batch took everything due as of its snapshot (unless slots or locked
        // rows were what it lacked): until something changes, another claim would find
        // nothing. Deferred jobs are looked for again after the shortest idle wait.
        if n < take && !claim.lost_race() && !self.binding() {
            lead.quiet_until = Some(Instant::now() + MIN_POLL);
        }
        let mut jobs = self.hold(claim.jobs);
        // A lone job on an idle worker: rather than wake a thread for it (a wake-up on
        // its way from enqueue to start), this thread runs it and the lead goes to the
        // next free thread. A batch is handed over whole: its wake-ups overlap the next
        // claim, and passing the lead would put one more wake-up in front of its other
        // jobs.
        if jobs.len() == 1 && self.ledger.only(1) && self.ledger.keep_one() {
            return jobs.pop().map_or(Step::Again, Step::Run);
        }
        if !jobs.is_empty() {
            self.ledger.hand_over(jobs);
            self.wake_second_lane();
        }
        Step::Again
    }

    /// After a claim that found nothing: claim again at once if something may have
    /// arrived since its snapshot, stop a finished drain, or start a quiet spell that
    /// lasts until the next deferred job is due (or another worker's job goes stale).
    fn after_empty_claim(
        &self,
        lead: &mut Lead<'_>,
        lost_race: bool,
        rate_wait: Option<Duration>,
    ) -> Step {
        let config = self.config;
        log::trace!("empty claim (lost race: {lost_race}, rate wait: {rate_wait:?})");
        if lost_race {
            // The winner has committed; claim again in a moment.
            std::thread::sleep(lead.rng.duration(Duration::from_micros(500)));
            return Step::Again;
        }
        if let Some(wait) = rate_wait {
            self.wait_for_rate(lead, wait);
            return Step::Again;
        }
        let binding = self.binding();
        let arrived = self.doorbell.is_pending(Wake::Changed) && lead.alarms.heard(Instant::now());
        if self.doorbell.is_pending(Wake::Resync)
            || self.doorbell.is_pending(Wake::Freed)
            || self.doorbell.is_pending(Wake::LimitsChanged)
            || (arrived && !binding)
        {
            // Jobs may have arrived, slots come free or limits changed after this
            // claim's snapshot.
            return Step::Again;
        }
        // A drain stops on finding nothing queued only if the worker held nothing from
        // before the look until after it: a job it held meanwhile could have been
        // retried, or a handler could have queued another, after the look's snapshot.
        let rest = if self.drain {
            self.ledger.rest_mark()
        } else {
            None
        };
        if self.drain && !binding {
            // Nothing queued (asked in a way that stays cheap right after a drain, see
            // `sql::queue_any_queued`; `next_wake`'s first look then walks every index
            // entry the drained rows left, 10 ms after 50,000 jobs): stop once everything
            // claimed is written, and until then wait for the writes, or for the room
            // another lane's claim holds (or anything else that rings). With nothing
            // queued, nothing deferred is to be waited for.
            let any = match self.limits.claimer() {
                Some(claimer) => lead.conn.run(|c| claimer.any_queued(c)).unwrap_or_else(|e| {
                    log::debug!("pgqueuer drain: could not ask whether jobs are queued ({e}); looking for the next due one instead");
                    true
                }),
                None => true,
            };
            if !any {
                if self.stopped_finished_drain(rest) {
                    return Step::Stop;
                }
                lead.limit_full = false;
                let soon = Instant::now() + MIN_POLL;
                // The other lane's claim that finds nothing writes nothing: the room it
                // gives back, whole again, is what ends the wait then.
                self.doorbell.take(Wake::ThreadFree);
                self.doorbell.want_threads(usize::MAX);
                self.wait_while(&[Wake::Written, Wake::ThreadFree], soon, || {
                    !self.ledger.at_rest() && !self.doorbell.is_pending(Wake::Written)
                });
                return Step::Again;
            }
        }
        // Paused entrypoints (see `limits`) are not waited for; with every one paused,
        // look again when the slots are next looked at. A job of another worker going
        // stale (its worker presumed dead) is a reason to look again as much as a
        // deferred job coming due.
        // A drain must see every job; a lane that runs on asks only about jobs due from a
        // second ago on (its sweeps and stale looks find the rest, see `floors`).
        let next = match self.limits.claimer() {
            Some(claimer) => lead
                .conn
                .run(|c| {
                    if self.drain {
                        claimer.next_wake(c)
                    } else {
                        claimer.next_wake_recent(c)
                    }
                })
                .unwrap_or(NextWake {
                    queued: Some(MIN_POLL),
                    stale: None,
                }),
            None => NextWake {
                queued: Some(super::limits::CHECK_INTERVAL),
                stale: None,
            },
        };
        let next_due = next.queued;
        if binding && next_due == Some(Duration::ZERO) && !self.limits.effective().has_slots() {
            // Only rates bind, and due jobs were left with no unit to wait for: their
            // units (or the jobs) were held by claims in flight, which commit in a moment,
            // or the jobs by a longer transaction (or this worker's budget is full). No
            // deletion frees a unit, so none would ring: look again soon, and later each
            // time while it lasts.
            let wait = lead.rate_poll;
            lead.rate_poll = (wait * 2).min(MIN_POLL);
            self.wait_for_rate(lead, wait);
            return Step::Again;
        }
        if binding {
            // Due jobs that the claim did not take wait for slots: new jobs would not
            // change that. Otherwise they might.
            lead.limit_full = next_due == Some(Duration::ZERO);
            if !lead.limit_full && arrived {
                return Step::Again;
            }
        } else {
            // Set while a limit bound, it would keep new jobs from ending the quiet spell.
            lead.limit_full = false;
        }
        if self.drain && next_due.is_none() {
            if self.stopped_finished_drain(rest) {
                return Step::Stop;
            }
            // Jobs are still running or being written: look again soon.
            lead.quiet_until = Some(Instant::now() + MIN_POLL);
            return Step::Again;
        }
        // Without LISTEN (a transaction pooler and no listen DSN) nothing rings for new
        // jobs: look at least every poll interval.
        let longest = config.poll_interval.unwrap_or(config.dequeue_timeout);
        let wait = match next.soonest() {
            Some(due) => due.clamp(MIN_POLL, longest),
            None => longest,
        };
        if self.drain && wait > MIN_POLL {
            log::info!(
                "pgqueuer drain: nothing is due, but a queued job is deferred (due in {:?}); \
                 waiting {wait:?} before looking again (run_until_empty waits for deferred \
                 jobs)",
                next_due.unwrap_or_default()
            );
        }
        log::trace!(
            "quiet for {wait:?} (next due {next_due:?}, stale {:?}, limit full {})",
            next.stale,
            lead.limit_full
        );
        // No later than the lane's next sweep or stale look: rows behind its floors, and
        // other workers' stale jobs, ring nothing.
        let until = Instant::now() + wait;
        lead.quiet_until = Some(lead.reader.look_by().map_or(until, |by| until.min(by)));
        Step::Again
    }

    /// With nothing queued (the caller found none, looking after `rest` was marked):
    /// stops the drain if the worker held nothing from the mark until now, and says
    /// whether it did. Nothing running or waiting to be written is not enough: another
    /// lane's claim may have taken the last jobs after this lane's snapshot and committed
    /// without having handed them over yet (it still holds the room it reserved), and a
    /// job written after the look's snapshot may have been a retry (see
    /// [`Ledger::rest_mark`]).
    fn stopped_finished_drain(&self, rest: Option<u64>) -> bool {
        if self.ledger.rested_since(rest) {
            log::debug!("drain: nothing queued and nothing running; stopping");
            self.shutdown.shutdown();
            return true;
        }
        false
    }

    /// Starts a quiet spell until a rate limit allows the next start, `wait` from now (no
    /// claim runs before then unless something else rings that may let one take a job).
    /// Where every entrypoint is rate-limited, new jobs do not end it: they would wait for
    /// the same units.
    fn wait_for_rate(&self, lead: &mut Lead<'_>, wait: Duration) {
        let wait = wait.max(RATE_MIN_WAIT);
        log::trace!("rate limit: next start in {wait:?}");
        lead.limit_full = self.limits.effective().all_rate_limited();
        lead.quiet_until = Some(Instant::now() + wait);
    }

    /// Whether a limit may bind: this worker declares limits and the last claim did not
    /// find every one far from full. While none binds, a claim that took less than it
    /// asked for or nothing at all means what it means without limits (nothing more was
    /// due as of its snapshot), not that slots ran out: the lanes keep the same quiet
    /// spells, and new jobs are worth a claim at once.
    fn binding(&self) -> bool {
        self.limits.effective().is_capacity_gated() && !self.relaxed.load(Ordering::SeqCst)
    }

    /// At shutdown: the claimed jobs still waiting for a thread go back to the queue now
    /// (a job a thread takes later is given back by the executor).
    fn release_unstarted(&self) {
        let n = self.ledger.release_unstarted();
        if n > 0 {
            log::debug!("shutdown: giving {n} unstarted jobs back to the queue");
        }
    }

    /// With threads coming back from a full claim's jobs, waits up to [`GATHER`] for as
    /// many as a claim could use, so that one claim (and one commit) serves them.
    fn gather(&self) {
        let target = self.config.batch_size.min(self.config.threads);
        let until = Instant::now() + GATHER;
        self.doorbell.want_threads(target);
        self.wait_while(&[Wake::ThreadFree], until, || self.ledger.room() < target);
        self.doorbell.take(Wake::ThreadFree);
    }

    /// True when the room for jobs is worth a claim (see [`Ledger::enough`]).
    fn room_for_a_claim(&self) -> bool {
        self.ledger.room() >= self.ledger.enough(self.config.batch_size)
    }

    /// The second lane: claims while claims come back full batches.
    pub(crate) fn run_second(&self) {
        let config = self.config;
        let mut conn = LoopConn::new(&config.pool);
        let mut slots = SlotCursor::new((self.slot_shift + 0.5).fract());
        let mut reader = Reader::new(Instant::now(), config.heartbeat_interval(), true);
        loop {
            // Until claims come back full batches, or the next sweep, stale look or count
            // (while relaxed claims of limits count on this lane only).
            let count_by = self.count_by();
            let by = match (reader.look_by(), count_by) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let wait = by
                .map_or(config.dequeue_timeout, |by| {
                    by.saturating_duration_since(Instant::now())
                })
                .max(Duration::from_millis(1));
            select! {
                recv(self.second.wake_rx) -> _ => {},
                recv(self.shutdown.receiver()) -> _ => {
                    self.release_unstarted();
                    return;
                }
                default(wait) => {}
            }
            let now = Instant::now();
            if !self.second.batch_bound.load(Ordering::SeqCst)
                && (reader.look_by().is_some_and(|by| now >= by)
                    || self.count_by().is_some_and(|by| now >= by))
            {
                self.sweep_or_look(&mut conn, &mut slots, &mut reader);
            }
            while !self.shutdown.is_shutdown()
                && self.second.batch_bound.load(Ordering::SeqCst)
                && self.room_for_a_claim()
            {
                let take = self.ledger.reserve(config.batch_size);
                if take == 0 {
                    break;
                }
                match self.claim(&mut conn, &mut slots, &mut reader, take, false) {
                    Ok(claim) => {
                        let jobs = self.hold(claim.jobs);
                        self.ledger.hand_over(jobs);
                    }
                    Err(e) => {
                        log::warn!("pgqueuer claim failed on the second connection: {e}");
                        self.second.batch_bound.store(false, Ordering::SeqCst);
                        self.shutdown.sleep(Duration::from_millis(50));
                    }
                }
            }
        }
    }

    /// When the second lane should claim to count the slots in use: while claims of
    /// limits are relaxed, at the end of the count window (a claim that counts starts
    /// the next).
    fn count_by(&self) -> Option<Instant> {
        let gated = self.limits.claimer().is_some_and(|c| c.is_capacity_gated());
        if !(gated && self.relaxed.load(Ordering::SeqCst)) {
            return None;
        }
        Some(self.count_clock.next_due().unwrap_or_else(Instant::now))
    }

    /// The second lane's sweep, stale look or count, due now: one claim of what room
    /// there is (a moment later when there is none).
    fn sweep_or_look(&self, conn: &mut LoopConn<'_>, slots: &mut SlotCursor, reader: &mut Reader) {
        let take = self.ledger.reserve(self.config.batch_size);
        if take == 0 {
            self.shutdown.sleep(Duration::from_millis(20));
            return;
        }
        match self.claim(conn, slots, reader, take, false) {
            Ok(claim) => {
                let jobs = self.hold(claim.jobs);
                if !jobs.is_empty() {
                    self.ledger.hand_over(jobs);
                }
            }
            Err(e) => {
                log::warn!("pgqueuer sweep failed on the second connection: {e}");
                self.shutdown.sleep(Duration::from_millis(50));
            }
        }
    }

    /// Claims up to `take` jobs (the threads reserved for them), its slots taken (or
    /// searched for) from where `slots` is, folding in whatever outcomes the completer offers
    /// when `fold`; gives back the threads the claim did not fill, and learns from the
    /// slots in use whether the limits are far from binding. A claim moves `slots` past
    /// the slots it took, or, after losing a slot race, to a random place.
    fn claim(
        &self,
        conn: &mut LoopConn<'_>,
        slots: &mut SlotCursor,
        reader: &mut Reader,
        take: usize,
        fold: bool,
    ) -> crate::Result<Claim> {
        let config = self.config;
        let outcomes = if fold {
            self.ledger.for_claim()
        } else {
            Vec::new()
        };
        let started = Instant::now();
        let claimer = self.limits.claimer();
        // While every limit is far from full, the lanes' claims skip each other's rows.
        let relaxed = self.relaxed.load(Ordering::SeqCst);
        // Rates far from binding: the units come from a lease (see `rate_gate`).
        let leased = match &claimer {
            Some(claimer) if relaxed && claimer.is_rate_limited() => {
                match conn.run(|c| self.rate_gate.reserve(claimer, c, take)) {
                    Ok(leased) => leased,
                    Err(e) => {
                        log::debug!("pgqueuer could not lease rate-limit units: {e}");
                        None
                    }
                }
            }
            _ => None,
        };
        let used = match (&claimer, &leased) {
            (Some(_), Some(leased)) => Some(&leased.plain),
            (claimer, _) => claimer.as_ref(),
        };
        // Careful claims always count; a relaxed one of limits once per window, on the
        // second lane where there is one: a count reads every version of the jobs held,
        // which a held snapshot makes tens of milliseconds, and the first lane's claims
        // carry the jobs that must start at once.
        let counts_here = self.config.lanes < 2 || !fold;
        let took_window = relaxed
            && counts_here
            && used.is_some_and(|used| {
                used.is_capacity_gated() && self.count_clock.take(used, started)
            });
        let count = !relaxed || took_window;
        let plan = reader.plan(started);
        let mut claimed = match used {
            Some(used) => conn.run(|c| {
                used.claim_from(
                    c,
                    &outcomes,
                    take,
                    slots.at,
                    relaxed,
                    count,
                    reader.reading(plan),
                )
            }),
            // Every entrypoint is paused: write the outcomes alone, claim nothing.
            None => conn
                .run(|c| config.claimer.complete(c, &outcomes))
                .map(|ended| Claim {
                    ended,
                    ..Claim::default()
                }),
        };
        match (&claimed, used) {
            (
                Ok(Claim {
                    in_use: Some(_), ..
                }),
                Some(used),
            ) => self.count_clock.counted(used, started, Instant::now()),
            // A count taken for this claim did not come back (an error, a lost race):
            // the next relaxed claim counts.
            _ if took_window => self.count_clock.release(started),
            _ => {}
        }
        if let (Ok(claim), Some(_)) = (&claimed, used) {
            reader.claimed(plan, started, Instant::now(), &claim.jobs);
        }
        let written = claimed.as_ref().map_or(&[][..], |c| &c.ended[..]);
        self.ledger.after_claim(outcomes, written);
        let taken = claimed.as_ref().map_or(0, |c| c.jobs.len());
        if taken < take {
            self.ledger.unreserve(take - taken);
            // The primary lane may be waiting for the room this claim held (a second
            // lane's sweep reserves room every second): say it is free again. It rings
            // only where the lane waits for that much room; waiting instead for the next
            // job to end would leave idle threads idle while a long job runs, for up to
            // the dequeue timeout.
            self.doorbell
                .thread_freed(self.ledger.room(), self.ledger.most_room());
        }
        if let (Ok(claim), Some(claimer)) = (&claimed, &claimer) {
            slots.advance(claimer, claim, config.batch_size);
        }
        if let Some(leased) = &leased {
            let jobs = claimed.as_ref().map_or(&[][..], |c| &c.jobs[..]);
            self.rate_gate.settle(leased, jobs);
            if let Ok(claim) = &mut claimed {
                claim.rate_plenty = leased.plenty;
            }
        }
        if let Ok(claim) = &claimed {
            if let Some(claimer) = claimer.as_ref().filter(|c| c.is_rate_limited()) {
                let (sent, ahead) = leased
                    .as_ref()
                    .map_or((started, Duration::ZERO), |l| (l.sent, l.life));
                self.rate_gate.claimed(claimer, &claim.jobs, sent, ahead);
            }
            let lost = match claim.lost {
                Some(LostRace::Slot) => Some(Lost::SlotRace),
                Some(LostRace::Deadlock) => Some(Lost::Deadlock),
                _ => None,
            };
            self.stats.claimed(
                started.elapsed(),
                claim.jobs.iter().map(|j| j.entrypoint.as_str()),
                lost,
                claimer.as_ref().is_some_and(|c| c.is_capacity_gated())
                    && self.relaxed.load(Ordering::SeqCst),
            );
            self.stats
                .load(self.ledger.owned() + taken, self.ledger.idle_threads());
        }
        if let (Ok(claim), Some(claimer)) = (&claimed, &claimer)
            && claim.lost.is_none()
        {
            let relaxed = claimer.far_from_full(claim, config.relax_margin);
            if relaxed != self.relaxed.swap(relaxed, Ordering::SeqCst) {
                log::debug!(
                    "limits far from binding: {relaxed} (slots in use {:?})",
                    claim.in_use
                );
            }
            self.ledger.allow_ahead(relaxed);
        }
        if relaxed && matches!(&claimed, Ok(c) if c.lost == Some(LostRace::Slot)) {
            // The slots ahead of this lane were held: the next claim searches for free
            // ones, and says again whether the limits are far from full.
            self.relaxed.store(false, Ordering::SeqCst);
            self.ledger.allow_ahead(false);
        }
        if let Ok(claim) = &claimed {
            self.second.batch_bound.store(
                config.lanes > 1
                    && taken == take
                    && take == config.batch_size
                    && self.relaxed.load(Ordering::SeqCst),
                Ordering::SeqCst,
            );
            log::trace!(
                "claimed {taken} jobs ({take} threads reserved, lost race: {:?})",
                claim.lost
            );
        }
        claimed
    }

    /// Each entrypoint's concurrency limit, in registration order, where every one has a
    /// limit (`None` otherwise: slots cannot bound every claim).
    fn slot_limits(&self) -> Option<Vec<usize>> {
        slot_limits_of(&self.limits.effective())
    }

    /// The slots of `limits` that this worker's own jobs leave free (see
    /// [`Ledger::owned_per_entrypoint`]). Other workers' jobs are not seen here: a claim
    /// may find fewer.
    fn free_slots(&self, limits: &[usize]) -> usize {
        let owned = self.ledger.owned_per_entrypoint(limits.len());
        limits
            .iter()
            .zip(owned)
            .map(|(l, h)| l.saturating_sub(h))
            .sum()
    }

    /// Wakes the second lane if claims come back full and there is room for another.
    fn wake_second_lane(&self) {
        if self.second.batch_bound.load(Ordering::SeqCst) && self.room_for_a_claim() {
            let _ = self.second.wake_tx.try_send(());
        }
    }

    /// Holds claimed jobs, before any of them can start; returns those to run (see
    /// [`Ledger::claimed`]).
    fn hold(&self, jobs: Vec<Job>) -> Vec<Job> {
        let registry = &self.config.registry;
        self.ledger.claimed(jobs, |name| {
            registry.by_name.get(name).map_or(usize::MAX, |e| e.index)
        })
    }

    /// True when something rang that ends a quiet spell: new jobs (unless the limits
    /// are what holds claims back), a slot freed by any worker, a change of the limits
    /// in force, a reconnected listener, written outcomes (slots freed), or outcomes
    /// waiting to be folded into a claim. It only reads: the claim that follows takes
    /// the reasons.
    fn quiet_ends(&self, limit_full: bool, changed_heard: bool) -> bool {
        (self.doorbell.is_pending(Wake::Changed) && !limit_full && changed_heard)
            || self.doorbell.is_pending(Wake::Freed)
            || self.doorbell.is_pending(Wake::LimitsChanged)
            || self.doorbell.is_pending(Wake::Resync)
            || self.doorbell.is_pending(Wake::Written)
            || self.ledger.outcomes().waiting_for_claim()
    }

    /// The conditional reasons that end a quiet spell: written outcomes free slots where
    /// slots are scarce, and in a drain may be the last ones (the drain then ends as soon
    /// as they are written, not at the spell's end); outcomes waiting to be folded are a
    /// reason to claim.
    fn quiet_breakers(&self) -> Vec<Wake> {
        let mut wanted = Vec::with_capacity(2);
        if self.config.slots_scarce || self.drain {
            wanted.push(Wake::Written);
        }
        if self.config.fold_outcomes {
            wanted.push(Wake::Outcomes);
        }
        wanted
    }

    /// Sleeps while `still` holds, until one of `wanted` (or an always-rung reason)
    /// rings, or `deadline`. The reasons are announced before `still` is checked, so a
    /// ring between the check and the sleep is not lost.
    fn wait_while(&self, wanted: &[Wake], deadline: Instant, still: impl Fn() -> bool) {
        self.doorbell.want(wanted);
        if still() {
            self.doorbell.wait(self.shutdown, deadline);
        }
        self.doorbell.want(&[]);
    }
}

/// Each entrypoint's concurrency limit in `claimer` (in registration order), where every
/// one has a limit (`None` otherwise: slots cannot bound every claim).
fn slot_limits_of(claimer: &crate::claim::Claimer) -> Option<Vec<usize>> {
    claimer
        .limits()
        .map(|(_, limit)| usize::try_from(limit).ok().filter(|l| *l > 0))
        .collect()
}

/// Where a lane's claims take (or, carefully, start searching for) their slots (see
/// `sql::claim::relaxed_claim`), as a fraction of each limit: each lane keeps to its own
/// half of the limit, from `home` on (the two lanes' homes are half a limit apart), so
/// that a worker's lanes never take each other's slots. Without that, the lane that
/// claims more often caught up with the other's recent slots about once a lap, and lost
/// a slot race each time (docs/benchmarks.md).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotCursor {
    home: f64,
    at: f64,
}

impl SlotCursor {
    fn new(home: f64) -> SlotCursor {
        SlotCursor { home, at: home }
    }

    /// Moves past `claim`: just past the last slot it gave a job of the limited entrypoint
    /// it took most of (its jobs come in the order their slots were given), which is where
    /// free slots are likeliest, back to the lane's home when the next claim of up to
    /// `batch` would leave the lane's half; to a random place in the half after a lost
    /// slot race (the slots ahead were held, by another worker's lane as likely as not);
    /// nowhere when it took no slot. A batch wider than half the limit is not kept to the
    /// half (no relaxed claim is that wide; careful claims search the whole limit anyway).
    fn advance(&mut self, claimer: &crate::claim::Claimer, claim: &Claim, batch: usize) {
        #[allow(clippy::cast_precision_loss)] // slots and limits far below 2^52
        let width = |limit: i64| batch as f64 / limit as f64;
        if claim.lost == Some(LostRace::Slot) {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            // A multiplicative hash of the clock's nanoseconds, as a fraction.
            let random = f64::from(nanos.wrapping_mul(2_654_435_761)) / 4_294_967_296.0;
            let narrowest = claimer.limits().map(|(_, l)| l).filter(|l| *l > 0).min();
            let span = narrowest.map_or(0.5, |l| (0.5 - width(l)).max(0.0));
            self.at = (self.home + span * random).fract();
            return;
        }
        let busiest = claimer
            .limits()
            .filter(|(_, limit)| *limit > 0)
            .map(|(name, limit)| {
                let mine = claim.jobs.iter().filter(|j| j.entrypoint == name);
                (
                    mine.clone().count(),
                    limit,
                    mine.filter_map(|j| j.slot).next_back(),
                )
            })
            .max_by_key(|(count, _, _)| *count);
        if let Some((taken, limit, Some(last))) = busiest
            && taken > 0
        {
            // Half a slot on, so that the claim's floor(limit * shift) is the next slot
            // whatever the rounding.
            #[allow(clippy::cast_precision_loss)] // slots and limits far below 2^52
            let next = ((last as f64 + 1.5) / limit as f64).rem_euclid(1.0);
            let into_half = (next - self.home).rem_euclid(1.0);
            let width = width(limit);
            self.at = if width < 0.5 && into_half + width > 0.5 {
                self.home
            } else {
                next
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::handoff::tests::test_job;
    use std::collections::BTreeSet;

    /// The slots a relaxed claim of `batch` takes from `at` under `limit`, as the claim
    /// statement computes them.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    fn taken(at: f64, limit: i64, batch: i64) -> Vec<i64> {
        let first = (limit as f64 * at).floor() as i64;
        (0..batch).map(|rank| (first + rank) % limit).collect()
    }

    fn claim_of(slots: &[i64]) -> Claim {
        Claim {
            jobs: slots
                .iter()
                .map(|&slot| {
                    let mut job = test_job(slot);
                    job.slot = Some(slot);
                    job
                })
                .collect(),
            ..Claim::default()
        }
    }

    /// One lane claiming three times as often as the other laps it many times over, and
    /// the two never take the same slot; each goes round the whole of its half.
    #[test]
    fn a_workers_two_lanes_never_take_each_others_slots() {
        for (limit, batch, home) in [
            (1000, 10, 0.0),
            (1000, 10, 0.737),
            (101, 7, 0.31),
            (40, 10, 0.5),
        ] {
            let claimer = crate::Claimer::builder()
                .entrypoint("e", limit)
                .build()
                .unwrap();
            let mut lanes = [SlotCursor::new(home), SlotCursor::new((home + 0.5).fract())];
            let mut ever: [BTreeSet<i64>; 2] = Default::default();
            for step in 0..4_000 {
                let lane = usize::from(step % 4 == 3);
                let slots = taken(lanes[lane].at, i64::from(limit), batch);
                ever[lane].extend(&slots);
                lanes[lane].advance(&claimer, &claim_of(&slots), usize::try_from(batch).unwrap());
            }
            assert!(
                ever[0].is_disjoint(&ever[1]),
                "limit {limit}, batch {batch}, home {home}: both lanes took {:?}",
                ever[0].intersection(&ever[1]).collect::<Vec<_>>()
            );
            for (lane, slots) in ever.iter().enumerate() {
                let half = i64::from(limit) / 2;
                assert!(
                    i64::try_from(slots.len()).unwrap() >= half - batch,
                    "limit {limit}: lane {lane} took only {} slots",
                    slots.len()
                );
            }
        }
    }

    /// After a lost slot race a lane starts again at a random place of its own half.
    #[test]
    fn a_lost_race_moves_a_lane_within_its_half() {
        let claimer = crate::Claimer::builder()
            .entrypoint("e", 1000)
            .build()
            .unwrap();
        let lost = Claim {
            lost: Some(LostRace::Slot),
            ..Claim::default()
        };
        for home in [0.0, 0.25, 0.9] {
            let mut lane = SlotCursor::new(home);
            for _ in 0..200 {
                lane.advance(&claimer, &lost, 10);
                let into_half = (lane.at - home).rem_euclid(1.0);
                assert!(
                    into_half + 0.01 <= 0.5 + 1e-9,
                    "home {home}: at {}",
                    lane.at
                );
                let slots = taken(lane.at, 1000, 10);
                lane.advance(&claimer, &claim_of(&slots), 10);
            }
        }
    }

    /// A relaxed claim that counts takes the window as it is sent: the other lane's claim
    /// sent while that count is in flight does not count too, the first claim after the
    /// window does, and so does the first under new limits (another claimer).
    #[test]
    fn one_count_per_window_whichever_lane_asks() {
        let claimer = Arc::new(Claimer::builder().entrypoint("e", 1000).build().unwrap());
        let t0 = Instant::now();
        let clock = CountClock::default();
        let ms = Duration::from_millis;
        assert!(clock.take(&claimer, t0), "the first claim counts");
        assert!(
            !clock.take(&claimer, t0 + ms(1)),
            "the other lane's claim, sent while the count is in flight, does not"
        );
        clock.counted(&claimer, t0, t0);
        assert!(!clock.take(&claimer, t0 + COUNT_EVERY - ms(1)));
        assert!(
            clock.take(&claimer, t0 + COUNT_EVERY),
            "the first claim after the window counts"
        );
        let renewed = Arc::new(Claimer::builder().entrypoint("e", 500).build().unwrap());
        assert!(
            clock.take(&renewed, t0 + COUNT_EVERY + ms(1)),
            "the first claim under new limits counts"
        );
    }

    /// A count that took long (a held snapshot keeps every version of the jobs held)
    /// stretches the window to twenty times as long; a quick one brings it back.
    #[test]
    fn a_slow_count_spaces_the_next_ones_out() {
        let claimer = Arc::new(Claimer::builder().entrypoint("e", 1000).build().unwrap());
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let clock = CountClock::default();
        assert!(clock.take(&claimer, t0));
        clock.counted(&claimer, t0, t0 + ms(5));
        assert!(!clock.take(&claimer, t0 + ms(99)), "within 20 x 5 ms");
        assert!(clock.take(&claimer, t0 + ms(100)));
        clock.counted(&claimer, t0 + ms(100), t0 + ms(100));
        assert!(clock.take(&claimer, t0 + ms(100) + COUNT_EVERY));
    }

    /// A count that did not come back frees the window for the next claim; a careful
    /// claim's count starts a window, but never moves one back.
    #[test]
    fn a_failed_count_frees_the_window_and_an_older_one_never_moves_it_back() {
        let claimer = Arc::new(Claimer::builder().entrypoint("e", 1000).build().unwrap());
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let clock = CountClock::default();
        assert!(clock.take(&claimer, t0));
        clock.release(t0);
        assert!(
            clock.take(&claimer, t0 + ms(1)),
            "the claim after a failed count counts"
        );
        // Releasing a claim that did not take the window changes nothing.
        clock.release(t0);
        assert!(!clock.take(&claimer, t0 + ms(2)));

        let clock = CountClock::default();
        clock.counted(&claimer, t0, t0);
        assert!(
            !clock.take(&claimer, t0 + ms(5)),
            "a careful claim's count starts a window"
        );
        assert!(clock.take(&claimer, t0 + COUNT_EVERY));
        // A careful claim sent before the window was taken returns late.
        clock.counted(&claimer, t0 + ms(3), t0 + ms(3));
        assert!(
            !clock.take(&claimer, t0 + COUNT_EVERY + ms(5)),
            "an older count moved the window back"
        );
    }
}
