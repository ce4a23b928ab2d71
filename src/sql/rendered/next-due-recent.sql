-- Rendered by src/sql for the default names; do not edit.
SELECT (SELECT CASE WHEN at_time.t IS NOT NULL THEN GREATEST(LEAST(-(CASE WHEN at_time.t IS NULL THEN NULL WHEN isfinite(at_time.t) THEN EXTRACT(EPOCH FROM now() - at_time.t)::float8 WHEN at_time.t < now() THEN 'Infinity'::float8 ELSE '-Infinity'::float8 END) * 1000000, 9.2e18), -9.2e18)::bigint END FROM (SELECT (SELECT MIN(first.execute_after)
    FROM UNNEST($1::text[]) AS e(entrypoint)
    CROSS JOIN LATERAL (
        SELECT execute_after FROM pgqueuer
        WHERE status = 'queued' AND entrypoint = e.entrypoint
          AND execute_after >= NOW() - INTERVAL '1 second'
        ORDER BY execute_after LIMIT 1
    ) first) AS t OFFSET 0) at_time) AS queued_us;
