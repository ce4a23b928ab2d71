-- Rendered by src/sql for the default names; do not edit.
WITH
available AS (
    SELECT UNNEST($2::text[]) AS entrypoint
),
next_queued AS (
    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a
    CROSS JOIN LATERAL (
        SELECT ($5::int4[])[o.k] AS level, ($6::int8[])[o.k] AS fid
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
    WHERE TRUE
    ORDER BY c.priority DESC, c.id ASC LIMIT $1::int
),
next_stale AS (
    SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
    WHERE $7::bool AND status = 'picked' AND entrypoint = ANY($2::text[])
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
claimed AS (
    UPDATE pgqueuer
    SET status = 'picked', updated = NOW(), heartbeat = NOW(), queue_manager_id = $3::uuid
    WHERE ctid = ANY(ARRAY(SELECT tid FROM eligible))
    RETURNING *
),
log_pick AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, status, entrypoint, priority FROM claimed
)
SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after, status::text AS status, entrypoint, dedupe_key, payload, headers, attempts, slot FROM claimed ORDER BY priority DESC, id ASC;
