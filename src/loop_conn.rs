//! The connection a worker's loop keeps, replaced after a lost connection.

use crate::connect::{Conn, Manager, Pool, PooledConn};
use crate::error::{Error, Result};
use crate::sqlstate;

/// Where a loop's connection comes from.
enum Source<'a> {
    /// Checked out of the worker's pool (the claim lanes).
    Pool(&'a Pool),
    /// Opened by the loop itself, outside the pool (heartbeats, outcomes): handlers that
    /// hold or wait for pool connections cannot keep it from reconnecting.
    Own(&'a Manager),
}

/// The connection itself.
enum Held {
    /// Given back to the pool when dropped (whose `on_release` closes it elsewhere).
    Pooled(PooledConn),
    Own(OwnConn),
}

impl Held {
    fn conn(&mut self) -> &mut Conn {
        match self {
            Held::Pooled(conn) => conn,
            Held::Own(OwnConn(Some(conn))) => conn,
            Held::Own(OwnConn(None)) => unreachable!("taken only when dropped"),
        }
    }
}

/// A connection of the loop's own, closed on a thread of its own when dropped: closing
/// waits for the server, which a lost network never answers.
struct OwnConn(Option<Conn>);

impl Drop for OwnConn {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            crate::connect::drop_elsewhere(conn);
        }
    }
}

/// A connection a thread keeps for its loop: opened (or checked out) on first use, set to
/// plan with indexes only ([`crate::Conn::plan_with_indexes`]; a pool closes it when it
/// is given back rather than hand the setting to another user), and let go after an
/// error that means the connection is gone, so that the next use opens a fresh one.
pub(crate) struct LoopConn<'a> {
    source: Source<'a>,
    conn: Option<Held>,
}

impl<'a> LoopConn<'a> {
    /// A loop connection checked out of `pool`.
    pub(crate) fn new(pool: &'a Pool) -> LoopConn<'a> {
        LoopConn {
            source: Source::Pool(pool),
            conn: None,
        }
    }

    /// A loop connection the loop opens itself through `manager`, outside any pool.
    pub(crate) fn own(manager: &'a Manager) -> LoopConn<'a> {
        LoopConn {
            source: Source::Own(manager),
            conn: None,
        }
    }

    /// Runs `op` on the connection (opening one first if needed); after a failure that
    /// lost the connection, lets it go.
    pub(crate) fn run<T>(&mut self, op: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        if self.conn.is_none() {
            let mut held = match &self.source {
                Source::Pool(pool) => Held::Pooled(pool.get()?),
                Source::Own(manager) => Held::Own(OwnConn(Some(manager.open()?))),
            };
            held.conn().plan_with_indexes()?;
            self.conn = Some(held);
        }
        let held = self
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("set above"));
        let result = op(held.conn());
        if let Err(e) = &result {
            let lost = match e {
                Error::Db(db) => sqlstate::is_connection_lost(db),
                Error::Pool(_) | Error::Connect { .. } => true,
                _ => false,
            };
            if lost || held.conn().is_closed() {
                self.release();
            }
        }
        result
    }

    /// Whether a connection is open (a [`LoopConn::run`] would not wait for one).
    pub(crate) fn is_open(&self) -> bool {
        self.conn.is_some()
    }

    /// Lets the connection go: back to the pool (which closes it), or closed on a
    /// thread of its own.
    pub(crate) fn release(&mut self) {
        self.conn = None;
    }
}
