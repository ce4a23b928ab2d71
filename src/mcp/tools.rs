//! The MCP tools: PgQueuer 1.6.0's eleven, with its names, arguments, defaults and
//! result fields, and ours. A tool's rows come back as PgQueuer's server sends them: one
//! text item of pretty JSON per row, and `structuredContent` `{"result": [rows]}`.
//!
//! Differences from PgQueuer, on purpose:
//! - `queue_stats` and `throughput_summary` count the log rows not yet folded into the
//!   statistics, without folding them (PgQueuer's `queue_stats` writes first;
//!   `throughput_summary` misses them). `queue_stats` orders by bucket, newest first
//!   (PgQueuer's by insertion into the statistics table).
//! - `queue_table_info` returns at most [`PAYLOAD_SHOWN`] bytes of a payload, and a
//!   payload that is not UTF-8 as PostgreSQL's `\x` hex text (PgQueuer fails the whole
//!   call on one), with `payload_bytes`, the whole size.
//! - An answer is bounded: each traceback, headers text or dedupe key to
//!   `sql::mcp::FIELD_SHOWN` characters (with a note of what was left out), the rows to
//!   [`MAX_ANSWER_BYTES`] (a last text item says how many more there were).
//! - A `limit` is bounded to [`MAX_ROWS`]; a negative `limit` or `offset`, a malformed
//!   period or an unknown tool is a JSON-RPC error naming the argument (PgQueuer answers
//!   with an error result).

use std::time::{Duration, SystemTime};

use postgres::Row;
use postgres::types::{FromSql, Type};
use serde_json::{Map, Value, json};

use super::RpcError;
use crate::connect::{Param, Pool, query_alone};
use crate::settings::Settings;
use crate::sql::{mcp as sql, ops as ops_sql};
use crate::time::{TimeStyle, format_time, parse_iso_period};

/// The most rows one call returns.
pub(super) const MAX_ROWS: i64 = 1_000;
/// The most bytes of rows one answer carries (each row is sent twice: as a text item and
/// in `structuredContent`); the rows past it are left out, and a last text item says how
/// many. Each text value of a row is cut to `sql::mcp::FIELD_SHOWN` characters already.
pub(super) const MAX_ANSWER_BYTES: usize = 1 << 20;
/// The most bytes of a payload `queue_table_info` returns.
pub(super) const PAYLOAD_SHOWN: i32 = 4_096;
/// The prompt's name.
pub(super) const GUIDE_NAME: &str = "pgqueuer_guide";

/// One argument of a tool.
struct Arg {
    name: &'static str,
    kind: Kind,
    about: &'static str,
}

#[derive(Clone, Copy)]
enum Kind {
    /// An integer with a default.
    Int(i64),
    /// An ISO-8601 period, optional (`None`: all of it).
    Period(Option<&'static str>),
    /// A string, optional.
    Text,
    /// `{"entrypoint": limit, ...}`, optional.
    Limits,
}

struct Tool {
    name: &'static str,
    about: &'static str,
    args: &'static [Arg],
    /// True for tools returning one object rather than rows.
    object: bool,
}

const LIMIT_50: Arg = Arg {
    name: "limit",
    kind: Kind::Int(50),
    about: "Most rows to return.",
};
const LIMIT_100: Arg = Arg {
    name: "limit",
    kind: Kind::Int(100),
    about: "Most rows to return.",
};
const PERIOD: Arg = Arg {
    name: "period",
    kind: Kind::Period(None),
    about: "How far back, as an ISO-8601 duration (PT1H, P7D); all history when left out.",
};

const TOOLS: &[Tool] = &[
    Tool {
        name: "queue_size",
        about: "Jobs in the queue table per entrypoint, priority and status (queued, \
                picked, failed): the first look at a queue. Fields: count, entrypoint, \
                priority, status.",
        args: &[],
        object: false,
    },
    Tool {
        name: "queue_table_info",
        about: "The queue table's rows, highest priority first, then oldest: id, priority, \
                queue_manager_id, created, updated, heartbeat, execute_after, status, \
                entrypoint, dedupe_key, payload (its first 4096 bytes, as text), \
                payload_bytes, headers (JSON text), attempts, slot.",
        args: &[
            LIMIT_100,
            Arg {
                name: "offset",
                kind: Kind::Int(0),
                about: "Rows to skip first, for paging.",
            },
        ],
        object: false,
    },
    Tool {
        name: "queue_stats",
        about: "Transitions per second, per entrypoint, priority and status, newest first: \
                count, created (the second), entrypoint, priority, status. Log rows not yet \
                folded into the statistics are counted without folding them (nothing is \
                written).",
        args: &[PERIOD, LIMIT_50],
        object: false,
    },
    Tool {
        name: "throughput_summary",
        about: "Total transitions per entrypoint and status over the period: entrypoint, \
                status, total_count (text, as PgQueuer sends it).",
        args: &[PERIOD],
        object: false,
    },
    Tool {
        name: "failed_jobs",
        about: "The newest log rows of jobs that ended in an exception, with their \
                traceback (JSON text: job_id, timestamp, exception_type, \
                exception_message, traceback, additional_context): id, created, job_id, \
                status, priority, entrypoint, traceback, aggregated.",
        args: &[LIMIT_50],
        object: false,
    },
    Tool {
        name: "queue_log",
        about: "The newest log rows, one per transition of a job (queued, picked, and its \
                outcome): id, created, job_id, status, priority, entrypoint, traceback, \
                aggregated.",
        args: &[LIMIT_100],
        object: false,
    },
    Tool {
        name: "schedules",
        about: "The cron schedules: id, expression, heartbeat, created, updated, next_run, \
                last_run, status, entrypoint.",
        args: &[],
        object: false,
    },
    Tool {
        name: "stale_jobs",
        about: "Picked jobs whose heartbeat is older than the threshold (their workers are \
                presumed dead), stalest first: id, priority, queue_manager_id, created, \
                updated, heartbeat, execute_after, status, entrypoint, \
                seconds_since_heartbeat.",
        args: &[
            Arg {
                name: "threshold",
                kind: Kind::Period(Some("PT5M")),
                about: "A heartbeat older than this is stale (ISO-8601, default PT5M).",
            },
            LIMIT_50,
        ],
        object: false,
    },
    Tool {
        name: "active_workers",
        about: "Workers holding picked jobs: queue_manager_id, active_jobs, \
                oldest_heartbeat, newest_heartbeat, entrypoints.",
        args: &[],
        object: false,
    },
    Tool {
        name: "queue_age",
        about: "Per entrypoint with queued jobs: queued_count, oldest_created, \
                oldest_age_seconds, avg_age_seconds. A growing oldest age is a backlog.",
        args: &[],
        object: false,
    },
    Tool {
        name: "schema_info",
        about: "The queue's tables: table_name, persistence (LOGGED or UNLOGGED), \
                estimated_rows (the planner's), total_size.",
        args: &[],
        object: false,
    },
    Tool {
        name: "explain_job",
        about: "Why a job is not running (or is, or has ended), in words and as data: \
                unknown, finished, held as failed, deferred, running, stale, or waiting \
                behind other jobs or the workers holding its entrypoint's slots.",
        args: &[
            Arg {
                name: "job_id",
                kind: Kind::Int(0),
                about: "The job's id.",
            },
            Arg {
                name: "heartbeat_timeout",
                kind: Kind::Period(Some("PT30S")),
                about: "The workers' heartbeat timeout (ISO-8601, default PT30S).",
            },
        ],
        object: true,
    },
    Tool {
        name: "limits",
        about: "Concurrency slots in use per entrypoint with picked jobs, against the \
                limits given: held, highest, unslotted, implied_limit (the least limit the \
                holder of the highest slot declares), declared_limit, over_declared.",
        args: &[Arg {
            name: "declared",
            kind: Kind::Limits,
            about: "The limits your workers declare, {\"entrypoint\": N}.",
        }],
        object: false,
    },
    Tool {
        name: "limit_audit",
        about: "From the log: the most jobs of each entrypoint picked at once over the \
                period, swept in the order the log was written (peak), and by its clock \
                (clock_peak), with the runs seen and the highest slot held now.",
        args: &[
            Arg {
                name: "period",
                kind: Kind::Period(Some("PT1H")),
                about: "How far back (ISO-8601, default PT1H).",
            },
            Arg {
                name: "entrypoint",
                kind: Kind::Text,
                about: "Only this entrypoint.",
            },
        ],
        object: false,
    },
    Tool {
        name: "health",
        about: "One verdict, OK, DEGRADED or STALLED, with its reasons, from the database \
                alone: due work waiting while nothing is picked or finished (STALLED), \
                stale picked jobs, a backlog growing faster than throughput, held \
                failures, slots above a declared limit (DEGRADED), a schema workers would \
                refuse (STALLED).",
        args: &[
            Arg {
                name: "stall_after",
                kind: Kind::Period(Some("PT1M")),
                about: "Due work that waited this long with no progress is a stall.",
            },
            Arg {
                name: "stale_after",
                kind: Kind::Period(Some("PT30S")),
                about: "A heartbeat older than this is stale.",
            },
            Arg {
                name: "window",
                kind: Kind::Period(Some("PT5M")),
                about: "Arrivals and completions are compared over this window.",
            },
            Arg {
                name: "declared",
                kind: Kind::Limits,
                about: "The limits your workers declare, {\"entrypoint\": N}.",
            },
        ],
        object: true,
    },
];

/// `tools/list`'s tools.
pub(super) fn list() -> Vec<Value> {
    TOOLS
        .iter()
        .map(|t| {
            let mut properties = Map::new();
            let mut required = Vec::new();
            for a in t.args {
                let schema = match a.kind {
                    Kind::Int(d) if t.name == "explain_job" && a.name == "job_id" => {
                        let _ = d;
                        required.push(a.name);
                        json!({ "type": "integer", "description": a.about })
                    }
                    Kind::Int(d) => {
                        json!({ "type": "integer", "default": d, "description": a.about })
                    }
                    Kind::Period(Some(d)) => {
                        json!({ "type": "string", "default": d, "description": a.about })
                    }
                    Kind::Period(None) | Kind::Text => json!({
                        "anyOf": [{ "type": "string" }, { "type": "null" }],
                        "default": null,
                        "description": a.about,
                    }),
                    Kind::Limits => json!({
                        "type": "object",
                        "additionalProperties": { "type": "integer", "minimum": 1 },
                        "description": a.about,
                    }),
                };
                properties.insert(a.name.to_owned(), schema);
            }
            let output = if t.object {
                json!({ "type": "object", "additionalProperties": true })
            } else {
                json!({
                    "type": "object",
                    "properties": { "result": {
                        "type": "array",
                        "items": { "type": "object", "additionalProperties": true },
                    } },
                    "required": ["result"],
                })
            };
            json!({
                "name": t.name,
                "description": t.about,
                "inputSchema": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                },
                "outputSchema": output,
                "annotations": { "readOnlyHint": true, "idempotentHint": true },
            })
        })
        .collect()
}

/// Reads the arguments of `tool` from `given`, checking each: unknown ones, wrong types,
/// negative counts and malformed periods are errors naming the argument.
struct Args<'a> {
    tool: &'static Tool,
    given: &'a Map<String, Value>,
}

impl Args<'_> {
    fn spec(&self, name: &str) -> &'static Arg {
        self.tool
            .args
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| unreachable!("{} has no argument {name}", self.tool.name))
    }

    fn int(&self, name: &str) -> std::result::Result<i64, RpcError> {
        let Kind::Int(default) = self.spec(name).kind else {
            unreachable!("{name} is not an integer argument");
        };
        match self.given.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => {
                let n = v.as_i64().ok_or_else(|| {
                    RpcError::invalid_params(format!(
                        "Invalid argument `{name}` of {}: {v} is not an integer",
                        self.tool.name
                    ))
                })?;
                if n < 0 {
                    return Err(RpcError::invalid_params(format!(
                        "Invalid argument `{name}` of {}: {n} is negative (0 or more)",
                        self.tool.name
                    )));
                }
                Ok(n)
            }
        }
    }

    fn period(&self, name: &str) -> std::result::Result<Option<Duration>, RpcError> {
        let Kind::Period(default) = self.spec(name).kind else {
            unreachable!("{name} is not a period argument");
        };
        let text = match self.given.get(name) {
            None | Some(Value::Null) => match default {
                Some(d) => d.to_owned(),
                None => return Ok(None),
            },
            Some(Value::String(s)) if s.trim().is_empty() && default.is_none() => {
                return Ok(None);
            }
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(RpcError::invalid_params(format!(
                    "Invalid argument `{name}` of {}: {v} is not a string",
                    self.tool.name
                )));
            }
        };
        parse_iso_period(&text).map(Some).map_err(|why| {
            RpcError::invalid_params(format!(
                "Invalid argument `{name}` of {}: {why}",
                self.tool.name
            ))
        })
    }

    fn text(&self, name: &str) -> std::result::Result<Option<String>, RpcError> {
        match self.given.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.contains('\0') => Ok(Some(s.clone())),
            Some(v) => Err(RpcError::invalid_params(format!(
                "Invalid argument `{name}` of {}: {v} is not a text without NUL",
                self.tool.name
            ))),
        }
    }

    fn limits(&self, name: &str) -> std::result::Result<Vec<(String, u32)>, RpcError> {
        match self.given.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(entrypoint, v)| {
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| *n > 0)
                        .map(|n| (entrypoint.clone(), n))
                        .ok_or_else(|| {
                            RpcError::invalid_params(format!(
                                "Invalid argument `{name}` of {}: the limit of {entrypoint:?} \
                                 is {v}, not a whole number of 1 or more",
                                self.tool.name
                            ))
                        })
                })
                .collect(),
            Some(v) => Err(RpcError::invalid_params(format!(
                "Invalid argument `{name}` of {}: {v} is not an object of limits",
                self.tool.name
            ))),
        }
    }

    /// `limit`, bounded to [`MAX_ROWS`].
    fn rows(&self) -> std::result::Result<i64, RpcError> {
        Ok(self.int("limit")?.min(MAX_ROWS))
    }
}

/// `tools/call`: the tool's result, an error result when the database fails (the server
/// goes on), or a JSON-RPC error for a bad call.
pub(super) fn call(
    pool: &Pool,
    settings: &Settings,
    name: &str,
    given: &Map<String, Value>,
) -> std::result::Result<Value, RpcError> {
    let tool = TOOLS.iter().find(|t| t.name == name).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "Unknown tool: {name} (tools/list names them: {})",
            TOOLS.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
        ))
    })?;
    if let Some(unknown) = given
        .keys()
        .find(|k| !tool.args.iter().any(|a| a.name == *k))
    {
        return Err(RpcError::invalid_params(format!(
            "Invalid argument `{unknown}`: {name} takes {}",
            if tool.args.is_empty() {
                "no arguments".to_owned()
            } else {
                tool.args
                    .iter()
                    .map(|a| a.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )));
    }
    let args = Args { tool, given };
    let answer = run(pool, settings, &args);
    Ok(match answer {
        Ok(Answer::Rows(mut rows)) => {
            let mut content: Vec<Value> = Vec::with_capacity(rows.len());
            let mut bytes = 0usize;
            for row in &rows {
                let text = serde_json::to_string_pretty(row).unwrap_or_default();
                // Twice: the text item, and the row (compact) in `structuredContent`.
                bytes += 2 * text.len();
                if bytes > MAX_ANSWER_BYTES && !content.is_empty() {
                    break;
                }
                content.push(json!({ "type": "text", "text": text }));
            }
            let left_out = rows.len() - content.len();
            rows.truncate(content.len());
            if left_out > 0 {
                content.push(json!({
                    "type": "text",
                    "text": format!(
                        "{left_out} more rows not shown: an answer carries at most {} KiB of \
                         rows; ask for fewer (limit) or page with offset where the tool \
                         takes one",
                        MAX_ANSWER_BYTES >> 10
                    ),
                }));
            }
            json!({
                "content": content,
                "structuredContent": { "result": rows },
                "isError": false,
            })
        }
        Ok(Answer::Object(object)) => {
            let text = serde_json::to_string_pretty(&object).unwrap_or_default();
            if 2 * text.len() > MAX_ANSWER_BYTES {
                json!({
                    "content": [{
                        "type": "text",
                        "text": format!(
                            "The answer of {name} is {} KiB, more than the {} KiB an answer \
                             may carry; narrow it with the tool's arguments",
                            text.len() >> 10,
                            MAX_ANSWER_BYTES >> 10
                        ),
                    }],
                    "isError": true,
                })
            } else {
                json!({
                    "content": [{ "type": "text", "text": text }],
                    "structuredContent": object,
                    "isError": false,
                })
            }
        }
        Err(Failure::Bad(e)) => return Err(e),
        Err(Failure::Database(e)) => json!({
            "content": [{
                "type": "text",
                "text": format!("Error executing tool {name}: {e}"),
            }],
            "isError": true,
        }),
    })
}

enum Answer {
    Rows(Vec<Value>),
    Object(Value),
}

enum Failure {
    /// A bad call (answered with a JSON-RPC error).
    Bad(RpcError),
    /// The database failed (answered with an error result).
    Database(crate::Error),
}

impl From<RpcError> for Failure {
    fn from(e: RpcError) -> Failure {
        Failure::Bad(e)
    }
}

impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Failure {
        Failure::Database(e)
    }
}

impl From<postgres::Error> for Failure {
    fn from(e: postgres::Error) -> Failure {
        Failure::Database(e.into())
    }
}

fn micros(d: Option<Duration>) -> Option<i64> {
    d.map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn run(pool: &Pool, s: &Settings, args: &Args<'_>) -> std::result::Result<Answer, Failure> {
    let mut conn = pool.get().map_err(crate::Error::from)?;
    let client = conn.client();
    let rows = |client: &mut postgres::Client, sql: &str, params: &[Param<'_>]| {
        query_alone(client, sql, params)
            .map(|rows| Answer::Rows(rows.iter().map(row_json).collect()))
    };
    Ok(match args.tool.name {
        "queue_size" => rows(client, &sql::queue_size(s), &[])?,
        "queue_table_info" => {
            let (limit, offset) = (args.rows()?, args.int("offset")?);
            rows(
                client,
                &sql::queue_browse(s),
                &[
                    (&limit, Type::INT8),
                    (&offset, Type::INT8),
                    (&PAYLOAD_SHOWN, Type::INT4),
                ],
            )?
        }
        "queue_stats" => {
            let (period, limit) = (micros(args.period("period")?), args.rows()?);
            rows(
                client,
                &sql::stats_buckets(s),
                &[(&period, Type::INT8), (&limit, Type::INT8)],
            )?
        }
        "throughput_summary" => {
            let period = micros(args.period("period")?);
            rows(client, &sql::throughput(s), &[(&period, Type::INT8)])?
        }
        "failed_jobs" | "queue_log" => {
            let limit = args.rows()?;
            let only_failed = args.tool.name == "failed_jobs";
            rows(
                client,
                &sql::log_rows(s),
                &[(&limit, Type::INT8), (&only_failed, Type::BOOL)],
            )?
        }
        "schedules" => rows(client, &sql::schedules(s), &[])?,
        "stale_jobs" => {
            let threshold = micros(args.period("threshold")?).unwrap_or(0);
            let limit = args.rows()?;
            rows(
                client,
                &ops_sql::queue_select_stale(s),
                &[(&threshold, Type::INT8), (&limit, Type::INT8)],
            )?
        }
        "active_workers" => rows(client, &ops_sql::queue_select_workers(s), &[])?,
        "queue_age" => rows(client, &ops_sql::queue_select_age(s), &[])?,
        "schema_info" => rows(client, &sql::schema_info(s), &[])?,
        "explain_job" => {
            let id = args
                .given
                .get("job_id")
                .and_then(Value::as_i64)
                .ok_or_else(|| {
                    RpcError::invalid_params(
                        "Invalid argument `job_id` of explain_job: give the job's id",
                    )
                })?;
            let timeout = args
                .period("heartbeat_timeout")?
                .unwrap_or(Duration::from_secs(30));
            drop(conn);
            let queue = crate::Queue::with_settings(pool.clone(), s)?;
            let explanation = queue.explain_stale_after(id, timeout)?;
            Answer::Object(json!({
                "job_id": id,
                "state": explanation.state(),
                "explanation": explanation.to_string(),
            }))
        }
        "limits" => {
            let declared = args.limits("declared")?;
            let slots = crate::ops::slots_in_use(client, s)?;
            Answer::Rows(
                slots
                    .iter()
                    .map(|u| {
                        let declared_limit = declared
                            .iter()
                            .find(|(e, _)| *e == u.entrypoint)
                            .map(|(_, l)| *l);
                        let implied = u.highest.map(|h| h + 1);
                        let over = declared_limit.is_some_and(|l| {
                            u.in_use > u64::from(l) || implied.is_some_and(|i| i > i64::from(l))
                        });
                        json!({
                            "entrypoint": u.entrypoint,
                            "in_use": u.in_use,
                            "highest": u.highest,
                            "unslotted": u.unslotted,
                            "implied_limit": implied,
                            "declared_limit": declared_limit,
                            "over_declared": over,
                        })
                    })
                    .collect(),
            )
        }
        "limit_audit" => {
            let window = args.period("period")?.unwrap_or(Duration::from_secs(3600));
            let entrypoint = args.text("entrypoint")?;
            let audit = crate::ops::limit_audit(
                client,
                s,
                window,
                entrypoint.as_deref(),
                crate::ops::AUDIT_RESOLUTION,
            )?;
            Answer::Rows(
                audit
                    .entrypoints
                    .iter()
                    .map(|e| {
                        json!({
                            "entrypoint": e.entrypoint,
                            "peak": e.peak,
                            "peak_at": time(e.peak_at),
                            "clock_peak": e.clock_peak,
                            "clock_peak_at": time(e.clock_peak_at),
                            "runs": e.runs,
                            "highest_slot": e.highest_slot,
                            "since": time(audit.since),
                            "rows_read": audit.rows_read,
                        })
                    })
                    .collect(),
            )
        }
        "health" => {
            let mut options = crate::ops::HealthOptions::default();
            let period = |name| args.period(name).map(Option::unwrap_or_default);
            options.stall_after = period("stall_after")?;
            options.stale_after = period("stale_after")?;
            options.window = period("window")?;
            options.limits = args.limits("declared")?;
            Answer::Object(crate::ops::health(client, s, &options)?.to_json())
        }
        other => unreachable!("the tool {other} is listed but not run"),
    })
}

fn time(t: SystemTime) -> String {
    format_time(t, TimeStyle::Python)
}

/// A row as PgQueuer's server sends it: times as pydantic writes them, ids and counts as
/// numbers, `jsonb` and numeric sums already text (see the statements), a payload as text.
fn row_json(row: &Row) -> Value {
    let mut object = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        object.insert(column.name().to_owned(), value_of(row, i, column.type_()));
    }
    Value::Object(object)
}

fn value_of(row: &Row, i: usize, ty: &Type) -> Value {
    fn get<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Option<T> {
        row.try_get::<_, Option<T>>(i).ok().flatten()
    }
    let value = match *ty {
        Type::INT2 => get::<i16>(row, i).map(Value::from),
        Type::INT4 => get::<i32>(row, i).map(Value::from),
        Type::INT8 => get::<i64>(row, i).map(Value::from),
        Type::FLOAT4 => get::<f32>(row, i).map(Value::from),
        Type::FLOAT8 => get::<f64>(row, i).map(Value::from),
        Type::BOOL => get::<bool>(row, i).map(Value::from),
        Type::TIMESTAMPTZ => get::<SystemTime>(row, i).map(|t| time(t).into()),
        Type::UUID => get::<uuid::Uuid>(row, i).map(|u| u.to_string().into()),
        Type::BYTEA => get::<Vec<u8>>(row, i).map(|bytes| match String::from_utf8(bytes) {
            Ok(text) => text.into(),
            Err(e) => {
                let mut hex = String::from("\\x");
                for b in e.as_bytes() {
                    hex.push_str(&format!("{b:02x}"));
                }
                hex.into()
            }
        }),
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY | Type::NAME_ARRAY => {
            get::<Vec<Option<String>>>(row, i).map(Value::from)
        }
        _ => get::<String>(row, i).map(Value::from),
    };
    value.unwrap_or(Value::Null)
}

/// `prompts/list`'s entry.
pub(super) fn guide_listing() -> Value {
    json!({
        "name": GUIDE_NAME,
        "description": "How to look into a PgQueuer queue with these tools, step by step.",
        "arguments": [],
    })
}

/// `prompts/get` of the guide.
pub(super) fn guide() -> Value {
    json!({
        "description": "How to look into a PgQueuer queue with these tools, step by step.",
        "messages": [{
            "role": "user",
            "content": { "type": "text", "text": GUIDE },
        }],
    })
}

const GUIDE: &str = "\
You can read a PgQueuer job queue in PostgreSQL through these tools. Nothing you call \
changes the database: the server's connections are read-only.

1. Is it healthy? `health` gives OK, DEGRADED or STALLED and why. STALLED means due \
work waits and nothing moves (are the workers running?).
2. What is in it? `queue_size` (jobs per entrypoint, priority and status) and \
`queue_age` (how long the oldest queued job has waited). `schema_info` says whether \
the tables exist and how big they are.
3. Is work moving? `throughput_summary` (totals per entrypoint and status over a \
period such as PT1H) and `queue_stats` (per second).
4. What failed? `failed_jobs` shows the newest exceptions with their tracebacks; \
`queue_log` every transition.
5. Who works? `active_workers` (workers holding jobs) and `stale_jobs` (jobs whose \
worker stopped sending heartbeats: they are taken over after the heartbeat timeout).
6. Why is this job not running? `explain_job` with its id.
7. Limits: `limits` (slots in use, against the limits your workers declare) and \
`limit_audit` (the most jobs of an entrypoint that ran at once, from the log).
8. `schedules` lists the cron schedules and when each runs next; `queue_table_info` \
browses the queue's rows.

Jobs move queued -> picked -> an outcome (successful, exception, canceled, deleted), \
or stay as failed for inspection. Periods are ISO-8601 durations: PT30M, PT1H, P1D.";
