//! Bad input, one test per kind: connection strings, authentication, a missing
//! schema, settings, entrypoint names, headers, payloads and foreign entrypoints. Each
//! gets a clear error or is handled, and nothing is corrupted.
//!
//! Between them the tests report one row of the fault summary ("bad input"), once the
//! last of them has added its [`Tally`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pgqueuer::{Error, JobId, Pool, RunSummary, Worker};

use super::summary::{Row, report};

mod auth;
mod dsn;
mod entrypoints;
mod foreign;
mod headers;
mod payloads;
mod schema;
mod settings;
mod unreadable;

/// How many tests add a tally; the summary row is reported when the last one has.
const BAD_INPUT_TESTS: usize = 12;

/// What one bad-input test checked and ran.
#[derive(Debug, Default)]
pub struct Tally {
    /// Bad inputs rejected with the expected error.
    checks: usize,
    enqueued: usize,
    completed: usize,
    /// Foreign jobs left untouched.
    kept: usize,
}

/// The tallies of the bad-input tests that have finished, and how many they are.
static TOTAL: Mutex<(usize, Tally)> = Mutex::new((
    0,
    Tally {
        checks: 0,
        enqueued: 0,
        completed: 0,
        kept: 0,
    },
));

impl Tally {
    /// Asserts that `result` is an error whose text contains every needle, and counts it.
    #[track_caller]
    pub fn expect_err(&mut self, what: &str, result: Result<(), Error>, needles: &[&str]) {
        let err = result.expect_err(what);
        let text = err.to_string();
        for needle in needles {
            assert!(text.contains(needle), "{what}: {needle:?} not in {text:?}");
        }
        eprintln!("bad input: {what}: {text}");
        self.checks += 1;
    }

    /// Counts jobs enqueued and completed by the test.
    pub fn ran(&mut self, enqueued: usize, completed: u64) {
        self.enqueued += enqueued;
        self.completed += usize::try_from(completed).unwrap();
    }

    /// Counts foreign jobs the test enqueued (so they count as enqueued) and found kept.
    pub fn kept(&mut self, foreign: usize) {
        self.enqueued += foreign;
        self.kept += foreign;
    }

    /// Adds this test's tally to the others; the last bad-input test to finish reports
    /// the summary row of them all.
    pub fn finish(self, test: &str) {
        eprintln!("bad input: {test}: {self:?}");
        let mut total = TOTAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (done, sum) = &mut *total;
        *done += 1;
        sum.checks += self.checks;
        sum.enqueued += self.enqueued;
        sum.completed += self.completed;
        sum.kept += self.kept;
        if *done == BAD_INPUT_TESTS {
            report(Row {
                test: "bad input",
                faults: format!(
                    "{} bad inputs rejected, {} foreign jobs kept",
                    sum.checks, sum.kept
                ),
                enqueued: sum.enqueued,
                completed: sum.completed,
                lost: 0,
                concurrency: "-".into(),
            });
        }
    }
}

/// FNV-1a, to compare payloads without keeping copies.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What an `echo` handler saw of a job: payload length (`None`: no payload), payload
/// hash, headers, and whether the payload read as text.
pub type Seen = (Option<usize>, u64, Option<serde_json::Value>, bool);

/// Drains the queue with a worker (two threads, batches of one) whose only entrypoint,
/// `echo`, records what it saw of each job.
pub fn run_echo(pool: &Pool) -> (RunSummary, HashMap<JobId, Seen>) {
    let seen: Arc<Mutex<HashMap<JobId, Seen>>> = Arc::default();
    let worker = {
        let seen = seen.clone();
        Worker::builder(pool.clone())
            .threads(2)
            .batch_size(1)
            .entrypoint("echo", move |job, _ctx| {
                let payload = job.payload.as_deref();
                seen.lock().unwrap().insert(
                    job.id,
                    (
                        payload.map(<[u8]>::len),
                        fnv(payload.unwrap_or_default()),
                        job.headers.as_ref().and_then(|h| h.value().cloned()),
                        job.payload_str().is_some(),
                    ),
                );
                Ok(())
            })
            .build()
            .unwrap()
    };
    let summary = worker.run_until_empty().unwrap();
    let seen = seen.lock().unwrap().clone();
    (summary, seen)
}

/// The job, expected payload length and hash, and expected headers of each job in
/// `expected` match what [`run_echo`] saw of it.
#[track_caller]
pub fn assert_seen_as_sent(
    seen: &HashMap<JobId, Seen>,
    expected: &[(JobId, Option<usize>, u64, Option<serde_json::Value>)],
) {
    for (id, len, hash, headers) in expected {
        let got = seen.get(id).unwrap_or_else(|| panic!("job {id} never ran"));
        assert_eq!((&got.0, &got.1, &got.2), (len, hash, headers), "job {id}");
    }
}
