//! A pool connection a worker's loop keeps, replaced after a lost connection.

use crate::connect::{Pool, PooledConn};
use crate::error::{Error, Result};
use crate::sqlstate;

/// A pool connection a thread keeps for its loop: checked out on first use, set to plan
/// with indexes only ([`crate::Conn::plan_with_indexes`]; the pool closes it when it is
/// given back rather than hand the setting to another user), and given back after an
/// error that means the connection is gone, so that the next use opens a fresh one.
pub(crate) struct LoopConn<'a> {
    pool: &'a Pool,
    conn: Option<PooledConn>,
}

impl<'a> LoopConn<'a> {
    pub(crate) fn new(pool: &'a Pool) -> LoopConn<'a> {
        LoopConn { pool, conn: None }
    }

    /// Runs `op` on the connection (checking one out first if needed); after a failure
    /// that lost the connection, gives it back.
    pub(crate) fn run<T>(&mut self, op: impl FnOnce(&mut PooledConn) -> Result<T>) -> Result<T> {
        if self.conn.is_none() {
            let mut conn = self.pool.get()?;
            conn.plan_with_indexes()?;
            self.conn = Some(conn);
        }
        let conn = self
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("set above"));
        let result = op(conn);
        if let Err(e) = &result {
            let lost = match e {
                Error::Db(db) => sqlstate::is_connection_lost(db),
                Error::Pool(_) => true,
                _ => false,
            };
            if lost || conn.is_closed() {
                self.conn = None;
            }
        }
        result
    }

    /// Whether a connection is checked out (a [`LoopConn::run`] would not wait for one).
    pub(crate) fn is_open(&self) -> bool {
        self.conn.is_some()
    }

    /// Gives the connection back (the pool closes it).
    pub(crate) fn release(&mut self) {
        self.conn = None;
    }
}
