-- Rendered by src/sql for the default names; do not edit.
WITH
rate_windows AS MATERIALIZED (
    SELECT w.entrypoint, w.per_us, w.starts, w.cooldown_us,
           floor(random() * w.starts)::int AS off
    FROM UNNEST($7::text[], $8::bigint[], $9::bigint[], $10::bigint[]) AS w(entrypoint, per_us, starts, cooldown_us)
),
rate_units AS MATERIALIZED (
    SELECT w.entrypoint, w.per_us, u.unit,
           ROW_NUMBER() OVER (PARTITION BY w.entrypoint, w.per_us ORDER BY u.part, u.unit) AS rank
    FROM rate_windows w
    CROSS JOIN LATERAL (
        SELECT b.part, b.unit FROM (
            SELECT * FROM (SELECT 0 AS part, r.unit FROM pgqueuer_rs_rates r
             WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us
              AND r.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond'
              AND r.unit >= w.off AND r.unit < w.starts
             ORDER BY r.unit LIMIT $1::int FOR UPDATE SKIP LOCKED) first
            UNION ALL
            SELECT * FROM (SELECT 1 AS part, r.unit FROM pgqueuer_rs_rates r
             WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us
              AND r.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond'
              AND r.unit < w.off
             ORDER BY r.unit LIMIT $1::int FOR UPDATE SKIP LOCKED) wrapped
        ) b LIMIT $1::int
    ) u
),
rate_room AS (
    SELECT w.entrypoint, MIN(COALESCE(c.units, 0)) AS room
    FROM rate_windows w
    LEFT JOIN (SELECT entrypoint, per_us, COUNT(*) AS units FROM rate_units GROUP BY entrypoint, per_us) c
      ON c.entrypoint = w.entrypoint AND c.per_us = w.per_us
    GROUP BY w.entrypoint
),
rate_plenty AS (
    SELECT COALESCE(bool_and(w.starts >= 4 * $11::bigint AND n.sampled > 0 AND 2 * n.rested >= n.sampled), FALSE) AS plenty
    FROM rate_windows w
    CROSS JOIN LATERAL (
        SELECT COUNT(*) AS sampled,
               COUNT(*) FILTER (WHERE x.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond') AS rested
        FROM (
            SELECT r.started FROM pgqueuer_rs_rates r
            WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us AND r.unit >= w.off AND r.unit < w.starts
            ORDER BY r.unit LIMIT 64
        ) x
    ) n
),
params AS (
    SELECT u.entrypoint, u.concurrency_limit, u.ord
    FROM UNNEST($2::text[], $5::bigint[]) WITH ORDINALITY AS u(entrypoint, concurrency_limit, ord)
),
picked AS (
    SELECT entrypoint, COUNT(*) AS total,
           COUNT(*) FILTER (WHERE slot IS NULL) AS unslotted FROM pgqueuer
    WHERE entrypoint = ANY($2::text[]) AND queue_manager_id IS NOT NULL
    GROUP BY entrypoint
),
available AS (
    SELECT p.entrypoint, p.concurrency_limit,
           CASE WHEN p.concurrency_limit > 0 THEN LEAST(p.concurrency_limit - COALESCE(k.total, 0), r.room)
                ELSE r.room END AS remaining
    FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint
    LEFT JOIN rate_room r ON r.entrypoint = p.entrypoint
    WHERE (p.concurrency_limit <= 0 OR COALESCE(k.total, 0) < p.concurrency_limit)
      AND (r.room IS NULL OR r.room > 0)
),
unlimited_claims AS (
    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a
    CROSS JOIN LATERAL (
        SELECT ($12::int4[])[o.k] AS level, ($13::int8[])[o.k] AS fid
        FROM (SELECT array_position($2::text[], a.entrypoint) AS k) o
    ) fl
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority >= COALESCE(fl.level + 1, -2147483648)
            ORDER BY priority DESC, id ASC LIMIT $1::int FOR UPDATE SKIP LOCKED
        ) above
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority = fl.level AND id >= fl.fid
            ORDER BY priority DESC, id ASC LIMIT $1::int FOR UPDATE SKIP LOCKED
        ) at_floor
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority < fl.level
            ORDER BY priority DESC, id ASC LIMIT $1::int FOR UPDATE SKIP LOCKED
        ) below
        ORDER BY priority DESC, id ASC LIMIT $1::int
    ) c
    WHERE a.remaining IS NULL
),
limited_window AS (
    SELECT w.tid, w.id, w.priority, w.entrypoint FROM available a
    CROSS JOIN LATERAL (
        SELECT ($12::int4[])[o.k] AS level, ($13::int8[])[o.k] AS fid
        FROM (SELECT array_position($2::text[], a.entrypoint) AS k) o
    ) fl
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority >= COALESCE(fl.level + 1, -2147483648)
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining) FOR UPDATE SKIP LOCKED
        ) above
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority = fl.level AND id >= fl.fid
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining) FOR UPDATE SKIP LOCKED
        ) at_floor
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority < fl.level
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining) FOR UPDATE SKIP LOCKED
        ) below
        ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining)
    ) w
    WHERE a.remaining IS NOT NULL
),
limited_attempts AS (
    SELECT id AS window_id, tid, id, priority, entrypoint FROM limited_window
),
limited_claims AS (
    SELECT tid, id, priority, entrypoint FROM limited_attempts WHERE id IS NOT NULL
),
next_queued AS (
    SELECT tid, id, priority, entrypoint FROM (
        SELECT tid, id, priority, entrypoint FROM unlimited_claims
        UNION ALL
        SELECT tid, id, priority, entrypoint FROM limited_claims
    ) u
    ORDER BY priority DESC, id ASC LIMIT $1::int
),
next_stale AS (
    SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
    WHERE $14::bool AND status = 'picked' AND entrypoint = ANY($2::text[])
      AND heartbeat < NOW() - $4::bigint * INTERVAL '1 microsecond'
      AND execute_after < NOW()
    ORDER BY priority DESC, id ASC
    FOR UPDATE SKIP LOCKED
    LIMIT $1::int
),
eligible AS (
    SELECT tid, id, priority, entrypoint, fresh FROM (
        SELECT u.*, ROW_NUMBER() OVER (PARTITION BY u.entrypoint ORDER BY u.priority DESC, u.id ASC) AS rate_rank
        FROM (
            SELECT tid, id, priority, entrypoint, TRUE AS fresh FROM next_queued
            UNION ALL
            SELECT tid, id, priority, entrypoint, FALSE AS fresh FROM next_stale
        ) u
    ) r
    WHERE r.rate_rank <= COALESCE((SELECT m.room FROM rate_room m WHERE m.entrypoint = r.entrypoint), r.rate_rank)
    ORDER BY priority DESC, id ASC LIMIT $1::int
),
held_slots AS (
    SELECT a.entrypoint, h.slot % a.concurrency_limit AS slot, h.slot AS held, a.concurrency_limit AS lim
    FROM available a
    CROSS JOIN LATERAL (
        SELECT h.slot FROM pgqueuer h
        WHERE h.entrypoint = a.entrypoint AND h.status = 'picked' AND h.slot IS NOT NULL
        OFFSET 0
    ) h
    WHERE a.remaining IS NOT NULL AND a.concurrency_limit > 0
),
free_slots AS (
    SELECT a.entrypoint, s.slot,
           ROW_NUMBER() OVER (PARTITION BY a.entrypoint ORDER BY s.n) AS rank
    FROM available a
    CROSS JOIN LATERAL (
        SELECT g.n, (g.n + floor(a.concurrency_limit * $6::float8)::bigint) % a.concurrency_limit AS slot
        FROM generate_series(0::bigint, (a.concurrency_limit - a.remaining) + LEAST($1::int, a.remaining) - 1) AS g(n)
    ) s
    WHERE a.remaining IS NOT NULL AND a.concurrency_limit > 0
      AND NOT EXISTS (
          SELECT 1 FROM held_slots hs WHERE hs.entrypoint = a.entrypoint AND hs.slot = s.slot
      )
),
slot_assignments AS MATERIALIZED (
    SELECT a.entrypoint, ARRAY(SELECT f.slot FROM free_slots f WHERE f.entrypoint = a.entrypoint ORDER BY f.rank) AS slots
    FROM available a
    WHERE a.remaining IS NOT NULL AND a.concurrency_limit > 0
),
ranked AS (
    SELECT tid, id, entrypoint, fresh,
           ROW_NUMBER() OVER (PARTITION BY entrypoint, fresh ORDER BY priority DESC, id ASC)::int AS rank
    FROM eligible
),
claimed AS (
    UPDATE pgqueuer job
    SET status = 'picked', updated = NOW(), heartbeat = NOW(), queue_manager_id = $3::uuid,
        slot = CASE WHEN e.fresh THEN sa.slots[e.rank] ELSE job.slot END
    FROM ranked e
    LEFT JOIN slot_assignments sa ON sa.entrypoint = e.entrypoint
    LEFT JOIN params p ON p.entrypoint = e.entrypoint
    WHERE job.ctid = e.tid AND job.id = e.id
      AND (NOT e.fresh OR p.concurrency_limit <= 0 OR sa.slots[e.rank] IS NOT NULL)
    RETURNING job.*
),
log_pick AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, status, entrypoint, priority FROM claimed
),
rate_taken AS (
    SELECT entrypoint, COUNT(*) AS taken FROM claimed GROUP BY entrypoint
),
rate_spent AS (
    UPDATE pgqueuer_rs_rates r SET started = clock_timestamp(), worker = $3::uuid
    FROM rate_units u JOIN rate_taken t ON t.entrypoint = u.entrypoint
    WHERE r.entrypoint = u.entrypoint AND r.per_us = u.per_us AND r.unit = u.unit AND u.rank <= t.taken
    RETURNING r.unit
),
rate_wait AS (
    SELECT MIN(ready_us) AS wait_us FROM (
        SELECT w.entrypoint, MAX(CASE
            WHEN COALESCE(c.units, 0) > COALESCE(t.taken, 0) THEN 0
            ELSE EXTRACT(EPOCH FROM (LEAST(o.oldest, CASE WHEN COALESCE(t.taken, 0) > 0 THEN clock_timestamp() END) - clock_timestamp())) * 1000000 + w.cooldown_us
        END) AS ready_us
        FROM rate_windows w
        JOIN rate_room m ON m.entrypoint = w.entrypoint AND m.room < $1::int
        LEFT JOIN (SELECT entrypoint, per_us, COUNT(*) AS units FROM rate_units GROUP BY entrypoint, per_us) c
          ON c.entrypoint = w.entrypoint AND c.per_us = w.per_us
        LEFT JOIN rate_taken t ON t.entrypoint = w.entrypoint
        LEFT JOIN LATERAL (
            SELECT MIN(x.started) AS oldest FROM pgqueuer_rs_rates x
            WHERE x.entrypoint = w.entrypoint AND x.per_us = w.per_us
              AND x.started > NOW() - w.cooldown_us * INTERVAL '1 microsecond' AND x.unit < w.starts
        ) o ON TRUE
        WHERE EXISTS (
            SELECT 1 FROM pgqueuer q
            WHERE q.entrypoint = w.entrypoint AND q.status = 'queued' AND q.execute_after < NOW()
              AND q.id <> ALL(ARRAY(SELECT id FROM claimed))
        )
        GROUP BY w.entrypoint
    ) waits
),
contention AS (
    SELECT COUNT(*) FILTER (WHERE id IS NULL) AS contended,
           (SELECT ARRAY(SELECT COALESCE(k.total, 0) FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint ORDER BY p.ord)) AS in_use,
           (EXISTS (SELECT 1 FROM held_slots hs WHERE hs.held < 0 OR hs.held >= hs.lim)
            OR EXISTS (SELECT 1 FROM params p JOIN picked k ON k.entrypoint = p.entrypoint
                       WHERE p.concurrency_limit > 0 AND k.unslotted > 0)) AS unguarded,
           (SELECT wait_us::bigint FROM rate_wait) AS rate_wait_us,
           (SELECT plenty FROM rate_plenty) AS rate_plenty
    FROM limited_attempts
)
SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after, status::text AS status, entrypoint, dedupe_key, payload, headers, attempts, slot, contention.contended, contention.in_use, contention.unguarded, contention.rate_wait_us, contention.rate_plenty FROM contention LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC;
