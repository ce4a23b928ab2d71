-- Rendered by src/sql for the default names; do not edit.
WITH
deleted AS (
    DELETE FROM pgqueuer
    WHERE id = ANY($1::bigint[]) AND queue_manager_id IS NOT DISTINCT FROM $2::uuid
      AND (SELECT set_config('lock_timeout', '50ms', true)) IS NOT NULL
    RETURNING id, entrypoint, priority
),
log_end AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'successful', entrypoint, priority FROM deleted
    RETURNING job_id
)
SELECT job_id FROM log_end;
