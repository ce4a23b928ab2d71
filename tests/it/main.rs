//! Integration tests against a real PostgreSQL (see `harness.rs` for where it comes from).

// Test modules share helpers with `pub`; nothing here is a public API.
#![allow(unreachable_pub)]

mod apt;
mod claim;
mod cli;
mod connect;
mod faults;
mod harness;
mod health;
mod limits;
mod ops;
mod pgbouncer;
mod pooler;
mod proxy;
mod queue;
mod scheduler;
mod schema;
mod tls;
mod web;
mod worker;

// Interoperation with the real Python PgQueuer 1.6.0 (see python.rs for the interpreter).
mod interop;
mod python;
