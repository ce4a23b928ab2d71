//! The slot-claiming dequeue and the statements that end a claim (complete, heartbeat,
//! retry), rendered once per [`Settings`].
//!
//! The claim comes in eight shapes: three gatings ([`Gating`]: none, where no entrypoint
//! of this worker carries a `concurrency_limit`; careful, near a limit; relaxed, with every
//! limit far from full, in a form that counts the slots in use and one that does not)
//! times with or without a per-worker budget (`max_concurrent_tasks`), each also in an
//! ending form. The ungated shape contains no capacity machinery at all.
//!
//! Bind parameters of every shape: `$1` batch size (int4), `$2` entrypoints (text[]),
//! `$3` worker id (uuid), `$4` heartbeat timeout in microseconds (int8); then, when
//! capacity-gated, `$5` limits (int8[], aligned with `$2`) and `$6` the slot shift
//! (float8 in `[0, 1)`: where in `0..limit` each entrypoint's search for free slots
//! starts, as a fraction of its limit, or, relaxed, where its slots are taken from); then
//! the budget (int8) as the next parameter when budget-gated.
//!
//! Capacity-gated shapes return the slots in use fleet-wide before the claim (`in_use`,
//! int8[] aligned with `$2`, 0 for an unlimited entrypoint; NULL from a relaxed claim
//! that does not count) and whether a held job of a limited entrypoint is out of the slot
//! index's reach (`unguarded`, see [`unguarded`]) on every row.

use super::JOB_COLUMNS;
use crate::settings::Settings;

/// How a claim treats the limited entrypoints' candidate rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gating {
    /// No entrypoint has a limit: no capacity machinery at all.
    None,
    /// Near a limit: the window of candidates is fixed before any lock is taken, so a
    /// claim cannot slide past rows another claim is taking (it reports contention and is
    /// retried, which keeps the claims in priority order while slots run out).
    Careful,
    /// Every limit far from full: candidates are locked as unlimited ones are, skipping
    /// rows another claim holds, so that two claims in flight at once take different
    /// jobs rather than collide on the same window, and slots are taken in turn from
    /// where the lane left off, with no search ([`relaxed_claim`]). The slot index still
    /// decides.
    Relaxed,
}

impl Gating {
    /// Every gating, in the order [`ClaimSql`] keeps them.
    pub(crate) const ALL: [Gating; 3] = [Gating::None, Gating::Careful, Gating::Relaxed];
}

/// The rendered shapes of the claim statement.
#[derive(Debug, Clone)]
pub(crate) struct ClaimSql {
    /// Indexed by `[gating][budget_gated][ending]`.
    shapes: [[[String; 2]; 2]; 3],
    /// The shapes that also keep rate limits (always capacity-gated, so careful or
    /// relaxed), indexed by `[relaxed][budget_gated][ending]`.
    rated: [[[String; 2]; 2]; 2],
    /// The shapes that keep rate limits for a claimer without concurrency limits (no
    /// slots: see [`rated_unslotted`]), indexed by `[budget_gated][ending]`.
    rated_unslotted: [[String; 2]; 2],
    /// The relaxed shapes that do not count the slots in use (see
    /// [`relaxed_uncounted_claim`]), indexed by `[budget_gated][ending]`.
    uncounted: [[String; 2]; 2],
}

impl ClaimSql {
    pub(crate) fn new(s: &Settings) -> ClaimSql {
        let shape = |gating: Gating, budget: bool, rated: bool| {
            if gating == Gating::Relaxed && !rated {
                return [
                    relaxed_claim(s, budget, false),
                    relaxed_claim(s, budget, true),
                ];
            }
            [
                queue_claim(s, gating, budget, false, rated),
                queue_claim(s, gating, budget, true, rated),
            ]
        };
        ClaimSql {
            shapes: Gating::ALL
                .map(|gating| [shape(gating, false, false), shape(gating, true, false)]),
            rated: [Gating::Careful, Gating::Relaxed]
                .map(|gating| [shape(gating, false, true), shape(gating, true, true)]),
            rated_unslotted: [false, true].map(|budget| {
                [
                    rated_unslotted(s, budget, false),
                    rated_unslotted(s, budget, true),
                ]
            }),
            uncounted: [false, true].map(|budget| {
                [
                    relaxed_uncounted_claim(s, budget, false),
                    relaxed_uncounted_claim(s, budget, true),
                ]
            }),
        }
    }

    pub(crate) fn get(&self, gating: Gating, budget_gated: bool, ending: bool) -> &str {
        &self.shapes[gating as usize][usize::from(budget_gated)][usize::from(ending)]
    }

    /// A shape that keeps rate limits too; `relaxed` as [`Gating::Relaxed`].
    pub(crate) fn get_rated(&self, relaxed: bool, budget_gated: bool, ending: bool) -> &str {
        &self.rated[usize::from(relaxed)][usize::from(budget_gated)][usize::from(ending)]
    }

    /// The shape that keeps rate limits for a claimer without concurrency limits.
    pub(crate) fn get_rated_unslotted(&self, budget_gated: bool, ending: bool) -> &str {
        &self.rated_unslotted[usize::from(budget_gated)][usize::from(ending)]
    }

    /// The relaxed shape that does not count the slots in use.
    pub(crate) fn get_uncounted(&self, budget_gated: bool, ending: bool) -> &str {
        &self.uncounted[usize::from(budget_gated)][usize::from(ending)]
    }

    /// Every shape, each once: what a claimer may run (see `sql::functions`, which makes
    /// each a statement function for transaction poolers).
    pub(crate) fn every_shape(&self) -> impl Iterator<Item = &str> {
        self.shapes
            .iter()
            .chain(self.rated.iter())
            .chain([&self.rated_unslotted, &self.uncounted])
            .flatten()
            .flatten()
            .map(String::as_str)
    }

    /// Every shape with a name that says what it is (`claim-relaxed-budget-ending`), for
    /// the rendered statements checked in beside this file (`src/sql/rendered/`).
    #[cfg(test)]
    pub(crate) fn named_shapes(&self) -> Vec<(String, &str)> {
        let name = |kind: &str, budget: usize, ending: usize| {
            let mut n = format!("claim-{kind}");
            if budget == 1 {
                n.push_str("-budget");
            }
            if ending == 1 {
                n.push_str("-ending");
            }
            n
        };
        let mut out = Vec::new();
        for (g, gating) in ["unlimited", "careful", "relaxed"].iter().enumerate() {
            for b in 0..2 {
                for e in 0..2 {
                    out.push((name(gating, b, e), self.shapes[g][b][e].as_str()));
                }
            }
        }
        for (r, kind) in ["rated-careful", "rated-relaxed"].iter().enumerate() {
            for b in 0..2 {
                for e in 0..2 {
                    out.push((name(kind, b, e), self.rated[r][b][e].as_str()));
                }
            }
        }
        for b in 0..2 {
            for e in 0..2 {
                out.push((
                    name("rated-unslotted", b, e),
                    self.rated_unslotted[b][e].as_str(),
                ));
                out.push((
                    name("relaxed-uncounted", b, e),
                    self.uncounted[b][e].as_str(),
                ));
            }
        }
        out
    }
}

/// Renders one shape of the claim statement.
///
/// The `ending` shapes first end claims, as [`queue_complete_many`] does, with three more
/// parameters after the others: ids (bigint[]), statuses (text[]) and tracebacks (text[]).
/// Ending and claiming then commit together, and the slots of the ended rows are free to
/// this very claim: each is excluded from the held slots only once its row is deleted (the
/// exclusion reads the rows the deletion returned), so the slot index never sees two live
/// holders. They return one row at least, with the ended ids in `ended`.
///
/// The `rated` shapes (capacity-gated only) also keep rate limits, with five parameters
/// after all others (see [`super::rates::rate_room_ctes`]): a rate-limited entrypoint
/// takes no more fresh jobs than its units allow, as though that were its remaining
/// capacity, and spends one unit per fresh job in each of its windows. They return
/// `rate_wait_us` (int8 or NULL) on every row: how long until a rate-limited entrypoint
/// with due jobs left behind could start one; and `rate_plenty` (bool): whether every
/// window is far from binding for the worker whose margin the last parameter gives.
pub(crate) fn queue_claim(
    s: &Settings,
    gating: Gating,
    budget_gated: bool,
    ending: bool,
    rated: bool,
) -> String {
    let capacity_gated = gating != Gating::None;
    let rated = rated && capacity_gated;
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let budget_param = if capacity_gated { "$7" } else { "$5" };
    let tail = Tail::at(
        5 + 2 * usize::from(capacity_gated)
            + usize::from(budget_gated)
            + 3 * usize::from(ending)
            + 5 * usize::from(rated),
    );
    // Rows this statement ends are no longer held, for the slot and budget counts.
    let (mut ctes, not_ended) = ending_prelude(
        s,
        ending,
        5 + 2 * usize::from(capacity_gated) + usize::from(budget_gated),
    );
    let budget_ok = budget_check(budget_gated, budget_param);
    if rated {
        let first = 5 + 2 + usize::from(budget_gated) + 3 * usize::from(ending);
        ctes.extend(super::rates::rate_room_ctes(s, first));
    }
    if capacity_gated {
        let [params, picked, available] = capacity_ctes(&queue, not_ended);
        ctes.push(params);
        ctes.push(picked);
        if rated {
            // A rate-limited entrypoint's units bound its fresh claims as its free slots
            // do (the smaller of the two, with both).
            ctes.push(
                "available AS (\n    SELECT p.entrypoint, p.concurrency_limit,\n           \
                 CASE WHEN p.concurrency_limit > 0 THEN LEAST(p.concurrency_limit - COALESCE(k.total, 0), r.room)\n                \
                 ELSE r.room END AS remaining\n    \
                 FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint\n    \
                 LEFT JOIN rate_room r ON r.entrypoint = p.entrypoint\n    \
                 WHERE (p.concurrency_limit <= 0 OR COALESCE(k.total, 0) < p.concurrency_limit)\n      \
                 AND (r.room IS NULL OR r.room > 0)\n)"
                    .into(),
            );
        } else {
            ctes.push(available);
        }
    } else {
        ctes.push("available AS (\n    SELECT UNNEST($2::text[]) AS entrypoint\n)".into());
    }
    if budget_gated {
        ctes.push(worker_load_cte(&queue, budget_param, not_ended));
    }
    if capacity_gated {
        ctes.push(format!(
            "unlimited_claims AS (\n    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a\n    \
             {floor}\n    CROSS JOIN LATERAL (\n        {rows}\n    ) c\n    \
             WHERE a.remaining IS NULL{budget_ok}\n)",
            floor = tail.floor_join(),
            rows = from_floor(
                &queue,
                "ctid AS tid, id, priority, entrypoint",
                "$1::int",
                " FOR UPDATE SKIP LOCKED"
            ),
        ));
        if gating == Gating::Relaxed {
            // Relaxed: the window is locked as it is read, skipping rows another claim
            // holds (see `Gating`); a row that changed before its lock is re-checked by the
            // lock itself, so every row of the window is a claim.
            ctes.push(format!(
                "limited_window AS (\n    SELECT w.tid, w.id, w.priority, w.entrypoint FROM available a\n    \
                 {floor}\n    CROSS JOIN LATERAL (\n        {rows}\n    ) w\n    \
                 WHERE a.remaining IS NOT NULL{budget_ok}\n)",
                floor = tail.floor_join(),
                rows = from_floor(
                    &queue,
                    "ctid AS tid, id, priority, entrypoint",
                    "LEAST($1::int, a.remaining)",
                    " FOR UPDATE SKIP LOCKED"
                ),
            ));
            ctes.push(
                "limited_attempts AS (\n    SELECT id AS window_id, tid, id, priority, entrypoint FROM limited_window\n)"
                    .into(),
            );
        } else {
            // Careful: the window of candidates is fixed before any lock is taken, so SKIP
            // LOCKED cannot slide past rows another worker is claiming right now.
            ctes.push(format!(
                "limited_window AS (\n    SELECT w.id FROM available a\n    \
                 {floor}\n    CROSS JOIN LATERAL (\n        {rows}\n    ) w\n    \
                 WHERE a.remaining IS NOT NULL{budget_ok}\n)",
                floor = tail.floor_join(),
                rows = from_floor(&queue, "id, priority", "LEAST($1::int, a.remaining)", ""),
            ));
            // Windowed candidates that could not be locked (another claim holds or took
            // them) are kept with a NULL id, so the statement can report contention. Each
            // is probed by primary key: the re-check is wrapped in IS TRUE so that no
            // partial index on queued rows qualifies (without statistics the planner once
            // chose to walk the whole `(entrypoint, priority, id)` index for every probe).
            ctes.push(format!(
                "limited_attempts AS (\n    SELECT w.id AS window_id, t.tid, t.id, t.priority, t.entrypoint FROM limited_window w\n    \
                 LEFT JOIN LATERAL (\n        SELECT target.ctid AS tid, target.id, target.priority, target.entrypoint FROM {queue} target\n        \
                 WHERE target.id = w.id AND (target.{FRESH}) IS TRUE\n        \
                 FOR UPDATE OF target SKIP LOCKED\n    ) t ON TRUE\n)"
            ));
        }
        ctes.push(
            "limited_claims AS (\n    SELECT tid, id, priority, entrypoint FROM limited_attempts WHERE id IS NOT NULL\n)".into(),
        );
        ctes.push(
            "next_queued AS (\n    SELECT tid, id, priority, entrypoint FROM (\n        \
             SELECT tid, id, priority, entrypoint FROM unlimited_claims\n        UNION ALL\n        \
             SELECT tid, id, priority, entrypoint FROM limited_claims\n    ) u\n    \
             ORDER BY priority DESC, id ASC LIMIT $1::int\n)"
                .into(),
        );
    } else {
        ctes.push(next_queued_cte(&queue, tail, "$1::int", &budget_ok));
    }
    ctes.push(next_stale_cte(&queue, tail, &budget_ok));
    let eligible_limit = eligible_limit(budget_gated);
    if rated {
        // A stale re-pick starts its job again: it spends a unit like a fresh claim, so
        // a rate-limited entrypoint takes no more rows of either kind than its room.
        ctes.push(format!(
            "eligible AS (\n    SELECT tid, id, priority, entrypoint, fresh FROM (\n        \
             SELECT u.*, ROW_NUMBER() OVER (PARTITION BY u.entrypoint ORDER BY u.priority DESC, u.id ASC) AS rate_rank\n        \
             FROM (\n            \
             SELECT tid, id, priority, entrypoint, TRUE AS fresh FROM next_queued\n            UNION ALL\n            \
             SELECT tid, id, priority, entrypoint, FALSE AS fresh FROM next_stale\n        ) u\n    ) r\n    \
             WHERE r.rate_rank <= COALESCE((SELECT m.room FROM rate_room m WHERE m.entrypoint = r.entrypoint), r.rate_rank)\n    \
             ORDER BY priority DESC, id ASC LIMIT {eligible_limit}\n)"
        ));
    } else {
        ctes.push(format!(
            "eligible AS (\n    SELECT tid, id, priority, entrypoint, fresh FROM (\n        \
             SELECT tid, id, priority, entrypoint, TRUE AS fresh FROM next_queued\n        UNION ALL\n        \
             SELECT tid, id, priority, entrypoint, FALSE AS fresh FROM next_stale\n    ) u\n    \
             ORDER BY priority DESC, id ASC LIMIT {eligible_limit}\n)"
        ));
    }
    // Where units bound a claim, an entrypoint without a concurrency limit has a
    // `remaining` but takes no slot.
    let slotted = if rated {
        " AND a.concurrency_limit > 0"
    } else {
        ""
    };
    if capacity_gated {
        // The slots each limited entrypoint's rows hold, modulo its limit (a slot at or
        // above the limit, left by a larger one, holds its slot modulo the limit). Each
        // entrypoint's range of the slot index is read on its own (`OFFSET 0` keeps the
        // lateral from being flattened into a join), so a claim reads the slots of its own
        // entrypoints only, however many other entrypoints hold.
        ctes.push(format!(
            "held_slots AS (\n    SELECT a.entrypoint, h.slot % a.concurrency_limit AS slot, h.slot AS held, a.concurrency_limit AS lim\n    \
             FROM available a\n    \
             CROSS JOIN LATERAL (\n        \
             SELECT h.slot FROM {queue} h\n        \
             WHERE h.entrypoint = a.entrypoint AND h.status = 'picked' AND h.slot IS NOT NULL{not_ended}\n        \
             OFFSET 0\n    \
             ) h\n    \
             WHERE a.remaining IS NOT NULL AND a.concurrency_limit > 0\n)"
        ));
        // `held + take` slots from the shift on (wrapping round below the limit) minus
        // the slots held: at least `take` are free, and the search never depends on the
        // size of the limit itself. Claims that start their searches apart (a worker's
        // two lanes) take different slots while the limit is far from full.
        ctes.push(format!(
            "free_slots AS (\n    SELECT a.entrypoint, s.slot,\n           \
             ROW_NUMBER() OVER (PARTITION BY a.entrypoint ORDER BY s.n) AS rank\n    \
             FROM available a\n    \
             CROSS JOIN LATERAL (\n        \
             SELECT g.n, (g.n + floor(a.concurrency_limit * $6::float8)::bigint) % a.concurrency_limit AS slot\n        \
             FROM generate_series(0::bigint, (a.concurrency_limit - a.remaining) + LEAST($1::int, a.remaining) - 1) AS g(n)\n    \
             ) s\n    \
             WHERE a.remaining IS NOT NULL{slotted}\n      \
             AND NOT EXISTS (\n          \
             SELECT 1 FROM held_slots hs WHERE hs.entrypoint = a.entrypoint AND hs.slot = s.slot\n      )\n)"
        ));
        // Each limited entrypoint's free slots in the order they are given, as one array:
        // a fresh row takes the element of its rank among the entrypoint's fresh rows.
        // Every join below then pairs a claim's rows with one row per entrypoint. (Joined
        // row to row, on id and rank, the generic plan chose a nested loop whose work grew
        // with the square of the batch: 130 ms for a claim of 1,000.) MATERIALIZED, so that
        // it is computed once: inlined, it became the inner side of a nested loop over the
        // eligible rows (worker sessions plan with sorts off), and its window functions ran
        // again for every row (docs/benchmarks.md has the cost).
        ctes.push(format!(
            "slot_assignments AS MATERIALIZED (\n    \
             SELECT a.entrypoint, ARRAY(SELECT f.slot FROM free_slots f WHERE f.entrypoint = a.entrypoint ORDER BY f.rank) AS slots\n    \
             FROM available a\n    \
             WHERE a.remaining IS NOT NULL{slotted}\n)"
        ));
        // Each eligible row with its rank among its entrypoint's fresh rows (or stale ones).
        ctes.push(
            "ranked AS (\n    SELECT tid, id, entrypoint, fresh,\n           \
             ROW_NUMBER() OVER (PARTITION BY entrypoint, fresh ORDER BY priority DESC, id ASC)::int AS rank\n    \
             FROM eligible\n)"
                .into(),
        );
        ctes.push(format!(
            "claimed AS (\n    UPDATE {queue} job\n    \
             SET status = 'picked', updated = NOW(), heartbeat = NOW(), queue_manager_id = $3::uuid,\n        \
             slot = CASE WHEN e.fresh THEN sa.slots[e.rank] ELSE job.slot END\n    \
             FROM ranked e\n    \
             LEFT JOIN slot_assignments sa ON sa.entrypoint = e.entrypoint\n    \
             LEFT JOIN params p ON p.entrypoint = e.entrypoint\n    \
             WHERE job.ctid = e.tid AND job.id = e.id\n      \
             AND (NOT e.fresh OR p.concurrency_limit <= 0 OR sa.slots[e.rank] IS NOT NULL)\n    \
             RETURNING job.*\n)"
        ));
    } else {
        ctes.push(format!(
            "claimed AS (\n    UPDATE {queue}\n    \
             SET status = 'picked', updated = NOW(), heartbeat = NOW(), queue_manager_id = $3::uuid\n    \
             WHERE ctid = ANY(ARRAY(SELECT tid FROM eligible))\n    RETURNING *\n)"
        ));
    }
    ctes.push(log_pick_cte(&log));
    if rated {
        ctes.extend(super::rates::rate_spend_ctes(s));
    }
    let ended = if ending {
        ", ended.ids AS ended FROM (SELECT ARRAY(SELECT job_id FROM log_end) AS ids) ended"
    } else {
        ""
    };
    if capacity_gated {
        // One row at least: `contended` counts windowed candidates another claim locked
        // or took first, so the caller can tell "lost a race, retry now" from "nothing
        // to do". With no claimed job the row's job columns are NULL.
        let rate_wait = if rated {
            ",\n           (SELECT wait_us::bigint FROM rate_wait) AS rate_wait_us,\n           \
             (SELECT plenty FROM rate_plenty) AS rate_plenty"
        } else {
            ""
        };
        let unguarded = unguarded_held();
        ctes.push(format!(
            "contention AS (\n    SELECT COUNT(*) FILTER (WHERE id IS NULL) AS contended,\n           \
             (SELECT ARRAY(SELECT COALESCE(k.total, 0) FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint ORDER BY p.ord)) AS in_use,\n           \
             {unguarded} AS unguarded{rate_wait}\n    \
             FROM limited_attempts\n)",
        ));
        let from = if ending {
            " CROSS JOIN contention"
        } else {
            " FROM contention"
        };
        format!(
            "WITH\n{}\nSELECT {}, contention.contended, contention.in_use, contention.unguarded{}{ended}{from} LEFT JOIN claimed ON TRUE \
             ORDER BY priority DESC, id ASC",
            ctes.join(",\n"),
            JOB_COLUMNS,
            if rated {
                ", contention.rate_wait_us, contention.rate_plenty"
            } else {
                ""
            },
        )
    } else if ending {
        format!(
            "WITH\n{}\nSELECT {}{ended} LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC",
            ctes.join(",\n"),
            JOB_COLUMNS
        )
    } else {
        format!(
            "WITH\n{}\nSELECT {} FROM claimed ORDER BY priority DESC, id ASC",
            ctes.join(",\n"),
            JOB_COLUMNS
        )
    }
}

/// The relaxed claim (every limit far from full, no rate limits: see [`Gating::Relaxed`]).
/// Candidates are locked as unlimited ones are, and each fresh job of a limited entrypoint
/// takes the next slot from where this claim's lane left off, `floor(limit * $6)` on
/// (wrapping round below the limit), with no search for free slots: while the limit is
/// far from full the slots ahead of a lane are almost always free, and the unique slot
/// index rejects the claim (23505, a lost race, claimed again at once from elsewhere)
/// when one is not. It binds and returns what the gated shapes do; `contended` is 0.
///
/// This shape counts the slots in use and looks for jobs held out of the slot index's
/// reach (`in_use`, `unguarded`). That reads every job the entrypoints hold, and the slot
/// index, not the count, keeps a relaxed claim within the limit, so the worker counts
/// only now and then (see `worker::dispatcher`) and otherwise claims with
/// [`relaxed_uncounted_claim`].
pub(crate) fn relaxed_claim(s: &Settings, budget_gated: bool, ending: bool) -> String {
    let queue = s.qualify(&s.queue_table);
    let (mut ctes, not_ended) = ending_prelude(s, ending, 7 + usize::from(budget_gated));
    ctes.extend(capacity_ctes(&queue, not_ended));
    relaxed_tail(
        s,
        Tail::at(7 + usize::from(budget_gated) + 3 * usize::from(ending)),
        ctes,
        not_ended,
        budget_gated,
        ending,
        "LEAST($1::int, COALESCE(a.remaining, $1::int))",
        &format!(
            "ARRAY(SELECT COALESCE(k.total, 0) FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint ORDER BY p.ord) AS in_use,\n           \
             {} AS unguarded",
            unguarded(&queue)
        ),
    )
}

/// [`relaxed_claim`] without the count: every entrypoint is claimed as an unlimited one
/// is (a relaxed claim's batch is smaller than any of its limits: see `relax_margin` in
/// `worker::builder`), the limits are read from the parameters for the slots alone, and
/// `in_use` is NULL and `unguarded` false. A job held out of the slot index's reach is
/// found by the next claim that counts, as one held without a slot always was; meanwhile
/// the slot index still rejects every slot already held. The count's joins, though never
/// read, and the two probes of the slot index's ends were close to half of what a relaxed
/// claim cost beyond an unlimited one (docs/benchmarks.md).
pub(crate) fn relaxed_uncounted_claim(s: &Settings, budget_gated: bool, ending: bool) -> String {
    let (mut ctes, not_ended) = ending_prelude(s, ending, 7 + usize::from(budget_gated));
    ctes.push("available AS (\n    SELECT UNNEST($2::text[]) AS entrypoint\n)".into());
    relaxed_tail(
        s,
        Tail::at(7 + usize::from(budget_gated) + 3 * usize::from(ending)),
        ctes,
        not_ended,
        budget_gated,
        ending,
        "$1::int",
        "NULL::bigint[] AS in_use, FALSE AS unguarded",
    )
}

/// The part of the relaxed claims after `available`: `ctes` so far (the ending prelude and
/// `available`, with `entrypoint` and whatever `take` reads), `not_ended` as
/// [`ending_prelude`] gave it, `take` how many due rows of an entrypoint of `available a`
/// the claim may lock, and `figures` the `in_use` and `unguarded` columns, over `params`
/// and `picked` where those exist.
///
/// The rows are claimed as the unlimited shape claims them (by their addresses, with no
/// join), and each fresh row of a limited entrypoint takes its slot from its place in the
/// claim: its limit is looked up in `$5` by its entrypoint, and whether it is fresh is its
/// status before the update. The shape it replaced ranked the rows with a window function
/// and joined the update to them, which cost a relaxed claim more than its slots did
/// (docs/benchmarks.md).
#[expect(
    clippy::too_many_arguments,
    reason = "the parts the two relaxed shapes differ in, each a plain value"
)]
fn relaxed_tail(
    s: &Settings,
    tail: Tail,
    mut ctes: Vec<String>,
    not_ended: &str,
    budget_gated: bool,
    ending: bool,
    take: &str,
    figures: &str,
) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let budget_param = "$7";
    let budget_ok = budget_check(budget_gated, budget_param);
    if budget_gated {
        ctes.push(worker_load_cte(&queue, budget_param, not_ended));
    }
    ctes.push(next_queued_cte(&queue, tail, take, &budget_ok));
    ctes.push(next_stale_cte(&queue, tail, &budget_ok));
    let eligible_limit = eligible_limit(budget_gated);
    ctes.push(format!(
        "eligible AS (\n    SELECT tid, id, priority, entrypoint FROM (\n        \
         SELECT tid, id, priority, entrypoint FROM next_queued\n        UNION ALL\n        \
         SELECT tid, id, priority, entrypoint FROM next_stale\n    \
         ) u ORDER BY priority DESC, id ASC LIMIT {eligible_limit}\n)"
    ));
    // A row's place in the claim (from 1) numbers its slot from where the lane left off:
    // the places are distinct, so are an entrypoint's slots, the claim being smaller than
    // any limit a relaxed claim sees (`relax_margin`). A stale re-pick (status `picked`
    // before the update) keeps its slot.
    let lim = "($5::bigint[])[array_position($2::text[], job.entrypoint)]";
    ctes.push(format!(
        "claimed AS (\n    UPDATE {queue} job\n    \
         SET status = 'picked', updated = NOW(), heartbeat = NOW(), queue_manager_id = $3::uuid,\n        \
         slot = CASE WHEN job.status = 'queued' AND {lim} > 0\n            \
         THEN ((floor({lim} * $6::float8)::bigint\n                   \
         + array_position(ARRAY(SELECT tid FROM eligible), job.ctid) - 1) % {lim})\n            \
         ELSE job.slot END\n    \
         WHERE job.ctid = ANY(ARRAY(SELECT tid FROM eligible))\n    \
         RETURNING job.*\n)"
    ));
    ctes.push(log_pick_cte(&log));
    let ended = if ending {
        ", ended.ids AS ended FROM (SELECT ARRAY(SELECT job_id FROM log_end) AS ids) ended CROSS JOIN"
    } else {
        " FROM"
    };
    format!(
        "WITH\n{}\nSELECT {}, 0::bigint AS contended,\n       \
         inuse.in_use, inuse.unguarded{ended} (\n    \
         SELECT {figures}\n\
         ) inuse LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC",
        ctes.join(",\n"),
        JOB_COLUMNS,
    )
}

/// The claim of a claimer whose entrypoints carry rate limits but no concurrency limit:
/// no slots, so none of the slot machinery of [`queue_claim`]'s gated shapes. It binds the
/// same parameters as the gated rated shapes (`$5` and `$6` are bound and unused but for
/// the shape of `in_use`) and returns the same columns: `contended` is 0 and `in_use` all
/// zeros, aligned with `$2`. Candidates are locked as they are read, skipping rows another
/// claim holds, as without limits: the units, not the order of the rows, keep the rate.
pub(crate) fn rated_unslotted(s: &Settings, budget_gated: bool, ending: bool) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let budget_param = "$7";
    let (mut ctes, not_ended) = ending_prelude(s, ending, 7 + usize::from(budget_gated));
    let budget_ok = budget_check(budget_gated, budget_param);
    let first = 7 + usize::from(budget_gated) + 3 * usize::from(ending);
    ctes.extend(super::rates::rate_room_ctes(s, first));
    if budget_gated {
        ctes.push(worker_load_cte(&queue, budget_param, not_ended));
    }
    ctes.push(
        "available AS (\n    SELECT u.entrypoint, r.room FROM UNNEST($2::text[]) AS u(entrypoint)\n    \
         LEFT JOIN rate_room r ON r.entrypoint = u.entrypoint\n    \
         WHERE r.room IS NULL OR r.room > 0\n)"
            .into(),
    );
    let tail = Tail::at(first + 5);
    ctes.push(next_queued_cte(
        &queue,
        tail,
        "LEAST($1::int, COALESCE(a.room, $1::int))",
        &budget_ok,
    ));
    ctes.push(next_stale_cte(&queue, tail, &budget_ok));
    let eligible_limit = eligible_limit(budget_gated);
    // A stale re-pick starts its job again: it spends a unit like a fresh claim.
    ctes.push(format!(
        "eligible AS (\n    SELECT tid, id, priority, entrypoint FROM (\n        \
         SELECT u.*, ROW_NUMBER() OVER (PARTITION BY u.entrypoint ORDER BY u.priority DESC, u.id ASC) AS rate_rank\n        \
         FROM (\n            \
         SELECT tid, id, priority, entrypoint FROM next_queued\n            UNION ALL\n            \
         SELECT tid, id, priority, entrypoint FROM next_stale\n        ) u\n    ) r\n    \
         WHERE r.rate_rank <= COALESCE((SELECT m.room FROM rate_room m WHERE m.entrypoint = r.entrypoint), r.rate_rank)\n    \
         ORDER BY priority DESC, id ASC LIMIT {eligible_limit}\n)"
    ));
    ctes.push(format!(
        "claimed AS (\n    UPDATE {queue}\n    \
         SET status = 'picked', updated = NOW(), heartbeat = NOW(), queue_manager_id = $3::uuid\n    \
         WHERE ctid = ANY(ARRAY(SELECT tid FROM eligible))\n    RETURNING *\n)"
    ));
    ctes.push(log_pick_cte(&log));
    ctes.extend(super::rates::rate_spend_ctes(s));
    let ended = if ending {
        ",\n       ARRAY(SELECT job_id FROM log_end) AS ended"
    } else {
        ""
    };
    format!(
        "WITH\n{}\nSELECT {}, 0::bigint AS contended,\n       \
         ARRAY(SELECT 0::bigint FROM UNNEST($5::bigint[]) WHERE $6::float8 IS NOT NULL) AS in_use,\n       \
         FALSE AS unguarded,\n       \
         (SELECT wait_us::bigint FROM rate_wait) AS rate_wait_us,\n       \
         (SELECT plenty FROM rate_plenty) AS rate_plenty{ended}\n\
         FROM (SELECT 1) one LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC",
        ctes.join(",\n"),
        JOB_COLUMNS
    )
}

/// A due queued row.
const FRESH: &str = "status = 'queued' AND execute_after < NOW()";

/// Where a claim's three parameters of its own are: the lane's floors and whether it
/// looks for stale jobs, bound after every other parameter of its shape, from `first` on:
/// `$first int4[]` and `$first+1 int8[]`, each entrypoint's floor (the priority and id of
/// the last job the lane took, aligned with `$2`; NULL: none, read from the top), and
/// `$first+2 bool`, whether the claim re-picks stale jobs.
///
/// A floor is where the lane's previous claim left off: every queued row before it (in
/// claim order, highest priority first, then lowest id) was taken, locked by another
/// claim, not due, or dead as of that claim's snapshot. Reading from it, a claim skips the
/// index entries of the jobs already run, which PostgreSQL cannot remove while another
/// session holds an old snapshot open: without floors every claim walks every one of them
/// (see `worker::floors`, whose sweeps, claims without floors, find what comes to lie
/// behind one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tail {
    first: usize,
}

impl Tail {
    pub(crate) fn at(first: usize) -> Tail {
        Tail { first }
    }

    /// The floor of `a.entrypoint`, as `fl.level` and `fl.fid`, joined laterally.
    fn floor_join(self) -> String {
        let (levels, ids) = (self.first, self.first + 1);
        format!(
            "CROSS JOIN LATERAL (\n        SELECT (${levels}::int4[])[o.k] AS level, (${ids}::int8[])[o.k] AS fid\n        \
             FROM (SELECT array_position($2::text[], a.entrypoint) AS k) o\n    ) fl"
        )
    }

    /// The test that lets a claim look for stale jobs.
    fn stale(self) -> String {
        format!("${}::bool", self.first + 2)
    }
}

/// Up to `take` due queued rows of `a.entrypoint` (`columns` of each), in claim order,
/// read from the floor `fl` of [`Tail::floor_join`]: the rows of a higher priority than
/// the floor's, from the top; those of its priority, from its id on; those of a lower
/// priority, from the top of theirs. Each part is one range of the `(entrypoint, priority
/// DESC, id)` index; with no floor the first part reads from the top and the others read
/// nothing. `lock` is the locking clause of each part, or empty.
fn from_floor(queue: &str, columns: &str, take: &str, lock: &str) -> String {
    let part = |test: &str, name: &str| {
        format!(
            "SELECT * FROM (\n            SELECT {columns} FROM {queue}\n            \
             WHERE entrypoint = a.entrypoint AND {FRESH} AND {test}\n            \
             ORDER BY priority DESC, id ASC LIMIT {take}{lock}\n        ) {name}"
        )
    };
    format!(
        "{}\n        UNION ALL\n        {}\n        UNION ALL\n        {}\n        \
         ORDER BY priority DESC, id ASC LIMIT {take}",
        part("priority >= COALESCE(fl.level + 1, -2147483648)", "above"),
        part("priority = fl.level AND id >= fl.fid", "at_floor"),
        part("priority < fl.level", "below"),
    )
}

/// The `next_queued` CTE of the shapes that lock candidates as they read them, skipping
/// rows another claim holds: for each entrypoint of `available a`, up to `take` (an
/// expression over `a`) due rows from its floor, `$1` at most in all, in claim order.
fn next_queued_cte(queue: &str, tail: Tail, take: &str, budget_ok: &str) -> String {
    format!(
        "next_queued AS (\n    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a\n    \
         {floor}\n    CROSS JOIN LATERAL (\n        {rows}\n    ) c\n    \
         WHERE TRUE{budget_ok}\n    ORDER BY c.priority DESC, c.id ASC LIMIT $1::int\n)",
        floor = tail.floor_join(),
        rows = from_floor(
            queue,
            "ctid AS tid, id, priority, entrypoint",
            take,
            " FOR UPDATE SKIP LOCKED"
        ),
    )
}

/// The most rows a claim takes: the batch, or what the budget leaves when it is gated.
fn eligible_limit(budget_gated: bool) -> &'static str {
    if budget_gated {
        "(SELECT headroom FROM worker_load)"
    } else {
        "$1::int"
    }
}

/// Whether some job of a limited entrypoint (`params`, the limits in force) is held where
/// the unique slot index cannot see it: at a slot at or above the limit (left by a larger
/// limit, lowered since, or declared by another worker), below zero (written by another
/// program), or with no slot at all (picked before the slot column existed, or by a
/// worker without the limit), as far as `picked` counted them. Only a claim that counts
/// such jobs keeps the limit exact (the careful search treats a slot above the limit as
/// holding its slot modulo the limit).
///
/// The relaxed claim reads the lowest and highest slot of each limit from the ends of its
/// range of the slot index (`min` and `max` are each planned as one probe, whatever the
/// parameters; a `LIMIT 1` over `slot >= limit` was planned, generically, as a walk of
/// every picked row). The careful claims, which read every held slot of their limited
/// entrypoints anyway (`held_slots`), look there instead ([`unguarded_held`]).
fn unguarded(queue: &str) -> String {
    let held = |end: &str| {
        format!(
            "(SELECT {end}(h.slot) FROM {queue} h WHERE h.entrypoint = p.entrypoint\n                     \
             AND h.status = 'picked' AND h.slot IS NOT NULL)"
        )
    };
    format!(
        "(EXISTS (SELECT 1 FROM params p WHERE p.concurrency_limit > 0\n               \
         AND ({max} >= p.concurrency_limit\n                 \
         OR {min} < 0))\n            \
         OR {UNSLOTTED_HELD})",
        max = held("max"),
        min = held("min"),
    )
}

/// Whether `picked` counted a job of a limited entrypoint held with no slot (the part of
/// [`unguarded`] and [`unguarded_held`] that reads no slot).
const UNSLOTTED_HELD: &str = "EXISTS (SELECT 1 FROM params p JOIN picked k ON k.entrypoint = p.entrypoint\n                       \
     WHERE p.concurrency_limit > 0 AND k.unslotted > 0)";

/// [`unguarded`] for the claims that read every held slot of their limited entrypoints
/// with room (`held_slots`, with each raw slot and its limit). An entrypoint without room
/// is not read there, and needs not be: its limit is full, so no claim of it is relaxed.
fn unguarded_held() -> String {
    format!(
        "(EXISTS (SELECT 1 FROM held_slots hs WHERE hs.held < 0 OR hs.held >= hs.lim)\n            \
         OR {UNSLOTTED_HELD})"
    )
}

/// The parts every claim shape shares: the CTEs that end claims first (when `ending`, with
/// the three outcome parameters from `$first` on), and the filter that leaves the ended
/// rows out of the counts (empty otherwise).
fn ending_prelude(s: &Settings, ending: bool, first: usize) -> (Vec<String>, &'static str) {
    if !ending {
        return (Vec::new(), "");
    }
    let ctes = ending_ctes(
        s,
        &format!("${first}::bigint[]"),
        &format!("${}::text[]", first + 1),
        &format!("${}::text[]", first + 2),
        "$3::uuid",
    );
    (
        ctes.into_iter().collect(),
        " AND id <> ALL(ARRAY(SELECT id FROM ended_rows))",
    )
}

/// The per-worker budget's test (no new claim once this worker holds `budget` jobs), or
/// nothing without a budget.
fn budget_check(budget_gated: bool, budget_param: &str) -> String {
    if budget_gated {
        format!(" AND (SELECT total FROM worker_load) < {budget_param}::bigint")
    } else {
        String::new()
    }
}

/// The jobs this worker holds, and how many more its budget lets it take.
fn worker_load_cte(queue: &str, budget_param: &str, not_ended: &str) -> String {
    format!(
        "worker_load AS (\n    SELECT COUNT(*) AS total,\n           \
         GREATEST(LEAST($1::int, {budget_param}::bigint - COUNT(*)), 0) AS headroom\n    \
         FROM {queue} WHERE queue_manager_id = $3::uuid AND entrypoint = ANY($2::text[]){not_ended}\n)"
    )
}

/// A dead worker's jobs to take over, locked, when the claim looks for them (`tail`'s
/// flag: only now and then, since the search reads the heartbeat index's entries of every
/// picked row version, and each heartbeat and claim leaves one that a held snapshot keeps).
/// Stale re-picks are never gated by a concurrency limit: the row already holds its slot.
fn next_stale_cte(queue: &str, tail: Tail, budget_ok: &str) -> String {
    format!(
        "next_stale AS (\n    SELECT ctid AS tid, id, priority, entrypoint FROM {queue}\n    \
         WHERE {stale} AND status = 'picked' AND entrypoint = ANY($2::text[])\n      \
         AND heartbeat < NOW() - $4::bigint * INTERVAL '1 microsecond'\n      \
         AND execute_after < NOW(){budget_ok}\n    \
         ORDER BY priority DESC, id ASC\n    FOR UPDATE SKIP LOCKED\n    LIMIT $1::int\n)",
        stale = tail.stale(),
    )
}

/// The `picked` log row of every claimed job.
fn log_pick_cte(log: &str) -> String {
    format!(
        "log_pick AS (\n    INSERT INTO {log} (job_id, status, entrypoint, priority)\n    \
         SELECT id, status, entrypoint, priority FROM claimed\n)"
    )
}

/// The limits bound by `$2` and `$5`, the slots in use fleet-wide (`picked`: every row
/// with an owner, less those this claim ends, and how many of them hold no slot), and
/// the entrypoints with room (`available`, `remaining` NULL for an unlimited one).
fn capacity_ctes(queue: &str, not_ended: &str) -> [String; 3] {
    [
        "params AS (\n    SELECT u.entrypoint, u.concurrency_limit, u.ord\n    FROM UNNEST($2::text[], $5::bigint[]) WITH ORDINALITY AS u(entrypoint, concurrency_limit, ord)\n)".into(),
        format!(
            "picked AS (\n    SELECT entrypoint, COUNT(*) AS total,\n           \
             COUNT(*) FILTER (WHERE slot IS NULL) AS unslotted FROM {queue}\n    \
             WHERE entrypoint = ANY($2::text[]) AND queue_manager_id IS NOT NULL{not_ended}\n    GROUP BY entrypoint\n)"
        ),
        "available AS (\n    SELECT p.entrypoint, p.concurrency_limit,\n           \
         CASE WHEN p.concurrency_limit > 0 THEN p.concurrency_limit - COALESCE(k.total, 0) END AS remaining\n    \
         FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint\n    \
         WHERE p.concurrency_limit <= 0 OR COALESCE(k.total, 0) < p.concurrency_limit\n)"
            .into(),
    ]
}

// Statements that end or refresh a claim lock the rows they touch with SKIP LOCKED and
// never wait for a row lock. A concurrent claim can hold a lock on a row this worker owns
// (it locked the row when it was still queued in its snapshot, and keeps the lock after
// the re-check fails) while itself waiting, in the slot index's uniqueness check, for
// this worker's transaction: waiting here would be a deadlock. Skipped rows are retried a
// moment later, once that claim has finished. (The plain ending, `queue_complete_plain`,
// waits instead, for a bounded time that ends such a deadlock.)
//
// Their plans must not depend on table statistics (a queue table is often far larger, or
// smaller, than its last ANALYZE says, and prepared statements keep a generic plan made
// when the table was tiny). So each id is probed through the primary key in a LATERAL
// subquery (a locking subquery is never flattened into a join that could choose a
// sequential scan), the owner test is written so that no index can serve it, and the
// locked rows are then changed by their row address (a TID scan). A row changed by
// another transaction between the statement's snapshot and its lock is locked at its new
// address, which the snapshot cannot see: it is left unchanged, stays owned, and is
// retried by the caller like a skipped row.

/// A `FROM` item yielding `tid` and `id` of the rows of `ids` (a `bigint[]` expression,
/// each id once however often it is listed) owned by `worker` (a `uuid` expression),
/// locked, skipping rows locked by others.
fn lock_owned(queue: &str, ids: &str, worker: &str) -> String {
    owned_rows(queue, ids, worker, "\n        FOR UPDATE SKIP LOCKED")
}

/// [`lock_owned`]'s `FROM` item with `locking` (empty or a locking clause) after the
/// probe.
fn owned_rows(queue: &str, ids: &str, worker: &str, locking: &str) -> String {
    format!(
        "(SELECT DISTINCT UNNEST({ids}) AS id) AS wanted\n    CROSS JOIN LATERAL (\n        \
         SELECT ctid AS tid, id FROM {queue}\n        \
         WHERE id = wanted.id AND queue_manager_id IS NOT DISTINCT FROM {worker}{locking}\n    \
         ) owned_row"
    )
}

/// The rows of `$1` (ids) this worker (`$2`) owns, without locking them.
pub(crate) fn queue_owned(s: &Settings) -> String {
    let rows = owned_rows(&s.qualify(&s.queue_table), "$1::bigint[]", "$2::uuid", "");
    format!("SELECT owned_row.id FROM {rows}")
}

/// The CTEs that end claims: delete (or, for `failed`, hold) the rows of `ids` this
/// worker (`worker`) still owns, and write one log row per row ended. `ended_rows` holds
/// the ended rows (id, entrypoint, priority) once the rows are changed; `log_end` returns
/// the logged ids. `ids`, `statuses` (text[]) and `tracebacks` (text[] of JSON or NULL)
/// are aligned array expressions.
fn ending_ctes(
    s: &Settings,
    ids: &str,
    statuses: &str,
    tracebacks: &str,
    worker: &str,
) -> [String; 7] {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let status = s.qualify(&s.queue_status_type);
    let lock = lock_owned(&queue, ids, worker);
    [
        format!(
            "job_status AS (\n    \
             SELECT UNNEST({ids}) AS id, UNNEST({statuses})::{status} AS status, UNNEST({tracebacks})::jsonb AS traceback\n)"
        ),
        format!("owned AS (\n    SELECT owned_row.tid, owned_row.id FROM {lock}\n)"),
        "ending AS (\n    SELECT o.tid, js.id, js.status, js.traceback FROM owned o JOIN job_status js ON js.id = o.id\n)".into(),
        format!(
            "deleted AS (\n    DELETE FROM {queue}\n    \
             WHERE ctid = ANY(ARRAY(SELECT tid FROM ending WHERE status <> 'failed'))\n    \
             RETURNING id, entrypoint, priority\n)"
        ),
        format!(
            "held AS (\n    UPDATE {queue} SET status = 'failed', updated = NOW(), queue_manager_id = NULL\n    \
             WHERE ctid = ANY(ARRAY(SELECT tid FROM ending WHERE status = 'failed'))\n    \
             RETURNING id, entrypoint, priority\n)"
        ),
        "ended_rows AS (\n    SELECT * FROM deleted UNION ALL SELECT * FROM held\n)".into(),
        format!(
            "log_end AS (\n    INSERT INTO {log} (job_id, status, entrypoint, priority, traceback)\n    \
             SELECT e.id, e.status, m.entrypoint, m.priority, e.traceback\n    \
             FROM ending e JOIN ended_rows m ON m.id = e.id\n    \
             RETURNING job_id\n)"
        ),
    ]
}

/// Ends claims (see [`ending_ctes`]). `$1` ids, `$2` statuses (text[]), `$3` tracebacks
/// (text[] of JSON or NULL), `$4` the worker id. Returns the logged ids.
pub(crate) fn queue_complete_many(s: &Settings) -> String {
    let ctes = ending_ctes(s, "$1::bigint[]", "$2::text[]", "$3::text[]", "$4::uuid");
    format!("WITH\n{}\nSELECT job_id FROM log_end", ctes.join(",\n"))
}

/// How long [`queue_complete_plain`] waits for a row lock before it gives up (SQLSTATE
/// 55P03), leaving the outcomes to [`queue_complete_many`]. A concurrent claim holds a
/// lock on one of our rows for the rest of its statement (it locked the row while it was
/// queued in its snapshot), a few milliseconds; a row locked longer is another session's,
/// and must not hold up the outcomes beside it. It also ends the one deadlock the plain
/// statement can meet (see [`queue_complete_plain`]), well before PostgreSQL's deadlock
/// check (`deadlock_timeout`, 1 s by default) would.
pub(crate) const PLAIN_END_LOCK_TIMEOUT_MS: u32 = 50;

/// Ends successful claims the plain way: deletes the rows of `$1` (ids) this worker
/// (`$2`) owns, and logs each as `successful`. Returns the logged ids; the others (rows
/// changed meanwhile, or all of them when a row lock outlasted the lock timeout) are for
/// [`queue_complete_many`].
///
/// [`queue_complete_many`] probes and locks each row with `SKIP LOCKED` before it deletes
/// it, so that it never waits for a row lock. This statement does without the lock step
/// (a heap write and a WAL record per row), the per-row probe and the outcome arrays, and
/// may wait: for a claim that locked one of our rows while it was queued in the claim's
/// snapshot, which lasts a few milliseconds. Such a claim may itself be waiting, in the
/// slot index's uniqueness check, for this transaction (it takes a slot a row deleted
/// here still holds): a deadlock, which the lock timeout (`lock_timeout`, set for this
/// transaction only, before the first row is deleted) ends after
/// [`PLAIN_END_LOCK_TIMEOUT_MS`]: this statement writes nothing, the claim meets the
/// still-held slot and is retried as a lost race, and [`queue_complete_many`] ends the
/// outcomes. The timeout also keeps a row another session keeps locked from holding up
/// the rest.
///
/// Plan: `id = ANY($1)` is read through the primary key (the owner test is written so
/// that no index can serve it, as in [`owned_rows`]). A row changed between the
/// statement's snapshot and the deletion is re-checked against the owner, and left alone
/// when another worker has re-picked it.
pub(crate) fn queue_complete_plain(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    format!(
        "WITH\ndeleted AS (\n    DELETE FROM {queue}\n    \
         WHERE id = ANY($1::bigint[]) AND queue_manager_id IS NOT DISTINCT FROM $2::uuid\n      \
         AND (SELECT set_config('lock_timeout', '{PLAIN_END_LOCK_TIMEOUT_MS}ms', true)) IS NOT NULL\n    \
         RETURNING id, entrypoint, priority\n),\n\
         log_end AS (\n    INSERT INTO {log} (job_id, status, entrypoint, priority)\n    \
         SELECT id, 'successful', entrypoint, priority FROM deleted\n    RETURNING job_id\n)\n\
         SELECT job_id FROM log_end"
    )
}

/// Refreshes the heartbeat of the rows this worker owns. `$1` ids, `$2` the worker id.
/// Returns the refreshed ids.
pub(crate) fn queue_heartbeat_many(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let lock = lock_owned(&queue, "$1::bigint[]", "$2::uuid");
    format!(
        "UPDATE {queue} SET heartbeat = NOW()\n\
         WHERE ctid = ANY(ARRAY(SELECT owned_row.tid FROM {lock}))\n\
         RETURNING id"
    )
}

/// Requeues one job this worker owns after a delay, counting the attempt, with a
/// `queued` log row carrying the reason. `$1` id, `$2` delay in microseconds, `$3`
/// traceback JSON text, `$4` the worker id. Returns the id when the row was changed.
pub(crate) fn queue_retry(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let lock = lock_owned(&queue, "ARRAY[$1::bigint]", "$4::uuid");
    format!(
        "WITH retry AS (\n    UPDATE {queue}\n    \
         SET status = 'queued', execute_after = NOW() + $2::bigint * INTERVAL '1 microsecond',\n        \
         attempts = attempts + 1, updated = NOW(), queue_manager_id = NULL\n    \
         WHERE ctid = ANY(ARRAY(SELECT owned_row.tid FROM {lock}))\n    \
         RETURNING id, entrypoint, priority\n)\n\
         INSERT INTO {log} (job_id, status, entrypoint, priority, traceback)\n\
         SELECT id, 'queued', entrypoint, priority, $3::text::jsonb FROM retry\n\
         RETURNING job_id"
    )
}

/// Gives the rows of `$1` (ids) this worker (`$2`) owns back to the queue, unstarted:
/// `queued` again with no owner, `attempts` unchanged, and a `queued` log row each.
/// Returns the released ids.
pub(crate) fn queue_release_many(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let log = s.qualify(&s.queue_table_log);
    let lock = lock_owned(&queue, "$1::bigint[]", "$2::uuid");
    format!(
        "WITH released AS (\n    UPDATE {queue} SET status = 'queued', updated = NOW(), queue_manager_id = NULL\n    \
         WHERE ctid = ANY(ARRAY(SELECT owned_row.tid FROM {lock}))\n    \
         RETURNING id, entrypoint, priority\n)\n\
         INSERT INTO {log} (job_id, status, entrypoint, priority)\n\
         SELECT id, 'queued', entrypoint, priority FROM released\n\
         RETURNING job_id"
    )
}

/// Time until the earliest queued job of these entrypoints is due, in microseconds (NULL
/// when none). `$1` entrypoints. Each entrypoint reads one entry of the
/// `(entrypoint, execute_after)` index, however long its queue: `MIN` over
/// `entrypoint = ANY(..)` would read them all.
/// Per entrypoint of `$1 text[]` (in that order): the highest slot held by a picked job
/// and how many slots are held, each read from the slot index alone.
pub(crate) fn queue_slots_in_use(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    let status = s.qualify(&s.queue_status_type);
    format!(
        "SELECT e.entrypoint,
         (SELECT slot FROM {queue} WHERE entrypoint = e.entrypoint AND status = 'picked'::{status} \
         AND slot IS NOT NULL ORDER BY slot DESC LIMIT 1) AS highest,
         (SELECT count(*) FROM {queue} WHERE entrypoint = e.entrypoint AND status = 'picked'::{status} \
         AND slot IS NOT NULL) AS in_use
         FROM UNNEST($1::text[]) WITH ORDINALITY AS e(entrypoint, ord) ORDER BY e.ord"
    )
}

/// Whether any job of the entrypoints `$1` is queued, due or not: what a drain asks
/// before it stops. Read through the index the claims walk in their order (its entries of
/// rows claimed since were marked dead as the claims passed them), where
/// [`queue_next_due`]'s first look after a drain walks every entry the drained rows left in
/// the index by due time (10 ms after 50,000 jobs).
pub(crate) fn queue_any_queued(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT EXISTS (\n    \
             SELECT 1 FROM UNNEST($1::text[]) AS e(entrypoint)\n    \
             CROSS JOIN LATERAL (\n        SELECT 1 FROM {queue}\n        \
             WHERE status = 'queued' AND entrypoint = e.entrypoint\n        \
             ORDER BY priority DESC, id ASC LIMIT 1\n    ) q\n\
         ) AS any_queued"
    )
}

/// For the entrypoints `$1 text[]`, in microseconds from now: `queued_us`, until the
/// earliest queued job is due (negative when one is due already); `stale_us`, until the
/// oldest heartbeat of a job another worker (not `$3 uuid`) holds is older than the
/// heartbeat timeout `$2 bigint` (microseconds), when that job may be re-picked. NULL
/// where there is no such job. Both read one row of an index.
pub(crate) fn queue_next_due(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT {queued} AS queued_us,\n       {stale} + $2::bigint AS stale_us",
        queued = super::micros_until(&format!(
            "(SELECT MIN(first.execute_after)\n    \
             FROM UNNEST($1::text[]) AS e(entrypoint)\n    \
             CROSS JOIN LATERAL (\n        SELECT execute_after FROM {queue}\n        \
             WHERE status = 'queued' AND entrypoint = e.entrypoint\n        \
             ORDER BY execute_after LIMIT 1\n    ) first)"
        )),
        stale = super::micros_until(&format!(
            "(SELECT heartbeat FROM {queue}\n    \
             WHERE status = 'picked' AND entrypoint = ANY($1::text[])\n      \
             AND queue_manager_id IS DISTINCT FROM $3::uuid\n    \
             ORDER BY heartbeat LIMIT 1)"
        )),
    )
}

/// [`queue_next_due`]'s `queued_us` for the entrypoints `$1 text[]`, over the jobs due
/// from a second ago on only: the index entries of jobs run before then, which a held
/// snapshot keeps, are not walked (every one would be). A job due longer ago that no claim
/// took (it lay behind a lane's floor, or another claim held it) is not seen here: the
/// lanes' sweeps find it (`worker::floors`). The worker asks this after a claim that found
/// nothing; a drain, which must see every job, asks [`queue_next_due`].
pub(crate) fn queue_next_due_recent(s: &Settings) -> String {
    let queue = s.qualify(&s.queue_table);
    format!(
        "SELECT {queued} AS queued_us",
        queued = super::micros_until(&format!(
            "(SELECT MIN(first.execute_after)\n    \
             FROM UNNEST($1::text[]) AS e(entrypoint)\n    \
             CROSS JOIN LATERAL (\n        SELECT execute_after FROM {queue}\n        \
             WHERE status = 'queued' AND entrypoint = e.entrypoint\n          \
             AND execute_after >= NOW() - INTERVAL '1 second'\n        \
             ORDER BY execute_after LIMIT 1\n    ) first)"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ungated_shape_has_no_capacity_machinery() {
        let sql = queue_claim(&Settings::default(), Gating::None, false, false, false);
        // `slot` is only read back with the row, never computed or written.
        let body = sql.split("\nSELECT id, priority").next().unwrap();
        for word in [
            "slot",
            "params",
            "limited",
            "contention",
            "$5::bigint[]",
            "$8",
            "worker_load",
        ] {
            assert!(
                !body.contains(word),
                "ungated shape mentions {word}:\n{sql}"
            );
        }
        for word in ["free_slots", "slot =", "contended"] {
            assert!(!sql.contains(word), "ungated shape mentions {word}:\n{sql}");
        }
    }

    /// `sql` binds the floors and the stale flag from `$first` on (see [`Tail`]), and no
    /// parameter after them.
    #[track_caller]
    fn assert_tail(sql: &str, first: usize) {
        for (offset, ty) in [(0, "int4[]"), (1, "int8[]"), (2, "bool")] {
            let param = format!("${}::{ty}", first + offset);
            assert!(sql.contains(&param), "no {param}:\n{sql}");
        }
        let next = format!("${}", first + 3);
        assert!(!sql.contains(&next), "binds {next}:\n{sql}");
    }

    #[test]
    fn shapes_bind_the_documented_parameters() {
        let s = Settings::default();
        for gating in [Gating::Careful, Gating::Relaxed] {
            assert!(queue_claim(&s, gating, false, false, false).contains("$5::bigint[]"));
            assert!(queue_claim(&s, gating, false, false, false).contains("$6::float8"));
            assert_tail(&queue_claim(&s, gating, false, false, false), 7);
            assert!(queue_claim(&s, gating, true, false, false).contains("$7::bigint"));
            assert_tail(&queue_claim(&s, gating, true, false, false), 8);
        }
        assert_tail(&queue_claim(&s, Gating::None, false, false, false), 5);
        assert_tail(&queue_claim(&s, Gating::None, true, false, false), 6);
        assert!(
            queue_claim(&s, Gating::None, true, false, false).contains("$5::bigint - COUNT(*)")
        );
    }

    /// Both relaxed forms bind what the gated shapes bind, and nothing more; only the
    /// counting one reads the jobs held.
    #[test]
    fn only_the_counting_relaxed_shape_reads_the_jobs_held() {
        let s = Settings::default();
        for (budget, ending, last) in [
            (false, false, 6),
            (true, false, 7),
            (false, true, 9),
            (true, true, 10),
        ] {
            let counting = relaxed_claim(&s, budget, ending);
            let uncounted = relaxed_uncounted_claim(&s, budget, ending);
            for sql in [&counting, &uncounted] {
                assert!(
                    sql.contains(&format!("${last}::")),
                    "{budget} {ending}: no ${last}:\n{sql}"
                );
                assert_tail(sql, last + 1);
                assert!(
                    sql.contains("array_position(ARRAY(SELECT tid FROM eligible), job.ctid)"),
                    "{budget} {ending}: takes no slot"
                );
            }
            for held in ["picked AS", "AS unslotted", "max(h.slot)", "min(h.slot)"] {
                assert!(
                    counting.contains(held),
                    "{budget} {ending}: counting lacks {held}"
                );
                assert!(
                    !uncounted.contains(held),
                    "{budget} {ending}: uncounted reads {held}"
                );
            }
            assert!(uncounted.contains("NULL::bigint[] AS in_use, FALSE AS unguarded"));
        }
    }

    #[test]
    fn ending_shapes_bind_the_outcomes_after_the_other_parameters() {
        let s = Settings::default();
        for (gated, budget, first) in [
            (Gating::None, false, 5),
            (Gating::Careful, false, 7),
            (Gating::Relaxed, false, 7),
            (Gating::None, true, 6),
            (Gating::Careful, true, 8),
            (Gating::Relaxed, true, 8),
        ] {
            let sql = queue_claim(&s, gated, budget, true, false);
            for (offset, ty) in [(0, "bigint[]"), (1, "text[]"), (2, "text[]")] {
                let param = format!("${}::{ty}", first + offset);
                assert!(sql.contains(&param), "{gated:?} {budget}: no {param}");
            }
            assert_tail(&sql, first + 3);
            assert!(sql.contains("ended.ids AS ended"));
        }
    }

    /// Only a relaxed claim locks its window of limited candidates as it reads it.
    #[test]
    fn only_the_relaxed_window_skips_locked_rows() {
        let s = Settings::default();
        let part = |gating, from: &str, to: &str| {
            let sql = queue_claim(&s, gating, false, false, false);
            let start = sql.find(from).unwrap();
            let end = sql.find(to).unwrap();
            sql[start..end].to_owned()
        };
        let window = |gating| part(gating, "limited_window AS", "limited_attempts AS");
        let attempts = |gating| part(gating, "limited_attempts AS", "\nlimited_claims AS");
        assert!(window(Gating::Relaxed).contains("FOR UPDATE SKIP LOCKED"));
        assert!(!window(Gating::Careful).contains("FOR UPDATE"));
        // The careful claim locks each candidate afterwards, by primary key, keeping the
        // ones it could not lock as contention; the relaxed one has nothing left to lock.
        assert!(attempts(Gating::Careful).contains("FOR UPDATE OF target SKIP LOCKED"));
        assert!(!attempts(Gating::Relaxed).contains("FOR UPDATE"));
        for w in [window(Gating::Relaxed), window(Gating::Careful)] {
            assert!(w.contains("ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining)"));
        }
    }

    #[test]
    fn names_follow_settings() {
        let s = Settings::with_prefix("app_").schema("myq");
        let sql = queue_claim(&s, Gating::Careful, true, false, false);
        assert!(sql.contains("myq.app_pgqueuer "));
        assert!(sql.contains("INSERT INTO myq.app_pgqueuer_log "));
        assert!(!sql.contains(" pgqueuer "));
        let plain = queue_complete_plain(&s);
        assert!(plain.contains("DELETE FROM myq.app_pgqueuer\n"));
        assert!(plain.contains("INSERT INTO myq.app_pgqueuer_log "));
    }
}
