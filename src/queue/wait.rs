//! [`Queue::wait_for`]: blocking until jobs finish, on a LISTEN connection of its own
//! with polling as the fallback.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::Type;

use super::Queue;
use crate::connect::drop_elsewhere;
use crate::error::{Error, Result, chain};
use crate::events::{Event, Operation};
use crate::job::{JobId, Status, status_of};

/// How often [`Queue::wait_for`] looks at the log when no notification wakes it.
const WAIT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest a pool checkout inside [`Queue::wait_for`] may wait, even when the
/// deadline is nearly reached (a final look is always taken).
const MIN_CHECKOUT_WAIT: Duration = Duration::from_millis(250);

impl Queue {
    /// Blocks until every job of `ids` has a terminal status (`successful`, `exception`,
    /// `canceled` or `deleted`; a held `failed` job is not finished) and returns them.
    ///
    /// Listens on the queue's channel through a connection of its own, so it learns of a
    /// completion at once, and also looks every second in case notifications cannot
    /// arrive (a pooler in transaction mode, a lost connection). The listening connection
    /// is closed on another thread, so a dead network cannot stall the caller. Jobs that
    /// are never logged as terminal (unknown ids, or rows removed by `TRUNCATE`) wait for
    /// the timeout.
    ///
    /// A lost connection (a server restart, a failover) is waited out: the log is read
    /// again, and the LISTEN connection opened again, until the deadline.
    ///
    /// # Errors
    /// [`Error::Timeout`] when `timeout` passes first; [`Error::Pool`] or [`Error::Db`]
    /// when the log cannot be read (for a lost connection: still, at the deadline).
    pub fn wait_for(&self, ids: &[JobId], timeout: Duration) -> Result<HashMap<JobId, Status>> {
        let started = Instant::now();
        let deadline = started
            .checked_add(timeout)
            .unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 86_400));
        let mut pending: BTreeSet<JobId> = ids.iter().copied().collect();
        let mut finished = HashMap::with_capacity(pending.len());
        if pending.is_empty() {
            return Ok(finished);
        }
        // LISTEN before the first look, so that nothing finishing in between is missed.
        let mut listener = Listener::open(self, deadline);
        loop {
            let wanted: Vec<JobId> = pending.iter().copied().collect();
            let checkout = deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_CHECKOUT_WAIT);
            let mut unreachable = None;
            match self.job_statuses_within(&wanted, Some(checkout)) {
                Ok(statuses) => {
                    for (id, status) in statuses {
                        if status.is_terminal() {
                            pending.remove(&id);
                            finished.insert(id, status);
                        }
                    }
                    if listener.lost && !pending.is_empty() {
                        // The database is back (a restart, a failover): listen again.
                        listener = Listener::open(self, deadline);
                    }
                }
                Err(e) if e.is_transient() => {
                    log::warn!("pgqueuer wait_for: cannot read the log now ({e}); trying again");
                    unreachable = Some(e);
                }
                Err(e) => return Err(e),
            }
            if pending.is_empty() {
                return Ok(finished);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(unreachable.unwrap_or(Error::Timeout(timeout)));
            }
            let next = if unreachable.is_some() {
                // Sooner than the poll: a failover's new primary takes seconds at most.
                now + WAIT_POLL_INTERVAL / 4
            } else {
                now + WAIT_POLL_INTERVAL
            };
            listener.wait(next.min(deadline));
        }
    }

    pub(super) fn job_statuses_within(
        &self,
        ids: &[JobId],
        checkout: Option<Duration>,
    ) -> Result<HashMap<JobId, Status>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let mut conn = match checkout {
            Some(wait) => self.pool.get_timeout(wait)?,
            None => self.pool.get()?,
        };
        conn.query_cached(&self.sql.log_select_latest, &[(&ids, Type::INT8_ARRAY)])?
            .iter()
            .map(|row| Ok((row.try_get::<_, JobId>("job_id")?, status_of(row)?)))
            .collect()
    }
}

/// The LISTEN connection of one [`Queue::wait_for`] call. Without one (it could not be
/// opened, or failed) waiting degrades to sleeping until the next poll.
struct Listener {
    client: Option<Client>,
    /// A LISTEN connection worked and was lost (not: none could be had at all): open
    /// one again once the database answers.
    lost: bool,
}

impl Listener {
    /// Opens a connection like the pool's (or to the listen DSN, through a transaction
    /// pooler) and LISTENs on the channel; gives up (and logs why) rather than fail the
    /// wait.
    fn open(queue: &Queue, deadline: Instant) -> Listener {
        let budget = deadline.saturating_duration_since(Instant::now());
        let mut config = match queue.pool.get_timeout(budget.max(MIN_CHECKOUT_WAIT)) {
            Ok(conn) => match conn.listen_target() {
                Some(config) => config,
                // LISTEN through a transaction pooler would not hear anything.
                None => {
                    return Listener {
                        client: None,
                        lost: false,
                    };
                }
            },
            Err(e) => {
                log::warn!("pgqueuer wait_for: no connection to copy for LISTEN ({e}); polling");
                return Listener {
                    client: None,
                    lost: false,
                };
            }
        };
        let connect_timeout = config
            .config()
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(10))
            .min(budget.max(MIN_CHECKOUT_WAIT));
        config.config_mut().connect_timeout(connect_timeout);
        let mut client = match config.connect() {
            Ok(client) => client,
            Err(e) => {
                log::warn!(
                    "pgqueuer wait_for: cannot open a LISTEN connection ({}); polling",
                    chain(&e)
                );
                return Listener {
                    client: None,
                    lost: false,
                };
            }
        };
        if let Err(e) = client.batch_execute(&queue.sql.listen) {
            log::warn!("pgqueuer wait_for: LISTEN failed ({}); polling", chain(&e));
            drop_elsewhere(client);
            return Listener {
                client: None,
                lost: false,
            };
        }
        Listener {
            client: Some(client),
            lost: false,
        }
    }

    /// Returns when a notification that may mean a job finished arrives, or at `until`.
    fn wait(&mut self, until: Instant) {
        loop {
            let now = Instant::now();
            if now >= until {
                return;
            }
            let Some(client) = self.client.as_mut() else {
                std::thread::sleep(until - now);
                return;
            };
            // A fresh timeout_iter per wait: one that has returned None stays exhausted.
            let next = client.notifications().timeout_iter(until - now).next();
            match next {
                Ok(Some(note)) => {
                    if !may_finish_jobs(note.payload()) {
                        continue;
                    }
                    // Swallow what else is already here: one look covers it all.
                    let drained = client.notifications().iter().count();
                    if let Err(e) = drained {
                        self.fail(&e);
                    }
                    return;
                }
                Ok(None) => {
                    if client.is_closed()
                        && let Some(client) = self.client.take()
                    {
                        log::warn!("pgqueuer wait_for: LISTEN connection closed; polling");
                        drop_elsewhere(client);
                        self.lost = true;
                    }
                    return;
                }
                Err(e) => {
                    self.fail(&e);
                    return;
                }
            }
        }
    }

    fn fail(&mut self, err: &postgres::Error) {
        log::warn!(
            "pgqueuer wait_for: LISTEN connection failed ({}); polling",
            chain(err)
        );
        if let Some(client) = self.client.take() {
            drop_elsewhere(client);
            self.lost = true;
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop_elsewhere(client);
        }
    }
}

/// True for the events that follow a job's end: a delete or truncate of queue rows, or a
/// cancellation. A payload that does not parse is looked into too.
fn may_finish_jobs(payload: &str) -> bool {
    match Event::parse(payload) {
        Ok(Event::TableChanged(e)) => {
            matches!(e.operation, Operation::Delete | Operation::Truncate)
        }
        Ok(Event::Cancellation(_)) | Err(_) => true,
        Ok(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Cancellation, TableChanged};

    #[test]
    fn only_endings_wake_a_waiter() {
        let table = |op| Event::from(TableChanged::new("ch_pgqueuer", op, "pgqueuer")).to_json();
        assert!(may_finish_jobs(&table(Operation::Delete)));
        assert!(may_finish_jobs(&table(Operation::Truncate)));
        assert!(!may_finish_jobs(&table(Operation::Insert)));
        assert!(!may_finish_jobs(&table(Operation::Update)));
        assert!(may_finish_jobs(
            &Event::from(Cancellation::new("ch_pgqueuer", vec![1])).to_json()
        ));
        assert!(may_finish_jobs("garbage"));
    }
}
