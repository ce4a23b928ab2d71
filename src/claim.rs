//! The slot-claiming dequeue as a public, low-level API.
//!
//! A [`Claimer`] claims jobs for one worker identity: fresh queued jobs (highest priority
//! first, then oldest) and stale picked ones (heartbeat older than the timeout), in one
//! statement. Every fresh claim of an entrypoint with a concurrency limit takes a numbered
//! slot in `0..limit`; the partial unique index `<queue>_picked_slot_idx` rejects a second
//! holder of a slot even when the first claim is not yet visible, and the loser's claim
//! comes back empty ([`Claim::lost_race`]). [`crate::Worker`] is built on this; use it
//! directly to write your own loop, on a connection you keep and have set with
//! [`crate::Conn::plan_with_indexes`] (as the worker does), so that its plans cannot fall
//! back to scanning the whole queue table.

use std::sync::Arc;
use std::time::Duration;

use postgres::GenericClient;
use postgres::types::Type;
use uuid::Uuid;

use crate::connect::{Conn, Param};
use crate::error::{Error, Result};
use crate::job::{IdSet, Job, JobColumns, JobId, Status, check_entrypoint};
use crate::rate::RateLimit;
use crate::settings::Settings;
use crate::sql::claim::{self as sql, ClaimSql, Gating};
use crate::sqlstate::{self, ErrorKind};

/// How long the public forms of ending and refreshing claims retry rows locked by
/// others before they give up with [`Error::Timeout`].
const GIVE_UP: Duration = Duration::from_secs(30);

/// The longest life of a lease of rate-limit units (`Claimer::lease_life`).
const MAX_LEASE: Duration = Duration::from_millis(100);

/// The outcome of one claim.
#[derive(Debug, Default)]
pub struct Claim {
    /// The claimed jobs, highest priority first, then lowest id.
    pub jobs: Vec<Job>,
    /// With [`Claimer::complete_and_claim`]: the ids whose outcome was written (still
    /// owned by this worker, now deleted or held, with their log row). Empty otherwise,
    /// and after a lost race, which writes nothing.
    pub ended: Vec<JobId>,
    /// How the claim lost a race, if it did (see [`Claim::lost_race`]).
    pub lost: Option<LostRace>,
    /// For a claimer with limits: the slots in use fleet-wide as the claim saw them
    /// (before it took any), per entrypoint in the claimer's order (0 for an unlimited
    /// one); `None` otherwise, after a lost race, and from a relaxed claim that was told
    /// not to count them.
    pub(crate) in_use: Option<Vec<i64>>,
    /// For a claimer with rate limits: how long until a rate-limited entrypoint whose
    /// units bounded this claim, and that has due jobs the claim left, may start one.
    /// `None` when no such entrypoint waits.
    pub rate_wait: Option<Duration>,
    /// For a claimer with limits: some job of a limited entrypoint is held out of the
    /// slot index's reach: at a slot at or above its entrypoint's limit (a limit lowered
    /// since it was taken, or a larger one declared elsewhere), below zero (written by
    /// another program), or with no slot (picked before slots existed, or by a worker
    /// without the limit).
    pub(crate) unguarded: bool,
    /// For a claimer with rate limits: every window of every rate-limited entrypoint was
    /// far from binding at the claim (at most half its units spent within the window, and
    /// at least four times the worker's margin of units), so no rate binds for now.
    pub(crate) rate_plenty: bool,
}

impl Claim {
    /// True when the claim lost a race and eligible work may remain, so the caller should
    /// claim again soon rather than wait: it lost a capacity slot to a concurrent claim
    /// (the batch is then empty), was a deadlock victim, or found candidates of a limited
    /// entrypoint locked or taken by a concurrent claim (it may then hold fewer jobs
    /// than it could have).
    pub fn lost_race(&self) -> bool {
        self.lost.is_some()
    }
}

/// How a claim lost a race ([`Claim::lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostRace {
    /// A concurrent claim took the same concurrency slot (23505 on the slot index): the
    /// claim came back empty.
    Slot,
    /// The claim was a deadlock victim (40P01) and came back empty.
    Deadlock,
    /// Candidates of a limited entrypoint were locked or taken by a concurrent claim: the
    /// claim may hold fewer jobs than it could have.
    Contended,
}

/// Where a claim lane left off in each entrypoint (see `sql::claim::Tail`): the priority
/// and id of the last fresh job it took there. A claim reads each entrypoint from its
/// floor; one without a floor (or with no floors at all: a sweep) reads from the top.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Floors(std::collections::HashMap<String, (i32, JobId)>);

impl Floors {
    /// The floor of `entrypoint`, if any.
    pub(crate) fn get(&self, entrypoint: &str) -> Option<(i32, JobId)> {
        self.0.get(entrypoint).copied()
    }

    /// Sets the floor of `entrypoint`. A floor at the highest priority is not kept: the
    /// part of a claim above it could not be written.
    pub(crate) fn set(&mut self, entrypoint: &str, level: i32, id: JobId) {
        if level == i32::MAX {
            self.0.remove(entrypoint);
            return;
        }
        match self.0.get_mut(entrypoint) {
            Some(floor) => *floor = (level, id),
            None => {
                self.0.insert(entrypoint.to_owned(), (level, id));
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Moves each entrypoint's floor to the last job `jobs` took there (a claim's jobs,
    /// in claim order, every one fresh: a claim that looked for stale jobs, which may sit
    /// anywhere in that order, moves no floor); an entrypoint it took nothing of keeps its
    /// floor.
    pub(crate) fn advance(&mut self, jobs: &[Job]) {
        for job in jobs {
            self.set(&job.entrypoint, job.priority, job.id);
        }
    }
}

/// How a claim reads: from the lane's floors or from the top, and whether it looks for
/// stale jobs (see `sql::claim::Tail`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading<'a> {
    pub(crate) floors: Option<&'a Floors>,
    pub(crate) stale: bool,
}

impl Reading<'_> {
    /// From the top, stale jobs included: what every public claim does.
    pub(crate) const WHOLE: Reading<'static> = Reading {
        floors: None,
        stale: true,
    };
}

/// See [`Claimer::next_wake`]: how long until each may be claimed (zero: now).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NextWake {
    /// The earliest queued job of the entrypoints is due.
    pub(crate) queued: Option<Duration>,
    /// The oldest job another worker holds goes stale.
    pub(crate) stale: Option<Duration>,
}

impl NextWake {
    /// The sooner of the two.
    pub(crate) fn soonest(self) -> Option<Duration> {
        match (self.queued, self.stale) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How a claimed job ended, for [`Claimer::complete`].
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The job.
    pub id: JobId,
    /// `Successful`, `Exception` or `Canceled` delete the row; `Failed` holds it.
    pub status: Status,
    /// The traceback JSON for the log row (see PgQueuer's `TracebackRecord`).
    pub traceback: Option<serde_json::Value>,
}

/// Outcomes as the aligned arrays the statements that end claims bind.
struct Ending {
    ids: Vec<JobId>,
    statuses: Vec<&'static str>,
    tracebacks: Vec<Option<String>>,
}

impl Ending {
    /// # Errors
    /// [`Error::InvalidInput`] for a status that does not end a job.
    fn new(outcomes: &[Outcome]) -> Result<Ending> {
        if let Some(o) = outcomes
            .iter()
            .find(|o| matches!(o.status, Status::Queued | Status::Picked))
        {
            return Err(Error::invalid(
                "status",
                format!("{} is not an outcome of a job", o.status),
            ));
        }
        Ok(Ending {
            ids: outcomes.iter().map(|o| o.id).collect(),
            statuses: outcomes.iter().map(|o| o.status.as_str()).collect(),
            tracebacks: outcomes
                .iter()
                .map(|o| o.traceback.as_ref().map(serde_json::Value::to_string))
                .collect(),
        })
    }

    /// The entries whose id is among `ids`, still aligned.
    fn only(&self, ids: &[JobId]) -> Ending {
        let wanted: IdSet = ids.iter().copied().collect();
        let keep: Vec<usize> = (0..self.ids.len())
            .filter(|&i| wanted.contains(self.ids[i]))
            .collect();
        Ending {
            ids: keep.iter().map(|&i| self.ids[i]).collect(),
            statuses: keep.iter().map(|&i| self.statuses[i]).collect(),
            tracebacks: keep.iter().map(|&i| self.tracebacks[i].clone()).collect(),
        }
    }
}

/// Statements shared by every claimer of the same settings.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) claim: ClaimSql,
    pub(crate) complete: String,
    pub(crate) complete_plain: String,
    pub(crate) heartbeat: String,
    pub(crate) retry: String,
    pub(crate) release: String,
    pub(crate) next_due: String,
    pub(crate) next_due_recent: String,
    pub(crate) any_queued: String,
    pub(crate) slots_in_use: String,
    pub(crate) owned: String,
    pub(crate) slot_index: String,
    pub(crate) rates_provision: String,
    pub(crate) rates_spend_late: String,
    pub(crate) rates_in_use: String,
    pub(crate) overrides_select: String,
    pub(crate) rate_lease: String,
    pub(crate) declared_upsert: String,
    pub(crate) declared_delete: String,
    pub(crate) settings: Settings,
}

impl Statements {
    pub(crate) fn new(settings: &Settings) -> Result<Statements> {
        settings.validate()?;
        Ok(Statements {
            claim: ClaimSql::new(settings),
            complete: sql::queue_complete_many(settings),
            complete_plain: sql::queue_complete_plain(settings),
            heartbeat: sql::queue_heartbeat_many(settings),
            retry: sql::queue_retry(settings),
            release: sql::queue_release_many(settings),
            next_due: sql::queue_next_due(settings),
            next_due_recent: sql::queue_next_due_recent(settings),
            any_queued: sql::queue_any_queued(settings),
            slots_in_use: sql::queue_slots_in_use(settings),
            owned: sql::queue_owned(settings),
            slot_index: settings.slot_index_name(),
            rates_provision: crate::sql::rates::rates_provision(settings),
            rates_spend_late: crate::sql::rates::rate_spend_late(settings),
            rates_in_use: crate::sql::rates::rates_in_use(settings),
            overrides_select: crate::sql::overrides::overrides_select(settings),
            rate_lease: crate::sql::rates::rate_lease(settings),
            declared_upsert: crate::sql::overrides::declared_upsert(settings),
            declared_delete: crate::sql::overrides::declared_delete(settings),
            settings: settings.clone(),
        })
    }
}

/// Builds a [`Claimer`]. Every default is PgQueuer's where PgQueuer has one.
#[derive(Debug, Clone)]
pub struct ClaimerBuilder {
    settings: Settings,
    entrypoints: Vec<(String, i64)>,
    rate_limits: Vec<(String, RateLimit)>,
    worker_id: Uuid,
    max_concurrent_tasks: Option<u32>,
    heartbeat_timeout: Duration,
}

impl Default for ClaimerBuilder {
    fn default() -> Self {
        ClaimerBuilder {
            settings: Settings::default(),
            entrypoints: Vec::new(),
            rate_limits: Vec::new(),
            worker_id: Uuid::new_v4(),
            max_concurrent_tasks: None,
            heartbeat_timeout: Duration::from_secs(30),
        }
    }
}

impl ClaimerBuilder {
    /// Claims jobs of `name`; at most `concurrency_limit` of them may be picked at once
    /// across every worker (0 = unlimited).
    #[must_use]
    pub fn entrypoint(mut self, name: &str, concurrency_limit: u32) -> Self {
        self.entrypoints
            .push((name.to_owned(), i64::from(concurrency_limit)));
        self
    }

    /// At most `limit.starts()` jobs of the entrypoint `name` (registered with
    /// [`ClaimerBuilder::entrypoint`]) start in any window of `limit.per()` across every
    /// claimer that declares the same limit. Call it again to stack windows. Before the
    /// first claim, [`Claimer::provision_rate_limits`] must have made the limit's units
    /// (a worker does it when it is built). See [`RateLimit`].
    #[must_use]
    pub fn rate_limit(mut self, name: &str, limit: RateLimit) -> Self {
        self.rate_limits.push((name.to_owned(), limit));
        self
    }

    /// Object names. Defaults to PgQueuer's ([`Settings::default`]).
    #[must_use]
    pub fn settings(mut self, settings: &Settings) -> Self {
        self.settings = settings.clone();
        self
    }

    pub(crate) fn settings_ref(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn heartbeat_timeout_ref(&self) -> Duration {
        self.heartbeat_timeout
    }

    /// The worker identity written to `queue_manager_id`. Defaults to a fresh UUID v4.
    #[must_use]
    pub fn worker_id(mut self, id: Uuid) -> Self {
        self.worker_id = id;
        self
    }

    /// At most this many jobs held by this worker at once (PgQueuer's
    /// `max_concurrent_tasks`). Defaults to no limit.
    #[must_use]
    pub fn max_concurrent_tasks(mut self, n: u32) -> Self {
        self.max_concurrent_tasks = Some(n);
        self
    }

    /// A picked job whose heartbeat is older than this is stale and may be re-picked.
    /// Defaults to 30 s, as PgQueuer.
    #[must_use]
    pub fn heartbeat_timeout(mut self, timeout: Duration) -> Self {
        self.heartbeat_timeout = timeout;
        self
    }

    /// Validates and renders the statements.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for no entrypoint, a bad or repeated entrypoint name (see
    /// [`crate::NewJob`]), a zero heartbeat timeout or a zero `max_concurrent_tasks`;
    /// [`Error::InvalidSetting`] for bad settings.
    pub fn build(self) -> Result<Claimer> {
        if self.entrypoints.is_empty() {
            return Err(Error::invalid(
                "entrypoints",
                "at least one entrypoint is needed",
            ));
        }
        for (i, (name, _)) in self.entrypoints.iter().enumerate() {
            check_entrypoint("entrypoint", name)?;
            if self.entrypoints[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::invalid(
                    "entrypoint",
                    format!("{name:?} is registered twice"),
                ));
            }
        }
        let timeout_us = i64::try_from(self.heartbeat_timeout.as_micros()).unwrap_or(i64::MAX);
        if timeout_us <= 0 {
            return Err(Error::invalid("heartbeat_timeout", "must be positive"));
        }
        if self.max_concurrent_tasks == Some(0) {
            return Err(Error::invalid("max_concurrent_tasks", "must be at least 1"));
        }
        for (name, _) in &self.rate_limits {
            if !self.entrypoints.iter().any(|(n, _)| n == name) {
                return Err(Error::invalid(
                    "rate_limit",
                    format!("{name:?} has a rate limit but is not a registered entrypoint"),
                ));
            }
        }
        for (name, _) in &self.entrypoints {
            let windows: Vec<RateLimit> = self
                .rate_limits
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, l)| *l)
                .collect();
            crate::rate::check_windows(name, &windows)?;
        }
        let statements = Arc::new(Statements::new(&self.settings)?);
        let rates = Windows::new(&self.rate_limits);
        Ok(Claimer {
            statements,
            names: self.entrypoints.iter().map(|(n, _)| n.clone()).collect(),
            limits: self.entrypoints.iter().map(|(_, l)| *l).collect(),
            capacity_gated: self.entrypoints.iter().any(|(_, l)| *l > 0) || rates.is_some(),
            rates,
            worker_id: self.worker_id,
            budget: self.max_concurrent_tasks.map(i64::from),
            heartbeat_timeout: self.heartbeat_timeout,
            heartbeat_timeout_us: timeout_us,
            plenty_at: 0,
        })
    }
}

/// Claims and ends jobs for one worker identity. Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Claimer {
    statements: Arc<Statements>,
    names: Vec<String>,
    limits: Vec<i64>,
    capacity_gated: bool,
    /// The rate limits' windows, where any entrypoint has one.
    rates: Option<Arc<Windows>>,
    worker_id: Uuid,
    budget: Option<i64>,
    heartbeat_timeout: Duration,
    heartbeat_timeout_us: i64,
    /// The worker's margin (what it may hold beyond the slots in use), for whether its
    /// rates are far from binding ([`Claim::rate_plenty`]); 0 (the default) never asks.
    plenty_at: i64,
}

impl Claimer {
    /// A builder with PgQueuer's defaults.
    pub fn builder() -> ClaimerBuilder {
        ClaimerBuilder::default()
    }

    /// The heartbeat timeout this claimer treats picked jobs as stale after.
    pub fn heartbeat_timeout(&self) -> Duration {
        self.heartbeat_timeout
    }

    /// This claimer's worker id (`queue_manager_id` of the rows it claims).
    pub fn worker_id(&self) -> Uuid {
        self.worker_id
    }

    /// True when any entrypoint of this claimer has a concurrency limit.
    pub fn is_capacity_gated(&self) -> bool {
        self.capacity_gated
    }

    /// The claim statement this claimer runs (for inspection and `EXPLAIN`).
    pub fn claim_sql(&self) -> &str {
        self.statement(false, false, true)
    }

    /// The claim statement, with or without ending claims first; `relaxed` where every
    /// limit is far from full (see [`Gating`]), then counting the slots in use only when
    /// `count` says so (but with rate limits, whose relaxed claims always count).
    fn statement(&self, ending: bool, relaxed: bool, count: bool) -> &str {
        if self.rates.is_some() {
            if self.limits.iter().all(|l| *l <= 0) {
                return self
                    .statements
                    .claim
                    .get_rated_unslotted(self.budget.is_some(), ending);
            }
            return self
                .statements
                .claim
                .get_rated(relaxed, self.budget.is_some(), ending);
        }
        if self.capacity_gated && relaxed && !count {
            return self
                .statements
                .claim
                .get_uncounted(self.budget.is_some(), ending);
        }
        let gating = match (self.capacity_gated, relaxed) {
            (false, _) => Gating::None,
            (true, false) => Gating::Careful,
            (true, true) => Gating::Relaxed,
        };
        self.statements
            .claim
            .get(gating, self.budget.is_some(), ending)
    }

    /// Claims up to `batch_size` jobs on a pooled connection, with the statement prepared
    /// once per connection. Runs in autocommit: the claim is committed when this returns.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a zero `batch_size`; [`Error::Db`] for any database
    /// error other than a lost slot race or deadlock (which give an empty [`Claim`]).
    pub fn claim(&self, conn: &mut Conn, batch_size: usize) -> Result<Claim> {
        self.claim_from(conn, &[], batch_size, 0.0, false, true, Reading::WHOLE)
    }

    /// Ends claimed jobs and claims up to `batch_size` more, in one statement and one
    /// commit: [`Claimer::complete`] and [`Claimer::claim`] at the price of one. The
    /// slots the ended jobs held are free to this claim already, so a limited entrypoint
    /// runs its next job without waiting for a second commit. Outcomes of rows this
    /// worker no longer owns are skipped, and so are rows a concurrent claim holds locked
    /// for a moment: [`Claim::ended`] lists those written, and the caller ends the others
    /// later (with [`Claimer::complete`], which retries locked rows). A lost race writes
    /// nothing (`ended` is empty).
    ///
    /// # Errors
    /// As [`Claimer::claim`] and [`Claimer::complete`]; nothing is written then.
    pub fn complete_and_claim(
        &self,
        conn: &mut Conn,
        outcomes: &[Outcome],
        batch_size: usize,
    ) -> Result<Claim> {
        self.claim_from(conn, outcomes, batch_size, 0.0, false, true, Reading::WHOLE)
    }

    /// [`Claimer::complete_and_claim`] (or, without outcomes, [`Claimer::claim`]) whose
    /// search for free slots starts at `shift` (a fraction of each limit, in `[0, 1)`)
    /// rather than at slot 0, so that claims in flight at once from different shifts take
    /// different slots while the limits are far from full; `relaxed` (the caller found
    /// every limit far from full) locks limited candidates as unlimited ones are locked,
    /// so that those claims take different jobs too. A relaxed claim without rate limits
    /// counts the slots in use only when `count` says so
    /// ([`sql::claim::relaxed_uncounted_claim`] otherwise); every other claim counts them.
    #[expect(
        clippy::too_many_arguments,
        reason = "the worker's one way in; each is a plain value"
    )]
    pub(crate) fn claim_from(
        &self,
        conn: &mut Conn,
        outcomes: &[Outcome],
        batch_size: usize,
        shift: f64,
        relaxed: bool,
        count: bool,
        reading: Reading<'_>,
    ) -> Result<Claim> {
        let shift = if (0.0..1.0).contains(&shift) {
            shift
        } else {
            0.0
        };
        if outcomes.is_empty() {
            return self.run_claim(batch_size, None, shift, reading, |params| {
                conn.query_cached(self.statement(false, relaxed, count), params)
            });
        }
        let ending = Ending::new(outcomes)?;
        self.run_claim(batch_size, Some(&ending), shift, reading, |params| {
            conn.query_cached(self.statement(true, relaxed, count), params)
        })
    }

    /// Claims up to `batch_size` jobs through any client, e.g. inside the caller's
    /// transaction (the claim then commits or rolls back with it). After a lost race the
    /// transaction is aborted and must be rolled back.
    ///
    /// # Errors
    /// As [`Claimer::claim`].
    pub fn claim_in(&self, client: &mut impl GenericClient, batch_size: usize) -> Result<Claim> {
        self.run_claim(batch_size, None, 0.0, Reading::WHOLE, |params| {
            let values: Vec<&(dyn postgres::types::ToSql + Sync)> =
                params.iter().map(|(v, _)| *v).collect();
            Ok(client.query(self.claim_sql(), &values)?)
        })
    }

    /// Runs the claim statement through `query` with the parameters its shape binds and
    /// reads the claim, a lost race included.
    fn run_claim(
        &self,
        batch_size: usize,
        ending: Option<&Ending>,
        shift: f64,
        reading: Reading<'_>,
        query: impl FnOnce(&[Param<'_>]) -> Result<Vec<postgres::Row>>,
    ) -> Result<Claim> {
        let batch = i32::try_from(batch_size)
            .ok()
            .filter(|b| *b > 0)
            .ok_or_else(|| {
                Error::invalid(
                    "batch_size",
                    format!("{batch_size} is not in 1..=2147483647"),
                )
            })?;
        // The parameters in the order the shape binds them (see `sql::claim`).
        let mut params: Vec<Param<'_>> = vec![
            (&batch, Type::INT4),
            (&self.names, Type::TEXT_ARRAY),
            (&self.worker_id, Type::UUID),
            (&self.heartbeat_timeout_us, Type::INT8),
        ];
        if self.capacity_gated {
            params.push((&self.limits, Type::INT8_ARRAY));
            params.push((&shift, Type::FLOAT8));
        }
        if let Some(budget) = &self.budget {
            params.push((budget, Type::INT8));
        }
        if let Some(ending) = ending {
            params.extend([
                (
                    &ending.ids as &(dyn postgres::types::ToSql + Sync),
                    Type::INT8_ARRAY,
                ),
                (&ending.statuses, Type::TEXT_ARRAY),
                (&ending.tracebacks, Type::TEXT_ARRAY),
            ]);
        }
        if let Some(rates) = &self.rates {
            params.extend([
                (
                    &rates.entrypoints as &(dyn postgres::types::ToSql + Sync),
                    Type::TEXT_ARRAY,
                ),
                (&rates.per_us, Type::INT8_ARRAY),
                (&rates.starts, Type::INT8_ARRAY),
                (&rates.cooldown_us, Type::INT8_ARRAY),
                (&self.plenty_at, Type::INT8),
            ]);
        }
        // Each entrypoint's floor, aligned with the names (NULL: from the top).
        let floor = |name: &String| reading.floors.and_then(|f| f.get(name));
        let levels: Vec<Option<i32>> = self.names.iter().map(|n| floor(n).map(|f| f.0)).collect();
        let ids: Vec<Option<JobId>> = self.names.iter().map(|n| floor(n).map(|f| f.1)).collect();
        params.extend([
            (
                &levels as &(dyn postgres::types::ToSql + Sync),
                Type::INT4_ARRAY,
            ),
            (&ids, Type::INT8_ARRAY),
            (&reading.stale, Type::BOOL),
        ]);
        match query(&params) {
            Ok(rows) => Ok(self.read_claim(&rows, ending.is_some())),
            Err(Error::Db(e)) => match sqlstate::classify(&e, &self.statements.slot_index) {
                kind if kind.is_lost_race() => {
                    log::trace!("claim lost a race ({kind:?}); reporting an empty batch");
                    Ok(Claim {
                        lost: Some(if kind == ErrorKind::Deadlock {
                            LostRace::Deadlock
                        } else {
                            LostRace::Slot
                        }),
                        ..Claim::default()
                    })
                }
                _ => Err(Error::Db(e)),
            },
            Err(e) => Err(e),
        }
    }

    /// Reads a committed claim's rows. Nothing here fails: the jobs are this worker's
    /// once the statement has committed, and a claim that reported an error would leave
    /// them picked with no one to run, heartbeat or end them until they went stale, and
    /// then the same again for whoever re-picked them. A job whose row cannot be read
    /// as stored comes back marked ([`Job::unreadable`]), for its handler's failure
    /// policy to end; a figure of the claim's own that cannot be read is logged and
    /// taken as unknown.
    fn read_claim(&self, rows: &[postgres::Row], ending: bool) -> Claim {
        let mut claim = Claim::default();
        let Some(first) = rows.first() else {
            return claim;
        };
        let at = match JobColumns::of(first) {
            Ok(at) => at,
            Err(e) => {
                // Cannot happen: the statement is this crate's own.
                log::error!("pgqueuer: a claim's rows lack a job column: {e}");
                return claim;
            }
        };
        let figure = |what: &str, e: &postgres::Error| {
            log::error!(
                "pgqueuer: cannot read a claim's {what}: {}",
                crate::error::chain(e)
            );
        };
        for (i, row) in rows.iter().enumerate() {
            if self.capacity_gated {
                match row.try_get::<_, i64>("contended") {
                    Ok(contended) if contended > 0 => claim.lost = Some(LostRace::Contended),
                    Ok(_) => {}
                    Err(e) => figure("contention", &e),
                }
                if i == 0 {
                    claim.in_use = row
                        .try_get("in_use")
                        .map_err(|e| figure("slots in use", &e))
                        .unwrap_or_default();
                    claim.unguarded = row
                        .try_get::<_, Option<bool>>("unguarded")
                        .map_err(|e| figure("unguarded jobs", &e))
                        .unwrap_or_default()
                        .unwrap_or(false);
                    if self.rates.is_some() {
                        let wait: Option<i64> = row
                            .try_get("rate_wait_us")
                            .map_err(|e| figure("rate wait", &e))
                            .unwrap_or_default();
                        claim.rate_wait =
                            wait.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
                        claim.rate_plenty = row
                            .try_get::<_, Option<bool>>("rate_plenty")
                            .map_err(|e| figure("rate plenty", &e))
                            .unwrap_or_default()
                            .unwrap_or(false);
                    }
                }
            }
            if ending && i == 0 {
                claim.ended = row
                    .try_get("ended")
                    .map_err(|e| figure("ended jobs", &e))
                    .unwrap_or_default();
            }
            match row.try_get::<_, Option<JobId>>(at.id) {
                Ok(None) => {}
                Ok(Some(_)) => match Job::from_row_at(row, &at) {
                    Ok(job) => {
                        if let Some(problem) = &job.unreadable {
                            log::warn!(
                                "pgqueuer: job {} ({}) cannot be read as stored ({problem}); \
                                 it ends as a failure without running",
                                job.id,
                                job.entrypoint
                            );
                        }
                        claim.jobs.push(job);
                    }
                    Err(e) => log::error!("pgqueuer: a claimed job's id cannot be read: {e}"),
                },
                Err(e) => figure("job id", &e),
            }
        }
        claim
    }

    /// Ends claimed jobs, as a rule in one statement: deletes them (or holds `Failed`
    /// ones) and logs each outcome, but only for rows this worker still owns (a job
    /// re-picked elsewhere after a missed heartbeat is left to its new owner). Returns the
    /// ids that were still owned and got their log row.
    ///
    /// Outcomes that are all successful go to a plain statement first, which may wait for
    /// a row a concurrent claim holds locked for a moment, up to a lock timeout of its own
    /// (50 ms); whatever it leaves, and every other outcome, is ended the careful way:
    /// a locked row is not waited for but retried a millisecond later, so every owned row
    /// is ended before this returns.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a non-terminal status; [`Error::Db`] otherwise.
    pub fn complete(&self, conn: &mut Conn, outcomes: &[Outcome]) -> Result<Vec<JobId>> {
        let (done, _) = self.complete_within(conn, outcomes, GIVE_UP, true)?;
        Ok(done)
    }

    /// [`Claimer::complete`], retrying locked rows for at most `within`: returns the ids
    /// written and those still owned but locked (by a concurrent claim or another
    /// session), for the caller to end later. An error writes nothing, or, when the
    /// error came after a first pass, leaves the rows written so far written (each pass
    /// commits on its own).
    ///
    /// With `plain_first`, outcomes that are all successful are ended with the plain
    /// statement first ([`sql::queue_complete_plain`]: the rows deleted without the lock
    /// step, which costs about a third of a completion), and the careful one ends
    /// whatever that left (rows locked past its lock timeout, or changed). A caller that
    /// knows a row of these is locked for long passes false: the plain statement would
    /// wait out its lock timeout for nothing.
    pub(crate) fn complete_within(
        &self,
        conn: &mut Conn,
        outcomes: &[Outcome],
        within: Duration,
        plain_first: bool,
    ) -> Result<(Vec<JobId>, Vec<JobId>)> {
        let all = Ending::new(outcomes)?;
        let mut done = Vec::new();
        let mut rest = all.ids.clone();
        if plain_first && Self::ends_plainly(outcomes) {
            done = self.complete_plain(conn, &all.ids)?;
            let written: IdSet = done.iter().copied().collect();
            rest.retain(|&id| !written.contains(id));
            if rest.is_empty() {
                return Ok((done, rest));
            }
        }
        let (more, locked) = self.until_owned_done(conn, &rest, within, |conn, pending| {
            let e = all.only(pending);
            conn.query_cached(
                &self.statements.complete,
                &[
                    (&e.ids, Type::INT8_ARRAY),
                    (&e.statuses, Type::TEXT_ARRAY),
                    (&e.tracebacks, Type::TEXT_ARRAY),
                    (&self.worker_id, Type::UUID),
                ],
            )
        })?;
        done.extend(more);
        Ok((done, locked))
    }

    /// Whether these outcomes may be ended by [`sql::queue_complete_plain`]: every one
    /// successful without a traceback (the log rows it writes).
    fn ends_plainly(outcomes: &[Outcome]) -> bool {
        outcomes
            .iter()
            .all(|o| o.status == Status::Successful && o.traceback.is_none())
    }

    /// Runs [`sql::queue_complete_plain`] for `ids`: the ids it ended. A row lock held
    /// past the statement's lock timeout, or a deadlock, ends nothing (the careful
    /// statement then ends every outcome).
    fn complete_plain(&self, conn: &mut Conn, ids: &[JobId]) -> Result<Vec<JobId>> {
        match conn.query_cached(
            &self.statements.complete_plain,
            &[(&ids, Type::INT8_ARRAY), (&self.worker_id, Type::UUID)],
        ) {
            Ok(rows) => Ok(rows.iter().map(|r| r.get(0)).collect()),
            Err(Error::Db(e))
                if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE)
                    || sqlstate::classify(&e, "") == ErrorKind::Deadlock =>
            {
                log::debug!("ending claims plainly met a locked row ({e}); ending them carefully");
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// Refreshes the heartbeat of these jobs where this worker still owns them, in one
    /// statement (retrying rows a concurrent claim held for a moment). Returns the ids
    /// refreshed.
    ///
    /// # Errors
    /// [`Error::Db`].
    pub fn heartbeat(&self, conn: &mut Conn, ids: &[JobId]) -> Result<Vec<JobId>> {
        let (done, _) = self.heartbeat_within(conn, ids, GIVE_UP)?;
        Ok(done)
    }

    /// [`Claimer::heartbeat`], retrying locked rows for at most `within`: returns the ids
    /// refreshed and those still owned but locked. A row locked for long (a session
    /// holding `SELECT ... FOR UPDATE` on it) must not hold up the next beat of every
    /// other job.
    pub(crate) fn heartbeat_within(
        &self,
        conn: &mut Conn,
        ids: &[JobId],
        within: Duration,
    ) -> Result<(Vec<JobId>, Vec<JobId>)> {
        self.until_owned_done(conn, ids, within, |conn, pending| {
            conn.query_cached(
                &self.statements.heartbeat,
                &[(&pending, Type::INT8_ARRAY), (&self.worker_id, Type::UUID)],
            )
        })
    }

    /// Gives jobs this worker owns and has not started back to the queue: `queued`
    /// again, no owner, no attempt counted, with a `queued` log row each, retrying
    /// locked rows for at most `within`. Returns the ids released and those still
    /// locked. (An UPDATE sends no notification: the caller announces the change.)
    pub(crate) fn release_within(
        &self,
        conn: &mut Conn,
        ids: &[JobId],
        within: Duration,
    ) -> Result<(Vec<JobId>, Vec<JobId>)> {
        self.until_owned_done(conn, ids, within, |conn, pending| {
            conn.query_cached(
                &self.statements.release,
                &[(&pending, Type::INT8_ARRAY), (&self.worker_id, Type::UUID)],
            )
        })
    }

    /// Puts a job this worker owns back in the queue after `delay`, counting the attempt
    /// and logging `queued` with `traceback`. Returns false when the job was no longer
    /// owned by this worker.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a delay longer than [`crate::NewJob::MAX_EXECUTE_AFTER`];
    /// [`Error::Db`].
    pub fn retry(
        &self,
        conn: &mut Conn,
        id: JobId,
        delay: Duration,
        traceback: &serde_json::Value,
    ) -> Result<bool> {
        Ok(self
            .retry_within(conn, id, delay, traceback, GIVE_UP)?
            .unwrap_or(false))
    }

    /// [`Claimer::retry`], retrying a locked row for at most `within`: `None` when the
    /// row is still owned but locked.
    pub(crate) fn retry_within(
        &self,
        conn: &mut Conn,
        id: JobId,
        delay: Duration,
        traceback: &serde_json::Value,
        within: Duration,
    ) -> Result<Option<bool>> {
        if delay > crate::time::MAX_DELAY {
            return Err(Error::invalid(
                "retry delay",
                format!(
                    "{delay:?} is longer than the longest delay allowed ({:?}, 1000 years)",
                    crate::time::MAX_DELAY
                ),
            ));
        }
        let delay_us = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
        let traceback = traceback.to_string();
        let (done, pending) = self.until_owned_done(conn, &[id], within, |conn, _| {
            conn.query_cached(
                &self.statements.retry,
                &[
                    (&id, Type::INT8),
                    (&delay_us, Type::INT8),
                    (&traceback, Type::TEXT),
                    (&self.worker_id, Type::UUID),
                ],
            )
        })?;
        Ok(if pending.is_empty() {
            Some(!done.is_empty())
        } else {
            None
        })
    }

    /// Runs `step` on the pending ids (each run returns the ids it handled) until none of
    /// them is still owned by this worker, or `within` has passed: returns the ids
    /// handled and those still owned and pending. Deadlock victims are retried like
    /// skipped rows. With [`GIVE_UP`] as the bound, ids left pending are an
    /// [`Error::Timeout`] (the public forms promise every owned row is handled).
    fn until_owned_done<F>(
        &self,
        conn: &mut Conn,
        ids: &[JobId],
        within: Duration,
        mut step: F,
    ) -> Result<(Vec<JobId>, Vec<JobId>)>
    where
        F: FnMut(&mut Conn, &[JobId]) -> Result<Vec<postgres::Row>>,
    {
        let mut done = Vec::with_capacity(ids.len());
        let mut pending = ids.to_vec();
        let started = std::time::Instant::now();
        while !pending.is_empty() {
            match step(conn, &pending) {
                Ok(rows) => {
                    let handled: Vec<JobId> = rows.iter().map(|r| r.get(0)).collect();
                    let gone: IdSet = handled.iter().copied().collect();
                    pending.retain(|&id| !gone.contains(id));
                    done.extend(handled);
                }
                Err(Error::Db(e)) if sqlstate::classify(&e, "") == ErrorKind::Deadlock => {
                    log::debug!("ending claims was a deadlock victim; retrying");
                }
                Err(e) => return Err(e),
            }
            if pending.is_empty() {
                break;
            }
            pending = conn
                .query_cached(
                    &self.statements.owned,
                    &[(&pending, Type::INT8_ARRAY), (&self.worker_id, Type::UUID)],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if pending.is_empty() {
                break;
            }
            if started.elapsed() > within {
                if within >= GIVE_UP {
                    return Err(Error::Timeout(GIVE_UP));
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok((done, pending))
    }

    /// For each of `entrypoints`: the highest slot held by a picked job (of any worker)
    /// and how many slots are held.
    ///
    /// # Errors
    /// [`Error::Db`].
    pub(crate) fn slots_in_use(
        &self,
        conn: &mut Conn,
        entrypoints: &[&str],
    ) -> Result<Vec<(Option<i64>, u64)>> {
        conn.query_cached(
            &self.statements.slots_in_use,
            &[(&entrypoints, Type::TEXT_ARRAY)],
        )?
        .iter()
        .map(|row| {
            let in_use: i64 = row.try_get("in_use")?;
            Ok((row.try_get("highest")?, u64::try_from(in_use).unwrap_or(0)))
        })
        .collect()
    }

    /// Per rate-limit window of this claimer (entrypoint, window, units spent within the
    /// last window fleet-wide, jobs picked within it by workers that spent no unit): see
    /// `sql::rates::rates_in_use`.
    pub(crate) fn rates_in_use(
        &self,
        conn: &mut Conn,
    ) -> Result<Vec<(String, Duration, u64, u64)>> {
        let Some(rates) = self.rates.as_deref() else {
            return Ok(Vec::new());
        };
        conn.query_cached(
            &self.statements.rates_in_use,
            &[
                (&rates.entrypoints, Type::TEXT_ARRAY),
                (&rates.per_us, Type::INT8_ARRAY),
            ],
        )?
        .iter()
        .map(|row| {
            let count = |column: &str| -> Result<u64> {
                let n: i64 = row.try_get(column)?;
                Ok(u64::try_from(n).unwrap_or(0))
            };
            let per_us: i64 = row.try_get("per_us")?;
            Ok((
                row.try_get("entrypoint")?,
                Duration::from_micros(u64::try_from(per_us).unwrap_or(0)),
                count("spent")?,
                count("undeclared")?,
            ))
        })
        .collect()
    }

    /// True when no limit of this claimer binds for a while, as `claim` (one of its own)
    /// saw them: every limited entrypoint has `margin` slots to spare beyond those in use,
    /// no job is held out of the slot index's reach ([`Claim::unguarded`]), and every
    /// rate-limit window is far from binding ([`Claim::rate_plenty`]). True without
    /// limits; false for a claim of another claimer. A relaxed claim that did not count
    /// the slots in use says nothing new about them: it keeps the claims relaxed unless
    /// it saw a job out of the index's reach.
    ///
    /// A job of a rate-limited entrypoint claimed ahead of a free thread may start later
    /// than the moment its unit records; the worker then spends fresh units for it
    /// (`worker::rate_gate`), so claiming ahead is allowed only while units are plenty.
    pub(crate) fn far_from_full(&self, claim: &Claim, margin: i64) -> bool {
        if !self.capacity_gated {
            return true;
        }
        if self.rates.is_some() && !(claim.rate_plenty && self.plenty_at > 0) {
            return false;
        }
        if self.limits.iter().all(|l| *l <= 0) {
            return true;
        }
        // A job held outside `0..limit`, or without a slot, is outside the slot index's reach:
        // only careful claims, which count it, keep that limit exact.
        if claim.unguarded {
            return false;
        }
        let Some(in_use) = &claim.in_use else {
            return true;
        };
        in_use.len() == self.limits.len()
            && self
                .limits
                .iter()
                .zip(in_use)
                .all(|(limit, used)| *limit <= 0 || used.saturating_add(margin) <= *limit)
    }

    /// This claimer without the entrypoints in `left_out`; `None` when none would be left.
    pub(crate) fn without(&self, left_out: &[&str]) -> Option<Claimer> {
        let keep: Vec<usize> = (0..self.names.len())
            .filter(|&i| !left_out.contains(&self.names[i].as_str()))
            .collect();
        if keep.is_empty() {
            return None;
        }
        let limits: Vec<i64> = keep.iter().map(|&i| self.limits[i]).collect();
        let names: Vec<String> = keep.iter().map(|&i| self.names[i].clone()).collect();
        let rates = self.rates.as_deref().and_then(|w| w.only(&names));
        Some(Claimer {
            capacity_gated: limits.iter().any(|l| *l > 0) || rates.is_some(),
            rates,
            names,
            limits,
            ..self.clone()
        })
    }

    /// This claimer, asking each rate-limited claim whether every window is far from
    /// binding for a worker that may hold `margin` jobs beyond its free threads (see
    /// [`Claimer::far_from_full`]).
    pub(crate) fn with_plenty_at(mut self, margin: i64) -> Claimer {
        self.plenty_at = margin.max(0);
        self
    }

    /// Leases units for this claimer's next claims (`sql::rates::rate_lease`): up to four
    /// times its margin ([`Claimer::with_plenty_at`]), and an eighth of the smallest
    /// window, from each window, stamped with the end of the lease's `life` from now. Returns the
    /// units leased per rate-limited entrypoint, and whether every window is still far
    /// from binding.
    ///
    /// # Errors
    /// [`Error::Db`].
    pub(crate) fn lease_units(
        &self,
        conn: &mut Conn,
        life: Duration,
    ) -> Result<(Vec<(String, usize)>, bool)> {
        let Some(rates) = self.rates.as_deref() else {
            return Ok((Vec::new(), false));
        };
        // Four margins (a few claims' worth), but no more than an eighth of the smallest
        // window: leased units no claim takes are spent for nothing.
        let smallest = rates.starts.iter().copied().min().unwrap_or(0);
        let want = self.plenty_at.saturating_mul(4).min(smallest / 8).max(1);
        let want = i32::try_from(want).unwrap_or(i32::MAX);
        let plenty = self.plenty_at;
        let life_us = i64::try_from(life.as_micros()).unwrap_or(i64::MAX);
        let rows = conn.query_cached(
            &self.statements.rate_lease,
            &[
                (&rates.entrypoints, Type::TEXT_ARRAY),
                (&rates.per_us, Type::INT8_ARRAY),
                (&rates.starts, Type::INT8_ARRAY),
                (&rates.cooldown_us, Type::INT8_ARRAY),
                (&want, Type::INT4),
                (&self.worker_id, Type::UUID),
                (&plenty, Type::INT8),
                (&life_us, Type::INT8),
            ],
        )?;
        let mut far = !rows.is_empty();
        let mut units = Vec::with_capacity(rows.len());
        for row in &rows {
            let n: i64 = row.try_get("units")?;
            far &= row.try_get::<_, Option<bool>>("plenty")?.unwrap_or(false);
            units.push((row.try_get("entrypoint")?, usize::try_from(n).unwrap_or(0)));
        }
        Ok((units, far))
    }

    /// This claimer without its rate limits: for claims whose units were leased before.
    pub(crate) fn without_rates(&self) -> Claimer {
        Claimer {
            capacity_gated: self.limits.iter().any(|l| *l > 0),
            rates: None,
            ..self.clone()
        }
    }

    /// How long a lease of units lasts (see `worker::rate_gate`): a tenth of the shortest
    /// window, at most 100 ms; `None` without rate limits.
    pub(crate) fn lease_life(&self) -> Option<Duration> {
        let rates = self.rates.as_deref()?;
        let shortest = rates.per_us.iter().copied().min()?;
        Some(Duration::from_micros(u64::try_from(shortest / 10).unwrap_or(0)).min(MAX_LEASE))
    }

    /// The object names this claimer uses.
    pub(crate) fn settings(&self) -> &Settings {
        &self.statements.settings
    }

    /// The stored limits of this claimer's entrypoints (`crate::ops::set_limits`), each
    /// row read on its own: one that cannot be read (written by another program) is an
    /// error of its own.
    ///
    /// # Errors
    /// [`Error::Db`] when the statement fails.
    pub(crate) fn stored_limits(
        &self,
        conn: &mut Conn,
    ) -> Result<Vec<Result<crate::ops::StoredLimits>>> {
        Ok(conn
            .query_cached(
                &self.statements.overrides_select,
                &[(&self.names, Type::TEXT_ARRAY)],
            )?
            .iter()
            .map(crate::ops::stored_of)
            .collect())
    }

    /// Records the limits this claimer declares, under its worker id, for `pgq limits`
    /// (`sql::overrides::declared_upsert`); again to show the worker still runs.
    ///
    /// # Errors
    /// [`Error::Db`], for instance when the table is missing.
    pub(crate) fn declare(&self, conn: &mut Conn) -> Result<()> {
        let windows = self.rate_windows();
        let limits: Vec<i32> = self
            .limits
            .iter()
            .map(|l| i32::try_from(*l).unwrap_or(i32::MAX))
            .collect();
        let rates: Vec<String> = self
            .names
            .iter()
            .map(|name| {
                windows
                    .iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, r)| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        conn.query_cached(
            &self.statements.declared_upsert,
            &[
                (&self.worker_id, Type::UUID),
                (&self.names, Type::TEXT_ARRAY),
                (&limits, Type::INT4_ARRAY),
                (&rates, Type::TEXT_ARRAY),
            ],
        )?;
        Ok(())
    }

    /// Deletes what [`Claimer::declare`] recorded (the worker stops).
    ///
    /// # Errors
    /// [`Error::Db`].
    pub(crate) fn withdraw(&self, conn: &mut Conn) -> Result<()> {
        conn.query_cached(
            &self.statements.declared_delete,
            &[(&self.worker_id, Type::UUID)],
        )?;
        Ok(())
    }

    /// This claimer with other limits: `limits` aligned with its entrypoints (0: none)
    /// and `rates` per entrypoint (stored limits that override the declared ones).
    pub(crate) fn with_limits(&self, limits: Vec<i64>, rates: &[(String, RateLimit)]) -> Claimer {
        let rates = Windows::new(rates);
        Claimer {
            capacity_gated: limits.iter().any(|l| *l > 0) || rates.is_some(),
            limits,
            rates,
            ..self.clone()
        }
    }

    /// Each entrypoint's concurrency limit (0: none), in this claimer's order, with its
    /// name.
    pub(crate) fn limits(&self) -> impl Iterator<Item = (&str, i64)> {
        self.names
            .iter()
            .map(String::as_str)
            .zip(self.limits.iter().copied())
    }

    /// Each rate-limit window, with its entrypoint.
    pub(crate) fn rate_windows(&self) -> Vec<(String, RateLimit)> {
        let Some(w) = self.rates.as_deref() else {
            return Vec::new();
        };
        (0..w.entrypoints.len())
            .filter_map(|i| {
                let starts = u32::try_from(w.starts[i]).ok()?;
                let per = Duration::from_micros(u64::try_from(w.per_us[i]).ok()?);
                Some((w.entrypoints[i].clone(), RateLimit::new(starts, per)))
            })
            .collect()
    }

    /// True when any entrypoint of this claimer has a rate limit.
    pub fn is_rate_limited(&self) -> bool {
        self.rates.is_some()
    }

    /// True when some entrypoint of this claimer has a concurrency limit (whose slots a
    /// deletion may free).
    pub(crate) fn has_slots(&self) -> bool {
        self.limits.iter().any(|l| *l > 0)
    }

    /// True when every entrypoint of this claimer has a rate limit.
    pub(crate) fn all_rate_limited(&self) -> bool {
        self.rates
            .as_deref()
            .is_some_and(|w| self.names.iter().all(|n| w.entrypoints.contains(n)))
    }

    /// Makes the units of this claimer's rate limits that the rates table lacks (one row
    /// per start of each window; those of a smaller limit declared before are kept, and
    /// their history with them). Idempotent, and safe while other claimers run.
    ///
    /// # Errors
    /// [`Error::Db`], for instance when the rates table is missing (run
    /// [`crate::upgrade`]).
    pub fn provision_rate_limits(&self, client: &mut impl GenericClient) -> Result<()> {
        let Some(rates) = &self.rates else {
            return Ok(());
        };
        client.execute(
            &self.statements.rates_provision,
            &[&rates.entrypoints, &rates.per_us, &rates.starts],
        )?;
        Ok(())
    }

    /// How late after its claim's statement was sent a job of `entrypoint` may start and
    /// still count as the start its units recorded: the smallest guard of its windows
    /// ([`RateLimit`]). `None` for an entrypoint without a rate limit.
    ///
    /// A claim stamps its units with the database's clock as it runs, so a handler that
    /// starts within this time of sending the claim starts within it of the stamp, on
    /// any machine's clock. One that would start later must first spend fresh units
    /// ([`Claimer::spend_late_start`]); a worker does both.
    pub fn start_allowance(&self, entrypoint: &str) -> Option<Duration> {
        let rates = self.rates.as_deref()?;
        (0..rates.entrypoints.len())
            .filter(|&i| rates.entrypoints[i] == entrypoint)
            .map(|i| rates.cooldown_us[i] - rates.per_us[i])
            .min()
            .map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)))
    }

    /// Spends, now, one unit of each of `entrypoint`'s windows for a job whose handler
    /// could not start within [`Claimer::start_allowance`] of its claim (the units its
    /// claim spent record a start that did not happen then, and stay spent). `None` when
    /// spent; otherwise nothing is spent and the wait says when every window may have a
    /// unit again. Measure the allowance again from the moment this statement was sent.
    ///
    /// # Errors
    /// [`Error::Db`] when the statement fails.
    pub fn spend_late_start(
        &self,
        client: &mut impl GenericClient,
        entrypoint: &str,
    ) -> Result<Option<Duration>> {
        self.spend_late_start_ahead(client, entrypoint, Duration::ZERO)
    }

    /// [`Claimer::spend_late_start`], its units stamped `ahead` of now: the handler may
    /// then start up to `ahead` plus the allowance after this statement was sent (for a
    /// database whose round trip outlasts the allowance).
    pub(crate) fn spend_late_start_ahead(
        &self,
        client: &mut impl GenericClient,
        entrypoint: &str,
        ahead: Duration,
    ) -> Result<Option<Duration>> {
        let ahead_us = i64::try_from(ahead.as_micros()).unwrap_or(i64::MAX);
        let Some(rates) = self
            .rates
            .as_deref()
            .and_then(|w| w.only(&[entrypoint.to_owned()]))
        else {
            return Ok(None);
        };
        let row = client.query_one(
            &self.statements.rates_spend_late,
            &[
                &rates.entrypoints,
                &rates.per_us,
                &rates.starts,
                &rates.cooldown_us,
                &self.worker_id,
                &ahead_us,
            ],
        )?;
        if row.try_get::<_, bool>("spent")? {
            return Ok(None);
        }
        let wait: Option<i64> = row.try_get("wait_us")?;
        Ok(Some(Duration::from_micros(
            wait.and_then(|us| u64::try_from(us).ok()).unwrap_or(0),
        )))
    }

    /// How long until the earliest queued job of this claimer's entrypoints is due:
    /// `None` when none is queued, zero when one is due now.
    ///
    /// # Errors
    /// [`Error::Db`].
    pub fn next_due(&self, conn: &mut Conn) -> Result<Option<Duration>> {
        Ok(self.next_wake(conn)?.queued)
    }

    /// Whether any job of this claimer's entrypoints is queued, due or not: what
    /// [`Claimer::next_due`]`.is_none()` says, more cheaply right after many jobs were
    /// claimed and ended. It reads the index the claims read, whose entries of rows
    /// claimed since were skipped as dead by the claims themselves; `next_due`'s first
    /// look after a drain of 50,000 jobs walked all 50,000 of its own (10 ms).
    ///
    /// # Errors
    /// [`Error::Db`].
    pub fn any_queued(&self, conn: &mut Conn) -> Result<bool> {
        let row = conn.query_one_cached(
            &self.statements.any_queued,
            &[(&self.names, Type::TEXT_ARRAY)],
        )?;
        Ok(row.try_get("any_queued")?)
    }

    /// When a claim could next find something without anything changing: a deferred job
    /// coming due, or a job of another worker going stale (its worker presumed dead).
    pub(crate) fn next_wake(&self, conn: &mut Conn) -> Result<NextWake> {
        let row = conn.query_one_cached(
            &self.statements.next_due,
            &[
                (&self.names, Type::TEXT_ARRAY),
                (&self.heartbeat_timeout_us, Type::INT8),
                (&self.worker_id, Type::UUID),
            ],
        )?;
        let until = |column: &str| -> Result<Option<Duration>> {
            let us: Option<i64> = row.try_get(column)?;
            Ok(us.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0))))
        };
        Ok(NextWake {
            queued: until("queued_us")?,
            stale: until("stale_us")?,
        })
    }

    /// [`Claimer::next_wake`] without what walks the entries of jobs run long ago (see
    /// `sql::claim::queue_next_due_recent`): when a job due in the last second or later is
    /// next due, and no stale look (the worker's lanes look for stale jobs on a schedule
    /// of their own, `worker::floors`).
    pub(crate) fn next_wake_recent(&self, conn: &mut Conn) -> Result<NextWake> {
        let row = conn.query_one_cached(
            &self.statements.next_due_recent,
            &[(&self.names, Type::TEXT_ARRAY)],
        )?;
        let us: Option<i64> = row.try_get("queued_us")?;
        Ok(NextWake {
            queued: us.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0))),
            stale: None,
        })
    }
}

/// A claimer's rate-limit windows as the claim statement binds them: aligned arrays, one
/// element per (entrypoint, window).
#[derive(Debug)]
struct Windows {
    entrypoints: Vec<String>,
    per_us: Vec<i64>,
    starts: Vec<i64>,
    cooldown_us: Vec<i64>,
}

impl Windows {
    /// The windows of `limits`; `None` without any.
    fn new(limits: &[(String, RateLimit)]) -> Option<Arc<Windows>> {
        if limits.is_empty() {
            return None;
        }
        Some(Arc::new(Windows {
            entrypoints: limits.iter().map(|(n, _)| n.clone()).collect(),
            per_us: limits.iter().map(|(_, l)| l.per_us()).collect(),
            starts: limits.iter().map(|(_, l)| i64::from(l.starts())).collect(),
            cooldown_us: limits.iter().map(|(_, l)| l.cooldown_us()).collect(),
        }))
    }

    /// The windows of the entrypoints in `names`; `None` when none has one.
    fn only(&self, names: &[String]) -> Option<Arc<Windows>> {
        let keep: Vec<usize> = (0..self.entrypoints.len())
            .filter(|&i| names.contains(&self.entrypoints[i]))
            .collect();
        if keep.is_empty() {
            return None;
        }
        Some(Arc::new(Windows {
            entrypoints: keep.iter().map(|&i| self.entrypoints[i].clone()).collect(),
            per_us: keep.iter().map(|&i| self.per_us[i]).collect(),
            starts: keep.iter().map(|&i| self.starts[i]).collect(),
            cooldown_us: keep.iter().map(|&i| self.cooldown_us[i]).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every claim statement a claimer can choose, whatever its limits, rates and budget,
    /// is one `upgrade()` makes a statement function of: through a transaction pooler
    /// one without would be planned on every run (the relaxed claims that do not count
    /// were once left out).
    #[test]
    fn every_claim_a_claimer_runs_has_a_statement_function() {
        let settings = Settings::default();
        let functions = crate::sql::functions::per_job_statements(&settings);
        let rate = RateLimit::per_second(10);
        let claimers = [
            Claimer::builder().entrypoint("a", 0).build(),
            Claimer::builder().entrypoint("a", 5).build(),
            Claimer::builder()
                .entrypoint("a", 5)
                .entrypoint("b", 0)
                .max_concurrent_tasks(3)
                .build(),
            Claimer::builder()
                .entrypoint("a", 0)
                .max_concurrent_tasks(3)
                .build(),
            Claimer::builder()
                .entrypoint("a", 0)
                .rate_limit("a", rate)
                .build(),
            Claimer::builder()
                .entrypoint("a", 5)
                .rate_limit("a", rate)
                .max_concurrent_tasks(3)
                .build(),
        ];
        for (which, claimer) in claimers.into_iter().enumerate() {
            let claimer = claimer.unwrap();
            for (ending, relaxed, count) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0)) {
                let sql = claimer.statement(ending, relaxed, count);
                assert!(
                    functions.iter().any(|f| f == sql),
                    "no function for claimer {which}'s claim (ending {ending}, relaxed {relaxed}, \
                     count {count})"
                );
            }
        }
    }
}
