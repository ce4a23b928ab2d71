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
worker_load AS (
    SELECT COUNT(*) AS total,
           GREATEST(LEAST($1::int, $7::bigint - COUNT(*)), 0) AS headroom
    FROM pgqueuer WHERE queue_manager_id = $3::uuid AND entrypoint = ANY($2::text[])
),
next_queued AS (
    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a
    CROSS JOIN LATERAL (
        SELECT ($8::int4[])[o.k] AS level, ($9::int8[])[o.k] AS fid
        FROM (SELECT array_position($2::text[], a.entrypoint) AS k) o
    ) fl
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority >= COALESCE(fl.level + 1, -2147483648)
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.remaining, $1::int)) FOR UPDATE SKIP LOCKED
        ) above
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority = fl.level AND id >= fl.fid
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.remaining, $1::int)) FOR UPDATE SKIP LOCKED
        ) at_floor
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority < fl.level
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.remaining, $1::int)) FOR UPDATE SKIP LOCKED
        ) below
        ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.remaining, $1::int))
    ) c
    WHERE TRUE AND (SELECT total FROM worker_load) < $7::bigint
    ORDER BY c.priority DESC, c.id ASC LIMIT $1::int
),
next_stale AS (
    SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
    WHERE $10::bool AND status = 'picked' AND entrypoint = ANY($2::text[])
      AND heartbeat < NOW() - $4::bigint * INTERVAL '1 microsecond'
      AND execute_after < NOW() AND (SELECT total FROM worker_load) < $7::bigint
    ORDER BY priority DESC, id ASC
    FOR UPDATE SKIP LOCKED
    LIMIT $1::int
),
eligible AS (
    SELECT tid, id, priority, entrypoint FROM (
        SELECT tid, id, priority, entrypoint FROM next_queued
        UNION ALL
        SELECT tid, id, priority, entrypoint FROM next_stale
    ) u ORDER BY priority DESC, id ASC LIMIT (SELECT headroom FROM worker_load)
),
claimed AS (
    UPDATE pgqueuer job
    SET status = 'picked', updated = NOW(), heartbeat = NOW(), queue_manager_id = $3::uuid,
        slot = CASE WHEN job.status = 'queued' AND ($5::bigint[])[array_position($2::text[], job.entrypoint)] > 0
            THEN ((floor(($5::bigint[])[array_position($2::text[], job.entrypoint)] * $6::float8)::bigint
                   + array_position(ARRAY(SELECT tid FROM eligible), job.ctid) - 1) % ($5::bigint[])[array_position($2::text[], job.entrypoint)])
            ELSE job.slot END
    WHERE job.ctid = ANY(ARRAY(SELECT tid FROM eligible))
    RETURNING job.*
),
log_pick AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, status, entrypoint, priority FROM claimed
)
SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after, status::text AS status, entrypoint, dedupe_key, payload, headers, attempts, slot, 0::bigint AS contended,
       inuse.in_use, inuse.unguarded FROM (
    SELECT ARRAY(SELECT COALESCE(k.total, 0) FROM params p LEFT JOIN picked k ON k.entrypoint = p.entrypoint ORDER BY p.ord) AS in_use,
           (EXISTS (SELECT 1 FROM params p WHERE p.concurrency_limit > 0
               AND ((SELECT max(h.slot) FROM pgqueuer h WHERE h.entrypoint = p.entrypoint
                     AND h.status = 'picked' AND h.slot IS NOT NULL) >= p.concurrency_limit
                 OR (SELECT min(h.slot) FROM pgqueuer h WHERE h.entrypoint = p.entrypoint
                     AND h.status = 'picked' AND h.slot IS NOT NULL) < 0))
            OR EXISTS (SELECT 1 FROM params p JOIN picked k ON k.entrypoint = p.entrypoint
                       WHERE p.concurrency_limit > 0 AND k.unslotted > 0)) AS unguarded
) inuse LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC;
