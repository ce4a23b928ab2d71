//! The producer API against a real server: enqueue (order, statement count, transactions,
//! dedupe modes and races), headers and payloads, bad input, cancel, inspection, requeue,
//! and waiting for completion. One file per concern; the helpers they share are here.

use std::time::{Duration, Instant};

use pgqueuer::events::{Event, Operation};
use pgqueuer::postgres::Client;
use pgqueuer::postgres::fallible_iterator::FallibleIterator;
use pgqueuer::{ConnectOptions, Error, NewJob};

use crate::harness::TestDb;
use crate::proxy::CountingProxy;

mod cancel;
mod contents;
mod dedupe;
mod enqueue;
mod explain;
mod inspect;
mod prefix;
mod wait;

pub fn job(entrypoint: &str) -> NewJob {
    NewJob::new(entrypoint, b"p".to_vec())
}

pub fn field_of(err: Error) -> String {
    match err {
        Error::InvalidInput { field, .. } => field,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// A connection LISTENing on the default channel, as a worker's listener would.
pub struct Listener {
    client: Client,
}

impl Listener {
    pub fn new(db: &TestDb) -> Listener {
        let mut client = db.client();
        client.batch_execute("LISTEN \"ch_pgqueuer\"").unwrap();
        Listener { client }
    }

    /// Every payload that arrives until `quiet` passes without one.
    pub fn collect(&mut self, quiet: Duration) -> Vec<String> {
        let mut notes = self.client.notifications();
        let mut it = notes.timeout_iter(quiet);
        let mut payloads = Vec::new();
        while let Some(note) = it.next().unwrap() {
            payloads.push(note.payload().to_owned());
        }
        payloads
    }

    /// The first event for which `wanted` holds, waiting at most `timeout`.
    pub fn first(&mut self, timeout: Duration, wanted: impl Fn(&Event) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut notes = self.client.notifications();
            let note = notes.timeout_iter(left).next().unwrap()?;
            let payload = note.payload().to_owned();
            if wanted(&Event::parse(&payload).unwrap()) {
                return Some(payload);
            }
        }
    }
}

pub fn is_insert(e: &Event) -> bool {
    matches!(e, Event::TableChanged(t) if t.operation == Operation::Insert)
}

/// A database, a proxy counting the protocol messages sent to it, and a pool of one
/// connection through that proxy.
pub fn one_connection_behind_a_counting_proxy() -> (TestDb, CountingProxy, pgqueuer::Pool) {
    let db = TestDb::new();
    let proxy = CountingProxy::start();
    let options = ConnectOptions {
        max_size: 1,
        min_idle: 0,
        ..Default::default()
    };
    let pool = pgqueuer::connect_with(&proxy.dsn(&db.name), &options).unwrap();
    (db, proxy, pool)
}
