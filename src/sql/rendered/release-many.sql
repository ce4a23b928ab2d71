-- Rendered by src/sql for the default names; do not edit.
WITH released AS (
    UPDATE pgqueuer SET status = 'queued', updated = NOW(), queue_manager_id = NULL
    WHERE ctid = ANY(ARRAY(SELECT owned_row.tid FROM (SELECT DISTINCT UNNEST($1::bigint[]) AS id) AS wanted
    CROSS JOIN LATERAL (
        SELECT ctid AS tid, id FROM pgqueuer
        WHERE id = wanted.id AND queue_manager_id IS NOT DISTINCT FROM $2::uuid
        FOR UPDATE SKIP LOCKED
    ) owned_row))
    RETURNING id, entrypoint, priority
)
INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
SELECT id, 'queued', entrypoint, priority FROM released
RETURNING job_id;
