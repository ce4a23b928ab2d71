//! The slot-claiming dequeue: order, stale re-picks, bounded plans, and a multi-connection
//! stress run whose limits are checked by a running-handler count (slots and their races
//! are with the other limit tests, in `limits`).
//! One file per concern; the helpers they share (also used by the `pgq` tests) are here.

use pgqueuer::postgres::Client;
use pgqueuer::{Outcome, Status};

mod ending;
mod order;
mod plans;
mod stress;

/// Inserts `count` queued jobs of `entrypoint` at `priority` with plain SQL; returns ids.
pub fn insert_jobs(client: &mut Client, entrypoint: &str, priority: i32, count: i64) -> Vec<i64> {
    client
        .query(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status) \
             SELECT $1, $2, convert_to(g::text, 'UTF8'), 'queued' FROM generate_series(1, $3::bigint) g RETURNING id",
            &[&priority, &entrypoint, &count],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A successful outcome for each id.
pub fn success(ids: impl IntoIterator<Item = i64>) -> Vec<Outcome> {
    ids.into_iter()
        .map(|id| Outcome {
            id,
            status: Status::Successful,
            traceback: None,
        })
        .collect()
}
