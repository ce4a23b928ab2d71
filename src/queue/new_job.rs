//! [`NewJob`]: a job to enqueue, and its checks. Every value is checked before any SQL
//! is sent, and a bad one is named (`entrypoint`, `jobs[3].dedupe_key`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{OnConflict, Queue};
use crate::error::{Error, Result};
use crate::job::{MAX_ENTRYPOINT_BYTES, check_entrypoint, check_text};
use crate::telemetry::Publish;

/// A fixed per-row allowance for the array overhead of a batch row, counted against
/// [`Queue::MAX_BATCH_BYTES`].
const ROW_OVERHEAD_BYTES: usize = 64;

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
/// - `headers`: a JSON object, nested at most [`NewJob::MAX_HEADERS_DEPTH`] levels, with
///   no NUL character in any key or string (jsonb refuses it);
/// - `execute_after`: at most [`NewJob::MAX_EXECUTE_AFTER`];
/// - `payload`: any bytes, within the batch limit [`Queue::MAX_BATCH_BYTES`].
#[derive(Clone, PartialEq)]
pub struct NewJob {
    entrypoint: String,
    payload: Option<Vec<u8>>,
    priority: i32,
    execute_after: Duration,
    pub(super) dedupe_key: Option<String>,
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
    pub const MAX_ENTRYPOINT_BYTES: usize = MAX_ENTRYPOINT_BYTES;

    /// The longest dedupe key accepted, in bytes (well under the B-tree entry limit of
    /// the unique index that enforces it).
    pub const MAX_DEDUPE_KEY_BYTES: usize = 1024;

    /// The longest delay accepted: 1,000 years, so that the due time stays far inside
    /// the range of Python's `datetime` (which ends with the year 9999), and PgQueuer's
    /// readers can read every row this crate writes.
    pub const MAX_EXECUTE_AFTER: Duration = crate::time::MAX_DELAY;

    /// The deepest nesting of arrays and objects accepted in headers, so that every
    /// reader can parse them (`serde_json` stops at 128 levels).
    pub const MAX_HEADERS_DEPTH: usize = crate::headers::MAX_HEADERS_DEPTH;

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
    pub(super) fn batch_bytes(&self, headers_json: &str) -> usize {
        ROW_OVERHEAD_BYTES
            + self.entrypoint.len()
            + self.payload.as_ref().map_or(0, Vec::len)
            + self.dedupe_key.as_ref().map_or(0, String::len)
            + headers_json.len()
    }
}

/// The batch as the insert statement's parallel arrays, checked.
pub(super) struct Columns<'a> {
    pub(super) priorities: Vec<i32>,
    pub(super) entrypoints: Vec<&'a str>,
    pub(super) payloads: Vec<Option<&'a [u8]>>,
    pub(super) delays_us: Vec<i64>,
    pub(super) dedupe_keys: Vec<Option<&'a str>>,
    /// Each job's headers as JSON text (`null` for none, not allocated per job).
    pub(super) headers: Vec<Cow<'static, str>>,
}

impl<'a> Columns<'a> {
    /// Checks every job (see [`NewJob`]) and the batch size; `single` names fields
    /// without the `jobs[i].` prefix.
    pub(super) fn build(
        jobs: &'a [NewJob],
        conflict: OnConflict,
        single: bool,
    ) -> Result<Columns<'a>> {
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
            // Named only when they fail: formatting each job's field names cost a quarter
            // of an enqueue's own instructions.
            check_entrypoint("entrypoint", &job.entrypoint)
                .map_err(|e| e.in_field(|| field(i, "entrypoint")))?;
            if let Some(key) = &job.dedupe_key {
                check_text("dedupe_key", key, NewJob::MAX_DEDUPE_KEY_BYTES)
                    .map_err(|e| e.in_field(|| field(i, "dedupe_key")))?;
                if let Some(earlier) = first_seen.insert(key, i)
                    && conflict == OnConflict::UpdatePriority
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
                        "{:?} is longer than the maximum delay of 1000 years (NewJob::MAX_EXECUTE_AFTER)",
                        job.execute_after
                    ),
                ));
            }
            let delay_us = i64::try_from(job.execute_after.as_micros()).map_err(|_| {
                Error::invalid(field(i, "execute_after"), "does not fit an interval")
            })?;
            let headers = match &job.headers {
                None => Cow::Borrowed("null"),
                Some(value @ Value::Object(_)) => {
                    crate::headers::check_new_headers(value)
                        .map_err(|why| Error::invalid(field(i, "headers"), why))?;
                    Cow::Owned(value.to_string())
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

impl Columns<'_> {
    /// Puts each job's trace carrier (see `telemetry`) in its headers under `otel`,
    /// over any `otel` header of its own, as PgQueuer merges them.
    pub(super) fn add_trace(&mut self, jobs: &[NewJob], publish: &Publish) {
        if publish.is_empty() {
            return;
        }
        for (i, job) in jobs.iter().enumerate() {
            if let Some(carrier) = publish.carrier(i) {
                let mut headers = match &job.headers {
                    Some(Value::Object(map)) => map.clone(),
                    _ => Map::new(),
                };
                headers.insert("otel".to_owned(), Value::Object(carrier.clone()));
                self.headers[i] = Cow::Owned(Value::Object(headers).to_string());
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(err: Error) -> String {
        match err {
            Error::InvalidInput { field, .. } => field,
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    fn check(jobs: &[NewJob], conflict: OnConflict) -> Result<()> {
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
            let got = field_of(check(std::slice::from_ref(&job), OnConflict::Raise).unwrap_err());
            assert_eq!(got, expected, "{job:?}");
        }
        assert!(
            check(
                &[ok().execute_after(NewJob::MAX_EXECUTE_AFTER)],
                OnConflict::Raise
            )
            .is_ok()
        );
        assert!(
            check(
                &[NewJob::new("e".repeat(255), Vec::new())],
                OnConflict::Raise
            )
            .is_ok()
        );
    }

    #[test]
    fn batch_fields_name_the_position() {
        let jobs = [NewJob::new("a", Vec::new()), NewJob::new("", Vec::new())];
        assert_eq!(
            field_of(check(&jobs, OnConflict::Raise).unwrap_err()),
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
        let err = check(&jobs, OnConflict::UpdatePriority).unwrap_err();
        assert!(err.to_string().contains("position 0"), "{err}");
        assert_eq!(field_of(err), "jobs[2].dedupe_key");
        assert!(check(&jobs, OnConflict::Skip).is_ok());
        assert!(check(&jobs, OnConflict::Raise).is_ok());
    }

    #[test]
    fn a_batch_over_the_size_limit_is_rejected() {
        // Zeroed allocations are lazy, so this costs no real memory.
        let chunk = Queue::MAX_BATCH_BYTES / 4;
        let jobs: Vec<NewJob> = (0..5)
            .map(|_| NewJob::new("big", vec![0u8; chunk]))
            .collect();
        assert_eq!(
            field_of(check(&jobs, OnConflict::Raise).unwrap_err()),
            "jobs"
        );
        let one = NewJob::new("big", vec![0u8; Queue::MAX_BATCH_BYTES]);
        assert_eq!(
            field_of(check(&[one], OnConflict::Raise).unwrap_err()),
            "payload"
        );
    }

    #[test]
    fn headers_default_to_json_null_and_builders_merge() {
        let jobs = [
            NewJob::without_payload("a"),
            NewJob::without_payload("b").header("x", 1).header("y", "z"),
        ];
        let columns = Columns::build(&jobs, OnConflict::Raise, false).unwrap();
        assert_eq!(columns.headers, ["null", r#"{"x":1,"y":"z"}"#]);
        assert_eq!(columns.payloads, [None, None]);
    }

    #[test]
    fn delays_are_microseconds() {
        let jobs = [NewJob::without_payload("a").execute_after(Duration::new(3, 7_000))];
        let columns = Columns::build(&jobs, OnConflict::Raise, true).unwrap();
        assert_eq!(columns.delays_us, [3_000_007]);
    }
}
