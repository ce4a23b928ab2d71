//! Statement functions: the per-job statements wrapped in PL/pgSQL functions of this
//! crate's own, for connections through a transaction pooler.
//!
//! Through PgBouncer's transaction mode nothing may outlive a transaction, so a statement
//! cannot be prepared once per connection: sent unnamed, it is parsed and planned on every
//! execution, and for the claim that costs more than running it (`docs/benchmarks.md`,
//! "Poolers and TLS", has the figures). PL/pgSQL keeps the plan of
//! each statement of a function per server connection instead, and a pooler's server
//! connections live long: calling the function costs the parse and plan of a one-line
//! `SELECT * FROM f($1, ...)`, and the statement itself is planned once per server
//! connection. A function's `SET` clauses give it the plan settings a direct worker
//! connection has for its session (`Conn::plan_with_indexes`), which a transaction pooler
//! cannot keep.
//!
//! A function is named after its statement's text (`<prefix>pgqueuer_rs_<hash>`), so a
//! connection finds it from the text alone, and a function always runs the statement its
//! name was made from: a release that changes a statement makes a new function, and
//! workers of the older release keep theirs. Signatures use only built-in types, so no
//! function depends on a PgQueuer object, and PgQueuer's own `uninstall` is not blocked.

use std::fmt::Write as _;

use super::{claim, queue};
use crate::settings::Settings;

/// The part of a statement function's name that follows the prefix.
const MARK: &str = "pgqueuer_rs_";

/// Finds the statement function whose name ends in `$1` (see [`suffix`]); its name as
/// `regproc` text, qualified when its schema is not on the search path.
///
/// Only a function owned by this session's role (or a role it is a member of) or by a
/// superuser is taken: a function is found in any schema, and one that another role
/// created under the same name would otherwise run with this session's privileges. A
/// worker whose role is not the one `upgrade()` ran as runs its statements unnamed.
pub(crate) const FUNCTION_LOOKUP: &str = "SELECT p.oid::regproc::text FROM pg_catalog.pg_proc p \
     JOIN pg_catalog.pg_roles r ON r.oid = p.proowner \
     WHERE right(p.proname, length($1::text)) = $1::text \
     AND (r.rolsuper OR pg_catalog.pg_has_role(p.proowner, 'MEMBER')) \
     ORDER BY p.oid LIMIT 1";

/// Which of the functions named `$1` exist in the schema `$2` (NULL: the current one), in
/// order. Read from `pg_proc` with the statement's snapshot, not through the catalog
/// caches (as `to_regproc` would), so that it sees functions another upgrade committed
/// while this one waited for the lock.
pub(crate) const FUNCTIONS_EXIST: &str = "SELECT EXISTS (\
     SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
     WHERE p.proname = lower(f.name) AND n.nspname = lower(COALESCE($2::text, current_schema()))) \
     FROM unnest($1::text[]) WITH ORDINALITY AS f(name, i) ORDER BY i";

/// FNV-1a, 64 bits: a hash that every release and platform computes alike, unlike the
/// standard library's, which may change between Rust versions.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How the name of the function of `text` ends: `pgqueuer_rs_` and 16 hex digits.
pub(crate) fn suffix(text: &str) -> String {
    format!("{MARK}{:016x}", fnv1a(text))
}

/// The name of the function of `text` for `s`, unqualified; `None` when the prefix is too
/// long for it to fit PostgreSQL's 63 bytes (the statement then always runs unnamed).
pub(crate) fn function_name(s: &Settings, text: &str) -> Option<String> {
    let name = format!("{}{}", s.prefix, suffix(text));
    (name.len() <= 63).then_some(name)
}

/// The call of a statement function with `params` bind parameters.
pub(crate) fn call(function: &str, params: usize) -> String {
    let mut out = format!("SELECT * FROM {function}(");
    for i in 1..=params {
        if i > 1 {
            out.push_str(", ");
        }
        let _ = write!(out, "${i}");
    }
    out.push(')');
    out
}

/// The statements worth a function: those a worker and a producer run per job or per
/// claim. Operator statements stay unnamed; they run too rarely for planning to matter.
pub(crate) fn per_job_statements(s: &Settings) -> Vec<String> {
    let claims = claim::ClaimSql::new(s);
    let mut out: Vec<String> = claims.every_shape().map(str::to_owned).collect();
    out.extend([
        claim::queue_complete_many(s),
        claim::queue_complete_plain(s),
        claim::queue_heartbeat_many(s),
        claim::queue_retry(s),
        claim::queue_release_many(s),
        claim::queue_next_due(s),
        claim::queue_next_due_recent(s),
        claim::queue_slots_in_use(s),
        claim::queue_owned(s),
    ]);
    let q = queue::QueueSql::new(s);
    out.extend([
        q.insert_many_raise,
        q.insert_many_skip,
        q.insert_many_update_priority,
    ]);
    out
}

/// A statement function's definition: `params` and `columns` (name, type) as the server
/// describes the statement, each type a qualified built-in name.
///
/// The body hands the statement's rows back one by one (`FOR ... LOOP RETURN NEXT`), the
/// output columns being PL/pgSQL variables of the same names; `use_column` makes every
/// name in the statement mean what it means outside the function, where PL/pgSQL would
/// otherwise take those variables. The `SET` clauses are a direct worker session's plan
/// settings.
pub(crate) fn create(
    function: &str,
    params: &[String],
    columns: &[(String, String)],
    text: &str,
) -> String {
    let quote = super::quote_identifier;
    let signature = params.join(", ");
    let outputs: Vec<String> = columns
        .iter()
        .map(|(name, ty)| format!("{} {ty}", quote(name)))
        .collect();
    let targets: Vec<String> = columns.iter().map(|(name, _)| quote(name)).collect();
    format!(
        "CREATE OR REPLACE FUNCTION {function}({signature})\n\
         RETURNS TABLE ({outputs})\n\
         LANGUAGE plpgsql VOLATILE\n\
         SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off\n\
         SET jit = off SET plan_cache_mode = force_generic_plan\n\
         AS $pgqueuer_rs$\n\
         #variable_conflict use_column\n\
         BEGIN\n\
         FOR {targets} IN\n{text}\nLOOP\n    RETURN NEXT;\nEND LOOP;\n\
         END\n\
         $pgqueuer_rs$",
        outputs = outputs.join(", "),
        targets = targets.join(", "),
    )
}

/// Drops every statement function of `s`'s prefix in its schema, of every release.
pub(crate) fn drop_all(s: &Settings) -> String {
    let schema = match &s.schema {
        Some(schema) => format!("'{}'", schema.to_ascii_lowercase()),
        None => "current_schema()".to_owned(),
    };
    let prefix = s.prefix.to_ascii_lowercase();
    format!(
        "DO $pgqueuer_rs$\n\
         DECLARE f regprocedure;\n\
         BEGIN\n\
         FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p\n\
         JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace\n\
         WHERE n.nspname = {schema} AND p.proname ~ '^{prefix}{MARK}[0-9a-f]{{16}}$'\n\
         LOOP EXECUTE 'DROP FUNCTION ' || f; END LOOP;\n\
         END\n\
         $pgqueuer_rs$;\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_text_and_the_prefix() {
        let s = Settings::default();
        let a = function_name(&s, "SELECT 1").unwrap();
        assert_eq!(a, format!("pgqueuer_rs_{:016x}", fnv1a("SELECT 1")));
        assert_ne!(Some(a), function_name(&s, "SELECT 2"));
        assert_eq!(suffix("SELECT 1").len(), "pgqueuer_rs_".len() + 16);
        let prefixed = Settings::with_prefix("app_").schema("myq");
        assert_eq!(
            function_name(&prefixed, "SELECT 1"),
            Some(format!("app_{}", suffix("SELECT 1")))
        );
        let long = Settings::with_prefix(&"p".repeat(40));
        assert_eq!(function_name(&long, "SELECT 1"), None);
        // FNV-1a's published test vector: the hash must not change between releases.
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn calls_pass_every_parameter() {
        assert_eq!(call("f", 0), "SELECT * FROM f()");
        assert_eq!(call("s.f", 3), "SELECT * FROM s.f($1, $2, $3)");
    }

    #[test]
    fn every_per_job_statement_is_distinct_and_fits_its_body() {
        for s in [
            Settings::default(),
            Settings::with_prefix("app_").schema("myq"),
        ] {
            let texts = per_job_statements(&s);
            let names: std::collections::BTreeSet<String> =
                texts.iter().filter_map(|t| function_name(&s, t)).collect();
            assert_eq!(names.len(), texts.len(), "two statements share a function");
            for text in &texts {
                assert!(!text.contains("$pgqueuer_rs$"), "{text}");
            }
        }
    }
}
