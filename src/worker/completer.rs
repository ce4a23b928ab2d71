//! The one path of outcomes: executors leave every finished job's outcome in the ledger
//! (`outcomes::Outcomes`), and the completer thread writes them (delete or hold the row, and its log row; or put
//! it back in the queue for a retry).
//!
//! Ends are written in batches: the completer writes whatever waits [`LINGER`] after the
//! first of it arrived, in one statement, so that a burst of finished jobs costs one
//! commit; ends enough for a write (`outcomes::ENOUGH_TO_WRITE`, as many as pile up while
//! the previous write runs in a drain) are written at once. (Each completion takes
//! PostgreSQL's NOTIFY lock through its commit, the same lock every enqueue needs: fewer
//! and larger completions leave producers more room.) Retries are written at once, since
//! their delay runs from the write.
//!
//! Where slots are scarce (some concurrency limit is no larger than the thread count)
//! and reused ([`crate::WorkerBuilder::reuse_slots`]), the completer lets the dispatcher
//! fold ends into its next claim instead ([`Outcomes::for_claim`],
//! [`crate::Claimer::complete_and_claim`]): their slots are then free to that very claim,
//! and a slot turns over with one commit instead of two. What no claim took within the
//! linger, the completer writes itself. Where slots are scarce and not reused, it writes
//! after a shorter linger ([`SCARCE_LINGER`]), since a finished job holds its slot until
//! its row is written, and rings the dispatcher after each write.
//!
//! No outcome can wedge the completer. A write that fails for a reason that may pass (a
//! lost connection, a timeout, a read-only server) is retried with backoff; one that the
//! database refuses for what it carries (SQLSTATE classes 21, 22, 23, 42, 54) is split,
//! so that every other outcome is written, and the one it cannot take is recorded as an
//! `exception` saying why (and, if even that is refused, left picked to go stale and be
//! re-picked). Rows locked by another session are retried for [`LOCKED_RETRY`] and then
//! handed back for the next round, so one locked row holds up no other outcome. Every
//! failed write logs at `error` and counts in `WorkerStats::outcome_write_failures`.

use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, select};

use super::builder::WorkerConfig;
use super::doorbell::{Doorbell, Wake};
use super::ledger::Ledger;
use super::outcomes::{MAX_BATCH, Outcomes, Pending, Requeue};
use super::stats::Stats;
use crate::claim::{Claimer, Outcome};
use crate::connect::Conn;
use crate::error::Error;
use crate::events::{Event, Operation, TableChanged};
use crate::job::{IdSet, JobId, Status, storable_text};
use crate::loop_conn::LoopConn;
use crate::shutdown::ShutdownHandle;
use crate::sqlstate;
use crate::time::{TimeStyle, format_time};

/// How long the completer waits for more outcomes after the first before writing.
const LINGER: Duration = Duration::from_millis(5);

/// [`LINGER`] when slots are scarce and not reused: a finished job holds its slot until
/// its row is written.
const SCARCE_LINGER: Duration = Duration::from_millis(1);

/// How long one write retries rows that another session holds locked before it hands
/// them back for the completer's next round.
const LOCKED_RETRY: Duration = Duration::from_millis(100);

/// After shutdown, how long the completer goes on trying to write what is left before it
/// gives up (the rows then go stale and are re-picked: at-least-once).
const GIVE_UP_AFTER_SHUTDOWN: Duration = Duration::from_secs(30);

/// The most bytes of a refused outcome's own traceback quoted in the exception recorded
/// instead.
const QUOTED_TRACEBACK: usize = 4 << 10;

/// What the completer thread works with.
pub(crate) struct Completer<'a> {
    pub(crate) config: &'a WorkerConfig,
    pub(crate) ledger: &'a Ledger,
    pub(crate) doorbell: &'a Doorbell,
    pub(crate) shutdown: &'a ShutdownHandle,
    pub(crate) stats: &'a Stats,
    /// `run_until_empty`: every write is noted for the dispatcher, which decides from the
    /// last one that the drain is over.
    pub(crate) drain: bool,
}

impl Completer<'_> {
    /// The completer thread: runs until every executor has exited (`alive` disconnects)
    /// and everything left is written (or, long after shutdown, given up).
    pub(crate) fn run(&self, alive: &Receiver<()>) {
        let mut writer = Writer {
            config: self.config,
            conn: LoopConn::own(&self.config.complete_conn),
            ledger: self.ledger,
            shutdown: self.shutdown,
            stats: self.stats,
            stopped_at: None,
            locked_back: false,
            careful: false,
        };
        let linger = if self.config.slots_scarce && !self.config.fold_outcomes {
            SCARCE_LINGER
        } else {
            // When claims take ends along, what is left here is what no claim took: no
            // hurry.
            LINGER
        };
        let outcomes = self.ledger.outcomes();
        let mut open = true;
        let mut locked_since: Option<Instant> = None;
        loop {
            if open {
                // `alive` carries no messages: it disconnects once every executor has
                // exited, after which no outcome can come any more.
                open = select! {
                    recv(outcomes.signal_rx) -> _ => true,
                    recv(alive) -> _ => false,
                };
                if !open {
                    writer.wake_listener();
                }
            }
            if open && !outcomes.write_at_once() {
                // One sleep for the whole wait: waking per finished job would cost more
                // than the write.
                std::thread::sleep(linger);
            }
            // Everything waiting now; what comes during the writes is the next signal's.
            let Pending {
                ends,
                requeues,
                releases,
            } = outcomes.take_all();
            let wrote = !(ends.is_empty() && requeues.is_empty() && releases.is_empty());
            for chunk in ends.chunks(MAX_BATCH) {
                writer.ends(chunk);
            }
            let mut requeued = false;
            for requeue in requeues {
                requeued |= writer.requeue(requeue);
            }
            if !releases.is_empty() {
                writer.releases(releases);
            }
            if wrote {
                // Slots are free now, before the NOTIFY of the deletion comes round.
                if self.drain {
                    // Kept even while the dispatcher is not waiting for it (it may be
                    // between a claim and its wait): the drain's last write must not be
                    // missed, or the drain would return a poll interval late.
                    self.doorbell.note(Wake::Written);
                } else {
                    self.doorbell.ring_if_wanted(Wake::Written);
                }
            }
            if requeued {
                // A retried job is queued again, perhaps due before the dispatcher's quiet
                // spell ends, and nothing else says so: the trigger fires per statement,
                // where `OLD IS DISTINCT FROM NEW` is never true, so no UPDATE is
                // announced.
                self.doorbell.ring(Wake::Changed);
            }
            // Only rows locked by another session wait for a moment before the next
            // round; outcomes that arrived during the writes are written at once (their
            // signal is set), or a busy worker's completer would pause after every round.
            let locked = writer.locked_back();
            writer.careful = locked;
            if !locked {
                locked_since = None;
            } else if self.shutdown.is_shutdown()
                && locked_since.get_or_insert_with(Instant::now).elapsed() > GIVE_UP_AFTER_SHUTDOWN
            {
                let Pending {
                    ends,
                    requeues,
                    releases,
                } = outcomes.take_all();
                log::error!(
                    "pgqueuer: giving up after shutdown on {} jobs whose rows another session \
                     keeps locked; they are re-picked once stale",
                    ends.len() + requeues.len() + releases.len()
                );
                self.ledger.written(
                    ends.iter()
                        .map(|o| o.id)
                        .chain(requeues.iter().map(|r| r.id))
                        .chain(releases),
                );
                if !open {
                    return;
                }
                continue;
            }
            if locked {
                // Rows locked by another session: look again in a moment (the token is
                // set again only by new outcomes).
                self.stats.waited_for_locked_rows();
                std::thread::sleep(LOCKED_RETRY / 10);
                outcomes.signal();
            } else if !open && outcomes.is_empty() {
                return;
            }
        }
    }
}

/// How one write went.
enum Attempt<T> {
    Done(T),
    /// The database refused the statement for what it carries: retrying it unchanged
    /// cannot help.
    Refused(Error),
    /// Shutdown came and the database stayed out of reach for too long.
    GaveUp,
}

/// The completer's connection and what its writes update.
struct Writer<'a> {
    config: &'a WorkerConfig,
    conn: LoopConn<'a>,
    ledger: &'a Ledger,
    shutdown: &'a ShutdownHandle,
    stats: &'a Stats,
    /// When the completer first found shutdown requested while a write failed.
    stopped_at: Option<Instant>,
    /// This round handed outcomes back: their rows were locked by another session.
    locked_back: bool,
    /// The last round handed outcomes back: until a round hands none back, ends skip the
    /// plain statement, which would wait out its lock timeout on those rows each round
    /// (see [`Claimer::complete_within`]).
    careful: bool,
}

impl Writer<'_> {
    fn outcomes(&self) -> &Outcomes {
        self.ledger.outcomes()
    }

    /// Puts back what rows locked by another session kept this round from writing, for
    /// a later round ([`Writer::locked_back`] says so).
    fn hand_back(&mut self, ends: Vec<Outcome>, requeues: Vec<Requeue>, releases: Vec<JobId>) {
        self.locked_back |= self.outcomes().hand_back(ends, requeues, releases);
    }

    /// True when this round handed outcomes back (rows locked by another session); clears
    /// it for the next round.
    fn locked_back(&mut self) -> bool {
        std::mem::take(&mut self.locked_back)
    }

    /// Every executor has exited, so the listener is done too: wakes it from its wait
    /// (see `listener::wake_channel`), on this connection or an idle one of the pool,
    /// never waiting for one to open (the worker's stop must not hang on a database out
    /// of reach). Without the wake the listener stops at the end of its poll.
    fn wake_listener(&mut self) {
        if self.config.listen.is_none() {
            return;
        }
        let worker = self.config.claimer.worker_id();
        let woken = if self.conn.is_open() {
            self.conn.run(|c| super::listener::wake(c, worker))
        } else if let Some(mut conn) = self.config.pool.try_get() {
            super::listener::wake(&mut conn, worker)
        } else {
            return;
        };
        if let Err(e) = woken {
            log::debug!("pgqueuer could not wake its listener to stop: {e}");
        }
    }

    /// Writes ends in one statement; the rows written, or no longer ours, are no longer
    /// owned afterwards, and rows locked by others come back for the next round.
    fn ends(&mut self, ends: &[Outcome]) {
        let plain = !self.careful;
        let attempt = self.attempt("outcomes", |claimer, c| {
            claimer.complete_within(c, ends, LOCKED_RETRY, plain)
        });
        match attempt {
            Attempt::Done((written, locked)) => {
                log::trace!("completed {} jobs in one statement", written.len());
                let written: IdSet = written.into_iter().collect();
                let locked: IdSet = locked.into_iter().collect();
                for o in ends
                    .iter()
                    .filter(|o| !written.contains(o.id) && !locked.contains(o.id))
                {
                    log::info!(
                        "job {} finished but was no longer owned by this worker (cancelled or \
                         re-picked); its outcome {} was not written",
                        o.id,
                        o.status.as_str()
                    );
                }
                self.ledger
                    .written(ends.iter().map(|o| o.id).filter(|&id| !locked.contains(id)));
                let back = ends
                    .iter()
                    .filter(|o| locked.contains(o.id))
                    .cloned()
                    .collect();
                self.hand_back(back, Vec::new(), Vec::new());
            }
            Attempt::Refused(e) if ends.len() > 1 => {
                // Write the halves apart, down to the one outcome the database refuses.
                log::debug!("writing {} outcomes apart after: {e}", ends.len());
                let (left, right) = ends.split_at(ends.len() / 2);
                self.ends(left);
                self.ends(right);
            }
            Attempt::Refused(e) => self.refused(&ends[0], &e),
            Attempt::GaveUp => self.ledger.written(ends.iter().map(|o| o.id)),
        }
    }

    /// One outcome the database will not store: record an `exception` (or, for a held
    /// failure, `failed`) that says why, instead.
    fn refused(&mut self, outcome: &Outcome, error: &Error) {
        let status = if outcome.status == Status::Failed {
            Status::Failed
        } else {
            Status::Exception
        };
        let quoted = outcome
            .traceback
            .as_ref()
            .map_or_else(|| "none".to_owned(), serde_json::Value::to_string);
        let instead = Outcome {
            id: outcome.id,
            status,
            traceback: Some(self.unwritable(
                outcome.id,
                &format!("its outcome {}", outcome.status.as_str()),
                error,
                &quoted,
            )),
        };
        log::error!(
            "pgqueuer: the outcome {} of job {} was refused by the database ({error}); \
             recording {} with the reason instead",
            outcome.status.as_str(),
            outcome.id,
            status.as_str()
        );
        let attempt = self.attempt("a refused outcome's replacement", |claimer, c| {
            claimer.complete_within(c, std::slice::from_ref(&instead), LOCKED_RETRY, false)
        });
        match attempt {
            Attempt::Done((_, locked)) if !locked.is_empty() => {
                self.hand_back(vec![instead], Vec::new(), Vec::new());
            }
            Attempt::Done(_) | Attempt::GaveUp => self.ledger.written([outcome.id]),
            Attempt::Refused(e) => {
                log::error!(
                    "pgqueuer: job {} cannot be ended at all ({e}); it stays picked and is \
                     re-picked once its heartbeat is older than heartbeat_timeout",
                    outcome.id
                );
                self.ledger.written([outcome.id]);
            }
        }
    }

    /// Writes a retry; true when the job is queued again.
    fn requeue(&mut self, r: Requeue) -> bool {
        let attempt = self.attempt("a retry", |claimer, c| {
            claimer.retry_within(c, r.id, r.delay, &r.traceback, LOCKED_RETRY)
        });
        match attempt {
            Attempt::Done(Some(owned)) => {
                if !owned {
                    log::warn!(
                        "job {} ({}) was no longer owned by this worker when its retry was \
                         written",
                        r.id,
                        r.entrypoint
                    );
                }
                self.ledger.written([r.id]);
                return owned;
            }
            Attempt::Done(None) => self.hand_back(Vec::new(), vec![r], Vec::new()),
            Attempt::Refused(e) => {
                let quoted = r.traceback.to_string();
                let instead = Outcome {
                    id: r.id,
                    status: Status::Exception,
                    traceback: Some(self.unwritable(r.id, "its retry", &e, &quoted)),
                };
                log::error!(
                    "pgqueuer: the retry of job {} ({}) was refused by the database ({e}); \
                     recording exception with the reason instead",
                    r.id,
                    r.entrypoint
                );
                self.ends(std::slice::from_ref(&instead));
            }
            Attempt::GaveUp => self.ledger.written([r.id]),
        }
        false
    }

    /// Gives unstarted jobs back to the queue, and tells every worker (an UPDATE sends
    /// no notification of its own).
    fn releases(&mut self, ids: Vec<JobId>) {
        let settings = &self.config.settings;
        let payload = Event::TableChanged(TableChanged::new(
            &settings.channel,
            Operation::Update,
            &settings.queue_table,
        ))
        .to_json();
        let attempt = self.attempt("releases", |claimer, c| {
            let (released, locked) = claimer.release_within(c, &ids, LOCKED_RETRY)?;
            if !released.is_empty() {
                c.query_cached(
                    crate::sql::CHANNEL_NOTIFY,
                    &[
                        (&settings.channel, postgres::types::Type::TEXT),
                        (&payload, postgres::types::Type::TEXT),
                    ],
                )?;
            }
            Ok((released, locked))
        });
        match attempt {
            Attempt::Done((released, locked)) => {
                log::debug!("gave {} unstarted jobs back to the queue", released.len());
                self.stats.released(released.len());
                self.ledger
                    .written(ids.iter().copied().filter(|id| !locked.contains(id)));
                self.hand_back(Vec::new(), Vec::new(), locked);
            }
            Attempt::Refused(_) | Attempt::GaveUp => {
                log::error!(
                    "pgqueuer: {} unstarted jobs could not be given back; they are re-picked \
                     once their heartbeat is older than heartbeat_timeout",
                    ids.len()
                );
                self.ledger.written(ids);
            }
        }
    }

    /// PgQueuer's traceback record for an outcome the database refused (`what`: "its
    /// outcome successful", "its retry"), quoting what could not be written.
    fn unwritable(&self, id: JobId, what: &str, error: &Error, quoted: &str) -> serde_json::Value {
        let message = format!("{what} could not be written: {error}");
        serde_json::json!({
            "job_id": id,
            "timestamp": format_time(SystemTime::now(), TimeStyle::Python),
            "exception_type": "OutcomeNotWritten",
            "exception_message": storable_text(&message, QUOTED_TRACEBACK),
            "traceback": storable_text(
                &format!("{message}\nwhat was refused: {quoted}"),
                2 * QUOTED_TRACEBACK
            ),
            "additional_context": {
                "queue_manager_id": self.config.claimer.worker_id().to_string(),
            },
        })
    }

    /// Runs `op` until it succeeds, retrying with backoff while the failure may pass:
    /// outcomes are never dropped while the worker runs. Each failure logs at `error` and
    /// counts. After shutdown it gives up after [`GIVE_UP_AFTER_SHUTDOWN`].
    fn attempt<T>(
        &mut self,
        what: &str,
        mut op: impl FnMut(&Claimer, &mut Conn) -> crate::Result<T>,
    ) -> Attempt<T> {
        let claimer = &self.config.claimer;
        let mut backoff = Duration::from_millis(20);
        loop {
            let e = match self.conn.run(|c| op(claimer, c)) {
                Ok(value) => {
                    self.stats.liveness.write_succeeded();
                    return Attempt::Done(value);
                }
                Err(e) => e,
            };
            let text = e.to_string();
            self.stats.write_failed(&text);
            let refused = match &e {
                Error::Db(db) => sqlstate::refuses_statement(db),
                Error::InvalidInput { .. } => true,
                _ => false,
            };
            if refused {
                log::error!("pgqueuer could not write {what}, which the database refuses: {text}");
                return Attempt::Refused(e);
            }
            log::error!("pgqueuer could not write {what} (retrying in {backoff:?}): {text}");
            if self.shutdown.is_shutdown() {
                let since = *self.stopped_at.get_or_insert_with(Instant::now);
                if since.elapsed() > GIVE_UP_AFTER_SHUTDOWN {
                    log::error!("giving up on {what} after shutdown; the jobs will be re-picked");
                    return Attempt::GaveUp;
                }
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
}
