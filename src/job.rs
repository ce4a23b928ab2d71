//! Jobs: ids, statuses, stored rows and their log history.

use std::fmt;

use crate::headers::Headers;
use crate::payload::PayloadView;

/// A job's id (`pgqueuer.id`).
pub type JobId = i64;

/// The values of PgQueuer's status enum, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Waiting in the queue.
    Queued,
    /// Claimed by a worker.
    Picked,
    /// Finished without error (log only).
    Successful,
    /// Failed and deleted (log only).
    Exception,
    /// Cancelled (log only).
    Canceled,
    /// Removed by `clear` (log only).
    Deleted,
    /// Failed and held in the queue table for inspection and requeue.
    Failed,
}

impl Status {
    /// Every status, in the enum's order.
    pub const ALL: [Status; 7] = [
        Status::Queued,
        Status::Picked,
        Status::Successful,
        Status::Exception,
        Status::Canceled,
        Status::Deleted,
        Status::Failed,
    ];

    /// The label as stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Picked => "picked",
            Status::Successful => "successful",
            Status::Exception => "exception",
            Status::Canceled => "canceled",
            Status::Deleted => "deleted",
            Status::Failed => "failed",
        }
    }

    /// Parses a stored label.
    pub fn parse(label: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == label)
    }

    /// True for the statuses after which a job never runs again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Successful | Status::Exception | Status::Canceled | Status::Deleted
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job as stored in the queue table (a claimed row, or one read back for inspection).
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The job's id.
    pub id: JobId,
    /// Higher runs sooner.
    pub priority: i32,
    /// The worker that holds the job while it is picked.
    pub queue_manager_id: Option<uuid::Uuid>,
    /// When the job was enqueued.
    pub created: std::time::SystemTime,
    /// When the row last changed state.
    pub updated: std::time::SystemTime,
    /// The last heartbeat of the worker running it.
    pub heartbeat: std::time::SystemTime,
    /// The earliest time the job may run.
    pub execute_after: std::time::SystemTime,
    /// Its status in the queue table (`queued`, `picked` or `failed`).
    pub status: Status,
    /// The handler name.
    pub entrypoint: String,
    /// The deduplication key, if any.
    pub dedupe_key: Option<String>,
    /// The payload bytes, exactly as enqueued (`None` when enqueued without one).
    pub payload: Option<Vec<u8>>,
    /// Headers, as stored (any valid `jsonb`; see [`Headers`]). Python writes JSON `null`
    /// when there are none; both SQL NULL and JSON `null` read back as `None`.
    pub headers: Option<Headers>,
    /// How many times the job was requeued by a retry.
    pub attempts: i32,
    /// The capacity slot held while picked under a concurrency limit.
    pub slot: Option<i64>,
    /// Why some column of the row could not be read as stored, naming each (`dedupe_key:
    /// not valid UTF-8`, from a `SQL_ASCII` database, say); those fields hold what could
    /// be read. `None` for every row this crate or PgQueuer writes. A worker ends such a
    /// job as its entrypoint ends a failure (`exception`, or `failed` when held) without
    /// running its handler; inspection shows the rest of the row.
    pub unreadable: Option<String>,
}

impl Job {
    /// Reads a row returned with `sql::JOB_COLUMNS` (optionally prefixed by a table
    /// alias). Fails only when the row has no readable id; see [`Job::from_row_at`].
    pub(crate) fn from_row(row: &postgres::Row) -> crate::Result<Job> {
        Job::from_row_at(row, &JobColumns::of(row)?)
    }

    /// [`Job::from_row`] with the columns already found: a claim reads a batch of rows
    /// of one shape, and finding 14 columns by name again for each row cost more than
    /// reading them.
    ///
    /// A row written by another program is read whatever its columns hold: a value that
    /// cannot be read as its field's type (text that is not UTF-8 in a `SQL_ASCII`
    /// database, say) is read as near as it can be (text with replacement characters,
    /// else the field's zero) and named in [`Job::unreadable`]. Only an unreadable id
    /// fails: nothing could end such a job.
    pub(crate) fn from_row_at(row: &postgres::Row, at: &JobColumns) -> crate::Result<Job> {
        let mut read = ColumnReader {
            row,
            problems: Vec::new(),
        };
        let id: JobId = row.try_get(at.id)?;
        let status = read.text(at.status, "status");
        let status = parse_status(&status).unwrap_or_else(|e| {
            read.problems.push(format!("status: {e}"));
            Status::Picked
        });
        let headers = read
            .value::<crate::headers::StoredHeaders>(at.headers, "headers")
            .and_then(|h| h.0);
        let epoch = std::time::SystemTime::UNIX_EPOCH;
        let job = Job {
            id,
            priority: read.value(at.priority, "priority").unwrap_or(0),
            queue_manager_id: read
                .value(at.queue_manager_id, "queue_manager_id")
                .flatten(),
            created: read.value(at.created, "created").unwrap_or(epoch),
            updated: read.value(at.updated, "updated").unwrap_or(epoch),
            heartbeat: read.value(at.heartbeat, "heartbeat").unwrap_or(epoch),
            execute_after: read
                .value(at.execute_after, "execute_after")
                .unwrap_or(epoch),
            status,
            entrypoint: read.text(at.entrypoint, "entrypoint"),
            dedupe_key: read.optional_text(at.dedupe_key, "dedupe_key"),
            payload: read.value(at.payload, "payload").flatten(),
            headers,
            attempts: read.value(at.attempts, "attempts").unwrap_or(0),
            slot: read.value(at.slot, "slot").flatten(),
            unreadable: None,
        };
        Ok(Job {
            unreadable: (!read.problems.is_empty()).then(|| read.problems.join("; ")),
            ..job
        })
    }

    /// The OpenTelemetry trace context the job carries: the `otel` object of its headers,
    /// where PgQueuer's `OpenTelemetryTracing` (and this crate's `opentelemetry`
    /// feature) puts the W3C `traceparent` and `tracestate` of the span that enqueued it.
    /// `None` when there is none. With the feature off, this is how a handler continues
    /// the trace with a tracer of its own choosing.
    pub fn trace_carrier(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.headers.as_ref()?.get("otel")?.as_object()
    }

    /// The payload as UTF-8 text, if it is some and valid UTF-8.
    pub fn payload_str(&self) -> Option<&str> {
        self.payload
            .as_deref()
            .and_then(|p| std::str::from_utf8(p).ok())
    }

    /// The payload as people read it: text as it is, JSON pretty-printed, other bytes as
    /// a hex dump, bounded, with its size ([`PayloadView`]); `None` without a payload.
    pub fn payload_view(&self) -> Option<PayloadView> {
        self.payload.as_deref().map(PayloadView::of)
    }
}

/// Job ids to test membership in: sorted once, each test a binary search. A write ends
/// up to 500 jobs, and it matches them against what the database returned: a scan per id
/// is quadratic, and hashing each id costs more than a search of a few hundred.
pub(crate) struct IdSet(Vec<JobId>);

impl FromIterator<JobId> for IdSet {
    fn from_iter<I: IntoIterator<Item = JobId>>(ids: I) -> IdSet {
        let mut ids: Vec<JobId> = ids.into_iter().collect();
        ids.sort_unstable();
        IdSet(ids)
    }
}

impl IdSet {
    pub(crate) fn contains(&self, id: JobId) -> bool {
        self.0.binary_search(&id).is_ok()
    }
}

/// Where each of `sql::JOB_COLUMNS` is in a statement's rows, found by name once (the
/// column order of an upgraded table does not matter).
pub(crate) struct JobColumns {
    pub(crate) id: usize,
    priority: usize,
    queue_manager_id: usize,
    created: usize,
    updated: usize,
    heartbeat: usize,
    execute_after: usize,
    status: usize,
    entrypoint: usize,
    dedupe_key: usize,
    payload: usize,
    headers: usize,
    attempts: usize,
    slot: usize,
}

impl JobColumns {
    /// The columns of `row`'s statement; an error naming the first one missing.
    pub(crate) fn of(row: &postgres::Row) -> crate::Result<JobColumns> {
        let find = |name: &str| {
            row.columns()
                .iter()
                .position(|c| c.name() == name)
                .ok_or_else(|| {
                    crate::Error::Unexpected(format!("a job's row lacks the column {name:?}"))
                })
        };
        Ok(JobColumns {
            id: find("id")?,
            priority: find("priority")?,
            queue_manager_id: find("queue_manager_id")?,
            created: find("created")?,
            updated: find("updated")?,
            heartbeat: find("heartbeat")?,
            execute_after: find("execute_after")?,
            status: find("status")?,
            entrypoint: find("entrypoint")?,
            dedupe_key: find("dedupe_key")?,
            payload: find("payload")?,
            headers: find("headers")?,
            attempts: find("attempts")?,
            slot: find("slot")?,
        })
    }
}

/// One row of a job's log history (the log table keeps a row per transition, also after
/// the job has left the queue table).
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// The log row's id.
    pub id: i64,
    /// When the transition happened.
    pub created: std::time::SystemTime,
    /// The status the job entered.
    pub status: Status,
    /// The job's priority at the time.
    pub priority: i32,
    /// The job's entrypoint.
    pub entrypoint: String,
    /// The traceback JSON written with failures and retries (PgQueuer's
    /// `TracebackRecord`), as stored.
    pub traceback: Option<serde_json::Value>,
}

impl LogEntry {
    /// Reads a row of `log_select_job`.
    pub(crate) fn from_row(row: &postgres::Row) -> crate::Result<LogEntry> {
        Ok(LogEntry {
            id: row.try_get("id")?,
            created: row.try_get("created")?,
            status: status_of(row)?,
            priority: row.try_get("priority")?,
            entrypoint: row.try_get("entrypoint")?,
            traceback: row.try_get("traceback")?,
        })
    }

    /// The failure this row records, if its traceback has PgQueuer's shape.
    pub fn failure(&self) -> Option<Failure> {
        self.traceback.as_ref().and_then(Failure::from_json)
    }
}

/// A failure as PgQueuer's `TracebackRecord` describes it, read from a log row's
/// traceback (written by a Rust or a Python worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The error's type: a Python exception class, or for our workers the last segment of
    /// the Rust error type's name (`Panic` for a panic, `RetryRequested` for a retry).
    pub exception_type: String,
    /// The error's message.
    pub message: String,
    /// Python's formatted traceback, or our error's source chain.
    pub traceback: String,
}

impl Failure {
    /// Reads the `exception_type`, `exception_message` and `traceback` keys; `None` when
    /// `value` is not an object with a string `exception_type`.
    pub fn from_json(value: &serde_json::Value) -> Option<Failure> {
        let text = |key: &str| value.get(key).and_then(serde_json::Value::as_str);
        Some(Failure {
            exception_type: text("exception_type")?.to_owned(),
            message: text("exception_message").unwrap_or_default().to_owned(),
            traceback: text("traceback").unwrap_or_default().to_owned(),
        })
    }
}

impl fmt::Display for Failure {
    /// `Type: message`, or the type alone when there is no message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            f.write_str(&self.exception_type)
        } else {
            write!(f, "{}: {}", self.exception_type, self.message)
        }
    }
}

/// A held (`failed`) job with the failure that put it there (one row of
/// [`crate::Queue::list_failed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FailedJob {
    /// The held row.
    pub job: Job,
    /// From its latest `failed` log row; `None` when that row is gone (pruned) or has
    /// no traceback of PgQueuer's shape.
    pub failure: Option<Failure>,
}

impl FailedJob {
    /// A held job's row with its latest failure (the `failure` column of the held-jobs
    /// statement).
    pub(crate) fn from_row(row: &postgres::Row) -> crate::Result<FailedJob> {
        let failure: Option<serde_json::Value> = row.try_get("failure")?;
        Ok(FailedJob {
            job: Job::from_row(row)?,
            failure: failure.as_ref().and_then(Failure::from_json),
        })
    }
}

/// The most bytes an entrypoint name may have (it lives in B-tree indexes, whose entries
/// PostgreSQL caps at about 2.7 kB).
pub(crate) const MAX_ENTRYPOINT_BYTES: usize = 255;

/// Checks an entrypoint name wherever one comes in (enqueue, claim, worker, scheduler):
/// 1 to [`MAX_ENTRYPOINT_BYTES`] bytes and no NUL character, which PostgreSQL text cannot
/// store. `field` names it in the error (`entrypoint`, `jobs[3].entrypoint`).
pub(crate) fn check_entrypoint(field: &str, name: &str) -> crate::Result<()> {
    check_text(field, name, MAX_ENTRYPOINT_BYTES)
}

/// Checks a text value bound for a text column: not empty, at most `max_bytes`, no NUL.
pub(crate) fn check_text(field: &str, value: &str, max_bytes: usize) -> crate::Result<()> {
    if value.is_empty() {
        return Err(crate::Error::invalid(field, "must not be empty"));
    }
    if value.len() > max_bytes {
        return Err(crate::Error::invalid(
            field,
            format!("{} bytes is longer than {max_bytes} bytes", value.len()),
        ));
    }
    if value.contains('\0') {
        return Err(crate::Error::invalid(
            field,
            format!("{value:?} contains a NUL character, which PostgreSQL text cannot store"),
        ));
    }
    Ok(())
}

/// `text` as PostgreSQL can store it in `text` and `jsonb`: each NUL character, which
/// neither type accepts (`jsonb` refuses the escape `\u0000` with 22P05), written as the
/// six characters `\u0000`, and at most about `max_bytes` kept, ending with a note of
/// how many bytes were left out. Handler errors are written through this: nothing a
/// handler says can make an outcome unwritable, and nothing is dropped without a word.
pub(crate) fn storable_text(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max_bytes && !text.contains('\0') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut cut = text.len().min(max_bytes);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = text[..cut].replace('\0', "\\u0000");
    if cut < text.len() {
        out.push_str(&format!(
            " [... {} more bytes not stored]",
            text.len() - cut
        ));
    }
    std::borrow::Cow::Owned(out)
}

/// The `status` column of `row` (selected as text).
pub(crate) fn status_of(row: &postgres::Row) -> crate::Result<Status> {
    parse_status(&row.try_get::<_, String>("status")?)
}

/// Reads a job's columns one by one, keeping the problem of each that cannot be read
/// (see [`Job::from_row_at`]).
struct ColumnReader<'r> {
    row: &'r postgres::Row,
    problems: Vec<String>,
}

impl ColumnReader<'_> {
    /// The column's value, or `None` with the problem noted.
    fn value<T: for<'a> postgres::types::FromSql<'a>>(
        &mut self,
        at: usize,
        name: &str,
    ) -> Option<T> {
        match self.row.try_get::<_, T>(at) {
            Ok(value) => Some(value),
            Err(e) => {
                self.problems
                    .push(format!("{name}: {}", crate::error::chain(&e)));
                None
            }
        }
    }

    /// A text column, read with replacement characters where it is not UTF-8 (noted).
    fn text(&mut self, at: usize, name: &str) -> String {
        self.optional_text(at, name).unwrap_or_default()
    }

    /// A nullable text column, as [`ColumnReader::text`].
    fn optional_text(&mut self, at: usize, name: &str) -> Option<String> {
        let raw = self.value::<Option<LossyText>>(at, name).flatten()?;
        if raw.lossy {
            self.problems.push(format!(
                "{name}: not valid UTF-8 (read with replacement characters)"
            ));
        }
        Some(raw.text)
    }
}

/// A text value as its bytes allow: UTF-8 as is, anything else with replacement
/// characters (`lossy`). A `SQL_ASCII` database hands out whatever bytes were stored.
struct LossyText {
    text: String,
    lossy: bool,
}

impl<'a> postgres::types::FromSql<'a> for LossyText {
    fn from_sql(
        _: &postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<LossyText, Box<dyn std::error::Error + Sync + Send>> {
        Ok(match String::from_utf8_lossy(raw) {
            std::borrow::Cow::Borrowed(text) => LossyText {
                text: text.to_owned(),
                lossy: false,
            },
            std::borrow::Cow::Owned(text) => LossyText { text, lossy: true },
        })
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        <String as postgres::types::FromSql>::accepts(ty)
    }
}

/// A stored status label, or an error naming it.
pub(crate) fn parse_status(label: &str) -> crate::Result<Status> {
    Status::parse(label).ok_or_else(|| {
        crate::Error::Unexpected(format!("unknown job status {label:?} in the database"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_set_holds_what_it_was_made_of_in_any_order() {
        let set: IdSet = [9, 3, 7, 3, -1, 500].into_iter().collect();
        for id in [9, 3, 7, -1, 500] {
            assert!(set.contains(id), "{id}");
        }
        for id in [0, 2, 4, 8, 10, 499, 501, i64::MIN, i64::MAX] {
            assert!(!set.contains(id), "{id}");
        }
        let empty: IdSet = std::iter::empty().collect();
        assert!(!empty.contains(0));
    }
}
