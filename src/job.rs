//! Jobs: ids, statuses, claimed rows.

use std::fmt;

/// A job's id (`pgqueuer.id`).
pub type JobId = i64;

/// The values of PgQueuer's status enum, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Waiting in the queue.
    Queued,
    /// Claimed by a worker.
    Picked,
    /// Finished without error (log only).
    Successful,
    /// Failed and deleted (log only).
    Exception,
    /// Cancelled (log only).
    Canceled,
    /// Removed by `clear` (log only).
    Deleted,
    /// Failed and held in the queue table for inspection and requeue.
    Failed,
}

impl Status {
    /// Every status, in the enum's order.
    pub const ALL: [Status; 7] = [
        Status::Queued,
        Status::Picked,
        Status::Successful,
        Status::Exception,
        Status::Canceled,
        Status::Deleted,
        Status::Failed,
    ];

    /// The label as stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Picked => "picked",
            Status::Successful => "successful",
            Status::Exception => "exception",
            Status::Canceled => "canceled",
            Status::Deleted => "deleted",
            Status::Failed => "failed",
        }
    }

    /// Parses a stored label.
    pub fn parse(label: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == label)
    }

    /// True for the statuses after which a job never runs again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Successful | Status::Exception | Status::Canceled | Status::Deleted
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
