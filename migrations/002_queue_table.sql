-- The queue table. A fresh install creates it whole (with the capacity-slot column);
-- an older install gets each missing column and the defaults it lacks.
CREATE {{queue_persistence}}TABLE IF NOT EXISTS {{queue_table}} (
    id BIGSERIAL PRIMARY KEY,
    priority INT NOT NULL,
    queue_manager_id UUID,
    created TIMESTAMP WITH TIME ZONE DEFAULT NOW() NOT NULL,
    updated TIMESTAMP WITH TIME ZONE DEFAULT NOW() NOT NULL,
    heartbeat TIMESTAMP WITH TIME ZONE DEFAULT NOW() NOT NULL,
    execute_after TIMESTAMP WITH TIME ZONE DEFAULT NOW() NOT NULL,
    status {{status_type}} NOT NULL,
    entrypoint TEXT NOT NULL,
    dedupe_key TEXT,
    payload BYTEA,
    headers JSONB,
    attempts INTEGER NOT NULL DEFAULT 0,
    slot BIGINT
);
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS queue_manager_id UUID;
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS updated TIMESTAMP WITH TIME ZONE DEFAULT NOW() NOT NULL;
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS heartbeat TIMESTAMP WITH TIME ZONE DEFAULT NOW() NOT NULL;
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS execute_after TIMESTAMP WITH TIME ZONE DEFAULT NOW() NOT NULL;
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS dedupe_key TEXT;
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS payload BYTEA;
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS headers JSONB;
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0;
-- Rows picked before this column existed keep slot NULL and drain out under the count gate.
ALTER TABLE {{queue_table}} ADD COLUMN IF NOT EXISTS slot BIGINT;
ALTER TABLE {{queue_table}} ALTER COLUMN created SET DEFAULT NOW();
ALTER TABLE {{queue_table}} ALTER COLUMN updated SET DEFAULT NOW();
ALTER TABLE {{queue_table}} ALTER COLUMN heartbeat SET DEFAULT NOW();
ALTER TABLE {{queue_table}} ALTER COLUMN execute_after SET DEFAULT NOW();
ALTER TABLE {{queue_table}} ALTER COLUMN attempts SET DEFAULT 0;
