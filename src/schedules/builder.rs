//! [`SchedulerBuilder`]: registrations checked before anything runs.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::Schedule;
use super::scheduler::{HandlerError, Registration, Scheduler};
use crate::connect::Pool;
use crate::cron::Cron;
use crate::error::{Error, Result};
use crate::job::check_entrypoint;
use crate::settings::Settings;
use crate::shutdown::ShutdownHandle;
use crate::sql::schedule::ScheduleSql;

/// Configures a [`Scheduler`]; made by [`Scheduler::builder`]. A bad registration is
/// reported by [`SchedulerBuilder::build`], so that the calls chain.
#[must_use]
pub struct SchedulerBuilder {
    pool: Pool,
    settings: Settings,
    registrations: Vec<Registration>,
    clean_old: BTreeSet<String>,
    threads: usize,
    /// The first bad registration, reported by `build()`.
    error: Option<Error>,
}

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("schedules_table", &self.settings.schedules_table)
            .field("registrations", &self.registrations.len())
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

/// The most handler threads a scheduler takes (as a worker's `threads`).
const MAX_THREADS: usize = 4096;

impl SchedulerBuilder {
    pub(super) fn new(pool: Pool) -> SchedulerBuilder {
        SchedulerBuilder {
            pool,
            settings: Settings::default(),
            registrations: Vec::new(),
            clean_old: BTreeSet::new(),
            threads: Scheduler::DEFAULT_THREADS,
            error: None,
        }
    }

    /// Object names. Defaults to PgQueuer's ([`Settings::default`]).
    pub fn settings(mut self, settings: &Settings) -> Self {
        self.settings = settings.clone();
        self
    }

    /// Registers `handler` to run at the times of the cron `expression` (see [`Cron`]
    /// for the syntax: 5 fields, or 6 with seconds last, and the `@daily`-style
    /// aliases), under the name `entrypoint`. Nothing is written until
    /// [`Scheduler::run`].
    ///
    /// The handler gets the schedule's row (see [`Schedule`]). An error it returns, and
    /// a panic, are logged; neither stops the scheduler or the schedule.
    ///
    /// [`SchedulerBuilder::build`] rejects a bad expression (naming its field), an empty
    /// `entrypoint` or one holding a NUL character, and an entrypoint registered twice
    /// with expressions that normalize to the same text.
    pub fn schedule<F>(mut self, entrypoint: &str, expression: &str, handler: F) -> Self
    where
        F: Fn(&Schedule) -> Result<(), HandlerError> + Send + Sync + 'static,
    {
        match self.registration(entrypoint, expression) {
            Ok((entrypoint, cron)) => self.registrations.push(Registration {
                entrypoint,
                cron,
                handler: Arc::new(handler),
            }),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    fn registration(&self, entrypoint: &str, expression: &str) -> Result<(String, Cron)> {
        check_entrypoint("entrypoint", entrypoint)?;
        let cron = Cron::parse(expression)?;
        if self
            .registrations
            .iter()
            .any(|r| r.entrypoint == entrypoint && r.cron.normalized() == cron.normalized())
        {
            return Err(Error::invalid(
                "schedule",
                format!(
                    "entrypoint {entrypoint:?} is already scheduled at {:?}; each \
                     (entrypoint, expression) pair may be registered once",
                    cron.normalized()
                ),
            ));
        }
        Ok((entrypoint.to_owned(), cron))
    }

    /// When `run` starts, delete every schedule row of `entrypoint` first (whatever its
    /// expression), so that expressions no longer registered stop firing; the current
    /// registrations are then inserted afresh (PgQueuer's `clean_old=True`). The
    /// entrypoint need not be registered here. Defaults to keeping old rows.
    /// [`SchedulerBuilder::build`] rejects an empty name or one holding a NUL character.
    pub fn clean_old(mut self, entrypoint: &str) -> Self {
        match check_entrypoint("entrypoint", entrypoint) {
            Ok(()) => {
                self.clean_old.insert(entrypoint.to_owned());
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// How many threads run handlers (1 to 4096); schedules due while all are busy wait
    /// (still claimed and kept alive) for one to come free. Defaults to
    /// [`Scheduler::DEFAULT_THREADS`] (4).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Checks the registrations, the settings and the database schema.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for the first bad registration (see
    /// [`SchedulerBuilder::schedule`]) or `threads` out of range;
    /// [`Error::InvalidSetting`] for an unacceptable object name; [`Error::Schema`] when
    /// the database lacks PgQueuer's tables (run `upgrade()`); [`Error::Pool`] or
    /// [`Error::Db`] when the schema cannot be checked.
    pub fn build(self) -> Result<Scheduler> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(Error::invalid(
                "threads",
                format!(
                    "{} handler threads: a scheduler takes 1 to {MAX_THREADS}",
                    self.threads
                ),
            ));
        }
        self.settings.validate()?;
        crate::schema::verify_with(self.pool.get()?.client(), &self.settings)?;
        let (shutdown, stop) = ShutdownHandle::new();
        Ok(Scheduler {
            sql: Arc::new(ScheduleSql::new(&self.settings)),
            pool: self.pool,
            settings: self.settings,
            registrations: self.registrations,
            clean_old: self.clean_old,
            threads: self.threads,
            shutdown,
            stop,
        })
    }
}
