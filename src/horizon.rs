//! Who holds the MVCC horizon back: sessions with an old transaction or snapshot,
//! replication slots, prepared transactions and standbys with `hot_standby_feedback`.
//!
//! While one of them holds it, PostgreSQL can remove no row version that died after it
//! began, and a queue makes one or two per job. The worker reads through them (claims from
//! floors, see `worker::floors`), but every index still grows, and only the holder's end
//! gives the space back: an operator must hear of it. [`holders`] lists them, oldest
//! first, for `pgq health`, the health probes, `/metrics`, the dashboard and the worker's
//! own warning.

use std::fmt;
use std::time::Duration;

use postgres::GenericClient;

use crate::error::Result;

/// The kind of a [`HorizonHolder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderKind {
    /// A session of this database whose transaction or snapshot is open.
    Session,
    /// A replication slot that keeps row versions for its consumer.
    ReplicationSlot,
    /// A transaction prepared for two-phase commit and never finished.
    PreparedTransaction,
    /// A standby that reports its oldest snapshot (`hot_standby_feedback`).
    Standby,
}

impl HolderKind {
    /// `session`, `replication_slot`, `prepared_transaction` or `standby`.
    pub fn as_str(self) -> &'static str {
        match self {
            HolderKind::Session => "session",
            HolderKind::ReplicationSlot => "replication_slot",
            HolderKind::PreparedTransaction => "prepared_transaction",
            HolderKind::Standby => "standby",
        }
    }

    fn parse(text: &str) -> HolderKind {
        match text {
            "replication_slot" => HolderKind::ReplicationSlot,
            "prepared_transaction" => HolderKind::PreparedTransaction,
            "standby" => HolderKind::Standby,
            _ => HolderKind::Session,
        }
    }
}

/// One holder of the horizon ([`holders`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HorizonHolder {
    /// What holds it.
    pub kind: HolderKind,
    /// The session's pid, the slot's name, the prepared transaction's gid, or the
    /// standby's `application_name`.
    pub name: String,
    /// The session's (or standby's) `application_name`; the prepared transaction's owner.
    pub application_name: Option<String>,
    /// The client's address, where there is one.
    pub client_addr: Option<String>,
    /// The session's state (`idle in transaction`, `active`), or the slot's (`active`,
    /// `inactive`).
    pub state: Option<String>,
    /// How long it has held the horizon: the session's transaction, the prepared
    /// transaction; `None` for slots and standbys, which say only `xid_age`.
    pub held_for: Option<Duration>,
    /// How many transactions old the oldest row version it keeps is (`age(xmin)`).
    pub xid_age: i64,
    /// The first 100 characters of the session's last query.
    pub query: Option<String>,
}

impl fmt::Display for HorizonHolder {
    /// `session 4242 (application_name "report", 10.0.0.5, idle in transaction) for 7m12s,
    /// 123456 transactions: SELECT ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str().replace('_', " "), self.name)?;
        let mut details = Vec::new();
        if let Some(app) = self.application_name.as_deref().filter(|a| !a.is_empty()) {
            let label = match self.kind {
                HolderKind::PreparedTransaction => "owner",
                _ => "application_name",
            };
            details.push(format!("{label} {app:?}"));
        }
        if let Some(addr) = &self.client_addr {
            details.push(addr.clone());
        }
        if let Some(state) = &self.state {
            details.push(state.clone());
        }
        if !details.is_empty() {
            write!(f, " ({})", details.join(", "))?;
        }
        if let Some(held) = self.held_for {
            write!(f, " for {}", crate::time::human_duration(held))?;
        }
        write!(f, ", {} transactions old", self.xid_age)?;
        if let Some(query) = self.query.as_deref().filter(|q| !q.is_empty()) {
            write!(f, ": {query}")?;
        }
        Ok(())
    }
}

/// Everything that holds the horizon of this database back, oldest first (by the age of
/// the oldest row version each keeps): sessions of this database with an open
/// transaction or snapshot (but the caller's own), replication slots, prepared
/// transactions of this database, and standbys that report their snapshots. A session's
/// query is shown only where the role may see it (its own, or with `pg_read_all_stats`).
///
/// # Errors
/// [`crate::Error::Db`].
pub fn holders<C: GenericClient>(client: &mut C) -> Result<Vec<HorizonHolder>> {
    let rows = crate::connect::query_alone(client, crate::sql::ops::HORIZON_HOLDERS, &[])?;
    rows.iter()
        .map(|row| {
            let held: Option<f64> = row.try_get("held_s")?;
            Ok(HorizonHolder {
                kind: HolderKind::parse(&row.try_get::<_, String>("kind")?),
                name: row.try_get("name")?,
                application_name: row.try_get("application_name")?,
                client_addr: row.try_get("client_addr")?,
                state: row.try_get("state")?,
                held_for: held
                    .map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)),
                xid_age: row.try_get::<_, Option<i64>>("xid_age")?.unwrap_or(0),
                query: row.try_get("query")?,
            })
        })
        .collect()
}

/// The holders of [`holders`] that hold the horizon for at least `after` (slots and
/// standbys, which say no time, for at least `xid_after` transactions).
pub(crate) fn long_held(
    all: Vec<HorizonHolder>,
    after: Duration,
    xid_after: i64,
) -> Vec<HorizonHolder> {
    all.into_iter()
        .filter(|h| match h.held_for {
            Some(held) => held >= after,
            None => h.xid_age >= xid_after,
        })
        .collect()
}
