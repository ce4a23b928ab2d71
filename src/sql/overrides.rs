//! The stored limits (`pgq limits set`): per entrypoint, a concurrency limit and rate
//! limits that override what workers declare, every change logged, and the notification
//! that tells running workers to read them again. Beside them, what each running worker
//! declares, so that `pgq limits` can show both.
//!
//! Like the rates table these tables are this crate's own, left out of the catalog
//! description (`catalog.sql`) and unknown to PgQueuer. The notification goes on a
//! channel of its own (the queue's channel with `_rs_limits` appended): PgQueuer's
//! listeners, on the queue's channel, never see a payload they cannot parse.

use crate::settings::Settings;

/// Creates the stored limits table and its change log, if absent.
pub(crate) fn overrides_create(s: &Settings) -> String {
    let table = s.qualify(&s.limits_table());
    let log = s.qualify(&s.limits_log_table());
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         entrypoint text PRIMARY KEY,\n    \
         concurrency_limit integer CHECK (concurrency_limit >= 0),\n    \
         rates text[],\n    \
         changed timestamptz NOT NULL DEFAULT now(),\n    \
         changed_by text NOT NULL\n);\n\
         CREATE TABLE IF NOT EXISTS {log} (\n    \
         id bigserial PRIMARY KEY,\n    \
         changed timestamptz NOT NULL DEFAULT now(),\n    \
         changed_by text NOT NULL,\n    \
         db_user text NOT NULL DEFAULT session_user,\n    \
         entrypoint text NOT NULL,\n    \
         action text NOT NULL CHECK (action IN ('set', 'unset')),\n    \
         concurrency_limit integer,\n    \
         rates text[]\n);\n\
         CREATE TABLE IF NOT EXISTS {declared} (\n    \
         worker uuid NOT NULL,\n    \
         entrypoint text NOT NULL,\n    \
         concurrency_limit integer NOT NULL,\n    \
         rates text[] NOT NULL,\n    \
         seen timestamptz NOT NULL DEFAULT now(),\n    \
         PRIMARY KEY (worker, entrypoint)\n);\n",
        declared = s.qualify(&s.declared_table()),
    )
}

/// Drops both tables (for `uninstall`).
pub(crate) fn overrides_drop(s: &Settings) -> String {
    format!(
        "DROP TABLE IF EXISTS {};\nDROP TABLE IF EXISTS {};\nDROP TABLE IF EXISTS {};\n",
        s.qualify(&s.declared_table()),
        s.qualify(&s.limits_log_table()),
        s.qualify(&s.limits_table())
    )
}

/// How long a worker's declaration is shown after it was last refreshed: three of the
/// worker's refreshes (every 10 s) may be missed.
pub(crate) const DECLARED_FRESH_SECS: i64 = 35;

/// Records what worker `$1 uuid` declares: `$2 text[]` its entrypoints, `$3 int[]` their
/// concurrency limits (0: none) and `$4 text[]` their rate limits, each as text joined by
/// commas (`100/s,1000/h`; empty: none), aligned. Refreshes the worker's rows, and deletes
/// the rows of workers gone for an hour.
pub(crate) fn declared_upsert(s: &Settings) -> String {
    let table = s.qualify(&s.declared_table());
    format!(
        "WITH gone AS (\n    DELETE FROM {table} WHERE seen < now() - INTERVAL '1 hour'\n)\n\
         INSERT INTO {table} AS t (worker, entrypoint, concurrency_limit, rates)\n\
         SELECT $1::uuid, u.entrypoint, u.concurrency_limit,\n       \
         COALESCE(string_to_array(NULLIF(u.rates, ''), ','), '{{}}'::text[])\n\
         FROM UNNEST($2::text[], $3::int[], $4::text[]) AS u(entrypoint, concurrency_limit, rates)\n\
         ON CONFLICT (worker, entrypoint) DO UPDATE SET\n    \
         concurrency_limit = EXCLUDED.concurrency_limit, rates = EXCLUDED.rates, seen = now()"
    )
}

/// Deletes worker `$1 uuid`'s declarations (it stops).
pub(crate) fn declared_delete(s: &Settings) -> String {
    format!(
        "DELETE FROM {} WHERE worker = $1::uuid",
        s.qualify(&s.declared_table())
    )
}

/// The declarations of workers seen within [`DECLARED_FRESH_SECS`], by entrypoint and
/// worker.
pub(crate) fn declared_select(s: &Settings) -> String {
    format!(
        "SELECT worker, entrypoint, concurrency_limit, rates, seen FROM {}\n\
         WHERE seen >= now() - {DECLARED_FRESH_SECS} * INTERVAL '1 second'\n\
         ORDER BY entrypoint, worker",
        s.qualify(&s.declared_table())
    )
}

/// Stores entrypoint `$1`'s limits: `$2 int` the concurrency limit and `$3 text[]` the
/// rate limits, each NULL to keep what is stored (NULL too where nothing is), by `$4`;
/// logs the change and notifies `$5` (the limits channel) with the entrypoint. Returns
/// the stored row.
pub(crate) fn overrides_set(s: &Settings) -> String {
    let table = s.qualify(&s.limits_table());
    let log = s.qualify(&s.limits_log_table());
    format!(
        "WITH stored AS (\n    \
         INSERT INTO {table} AS t (entrypoint, concurrency_limit, rates, changed_by)\n    \
         VALUES ($1::text, $2::int, $3::text[], $4::text)\n    \
         ON CONFLICT (entrypoint) DO UPDATE SET\n        \
         concurrency_limit = COALESCE(EXCLUDED.concurrency_limit, t.concurrency_limit),\n        \
         rates = COALESCE(EXCLUDED.rates, t.rates),\n        \
         changed = now(), changed_by = EXCLUDED.changed_by\n    \
         RETURNING entrypoint, concurrency_limit, rates, changed, changed_by\n),\n\
         logged AS (\n    \
         INSERT INTO {log} (changed_by, entrypoint, action, concurrency_limit, rates)\n    \
         SELECT changed_by, entrypoint, 'set', concurrency_limit, rates FROM stored\n)\n\
         SELECT entrypoint, concurrency_limit, rates, changed, changed_by,\n       \
         (SELECT COUNT(*) FROM (SELECT pg_notify($5::text, entrypoint) FROM stored) n) AS notified\n\
         FROM stored"
    )
}

/// Deletes entrypoint `$1`'s stored limits, by `$2`, logging and notifying `$3` as
/// [`overrides_set`] does; returns a row when there were any.
pub(crate) fn overrides_unset(s: &Settings) -> String {
    let table = s.qualify(&s.limits_table());
    let log = s.qualify(&s.limits_log_table());
    format!(
        "WITH gone AS (\n    DELETE FROM {table} WHERE entrypoint = $1::text RETURNING entrypoint\n),\n\
         logged AS (\n    \
         INSERT INTO {log} (changed_by, entrypoint, action) SELECT $2::text, entrypoint, 'unset' FROM gone\n)\n\
         SELECT entrypoint,\n       \
         (SELECT COUNT(*) FROM (SELECT pg_notify($3::text, entrypoint) FROM gone) n) AS notified\n\
         FROM gone"
    )
}

/// Every stored limit, by entrypoint (`$1 text[]`: only these; NULL: all).
pub(crate) fn overrides_select(s: &Settings) -> String {
    let table = s.qualify(&s.limits_table());
    format!(
        "SELECT entrypoint, concurrency_limit, rates, changed, changed_by FROM {table}\n\
         WHERE $1::text[] IS NULL OR entrypoint = ANY($1::text[]) ORDER BY entrypoint"
    )
}

/// The latest `$1 bigint` changes, newest first.
pub(crate) fn overrides_log(s: &Settings) -> String {
    let log = s.qualify(&s.limits_log_table());
    format!(
        "SELECT changed, changed_by, db_user, entrypoint, action, concurrency_limit, rates\n\
         FROM {log} ORDER BY id DESC LIMIT $1::bigint"
    )
}
