//! Integration tests against a real PostgreSQL (see `tests/support/harness.rs` for where it
//! comes from). The helpers live in `tests/support`; every module here is tests.

// Test modules share helpers with `pub`; nothing here is a public API.
#![allow(unreachable_pub)]

mod claim;
mod cli;
mod connect;
mod faults;
mod health;
mod limits;
mod ops;
mod pooler;
mod queue;
mod scheduler;
mod schema;
mod tls;
mod web;
mod worker;

// Interoperation with the real Python PgQueuer 1.6.0 (see support/python.rs for the
// interpreter).
mod interop;

#[path = "../support/mod.rs"]
mod support;
use support::{apt, harness, pgbouncer, proxy, python};
