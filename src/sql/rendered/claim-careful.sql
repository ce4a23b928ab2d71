-- Rendered by src/sql for the default names; do not edit.
WITH
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
           CASE WHEN p.concurrency_limit > 0 THEN p.concurrency_limit - COALESCE(k.total, 0) END AS remaining
    FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint
    WHERE p.concurrency_limit <= 0 OR COALESCE(k.total, 0) < p.concurrency_limit
),
unlimited_claims AS (
    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a
    CROSS JOIN LATERAL (
        SELECT ($7::int4[])[o.k] AS level, ($8::int8[])[o.k] AS fid
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
    SELECT w.id FROM available a
    CROSS JOIN LATERAL (
        SELECT ($7::int4[])[o.k] AS level, ($8::int8[])[o.k] AS fid
        FROM (SELECT array_position($2::text[], a.entrypoint) AS k) o
    ) fl
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT id, priority FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority >= COALESCE(fl.level + 1, -2147483648)
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining)
        ) above
        UNION ALL
        SELECT * FROM (
            SELECT id, priority FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority = fl.level AND id >= fl.fid
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining)
        ) at_floor
        UNION ALL
        SELECT * FROM (
            SELECT id, priority FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority < fl.level
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining)
        ) below
        ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, a.remaining)
    ) w
    WHERE a.remaining IS NOT NULL
),
limited_attempts AS (
    SELECT w.id AS window_id, t.tid, t.id, t.priority, t.entrypoint FROM limited_window w
    LEFT JOIN LATERAL (
        SELECT target.ctid AS tid, target.id, target.priority, target.entrypoint FROM pgqueuer target
        WHERE target.id = w.id AND (target.status = 'queued' AND execute_after < NOW()) IS TRUE
        FOR UPDATE OF target SKIP LOCKED
    ) t ON TRUE
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
    WHERE $9::bool AND status = 'picked' AND entrypoint = ANY($2::text[])
      AND heartbeat < NOW() - $4::bigint * INTERVAL '1 microsecond'
      AND execute_after < NOW()
    ORDER BY priority DESC, id ASC
    FOR UPDATE SKIP LOCKED
    LIMIT $1::int
),
eligible AS (
    SELECT tid, id, priority, entrypoint, fresh FROM (
        SELECT tid, id, priority, entrypoint, TRUE AS fresh FROM next_queued
        UNION ALL
        SELECT tid, id, priority, entrypoint, FALSE AS fresh FROM next_stale
    ) u
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
    WHERE a.remaining IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM held_slots hs WHERE hs.entrypoint = a.entrypoint AND hs.slot = s.slot
      )
),
slot_assignments AS MATERIALIZED (
    SELECT a.entrypoint, ARRAY(SELECT f.slot FROM free_slots f WHERE f.entrypoint = a.entrypoint ORDER BY f.rank) AS slots
    FROM available a
    WHERE a.remaining IS NOT NULL
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
contention AS (
    SELECT COUNT(*) FILTER (WHERE id IS NULL) AS contended,
           (SELECT ARRAY(SELECT COALESCE(k.total, 0) FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint ORDER BY p.ord)) AS in_use,
           (EXISTS (SELECT 1 FROM held_slots hs WHERE hs.held < 0 OR hs.held >= hs.lim)
            OR EXISTS (SELECT 1 FROM params p JOIN picked k ON k.entrypoint = p.entrypoint
                       WHERE p.concurrency_limit > 0 AND k.unslotted > 0)) AS unguarded
    FROM limited_attempts
)
SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after, status::text AS status, entrypoint, dedupe_key, payload, headers, attempts, slot, contention.contended, contention.in_use, contention.unguarded FROM contention LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC;
