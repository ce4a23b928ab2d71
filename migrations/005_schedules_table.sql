-- Cron schedule state, one row per (expression, entrypoint).
CREATE {{schedules_persistence}}TABLE IF NOT EXISTS {{schedules_table}} (
    id BIGSERIAL PRIMARY KEY,
    expression TEXT NOT NULL,
    entrypoint TEXT NOT NULL,
    heartbeat TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
    created TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
    updated TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
    next_run TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
    last_run TIMESTAMP WITH TIME ZONE,
    status {{status_type}} DEFAULT 'queued',
    UNIQUE (expression, entrypoint)
);
ALTER TABLE {{schedules_table}} ADD COLUMN IF NOT EXISTS heartbeat TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW();
ALTER TABLE {{schedules_table}} ADD COLUMN IF NOT EXISTS created TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW();
ALTER TABLE {{schedules_table}} ADD COLUMN IF NOT EXISTS updated TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW();
ALTER TABLE {{schedules_table}} ADD COLUMN IF NOT EXISTS next_run TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW();
ALTER TABLE {{schedules_table}} ADD COLUMN IF NOT EXISTS last_run TIMESTAMP WITH TIME ZONE;
ALTER TABLE {{schedules_table}} ADD COLUMN IF NOT EXISTS status {{status_type}} DEFAULT 'queued';
DO $pgq$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = '{{schedules_table}}'::regclass AND contype = 'u'
    ) THEN
        ALTER TABLE {{schedules_table}} ADD UNIQUE (expression, entrypoint);
    END IF;
END
$pgq$;
