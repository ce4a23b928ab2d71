-- The per-second statistics rollup. Old installs typed its status with a separate enum
-- and carried a NOT NULL time_in_queue column; both are brought in line (the column is
-- kept, only relaxed, as PgQueuer does).
CREATE {{statistics_persistence}}TABLE IF NOT EXISTS {{statistics_table}} (
    id BIGSERIAL PRIMARY KEY,
    created TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT DATE_TRUNC('sec', NOW()),
    count BIGINT NOT NULL,
    priority INT NOT NULL,
    status {{status_type}} NOT NULL,
    entrypoint TEXT NOT NULL
);
ALTER TABLE {{statistics_table}} ALTER COLUMN created SET DEFAULT DATE_TRUNC('sec', NOW());
DO $pgq$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = '{{statistics_table}}'::regclass
          AND attname = 'time_in_queue' AND NOT attisdropped AND attnotnull
    ) THEN
        ALTER TABLE {{statistics_table}} ALTER COLUMN time_in_queue DROP NOT NULL;
    END IF;
    IF (
        SELECT atttypid FROM pg_attribute
        WHERE attrelid = '{{statistics_table}}'::regclass AND attname = 'status' AND NOT attisdropped
    ) <> '{{status_type}}'::regtype THEN
        ALTER TABLE {{statistics_table}}
            ALTER COLUMN status TYPE {{status_type}} USING status::TEXT::{{status_type}};
    END IF;
END
$pgq$;
