-- Rendered by src/sql for the default names; do not edit.
WITH input AS MATERIALIZED (
    SELECT nextval((SELECT pg_get_serial_sequence('pgqueuer', 'id'))::regclass) AS id, t.*
      FROM (SELECT *
              FROM unnest($1::int[], $2::text[], $3::bytea[], $4::bigint[], $5::text[], $6::text[]::jsonb[])
                   WITH ORDINALITY AS u(priority, entrypoint, payload, delay_us, dedupe_key, headers, ord)
             ORDER BY ord) AS t
),
inserted AS (
    INSERT INTO pgqueuer AS job
           (id, priority, entrypoint, payload, execute_after, dedupe_key, headers, status)
    SELECT id, priority, entrypoint, payload,
           now() + (delay_us / 1000000) * interval '1 second'
                 + (delay_us % 1000000) * interval '1 microsecond',
           dedupe_key, headers, 'queued'::pgqueuer_status
      FROM input
     ORDER BY ord
    ON CONFLICT (dedupe_key) WHERE ((status = ANY (ARRAY['queued'::pgqueuer_status, 'picked'::pgqueuer_status])) AND (dedupe_key IS NOT NULL)) DO UPDATE SET priority = GREATEST(job.priority, EXCLUDED.priority)
    RETURNING id, entrypoint, priority, dedupe_key
),
logged AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'queued'::pgqueuer_status, entrypoint, priority
      FROM inserted
     WHERE id IN (SELECT id FROM input)
)
SELECT i.ord, ins.id
  FROM inserted ins
  JOIN input i ON i.id = ins.id OR i.dedupe_key = ins.dedupe_key
 ORDER BY i.ord;
