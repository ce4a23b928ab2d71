-- The status enum, with every label PgQueuer 1.6 uses, in PgQueuer's order.
-- Labels added here are committed before any later step uses them (each migration file
-- runs as its own implicit transaction).
DO $pgq$
BEGIN
    CREATE TYPE {{status_type}} AS ENUM (
        'queued', 'picked', 'successful', 'exception', 'canceled', 'deleted', 'failed'
    );
EXCEPTION WHEN duplicate_object THEN
    NULL;
END
$pgq$;
ALTER TYPE {{status_type}} ADD VALUE IF NOT EXISTS 'queued';
ALTER TYPE {{status_type}} ADD VALUE IF NOT EXISTS 'picked';
ALTER TYPE {{status_type}} ADD VALUE IF NOT EXISTS 'successful';
ALTER TYPE {{status_type}} ADD VALUE IF NOT EXISTS 'exception';
ALTER TYPE {{status_type}} ADD VALUE IF NOT EXISTS 'canceled';
ALTER TYPE {{status_type}} ADD VALUE IF NOT EXISTS 'deleted';
ALTER TYPE {{status_type}} ADD VALUE IF NOT EXISTS 'failed';
