//! An MCP server (the Model Context Protocol, revision 2025-11-25) for an assistant to
//! inspect a queue: PgQueuer 1.6.0's read-only tools and prompt under the same names,
//! arguments and result fields, and four of ours (`explain_job`, `limits`,
//! `limit_audit`, `health`). `pgq mcp` serves it on stdin and stdout; feature `mcp`
//! (which `cli` enables).
//!
//! The transport is MCP's stdio one: JSON-RPC 2.0 messages, one per line of at most
//! 1 MiB (a longer line is answered with a parse error and skipped); a client asking for
//! an earlier revision (back to 2024-11-05) is answered in its own. It is written
//! here rather than taken from an SDK, so that the server stays as blocking as the rest
//! of the crate (the official Rust SDK runs on an async runtime); its conformance is
//! tested with the official Python SDK's client (see the README's Dependencies).
//!
//! Read-only for real: the server's pool opens every connection with
//! `default_transaction_read_only` and a statement timeout, so the database itself
//! refuses a write and a slow read; PgQueuer's `queue_stats`, which folds the log into
//! the statistics first, reads the unfolded rows beside them instead.
//!
//! ```no_run
//! # fn main() -> Result<(), pgqueuer::Error> {
//! use std::time::Duration;
//!
//! let server = pgqueuer::mcp::McpServer::connect("", Duration::from_secs(5))?;
//! let stdin = std::io::stdin();
//! server.serve(stdin.lock(), std::io::stdout())?;
//! # Ok(())
//! # }
//! ```

mod tools;

use std::io::{BufRead, Read, Write};
use std::time::Duration;

use serde_json::{Value, json};

use crate::connect::{ConnectOptions, Pool};
use crate::error::{Error, Result};
use crate::settings::Settings;

/// The protocol revision this server speaks, and the earlier ones it answers in kind.
pub(crate) const PROTOCOL_VERSION: &str = "2025-11-25";
const EARLIER_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

/// The longest message line read (1 MiB); a longer one is answered with a parse error
/// and skipped, so no client can make the server hold unbounded input.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// JSON-RPC's error codes.
mod code {
    pub(super) const PARSE_ERROR: i64 = -32_700;
    pub(super) const INVALID_REQUEST: i64 = -32_600;
    pub(super) const METHOD_NOT_FOUND: i64 = -32_601;
    pub(super) const INVALID_PARAMS: i64 = -32_602;
}

/// An MCP server over a queue's database.
#[derive(Debug)]
pub struct McpServer {
    pool: Pool,
    settings: Settings,
}

/// A JSON-RPC error to answer with.
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError {
            code: code::INVALID_PARAMS,
            message: message.into(),
        }
    }
}

impl McpServer {
    /// A server over `dsn` (as [`crate::connect`] reads it, environment included) and
    /// the settings of `PGQUEUER_*`, whose connections are read-only and time out every
    /// statement after `statement_timeout`.
    ///
    /// # Errors
    /// As [`crate::connect_with`]; [`Error::InvalidSetting`] for bad settings.
    pub fn connect(dsn: &str, statement_timeout: Duration) -> Result<McpServer> {
        let options = ConnectOptions {
            max_size: 2,
            min_idle: 0,
            connection_timeout: Duration::from_secs(5),
            application_name: "pgq-mcp".into(),
            read_only: true,
            statement_timeout: Some(statement_timeout),
            ..ConnectOptions::from_env()?
        };
        let pool = crate::connect::connect_with(dsn, &options)?;
        McpServer::with_settings(pool, &Settings::from_env()?)
    }

    /// A server reading PgQueuer's default object names through `pool`. Make the pool
    /// read-only ([`ConnectOptions::read_only`]) for the guarantee that nothing is
    /// written.
    pub fn new(pool: Pool) -> McpServer {
        McpServer {
            pool,
            settings: Settings::default(),
        }
    }

    /// As [`McpServer::new`], with the object names of `settings`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for bad settings.
    pub fn with_settings(pool: Pool, settings: &Settings) -> Result<McpServer> {
        settings.validate()?;
        Ok(McpServer {
            pool,
            settings: settings.clone(),
        })
    }

    /// Answers the messages of `input`, one per line, on `output`, until `input` ends.
    /// A database that fails gives the tool call an error result; the server goes on.
    ///
    /// # Errors
    /// [`Error::Unexpected`] when `input` cannot be read or `output` written.
    pub fn serve(&self, mut input: impl BufRead, mut output: impl Write) -> Result<()> {
        let io = |e: std::io::Error| Error::Unexpected(format!("MCP stdio: {e}"));
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = input
                .by_ref()
                .take(MAX_MESSAGE_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(io)?;
            if read == 0 {
                return Ok(());
            }
            if line.len() > MAX_MESSAGE_BYTES && !line.ends_with(b"\n") {
                // Skip the rest of the line, then say why.
                let mut rest = Vec::new();
                loop {
                    rest.clear();
                    let n = input
                        .by_ref()
                        .take(64 << 10)
                        .read_until(b'\n', &mut rest)
                        .map_err(io)?;
                    if n == 0 || rest.ends_with(b"\n") {
                        break;
                    }
                }
                let reply = error_reply(
                    &Value::Null,
                    &RpcError {
                        code: code::PARSE_ERROR,
                        message: format!("a message longer than {MAX_MESSAGE_BYTES} bytes"),
                    },
                );
                write_line(&mut output, &reply).map_err(io)?;
                continue;
            }
            let text = String::from_utf8_lossy(&line);
            if text.trim().is_empty() {
                continue;
            }
            if let Some(reply) = self.handle(text.trim()) {
                write_line(&mut output, &reply).map_err(io)?;
            }
        }
    }

    /// The answer to one message, if it wants one (notifications and responses do not).
    fn handle(&self, text: &str) -> Option<Value> {
        let message: Value = match serde_json::from_str(text) {
            Ok(message) => message,
            Err(e) => {
                return Some(error_reply(
                    &Value::Null,
                    &RpcError {
                        code: code::PARSE_ERROR,
                        message: format!("not JSON: {e}"),
                    },
                ));
            }
        };
        let Some(object) = message.as_object() else {
            return Some(error_reply(
                &Value::Null,
                &RpcError {
                    code: code::INVALID_REQUEST,
                    message: "a message is one JSON-RPC object (batches are not part of MCP \
                              2025-11-25)"
                        .into(),
                },
            ));
        };
        let id = object.get("id").cloned();
        let Some(method) = object.get("method").and_then(Value::as_str) else {
            // A response to a request of ours (we send none), or garbage with an id.
            return id
                .filter(|_| !object.contains_key("result") && !object.contains_key("error"))
                .map(|id| {
                    error_reply(
                        &id,
                        &RpcError {
                            code: code::INVALID_REQUEST,
                            message: "a request needs a method".into(),
                        },
                    )
                });
        };
        let params = object.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id else {
            // Notifications (`notifications/initialized`, `notifications/cancelled`, ...)
            // need no answer, and this server acts on none.
            return None;
        };
        Some(match self.request(method, &params) {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(e) => error_reply(&id, &e),
        })
    }

    fn request(&self, method: &str, params: &Value) -> std::result::Result<Value, RpcError> {
        match method {
            "initialize" => {
                let asked = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(PROTOCOL_VERSION);
                let version = if asked == PROTOCOL_VERSION || EARLIER_VERSIONS.contains(&asked) {
                    asked
                } else {
                    PROTOCOL_VERSION
                };
                Ok(json!({
                    "protocolVersion": version,
                    "capabilities": {
                        "tools": { "listChanged": false },
                        "prompts": { "listChanged": false },
                    },
                    "serverInfo": {
                        "name": "pgqueuer",
                        "title": "PgQueuer (Rust)",
                        "version": env!("CARGO_PKG_VERSION"),
                    },
                    "instructions": "Read-only tools over a PgQueuer queue. Start with \
                        health, queue_size and schema_info; the pgqueuer_guide prompt \
                        suggests a workflow.",
                }))
            }
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": tools::list() })),
            "tools/call" => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcError::invalid_params("tools/call needs a tool `name`"))?;
                let arguments = match params.get("arguments") {
                    None | Some(Value::Null) => serde_json::Map::new(),
                    Some(Value::Object(map)) => map.clone(),
                    Some(_) => {
                        return Err(RpcError::invalid_params(
                            "the tool's `arguments` must be an object",
                        ));
                    }
                };
                tools::call(&self.pool, &self.settings, name, &arguments)
            }
            "prompts/list" => Ok(json!({ "prompts": [tools::guide_listing()] })),
            "prompts/get" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                if name == tools::GUIDE_NAME {
                    Ok(tools::guide())
                } else {
                    Err(RpcError::invalid_params(format!(
                        "Unknown prompt: {name:?} (there is one: {})",
                        tools::GUIDE_NAME
                    )))
                }
            }
            other => Err(RpcError {
                code: code::METHOD_NOT_FOUND,
                message: format!("Method not found: {other}"),
            }),
        }
    }
}

fn error_reply(id: &Value, e: &RpcError) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": e.code, "message": e.message },
    })
}

fn write_line(output: &mut impl Write, message: &Value) -> std::io::Result<()> {
    let mut text = serde_json::to_string(message).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    output.write_all(text.as_bytes())?;
    output.flush()
}
