//! The rates table (the units of every rate limit, `crate::rate` says how they keep one)
//! and the parts of the claim statement that spend them.
//!
//! The table is this crate's own: PgQueuer neither has nor reads it, and the catalog
//! description leaves it out (`catalog.sql`), so PgQueuer's `upgrade --plan` and the
//! schema comparisons see PgQueuer's objects only. It is always logged, whatever the
//! durability setting: a limit must hold across a server restart.
//!
//! Spending a unit rewrites its stamp, one row per started job. So that this stays cheap,
//! no index holds the stamp: every spend is then a HOT update (the table leaves half of
//! each page free for them), which writes no index entry and whose dead versions are
//! pruned as pages are read. An index on the stamp made each spend write two index
//! entries, and claims that scanned it for the oldest stamps walked every dead entry left
//! since the last vacuum (0.1 ms more per claim for each 8,000 spends, measured with
//! `psql`). A claim instead reads units in the primary key's order from a random unit of
//! the window, wrapping round: any unit rested for a window may be spent, whatever its
//! age, so the order changes nothing a limit promises.

use crate::settings::Settings;

/// Creates the rates table, if absent (see the module docs for its shape).
pub(crate) fn rates_create(s: &Settings) -> String {
    let table = s.qualify(&s.rates_table());
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         entrypoint text NOT NULL,\n    \
         per_us bigint NOT NULL CHECK (per_us > 0),\n    \
         unit integer NOT NULL CHECK (unit >= 0),\n    \
         started timestamptz NOT NULL DEFAULT '-infinity',\n    \
         worker uuid,\n    \
         PRIMARY KEY (entrypoint, per_us, unit)\n) WITH (fillfactor = 50);\n"
    )
}

/// Drops the rates table (for `uninstall`).
pub(crate) fn rates_drop(s: &Settings) -> String {
    format!("DROP TABLE IF EXISTS {};\n", s.qualify(&s.rates_table()))
}

/// Whether the rates table exists: `$1` its name, `$2` its schema (NULL: the current one).
/// Read from `pg_class` with the statement's snapshot.
pub(crate) const RATES_EXIST: &str = "SELECT EXISTS (\
     SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE c.relname = lower($1::text) AND c.relkind = 'r' \
     AND n.nspname = lower(COALESCE($2::text, current_schema())))";

/// Makes the units of windows that lack them: `$1` entrypoints (text[]), `$2` windows in
/// microseconds (int8[]), `$3` starts per window (int8[]), aligned. A new unit has never
/// been spent. Units beyond a window's starts (left by a larger limit) stay and are not
/// spent.
pub(crate) fn rates_provision(s: &Settings) -> String {
    let table = s.qualify(&s.rates_table());
    format!(
        "INSERT INTO {table} (entrypoint, per_us, unit)\n\
         SELECT w.entrypoint, w.per_us, g.unit::int\n\
         FROM UNNEST($1::text[], $2::bigint[], $3::bigint[]) AS w(entrypoint, per_us, starts)\n\
         CROSS JOIN LATERAL generate_series(0::bigint, w.starts - 1) AS g(unit)\n\
         ON CONFLICT DO NOTHING"
    )
}

/// The claim's CTEs that find the units a claim may spend, before the claim's candidates
/// are chosen. `first` is the number of the first of the five rate parameters: windows'
/// entrypoints (text[]), lengths in microseconds (int8[]), starts (int8[]) and cooldowns
/// (int8[]: the length and its guard), aligned; then the margin of the worker that asks
/// whether the rates are far from binding (int8, see [`plenty_cte`]; 0 when the caller
/// does not ask).
///
/// `rate_windows` also draws each window's random first unit (`off`, see the module
/// docs). `rate_units` holds, per window, up to a batch of units rested enough to be
/// spent, locked (skipping those another claim holds; the lock re-checks a unit spent
/// since the snapshot), from `off` on and then from the window's first unit; `rate_room`,
/// per rate-limited entrypoint, how many jobs the claim may start: the fewest units any
/// of its windows could lend; `rate_plenty`, whether every window is far from binding for
/// the asking worker (see [`plenty_cte`]).
pub(crate) fn rate_room_ctes(s: &Settings, first: usize) -> [String; 4] {
    let table = s.qualify(&s.rates_table());
    let (ep, per, starts, cooldown, plenty) = (first, first + 1, first + 2, first + 3, first + 4);
    [
        format!(
            "rate_windows AS MATERIALIZED (\n    SELECT w.entrypoint, w.per_us, w.starts, w.cooldown_us,\n           \
             floor(random() * w.starts)::int AS off\n    \
             FROM UNNEST(${ep}::text[], ${per}::bigint[], ${starts}::bigint[], ${cooldown}::bigint[]) \
             AS w(entrypoint, per_us, starts, cooldown_us)\n)"
        ),
        format!(
            "rate_units AS MATERIALIZED (\n    SELECT w.entrypoint, w.per_us, u.unit,\n           \
             ROW_NUMBER() OVER (PARTITION BY w.entrypoint, w.per_us ORDER BY u.part, u.unit) AS rank\n    \
             FROM rate_windows w\n    \
             CROSS JOIN LATERAL (\n        {}\n    ) u\n)",
            rested_units(&table, "$1::int")
        ),
        "rate_room AS (\n    SELECT w.entrypoint, MIN(COALESCE(c.units, 0)) AS room\n    \
         FROM rate_windows w\n    \
         LEFT JOIN (SELECT entrypoint, per_us, COUNT(*) AS units FROM rate_units GROUP BY entrypoint, per_us) c\n      \
         ON c.entrypoint = w.entrypoint AND c.per_us = w.per_us\n    \
         GROUP BY w.entrypoint\n)"
            .into(),
        plenty_cte(&table, &format!("${plenty}::bigint")),
    ]
}

/// `rate_plenty`: whether every window of `rate_windows` is far from binding: at most
/// half of its units were spent within the last window, as a sample of 64 units from the
/// window's random first unit on says, and it has at least four times `margin` (a bigint
/// expression: what one worker may hold) units, so that one worker's claims cannot spend
/// what is left at once. The sample keeps the cost of the answer the same for a rate of
/// ten thousand and of ten; the answer only decides how the worker claims, never whether
/// a unit may be spent.
fn plenty_cte(table: &str, margin: &str) -> String {
    format!(
        "rate_plenty AS (\n    \
         SELECT COALESCE(bool_and(w.starts >= 4 * {margin} AND n.sampled > 0 AND 2 * n.rested >= n.sampled), FALSE) AS plenty\n    \
         FROM rate_windows w\n    \
         CROSS JOIN LATERAL (\n        \
         SELECT COUNT(*) AS sampled,\n               \
         COUNT(*) FILTER (WHERE x.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond') AS rested\n        \
         FROM (\n            SELECT r.started FROM {table} r\n            \
         WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us AND r.unit >= w.off AND r.unit < w.starts\n            \
         ORDER BY r.unit LIMIT 64\n        ) x\n    ) n\n)"
    )
}

/// A lease of units for a worker's next claims while its rates are far from binding
/// (`worker::rate_gate`): per window bound by `$1`..`$4` (as for the claim), up to `$5 int`
/// rested units, locked and stamped with the worker's id `$6 uuid` and with the end of the
/// lease's life, `$8 bigint` microseconds from now (a start anywhere from now to that
/// stamp and its guard keeps a window between it and the unit's uses before and after:
/// `crate::rate`), but only while
/// every window is far from binding for a worker whose margin is `$7 bigint` (see
/// [`plenty_cte`]; none otherwise, so that a rate coming to bind wastes no unit on a
/// lease). Returns per entrypoint the units leased (`units`, the fewest of its windows),
/// and `plenty`.
///
/// The units are spent for starts that have not happened yet: the worker starts each job
/// within the lease's life and the guard after it sent this statement (so within the guard
/// after the stamp), or spends fresh units.
pub(crate) fn rate_lease(s: &Settings) -> String {
    let table = s.qualify(&s.rates_table());
    let [windows, _, _, _] = rate_room_ctes(s, 1);
    format!(
        "WITH\n{windows},\n\
         {plenty},\n\
         units AS MATERIALIZED (\n    SELECT w.entrypoint, w.per_us, u.unit\n    \
         FROM rate_windows w\n    \
         CROSS JOIN LATERAL (\n        {rested}\n    ) u\n    \
         WHERE (SELECT plenty FROM rate_plenty)\n),\n\
         spent AS (\n    UPDATE {table} r\n    \
         SET started = clock_timestamp() + $8::bigint * INTERVAL '1 microsecond', worker = $6::uuid\n    \
         FROM units u\n    \
         WHERE r.entrypoint = u.entrypoint AND r.per_us = u.per_us AND r.unit = u.unit\n    \
         RETURNING r.entrypoint, r.per_us\n)\n\
         SELECT w.entrypoint, MIN(COALESCE(c.n, 0))::bigint AS units,\n       \
         (SELECT plenty FROM rate_plenty) AS plenty\n\
         FROM rate_windows w\n\
         LEFT JOIN (SELECT entrypoint, per_us, COUNT(*) AS n FROM spent GROUP BY entrypoint, per_us) c\n  \
         ON c.entrypoint = w.entrypoint AND c.per_us = w.per_us\n\
         GROUP BY w.entrypoint",
        rested = rested_units(&table, "$5::int"),
        plenty = plenty_cte(&table, "$7::bigint"),
    )
}

/// Up to `n` units of window `w` (a row of `rate_windows`) rested enough to be spent,
/// locked, skipping those another claim holds: `unit` and `part` (0 from the window's
/// random first unit `w.off` on, 1 from its start). The second part is read only where the
/// first has too few: a `LIMIT` stops pulling rows, and rows not pulled are not locked.
fn rested_units(table: &str, n: &str) -> String {
    let rested = "r.entrypoint = w.entrypoint AND r.per_us = w.per_us\n              \
                  AND r.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond'";
    format!(
        "SELECT b.part, b.unit FROM (\n            \
         SELECT * FROM (SELECT 0 AS part, r.unit FROM {table} r\n             \
         WHERE {rested}\n              AND r.unit >= w.off AND r.unit < w.starts\n             \
         ORDER BY r.unit LIMIT {n} FOR UPDATE SKIP LOCKED) first\n            \
         UNION ALL\n            \
         SELECT * FROM (SELECT 1 AS part, r.unit FROM {table} r\n             \
         WHERE {rested}\n              AND r.unit < w.off\n             \
         ORDER BY r.unit LIMIT {n} FOR UPDATE SKIP LOCKED) wrapped\n        \
         ) b LIMIT {n}"
    )
}

/// The claim's CTEs that spend units once the jobs are claimed, and say when the next
/// start would be allowed. They read `claimed` (the claimed rows): a stale re-pick spends
/// a unit as a fresh claim does, since its handler starts again.
///
/// `rate_wait` is, for the rate-limited entrypoints whose units bounded this claim and
/// that still have due jobs it did not take, how many microseconds until each of their
/// windows has a unit again (the soonest entrypoint's); NULL when no such entrypoint waits
/// (or the units it waits for are held by claims in flight).
pub(crate) fn rate_spend_ctes(s: &Settings) -> [String; 3] {
    let table = s.qualify(&s.rates_table());
    let queue = s.qualify(&s.queue_table);
    [
        "rate_taken AS (\n    SELECT entrypoint, COUNT(*) AS taken FROM claimed GROUP BY entrypoint\n)"
            .into(),
        format!(
            "rate_spent AS (\n    UPDATE {table} r SET started = clock_timestamp(), worker = $3::uuid\n    \
             FROM rate_units u JOIN rate_taken t ON t.entrypoint = u.entrypoint\n    \
             WHERE r.entrypoint = u.entrypoint AND r.per_us = u.per_us AND r.unit = u.unit AND u.rank <= t.taken\n    \
             RETURNING r.unit\n)"
        ),
        format!(
            "rate_wait AS (\n    SELECT MIN(ready_us) AS wait_us FROM (\n        \
             SELECT w.entrypoint, MAX(CASE\n            \
             WHEN COALESCE(c.units, 0) > COALESCE(t.taken, 0) THEN 0\n            \
             ELSE EXTRACT(EPOCH FROM (LEAST(o.oldest, CASE WHEN COALESCE(t.taken, 0) > 0 THEN clock_timestamp() END) - clock_timestamp())) * 1000000 + w.cooldown_us\n        \
             END) AS ready_us\n        \
             FROM rate_windows w\n        \
             JOIN rate_room m ON m.entrypoint = w.entrypoint AND m.room < $1::int\n        \
             LEFT JOIN (SELECT entrypoint, per_us, COUNT(*) AS units FROM rate_units GROUP BY entrypoint, per_us) c\n          \
             ON c.entrypoint = w.entrypoint AND c.per_us = w.per_us\n        \
             LEFT JOIN rate_taken t ON t.entrypoint = w.entrypoint\n        \
             LEFT JOIN LATERAL (\n            SELECT MIN(x.started) AS oldest FROM {table} x\n            \
             WHERE x.entrypoint = w.entrypoint AND x.per_us = w.per_us\n              \
             AND x.started > NOW() - w.cooldown_us * INTERVAL '1 microsecond' AND x.unit < w.starts\n        \
             ) o ON TRUE\n        \
             WHERE EXISTS (\n            SELECT 1 FROM {queue} q\n            \
             WHERE q.entrypoint = w.entrypoint AND q.status = 'queued' AND q.execute_after < NOW()\n              \
             AND q.id <> ALL(ARRAY(SELECT id FROM claimed))\n        )\n        \
             GROUP BY w.entrypoint\n    ) waits\n)"
        ),
    ]
}

/// A late start's own units (a worker's handler that could not start within the guard of
/// its claim, see `worker::rate_gate`): one unit of each window bound by `$1`..`$4` (as
/// for the claim, the windows of one entrypoint), locked and stamped `$6 bigint`
/// microseconds from now (0, or more where the statement took longer than the guard
/// before: a lease's reasoning) with the worker's id `$5 uuid`, as a claim stamps its
/// own, when every
/// window lends one, none otherwise. Returns `spent`, and `wait_us`: when nothing was
/// spent, microseconds until each window's oldest resting unit has rested (0, or NULL,
/// where the window's rested units are all held by claims in flight).
pub(crate) fn rate_spend_late(s: &Settings) -> String {
    let table = s.qualify(&s.rates_table());
    let [windows, _, _, _] = rate_room_ctes(s, 1);
    let rested = rested_units(&table, "1");
    format!(
        "WITH\n{windows},\n\
         units AS MATERIALIZED (\n    SELECT w.entrypoint, w.per_us, u.unit\n    \
         FROM rate_windows w\n    \
         CROSS JOIN LATERAL (\n        {rested}\n    ) u\n),\n\
         whole AS (\n    SELECT (SELECT COUNT(*) FROM units) = (SELECT COUNT(*) FROM rate_windows) AS ok\n),\n\
         spent AS (\n    UPDATE {table} r\n    \
         SET started = clock_timestamp() + $6::bigint * INTERVAL '1 microsecond', worker = $5::uuid\n    \
         FROM units u, whole\n    \
         WHERE whole.ok AND r.entrypoint = u.entrypoint AND r.per_us = u.per_us AND r.unit = u.unit\n    \
         RETURNING r.unit\n)\n\
         SELECT (SELECT ok FROM whole) AS spent,\n       \
         (SELECT GREATEST(MAX(EXTRACT(EPOCH FROM (o.oldest - clock_timestamp())) * 1000000 + w.cooldown_us), 0)::bigint\n        \
         FROM rate_windows w\n        \
         CROSS JOIN LATERAL (\n            SELECT MIN(x.started) AS oldest FROM {table} x\n            \
         WHERE x.entrypoint = w.entrypoint AND x.per_us = w.per_us AND x.unit < w.starts\n              \
         AND x.started > NOW() - w.cooldown_us * INTERVAL '1 microsecond'\n        ) o\n        \
         WHERE NOT EXISTS (SELECT 1 FROM units u WHERE u.per_us = w.per_us)) AS wait_us"
    )
}

/// For `explain`: microseconds until every window of entrypoint `$1 text` that has units
/// in the table has one rested (its length and guard, as `crate::rate` sets them, after
/// its oldest resting unit was spent); NULL when some unit of each window is free now
/// (or the entrypoint has no units). The table knows the units, not the limits workers
/// declare: units left by a larger limit count as free.
pub(crate) fn rates_next_start(s: &Settings) -> String {
    let table = s.qualify(&s.rates_table());
    format!(
        "SELECT MAX(wait_us)::bigint FROM (\n    \
         SELECT CASE WHEN COUNT(*) FILTER (WHERE started > resting_since) >= COUNT(*)\n        \
         THEN EXTRACT(EPOCH FROM (MIN(started) FILTER (WHERE started > resting_since) - resting_since)) * 1000000\n        \
         END AS wait_us\n    \
         FROM (SELECT per_us, started,\n                 \
         now() - (per_us + LEAST(per_us / 50, 20000)) * INTERVAL '1 microsecond' AS resting_since\n          \
         FROM {table} WHERE entrypoint = $1::text) u\n    \
         GROUP BY per_us, resting_since\n) w"
    )
}

/// For the limit watch, per window of `$1 text[]` entrypoints and `$2 bigint[]` lengths in
/// microseconds (aligned, returned in that order with `entrypoint` and `per_us`): the
/// units spent within the last window (`spent`), and the entrypoint's picked jobs, picked
/// within it, whose worker spent no unit of the window since (`undeclared`). A claim that
/// declares the window stamps a unit with its worker's id for each job it picks, re-picks
/// too, no earlier than the pick, and a unit is not spent twice within a window: such a
/// job was claimed by a worker that does not declare the window (Python PgQueuer's never
/// do).
pub(crate) fn rates_in_use(s: &Settings) -> String {
    let table = s.qualify(&s.rates_table());
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT w.entrypoint, w.per_us,\n       \
         (SELECT COUNT(*) FROM {table} r WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us\n          \
         AND r.started > now() - w.per_us * INTERVAL '1 microsecond') AS spent,\n       \
         (SELECT COUNT(*) FROM {queue} q WHERE q.entrypoint = w.entrypoint AND q.status = 'picked'::{status}\n          \
         AND q.updated > now() - w.per_us * INTERVAL '1 microsecond'\n          \
         AND NOT EXISTS (SELECT 1 FROM {table} r WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us\n              \
         AND r.started >= q.updated AND r.worker = q.queue_manager_id)) AS undeclared\n\
         FROM UNNEST($1::text[], $2::bigint[]) WITH ORDINALITY AS w(entrypoint, per_us, ord)\n\
         ORDER BY w.ord"
    )
}

/// Every window with units in the table, by entrypoint and length: the units spent within
/// the last window (`spent`) and the units (`units`: the largest limit declared for the
/// window since its units were made).
pub(crate) fn rates_by_window(s: &Settings) -> String {
    let table = s.qualify(&s.rates_table());
    format!(
        "SELECT entrypoint, per_us,\n       \
         COUNT(*) FILTER (WHERE started > now() - per_us * INTERVAL '1 microsecond') AS spent,\n       \
         COUNT(*) AS units\n\
         FROM {table} GROUP BY entrypoint, per_us ORDER BY entrypoint, per_us"
    )
}
