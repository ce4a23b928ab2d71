//! Producing jobs: enqueue (one, a batch, or inside the caller's transaction), cancel,
//! inspect, clear, requeue, and wait for completion.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{ToSql, Type};
use postgres::{Client, GenericClient, NoTls, Row, Statement};
use serde_json::Value;

use crate::connect::{Conn, Pool};
use crate::error::{Error, Result, chain};
use crate::events::{Cancellation, Event, Operation, TableChanged};
use crate::job::{FailedJob, Job, JobId, LogEntry, Status, status_of};
use crate::settings::Settings;
use crate::sql::queue::{CHANNEL_NOTIFY_MANY, Conflict, QueueSql};
use crate::sqlstate::{self, ErrorKind};

/// A job to enqueue: an entrypoint (the handler's name), an optional payload, and options.
///
/// ```
/// use std::time::Duration;
/// use pgqueuer::NewJob;
///
/// let job = NewJob::new("email", b"{\"to\": \"a@example.com\"}".to_vec())
///     .priority(5)
///     .execute_after(Duration::from_secs(60))
///     .dedupe_key("welcome-42")
///     .header("trace_id", "abc123");
/// let ping = NewJob::without_payload("ping");
/// # let _ = (job, ping);
/// ```
///
/// The builder never fails; the values are checked when the job is enqueued, before any
/// SQL, and a bad one is reported as [`Error::InvalidInput`] naming the field:
/// - `entrypoint`: 1 to [`NewJob::MAX_ENTRYPOINT_BYTES`] bytes, no NUL character;
/// - `dedupe_key`: 1 to [`NewJob::MAX_DEDUPE_KEY_BYTES`] bytes, no NUL (the key lives in
///   a B-tree index, whose entries PostgreSQL caps at about 2.7 kB);
/// - `headers`: a JSON object, with no NUL character in any string (jsonb refuses it);
/// - `execute_after`: at most [`NewJob::MAX_EXECUTE_AFTER`];
/// - `payload`: any bytes, within the batch limit [`Queue::MAX_BATCH_BYTES`].
#[derive(Clone, PartialEq)]
pub struct NewJob {
    entrypoint: String,
    payload: Option<Vec<u8>>,
    priority: i32,
    execute_after: Duration,
    dedupe_key: Option<String>,
    headers: Option<Value>,
}

impl fmt::Debug for NewJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A payload can be megabytes; its length says enough.
        f.debug_struct("NewJob")
            .field("entrypoint", &self.entrypoint)
            .field("payload_len", &self.payload.as_ref().map(Vec::len))
            .field("priority", &self.priority)
            .field("execute_after", &self.execute_after)
            .field("dedupe_key", &self.dedupe_key)
            .field("headers", &self.headers)
            .finish()
    }
}

impl NewJob {
    /// The longest entrypoint accepted, in bytes. Handler names are short; a longer one
    /// is almost certainly a payload passed in the wrong argument.
    pub const MAX_ENTRYPOINT_BYTES: usize = 255;

    /// The longest dedupe key accepted, in bytes (well under the B-tree entry limit of
    /// the unique index that enforces it).
    pub const MAX_DEDUPE_KEY_BYTES: usize = 1024;

    /// The longest delay accepted: 10,000 years. Longer ones cannot be added to `now()`
    /// without leaving PostgreSQL's timestamp range (which ends in the year 294276) or
    /// the microsecond count of an interval.
    pub const MAX_EXECUTE_AFTER: Duration = Duration::from_secs(10_000 * 31_557_600);

    /// A job for `entrypoint` carrying `payload` (any bytes, stored exactly).
    pub fn new(entrypoint: impl Into<String>, payload: impl Into<Vec<u8>>) -> NewJob {
        NewJob {
            payload: Some(payload.into()),
            ..NewJob::without_payload(entrypoint)
        }
    }

    /// A job for `entrypoint` with no payload (SQL NULL, Python's `None`).
    pub fn without_payload(entrypoint: impl Into<String>) -> NewJob {
        NewJob {
            entrypoint: entrypoint.into(),
            payload: None,
            priority: 0,
            execute_after: Duration::ZERO,
            dedupe_key: None,
            headers: None,
        }
    }

    /// Higher runs sooner. Defaults to 0.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> NewJob {
        self.priority = priority;
        self
    }

    /// The job becomes eligible this long after the enqueuing transaction's `now()`.
    /// Defaults to zero (at once).
    #[must_use]
    pub fn execute_after(mut self, delay: Duration) -> NewJob {
        self.execute_after = delay;
        self
    }

    /// While a job with this key is queued or picked, another with the same key is a
    /// conflict (see [`OnConflict`]). Defaults to none.
    #[must_use]
    pub fn dedupe_key(mut self, key: impl Into<String>) -> NewJob {
        self.dedupe_key = Some(key.into());
        self
    }

    /// Sets one header (a key of the headers object). Defaults to no headers. Has no
    /// effect after [`NewJob::headers`] set something other than an object, which is
    /// then reported when the job is enqueued.
    #[must_use]
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Value>) -> NewJob {
        if let Value::Object(map) = self
            .headers
            .get_or_insert_with(|| Value::Object(Default::default()))
        {
            map.insert(key.into(), value.into());
        }
        self
    }

    /// Replaces all headers with `headers`, which must be a JSON object (checked when
    /// enqueued). Defaults to no headers, stored as JSON `null` as Python does.
    #[must_use]
    pub fn headers(mut self, headers: Value) -> NewJob {
        self.headers = Some(headers);
        self
    }

    /// The bytes this job adds to a batch (see [`Queue::MAX_BATCH_BYTES`]), headers
    /// given as JSON text.
    fn batch_bytes(&self, headers_json: &str) -> usize {
        ROW_OVERHEAD_BYTES
            + self.entrypoint.len()
            + self.payload.as_ref().map_or(0, Vec::len)
            + self.dedupe_key.as_ref().map_or(0, String::len)
            + headers_json.len()
    }
}

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

impl OnConflict {
    fn conflict(self) -> Conflict {
        match self {
            OnConflict::Raise => Conflict::Raise,
            OnConflict::Skip => Conflict::Skip,
            OnConflict::UpdatePriority => Conflict::UpdatePriority,
        }
    }
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
/// connection out of the pool for its duration; the `_in` variants run on the caller's
/// client or transaction instead.
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
/// let maybe = queue.enqueue_with(NewJob::without_payload("report").dedupe_key("daily"), OnConflict::Skip)?;
///
/// // Inside your own transaction: the job exists only if the transaction commits.
/// let mut conn = pool.get()?;
/// let mut tx = conn.client().transaction()?;
/// queue.enqueue_in(&mut tx, NewJob::new("audit", b"order 7".to_vec()))?;
/// tx.commit()?;
///
/// let statuses = queue.wait_for(&ids, Duration::from_secs(30))?;
/// # let _ = (id, maybe, statuses);
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

/// A fixed per-row allowance for the array overhead of a batch row, counted against
/// [`Queue::MAX_BATCH_BYTES`].
const ROW_OVERHEAD_BYTES: usize = 64;

/// Ids per `cancellation_event`: PostgreSQL caps a NOTIFY payload at 8000 bytes, and 300
/// ids of at most 20 characters plus commas leave room for the rest of the event.
const CANCEL_IDS_PER_EVENT: usize = 300;

/// How often [`Queue::wait_for`] looks at the log when no notification wakes it.
const WAIT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest a pool checkout inside [`Queue::wait_for`] may wait, even when the
/// deadline is nearly reached (a final look is always taken).
const MIN_CHECKOUT_WAIT: Duration = Duration::from_millis(250);

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
        let ids = self.on_pool(Conflict::Raise, std::slice::from_ref(job.borrow()), true)?;
        all_ids(ids)?
            .pop()
            .ok_or_else(|| Error::Unexpected("no id for the enqueued job".into()))
    }

    /// Enqueues one job with a choice of what a held dedupe key does; `None` when it was
    /// skipped (see [`OnConflict`]).
    ///
    /// # Errors
    /// As [`Queue::enqueue`]; [`Error::DuplicateJob`] only with [`OnConflict::Raise`].
    pub fn enqueue_with(
        &self,
        job: impl Borrow<NewJob>,
        on_conflict: OnConflict,
    ) -> Result<Option<JobId>> {
        let ids = self.on_pool(
            on_conflict.conflict(),
            std::slice::from_ref(job.borrow()),
            true,
        )?;
        Ok(ids.into_iter().next().flatten())
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
        all_ids(self.on_pool(Conflict::Raise, jobs, false)?)
    }

    /// As [`Queue::enqueue_many`], on a connection the caller holds for many batches (a
    /// producer loop): no pool checkout per call, so no validity probe (a round trip as
    /// costly as a small batch), and the statement prepared once on that connection.
    /// Autocommit: use [`Queue::enqueue_many_in`] inside a transaction.
    ///
    /// # Errors
    /// As [`Queue::enqueue_many`], without [`Error::Pool`].
    pub fn enqueue_many_on(&self, conn: &mut Conn, jobs: &[NewJob]) -> Result<Vec<JobId>> {
        let columns = Columns::build(jobs, Conflict::Raise, false)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        all_ids(self.insert_prepared(conn, Conflict::Raise, jobs, &columns)?)
    }

    /// Enqueues a batch in one statement with a choice of what a held dedupe key does.
    /// The result has one entry per input job, in input order: its id, the held job's id
    /// ([`OnConflict::UpdatePriority`]), or `None` when skipped ([`OnConflict::Skip`]).
    ///
    /// # Errors
    /// As [`Queue::enqueue_many`]; with [`OnConflict::UpdatePriority`] a key repeated
    /// within the call is [`Error::InvalidInput`] naming it (nothing is sent).
    pub fn enqueue_many_with(
        &self,
        jobs: &[NewJob],
        on_conflict: OnConflict,
    ) -> Result<Vec<Option<JobId>>> {
        self.on_pool(on_conflict.conflict(), jobs, false)
    }

    /// Enqueues one job through `client`, typically the caller's open transaction: the job
    /// (and its NOTIFY) exists only if that transaction commits. Takes one round trip.
    ///
    /// A failure aborts the caller's transaction, as any failed statement does; use
    /// [`OnConflict::Skip`] or a savepoint where a duplicate is expected.
    ///
    /// # Errors
    /// As [`Queue::enqueue`], except that no pool is involved.
    pub fn enqueue_in<C: GenericClient>(
        &self,
        client: &mut C,
        job: impl Borrow<NewJob>,
    ) -> Result<JobId> {
        let ids = self.insert(
            client,
            Conflict::Raise,
            std::slice::from_ref(job.borrow()),
            true,
        )?;
        all_ids(ids)?
            .pop()
            .ok_or_else(|| Error::Unexpected("no id for the enqueued job".into()))
    }

    /// Enqueues a batch through `client` in one statement (see [`Queue::enqueue_in`]
    /// and [`Queue::enqueue_many`]).
    ///
    /// # Errors
    /// As [`Queue::enqueue_many`].
    pub fn enqueue_many_in<C: GenericClient>(
        &self,
        client: &mut C,
        jobs: &[NewJob],
    ) -> Result<Vec<JobId>> {
        all_ids(self.insert(client, Conflict::Raise, jobs, false)?)
    }

    /// Enqueues a batch through `client` with a choice of what a held dedupe key does
    /// (see [`Queue::enqueue_in`] and [`Queue::enqueue_many_with`]).
    ///
    /// # Errors
    /// As [`Queue::enqueue_many_with`].
    pub fn enqueue_many_with_in<C: GenericClient>(
        &self,
        client: &mut C,
        jobs: &[NewJob],
        on_conflict: OnConflict,
    ) -> Result<Vec<Option<JobId>>> {
        self.insert(client, on_conflict.conflict(), jobs, false)
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
        let mut conn = self.pool.get()?;
        let cancel = conn.prepare_cached(&self.sql.cancel)?;
        let notify = conn.prepare_cached(CHANNEL_NOTIFY_MANY)?;
        let mut tx = conn.client().transaction()?;
        let cancelled = ids_of(&tx.query(&cancel, &[&ids])?)?;
        if !cancelled.is_empty() {
            let payloads: Vec<String> = cancelled
                .chunks(CANCEL_IDS_PER_EVENT)
                .map(|chunk| {
                    Event::from(Cancellation::new(&self.sql.channel, chunk.to_vec())).to_json()
                })
                .collect();
            tx.execute(&notify, &[&self.sql.channel, &payloads])?;
        }
        tx.commit()?;
        Ok(cancelled)
    }

    /// How many jobs the queue table holds, per entrypoint, priority and status, ordered
    /// by entrypoint, then priority, then status.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn sizes(&self) -> Result<Vec<QueueSize>> {
        let mut conn = self.pool.get()?;
        let statement = conn.prepare_cached(&self.sql.count)?;
        conn.query(&statement, &[])?
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
        let statement = conn.prepare_cached(&self.sql.clear)?;
        Ok(conn.execute(&statement, &[&names])?)
    }

    /// Up to `limit` held (`failed`) jobs, oldest first, each with the failure that put
    /// it there (from its latest `failed` log row).
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn list_failed(&self, limit: usize) -> Result<Vec<FailedJob>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut conn = self.pool.get()?;
        let statement = conn.prepare_cached(&self.sql.select_failed)?;
        conn.query(&statement, &[&limit])?
            .iter()
            .map(|row| {
                let failure: Option<Value> = row.try_get("failure")?;
                Ok(FailedJob {
                    job: Job::from_row(row)?,
                    failure: failure.as_ref().and_then(crate::job::Failure::from_json),
                })
            })
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
        let mut conn = self.pool.get()?;
        let statement = conn.prepare_cached(&self.sql.log_select_job)?;
        conn.query(&statement, &[&id])?
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
        let mut conn = self.pool.get()?;
        let statement = conn.prepare_cached(&self.sql.select)?;
        conn.query(&statement, &[&ids])?
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
        let mut conn = self.pool.get()?;
        let requeue = conn.prepare_cached(&self.sql.requeue_failed)?;
        let notify = conn.prepare_cached(CHANNEL_NOTIFY_MANY)?;
        let mut tx = conn.client().transaction()?;
        let requeued = ids_of(&tx.query(&requeue, &[&ids])?)?;
        if !requeued.is_empty() {
            let wake = Event::from(TableChanged::new(
                &self.sql.channel,
                Operation::Update,
                &self.sql.queue_table,
            ))
            .to_json();
            tx.execute(&notify, &[&self.sql.channel, &vec![wake]])?;
        }
        tx.commit()?;
        Ok(requeued)
    }

    /// The latest logged status of each of `ids` (from the log table, so finished jobs
    /// are included). Ids never logged are absent from the map.
    ///
    /// # Errors
    /// [`Error::Pool`] or [`Error::Db`].
    pub fn job_statuses(&self, ids: &[JobId]) -> Result<HashMap<JobId, Status>> {
        self.job_statuses_within(ids, None)
    }

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
    /// # Errors
    /// [`Error::Timeout`] when `timeout` passes first; [`Error::Pool`] or [`Error::Db`]
    /// when the log cannot be read.
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
            for (id, status) in self.job_statuses_within(&wanted, Some(checkout))? {
                if status.is_terminal() {
                    pending.remove(&id);
                    finished.insert(id, status);
                }
            }
            if pending.is_empty() {
                return Ok(finished);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout(timeout));
            }
            listener.wait((now + WAIT_POLL_INTERVAL).min(deadline));
        }
    }

    fn job_statuses_within(
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
        let statement = conn.prepare_cached(&self.sql.log_select_latest)?;
        conn.query(&statement, &[&ids])?
            .iter()
            .map(|row| Ok((row.try_get::<_, JobId>("job_id")?, status_of(row)?)))
            .collect()
    }

    /// Enqueues on a pooled connection with the cached prepared statement.
    fn on_pool(
        &self,
        conflict: Conflict,
        jobs: &[NewJob],
        single: bool,
    ) -> Result<Vec<Option<JobId>>> {
        // Check the input before taking a connection.
        let columns = Columns::build(jobs, conflict, single)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.insert_prepared(&mut *self.pool.get()?, conflict, jobs, &columns)
    }

    /// Enqueues checked input on `conn` with its cached prepared statement.
    fn insert_prepared(
        &self,
        conn: &mut Conn,
        conflict: Conflict,
        jobs: &[NewJob],
        columns: &Columns<'_>,
    ) -> Result<Vec<Option<JobId>>> {
        let statement = conn.prepare_cached(self.sql.insert_many(conflict))?;
        self.run_insert(conn.client(), Some(&statement), conflict, jobs, columns)
    }

    /// Enqueues through the caller's client as a one-round-trip typed query (a caller's
    /// client has no statement cache to prepare into).
    fn insert<C: GenericClient>(
        &self,
        client: &mut C,
        conflict: Conflict,
        jobs: &[NewJob],
        single: bool,
    ) -> Result<Vec<Option<JobId>>> {
        let columns = Columns::build(jobs, conflict, single)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.run_insert(client, None, conflict, jobs, &columns)
    }

    /// Runs the insert with `statement` when given (prepared on `client`), else as a
    /// typed query, and puts each returned id at its input position.
    fn run_insert<C: GenericClient>(
        &self,
        client: &mut C,
        statement: Option<&Statement>,
        conflict: Conflict,
        jobs: &[NewJob],
        columns: &Columns<'_>,
    ) -> Result<Vec<Option<JobId>>> {
        let typed: [(&(dyn ToSql + Sync), Type); 6] = [
            (&columns.priorities, Type::INT4_ARRAY),
            (&columns.entrypoints, Type::TEXT_ARRAY),
            (&columns.payloads, Type::BYTEA_ARRAY),
            (&columns.delays_us, Type::INT8_ARRAY),
            (&columns.dedupe_keys, Type::TEXT_ARRAY),
            (&columns.headers, Type::TEXT_ARRAY),
        ];
        let rows = match statement {
            Some(statement) => {
                let params: Vec<&(dyn ToSql + Sync)> = typed.iter().map(|(p, _)| *p).collect();
                client.query(statement, &params)
            }
            None => client.query_typed(self.sql.insert_many(conflict), &typed),
        }
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

    /// A unique violation on the dedupe index is a duplicate job; anything else
    /// (including a unique violation on another index) is a database error.
    fn insert_error(&self, err: postgres::Error, jobs: &[NewJob]) -> Error {
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

/// The batch as the insert statement's parallel arrays, checked.
struct Columns<'a> {
    priorities: Vec<i32>,
    entrypoints: Vec<&'a str>,
    payloads: Vec<Option<&'a [u8]>>,
    delays_us: Vec<i64>,
    dedupe_keys: Vec<Option<&'a str>>,
    headers: Vec<String>,
}

impl<'a> Columns<'a> {
    /// Checks every job (see [`NewJob`]) and the batch size; `single` names fields
    /// without the `jobs[i].` prefix.
    fn build(jobs: &'a [NewJob], conflict: Conflict, single: bool) -> Result<Columns<'a>> {
        let field = |i: usize, name: &str| {
            if single {
                name.to_owned()
            } else {
                format!("jobs[{i}].{name}")
            }
        };
        let mut columns = Columns {
            priorities: Vec::with_capacity(jobs.len()),
            entrypoints: Vec::with_capacity(jobs.len()),
            payloads: Vec::with_capacity(jobs.len()),
            delays_us: Vec::with_capacity(jobs.len()),
            dedupe_keys: Vec::with_capacity(jobs.len()),
            headers: Vec::with_capacity(jobs.len()),
        };
        let mut first_seen: HashMap<&str, usize> = HashMap::new();
        let mut total = 0usize;
        for (i, job) in jobs.iter().enumerate() {
            check_text(
                &field(i, "entrypoint"),
                &job.entrypoint,
                NewJob::MAX_ENTRYPOINT_BYTES,
            )?;
            if let Some(key) = &job.dedupe_key {
                check_text(&field(i, "dedupe_key"), key, NewJob::MAX_DEDUPE_KEY_BYTES)?;
                if let Some(earlier) = first_seen.insert(key, i)
                    && conflict == Conflict::UpdatePriority
                {
                    return Err(Error::invalid(
                        field(i, "dedupe_key"),
                        format!(
                            "{key:?} also appears at position {earlier}; \
                             OnConflict::UpdatePriority needs each dedupe key at most once per call"
                        ),
                    ));
                }
            }
            if job.execute_after > NewJob::MAX_EXECUTE_AFTER {
                return Err(Error::invalid(
                    field(i, "execute_after"),
                    format!(
                        "{:?} is longer than the maximum delay of 10000 years",
                        job.execute_after
                    ),
                ));
            }
            let delay_us = i64::try_from(job.execute_after.as_micros()).map_err(|_| {
                Error::invalid(field(i, "execute_after"), "does not fit an interval")
            })?;
            let headers = match &job.headers {
                None => "null".to_owned(),
                Some(value @ Value::Object(_)) => {
                    if has_nul(value) {
                        return Err(Error::invalid(
                            field(i, "headers"),
                            "contains a NUL character, which jsonb cannot store",
                        ));
                    }
                    value.to_string()
                }
                Some(other) => {
                    return Err(Error::invalid(
                        field(i, "headers"),
                        format!("must be a JSON object, got {}", json_kind(other)),
                    ));
                }
            };
            let bytes = job.batch_bytes(&headers);
            if bytes > Queue::MAX_BATCH_BYTES {
                return Err(Error::invalid(
                    field(i, "payload"),
                    format!(
                        "the job carries {bytes} bytes (payload, headers, key and entrypoint), \
                         more than one enqueue call may carry ({} bytes)",
                        Queue::MAX_BATCH_BYTES
                    ),
                ));
            }
            total += bytes;
            if total > Queue::MAX_BATCH_BYTES {
                return Err(Error::invalid(
                    "jobs",
                    format!(
                        "the batch carries more than {} bytes by job {i}; split it into smaller batches",
                        Queue::MAX_BATCH_BYTES
                    ),
                ));
            }
            columns.priorities.push(job.priority);
            columns.entrypoints.push(&job.entrypoint);
            columns.payloads.push(job.payload.as_deref());
            columns.delays_us.push(delay_us);
            columns.dedupe_keys.push(job.dedupe_key.as_deref());
            columns.headers.push(headers);
        }
        Ok(columns)
    }
}

fn check_text(field: &str, value: &str, max_bytes: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > max_bytes {
        return Err(Error::invalid(
            field,
            format!("{} bytes is longer than {max_bytes} bytes", value.len()),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid(
            field,
            "contains a NUL character, which PostgreSQL text cannot store",
        ));
    }
    Ok(())
}

fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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

fn ids_of(rows: &[Row]) -> Result<Vec<JobId>> {
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// The LISTEN connection of one [`Queue::wait_for`] call. Without one (it could not be
/// opened, or failed) waiting degrades to sleeping until the next poll.
struct Listener {
    client: Option<Client>,
}

impl Listener {
    /// Opens a connection like the pool's and LISTENs on the channel; gives up (and
    /// logs why) rather than fail the wait.
    fn open(queue: &Queue, deadline: Instant) -> Listener {
        let budget = deadline.saturating_duration_since(Instant::now());
        let mut config = match queue.pool.get_timeout(budget.max(MIN_CHECKOUT_WAIT)) {
            Ok(conn) => conn.config().clone(),
            Err(e) => {
                log::warn!("pgqueuer wait_for: no connection to copy for LISTEN ({e}); polling");
                return Listener { client: None };
            }
        };
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(10))
            .min(budget.max(MIN_CHECKOUT_WAIT));
        config.connect_timeout(connect_timeout);
        let mut client = match config.connect(NoTls) {
            Ok(client) => client,
            Err(e) => {
                log::warn!(
                    "pgqueuer wait_for: cannot open a LISTEN connection ({}); polling",
                    chain(&e)
                );
                return Listener { client: None };
            }
        };
        if let Err(e) = client.batch_execute(&queue.sql.listen) {
            log::warn!("pgqueuer wait_for: LISTEN failed ({}); polling", chain(&e));
            drop_elsewhere(client);
            return Listener { client: None };
        }
        Listener {
            client: Some(client),
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

/// Closes `client` on a short-lived thread: dropping a `Client` waits for the server to
/// close the socket, which never happens on a black-holed connection.
fn drop_elsewhere(client: Client) {
    let spawned = std::thread::Builder::new()
        .name("pgqueuer-drop".into())
        .spawn(move || drop(client));
    if let Err(e) = spawned {
        log::warn!("pgqueuer: could not spawn a thread to close a connection: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(err: Error) -> String {
        match err {
            Error::InvalidInput { field, .. } => field,
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    fn check(jobs: &[NewJob], conflict: Conflict) -> Result<()> {
        Columns::build(jobs, conflict, jobs.len() == 1).map(|_| ())
    }

    #[test]
    fn each_bad_field_is_named() {
        let ok = || NewJob::new("ep", b"x".to_vec());
        let cases: [(NewJob, &str); 9] = [
            (NewJob::new("", b"x".to_vec()), "entrypoint"),
            (NewJob::new("e".repeat(256), b"x".to_vec()), "entrypoint"),
            (NewJob::new("a\0b", b"x".to_vec()), "entrypoint"),
            (ok().dedupe_key(""), "dedupe_key"),
            (ok().dedupe_key("k".repeat(1025)), "dedupe_key"),
            (ok().headers(serde_json::json!([1, 2])), "headers"),
            (ok().header("k", "nul\0inside"), "headers"),
            (ok().execute_after(Duration::MAX), "execute_after"),
            (
                ok().execute_after(NewJob::MAX_EXECUTE_AFTER + Duration::from_micros(1)),
                "execute_after",
            ),
        ];
        for (job, expected) in cases {
            let got = field_of(check(std::slice::from_ref(&job), Conflict::Raise).unwrap_err());
            assert_eq!(got, expected, "{job:?}");
        }
        assert!(
            check(
                &[ok().execute_after(NewJob::MAX_EXECUTE_AFTER)],
                Conflict::Raise
            )
            .is_ok()
        );
        assert!(check(&[NewJob::new("e".repeat(255), Vec::new())], Conflict::Raise).is_ok());
    }

    #[test]
    fn batch_fields_name_the_position() {
        let jobs = [NewJob::new("a", Vec::new()), NewJob::new("", Vec::new())];
        assert_eq!(
            field_of(check(&jobs, Conflict::Raise).unwrap_err()),
            "jobs[1].entrypoint"
        );
    }

    #[test]
    fn update_priority_rejects_a_repeated_key_others_do_not() {
        let jobs = [
            NewJob::new("a", Vec::new()).dedupe_key("k"),
            NewJob::new("b", Vec::new()),
            NewJob::new("c", Vec::new()).dedupe_key("k"),
        ];
        let err = check(&jobs, Conflict::UpdatePriority).unwrap_err();
        assert!(err.to_string().contains("position 0"), "{err}");
        assert_eq!(field_of(err), "jobs[2].dedupe_key");
        assert!(check(&jobs, Conflict::Skip).is_ok());
        assert!(check(&jobs, Conflict::Raise).is_ok());
    }

    #[test]
    fn a_batch_over_the_size_limit_is_rejected() {
        // Zeroed allocations are lazy, so this costs no real memory.
        let chunk = Queue::MAX_BATCH_BYTES / 4;
        let jobs: Vec<NewJob> = (0..5)
            .map(|_| NewJob::new("big", vec![0u8; chunk]))
            .collect();
        assert_eq!(field_of(check(&jobs, Conflict::Raise).unwrap_err()), "jobs");
        let one = NewJob::new("big", vec![0u8; Queue::MAX_BATCH_BYTES]);
        assert_eq!(
            field_of(check(&[one], Conflict::Raise).unwrap_err()),
            "payload"
        );
    }

    #[test]
    fn headers_default_to_json_null_and_builders_merge() {
        let jobs = [
            NewJob::without_payload("a"),
            NewJob::without_payload("b").header("x", 1).header("y", "z"),
        ];
        let columns = Columns::build(&jobs, Conflict::Raise, false).unwrap();
        assert_eq!(columns.headers, ["null", r#"{"x":1,"y":"z"}"#]);
        assert_eq!(columns.payloads, [None, None]);
    }

    #[test]
    fn delays_are_microseconds() {
        let jobs = [NewJob::without_payload("a").execute_after(Duration::new(3, 7_000))];
        let columns = Columns::build(&jobs, Conflict::Raise, true).unwrap();
        assert_eq!(columns.delays_us, [3_000_007]);
    }

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
