//! Watching the concurrency limits this worker declares for evidence that another worker
//! (Rust or Python) declares a larger one.
//!
//! Slots are numbered `0..limit`, so a picked job holding slot `n >= limit` was claimed by
//! a worker whose limit is above `n`: with limits that disagree, the highest one wins
//! (PgQueuer's issue #776), and this worker's own limit no longer bounds the entrypoint.
//! One indexed statement, run by the heartbeat thread every [`CHECK_INTERVAL`], reads
//! the highest slot in use per limited entrypoint (a backward scan of the slot index).
//! A disagreement is logged at `warn` at most once a minute per entrypoint, shown in
//! [`crate::WorkerStats`], and, for entrypoints that opt in
//! ([`crate::Entrypoint::pause_on_larger_limit`]), stops this worker claiming them
//! until the evidence is gone.
//!
//! What cannot be seen: a *smaller* limit elsewhere leaves no trace in the slots (its
//! worker takes low slots that this worker could have taken too), and a larger one shows
//! only while its worker holds a slot beyond this worker's limit.
//!
//! Rate limits are watched in the same look: the units spent within each window
//! fleet-wide (the rate in use), and whether some running job of the entrypoint was
//! picked within the window by a worker that stamped no unit of it since (each claim
//! stamps its units with its worker's id), which only a claimer that does not declare the
//! window does (a Python PgQueuer worker, which has no rate limits).
//! Such claims are logged at `warn` at most once a minute per window; this worker goes on
//! keeping its own starts within the limit.
//!
//! The limits watched are those in force: the declared ones, or those an operator stored
//! in the database (`crate::ops::set_limits`), which override them. The listener marks
//! the stored limits stale when their notification comes (and whenever it reconnects, as
//! a notification sent meanwhile was missed); the dispatcher reads them before its next
//! claim ([`LimitWatch::reload`]). A lowered concurrency limit leaves slots at or above it
//! held until their jobs end: those are *draining*, not evidence of a larger limit, until
//! a look finds none of them held.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::entrypoint::Registry;
use crate::claim::Claimer;
use crate::connect::Conn;
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::ops::StoredLimits;
use crate::rate::RateLimit;

/// How often the heartbeat thread looks at the slots in use.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The shortest time between two warnings about one entrypoint.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How long after a failed read of the stored limits the dispatcher reads them again.
const RELOAD_RETRY: Duration = Duration::from_secs(1);

/// The limits in force on a worker, and what was last seen of their slots and units.
pub(crate) struct LimitWatch {
    /// The entrypoints that opted in to pausing beside a larger limit.
    pause_on_larger: Vec<String>,
    /// The claimer with the limits in force: the declared one until stored limits that
    /// differ are read.
    current: Mutex<Arc<Claimer>>,
    /// What is watched of the limits in force.
    state: Mutex<Watching>,
    /// The stored limits may have changed (a notification came, or they were never
    /// read): the dispatcher reads them before its next claim.
    stale: AtomicBool,
    /// A read of the stored limits failed: not again before this.
    retry_at: Mutex<Option<Instant>>,
    /// When an unreadable stored row was last reported.
    unreadable_warned: Mutex<Option<Instant>>,
    /// The claimer without the paused entrypoints, for the claimer in force and the
    /// entrypoints paused when it was made: claims reuse it while neither changes (a lease
    /// of rate-limit units is for one claimer).
    unpaused: Mutex<Option<Unpaused>>,
    /// Some entrypoint is paused (so claims must leave it out). Until the first look at
    /// the slots, every entrypoint that opted in counts as paused: a worker must not take
    /// a slot beside a larger limit it has not looked for yet.
    any_paused: AtomicBool,
}

/// A claimer in force, the entrypoints paused, and the claimer without them (`None`:
/// every entrypoint paused).
type Unpaused = (Arc<Claimer>, Vec<String>, Option<Arc<Claimer>>);

#[derive(Default)]
struct Watching {
    /// Each entrypoint with a concurrency limit in force.
    watched: Vec<Watched>,
    /// Each rate-limit window in force.
    rated: Vec<RatedWatch>,
}

struct Watched {
    entrypoint: String,
    limit: u32,
    /// Stop claiming while a larger limit is evident.
    pause_on_larger: bool,
    /// The highest slot in use at the last look, if any.
    highest_slot: Option<i64>,
    /// Slots in use at the last look.
    in_use: u64,
    /// When the last warning about this entrypoint was logged.
    warned: Option<Instant>,
    /// A larger limit elsewhere was evident at the last look (or nothing has been
    /// looked at yet, for an entrypoint that opted in to pausing).
    larger: bool,
    /// The slots have been looked at.
    looked: bool,
    /// The limit was lowered in force: slots at or above it are still held by jobs
    /// claimed before, and drain as those end.
    draining: bool,
}

struct RatedWatch {
    entrypoint: String,
    limit: RateLimit,
    /// Units spent within the last window, at the last look.
    spent: u64,
    /// Jobs picked within the window by workers that spent no unit, at the last look.
    undeclared: bool,
    /// When the last warning about this window was logged.
    warned: Option<Instant>,
}

/// What the watch knows of one rate-limit window in force (part of
/// [`crate::WorkerStats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateStats {
    /// The entrypoint.
    pub entrypoint: String,
    /// The limit: at most `limit.starts()` starts in any window of `limit.per()`.
    pub limit: RateLimit,
    /// Starts within the last window, by every worker that keeps it, at the last look
    /// (every 10 s): the rate in use, against `limit.starts()`.
    pub starts_in_window: u64,
    /// At the last look, a running job of the entrypoint had been picked within the window
    /// by a worker that counted no start against it: some worker claims the entrypoint
    /// without declaring this limit (Python PgQueuer workers declare none), and the limit
    /// does not hold.
    pub undeclared_claims: bool,
}

/// What the watch knows of one entrypoint with a concurrency limit in force (part of
/// [`crate::WorkerStats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitStats {
    /// The entrypoint.
    pub entrypoint: String,
    /// The concurrency limit in force on this worker: the one it declares, or the one
    /// stored in the database ([`crate::ops::set_limits`]).
    pub limit: u32,
    /// The highest slot in use at the last look (every 10 s), if any.
    pub highest_slot: Option<i64>,
    /// How many slots were in use at the last look, by every worker.
    pub slots_in_use: u64,
    /// A slot in use at or above `limit` proved that another worker declares a larger
    /// limit (at least `highest_slot + 1`).
    pub larger_limit_elsewhere: bool,
    /// This worker has stopped claiming the entrypoint because of it
    /// ([`crate::Entrypoint::pause_on_larger_limit`]).
    pub paused: bool,
}

impl Watching {
    /// What to watch of `claimer`'s limits, keeping what `before` saw of those that stay.
    /// A limit lowered below `before`'s drains.
    fn of(claimer: &Claimer, pause_on_larger: &[String], before: Option<Watching>) -> Watching {
        let mut before = before.unwrap_or_default();
        let watched = claimer
            .limits()
            .filter_map(|(name, limit)| {
                let limit = u32::try_from(limit).ok().filter(|l| *l > 0)?;
                let pause = pause_on_larger.iter().any(|p| p == name);
                let kept = before
                    .watched
                    .iter()
                    .position(|w| w.entrypoint == name)
                    .map(|i| before.watched.swap_remove(i));
                Some(match kept {
                    Some(w) => Watched {
                        draining: w.draining || limit < w.limit,
                        limit,
                        ..w
                    },
                    None => Watched {
                        entrypoint: name.to_owned(),
                        limit,
                        pause_on_larger: pause,
                        highest_slot: None,
                        in_use: 0,
                        warned: None,
                        larger: pause,
                        looked: false,
                        // New in force: slots held above it may be left from the limits
                        // in force before, on this worker or others.
                        draining: true,
                    },
                })
            })
            .collect();
        let rated = claimer
            .rate_windows()
            .into_iter()
            .map(|(entrypoint, limit)| {
                let kept = before
                    .rated
                    .iter()
                    .position(|r| r.entrypoint == entrypoint && r.limit.per() == limit.per())
                    .map(|i| before.rated.swap_remove(i));
                match kept {
                    Some(r) => RatedWatch { limit, ..r },
                    None => RatedWatch {
                        entrypoint,
                        limit,
                        spent: 0,
                        undeclared: false,
                        warned: None,
                    },
                }
            })
            .collect();
        Watching { watched, rated }
    }
}

impl LimitWatch {
    /// The watch of `declared`'s limits (those of `registry`'s entrypoints).
    pub(crate) fn new(registry: &Registry, declared: &Claimer) -> LimitWatch {
        let pause_on_larger: Vec<String> = registry
            .order
            .iter()
            .filter(|name| registry.by_name[*name].options.pause_on_larger_limit)
            .cloned()
            .collect();
        let mut state = Watching::of(declared, &pause_on_larger, None);
        for w in &mut state.watched {
            // Declared limits are the first in force: nothing was lowered.
            w.draining = false;
        }
        let opted_in = state.watched.iter().any(|w| w.pause_on_larger);
        LimitWatch {
            pause_on_larger,
            current: Mutex::new(Arc::new(declared.clone())),
            state: Mutex::new(state),
            stale: AtomicBool::new(true),
            retry_at: Mutex::new(None),
            unreadable_warned: Mutex::new(None),
            unpaused: Mutex::new(None),
            any_paused: AtomicBool::new(opted_in),
        }
    }

    /// True when no limit is in force (nothing to watch).
    pub(crate) fn is_empty(&self) -> bool {
        let state = lock(&self.state);
        state.watched.is_empty() && state.rated.is_empty()
    }

    /// Reads the rate in use of each window in force, warning about claims that spend no
    /// units.
    fn check_rates(&self, conn: &mut Conn, claimer: &Claimer) -> Result<()> {
        if !claimer.is_rate_limited() {
            return Ok(());
        }
        let in_use = claimer.rates_in_use(conn)?;
        let mut state = lock(&self.state);
        for (entrypoint, per, spent, undeclared) in in_use {
            let Some(w) = state
                .rated
                .iter_mut()
                .find(|w| w.entrypoint == entrypoint && w.limit.per() == per)
            else {
                continue;
            };
            w.spent = spent;
            w.undeclared = undeclared > 0;
            if w.undeclared && w.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                w.warned = Some(Instant::now());
                log::warn!(
                    "pgqueuer: entrypoint {entrypoint:?}: {undeclared} of its running jobs \
                     were picked within the last {per:?} by workers that counted no start \
                     against its rate limit of {} ({spent} counted): some worker claims it \
                     without declaring the limit (Python PgQueuer workers have no rate \
                     limits), so the limit does not hold. Serve a rate-limited entrypoint \
                     with workers that declare the same rate limit",
                    w.limit
                );
            }
        }
        Ok(())
    }

    /// What is known of each rate-limit window in force.
    pub(crate) fn rate_stats(&self) -> Vec<RateStats> {
        lock(&self.state)
            .rated
            .iter()
            .map(|w| RateStats {
                entrypoint: w.entrypoint.clone(),
                limit: w.limit,
                starts_in_window: w.spent,
                undeclared_claims: w.undeclared,
            })
            .collect()
    }

    /// Reads the slots in use and updates what is known, warning about disagreements;
    /// true when that paused or resumed an entrypoint.
    ///
    /// # Errors
    /// The database's error.
    pub(crate) fn check(&self, conn: &mut Conn) -> Result<bool> {
        let claimer = self.effective();
        self.check_rates(conn, &claimer)?;
        let names: Vec<String> = lock(&self.state)
            .watched
            .iter()
            .map(|w| w.entrypoint.clone())
            .collect();
        if names.is_empty() {
            let was = self.any_paused.swap(false, Ordering::SeqCst);
            return Ok(was);
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let slots = claimer.slots_in_use(conn, &refs)?;
        let mut state = lock(&self.state);
        let mut any_paused = false;
        let mut changed = false;
        for (name, (highest, in_use)) in names.iter().zip(slots) {
            // The limits may have changed while the slots were read.
            let Some(w) = state.watched.iter_mut().find(|w| w.entrypoint == *name) else {
                continue;
            };
            let was_paused = w.pause_on_larger && w.larger;
            w.highest_slot = highest;
            w.in_use = in_use;
            let above = highest.is_some_and(|h| h >= i64::from(w.limit));
            if !above {
                w.draining = false;
            }
            let larger = above && !w.draining;
            if larger && w.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                w.warned = Some(Instant::now());
                let slot = highest.unwrap_or_default();
                log::warn!(
                    "pgqueuer: entrypoint {:?}: a job holds slot {slot}, so another worker \
                     declares a concurrency limit of at least {}, while this worker's is \
                     {}; the largest limit is the one that holds. Declare the same limit \
                     on every worker, or store one for all ('pgq limits set'){}",
                    w.entrypoint,
                    slot + 1,
                    w.limit,
                    if w.pause_on_larger {
                        "; this worker stops claiming it meanwhile"
                    } else {
                        ""
                    }
                );
            } else if !larger && w.larger && w.looked {
                log::info!(
                    "pgqueuer: entrypoint {:?}: no slot at or above this worker's limit of {} \
                     is held any more{}",
                    w.entrypoint,
                    w.limit,
                    if w.pause_on_larger {
                        "; claiming it again"
                    } else {
                        ""
                    }
                );
            }
            w.larger = larger;
            w.looked = true;
            let paused = larger && w.pause_on_larger;
            changed |= paused != was_paused;
            any_paused |= paused;
        }
        self.any_paused.store(any_paused, Ordering::SeqCst);
        Ok(changed)
    }

    /// The claimer with the limits in force.
    pub(crate) fn effective(&self) -> Arc<Claimer> {
        Arc::clone(&lock(&self.current))
    }

    /// Notes that the stored limits may have changed (their notification came, or one
    /// may have been missed). A read that failed is still retried no sooner than
    /// [`RELOAD_RETRY`] after it.
    pub(crate) fn limits_stored(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    /// Reads the stored limits of `declared`'s entrypoints if they may have changed, and
    /// puts them in force: the limits in force are the stored ones where any are stored,
    /// the declared ones elsewhere. True when the limits in force changed. A stored row
    /// this crate cannot read (written by another program) is logged and leaves that
    /// entrypoint's declared limits; a missing table (a schema `upgrade()` of this crate
    /// has not run on) leaves them all.
    ///
    /// # Errors
    /// The database's error: the limits in force stay as they were, and are read again
    /// a second later.
    pub(crate) fn reload(&self, conn: &mut Conn, declared: &Claimer) -> Result<bool> {
        if !self.stale.load(Ordering::SeqCst) {
            return Ok(false);
        }
        if lock(&self.retry_at).is_some_and(|at| Instant::now() < at) {
            return Ok(false);
        }
        self.stale.store(false, Ordering::SeqCst);
        let reloaded = self.reload_now(conn, declared);
        if reloaded.is_err() {
            *lock(&self.retry_at) = Some(Instant::now() + RELOAD_RETRY);
            self.stale.store(true, Ordering::SeqCst);
        }
        reloaded
    }

    fn reload_now(&self, conn: &mut Conn, declared: &Claimer) -> Result<bool> {
        let stored = match declared.stored_limits(conn) {
            Ok(stored) => stored,
            Err(Error::Db(e)) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => {
                log::debug!("pgqueuer: no stored limits table ({e}); the declared limits hold");
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        if stored.iter().any(Result::is_err) {
            let mut warned = lock(&self.unreadable_warned);
            if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                *warned = Some(Instant::now());
                for e in stored.iter().filter_map(|s| s.as_ref().err()) {
                    log::warn!(
                        "pgqueuer: a stored limit is left out, and the declared one holds: {e}"
                    );
                }
            }
        }
        let (limits, rates) = in_force(declared, &stored);
        let before = self.effective();
        if before.limits().map(|(_, l)| l).eq(limits.iter().copied())
            && before.rate_windows() == rates
        {
            return Ok(false);
        }
        let next = declared.with_limits(limits, &rates);
        if next.is_rate_limited() {
            crate::schema::verify_rates(conn.client(), declared.settings())?;
            next.provision_rate_limits(conn.client())?;
        }
        let as_declared = next.limits().eq(declared.limits()) && rates == declared.rate_windows();
        log::info!(
            "pgqueuer: limits in force now{}: {}",
            if as_declared {
                " (as declared)"
            } else {
                " (stored)"
            },
            describe(&next)
        );
        let next = Arc::new(next);
        {
            let mut state = lock(&self.state);
            let before = std::mem::take(&mut *state);
            *state = Watching::of(&next, &self.pause_on_larger, Some(before));
            let paused = state.watched.iter().any(|w| w.pause_on_larger && w.larger);
            self.any_paused.store(paused, Ordering::SeqCst);
        }
        *lock(&self.current) = next;
        Ok(true)
    }

    /// The claimer to claim with: the one with the limits in force, or, while some
    /// entrypoint is paused, one without it (`None` when every entrypoint is paused).
    pub(crate) fn claimer(&self) -> Option<Arc<Claimer>> {
        let claimer = self.effective();
        if !self.any_paused.load(Ordering::SeqCst) {
            return Some(claimer);
        }
        let paused: Vec<String> = lock(&self.state)
            .watched
            .iter()
            .filter(|w| w.pause_on_larger && w.larger)
            .map(|w| w.entrypoint.clone())
            .collect();
        let mut unpaused = lock(&self.unpaused);
        if let Some((base, names, made)) = unpaused.as_ref()
            && Arc::ptr_eq(base, &claimer)
            && *names == paused
        {
            return made.clone();
        }
        let names: Vec<&str> = paused.iter().map(String::as_str).collect();
        let made = claimer.without(&names).map(Arc::new);
        *unpaused = Some((claimer, paused, made.clone()));
        made
    }

    /// What is known of each entrypoint with a concurrency limit in force.
    pub(crate) fn stats(&self) -> Vec<LimitStats> {
        lock(&self.state)
            .watched
            .iter()
            .map(|w| LimitStats {
                entrypoint: w.entrypoint.clone(),
                limit: w.limit,
                highest_slot: w.highest_slot,
                slots_in_use: w.in_use,
                larger_limit_elsewhere: w.larger && w.looked,
                paused: w.larger && w.pause_on_larger,
            })
            .collect()
    }
}

/// The limits in force for `declared`'s entrypoints given the `stored` ones: each
/// entrypoint's concurrency limit (0: none), aligned with `declared`'s, and every rate
/// window. A stored value overrides the declared one; a stored row that cannot be read
/// is left out (the caller reports it).
fn in_force(
    declared: &Claimer,
    stored: &[Result<StoredLimits>],
) -> (Vec<i64>, Vec<(String, RateLimit)>) {
    let declared_rates = declared.rate_windows();
    let mut limits = Vec::new();
    let mut rates = Vec::new();
    for (name, limit) in declared.limits() {
        let row = stored.iter().find_map(|s| match s {
            Ok(s) if s.entrypoint == name => Some(s),
            _ => None,
        });
        limits.push(
            row.and_then(|s| s.concurrency_limit)
                .map_or(limit, i64::from),
        );
        match row.and_then(|s| s.rates.as_ref()) {
            Some(stored) => rates.extend(stored.iter().map(|r| (name.to_owned(), *r))),
            None => rates.extend(declared_rates.iter().filter(|(n, _)| n == name).cloned()),
        }
    }
    (limits, rates)
}

/// The limits of `claimer`, for the log: `"name": concurrency N, rates 100/s, 1000/h`.
fn describe(claimer: &Claimer) -> String {
    let rates = claimer.rate_windows();
    claimer
        .limits()
        .map(|(name, limit)| {
            let mine: Vec<String> = rates
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, r)| r.to_string())
                .collect();
            format!(
                "{name:?}: concurrency {}, rates {}",
                if limit > 0 {
                    limit.to_string()
                } else {
                    "none".into()
                },
                if mine.is_empty() {
                    "none".into()
                } else {
                    mine.join(", ")
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
