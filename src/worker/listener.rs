//! The dedicated LISTEN connection: wakes idle executors on table changes, flags
//! cancelled jobs, probes itself with health checks, and reconnects after any loss.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use fallible_iterator::FallibleIterator;
use postgres::Client;

use super::builder::WorkerConfig;
use super::doorbell::{Doorbell, Wake};
use super::ledger::Ledger;
use super::limits::LimitWatch;
use super::owned::Ownership;
use super::stats::Stats;
use crate::connect::drop_elsewhere;
use crate::error::chain;
use crate::events::{Event, HealthCheck, Operation};
use crate::sql;

/// How long one wait for notifications lasts: how often the listener runs its checks,
/// and how long it takes to stop when nothing wakes it ([`wake_channel`]).
const POLL: Duration = Duration::from_millis(250);
/// How often the listener sends itself a health check (PgQueuer's interval).
const HEALTH_INTERVAL: Duration = Duration::from_secs(10);
/// How long the echo of a health check may take before the connection is presumed dead.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a `cancellation_event` for a job whose row still exists is looked at again
/// (PgQueuer deletes the rows and sends the event in two transactions, in either order):
/// past it the event is ignored, and a later deletion reaches the handler through the
/// heartbeat.
const CONFIRM_WINDOW: Duration = Duration::from_secs(2);

/// What the listener works with.
struct Listener<'a> {
    config: &'a WorkerConfig,
    /// Where to connect.
    listen: &'a crate::connect::Target,
    doorbell: &'a Doorbell,
    ledger: &'a Ledger,
    /// Told when the stored limits change.
    limits: &'a LimitWatch,
    /// The channel of those changes (`Settings::limits_channel`).
    limits_channel: String,
    /// This worker's own channel ([`wake_channel`]).
    wake_channel: String,
    /// Where the listener says it is alive (and connected).
    stats: &'a Stats,
    /// Which of a list of ids this worker still owns (`sql::claim::queue_owned`).
    owned_sql: String,
}

/// Runs until every executor has exited (`alive` disconnects).
pub(crate) fn run(
    config: &WorkerConfig,
    doorbell: &Doorbell,
    ledger: &Ledger,
    limits: &LimitWatch,
    stats: &Stats,
    alive: &Receiver<()>,
) {
    let Some(listen) = &config.listen else {
        // No LISTEN possible (see `WorkerConfig::listen`): the dispatcher polls.
        return;
    };
    let this = Listener {
        config,
        listen,
        doorbell,
        ledger,
        limits,
        limits_channel: config.settings.limits_channel(),
        wake_channel: wake_channel(config.claimer.worker_id()),
        stats,
        owned_sql: sql::claim::queue_owned(&config.settings),
    };
    let finished = || matches!(alive.try_recv(), Err(TryRecvError::Disconnected));
    let mut backoff = Duration::from_millis(50);
    while !finished() {
        let mut client = match this.connect() {
            Ok(client) => client,
            Err(e) => {
                stats.liveness.listener_ran(false);
                log::warn!(
                    "pgqueuer listener cannot connect (retrying in {backoff:?}): {}",
                    chain(&e)
                );
                let _ = alive.recv_timeout(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        // Notifications sent while no LISTEN was active are lost: the dispatcher looks.
        doorbell.ring(Wake::Resync);
        log::debug!(
            "pgqueuer listener connected on channel {}",
            config.settings.channel
        );
        if let Err(e) = this.listen(&mut client, &finished) {
            stats.liveness.listener_ran(false);
            log::warn!("pgqueuer listener lost its connection; reconnecting: {e}");
        }
        // Dropping a client waits for the server; on a dead peer that can take long.
        drop_elsewhere(client);
    }
}

impl Listener<'_> {
    fn connect(&self) -> Result<Client, postgres::Error> {
        let mut client = self.listen.connect()?;
        client.batch_execute(&format!(
            "{}; {}; {}",
            sql::channel_listen(&self.config.settings.channel),
            sql::channel_listen(&self.limits_channel),
            sql::channel_listen(&self.wake_channel),
        ))?;
        // Changes stored while no LISTEN was active were missed: read them again.
        self.limits.limits_stored();
        self.doorbell.ring(Wake::LimitsStored);
        Ok(client)
    }

    /// Acts on one notification payload. Cancellations of owned jobs are not acted on
    /// here: they go to `unconfirmed`, to be checked against the database (any role may
    /// send a NOTIFY on the channel, so an event alone never stops a handler).
    fn handle(
        &self,
        payload: &str,
        probe: &mut Option<(uuid::Uuid, Instant)>,
        unconfirmed: &mut Vec<(i64, Instant)>,
        unparsed: &mut Unparsed,
    ) {
        match Event::parse(payload) {
            Ok(Event::TableChanged(change)) => {
                // New or requeued jobs always matter. A delete can only matter by freeing a
                // concurrency slot, so it wakes a thread only when a limited entrypoint is
                // ours; a truncate leaves nothing to claim.
                match change.operation {
                    Operation::Insert | Operation::Update => self.doorbell.ring(Wake::Changed),
                    Operation::Delete if self.limits.effective().has_slots() => {
                        self.doorbell.ring(Wake::Freed);
                    }
                    Operation::Delete | Operation::Truncate => {}
                }
            }
            Ok(Event::Cancellation(c)) => {
                let until = Instant::now() + CONFIRM_WINDOW;
                for id in self.ledger.owned_among(&c.ids) {
                    if !unconfirmed.iter().any(|(held, _)| *held == id) {
                        unconfirmed.push((id, until));
                    }
                }
            }
            Ok(Event::HealthCheck(h)) => {
                if probe.is_some_and(|(id, _)| id == h.id) {
                    *probe = None;
                }
            }
            Err(e) => unparsed.seen(&e.to_string(), payload),
        }
    }

    /// Cancels the unconfirmed jobs whose rows are gone or no longer this worker's, and
    /// keeps the others until their window ends.
    fn confirm(
        &self,
        client: &mut Client,
        unconfirmed: &mut Vec<(i64, Instant)>,
    ) -> Result<(), postgres::Error> {
        if unconfirmed.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = unconfirmed.iter().map(|(id, _)| *id).collect();
        // Which claim of each job was the latest before the look: a re-pick of this
        // worker's that commits after the look's snapshot makes the row ours again, and
        // must not be cancelled for what the look saw (see `Ledger::cancel_lost`).
        let seen: Vec<Ownership> = self
            .ledger
            .ownerships()
            .into_iter()
            .filter(|o| ids.contains(&o.id))
            .collect();
        let owned: Vec<i64> = client
            .query(&self.owned_sql, &[&ids, &self.config.claimer.worker_id()])?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let gone: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !owned.contains(id))
            .collect();
        if !gone.is_empty() {
            let lost: Vec<Ownership> = seen.into_iter().filter(|o| gone.contains(&o.id)).collect();
            let cancelled = self.ledger.cancel_lost(&lost);
            log::debug!("{cancelled} owned jobs cancelled (rows deleted): {gone:?}");
        }
        let now = Instant::now();
        unconfirmed.retain(|(id, until)| {
            let keep = owned.contains(id) && *until > now;
            if owned.contains(id) && !keep {
                log::warn!(
                    "pgqueuer listener ignored a cancellation_event for job {id}: its row still \
                     exists and is this worker's (a NOTIFY anyone can send is not a \
                     cancellation; cancel deletes the row)"
                );
            }
            keep
        });
        Ok(())
    }

    /// Serves one connection until it fails (`Err`) or the worker is finished (`Ok`).
    fn listen(&self, client: &mut Client, finished: &dyn Fn() -> bool) -> Result<(), String> {
        let channel = self.config.settings.channel.clone();
        let mut probe: Option<(uuid::Uuid, Instant)> = None;
        let mut unconfirmed: Vec<(i64, Instant)> = Vec::new();
        let mut last_probe = Instant::now();
        let interval = health_interval(self.listen.config());
        let mut limits_ring = LimitsRing::default();
        let mut unparsed = Unparsed::default();
        while !finished() {
            self.stats.liveness.listener_ran(true);
            {
                let started = Instant::now();
                let mut notifications = client.notifications();
                let mut it = notifications.timeout_iter(POLL);
                // Each event is acted on as it arrives; the loop ends after a quiet POLL (or
                // after POLL of steady traffic) to check for shutdown and run health checks.
                loop {
                    match it.next() {
                        Ok(Some(n)) if n.channel() == self.limits_channel => {
                            // The payload (an entrypoint) is not trusted: any role may
                            // notify. Reading the stored limits again is all it causes,
                            // at most ten times a second however many come.
                            self.limits.limits_stored();
                            limits_ring.pending = true;
                            limits_ring.ring_due(self.doorbell);
                        }
                        // Perhaps every executor has exited: look now.
                        Ok(Some(n)) if n.channel() == self.wake_channel => break,
                        Ok(Some(n)) => {
                            self.handle(n.payload(), &mut probe, &mut unconfirmed, &mut unparsed);
                        }
                        Ok(None) => break,
                        Err(e) => return Err(chain(&e).to_string()),
                    }
                    // A cancellation is confirmed at once (the connection is free only
                    // outside this loop).
                    if started.elapsed() >= POLL || !unconfirmed.is_empty() {
                        break;
                    }
                }
            }
            limits_ring.ring_due(self.doorbell);
            if !client.is_closed() {
                self.confirm(client, &mut unconfirmed)
                    .map_err(|e| format!("cannot confirm a cancellation: {}", chain(&e)))?;
            }
            if client.is_closed() {
                return Err("connection closed".into());
            }
            if let Some((_, sent)) = probe
                && sent.elapsed() > HEALTH_TIMEOUT
            {
                return Err(format!(
                    "no echo of its health check within {HEALTH_TIMEOUT:?}"
                ));
            }
            if probe.is_none() && last_probe.elapsed() >= interval {
                // A black-holed connection stays silent forever; only a round trip tells.
                client
                    .is_valid(crate::connect::PROBE_TIMEOUT)
                    .map_err(|e| format!("validity probe failed: {}", chain(&e)))?;
                let check = HealthCheck::new(&channel);
                let payload = Event::HealthCheck(check.clone()).to_json();
                client
                    .execute(sql::CHANNEL_NOTIFY, &[&channel, &payload])
                    .map_err(|e| format!("cannot send a health check: {}", chain(&e)))?;
                probe = Some((check.id, Instant::now()));
                last_probe = Instant::now();
            }
        }
        Ok(())
    }
}

/// The channel only this worker's listener listens on (by its worker id), on which the
/// completer wakes it once every executor has exited ([`wake`]): the listener waits on its
/// connection and sees nothing else, and without the wake each stop, every
/// `run_until_empty` among them, would wait out the rest of its [`POLL`].
pub(crate) fn wake_channel(worker: uuid::Uuid) -> String {
    format!("pgqueuer_rs_wake_{}", worker.simple())
}

/// Wakes this worker's listener ([`wake_channel`]) on `conn`. Its payload is empty:
/// anyone can send on the channel, and all a notification there causes is one more look
/// at whether the executors have exited.
pub(crate) fn wake(conn: &mut crate::connect::Conn, worker: uuid::Uuid) -> crate::Result<()> {
    let channel = wake_channel(worker);
    conn.query_cached(
        sql::CHANNEL_NOTIFY,
        &[
            (&channel, postgres::types::Type::TEXT),
            (&"", postgres::types::Type::TEXT),
        ],
    )?;
    Ok(())
}

/// How often the listener proves its connection: every [`HEALTH_INTERVAL`], or every
/// network deadline (the DSN's `tcp_user_timeout`) when that is shorter. An idle LISTEN
/// connection has no statement in flight for the deadline to fail; keepalives should
/// find a silent path, but the probe's statement is what bounds it: a worker with nothing
/// to claim notices within about twice the deadline.
fn health_interval(config: &postgres::Config) -> Duration {
    config
        .get_tcp_user_timeout()
        .map_or(HEALTH_INTERVAL, |deadline| (*deadline).min(HEALTH_INTERVAL))
        .max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_health_check_comes_at_least_once_a_network_deadline() {
        let mut config = postgres::Config::new();
        assert_eq!(health_interval(&config), HEALTH_INTERVAL);
        config.tcp_user_timeout(Duration::from_secs(30));
        assert_eq!(health_interval(&config), HEALTH_INTERVAL);
        config.tcp_user_timeout(Duration::from_secs(3));
        assert_eq!(health_interval(&config), Duration::from_secs(3));
        config.tcp_user_timeout(Duration::from_millis(200));
        assert_eq!(health_interval(&config), Duration::from_secs(1));
    }
}

/// How often at most the listener warns of notifications it cannot parse (any role may
/// send them, as fast as it likes).
const UNPARSED_WARN_EVERY: Duration = Duration::from_secs(60);

/// The most characters of an unparsable payload quoted in the warning.
const UNPARSED_QUOTED: usize = 200;

/// Notifications that could not be parsed: the first is warned of at once, the rest at
/// most once per [`UNPARSED_WARN_EVERY`], with how many came meanwhile.
#[derive(Default)]
struct Unparsed {
    last_warned: Option<Instant>,
    /// Seen since the last warning.
    since: u64,
}

impl Unparsed {
    fn seen(&mut self, error: &str, payload: &str) {
        self.since += 1;
        if self
            .last_warned
            .is_some_and(|at| at.elapsed() < UNPARSED_WARN_EVERY)
        {
            return;
        }
        let quoted: String = payload.chars().take(UNPARSED_QUOTED).collect();
        let cut = if quoted.len() < payload.len() {
            " [...]"
        } else {
            ""
        };
        if self.since > 1 {
            log::warn!(
                "pgqueuer listener ignored {} notifications it cannot parse in the last {} s \
                 (any role may NOTIFY on the channel); the latest ({error}): {quoted:?}{cut}",
                self.since,
                UNPARSED_WARN_EVERY.as_secs()
            );
        } else {
            log::warn!(
                "pgqueuer listener ignored a notification it cannot parse ({error}): \
                 {quoted:?}{cut} (said at most once a minute, with a count)"
            );
        }
        self.last_warned = Some(Instant::now());
        self.since = 0;
    }
}

/// The least time between two rings for stored limits: a flood of their notifications
/// costs at most ten reads a second.
const LIMITS_RING_EVERY: Duration = Duration::from_millis(100);

/// Rings for the stored limits, spaced out ([`LIMITS_RING_EVERY`]): a notification that
/// comes sooner is rung when the spacing allows (the listener looks every `POLL`).
#[derive(Default)]
struct LimitsRing {
    pending: bool,
    last: Option<Instant>,
}

impl LimitsRing {
    fn ring_due(&mut self, doorbell: &Doorbell) {
        if self.pending && self.last.is_none_or(|at| at.elapsed() >= LIMITS_RING_EVERY) {
            doorbell.ring(Wake::LimitsStored);
            self.last = Some(Instant::now());
            self.pending = false;
        }
    }
}
