//! The `metrics` and `opentelemetry` features, in a test binary of their own: the trace
//! tests install a global tracer provider, which would put a trace context in the
//! headers of every job the other integration tests enqueue.

// Test modules share helpers with `pub`; nothing here is a public API.
#![allow(unreachable_pub)]
// The shared harness has helpers these tests do not use.
#![allow(dead_code)]

#[path = "../support/harness.rs"]
mod harness;
#[path = "../support/python.rs"]
mod python;

mod example;
mod metrics;
mod traces;
