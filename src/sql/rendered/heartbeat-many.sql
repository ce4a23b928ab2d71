-- Rendered by src/sql for the default names; do not edit.
UPDATE pgqueuer SET heartbeat = NOW()
WHERE ctid = ANY(ARRAY(SELECT owned_row.tid FROM (SELECT DISTINCT UNNEST($1::bigint[]) AS id) AS wanted
    CROSS JOIN LATERAL (
        SELECT ctid AS tid, id FROM pgqueuer
        WHERE id = wanted.id AND queue_manager_id IS NOT DISTINCT FROM $2::uuid
        FOR UPDATE SKIP LOCKED
    ) owned_row))
RETURNING id;
