//! Batched completion: the outcomes of finished handlers, written in one statement per
//! batch (delete or hold the rows, plus their log rows) as soon as they arrive.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::Run;
use crate::claim::Outcome;
use crate::connect::PooledConn;
use crate::job::{JobId, Status};

/// One finished job, from an executor.
pub(crate) struct Finished {
    pub(crate) id: JobId,
    pub(crate) status: Status,
    pub(crate) traceback: Option<serde_json::Value>,
}

/// Most outcomes written by one statement.
const MAX_BATCH: usize = 500;

/// Longest wait for the outcomes of handlers still running before a batch is written.
const LINGER: Duration = Duration::from_millis(2);

/// Runs until every executor has exited (the channel disconnects) and everything
/// received is written.
pub(crate) fn run(run: &Run, outcomes: &Receiver<Finished>) {
    let mut conn: Option<PooledConn> = None;
    while let Ok(first) = outcomes.recv() {
        // Whatever else is already waiting joins this batch, and while other handlers
        // are still running their outcomes are awaited for up to LINGER: one statement
        // then ends several jobs. A lone job is written at once.
        let mut batch = vec![first];
        let deadline = Instant::now() + LINGER;
        while batch.len() < MAX_BATCH {
            match outcomes.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => {
                    if run.executing.load(Ordering::SeqCst) == 0 {
                        break;
                    }
                    match outcomes.recv_deadline(deadline) {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
            }
        }
        write(run, &mut conn, &batch);
    }
}

/// Writes a batch, retrying with backoff while the database is unreachable. Outcomes are
/// never dropped while the worker runs; after shutdown it gives up after a bounded time
/// (the rows then go stale and are re-picked: at-least-once).
fn write(run: &Run, conn: &mut Option<PooledConn>, batch: &[Finished]) {
    let outcomes: Vec<Outcome> = batch
        .iter()
        .map(|f| Outcome {
            id: f.id,
            status: f.status,
            traceback: f.traceback.clone(),
        })
        .collect();
    let mut backoff = Duration::from_millis(20);
    let mut waited = Duration::ZERO;
    loop {
        let result = match conn {
            Some(c) => run.inner.claimer.complete(c, &outcomes),
            None => match run.inner.pool.get() {
                Ok(c) => {
                    *conn = Some(c);
                    continue;
                }
                Err(e) => Err(e.into()),
            },
        };
        match result {
            Ok(written) => {
                log::trace!("completed {} jobs in one statement", outcomes.len());
                if written.len() < outcomes.len() {
                    log::info!(
                        "{} finished jobs were no longer held by this worker (cancelled or re-picked)",
                        outcomes.len() - written.len()
                    );
                }
                let mut running = run.running();
                for f in batch {
                    running.remove(&f.id);
                }
                return;
            }
            Err(e) => {
                log::warn!(
                    "pgqueuer could not write {} outcomes (retrying in {backoff:?}): {e}",
                    batch.len()
                );
                if conn.as_ref().is_some_and(|c| c.is_closed()) || matches!(e, crate::Error::Db(_))
                {
                    conn.take();
                }
                if run.stopping() && waited > Duration::from_secs(30) {
                    log::error!(
                        "giving up on {} outcomes after shutdown; their jobs will be re-picked",
                        batch.len()
                    );
                    return;
                }
                std::thread::sleep(backoff);
                waited += backoff;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
