//! Classifies database errors by SQLSTATE and constraint name.
//!
//! The slot-claiming dequeue and the dedupe-aware enqueue must tell apart a few database
//! errors precisely: a unique violation *on the capacity-slot index* means "another worker
//! took that slot first" and is an empty batch, while the same SQLSTATE on any other index
//! is a real error. Nothing here guesses from message text.

use postgres::error::SqlState;

/// What kind of failure a database error is, as far as this crate acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ErrorKind {
    /// SQLSTATE 23505 on the capacity-slot index (`<queue_table>_picked_slot_idx`): a
    /// concurrent claim took the same `(entrypoint, slot)` first. Treated as an empty batch.
    LostSlotRace,
    /// SQLSTATE 40P01. Two claims locked rows in crossing order; one was chosen as victim.
    Deadlock,
    /// SQLSTATE 23505 on any other constraint (named when the server names it).
    UniqueViolation {
        /// The index or constraint the server named.
        constraint: Option<String>,
    },
    /// The connection is gone, the server is going away, or it turned read-only (class
    /// 08, 57P01–57P03, 25006, or the driver's own "connection closed").
    ConnectionLost,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// True when the failed claim should be reported as an empty batch.
    pub(crate) fn is_lost_race(&self) -> bool {
        matches!(self, ErrorKind::LostSlotRace | ErrorKind::Deadlock)
    }
}

/// Classifies `err`. `slot_index` is the unqualified name of the capacity-slot index
/// (`Settings::slot_index_name()`), the only index whose violation counts as a lost race.
pub(crate) fn classify(err: &postgres::Error, slot_index: &str) -> ErrorKind {
    let constraint = err.as_db_error().and_then(|d| d.constraint());
    classify_parts(err.code(), constraint, err.is_closed(), slot_index)
}

/// The pure part of [`classify`], separated so it can be tested without a server.
pub(crate) fn classify_parts(
    code: Option<&SqlState>,
    constraint: Option<&str>,
    closed: bool,
    slot_index: &str,
) -> ErrorKind {
    if closed {
        return ErrorKind::ConnectionLost;
    }
    let Some(code) = code else {
        return ErrorKind::Other;
    };
    if *code == SqlState::UNIQUE_VIOLATION {
        return if constraint == Some(slot_index) {
            ErrorKind::LostSlotRace
        } else {
            ErrorKind::UniqueViolation {
                constraint: constraint.map(str::to_owned),
            }
        };
    }
    if *code == SqlState::T_R_DEADLOCK_DETECTED {
        return ErrorKind::Deadlock;
    }
    // A server that became read-only (a primary demoted, or a standby reached) will
    // not take a claim or an outcome: the connection must go, so that the next one
    // finds the primary (`target_session_attrs=read-write`).
    if code.code().starts_with("08")
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        || *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
        || *code == SqlState::CANNOT_CONNECT_NOW
    {
        return ErrorKind::ConnectionLost;
    }
    ErrorKind::Other
}

/// True when `err` means the connection it came from cannot be used again.
pub(crate) fn is_connection_lost(err: &postgres::Error) -> bool {
    classify(err, "") == ErrorKind::ConnectionLost
}

/// True when the server refused a statement for what it carries, so that running it
/// again unchanged cannot succeed: SQLSTATE class 21 (cardinality), 22 (data exception,
/// such as 22P05 for a NUL escape in `jsonb`), 23 (integrity), 42 (syntax or access),
/// 54 (program limit, such as a value too large). Anything else (a lost connection, a
/// timeout, a deadlock, a read-only or shutting-down server, no SQLSTATE at all) may pass
/// on a retry.
///
/// One 54000 is a passing state, not the statement's fault: the NOTIFY queue full
/// ("too many notifications in the NOTIFY queue", raised at commit by `PreCommit_Notify`
/// while a listener lags, and gone once it catches up). It is told apart by the
/// server's routine name, which, unlike the message, is not translated.
pub(crate) fn refuses_statement(err: &postgres::Error) -> bool {
    let routine = err.as_db_error().and_then(|d| d.routine());
    err.code()
        .is_some_and(|code| refuses(code.code(), routine) && !err.is_closed())
}

/// The server routine that raises "too many notifications in the NOTIFY queue" (54000).
const NOTIFY_QUEUE_FULL_ROUTINE: &str = "PreCommit_Notify";

/// The pure part of [`refuses_statement`].
fn refuses(code: &str, routine: Option<&str>) -> bool {
    if code == "54000" && routine == Some(NOTIFY_QUEUE_FULL_ROUTINE) {
        return false;
    }
    refusing_class(code)
}

fn refusing_class(code: &str) -> bool {
    ["21", "22", "23", "42", "54"]
        .iter()
        .any(|class| code.starts_with(class))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT: &str = "pgqueuer_picked_slot_idx";

    #[test]
    fn only_errors_about_a_statement_itself_refuse_it() {
        for code in ["22P05", "54000", "23502", "42P01", "22021"] {
            assert!(refusing_class(code), "{code}");
        }
        for code in [
            "57014", "40001", "40P01", "25006", "53100", "08006", "57P01", "XX000",
        ] {
            assert!(!refusing_class(code), "{code}");
        }
    }

    /// A full NOTIFY queue (54000 at commit, from `PreCommit_Notify`) passes once its
    /// listeners catch up: an outcome it fails is written again, not recorded as refused
    /// (an exception for a job that succeeded) nor left to run again; every other 54000
    /// (a value too large, say) refuses the statement.
    #[test]
    fn a_full_notify_queue_is_passing_and_other_program_limits_refuse() {
        assert!(!refuses("54000", Some("PreCommit_Notify")));
        assert!(refuses("54000", Some("exec_stmt_raise")));
        assert!(refuses("54000", Some("index_form_tuple_context")));
        assert!(refuses("54000", None));
        assert!(refuses("54001", Some("PreCommit_Notify")));
        assert!(!refuses("40001", Some("PreCommit_Notify")));
    }

    #[test]
    fn slot_index_violation_is_a_lost_race() {
        let kind = classify_parts(Some(&SqlState::UNIQUE_VIOLATION), Some(SLOT), false, SLOT);
        assert_eq!(kind, ErrorKind::LostSlotRace);
        assert!(kind.is_lost_race());
    }

    #[test]
    fn other_unique_violation_is_an_error() {
        let kind = classify_parts(
            Some(&SqlState::UNIQUE_VIOLATION),
            Some("pgqueuer_unique_dedupe_key"),
            false,
            SLOT,
        );
        assert_eq!(
            kind,
            ErrorKind::UniqueViolation {
                constraint: Some("pgqueuer_unique_dedupe_key".into())
            }
        );
        assert!(!kind.is_lost_race());
    }

    #[test]
    fn a_prefixed_slot_index_is_not_confused_with_the_default_one() {
        let kind = classify_parts(
            Some(&SqlState::UNIQUE_VIOLATION),
            Some(SLOT),
            false,
            "app_pgqueuer_picked_slot_idx",
        );
        assert!(!kind.is_lost_race());
    }

    #[test]
    fn deadlock_is_a_lost_race() {
        let kind = classify_parts(Some(&SqlState::T_R_DEADLOCK_DETECTED), None, false, SLOT);
        assert!(kind.is_lost_race());
    }

    #[test]
    fn connection_failures() {
        for code in [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::CONNECTION_FAILURE,
            SqlState::CONNECTION_EXCEPTION,
            SqlState::READ_ONLY_SQL_TRANSACTION,
        ] {
            assert_eq!(
                classify_parts(Some(&code), None, false, SLOT),
                ErrorKind::ConnectionLost
            );
        }
        assert_eq!(
            classify_parts(None, None, true, SLOT),
            ErrorKind::ConnectionLost
        );
    }

    #[test]
    fn everything_else_is_other() {
        assert_eq!(classify_parts(None, None, false, SLOT), ErrorKind::Other);
        assert_eq!(
            classify_parts(Some(&SqlState::QUERY_CANCELED), None, false, SLOT),
            ErrorKind::Other
        );
    }
}
