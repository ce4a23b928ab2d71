//! The fault suite: real worker processes (`examples/worker`), a real server, faults
//! injected while jobs flow, and bad input everywhere. Each test proves that no job is
//! lost, that concurrency limits hold and that errors name their cause, and adds a row
//! to a summary (printed once every fault test has reported, and written to
//! `target/fault-summary.txt` after each one; see `summary.rs`).
//!
//! Everything runs on loopback and every wait is bounded. The server-restart test starts
//! a PostgreSQL of its own ([`Throwaway`](crate::harness::Throwaway)); the others use
//! their own database on the shared server and only ever terminate backends of that
//! database. The soak runs 20,000 jobs unless `PGQ_SOAK_JOBS` asks for more.
//!
//! Shared pieces: `summary.rs` (the table), `process.rs` (worker processes),
//! `checks.rs` (what the database says about a run, and a producer thread).

pub mod checks;
pub mod process;
mod summary;

// One file per fault.
mod bad_input;
mod blackhole;
mod blocked;
mod crash;
mod failover;
mod pool;
mod pooler;
mod rescue;
mod restart;
mod sigkill;
mod soak;
mod starved;
mod terminate;
mod timeouts;
