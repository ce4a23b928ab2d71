-- Rendered by src/sql for the default names; do not edit.
WITH
rate_windows AS MATERIALIZED (
    SELECT w.entrypoint, w.per_us, w.starts, w.cooldown_us,
           floor(random() * w.starts)::int AS off
    FROM UNNEST($7::text[], $8::bigint[], $9::bigint[], $10::bigint[]) AS w(entrypoint, per_us, starts, cooldown_us)
),
rate_units AS MATERIALIZED (
    SELECT w.entrypoint, w.per_us, u.unit,
           ROW_NUMBER() OVER (PARTITION BY w.entrypoint, w.per_us ORDER BY u.part, u.unit) AS rank
    FROM rate_windows w
    CROSS JOIN LATERAL (
        SELECT b.part, b.unit FROM (
            SELECT * FROM (SELECT 0 AS part, r.unit FROM pgqueuer_rs_rates r
             WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us
              AND r.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond'
              AND r.unit >= w.off AND r.unit < w.starts
             ORDER BY r.unit LIMIT $1::int FOR UPDATE SKIP LOCKED) first
            UNION ALL
            SELECT * FROM (SELECT 1 AS part, r.unit FROM pgqueuer_rs_rates r
             WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us
              AND r.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond'
              AND r.unit < w.off
             ORDER BY r.unit LIMIT $1::int FOR UPDATE SKIP LOCKED) wrapped
        ) b LIMIT $1::int
    ) u
),
rate_room AS (
    SELECT w.entrypoint, MIN(COALESCE(c.units, 0)) AS room
    FROM rate_windows w
    LEFT JOIN (SELECT entrypoint, per_us, COUNT(*) AS units FROM rate_units GROUP BY entrypoint, per_us) c
      ON c.entrypoint = w.entrypoint AND c.per_us = w.per_us
    GROUP BY w.entrypoint
),
rate_plenty AS (
    SELECT COALESCE(bool_and(w.starts >= 4 * $11::bigint AND n.sampled > 0 AND 2 * n.rested >= n.sampled), FALSE) AS plenty
    FROM rate_windows w
    CROSS JOIN LATERAL (
        SELECT COUNT(*) AS sampled,
               COUNT(*) FILTER (WHERE x.started <= NOW() - w.cooldown_us * INTERVAL '1 microsecond') AS rested
        FROM (
            SELECT r.started FROM pgqueuer_rs_rates r
            WHERE r.entrypoint = w.entrypoint AND r.per_us = w.per_us AND r.unit >= w.off AND r.unit < w.starts
            ORDER BY r.unit LIMIT 64
        ) x
    ) n
),
available AS (
    SELECT u.entrypoint, r.room FROM UNNEST($2::text[]) AS u(entrypoint)
    LEFT JOIN rate_room r ON r.entrypoint = u.entrypoint
    WHERE r.room IS NULL OR r.room > 0
),
next_queued AS (
    SELECT c.tid, c.id, c.priority, c.entrypoint FROM available a
    CROSS JOIN LATERAL (
        SELECT ($12::int4[])[o.k] AS level, ($13::int8[])[o.k] AS fid
        FROM (SELECT array_position($2::text[], a.entrypoint) AS k) o
    ) fl
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority >= COALESCE(fl.level + 1, -2147483648)
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.room, $1::int)) FOR UPDATE SKIP LOCKED
        ) above
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority = fl.level AND id >= fl.fid
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.room, $1::int)) FOR UPDATE SKIP LOCKED
        ) at_floor
        UNION ALL
        SELECT * FROM (
            SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
            WHERE entrypoint = a.entrypoint AND status = 'queued' AND execute_after < NOW() AND priority < fl.level
            ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.room, $1::int)) FOR UPDATE SKIP LOCKED
        ) below
        ORDER BY priority DESC, id ASC LIMIT LEAST($1::int, COALESCE(a.room, $1::int))
    ) c
    WHERE TRUE
    ORDER BY c.priority DESC, c.id ASC LIMIT $1::int
),
next_stale AS (
    SELECT ctid AS tid, id, priority, entrypoint FROM pgqueuer
    WHERE $14::bool AND status = 'picked' AND entrypoint = ANY($2::text[])
      AND heartbeat < NOW() - $4::bigint * INTERVAL '1 microsecond'
      AND execute_after < NOW()
    ORDER BY priority DESC, id ASC
    FOR UPDATE SKIP LOCKED
    LIMIT $1::int
),
eligible AS (
    SELECT tid, id, priority, entrypoint FROM (
        SELECT u.*, ROW_NUMBER() OVER (PARTITION BY u.entrypoint ORDER BY u.priority DESC, u.id ASC) AS rate_rank
        FROM (
            SELECT tid, id, priority, entrypoint FROM next_queued
            UNION ALL
            SELECT tid, id, priority, entrypoint FROM next_stale
        ) u
    ) r
    WHERE r.rate_rank <= COALESCE((SELECT m.room FROM rate_room m WHERE m.entrypoint = r.entrypoint), r.rate_rank)
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
),
rate_taken AS (
    SELECT entrypoint, COUNT(*) AS taken FROM claimed GROUP BY entrypoint
),
rate_spent AS (
    UPDATE pgqueuer_rs_rates r SET started = clock_timestamp(), worker = $3::uuid
    FROM rate_units u JOIN rate_taken t ON t.entrypoint = u.entrypoint
    WHERE r.entrypoint = u.entrypoint AND r.per_us = u.per_us AND r.unit = u.unit AND u.rank <= t.taken
    RETURNING r.unit
),
rate_wait AS (
    SELECT MIN(ready_us) AS wait_us FROM (
        SELECT w.entrypoint, MAX(CASE
            WHEN COALESCE(c.units, 0) > COALESCE(t.taken, 0) THEN 0
            ELSE EXTRACT(EPOCH FROM (LEAST(o.oldest, CASE WHEN COALESCE(t.taken, 0) > 0 THEN clock_timestamp() END) - clock_timestamp())) * 1000000 + w.cooldown_us
        END) AS ready_us
        FROM rate_windows w
        JOIN rate_room m ON m.entrypoint = w.entrypoint AND m.room < $1::int
        LEFT JOIN (SELECT entrypoint, per_us, COUNT(*) AS units FROM rate_units GROUP BY entrypoint, per_us) c
          ON c.entrypoint = w.entrypoint AND c.per_us = w.per_us
        LEFT JOIN rate_taken t ON t.entrypoint = w.entrypoint
        LEFT JOIN LATERAL (
            SELECT MIN(x.started) AS oldest FROM pgqueuer_rs_rates x
            WHERE x.entrypoint = w.entrypoint AND x.per_us = w.per_us
              AND x.started > NOW() - w.cooldown_us * INTERVAL '1 microsecond' AND x.unit < w.starts
        ) o ON TRUE
        WHERE EXISTS (
            SELECT 1 FROM pgqueuer q
            WHERE q.entrypoint = w.entrypoint AND q.status = 'queued' AND q.execute_after < NOW()
              AND q.id <> ALL(ARRAY(SELECT id FROM claimed))
        )
        GROUP BY w.entrypoint
    ) waits
)
SELECT id, priority, queue_manager_id, created, updated, heartbeat, execute_after, status::text AS status, entrypoint, dedupe_key, payload, headers, attempts, slot, 0::bigint AS contended,
       ARRAY(SELECT 0::bigint FROM UNNEST($5::bigint[]) WHERE $6::float8 IS NOT NULL) AS in_use,
       FALSE AS unguarded,
       (SELECT wait_us::bigint FROM rate_wait) AS rate_wait_us,
       (SELECT plenty FROM rate_plenty) AS rate_plenty
FROM (SELECT 1) one LEFT JOIN claimed ON TRUE ORDER BY priority DESC, id ASC;
