-- Rendered by src/sql for the default names; do not edit.
WITH retry AS (
    UPDATE pgqueuer
    SET status = 'queued', execute_after = NOW() + $2::bigint * INTERVAL '1 microsecond',
        attempts = attempts + 1, updated = NOW(), queue_manager_id = NULL
    WHERE ctid = ANY(ARRAY(SELECT owned_row.tid FROM (SELECT DISTINCT UNNEST(ARRAY[$1::bigint]) AS id) AS wanted
    CROSS JOIN LATERAL (
        SELECT ctid AS tid, id FROM pgqueuer
        WHERE id = wanted.id AND queue_manager_id IS NOT DISTINCT FROM $4::uuid
        FOR UPDATE SKIP LOCKED
    ) owned_row))
    RETURNING id, entrypoint, priority
)
INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, traceback)
SELECT id, 'queued', entrypoint, priority, $3::text::jsonb FROM retry
RETURNING job_id;
