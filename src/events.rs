//! The NOTIFY payloads PgQueuer sends on its channel: parse and emit.
//!
//! Three kinds share the channel, told apart by their `"type"` field:
//!
//! - `table_changed_event`, sent by the queue table's statement trigger after an insert,
//!   delete or truncate. The trigger builds it with `json_build_object`, so its text has
//!   `" : "` between keys and values:
//!   `{"channel" : "ch_pgqueuer", "operation" : "insert", "sent_at" : "2026-11-29T19:18:00.820631+00:00", "table" : "pgqueuer", "type" : "table_changed_event"}`
//! - `cancellation_event`, sent when jobs are cancelled, compact as Python's pydantic
//!   writes it:
//!   `{"channel":"ch_pgqueuer","sent_at":"2026-11-29T19:18:23.097731Z","type":"cancellation_event","received_at":"2026-11-29T19:18:23.097764Z","ids":[1,2]}`
//! - `health_check_event`, a worker's probe of its own listener, compact, with the probe's
//!   UUID in `id`.
//!
//! [`Event::parse`] follows Python's receivers: the `type` must be one of the three, every
//! field of that kind must be present with the right JSON type, `sent_at` must carry a
//! UTC offset, `operation` must be `insert`, `update`, `delete` or `truncate`; extra keys
//! are ignored; a missing `received_at` is stamped with the time of parsing.
//! [`Event::to_json`] writes each kind exactly in the form above, so Python receivers
//! accept what this crate sends.
//!
//! Timestamps are kept to the microsecond, PostgreSQL's and Python's precision, so a
//! parsed event written again gives the same text.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::job::JobId;

/// One notification payload.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Rows of the queue table were inserted, deleted or truncated (or, from this crate's
    /// `Queue::requeue_failed`, updated).
    TableChanged(TableChanged),
    /// Jobs were cancelled: workers running them should stop.
    Cancellation(Cancellation),
    /// A worker's probe of its own LISTEN connection.
    HealthCheck(HealthCheck),
}

/// What the statement that fired a `table_changed_event` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `INSERT` (an enqueue).
    Insert,
    /// `UPDATE`. PgQueuer's trigger never sends it (a statement trigger sees no rows);
    /// this crate sends it after requeueing held jobs, to wake workers.
    Update,
    /// `DELETE` (a completion, cancellation or clear).
    Delete,
    /// `TRUNCATE`.
    Truncate,
}

impl Operation {
    /// The operation as the trigger writes it (`lower(TG_OP)`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Insert => "insert",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Truncate => "truncate",
        }
    }

    /// Parses `insert`, `update`, `delete` or `truncate` (exactly, as Python does).
    pub fn parse(text: &str) -> Option<Operation> {
        [
            Operation::Insert,
            Operation::Update,
            Operation::Delete,
            Operation::Truncate,
        ]
        .into_iter()
        .find(|op| op.as_str() == text)
    }
}

/// A `table_changed_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableChanged {
    /// The channel named in the payload.
    pub channel: String,
    /// What the statement did.
    pub operation: Operation,
    /// The sending transaction's `now()`.
    pub sent_at: SystemTime,
    /// The bare table name (never schema-qualified).
    pub table: String,
}

/// A `cancellation_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancellation {
    /// The channel named in the payload.
    pub channel: String,
    /// When the sender built the event (its own clock).
    pub sent_at: SystemTime,
    /// The payload's `received_at` (the sender's clock, an artefact of Python's event
    /// model), or the time of parsing when absent.
    pub received_at: SystemTime,
    /// The cancelled jobs.
    pub ids: Vec<JobId>,
}

/// A `health_check_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// The channel named in the payload.
    pub channel: String,
    /// When the sender built the event.
    pub sent_at: SystemTime,
    /// As [`Cancellation::received_at`].
    pub received_at: SystemTime,
    /// The probe's id: a worker waits for the echo of its own id and ignores others.
    pub id: uuid::Uuid,
}

impl TableChanged {
    /// An event for `operation` on `table`, sent now.
    pub fn new(channel: &str, operation: Operation, table: &str) -> TableChanged {
        TableChanged {
            channel: channel.to_owned(),
            operation,
            sent_at: now_micros(),
            table: table.to_owned(),
        }
    }
}

impl Cancellation {
    /// A cancellation of `ids`, sent now.
    pub fn new(channel: &str, ids: Vec<JobId>) -> Cancellation {
        let now = now_micros();
        Cancellation {
            channel: channel.to_owned(),
            sent_at: now,
            received_at: now,
            ids,
        }
    }
}

impl HealthCheck {
    /// A probe with a fresh random id, sent now.
    pub fn new(channel: &str) -> HealthCheck {
        let now = now_micros();
        HealthCheck {
            channel: channel.to_owned(),
            sent_at: now,
            received_at: now,
            id: uuid::Uuid::new_v4(),
        }
    }
}

impl From<TableChanged> for Event {
    fn from(e: TableChanged) -> Event {
        Event::TableChanged(e)
    }
}

impl From<Cancellation> for Event {
    fn from(e: Cancellation) -> Event {
        Event::Cancellation(e)
    }
}

impl From<HealthCheck> for Event {
    fn from(e: HealthCheck) -> Event {
        Event::HealthCheck(e)
    }
}

impl Event {
    /// The `type` string of this kind of event.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TableChanged(_) => "table_changed_event",
            Event::Cancellation(_) => "cancellation_event",
            Event::HealthCheck(_) => "health_check_event",
        }
    }

    /// The channel named in the payload.
    pub fn channel(&self) -> &str {
        match self {
            Event::TableChanged(e) => &e.channel,
            Event::Cancellation(e) => &e.channel,
            Event::HealthCheck(e) => &e.channel,
        }
    }

    /// When the event was sent.
    pub fn sent_at(&self) -> SystemTime {
        match self {
            Event::TableChanged(e) => e.sent_at,
            Event::Cancellation(e) => e.sent_at,
            Event::HealthCheck(e) => e.sent_at,
        }
    }

    /// Parses a notification payload (see the [module docs](self) for the rules).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the offending field (`event.type`, `event.sent_at`,
    /// `event.ids`...) when the payload is not JSON, not an object, of an unknown type, or
    /// lacks a field or has one of the wrong form.
    pub fn parse(payload: &str) -> Result<Event> {
        let value: Value = serde_json::from_str(payload)
            .map_err(|e| Error::invalid("event", format!("not JSON ({e}): {payload:?}")))?;
        let Value::Object(fields) = value else {
            return Err(Error::invalid("event", "not a JSON object"));
        };
        let kind = string_field(&fields, "type")?;
        let channel = string_field(&fields, "channel")?.to_owned();
        let sent_at = time_field(&fields, "sent_at")?;
        let received_at = || -> Result<SystemTime> {
            match fields.get("received_at") {
                None => Ok(now_micros()),
                Some(_) => time_field(&fields, "received_at"),
            }
        };
        match kind {
            "table_changed_event" => {
                let operation = string_field(&fields, "operation")?;
                let operation = Operation::parse(operation).ok_or_else(|| {
                    Error::invalid(
                        "event.operation",
                        format!("{operation:?} is not insert, update, delete or truncate"),
                    )
                })?;
                Ok(Event::TableChanged(TableChanged {
                    channel,
                    operation,
                    sent_at,
                    table: string_field(&fields, "table")?.to_owned(),
                }))
            }
            "cancellation_event" => {
                let ids = match fields.get("ids") {
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|v| {
                            v.as_i64().ok_or_else(|| {
                                Error::invalid("event.ids", format!("{v} is not a job id"))
                            })
                        })
                        .collect::<Result<Vec<JobId>>>()?,
                    Some(other) => {
                        return Err(Error::invalid(
                            "event.ids",
                            format!("expected an array of job ids, got {other}"),
                        ));
                    }
                    None => return Err(missing("ids")),
                };
                Ok(Event::Cancellation(Cancellation {
                    channel,
                    sent_at,
                    received_at: received_at()?,
                    ids,
                }))
            }
            "health_check_event" => {
                let id = string_field(&fields, "id")?;
                let id = uuid::Uuid::parse_str(id)
                    .map_err(|e| Error::invalid("event.id", format!("{id:?}: {e}")))?;
                Ok(Event::HealthCheck(HealthCheck {
                    channel,
                    sent_at,
                    received_at: received_at()?,
                    id,
                }))
            }
            other => Err(Error::invalid(
                "event.type",
                format!(
                    "unknown event type {other:?} (expected table_changed_event, \
                     cancellation_event or health_check_event)"
                ),
            )),
        }
    }

    /// The payload text, as PgQueuer writes this kind: the trigger's `json_build_object`
    /// form for `table_changed_event` (`sent_at` in UTC with `+00:00`), Python's compact
    /// form with `Z` times for the other two.
    pub fn to_json(&self) -> String {
        match self {
            Event::TableChanged(e) => format!(
                "{{\"channel\" : {}, \"operation\" : \"{}\", \"sent_at\" : \"{}\", \"table\" : {}, \"type\" : \"table_changed_event\"}}",
                json_string(&e.channel),
                e.operation.as_str(),
                format_time(e.sent_at, TimeStyle::Postgres),
                json_string(&e.table),
            ),
            Event::Cancellation(e) => {
                let ids = e
                    .ids
                    .iter()
                    .map(JobId::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                format!(
                    "{{\"channel\":{},\"sent_at\":\"{}\",\"type\":\"cancellation_event\",\"received_at\":\"{}\",\"ids\":[{ids}]}}",
                    json_string(&e.channel),
                    format_time(e.sent_at, TimeStyle::Python),
                    format_time(e.received_at, TimeStyle::Python),
                )
            }
            Event::HealthCheck(e) => format!(
                "{{\"channel\":{},\"sent_at\":\"{}\",\"type\":\"health_check_event\",\"received_at\":\"{}\",\"id\":\"{}\"}}",
                json_string(&e.channel),
                format_time(e.sent_at, TimeStyle::Python),
                format_time(e.received_at, TimeStyle::Python),
                e.id.hyphenated(),
            ),
        }
    }
}

fn missing(key: &str) -> Error {
    Error::invalid(format!("event.{key}"), "missing")
}

fn string_field<'a>(fields: &'a Map<String, Value>, key: &str) -> Result<&'a str> {
    match fields.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(Error::invalid(
            format!("event.{key}"),
            format!("expected a string, got {other}"),
        )),
        None => Err(missing(key)),
    }
}

fn time_field(fields: &Map<String, Value>, key: &str) -> Result<SystemTime> {
    let text = string_field(fields, key)?;
    parse_time(text)
        .map_err(|why| Error::invalid(format!("event.{key}"), format!("{text:?}: {why}")))
}

fn json_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// The current time, truncated to the microsecond.
fn now_micros() -> SystemTime {
    let now = SystemTime::now();
    match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => SystemTime::UNIX_EPOCH + Duration::new(d.as_secs(), d.subsec_micros() * 1000),
        Err(_) => now,
    }
}

/// `t` in UTC as Python's pydantic writes an aware datetime in JSON
/// (`2026-11-29T19:18:23.097731Z`; no fraction when it is zero).
pub(crate) fn python_time(t: SystemTime) -> String {
    format_time(t, TimeStyle::Python)
}

/// How a timestamp is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeStyle {
    /// PostgreSQL's JSON rendering of a timestamptz in a UTC session: fraction without
    /// trailing zeros (none when zero), `+00:00`.
    Postgres,
    /// Python pydantic's: six fraction digits (none when zero), `Z`.
    Python,
}

const SECS_PER_DAY: i64 = 86_400;

/// Writes `t` (truncated to the microsecond) in UTC.
pub(crate) fn format_time(t: SystemTime, style: TimeStyle) -> String {
    let (secs, micros) = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_micros(),
        ),
        Err(e) => {
            // Before 1970: step back to the whole second at or before `t`.
            let d = e.duration();
            let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            match d.subsec_micros() {
                0 => (-whole, 0),
                us => (-whole - 1, 1_000_000 - us),
            }
        }
    };
    let days = secs.div_euclid(SECS_PER_DAY);
    let rem = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    if micros != 0 {
        let fraction = format!("{micros:06}");
        out.push('.');
        out.push_str(match style {
            TimeStyle::Postgres => fraction.trim_end_matches('0'),
            TimeStyle::Python => &fraction,
        });
    }
    out.push_str(match style {
        TimeStyle::Postgres => "+00:00",
        TimeStyle::Python => "Z",
    });
    out
}

/// Parses an ISO-8601 timestamp that carries a UTC offset:
/// `YYYY-MM-DD[T ]HH:MM:SS[.fraction](Z|±HH[:MM[:SS]]|±HHMM)`. A naive (offset-less)
/// time is rejected, as Python's receivers reject it.
fn parse_time(text: &str) -> Result<SystemTime, String> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = b.get(range).ok_or("too short")?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err("expected digits".to_owned());
        }
        Ok(part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let expect = |at: usize, what: &[u8]| -> Result<(), String> {
        match b.get(at) {
            Some(c) if what.contains(c) => Ok(()),
            _ => Err(format!("expected {:?} at byte {at}", what[0] as char)),
        }
    };
    let year = digits(0..4)?;
    expect(4, b"-")?;
    let month = digits(5..7)?;
    expect(7, b"-")?;
    let day = digits(8..10)?;
    expect(10, b"Tt ")?;
    let hour = digits(11..13)?;
    expect(13, b":")?;
    let minute = digits(14..16)?;
    expect(16, b":")?;
    let second = digits(17..19)?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err("date or time out of range".into());
    }
    let mut at = 19;
    let mut nanos = 0u32;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return Err("empty fraction".into());
        }
        for (i, d) in b[start..at].iter().take(9).enumerate() {
            let place = 10u32.pow(8 - u32::try_from(i).unwrap_or(8));
            nanos += u32::from(d - b'0') * place;
        }
    }
    let offset_secs = match b.get(at) {
        Some(b'Z' | b'z') if at + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let rest = &text[at + 1..];
            let parts: Vec<&str> = if rest.contains(':') {
                rest.split(':').collect()
            } else if rest.len() == 4 {
                vec![&rest[..2], &rest[2..]]
            } else {
                vec![rest]
            };
            if parts.is_empty()
                || parts.len() > 3
                || parts
                    .iter()
                    .any(|p| p.len() != 2 || !p.bytes().all(|c| c.is_ascii_digit()))
            {
                return Err("malformed UTC offset".into());
            }
            let mut secs = 0i64;
            for (part, unit) in parts.iter().zip([3600, 60, 1]) {
                secs += part.parse::<i64>().map_err(|e| e.to_string())? * unit;
            }
            if sign == b'-' { -secs } else { secs }
        }
        None => return Err("no UTC offset (a naive time is not accepted)".into()),
        Some(_) => return Err(format!("unexpected text after the time at byte {at}")),
    };
    let days = days_from_civil(year, month, day);
    let secs = days * SECS_PER_DAY + hour * 3600 + minute * 60 + second - offset_secs;
    let micros_only = Duration::from_micros(u64::from(nanos / 1000));
    Ok(if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs()) + micros_only
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + micros_only
    })
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The payload texts of the compatibility spec (§2.8), byte for byte.
    const TABLE_CHANGED: &str = r#"{"channel" : "ch_pgqueuer", "operation" : "insert", "sent_at" : "2026-11-29T19:18:00.820631+00:00", "table" : "pgqueuer", "type" : "table_changed_event"}"#;
    const CANCELLATION: &str = r#"{"channel":"ch_pgqueuer","sent_at":"2026-11-29T19:18:23.097731Z","type":"cancellation_event","received_at":"2026-11-29T19:18:23.097764Z","ids":[1,2]}"#;
    const HEALTH_CHECK: &str = r#"{"channel":"ch_pgqueuer","sent_at":"2026-11-29T19:18:23.097731Z","type":"health_check_event","received_at":"2026-11-29T19:18:23.097764Z","id":"2a011d90-4e46-441f-9dd9-196e2ff22b02"}"#;

    fn at(text: &str) -> SystemTime {
        parse_time(text).unwrap()
    }

    #[test]
    fn table_changed_event_from_the_trigger() {
        let Event::TableChanged(e) = Event::parse(TABLE_CHANGED).unwrap() else {
            panic!("wrong kind");
        };
        assert_eq!(e.channel, "ch_pgqueuer");
        assert_eq!(e.operation, Operation::Insert);
        assert_eq!(e.table, "pgqueuer");
        let since = e.sent_at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(since.subsec_micros(), 820_631);
        assert_eq!(
            e.sent_at,
            SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_979_880_820_631)
        );
        assert_eq!(Event::TableChanged(e).to_json(), TABLE_CHANGED);
    }

    #[test]
    fn cancellation_event_round_trips_exactly() {
        let event = Event::parse(CANCELLATION).unwrap();
        let Event::Cancellation(c) = &event else {
            panic!("wrong kind");
        };
        assert_eq!(c.ids, vec![1, 2]);
        assert_eq!(c.sent_at, at("2026-11-29T19:18:23.097731Z"));
        assert_eq!(c.received_at, at("2026-11-29T19:18:23.097764Z"));
        assert_eq!(event.kind(), "cancellation_event");
        assert_eq!(event.to_json(), CANCELLATION);
    }

    #[test]
    fn health_check_event_round_trips_exactly() {
        let event = Event::parse(HEALTH_CHECK).unwrap();
        let Event::HealthCheck(h) = &event else {
            panic!("wrong kind");
        };
        assert_eq!(h.id.to_string(), "2a011d90-4e46-441f-9dd9-196e2ff22b02");
        assert_eq!(event.to_json(), HEALTH_CHECK);
    }

    #[test]
    fn emitted_events_have_exactly_pythons_fields() {
        let keys = |json: &str| -> Vec<String> {
            let Value::Object(m) = serde_json::from_str(json).unwrap() else {
                panic!("not an object");
            };
            let mut k: Vec<String> = m.keys().cloned().collect();
            k.sort();
            k
        };
        let c = Event::from(Cancellation::new("ch_pgqueuer", vec![7, 9])).to_json();
        assert_eq!(
            keys(&c),
            ["channel", "ids", "received_at", "sent_at", "type"]
        );
        assert_eq!(keys(&c), keys(CANCELLATION));
        let h = Event::from(HealthCheck::new("ch_pgqueuer")).to_json();
        assert_eq!(keys(&h), keys(HEALTH_CHECK));
        let t = Event::from(TableChanged::new(
            "ch_pgqueuer",
            Operation::Update,
            "pgqueuer",
        ));
        assert_eq!(keys(&t.to_json()), keys(TABLE_CHANGED));
        // What we send parses back to the same event.
        for json in [c, h, t.to_json()] {
            assert_eq!(Event::parse(&json).unwrap().to_json(), json);
        }
    }

    #[test]
    fn times_keep_their_offsets_and_precision() {
        // PostgreSQL in another session TimeZone, and its trimmed fractions.
        assert_eq!(
            at("2026-11-29T20:18:00.82063+01:00"),
            at("2026-11-29T19:18:00.820630Z")
        );
        assert_eq!(at("2026-11-29T14:48:00-04:30"), at("2026-11-29T19:18:00Z"));
        assert_eq!(at("2026-11-29T19:18:00+0000"), at("2026-11-29T19:18:00Z"));
        assert_eq!(at("2026-11-29 19:18:00+00"), at("2026-11-29T19:18:00Z"));
        assert_eq!(
            at("1969-12-31T23:59:59.5Z"),
            SystemTime::UNIX_EPOCH - Duration::from_millis(500)
        );
        let t = at("2024-02-29T00:00:00.000001Z");
        assert_eq!(
            format_time(t, TimeStyle::Python),
            "2024-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            format_time(t, TimeStyle::Postgres),
            "2024-02-29T00:00:00.000001+00:00"
        );
        let whole = at("2026-11-29T19:18:00Z");
        assert_eq!(
            format_time(whole, TimeStyle::Python),
            "2026-11-29T19:18:00Z"
        );
        assert_eq!(
            format_time(whole, TimeStyle::Postgres),
            "2026-11-29T19:18:00+00:00"
        );
        let before = at("1969-12-31T23:59:59.25Z");
        assert_eq!(
            format_time(before, TimeStyle::Postgres),
            "1969-12-31T23:59:59.25+00:00"
        );
    }

    #[test]
    fn naive_and_malformed_times_are_rejected() {
        for bad in [
            "2026-11-29T19:18:00.820631",
            "2026-11-29T19:18:00",
            "2026-11-29",
            "2026-02-30T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T19:18:00.Z",
            "2026-11-29T19:18:00+1",
            "2026-11-29T19:18:00Zjunk",
            "",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn invalid_payloads_name_the_field() {
        let field = |payload: &str| match Event::parse(payload).unwrap_err() {
            Error::InvalidInput { field, .. } => field,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(field("not json"), "event");
        assert_eq!(field("[1]"), "event");
        assert_eq!(
            field(&TABLE_CHANGED.replace("table_changed_event", "rps_event")),
            "event.type"
        );
        assert_eq!(
            field(&TABLE_CHANGED.replace("\"insert\"", "\"merge\"")),
            "event.operation"
        );
        assert_eq!(field(&TABLE_CHANGED.replace("+00:00", "")), "event.sent_at");
        assert_eq!(
            field(&CANCELLATION.replace("[1,2]", "[1,\"x\"]")),
            "event.ids"
        );
        assert_eq!(
            field(&CANCELLATION.replace(",\"ids\":[1,2]", "")),
            "event.ids"
        );
        assert_eq!(field(&HEALTH_CHECK.replace("2a011d90", "zz")), "event.id");
        assert_eq!(
            field(r#"{"type":"cancellation_event","ids":[]}"#),
            "event.channel"
        );
    }

    #[test]
    fn extra_keys_are_ignored_and_received_at_is_optional() {
        let before = now_micros();
        let payload = r#"{"channel":"c","sent_at":"2026-11-29T19:18:23Z","type":"cancellation_event","ids":[3],"extra":true}"#;
        let Event::Cancellation(c) = Event::parse(payload).unwrap() else {
            panic!("wrong kind");
        };
        assert_eq!(c.ids, vec![3]);
        assert!(c.received_at >= before);
    }

    #[test]
    fn calendar_conversions_agree() {
        for days in [-719_468, -1, 0, 1, 11_016, 20_786, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
    }
}
