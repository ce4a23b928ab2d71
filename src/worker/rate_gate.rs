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
//!
//! While every rate is far from binding, the worker leases units instead: one statement
//! stamps a few claims' worth of units from each window (`Claimer::lease_units`) with the
//! end of the lease's life (a tenth of the window, at most 100 ms), and the claims made
//! during that life take their jobs from the lease, with the claim statement of a worker
//! without rate limits. Each job still has a unit of its own, counted off the lease as it
//! is claimed, and starts between the lease's statement and the guard after its stamp:
//! a window apart from the unit's uses before and after. Leased units no claim took stay
//! spent: a rate far from binding has them to spare, and the lease takes none once a
//! window is not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::claim::Claimer;
use crate::connect::Conn;
use crate::job::{Job, JobId};
use crate::lock::lock;
use crate::shutdown::ShutdownHandle;

use super::builder::WorkerConfig;
use super::fast_map::FastMap;

/// The shortest wait between two tries of a late start's units.
const RETRY_MIN: Duration = Duration::from_millis(1);

/// The longest wait before spending a late start's units again after the statement took
/// longer than the guard.
const SLOW_MAX: Duration = Duration::from_millis(100);

/// The furthest ahead a late start's units are stamped.
const MAX_AHEAD: Duration = Duration::from_secs(1);

/// When each claimed job of a rate-limited entrypoint was claimed (the claim statement's
/// send), until its handler starts.
#[derive(Default)]
pub(crate) struct RateGate {
    /// Per job: when its claim was sent, how late after that it may start, and the
    /// claimer that claimed it (the limits in force then), whose units a late start spends.
    claimed: Mutex<FastMap<JobId, Claimed>>,
    /// Whether `claimed` ever held a job: a worker without rate limits never takes its
    /// lock, which every job's start would otherwise take.
    gated: AtomicBool,
    /// Units leased for the next claims (see the module docs).
    lease: Mutex<Option<Lease>>,
    /// Numbers the leases, so that a claim gives back only to its own.
    leases: AtomicU64,
}

/// A claimed job of a rate-limited entrypoint, until its handler starts.
struct Claimed {
    sent: Instant,
    allowance: Duration,
    claimer: Arc<Claimer>,
}

/// Units leased ahead of claims.
struct Lease {
    number: u64,
    /// The claimer (limits in force) it was leased for.
    claimer: Arc<Claimer>,
    /// The same without rate limits: the leased claims' statement.
    plain: Arc<Claimer>,
    /// When the lease's statement was sent.
    sent: Instant,
    /// Claims sent after this take no more from it.
    until: Instant,
    /// How far ahead its units are stamped.
    life: Duration,
    /// Units left, per rate-limited entrypoint.
    left: Vec<(String, usize)>,
    /// Every window had twice the margin rested at the lease.
    plenty: bool,
}

/// A claim's share of a lease ([`RateGate::reserve`]).
pub(crate) struct Leased {
    number: u64,
    /// The claimer to claim with.
    pub(crate) plain: Arc<Claimer>,
    /// When the units were leased: the jobs' starts are measured from then.
    pub(crate) sent: Instant,
    /// How far ahead of `sent` the units are stamped: the jobs may start that much later.
    pub(crate) life: Duration,
    /// Units reserved for the claim per rate-limited entrypoint.
    n: usize,
    /// The rates stayed far from binding at the lease.
    pub(crate) plenty: bool,
}

impl RateGate {
    /// Reserves `n` leased units for each rate-limited entrypoint of `claimer`, leasing
    /// anew on `conn` where the lease is another claimer's, too old, or short of `n` (the
    /// few units left of the old one stay spent). `None` when even a new lease cannot
    /// cover the claim (the caller claims with the units' own statement).
    ///
    /// # Errors
    /// The database's error from the lease's statement.
    pub(crate) fn reserve(
        &self,
        claimer: &Arc<Claimer>,
        conn: &mut Conn,
        n: usize,
    ) -> crate::Result<Option<Leased>> {
        let mut lease = lock(&self.lease);
        let usable = lease.as_ref().is_some_and(|l| {
            Arc::ptr_eq(&l.claimer, claimer)
                && Instant::now() < l.until
                && l.left.iter().all(|(_, left)| *left >= n)
        });
        if !usable {
            let Some(life) = claimer.lease_life() else {
                return Ok(None);
            };
            let plain = match lease.as_ref() {
                Some(l) if Arc::ptr_eq(&l.claimer, claimer) => Arc::clone(&l.plain),
                _ => Arc::new(claimer.without_rates()),
            };
            let sent = Instant::now();
            let (left, plenty) = claimer.lease_units(conn, life)?;
            log::trace!("rate lease: {left:?} (plenty: {plenty})");
            *lease = Some(Lease {
                number: self.leases.fetch_add(1, Ordering::Relaxed),
                claimer: Arc::clone(claimer),
                plain,
                sent,
                until: sent + life,
                life,
                left,
                plenty,
            });
        }
        let Some(l) = lease.as_mut() else {
            return Ok(None);
        };
        if l.left.is_empty() || l.left.iter().any(|(_, left)| *left < n) {
            return Ok(None);
        }
        for (_, left) in &mut l.left {
            *left -= n;
        }
        Ok(Some(Leased {
            number: l.number,
            plain: Arc::clone(&l.plain),
            sent: l.sent,
            life: l.life,
            n,
            plenty: l.plenty,
        }))
    }

    /// After a claim made on `leased`: gives back, per entrypoint, the units its jobs
    /// (`jobs`, none after a failed claim) did not take, while the lease is still the
    /// one in use.
    pub(crate) fn settle(&self, leased: &Leased, jobs: &[Job]) {
        let mut lease = lock(&self.lease);
        let Some(l) = lease.as_mut().filter(|l| l.number == leased.number) else {
            return;
        };
        for (entrypoint, left) in &mut l.left {
            let taken = jobs.iter().filter(|j| j.entrypoint == *entrypoint).count();
            *left += leased.n.saturating_sub(taken);
        }
    }

    /// Records that `jobs` were claimed by a statement sent at `sent`, whose units are
    /// stamped `ahead` later (a lease's life; zero for a claim's own units). Only jobs of
    /// rate-limited entrypoints are kept.
    pub(crate) fn claimed(
        &self,
        claimer: &Arc<Claimer>,
        jobs: &[Job],
        sent: Instant,
        ahead: Duration,
    ) {
        let mut claimed = lock(&self.claimed);
        for job in jobs {
            if let Some(allowance) = claimer.start_allowance(&job.entrypoint) {
                // Before the job is handed over (through a channel): its start sees this.
                self.gated.store(true, Ordering::Release);
                claimed.insert(
                    job.id,
                    Claimed {
                        sent,
                        allowance: allowance + ahead,
                        claimer: Arc::clone(claimer),
                    },
                );
            }
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
        if !self.gated.load(Ordering::Acquire) {
            return true;
        }
        let Some(Claimed {
            sent,
            allowance,
            claimer,
        }) = lock(&self.claimed).remove(&job.id)
        else {
            return true;
        };
        if sent.elapsed() <= allowance {
            return true;
        }
        // Fresh units are stamped as their statement runs: the start must follow within
        // the guard. Where the statement itself took longer, the next try stamps its
        // units that much ahead (twice what it took), as a lease does, so that a slow
        // database costs units, never the start.
        let Some(guard) = claimer.start_allowance(&job.entrypoint) else {
            return true;
        };
        let mut ahead = Duration::ZERO;
        let mut backoff = Duration::from_millis(50);
        let mut slow = RETRY_MIN;
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
            let spent = config
                .pool
                .get()
                .map_err(crate::Error::from)
                .and_then(|mut c| {
                    // Measured from the statement's sending: a wait for a pooled connection
                    // is not part of it.
                    let sent = Instant::now();
                    let spent =
                        claimer.spend_late_start_ahead(c.client(), &job.entrypoint, ahead)?;
                    Ok((spent, sent.elapsed()))
                });
            match spent {
                Ok((None, took)) if took <= guard + ahead => return true,
                // Spent, but the statement took longer than the units allow: wait a
                // little longer each time before spending again, so that many late starts
                // at once do not keep the database busier still.
                Ok((None, took)) => {
                    ahead = (took * 2).min(MAX_AHEAD);
                    log::debug!(
                        "spending units for job {} took {took:?}, longer than {:?}; trying \
                         again in {slow:?}, stamping them {ahead:?} ahead",
                        job.id,
                        guard + ahead
                    );
                    shutdown.sleep(slow);
                    slow = (slow * 2).min(SLOW_MAX);
                }
                Ok((Some(wait), _)) => shutdown.sleep(wait.max(RETRY_MIN)),
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
