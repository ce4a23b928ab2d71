//! Heartbeats: every half heartbeat timeout, one statement refreshes every job this
//! worker owns, so no other worker takes them as stale. Where limits are in force, the
//! same thread looks at the slots in use every few seconds (see `limits`). At the same
//! pace it records the limits this worker declares, for `pgq limits`, and deletes them
//! as the worker stops.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::builder::WorkerConfig;
use super::doorbell::{Doorbell, Wake};
use super::ledger::Ledger;
use super::limits::{self, LimitWatch};
use super::stats::Stats;
use crate::loop_conn::LoopConn;

/// How long a beat retries rows another session holds locked before it leaves them for
/// the next beat.
const LOCKED_WAIT: Duration = Duration::from_millis(100);

/// How often the heartbeat thread looks for a held MVCC horizon.
const HORIZON_LOOK_EVERY: Duration = Duration::from_secs(60);

/// A transaction that has held the horizon this long is warned of.
const HORIZON_WARN_AFTER: Duration = Duration::from_secs(300);

/// The least time between two warnings of a held horizon.
const HORIZON_WARN_EVERY: Duration = Duration::from_secs(600);

/// The worker's own look for a held horizon (see `crate::horizon`): the claims read
/// through one, but only its holder's end gives the space back, so the worker says who.
struct HorizonWatch {
    next_look: Instant,
    warned: Option<Instant>,
}

impl HorizonWatch {
    fn look(&mut self, conn: &mut LoopConn<'_>) {
        let now = Instant::now();
        if now < self.next_look {
            return;
        }
        self.next_look = now + HORIZON_LOOK_EVERY;
        let held = match conn.run(|c| crate::horizon::holders(c.client())) {
            Ok(all) => crate::horizon::long_held(all, HORIZON_WARN_AFTER, 500_000),
            Err(e) => {
                log::debug!("pgqueuer could not look for a held horizon: {e}");
                return;
            }
        };
        let Some(oldest) = held.first() else {
            return;
        };
        if self
            .warned
            .is_some_and(|at| at.elapsed() < HORIZON_WARN_EVERY)
        {
            return;
        }
        self.warned = Some(now);
        super::warning::warn_always(format_args!(
            "the MVCC horizon is held by {oldest}: no row version that died since can be \
             removed, so the queue's tables and indexes grow while it lasts (claims read past \
             them, at a cost that grows with them); end it, and set \
             idle_in_transaction_session_timeout (said at most every {} minutes)",
            HORIZON_WARN_EVERY.as_secs() / 60
        ));
    }
}

/// Runs until every executor has exited (`alive` disconnects).
pub(crate) fn run(
    config: &WorkerConfig,
    ledger: &Ledger,
    limits: &LimitWatch,
    doorbell: &Doorbell,
    stats: &Stats,
    alive: &Receiver<()>,
) {
    let interval = config.heartbeat_interval();
    // After a failed beat, try again soon rather than a whole interval later.
    let retry = interval.min(Duration::from_secs(1)) / 4;
    let mut conn = LoopConn::own(&config.heartbeat_conn);
    let mut next_beat = Instant::now() + interval;
    let mut next_check = Instant::now();
    let mut declaration = Declaration::default();
    let mut horizon = HorizonWatch {
        next_look: Instant::now() + HORIZON_LOOK_EVERY,
        warned: None,
    };
    loop {
        match alive.recv_timeout(
            next_beat
                .min(next_check)
                .saturating_duration_since(Instant::now()),
        ) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => {
                declaration.withdraw(&mut conn, config);
                return;
            }
        }
        let now = Instant::now();
        if now >= next_check {
            next_check = now + limits::CHECK_INTERVAL;
            declaration.refresh(&mut conn, config);
            horizon.look(&mut conn);
            if !limits.is_empty() {
                match conn.run(|c| limits.check(c)) {
                    Ok(changed) => {
                        stats.slots_seen(limits);
                        if changed {
                            doorbell.ring(Wake::LimitsChanged);
                        }
                    }
                    Err(e) => log::warn!("pgqueuer could not read the slots in use: {e}"),
                }
            }
        }
        if now < next_beat {
            continue;
        }
        next_beat = now + interval;
        let owned = ledger.ownerships();
        if owned.is_empty() {
            continue;
        }
        // The probe first: the beat's statement waits on a silent connection until the
        // network deadline (`tcp_user_timeout`, 30 s by default), as long as a heartbeat
        // timeout, while a probe gives up within `probe`. A row another session keeps
        // locked is retried for a moment only, and left for the next beat.
        let probe = crate::connect::PROBE_TIMEOUT.min(interval / 2);
        let ids: Vec<_> = owned.iter().map(|h| h.id).collect();
        let beat_on = |conn: &mut LoopConn<'_>| {
            conn.run(|c| {
                c.client().is_valid(probe)?;
                config.claimer.heartbeat_within(c, &ids, LOCKED_WAIT)
            })
        };
        let beat = match beat_on(&mut conn) {
            // The connection was lost (a terminated backend, a restarted server, or one
            // that died while no job was owned): the same beat again at once on a fresh
            // one, since the jobs' last beat may be most of a timeout ago already.
            Err(e) if !conn.is_open() => {
                log::debug!("pgqueuer heartbeat lost its connection ({e}); beating again at once");
                beat_on(&mut conn)
            }
            beat => beat,
        };
        match beat {
            Ok((refreshed, locked)) => {
                log::trace!(
                    "heartbeat: {} of {} owned jobs refreshed",
                    refreshed.len(),
                    ids.len()
                );
                // An owned job whose row is gone or no longer ours was cancelled (or
                // re-picked after this worker was presumed dead): its handler should
                // stop. This also reaches handlers when no NOTIFY can (no LISTEN).
                // A job this worker re-picked after `owned` was read is ours again and
                // is not cancelled (`Ledger::cancel_lost`).
                let lost: Vec<_> = owned
                    .iter()
                    .filter(|h| !refreshed.contains(&h.id) && !locked.contains(&h.id))
                    .copied()
                    .collect();
                if !locked.is_empty() {
                    log::debug!("heartbeat: rows locked by another session, next beat: {locked:?}");
                    next_beat = Instant::now() + retry;
                }
                if !lost.is_empty() && ledger.cancel_lost(&lost) > 0 {
                    let lost: Vec<_> = lost.iter().map(|h| h.id).collect();
                    log::debug!("owned jobs no longer ours, asked to stop: {lost:?}");
                }
            }
            Err(e) => {
                log::warn!(
                    "pgqueuer heartbeat failed for {} jobs (retrying in {retry:?}): {e}",
                    ids.len()
                );
                conn.release();
                next_beat = Instant::now() + retry;
            }
        }
    }
}

/// The record of the limits this worker declares (`Claimer::declare`).
#[derive(Default)]
struct Declaration {
    /// The last refresh recorded it (so the database answered a moment ago: deleting it
    /// at shutdown will not wait on a lost server).
    made: bool,
    /// The table is missing (a schema this crate's `upgrade()` has not run on): said once.
    missing_said: bool,
}

impl Declaration {
    fn refresh(&mut self, conn: &mut LoopConn<'_>, config: &WorkerConfig) {
        match conn.run(|c| config.claimer.declare(c)) {
            Ok(()) => self.made = true,
            Err(crate::Error::Db(e))
                if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) =>
            {
                if !std::mem::replace(&mut self.missing_said, true) {
                    log::info!(
                        "pgqueuer: this worker's limits are not shown by 'pgq limits' until \
                         upgrade() of this version has run ({e})"
                    );
                }
            }
            Err(e) => {
                self.made = false;
                log::debug!("pgqueuer could not record this worker's limits: {e}");
            }
        }
    }

    fn withdraw(&mut self, conn: &mut LoopConn<'_>, config: &WorkerConfig) {
        if self.made
            && let Err(e) = conn.run(|c| config.claimer.withdraw(c))
        {
            log::debug!("pgqueuer could not delete this worker's recorded limits: {e}");
        }
    }
}
