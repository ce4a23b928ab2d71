-- The statement trigger that announces inserts, deletes and truncates on the channel.
-- The function body, comments included, must equal PgQueuer's text (whitespace aside): PgQueuer's upgrade
-- planner compares it to decide whether the function is up to date.
CREATE OR REPLACE FUNCTION {{function}}() RETURNS TRIGGER AS $$
DECLARE
    to_emit BOOLEAN := false;  -- Flag to decide whether to emit a notification
BEGIN
    -- Check operation type and set the emit flag accordingly
    IF TG_OP = 'UPDATE' AND OLD IS DISTINCT FROM NEW THEN
        to_emit := true;
    ELSIF TG_OP = 'DELETE' THEN
        to_emit := true;
    ELSIF TG_OP = 'INSERT' THEN
        to_emit := true;
    ELSIF TG_OP = 'TRUNCATE' THEN
        to_emit := true;
    END IF;

    -- Perform notification if the emit flag is set
    IF to_emit THEN
        PERFORM pg_notify(
            '{{channel}}',
            json_build_object(
                'channel', '{{channel}}',
                'operation', lower(TG_OP),
                'sent_at', NOW(),
                'table', TG_TABLE_NAME,
                'type', 'table_changed_event'
            )::text
        );
    END IF;

    -- Return appropriate value based on the operation
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        RETURN OLD;
    ELSE
        RETURN NULL; -- For TRUNCATE and other non-row-specific contexts
    END IF;
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER {{trigger}}
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {{queue_table}}
FOR EACH STATEMENT EXECUTE FUNCTION {{function}}();
