//! Producing jobs: [`Queue`] enqueues (on its pool, or on a client the caller holds:
//! [`Queue::on`]), cancels, inspects, clears and requeues jobs; the job builder is in
//! `new_job`, waiting for completion in `wait`.

mod explain;
mod new_job;
mod wait;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use postgres::types::{ToSql, Type};
use postgres::{GenericClient, Row};

pub use explain::{Explanation, SlotHolder};
pub use new_job::NewJob;

use crate::connect::{Conn, Param, Pool};
use crate::error::{Error, Result};
use crate::events::{Cancellation, Event, Operation, TableChanged};
use crate::job::{FailedJob, Job, JobId, LogEntry, Status, status_of};
use crate::settings::Settings;
use crate::sql::queue::{CHANNEL_NOTIFY_MANY, QueueSql};
use crate::sqlstate::{self, ErrorKind};
use crate::telemetry;
use new_job::Columns;

/// What an enqueue does with a job whose dedupe key is already held by a queued or
/// picked job. Keys of held (`failed`) and finished jobs are free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Fail the whole call with [`Error::DuplicateJob`]; nothing of it is inserted. Also
    /// when the call itself repeats a key. The default, as in Python.
    #[default]
    Raise,
    /// Leave that job out: its position in the result is `None`. Within one call the
    /// first occurrence of a key wins.
    Skip,
    /// Leave that job out but raise the held job's priority to the larger of the two;
    /// its position in the result is the held job's id. A key may appear at most once
    /// per call (checked before any SQL).
    UpdatePriority,
}

/// How many jobs of one entrypoint, priority and status are in the queue table
/// (one row of [`Queue::sizes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSize {
    /// The entrypoint.
    pub entrypoint: String,
    /// The priority.
    pub priority: i32,
    /// `Queued`, `Picked` or `Failed`.
    pub status: Status,
    /// How many rows.
    pub count: u64,
}

/// The producer side of a queue: enqueue, cancel, inspect, clear, requeue, wait.
///
/// Cheap to clone (a pool handle and shared, pre-rendered SQL). Each call checks a
/// connection out of the pool for its duration; [`Queue::on`] enqueues on a client the
/// caller holds instead (a transaction of theirs, or a connection kept for a producer
/// loop), with the same three methods.
///
/// ```no_run
/// # fn main() -> Result<(), pgqueuer::Error> {
/// use std::time::Duration;
/// use pgqueuer::{NewJob, OnConflict, Queue};
///
/// let pool = pgqueuer::connect("postgres://postgres@127.0.0.1/app")?;
/// let queue = Queue::new(pool.clone());
/// let id = queue.enqueue(NewJob::new("email", b"hello".to_vec()))?;
/// let ids = queue.enqueue_many(&[
///     NewJob::new("resize", b"1.png".to_vec()),
///     NewJob::new("resize", b"2.png".to_vec()).priority(5),
/// ])?;
/// let skipped = queue.enqueue_deduplicated(
///     &[NewJob::without_payload("report").dedupe_key("daily")],
///     OnConflict::Skip,
/// )?;
///
/// // Inside your own transaction: the job exists only if the transaction commits.
/// let mut conn = pool.get()?;
/// let mut tx = conn.client().transaction()?;
/// queue.on(&mut tx).enqueue(NewJob::new("audit", b"order 7".to_vec()))?;
/// tx.commit()?;
///
/// let statuses = queue.wait_for(&ids, Duration::from_secs(30))?;
/// # let _ = (id, skipped, statuses);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Queue {
    pool: Pool,
    sql: Arc<QueueSql>,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("queue_table", &self.sql.queue_table)
            .field("channel", &self.sql.channel)
            .finish_non_exhaustive()
    }
}

/// Ids per `cancellation_event`: PostgreSQL caps a NOTIFY payload at 8000 bytes, and 300
/// ids of at most 20 characters plus commas leave room for the rest of the event.
const CANCEL_IDS_PER_EVENT: usize = 300;

impl Queue {
    /// The most bytes one enqueue call may carry: payloads, headers, keys and entrypoints
    /// together, plus a small allowance per job. PostgreSQL caps a single bound value (a
    /// batch's payload array is one) at 1 GiB, and the server holds several copies of a
    /// batch while it inserts it, so batches are kept well below that.
    pub const MAX_BATCH_BYTES: usize = 256 << 20;

    /// A queue with PgQueuer's default object names.
    pub fn new(pool: Pool) -> Queue {
        Queue {
            pool,
            sql: Arc::new(QueueSql::new(&Settings::default())),
        }
    }

    /// A queue with the object names of `settings` (prefix, schema, channel...).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] when a name is not acceptable.
    pub fn with_settings(pool: Pool, settings: &Settings) -> Result<Queue> {
        settings.validate()?;
        Ok(Queue {
            pool,
            sql: Arc::new(QueueSql::new(settings)),
        })
    }

    /// The pool this queue uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Enqueues one job; returns its id.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the field for a bad value (nothing is sent);
    /// [`Error::DuplicateJob`] when its dedupe key is held by a queued or picked job;
    /// [`Error::Pool`] or [`Error::Db`] for connection and database failures.
    pub fn enqueue(&self, job: impl Borrow<NewJob>) -> Result<JobId> {
        let jobs = std::slice::from_ref(job.borrow());
        // Check the input before taking a connection.
        let columns = Columns::build(jobs, OnConflict::Raise, true)?;
        single_id(self.insert(&mut *self.pool.get()?, OnConflict::Raise, jobs, columns)?)
    }

    /// Enqueues a batch in one statement (with its `queued` log rows); returns the ids in
    /// input order. All or nothing. An empty batch sends nothing.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the job and field (`jobs[3].entrypoint`), or `jobs`
    /// when the batch exceeds [`Queue::MAX_BATCH_BYTES`] (nothing is sent);
    /// [`Error::DuplicateJob`] (with every key of the call) when a key is held by a queued
    /// or picked job or repeated within the batch; [`Error::Pool`] or [`Error::Db`].
    pub fn enqueue_many(&self, jobs: &[NewJob]) -> Result<Vec<JobId>> {
        all_ids(self.enqueue_deduplicated(jobs, OnConflict::Raise)?)
    }

    /// Enqueues a batch in one statement with a choice of what a held dedupe key does.
    /// The result has one entry per input job, in input order: its id, the held job's id
    /// ([`OnConflict::UpdatePriority`]), or `None` when skipped ([`OnConflict::Skip`]).
    ///
    /// # Errors
    /// As [`Queue::enqueue_many`]; [`Error::DuplicateJob`] only with
    /// [`OnConflict::Raise`]; with [`OnConflict::UpdatePriority`] a key repeated within
    /// the call is [`Error::InvalidInput`] naming it (nothing is sent).
    pub fn enqueue_deduplicated(
        &self,
        jobs: &[NewJob],
        on_conflict: OnConflict,
    ) -> Result<Vec<Option<JobId>>> {
        // Check the input before taking a connection.
        let columns = Columns::build(jobs, on_conflict, false)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.insert(&mut *self.pool.get()?, on_conflict, jobs, columns)
    }

    /// The enqueue methods on a client the caller holds:
    ///
    /// - a `postgres::Transaction` (or `Client`) of theirs: the jobs (and their NOTIFY)
    ///   exist only if that transaction commits. One round trip per call; a failure
    ///   aborts the transaction, as any failed statement does (use [`OnConflict::Skip`]
    ///   or a savepoint where a duplicate is expected);
    /// - a [`Conn`] kept for a producer loop (`&mut *pool.get()?`): no pool checkout per
    ///   call, so no validity probe (a round trip as costly as a small batch), and the
    ///   statement prepared once on that connection. Autocommit.
    pub fn on<'a, C: EnqueueTarget + ?Sized>(&'a self, client: &'a mut C) -> QueueOn<'a, C> {
        QueueOn {
            queue: self,
            client,
        }
    }

    /// Cancels jobs: each queued or picked one among `ids` is deleted and logged
    /// `canceled`, and a `cancellation_event` naming them is sent so that workers stop
    /// the running ones; all in one transaction. Unknown ids, finished jobs and held
    /// (`failed`) jobs are left alone. Returns the ids cancelled, ascending.
    ///
    /// A worker's handler stops only if it checks its cancellation flag; its completion
    /// then writes nothing, since the row is gone.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`]; nothing is cancelled then.
    pub fn cancel(&self, ids: &[JobId]) -> Result<Vec<JobId>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.change_and_notify(&self.sql.cancel, ids, |cancelled| {
            cancelled
                .chunks(CANCEL_IDS_PER_EVENT)
                .map(|chunk| {
                    Event::from(Cancellation::new(&self.sql.channel, chunk.to_vec())).to_json()
                })
                .collect()
        })
    }

    /// How many jobs the queue table holds, per entrypoint, priority and status, ordered
    /// by entrypoint, then priority, then status.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn sizes(&self) -> Result<Vec<QueueSize>> {
        self.query(&self.sql.count, &[])?
            .iter()
            .map(|row| {
                let count: i64 = row.try_get("count")?;
                Ok(QueueSize {
                    entrypoint: row.try_get("entrypoint")?,
                    priority: row.try_get("priority")?,
                    status: status_of(row)?,
                    count: u64::try_from(count).unwrap_or(0),
                })
            })
            .collect()
    }

    /// Deletes every job of `entrypoints` (queued, picked or held), logging each as
    /// `deleted`; returns how many were deleted. Running handlers are not told. An empty
    /// list deletes nothing and sends nothing.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn clear<S: AsRef<str>>(&self, entrypoints: &[S]) -> Result<u64> {
        if entrypoints.is_empty() {
            return Ok(0);
        }
        let names: Vec<&str> = entrypoints.iter().map(AsRef::as_ref).collect();
        let mut conn = self.pool.get()?;
        Ok(conn
            .query_cached(&self.sql.clear, &[(&names, Type::TEXT_ARRAY)])?
            .len() as u64)
    }

    /// Up to `limit` held (`failed`) jobs, oldest first, each with the failure that put
    /// it there (from its latest `failed` log row).
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn list_failed(&self, limit: usize) -> Result<Vec<FailedJob>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.query(&self.sql.select_failed, &[(&limit, Type::INT8)])?
            .iter()
            .map(FailedJob::from_row)
            .collect()
    }

    /// The job `id` if it is still in the queue table (queued, picked or held); `None`
    /// once it has finished (its [`Queue::history`] remains) or for an unknown id.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        Ok(self.jobs(&[id])?.pop())
    }

    /// Every log row of job `id`, oldest first: its whole history, with the tracebacks of
    /// failures and retries, also after the job has left the queue table (until the log
    /// is pruned). Empty for an unknown id.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn history(&self, id: JobId) -> Result<Vec<LogEntry>> {
        self.query(&self.sql.log_select_job, &[(&id, Type::INT8)])?
            .iter()
            .map(LogEntry::from_row)
            .collect()
    }

    /// The jobs among `ids` still in the queue table (queued, picked or held), by id.
    /// Headers stored as SQL NULL or JSON `null` (Python's "no headers") read as `None`.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn jobs(&self, ids: &[JobId]) -> Result<Vec<Job>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.query(&self.sql.select, &[(&ids, Type::INT8_ARRAY)])?
            .iter()
            .map(Job::from_row)
            .collect()
    }

    /// Puts the held (`failed`) jobs among `ids` back in the queue: due now, attempts
    /// reset, each logged `queued`. Other ids are ignored. Returns the ids requeued,
    /// ascending.
    ///
    /// PgQueuer's trigger announces no UPDATE, so this also sends a `table_changed_event`
    /// with operation `update` in the same transaction, which wakes Rust and Python
    /// workers alike instead of leaving the jobs to their next poll.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`]; nothing is requeued then.
    pub fn requeue_failed(&self, ids: &[JobId]) -> Result<Vec<JobId>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.change_and_notify(&self.sql.requeue_failed, ids, |_| {
            vec![
                Event::from(TableChanged::new(
                    &self.sql.channel,
                    Operation::Update,
                    &self.sql.queue_table,
                ))
                .to_json(),
            ]
        })
    }

    /// The latest logged status of each of `ids` (from the log table, so finished jobs
    /// are included). Ids never logged are absent from the map.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn job_statuses(&self, ids: &[JobId]) -> Result<HashMap<JobId, Status>> {
        self.job_statuses_within(ids, None)
    }

    /// Runs the insert of checked input on `client` (inside its trace spans, see
    /// `telemetry`) and puts each returned id at its input position.
    fn insert<C: EnqueueTarget + ?Sized>(
        &self,
        client: &mut C,
        conflict: OnConflict,
        jobs: &[NewJob],
        mut columns: Columns<'_>,
    ) -> Result<Vec<Option<JobId>>> {
        let publish = telemetry::publish(&columns.entrypoints);
        columns.add_trace(jobs, &publish);
        let result = self.insert_columns(client, conflict, jobs, &columns);
        publish.finish(&result);
        result
    }

    fn insert_columns<C: EnqueueTarget + ?Sized>(
        &self,
        client: &mut C,
        conflict: OnConflict,
        jobs: &[NewJob],
        columns: &Columns<'_>,
    ) -> Result<Vec<Option<JobId>>> {
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&columns.priorities, Type::INT4_ARRAY),
            (&columns.entrypoints, Type::TEXT_ARRAY),
            (&columns.payloads, Type::BYTEA_ARRAY),
            (&columns.delays_us, Type::INT8_ARRAY),
            (&columns.dedupe_keys, Type::TEXT_ARRAY),
            (&columns.headers, Type::TEXT_ARRAY),
        ];
        let rows = client
            .query_insert(insert_statement(&self.sql, conflict), &params)
            .map_err(|e| self.insert_error(e, jobs))?;
        let mut ids = vec![None; jobs.len()];
        for row in &rows {
            let ord: i64 = row.try_get(0)?;
            let id: JobId = row.try_get(1)?;
            let slot = usize::try_from(ord - 1)
                .ok()
                .and_then(|i| ids.get_mut(i))
                .ok_or_else(|| Error::Unexpected(format!("enqueue returned position {ord}")))?;
            *slot = Some(id);
        }
        Ok(ids)
    }

    /// Runs `change` (which returns the ids it changed) on `ids` and, when it changed
    /// any, sends the notifications `events` makes of them, in one transaction: the
    /// workers hear of the change when, and only if, it is committed.
    fn change_and_notify(
        &self,
        change: &str,
        ids: &[JobId],
        events: impl FnOnce(&[JobId]) -> Vec<String>,
    ) -> Result<Vec<JobId>> {
        let mut conn = self.pool.get()?;
        let mut tx = conn.transaction_cached()?;
        let changed = ids_of(&tx.query_cached(change, &[(&ids, Type::INT8_ARRAY)])?)?;
        if !changed.is_empty() {
            tx.query_cached(
                CHANNEL_NOTIFY_MANY,
                &[
                    (&self.sql.channel, Type::TEXT),
                    (&events(&changed), Type::TEXT_ARRAY),
                ],
            )?;
        }
        tx.commit()?;
        Ok(changed)
    }

    /// Runs `sql` with `params` on a pooled connection, prepared once per connection.
    fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.pool.get()?.query_cached(sql, params)
    }

    /// A unique violation on the dedupe index is a duplicate job; anything else
    /// (including a unique violation on another index) is a database error.
    fn insert_error(&self, err: Error, jobs: &[NewJob]) -> Error {
        let Error::Db(err) = err else {
            return err;
        };
        match sqlstate::classify(&err, &self.sql.slot_index) {
            ErrorKind::UniqueViolation {
                constraint: Some(constraint),
            } if constraint == self.sql.dedupe_index => Error::DuplicateJob {
                keys: jobs.iter().filter_map(|j| j.dedupe_key.clone()).collect(),
                source: err,
            },
            _ => Error::Db(err),
        }
    }
}

/// The insert statement of a conflict mode.
fn insert_statement(sql: &QueueSql, conflict: OnConflict) -> &str {
    match conflict {
        OnConflict::Raise => &sql.insert_many_raise,
        OnConflict::Skip => &sql.insert_many_skip,
        OnConflict::UpdatePriority => &sql.insert_many_update_priority,
    }
}

/// Every position must have an id (modes that never skip).
fn all_ids(ids: Vec<Option<JobId>>) -> Result<Vec<JobId>> {
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| {
            id.ok_or_else(|| Error::Unexpected(format!("enqueue returned no id for job {i}")))
        })
        .collect()
}

/// The id of a one-job enqueue that never skips.
fn single_id(ids: Vec<Option<JobId>>) -> Result<JobId> {
    all_ids(ids)?
        .pop()
        .ok_or_else(|| Error::Unexpected("no id for the enqueued job".into()))
}

fn ids_of(rows: &[Row]) -> Result<Vec<JobId>> {
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// [`Queue`]'s enqueue methods on a client the caller holds (see [`Queue::on`]).
pub struct QueueOn<'a, C: ?Sized> {
    queue: &'a Queue,
    client: &'a mut C,
}

impl<C: EnqueueTarget + ?Sized> QueueOn<'_, C> {
    /// As [`Queue::enqueue`], on this client.
    ///
    /// # Errors
    /// As [`Queue::enqueue`], without [`Error::Pool`].
    pub fn enqueue(&mut self, job: impl Borrow<NewJob>) -> Result<JobId> {
        let jobs = std::slice::from_ref(job.borrow());
        let columns = Columns::build(jobs, OnConflict::Raise, true)?;
        single_id(
            self.queue
                .insert(self.client, OnConflict::Raise, jobs, columns)?,
        )
    }

    /// As [`Queue::enqueue_many`], on this client.
    ///
    /// # Errors
    /// As [`Queue::enqueue_many`], without [`Error::Pool`].
    pub fn enqueue_many(&mut self, jobs: &[NewJob]) -> Result<Vec<JobId>> {
        all_ids(self.enqueue_deduplicated(jobs, OnConflict::Raise)?)
    }

    /// As [`Queue::enqueue_deduplicated`], on this client.
    ///
    /// # Errors
    /// As [`Queue::enqueue_deduplicated`], without [`Error::Pool`].
    pub fn enqueue_deduplicated(
        &mut self,
        jobs: &[NewJob],
        on_conflict: OnConflict,
    ) -> Result<Vec<Option<JobId>>> {
        let columns = Columns::build(jobs, on_conflict, false)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.queue.insert(self.client, on_conflict, jobs, columns)
    }
}

impl<C: ?Sized> fmt::Debug for QueueOn<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueOn")
            .field("queue", self.queue)
            .finish_non_exhaustive()
    }
}

/// What [`Queue::on`] enqueues through: any `postgres::GenericClient` (a `Client` or a
/// `Transaction`: a one-round-trip typed query), or a pooled [`Conn`] (the statement
/// prepared once per connection). Sealed: nothing else implements it.
pub trait EnqueueTarget: sealed::Sealed {
    /// Runs the insert statement `sql` with `params`.
    #[doc(hidden)]
    fn query_insert(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>>;
}

impl<C: GenericClient> EnqueueTarget for C {
    fn query_insert(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>> {
        Ok(self.query_typed(sql, params)?)
    }
}

impl EnqueueTarget for Conn {
    fn query_insert(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>> {
        self.query_cached(sql, params)
    }
}

mod sealed {
    pub trait Sealed {}
    impl<C: postgres::GenericClient> Sealed for C {}
    impl Sealed for crate::Conn {}
}
