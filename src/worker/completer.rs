//! The one path of outcomes: executors hand every finished job's outcome to [`Outcomes`],
//! and the completer thread writes them (delete or hold the row, and its log row; or put
//! it back in the queue for a retry).
//!
//! Ends are written in batches: the completer writes whatever waits [`LINGER`] after the
//! first of it arrived, in one statement, so that a burst of finished jobs costs one
//! commit. (Each completion takes PostgreSQL's NOTIFY lock through its commit, the same
//! lock every enqueue needs: fewer and larger completions leave producers more room.)
//! Retries are written at once, since their delay runs from the write.
//!
//! Where slots are scarce (some concurrency limit is no larger than the thread count)
//! and reused ([`crate::WorkerBuilder::reuse_slots`]), the completer lets the dispatcher
//! fold ends into its next claim instead ([`Outcomes::for_claim`],
//! [`crate::Claimer::complete_and_claim`]): their slots are then free to that very claim,
//! and a slot turns over with one commit instead of two. What no claim took within the
//! linger, the completer writes itself. Where slots are scarce and not reused, it writes
//! after a shorter linger ([`SCARCE_LINGER`]), since a finished job holds its slot until
//! its row is written, and rings the dispatcher after each write.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, select};

use super::builder::WorkerConfig;
use super::state::{ConnSlot, Doorbell, Running, Wake, lock};
use crate::claim::{Claimer, Outcome};
use crate::connect::PooledConn;
use crate::job::JobId;
use crate::shutdown::ShutdownHandle;

/// A job to put back in the queue after `delay`, logging `queued` with the reason.
pub(crate) struct Requeue {
    pub(crate) id: JobId,
    /// For the log line, should the retry not be written.
    pub(crate) entrypoint: String,
    pub(crate) delay: Duration,
    pub(crate) traceback: serde_json::Value,
}

/// Most outcomes written by one statement.
const MAX_BATCH: usize = 500;

/// How long the completer waits for more outcomes after the first before writing.
const LINGER: Duration = Duration::from_millis(5);

/// [`LINGER`] when slots are scarce and not reused: a finished job holds its slot until
/// its row is written.
const SCARCE_LINGER: Duration = Duration::from_millis(1);

/// Outcomes not yet written.
#[derive(Default)]
struct Pending {
    /// Deletes (or holds, for `Failed`) with their log rows.
    ends: Vec<Outcome>,
    /// Written by the completer only, without waiting.
    requeues: Vec<Requeue>,
}

/// Where executors leave outcomes for the completer (and, when it so decides, for the
/// dispatcher's next claim).
pub(crate) struct Outcomes {
    pending: std::sync::Mutex<Pending>,
    /// Tells the completer that outcomes wait (a token; several coalesce).
    signal_tx: Sender<()>,
    signal_rx: Receiver<()>,
    /// Claims take ends along (see the module docs).
    fold: bool,
}

impl Outcomes {
    pub(crate) fn new(config: &WorkerConfig) -> Outcomes {
        let (signal_tx, signal_rx) = crossbeam_channel::bounded(1);
        Outcomes {
            pending: std::sync::Mutex::new(Pending::default()),
            signal_tx,
            signal_rx,
            fold: config.fold_outcomes,
        }
    }

    /// An executor's finished job: deleted or held, with its log row.
    pub(crate) fn finished(&self, outcome: Outcome) {
        lock(&self.pending).ends.push(outcome);
        let _ = self.signal_tx.try_send(());
    }

    /// An executor's job to run again later.
    pub(crate) fn requeue(&self, requeue: Requeue) {
        lock(&self.pending).requeues.push(requeue);
        let _ = self.signal_tx.try_send(());
    }

    /// The ends the next claim should write (up to a batch), or none when claims do not
    /// take ends along.
    pub(crate) fn for_claim(&self) -> Vec<Outcome> {
        if !self.fold {
            return Vec::new();
        }
        let mut pending = lock(&self.pending);
        let n = pending.ends.len().min(MAX_BATCH);
        pending.ends.drain(..n).collect()
    }

    /// After a claim that took `taken` along: the ids in `written` are no longer held;
    /// the others come back for the completer, which retries rows that were locked.
    pub(crate) fn after_claim(&self, taken: Vec<Outcome>, written: &[JobId], running: &Running) {
        if taken.is_empty() {
            return;
        }
        let (done, rest): (Vec<Outcome>, Vec<Outcome>) =
            taken.into_iter().partition(|o| written.contains(&o.id));
        running.remove(done.iter().map(|o| o.id));
        if !rest.is_empty() {
            lock(&self.pending).ends.extend(rest);
            let _ = self.signal_tx.try_send(());
        }
    }

    /// The jobs whose ends the next claim would take along (none when claims do not).
    pub(crate) fn foldable_ids(&self) -> Vec<JobId> {
        if !self.fold {
            return Vec::new();
        }
        let pending = lock(&self.pending);
        pending.ends.iter().take(MAX_BATCH).map(|o| o.id).collect()
    }

    /// True when ends wait for a claim to take them along.
    pub(crate) fn waiting_for_claim(&self) -> bool {
        self.fold && !lock(&self.pending).ends.is_empty()
    }

    fn take_all(&self) -> Pending {
        std::mem::take(&mut *lock(&self.pending))
    }

    fn requeue_waiting(&self) -> bool {
        !lock(&self.pending).requeues.is_empty()
    }
}

/// The completer thread: runs until every executor has exited (`alive` disconnects) and
/// everything left is written.
pub(crate) fn run(
    config: &WorkerConfig,
    outcomes: &Outcomes,
    running: &Running,
    doorbell: &Doorbell,
    shutdown: &ShutdownHandle,
    alive: &Receiver<()>,
) {
    let mut writer = Writer {
        config,
        conn: ConnSlot::new(&config.pool),
        running,
        shutdown,
    };
    let linger = if config.slots_scarce && !config.fold_outcomes {
        SCARCE_LINGER
    } else {
        // When claims take ends along, what is left here is what no claim took: no hurry.
        LINGER
    };
    loop {
        // `alive` carries no messages: it disconnects once every executor has exited,
        // after which no outcome can come any more.
        let open = select! {
            recv(outcomes.signal_rx) -> _ => true,
            recv(alive) -> _ => false,
        };
        if open && !outcomes.requeue_waiting() {
            // One sleep for the whole wait: waking per finished job would cost more than
            // the write.
            std::thread::sleep(linger);
        }
        // Everything waiting now; what comes during the writes is the next signal's.
        let Pending { ends, requeues } = outcomes.take_all();
        for chunk in ends.chunks(MAX_BATCH) {
            writer.ends(chunk);
        }
        for requeue in &requeues {
            writer.requeue(requeue);
        }
        if !(ends.is_empty() && requeues.is_empty()) {
            // Slots are free now, before the NOTIFY of the deletion comes round.
            doorbell.ring_if_wanted(Wake::Written);
        }
        if !open {
            return;
        }
    }
}

/// The completer's connection and what its writes update.
struct Writer<'a> {
    config: &'a WorkerConfig,
    conn: ConnSlot<'a>,
    running: &'a Running,
    shutdown: &'a ShutdownHandle,
}

impl Writer<'_> {
    /// Writes ends in one statement; the rows are no longer held afterwards.
    fn ends(&mut self, ends: &[Outcome]) {
        if let Some(written) = self.persist("outcomes", |claimer, c| claimer.complete(c, ends)) {
            log::trace!("completed {} jobs in one statement", ends.len());
            if written.len() < ends.len() {
                for o in ends.iter().filter(|o| !written.contains(&o.id)) {
                    log::info!(
                        "job {} finished but was no longer held by this worker (cancelled or \
                         re-picked); its outcome {} was not written",
                        o.id,
                        o.status.as_str()
                    );
                }
            }
        }
        self.running.remove(ends.iter().map(|o| o.id));
    }

    fn requeue(&mut self, r: &Requeue) {
        let owned = self.persist("a retry", |claimer, c| {
            claimer.retry(c, r.id, r.delay, &r.traceback)
        });
        if owned == Some(false) {
            log::warn!(
                "job {} ({}) was no longer held by this worker when its retry was written",
                r.id,
                r.entrypoint
            );
        }
        self.running.remove([r.id]);
    }

    /// Runs `op` until it succeeds, retrying with backoff while the database is
    /// unreachable: outcomes are never dropped while the worker runs. After shutdown it
    /// gives up after a bounded time (`None`): the rows then go stale and are re-picked
    /// (at-least-once).
    fn persist<T>(
        &mut self,
        what: &str,
        mut op: impl FnMut(&Claimer, &mut PooledConn) -> crate::Result<T>,
    ) -> Option<T> {
        let claimer = &self.config.claimer;
        let mut backoff = Duration::from_millis(20);
        let mut waited = Duration::ZERO;
        loop {
            match self.conn.run(|c| op(claimer, c)) {
                Ok(value) => return Some(value),
                Err(e) => {
                    log::warn!("pgqueuer could not write {what} (retrying in {backoff:?}): {e}");
                    if self.shutdown.is_shutdown() && waited > Duration::from_secs(30) {
                        log::error!(
                            "giving up on {what} after shutdown; the jobs will be re-picked"
                        );
                        return None;
                    }
                    std::thread::sleep(backoff);
                    waited += backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}
