-- Rendered by src/sql for the default names; do not edit.
WITH
job_status AS (
    SELECT UNNEST($6::bigint[]) AS id, UNNEST($7::text[])::pgqueuer_status AS status, UNNEST($8::text[])::jsonb AS traceback
),
owned AS (
    SELECT owned_row.tid, owned_row.id FROM (SELECT DISTINCT UNNEST($6::bigint[]) AS id) AS wanted
    CROSS JOIN LATERAL (
        SELECT ctid AS tid, id FROM pgqueuer
        WHERE id = wanted.id AND queue_manager_id IS NOT DISTINCT FROM $3::uuid
        FOR UPDATE SKIP LOCKED
    ) owned_row
),
ending AS (
    SELECT o.tid, js.id, js.status, js.traceback FROM owned o JOIN job_status js ON js.id = o.id
),
deleted AS (
    DELETE FROM pgqueuer
    WHERE ctid = ANY(ARRAY(SELECT tid FROM ending WHERE status <> 'failed'))
    RETURNING id, entrypoint, priority
),
held AS (
    UPDATE pgqueuer SET status = 'failed', updated = NOW(), queue_manager_id = NULL
    WHERE ctid = ANY(ARRAY(SELECT tid FROM ending WHERE status = 'failed'))
    RETURNING id, entrypoint, priority
),
ended_rows AS (
    SELECT * FROM deleted UNION ALL SELECT * FROM held
),
log_end AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, traceback)
    SELECT e.id, e.status, m.entrypoint, m.priority, e.traceback
    FROM ending e JOIN ended_rows m ON m.id = e.id
    RETURNING job_id
),
available AS (
    SELECT UNNEST($2::text[]) AS entrypoint
),
worker_load AS (
    SELECT COUNT(*) AS total,
           GREATEST(LEAST($1::int, $5::bigint - COUNT(*)), 0) AS headroom
    FROM pgqueuer WHERE queue_manager_id = $3::uuid AND entrypoint = ANY($2::text[]) AND id <> ALL(ARRAY(SELECT id FROM ended_rows))
),
next_queued AS (
    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a
    CROSS JOIN LATERAL (
        SELECT ($9::int4[])[o.k] AS level, ($10::int8[])[o.k] AS fid
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
    WHERE TRUE AND (SELECT total FROM worker_load) < $5::bigint
    ORDER BY c.priority DESC, c.id ASC LIMIT $1::int
),
next_stale AS (
    SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
    WHERE $11::bool AND status = 'picked' AND entrypoint = ANY($2::text[])
      AND heartbeat < NOW() - $4::bigint * INTERVAL '1 microsecond'
      AND execute_after < NOW() AND (SELECT total FROM worker_load) < $5::bigint
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
    ORDER BY priority DESC, id ASC LIMIT (SELECT headroom FROM worker_load)
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
SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after, status::text AS status, entrypoint, dedupe_key, payload, headers, attempts, slot, ended.ids AS ended FROM (SELECT ARRAY(SELECT job_id FROM log_end) AS ids) ended LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC;
