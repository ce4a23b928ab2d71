//! The executor thread loop: take a handed-over job or claim, run, pass on the outcome.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, TryLockError};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender, select};

use super::Run;
use super::completer::Retry;
use super::entrypoint::{Context, JobError};
use crate::claim::Outcome;
use crate::connect::PooledConn;
use crate::error::{Error, chain};
use crate::job::{Job, Status};
use crate::sqlstate;
use crate::time::{TimeStyle, format_time, python_timedelta};

/// Shortest idle wait when work is known to be queued but could not be claimed (limits
/// full, rows locked): PgQueuer's `min_dequeue_poll_interval`.
const MIN_POLL: Duration = Duration::from_millis(100);

/// Most finished jobs waiting for the completer before claiming pauses: their rows (and
/// concurrency seats) stay held until written, so claiming on would only grow the debt.
const UNWRITTEN_LIMIT: usize = 500;

/// Why an idle executor is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// There may be something to claim: a table change, a full or contended batch, or
    /// seats freed.
    Claim,
    /// Jobs were handed over (see `take_handed_over`).
    HandOff,
}

/// The channels one executor uses.
pub(crate) struct Channels {
    /// Wake tokens: from the listener on table changes, from executors that claimed a
    /// full batch (more work is likely waiting), and for handed-over jobs (one idle thread
    /// at a time, see `take_handed_over`).
    pub(crate) wake_tx: Sender<Wake>,
    pub(crate) wake_rx: Receiver<Wake>,
    /// Jobs claimed by one executor for other, idle ones. Nobody blocks on it: a send
    /// wakes no thread by itself.
    pub(crate) handoff_tx: Sender<Job>,
    pub(crate) handoff_rx: Receiver<Job>,
    /// Tells the completer that outcomes wait in `Run::unwritten`.
    pub(crate) outcome_tx: Sender<()>,
    /// Held while this executor lives (see `Worker::run_mode`).
    pub(crate) _alive: Sender<()>,
}

/// The executor loop of thread `index`.
pub(crate) fn run(run: &Run, index: usize, ch: &Channels) {
    let mut rng = Jitter::new(index);
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Some(job) = take_handed_over(run, ch) {
            execute(run, job, ch, &mut rng);
            run.release(1);
            continue;
        }
        if run.stopping() {
            break;
        }
        if run.running().len() >= run.inner.threads + UNWRITTEN_LIMIT {
            // The completer is behind: claim no more until it has written what ran.
            wait(run, ch, Duration::from_millis(2), &mut rng);
            continue;
        }
        if let Some(left) = run.quiet_for() {
            // A claim just found nothing for us and nothing has changed since: another
            // would only cost the server a query. Wait for a change or the next due job.
            wait(run, ch, left, &mut rng);
            continue;
        }
        // One claim at a time per claim connection: the claimer claims for every idle
        // thread not yet reserved, so this thread, if idle, gets a handed-over job from
        // it. With every claim connection busy, wait for a handed-over job or a wake-up.
        let Some(mut slot) = run.claim_conns.iter().enumerate().find_map(|(i, m)| {
            if i > 0 && !run.batch_bound.load(Ordering::SeqCst) {
                // A second claim in flight only pays when the batch size, not the idle
                // threads, is what bounds claims: it would otherwise split the idle
                // threads between two smaller claims, each paying a commit.
                return None;
            }
            match m.try_lock() {
                Ok(slot) => Some(slot),
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            }
        }) else {
            wait(run, ch, run.inner.dequeue_timeout, &mut rng);
            continue;
        };
        let take = run.reserve(run.inner.batch_size);
        if take == 0 {
            // Every idle thread is promised a handed-over job; ours is on its way.
            drop(slot);
            wait(run, ch, Duration::from_millis(5), &mut rng);
            continue;
        }
        run.changed.store(false, Ordering::SeqCst);
        // When seats are scarce (and may be reused), finished jobs' ends ride along: one
        // statement and one commit for both, and their seats are free to this claim.
        let ends = if run.inner.ends_ride_claims {
            run.take_ends()
        } else {
            Vec::new()
        };
        let claimed = connection(run, &mut slot)
            .and_then(|c| run.inner.claimer.complete_and_claim(c, &ends, take));
        let written = claimed.as_ref().map_or(&[][..], |c| &c.ended[..]);
        run.ends_written(ends, written, &ch.outcome_tx);
        let claim = match claimed {
            Ok(claim) => claim,
            Err(e) => {
                drop_if_broken(&mut slot, &e);
                drop(slot);
                run.release(take);
                log::warn!("pgqueuer claim failed (retrying in {backoff:?}): {e}");
                sleep_or_shutdown(run, backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        let n = claim.jobs.len();
        run.batch_bound
            .store(n == take && take == run.inner.batch_size, Ordering::SeqCst);
        run.release(take - n);
        if n == 0 {
            log::trace!("empty claim (lost race: {})", claim.lost_race);
            if claim.lost_race {
                // The winner has committed; claim again in a moment.
                drop(slot);
                std::thread::sleep(rng.duration(Duration::from_micros(500)));
                continue;
            }
            if run.changed.load(Ordering::SeqCst) {
                // Jobs may have arrived after this claim's snapshot: look again.
                continue;
            }
            let next_due = next_due(run, &mut slot);
            drop(slot);
            idle(run, ch, next_due, &mut rng);
            continue;
        }
        drop(slot);
        log::trace!("claimed {n} jobs ({take} threads reserved)");
        // A partial batch took everything due as of its snapshot (unless seats were what
        // it lacked): until something changes, another claim would find nothing (deferred
        // jobs are looked for again after the shortest idle wait, as after an empty claim).
        let drained = n < take && !claim.lost_race && !run.inner.claimer.is_capacity_gated();
        run.set_quiet(if drained { MIN_POLL } else { Duration::ZERO });
        {
            let mut running = run.running();
            for job in &claim.jobs {
                running.insert(job.id, Arc::new(AtomicBool::new(false)));
            }
        }
        if n == take
            || claim.lost_race
            || run.changed.load(Ordering::SeqCst)
            || (run.inner.ends_ride_claims && run.ends_waiting())
        {
            // A full or contended batch, or a change after its snapshot: more work is
            // probably waiting for the next claimer. Or, when seats are scarce, jobs
            // finished meanwhile, whose seats the next claim frees and takes.
            let _ = ch.wake_tx.try_send(Wake::Claim);
        }
        let mut jobs = claim.jobs.into_iter();
        let first = jobs.next();
        if n > 1 {
            for job in jobs {
                // Cannot fail: this thread holds a receiver.
                let _ = ch.handoff_tx.send(job);
            }
            // One idle thread is woken for the handed-over jobs; it wakes the next if
            // any are left when it takes one (see `take_handed_over`).
            wake_for_handed_over(run, ch);
        }
        if let Some(job) = first {
            execute(run, job, ch, &mut rng);
        }
        run.release(1);
    }
    // Jobs handed over after the other threads left are run here.
    while let Some(job) = take_handed_over(run, ch) {
        execute(run, job, ch, &mut rng);
        run.release(1);
    }
}

/// When the next queued job of our entrypoints is due (`None`: nothing queued). On a
/// database error, a short poll instead.
fn next_due(run: &Run, slot: &mut Option<PooledConn>) -> Option<Duration> {
    match connection(run, slot).and_then(|c| run.inner.claimer.next_due(c)) {
        Ok(due) => due,
        Err(e) => {
            drop_if_broken(slot, &e);
            Some(MIN_POLL)
        }
    }
}

/// Nothing to claim: stop (drain mode) or wait for a wake-up, a handed-over job, the
/// next deferred job's due time, the dequeue timeout or shutdown.
fn idle(run: &Run, ch: &Channels, next_due: Option<Duration>, rng: &mut Jitter) {
    if run.drain && next_due.is_none() {
        if run.running().is_empty() && ch.handoff_rx.is_empty() {
            log::debug!("drain: nothing queued and nothing running; stopping");
            run.shutdown.shutdown();
            return;
        }
        // Jobs are still running or being written: look again soon, not after the
        // whole dequeue timeout.
        run.set_quiet(MIN_POLL);
        wait(run, ch, MIN_POLL, rng);
        return;
    }
    let timeout = match next_due {
        Some(due) => due.clamp(MIN_POLL, run.inner.dequeue_timeout),
        None => run.inner.dequeue_timeout,
    };
    if run.drain && timeout > MIN_POLL {
        log::info!(
            "pgqueuer drain: nothing is due, but a queued job is deferred (due in {:?}); \
             waiting {timeout:?} before looking again (run_until_empty waits for deferred jobs)",
            next_due.unwrap_or_default()
        );
    }
    // Until then no thread claims unless the listener reports a change: threads coming
    // back from their jobs would otherwise each run a claim that finds nothing.
    run.set_quiet(timeout);
    wait(run, ch, timeout, rng);
}

/// A job handed over by a claimer, if any is waiting; wakes one more idle thread when
/// others are still waiting after this one.
///
/// Handed-over jobs are picked up by whichever thread comes first: a thread back from
/// its own job, or an idle one woken for them. Idle threads are woken one at a time, each
/// by the previous taker, so a batch of short jobs wakes only the few threads it keeps
/// busy rather than one per job (each wake of a sleeping thread costs several
/// microseconds of CPU, as much as PostgreSQL spends on a good part of the job itself).
/// No job waits for a wake that never comes: the claimer, too, comes back for them once
/// its own job is done.
fn take_handed_over(run: &Run, ch: &Channels) -> Option<Job> {
    let job = ch.handoff_rx.try_recv().ok()?;
    if !ch.handoff_rx.is_empty() {
        wake_for_handed_over(run, ch);
    }
    Some(job)
}

/// Wakes one idle thread for handed-over jobs, unless one is already woken for them and
/// has not yet come round (takers would otherwise send a token each, and every token
/// wakes a thread).
fn wake_for_handed_over(run: &Run, ch: &Channels) {
    if !run.handoff_wake.swap(true, Ordering::SeqCst) {
        let _ = ch.wake_tx.try_send(Wake::HandOff);
    }
}

/// Sleeps until a wake-up, shutdown or `timeout`. A thread woken for handed-over jobs
/// runs one; if other threads took them all first it sleeps on rather than claim (only a
/// [`Wake::Claim`] says there may be something to claim).
fn wait(run: &Run, ch: &Channels, timeout: Duration, rng: &mut Jitter) {
    let deadline = Instant::now() + timeout;
    loop {
        select! {
            recv(ch.wake_rx) -> wake => {
                if !matches!(wake, Ok(Wake::HandOff)) {
                    // Whoever sent it knows something a quiet spell does not (a change,
                    // freed seats, a listener that reconnected and may have missed some).
                    run.set_quiet(Duration::ZERO);
                    return;
                }
                run.handoff_wake.store(false, Ordering::SeqCst);
                if let Some(job) = take_handed_over(run, ch) {
                    execute(run, job, ch, rng);
                    run.release(1);
                    return;
                }
            }
            recv(run.shutdown.receiver()) -> _ => return,
            default(deadline.saturating_duration_since(Instant::now())) => return,
        }
    }
}

fn sleep_or_shutdown(run: &Run, d: Duration) {
    let _ = run.shutdown.receiver().recv_timeout(d);
}

/// The claim connection, checked out from the pool on first use and kept.
fn connection<'c>(
    run: &Run,
    conn: &'c mut Option<PooledConn>,
) -> Result<&'c mut PooledConn, Error> {
    if conn.is_none() {
        *conn = Some(run.checkout()?);
    }
    Ok(conn.as_mut().unwrap_or_else(|| unreachable!("set above")))
}

/// Gives a connection back (the pool discards it if closed) after a connection error.
pub(crate) fn drop_if_broken(conn: &mut Option<PooledConn>, e: &Error) {
    let lost = match e {
        Error::Db(db) => sqlstate::is_connection_lost(db),
        Error::Pool(_) => true,
        _ => false,
    };
    if lost || conn.as_ref().is_some_and(|c| c.is_closed()) {
        conn.take();
    }
}

/// Runs one claimed job and hands its outcome on.
#[allow(
    clippy::needless_pass_by_value,
    reason = "the job is consumed here: it ends with this call"
)]
fn execute(run: &Run, job: Job, ch: &Channels, rng: &mut Jitter) {
    let inner = &run.inner;
    let Some(flag) = run.running().get(&job.id).cloned() else {
        log::warn!("job {} is not registered as running; skipping it", job.id);
        return;
    };
    let Some(entry) = inner.registry.by_name.get(&job.entrypoint) else {
        // Cannot happen: the claim only takes our entrypoints.
        log::error!("job {} has unknown entrypoint {:?}", job.id, job.entrypoint);
        return;
    };
    if flag.load(Ordering::SeqCst) {
        run.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        finish(run, ch, job.id, Status::Canceled, None);
        return;
    }
    let ctx = Context {
        job_id: job.id,
        cancelled: &flag,
        resources: inner.resources.as_deref(),
        worker_id: inner.claimer.worker_id(),
    };
    log::trace!("running job {} ({})", job.id, job.entrypoint);
    let result = catch_unwind(AssertUnwindSafe(|| (entry.handler)(&job, &ctx)));
    let failure = match result {
        Ok(Ok(())) => {
            if flag.load(Ordering::SeqCst) {
                run.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                finish(run, ch, job.id, Status::Canceled, None);
            } else {
                run.counters.succeeded.fetch_add(1, Ordering::Relaxed);
                finish(run, ch, job.id, Status::Successful, None);
            }
            return;
        }
        Ok(Err(JobError::Retry(retry))) => {
            let reason = retry.reason.as_deref();
            requeue(
                run,
                ch,
                &job,
                retry.delay,
                "RetryRequested",
                reason.unwrap_or(""),
                reason,
            );
            return;
        }
        Ok(Err(JobError::Failed { error, type_name })) => Failure {
            type_name,
            message: error.to_string(),
            traceback: chain(error.as_ref()).to_string(),
        },
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "handler panicked".to_owned());
            Failure {
                type_name: "Panic",
                traceback: format!("the handler panicked: {message}"),
                message,
            }
        }
    };
    if flag.load(Ordering::SeqCst) {
        run.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        finish(run, ch, job.id, Status::Canceled, None);
        return;
    }
    if let Some(policy) = &entry.options.retry
        && let Some(delay) = policy.delay_for(job.attempts, rng.unit())
    {
        log::info!(
            "job {} ({}) failed ({}: {}); retrying in {delay:?}",
            job.id,
            job.entrypoint,
            failure.type_name,
            failure.message
        );
        requeue(
            run,
            ch,
            &job,
            delay,
            failure.type_name,
            &failure.message,
            Some(&failure.message),
        );
        return;
    }
    super::warn_always(format_args!(
        "job {} ({}) failed: {}: {}",
        job.id, job.entrypoint, failure.type_name, failure.traceback
    ));
    run.counters.failed.fetch_add(1, Ordering::Relaxed);
    let status = match entry.options.on_failure {
        super::OnFailure::Delete => Status::Exception,
        super::OnFailure::Hold => Status::Failed,
    };
    let traceback = traceback_json(run, &job, &failure, None);
    finish(run, ch, job.id, status, Some(traceback));
}

/// A handler failure, described for the log's traceback record.
struct Failure {
    type_name: &'static str,
    message: String,
    traceback: String,
}

/// Hands a retry to the completer, which writes it at once.
fn requeue(
    run: &Run,
    ch: &Channels,
    job: &Job,
    delay: Duration,
    type_name: &'static str,
    message: &str,
    reason: Option<&str>,
) {
    let failure = Failure {
        type_name,
        message: message.to_owned(),
        traceback: format!("retry requested: {message}"),
    };
    let traceback = traceback_json(run, job, &failure, Some((delay, reason)));
    run.counters.retried.fetch_add(1, Ordering::Relaxed);
    let retry = Retry {
        id: job.id,
        delay,
        traceback,
    };
    run.retry_later(retry, &ch.outcome_tx);
}

fn finish(run: &Run, ch: &Channels, id: i64, status: Status, traceback: Option<serde_json::Value>) {
    let outcome = Outcome {
        id,
        status,
        traceback,
    };
    run.finished(outcome, &ch.outcome_tx);
}

/// PgQueuer's `TracebackRecord`: all six keys, which Python readers require.
fn traceback_json(
    run: &Run,
    job: &Job,
    failure: &Failure,
    retry: Option<(Duration, Option<&str>)>,
) -> serde_json::Value {
    let mut context = serde_json::json!({
        "entrypoint": job.entrypoint,
        "queue_manager_id": run.inner.claimer.worker_id().to_string(),
    });
    if let Some((delay, reason)) = retry {
        context["attempt"] = job.attempts.into();
        context["retry_delay"] = python_timedelta(delay).into();
        context["reason"] = reason.map_or(serde_json::Value::Null, Into::into);
    }
    serde_json::json!({
        "job_id": job.id,
        "timestamp": format_time(SystemTime::now(), TimeStyle::Python),
        "exception_type": failure.type_name,
        "exception_message": failure.message,
        "traceback": failure.traceback,
        "additional_context": context,
    })
}

/// A small xorshift generator for jitter (no dependency, no shared state).
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: usize) -> Jitter {
        let time = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Jitter(u64::from(time) ^ (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, max)`.
    pub(crate) fn duration(&mut self, max: Duration) -> Duration {
        max.mul_f64(self.unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        let mut j = Jitter::new(3);
        for _ in 0..1000 {
            let u = j.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
