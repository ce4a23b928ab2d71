//! [`Scheduler`]: cron schedules run on a small thread pool, sharing PgQueuer's
//! schedules table.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Receiver, select};
use postgres::types::Type;

use super::builder::SchedulerBuilder;
use super::{Schedule, ScheduleId};
use crate::connect::Pool;
use crate::cron::Cron;
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::shutdown::ShutdownHandle;
use crate::sql::schedule::ScheduleSql;

/// What a schedule handler returns on failure. The error is logged; the schedule fires
/// again at its next time either way.
pub(super) type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// A registered handler.
pub(super) type Handler = dyn Fn(&Schedule) -> Result<(), HandlerError> + Send + Sync;

/// How often running schedules are marked alive. Another scheduler takes a schedule
/// over when its heartbeat is more than 30 s old (hard-coded in PgQueuer's SQL).
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// How long after a fire time the scheduler looks for due schedules, so that the
/// server's `now()` has passed it.
const WAKE_MARGIN: Duration = Duration::from_millis(20);

/// The longest the scheduler sleeps between looks, even when nothing is due for hours,
/// so that schedules abandoned by a dead scheduler are taken over soon after they go
/// stale.
const MAX_IDLE: Duration = Duration::from_secs(10);

/// The longest wait after a failed look at the table (the wait doubles from 1 s).
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How many times a finished schedule's release is tried before it is left to go
/// stale (another scheduler then takes it over after 30 s).
const RELEASE_ATTEMPTS: u32 = 3;

/// Runs handlers on cron schedules kept in PgQueuer's schedules table.
///
/// Any number of schedulers, Rust or Python (`SchedulerManager`), in any number of
/// processes and hosts, may register the same schedule: each fire runs once, on
/// whichever scheduler claims the row first (`FOR UPDATE SKIP LOCKED`). A schedule is
/// identified by its entrypoint and its [normalized](Cron::normalized) expression, so
/// `0 9 * * MON` registered in Rust and `0 9 * * mon` in Python are one schedule.
///
/// Built and run as a [`crate::Worker`] is: [`Scheduler::builder`], then
/// [`Scheduler::run`] (blocking) or [`Scheduler::start`] (in the background).
///
/// ```no_run
/// # fn main() -> Result<(), pgqueuer::Error> {
/// use pgqueuer::Scheduler;
///
/// let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
/// let scheduler = Scheduler::builder(pool)
///     .schedule("nightly_report", "@daily", |schedule| {
///         println!("report for schedule {}", schedule.id);
///         Ok(())
///     })
///     .schedule("poll", "* * * * * */10", |_| Ok(()))
///     .build()?; // checks the expressions and the schema
/// let running = scheduler.start()?;
/// // ...
/// running.join()?; // stops claiming, lets running handlers finish
/// # Ok(())
/// # }
/// ```
///
/// # How it runs
///
/// [`Scheduler::run`] inserts a row for every registration that has none (the first
/// fire is the next cron time), then loops: claim the due rows, hand them to a pool of
/// [`threads`](SchedulerBuilder::threads) handler threads, sleep until the earliest next
/// fire of any registration. A handler's row stays `picked` while it runs and is marked
/// alive every second; afterwards it goes back to `queued` with `last_run` set, whether
/// the handler succeeded, failed or panicked (failures and panics are logged). A row
/// whose heartbeat is more than 30 s old is taken over by the next scheduler that looks,
/// so a schedule whose scheduler died is not lost (and one whose scheduler merely
/// stalled that long may run twice). Fires missed while no scheduler ran are not
/// replayed: each claim sets the next fire from the current time.
///
/// A scheduler holds at most `threads + 1` connections of its pool at once (the
/// claiming loop, and each handler thread while it releases its row), and one of its
/// own for the heartbeat, outside the pool, so that handlers that use the same pool
/// cannot keep running schedules from their heartbeats.
///
/// # Shutdown
///
/// [`ShutdownHandle::shutdown`] stops claiming; handlers already claimed run to the
/// end and are released, then every thread is joined and `run` returns. No thread
/// outlives `run`.
pub struct Scheduler {
    pub(super) pool: Pool,
    pub(super) sql: Arc<ScheduleSql>,
    pub(super) settings: Settings,
    pub(super) registrations: Vec<Registration>,
    pub(super) clean_old: BTreeSet<String>,
    pub(super) threads: usize,
    pub(super) shutdown: ShutdownHandle,
    pub(super) stop: Receiver<()>,
}

/// One `schedule()` call.
pub(super) struct Registration {
    pub(super) entrypoint: String,
    pub(super) cron: Cron,
    pub(super) handler: Arc<Handler>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registrations: Vec<(&str, &str)> = self
            .registrations
            .iter()
            .map(|r| (r.entrypoint.as_str(), r.cron.normalized()))
            .collect();
        f.debug_struct("Scheduler")
            .field("schedules_table", &self.settings.schedules_table)
            .field("registrations", &registrations)
            .field("clean_old", &self.clean_old)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// How many handler threads [`SchedulerBuilder::threads`] defaults to.
    pub const DEFAULT_THREADS: usize = 4;

    /// A builder using `pool`.
    pub fn builder(pool: Pool) -> SchedulerBuilder {
        SchedulerBuilder::new(pool)
    }

    /// A handle that stops [`Scheduler::run`] from any thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Runs the schedules until [`ShutdownHandle::shutdown`] is called, then waits for
    /// running handlers and returns. Returns at once if shutdown was already requested.
    ///
    /// Database failures while running (a lost connection, a restart) are logged and
    /// retried with a growing wait of up to 30 s; they do not end `run`.
    ///
    /// # Errors
    /// Before any schedule runs: [`Error::Pool`] or [`Error::Db`] when the schedules
    /// cannot be cleaned or inserted; [`Error::Worker`] when a thread cannot be started.
    pub fn run(&self) -> Result<()> {
        if self.shutdown.is_shutdown() {
            return Ok(());
        }
        let beat_conn = self.prepare()?;
        let runner = Runner {
            pool: &self.pool,
            beat_conn,
            sql: &self.sql,
            registrations: &self.registrations,
            active: Mutex::new(HashSet::new()),
        };
        let stop = &self.stop;
        let threads = self.threads;
        thread::scope(|scope| -> Result<()> {
            let (job_tx, job_rx) = crossbeam_channel::unbounded::<(Schedule, usize)>();
            let (beat_stop_tx, beat_stop_rx) = crossbeam_channel::bounded::<()>(0);
            let runner = &runner;
            let heartbeat = thread::Builder::new()
                .name("pgqueuer-schedule-heartbeat".into())
                .spawn_scoped(scope, move || runner.heartbeat_loop(&beat_stop_rx))
                .map_err(|e| Error::Worker(format!("cannot start the heartbeat thread: {e}")))?;
            let mut handlers = Vec::with_capacity(threads);
            for i in 0..threads {
                let jobs = job_rx.clone();
                let spawned = thread::Builder::new()
                    .name(format!("pgqueuer-schedule-{i}"))
                    .spawn_scoped(scope, move || {
                        for (schedule, index) in jobs.iter() {
                            runner.execute(&schedule, index);
                        }
                    });
                match spawned {
                    Ok(handle) => handlers.push(handle),
                    Err(e) => {
                        // Threads already started end when the senders are dropped.
                        drop(job_tx);
                        drop(beat_stop_tx);
                        return Err(Error::Worker(format!(
                            "cannot start a schedule handler thread: {e}"
                        )));
                    }
                }
            }
            drop(job_rx);
            runner.claim_loop(stop, |schedule, index| {
                let id = schedule.id;
                // Fails only if every handler thread has ended, which they do only once
                // this sender is dropped; release the row rather than leave it claimed.
                if job_tx.send((schedule, index)).is_err() {
                    runner.active().remove(&id);
                    runner.release(id);
                }
            });
            // Let the handler threads finish what was claimed, keeping heartbeats
            // going until they have; then stop the heartbeat.
            drop(job_tx);
            for handle in handlers {
                if handle.join().is_err() {
                    log::error!("a schedule handler thread panicked outside a handler");
                }
            }
            drop(beat_stop_tx);
            if heartbeat.join().is_err() {
                log::error!("the schedule heartbeat thread panicked");
            }
            Ok(())
        })
    }

    /// Runs in a background thread; the returned handle stops and joins it when dropped.
    ///
    /// # Errors
    /// [`Error::Worker`] when the thread cannot be spawned.
    pub fn start(self) -> Result<RunningScheduler> {
        let shutdown = self.shutdown.clone();
        let thread = thread::Builder::new()
            .name("pgqueuer-scheduler".into())
            .spawn(move || self.run())
            .map_err(|e| Error::Worker(format!("cannot spawn the scheduler thread: {e}")))?;
        Ok(RunningScheduler {
            shutdown,
            thread: Some(thread),
        })
    }

    /// Deletes `clean_old` rows and inserts missing schedules; returns what opens the
    /// heartbeat's connection.
    fn prepare(&self) -> Result<crate::connect::Manager> {
        let mut conn = self.pool.get()?;
        let beat_conn = conn.sibling("schedule-heartbeat");
        if !self.clean_old.is_empty() {
            let names: Vec<&str> = self.clean_old.iter().map(String::as_str).collect();
            let no_ids: &[ScheduleId] = &[];
            let removed = conn
                .query_cached(
                    &self.sql.delete,
                    &[(&no_ids, Type::INT8_ARRAY), (&names, Type::TEXT_ARRAY)],
                )?
                .len();
            log::info!("removed {removed} old schedule(s) of {names:?}");
        }
        if self.registrations.is_empty() {
            return Ok(beat_conn);
        }
        let now = SystemTime::now();
        let expressions: Vec<&str> = self
            .registrations
            .iter()
            .map(|r| r.cron.normalized())
            .collect();
        let entrypoints: Vec<&str> = self
            .registrations
            .iter()
            .map(|r| r.entrypoint.as_str())
            .collect();
        let delays: Vec<i64> = self
            .registrations
            .iter()
            .map(|r| micros_until(now, r.cron.next_after(now)))
            .collect();
        conn.query_cached(
            &self.sql.insert,
            &[
                (&expressions, Type::TEXT_ARRAY),
                (&entrypoints, Type::TEXT_ARRAY),
                (&delays, Type::INT8_ARRAY),
            ],
        )?;
        Ok(beat_conn)
    }
}

/// A scheduler running in a background thread ([`Scheduler::start`]). Dropping it shuts
/// the scheduler down and waits for it; [`RunningScheduler::join`] does the same and
/// returns the outcome.
#[derive(Debug)]
pub struct RunningScheduler {
    shutdown: ShutdownHandle,
    thread: Option<thread::JoinHandle<Result<()>>>,
}

impl RunningScheduler {
    /// A handle to stop the scheduler.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Asks the scheduler to stop and waits until it has.
    ///
    /// # Errors
    /// As [`Scheduler::run`].
    pub fn join(self) -> Result<()> {
        self.shutdown.shutdown();
        self.wait()
    }

    /// Waits until the scheduler is stopped elsewhere (through a [`ShutdownHandle`]).
    ///
    /// # Errors
    /// As [`Scheduler::run`].
    pub fn wait(mut self) -> Result<()> {
        match self.thread.take().map(thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(Error::Worker("the scheduler thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for RunningScheduler {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shutdown.shutdown();
            if let Ok(Err(e)) = thread.join() {
                log::warn!("pgqueuer scheduler stopped with an error: {e}");
            }
        }
    }
}

/// The state the threads of one `run` share.
struct Runner<'a> {
    pool: &'a Pool,
    /// Opens the heartbeat's own connection, outside the pool: handlers that hold pool
    /// connections must not keep the running schedules from their heartbeats.
    beat_conn: crate::connect::Manager,
    sql: &'a ScheduleSql,
    registrations: &'a [Registration],
    /// Ids of the schedules this scheduler has claimed and not yet released: the claim
    /// loop adds them, the handler thread that ran one removes it, and the heartbeat
    /// thread marks all of them alive every second.
    active: Mutex<HashSet<ScheduleId>>,
}

impl Runner<'_> {
    fn active(&self) -> std::sync::MutexGuard<'_, HashSet<ScheduleId>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims due schedules and hands them to `dispatch` until `stop` disconnects.
    fn claim_loop(&self, stop: &Receiver<()>, mut dispatch: impl FnMut(Schedule, usize)) {
        let index: HashMap<(&str, &str), usize> = self
            .registrations
            .iter()
            .enumerate()
            .map(|(i, r)| ((r.entrypoint.as_str(), r.cron.normalized()), i))
            .collect();
        let mut backoff = Duration::from_secs(1);
        loop {
            if stop.try_recv() != Err(crossbeam_channel::TryRecvError::Empty) {
                return;
            }
            let wait = match self.claim_due() {
                Ok(claimed) => {
                    backoff = Duration::from_secs(1);
                    for schedule in claimed {
                        let key = (schedule.entrypoint.as_str(), schedule.expression.as_str());
                        match index.get(&key).copied() {
                            Some(i) => {
                                self.active().insert(schedule.id);
                                dispatch(schedule, i);
                            }
                            None => {
                                // Cannot happen: the claim names only our registrations.
                                log::error!(
                                    "claimed schedule {} ({:?}, {:?}) matches no registration",
                                    schedule.id,
                                    schedule.entrypoint,
                                    schedule.expression
                                );
                                self.release(schedule.id);
                            }
                        }
                    }
                    self.until_next_fire()
                }
                Err(e) => {
                    let wait = backoff;
                    log::warn!("could not claim due schedules (retrying in {wait:?}): {e}");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    wait
                }
            };
            select! {
                recv(stop) -> _ => return,
                default(wait) => {}
            }
        }
    }

    /// Claims every due (or abandoned) schedule of the registrations.
    fn claim_due(&self) -> Result<Vec<Schedule>> {
        if self.registrations.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.pool.get()?;
        // Measured as late as possible: the server adds these to its `now()`.
        let now = SystemTime::now();
        let mut expressions = Vec::with_capacity(self.registrations.len());
        let mut entrypoints = Vec::with_capacity(self.registrations.len());
        let mut next = Vec::with_capacity(self.registrations.len());
        let mut following = Vec::with_capacity(self.registrations.len());
        for r in self.registrations {
            let first = r.cron.next_after(now);
            expressions.push(r.cron.normalized());
            entrypoints.push(r.entrypoint.as_str());
            next.push(micros_until(now, first));
            following.push(micros_until(now, r.cron.next_after(first)));
        }
        conn.query_cached(
            &self.sql.claim_due,
            &[
                (&expressions, Type::TEXT_ARRAY),
                (&entrypoints, Type::TEXT_ARRAY),
                (&next, Type::INT8_ARRAY),
                (&following, Type::INT8_ARRAY),
            ],
        )?
        .iter()
        .map(Schedule::from_row)
        .collect()
    }

    /// How long to sleep before the next look: until just after the earliest next fire
    /// of any registration, and at most [`MAX_IDLE`].
    fn until_next_fire(&self) -> Duration {
        let now = SystemTime::now();
        self.registrations
            .iter()
            .map(|r| {
                r.cron
                    .next_after(now)
                    .duration_since(now)
                    .unwrap_or(Duration::ZERO)
                    + WAKE_MARGIN
            })
            .min()
            .unwrap_or(MAX_IDLE)
            .min(MAX_IDLE)
    }

    /// Runs one claimed schedule's handler, then releases the row.
    fn execute(&self, schedule: &Schedule, index: usize) {
        let registration = &self.registrations[index];
        log::debug!(
            "running schedule {} ({} at {:?})",
            schedule.id,
            registration.entrypoint,
            schedule.expression
        );
        match catch_unwind(AssertUnwindSafe(|| (registration.handler)(schedule))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => log::error!(
                "schedule {} ({} at {:?}) failed: {}",
                schedule.id,
                registration.entrypoint,
                schedule.expression,
                crate::error::chain(e.as_ref())
            ),
            Err(panic) => log::error!(
                "schedule {} ({} at {:?}) panicked: {}",
                schedule.id,
                registration.entrypoint,
                schedule.expression,
                panic_message(panic.as_ref())
            ),
        }
        self.active().remove(&schedule.id);
        self.release(schedule.id);
    }

    /// Marks a schedule `queued` again, trying a few times; on failure the row is left
    /// `picked` and another scheduler takes it over once its heartbeat is stale.
    fn release(&self, id: ScheduleId) {
        for attempt in 1..=RELEASE_ATTEMPTS {
            let result = self.pool.get().map_err(Error::from).and_then(|mut conn| {
                conn.query_cached(&self.sql.release, &[(&vec![id], Type::INT8_ARRAY)])?;
                Ok(())
            });
            match result {
                Ok(()) => return,
                Err(e) if attempt < RELEASE_ATTEMPTS => {
                    log::warn!("could not release schedule {id} (attempt {attempt}): {e}");
                    thread::sleep(Duration::from_secs(1));
                }
                Err(e) => log::error!(
                    "could not release schedule {id}; it is taken over once its heartbeat \
                     is 30 s old: {e}"
                ),
            }
        }
    }

    /// Marks the active schedules alive every second until `stop` disconnects.
    fn heartbeat_loop(&self, stop: &Receiver<()>) {
        let mut conn = crate::loop_conn::LoopConn::own(&self.beat_conn);
        loop {
            select! {
                recv(stop) -> _ => return,
                default(HEARTBEAT_INTERVAL) => {}
            }
            let ids: Vec<ScheduleId> = self.active().iter().copied().collect();
            if ids.is_empty() {
                continue;
            }
            let result = conn.run(|c| {
                c.query_cached(&self.sql.heartbeat, &[(&ids, Type::INT8_ARRAY)])?;
                Ok(())
            });
            if let Err(e) = result {
                log::warn!("could not send the heartbeat of schedules {ids:?}: {e}");
            }
        }
    }
}

/// Microseconds from `now` to `then` (zero if `then` has passed).
fn micros_until(now: SystemTime, then: SystemTime) -> i64 {
    let micros = then
        .duration_since(now)
        .unwrap_or(Duration::ZERO)
        .as_micros();
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// The text of a panic payload (`&str` or `String`), or a placeholder.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-text panic payload)".to_owned()
    }
}
