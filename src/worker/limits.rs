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

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::entrypoint::Registry;
use crate::claim::Claimer;
use crate::connect::Conn;
use crate::error::Result;
use crate::lock::lock;
use crate::rate::RateLimit;

/// How often the heartbeat thread looks at the slots in use.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The shortest time between two warnings about one entrypoint.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The limited entrypoints of a worker and what was last seen of their slots.
pub(crate) struct LimitWatch {
    watched: Vec<Watched>,
    /// Each rate-limit window this worker declares.
    rated: Vec<RatedWatch>,
    /// Some entrypoint is paused (so claims must leave it out). Until the first look at
    /// the slots, every entrypoint that opted in counts as paused: a worker must not take
    /// a slot beside a larger limit it has not looked for yet.
    any_paused: AtomicBool,
}

struct Watched {
    entrypoint: String,
    limit: u32,
    /// Stop claiming while a larger limit is evident.
    pause_on_larger: bool,
    seen: Mutex<Seen>,
}

struct Seen {
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
}

struct RatedWatch {
    entrypoint: String,
    limit: RateLimit,
    seen: Mutex<RateSeen>,
}

#[derive(Default)]
struct RateSeen {
    /// Units spent within the last window, at the last look.
    spent: u64,
    /// Jobs picked within the window by workers that spent no unit, at the last look.
    undeclared: bool,
    /// When the last warning about this window was logged.
    warned: Option<Instant>,
}

/// What the watch knows of one rate-limit window this worker declares (part of
/// [`crate::WorkerStats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateStats {
    /// The entrypoint.
    pub entrypoint: String,
    /// The limit: at most `limit.starts()` starts in any window of `limit.per()`.
    pub limit: RateLimit,
    /// Starts within the last window, by every worker that declares it, at the last look
    /// (every 10 s): the rate in use, against `limit.starts()`.
    pub starts_in_window: u64,
    /// At the last look, a running job of the entrypoint had been picked within the window
    /// by a worker that counted no start against it: some worker claims the entrypoint
    /// without declaring this limit (Python PgQueuer workers declare none), and the limit
    /// does not hold.
    pub undeclared_claims: bool,
}

/// What the watch knows of one limited entrypoint (part of [`crate::WorkerStats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitStats {
    /// The entrypoint.
    pub entrypoint: String,
    /// The concurrency limit this worker declares for it.
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

impl LimitWatch {
    pub(crate) fn new(registry: &Registry) -> LimitWatch {
        let watched: Vec<Watched> = registry
            .order
            .iter()
            .filter_map(|name| {
                let options = &registry.by_name[name].options;
                (options.concurrency_limit > 0).then(|| Watched {
                    entrypoint: name.clone(),
                    limit: options.concurrency_limit,
                    pause_on_larger: options.pause_on_larger_limit,
                    seen: Mutex::new(Seen {
                        highest_slot: None,
                        in_use: 0,
                        warned: None,
                        larger: options.pause_on_larger_limit,
                        looked: false,
                    }),
                })
            })
            .collect();
        let opted_in = watched.iter().any(|w| w.pause_on_larger);
        let rated = registry
            .order
            .iter()
            .flat_map(|name| {
                registry.by_name[name]
                    .options
                    .rate_limits
                    .iter()
                    .map(move |limit| RatedWatch {
                        entrypoint: name.clone(),
                        limit: *limit,
                        seen: Mutex::new(RateSeen::default()),
                    })
            })
            .collect();
        LimitWatch {
            watched,
            rated,
            any_paused: AtomicBool::new(opted_in),
        }
    }

    /// True when this worker declares no limit (nothing to watch).
    pub(crate) fn is_empty(&self) -> bool {
        self.watched.is_empty() && self.rated.is_empty()
    }

    /// Reads the rate in use of each window this worker declares, warning about claims
    /// that spend no units.
    fn check_rates(&self, conn: &mut Conn, claimer: &Claimer) -> Result<()> {
        if self.rated.is_empty() {
            return Ok(());
        }
        for (entrypoint, per, spent, undeclared) in claimer.rates_in_use(conn)? {
            let Some(w) = self
                .rated
                .iter()
                .find(|w| w.entrypoint == entrypoint && w.limit.per() == per)
            else {
                continue;
            };
            let mut seen = lock(&w.seen);
            seen.spent = spent;
            seen.undeclared = undeclared > 0;
            if seen.undeclared && seen.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                seen.warned = Some(Instant::now());
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

    /// What is known of each rate-limit window.
    pub(crate) fn rate_stats(&self) -> Vec<RateStats> {
        self.rated
            .iter()
            .map(|w| {
                let seen = lock(&w.seen);
                RateStats {
                    entrypoint: w.entrypoint.clone(),
                    limit: w.limit,
                    starts_in_window: seen.spent,
                    undeclared_claims: seen.undeclared,
                }
            })
            .collect()
    }

    /// Reads the slots in use and updates what is known, warning about disagreements;
    /// true when that paused or resumed an entrypoint.
    ///
    /// # Errors
    /// The database's error.
    pub(crate) fn check(&self, conn: &mut Conn, claimer: &Claimer) -> Result<bool> {
        self.check_rates(conn, claimer)?;
        if self.watched.is_empty() {
            return Ok(false);
        }
        let names: Vec<&str> = self.watched.iter().map(|w| w.entrypoint.as_str()).collect();
        let slots = claimer.slots_in_use(conn, &names)?;
        let mut any_paused = false;
        let mut changed = false;
        for (w, (highest, in_use)) in self.watched.iter().zip(slots) {
            let mut seen = lock(&w.seen);
            let was_paused = w.pause_on_larger && seen.larger;
            seen.highest_slot = highest;
            seen.in_use = in_use;
            let larger = highest.is_some_and(|h| h >= i64::from(w.limit));
            if larger && seen.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                seen.warned = Some(Instant::now());
                let slot = highest.unwrap_or_default();
                log::warn!(
                    "pgqueuer: entrypoint {:?}: a job holds slot {slot}, so another worker \
                     declares a concurrency limit of at least {}, while this worker declares \
                     {}; the largest declared limit is the one that holds. Declare the same \
                     limit on every worker{}",
                    w.entrypoint,
                    slot + 1,
                    w.limit,
                    if w.pause_on_larger {
                        "; this worker stops claiming it meanwhile"
                    } else {
                        ""
                    }
                );
            } else if !larger && seen.larger && seen.looked {
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
            seen.larger = larger;
            seen.looked = true;
            let paused = larger && w.pause_on_larger;
            changed |= paused != was_paused;
            any_paused |= paused;
        }
        self.any_paused.store(any_paused, Ordering::SeqCst);
        Ok(changed)
    }

    /// The claimer to claim with: `claimer` itself, or, while some entrypoint is paused,
    /// one without it (`None` when every entrypoint is paused).
    pub(crate) fn claimer<'c>(
        &self,
        claimer: &'c Claimer,
    ) -> Option<std::borrow::Cow<'c, Claimer>> {
        if !self.any_paused.load(Ordering::SeqCst) {
            return Some(std::borrow::Cow::Borrowed(claimer));
        }
        let paused: Vec<&str> = self
            .watched
            .iter()
            .filter(|w| w.pause_on_larger && lock(&w.seen).larger)
            .map(|w| w.entrypoint.as_str())
            .collect();
        claimer.without(&paused).map(std::borrow::Cow::Owned)
    }

    /// What is known of each limited entrypoint.
    pub(crate) fn stats(&self) -> Vec<LimitStats> {
        self.watched
            .iter()
            .map(|w| {
                let seen = lock(&w.seen);
                LimitStats {
                    entrypoint: w.entrypoint.clone(),
                    limit: w.limit,
                    highest_slot: seen.highest_slot,
                    slots_in_use: seen.in_use,
                    larger_limit_elsewhere: seen.larger && seen.looked,
                    paused: seen.larger && w.pause_on_larger,
                }
            })
            .collect()
    }
}
