-- Rendered by src/sql for the default names; do not edit.
WITH
job_status AS (
    SELECT UNNEST($1::bigint[]) AS id, UNNEST($2::text[])::pgqueuer_status AS status, UNNEST($3::text[])::jsonb AS traceback
),
owned AS (
    SELECT owned_row.tid, owned_row.id FROM (SELECT DISTINCT UNNEST($1::bigint[]) AS id) AS wanted
    CROSS JOIN LATERAL (
        SELECT ctid AS tid, id FROM pgqueuer
        WHERE id = wanted.id AND queue_manager_id IS NOT DISTINCT FROM $4::uuid
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
)
SELECT job_id FROM log_end;
