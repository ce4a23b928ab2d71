//! Batched completion: the outcomes of finished handlers, written in one statement per
//! batch (delete or hold the rows, plus their log rows) as soon as they arrive.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::Run;
use super::executor::drop_if_broken;
use crate::claim::Outcome;
use crate::connect::PooledConn;
use crate::job::{JobId, Status};

/// One finished job, from an executor.
pub(crate) struct Finished {
    pub(crate) id: JobId,
    pub(crate) end: End,
}

/// How a job ended.
pub(crate) enum End {
    /// Delete (or hold, for `Failed`) the row and log the status.
    Done {
        status: Status,
        traceback: Option<serde_json::Value>,
    },
    /// Put the row back in the queue after `delay`, logging `queued` with the reason.
    Retry {
        delay: Duration,
        traceback: serde_json::Value,
    },
}

/// Most outcomes written by one statement.
const MAX_BATCH: usize = 500;

/// Longest wait for more outcomes before a batch is written.
const LINGER: Duration = Duration::from_millis(5);

/// Outcomes arriving within this long of the previous write mean jobs are finishing
/// steadily: the next batch then lingers even when no handler is running right now.
const STEADY: Duration = Duration::from_millis(20);

/// Runs until every executor has exited (the channel disconnects) and everything
/// received is written.
///
/// Whatever else is already waiting joins a batch. While handlers are still running, or
/// while jobs finish steadily, outcomes are awaited for up to [`LINGER`] so that one
/// statement (and one commit) ends many jobs: each completion takes PostgreSQL's NOTIFY
/// lock through its commit, the same lock every enqueue needs, so fewer and larger
/// completions leave producers more room. A lone job after a quiet spell is written at
/// once, and so is every batch when seats are scarce (a concurrency limit no larger than
/// the worker's thread count): a finished job holds its seat until its row is written.
/// Then a claimer is also woken after each write, as the seats are free now, before the
/// NOTIFY of the deletion comes round through the listener.
pub(crate) fn run(run: &Run, outcomes: &Receiver<Finished>, wake: &Sender<()>) {
    let mut conn: Option<PooledConn> = None;
    let mut last_write: Option<Instant> = None;
    let may_linger = !run.inner.seats_scarce;
    while let Ok(first) = outcomes.recv() {
        let steady = last_write.is_some_and(|at| at.elapsed() < STEADY);
        let mut batch = vec![first];
        let deadline = Instant::now() + LINGER;
        let mut lingered = false;
        while batch.len() < MAX_BATCH {
            match outcomes.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => {
                    if lingered
                        || !may_linger
                        || (!steady && run.executing.load(Ordering::SeqCst) == 0)
                    {
                        break;
                    }
                    // One sleep for the whole wait, then take what arrived: waiting on
                    // the channel would wake this thread once per finished job.
                    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                    lingered = true;
                }
            }
        }
        write(run, &mut conn, &batch);
        last_write = Some(Instant::now());
        if !may_linger {
            let _ = wake.try_send(());
        }
    }
}

/// Writes a batch (ends in one statement, then each retry), retrying with backoff while
/// the database is unreachable. Outcomes are never dropped while the worker runs; after
/// shutdown it gives up after a bounded time (the rows then go stale and are re-picked:
/// at-least-once).
fn write(run: &Run, conn: &mut Option<PooledConn>, batch: &[Finished]) {
    let ends: Vec<Outcome> = batch
        .iter()
        .filter_map(|f| match &f.end {
            End::Done { status, traceback } => Some(Outcome {
                id: f.id,
                status: *status,
                traceback: traceback.clone(),
            }),
            End::Retry { .. } => None,
        })
        .collect();
    if !ends.is_empty() {
        let written = persist(run, conn, "outcomes", |claimer, c| {
            claimer.complete(c, &ends)
        });
        if let Some(written) = written {
            log::trace!("completed {} jobs in one statement", ends.len());
            if written.len() < ends.len() {
                log::info!(
                    "{} finished jobs were no longer held by this worker (cancelled or re-picked)",
                    ends.len() - written.len()
                );
            }
        }
    }
    for f in batch {
        if let End::Retry { delay, traceback } = &f.end {
            let owned = persist(run, conn, "a retry", |claimer, c| {
                claimer.retry(c, f.id, *delay, traceback)
            });
            if owned == Some(false) {
                log::warn!("job {} was no longer ours when its retry was written", f.id);
            }
        }
    }
    let mut running = run.running();
    for f in batch {
        running.remove(&f.id);
    }
}

/// Runs `op` on the completer's connection until it succeeds, or until shutdown plus a
/// bounded time (`None`).
fn persist<T>(
    run: &Run,
    conn: &mut Option<PooledConn>,
    what: &str,
    mut op: impl FnMut(&crate::Claimer, &mut PooledConn) -> crate::Result<T>,
) -> Option<T> {
    let mut backoff = Duration::from_millis(20);
    let mut waited = Duration::ZERO;
    loop {
        let result = match conn {
            Some(c) => op(&run.inner.claimer, c),
            None => match run.checkout() {
                Ok(c) => {
                    *conn = Some(c);
                    continue;
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(value) => return Some(value),
            Err(e) => {
                log::warn!("pgqueuer could not write {what} (retrying in {backoff:?}): {e}");
                drop_if_broken(conn, &e);
                if run.stopping() && waited > Duration::from_secs(30) {
                    log::error!("giving up on {what} after shutdown; the jobs will be re-picked");
                    return None;
                }
                std::thread::sleep(backoff);
                waited += backoff;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
