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

use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::job::JobId;
use crate::time::{TimeStyle, format_time, now_micros, parse_time};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
