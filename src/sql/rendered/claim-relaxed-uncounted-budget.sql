-- Rendered by src/sql for the default names; do not edit.
WITH
available AS (
    SELECT UNNEST($2::text[]) AS entrypoint
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
    SELECT NULL::bigint[] AS in_use, FALSE AS unguarded
) inuse LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC;
