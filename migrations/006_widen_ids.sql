-- Installs made before PgQueuer widened its ids have int4 id columns and sequences.
DO $pgq$
DECLARE
    tbl regclass;
    seq text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY[
        '{{queue_table}}'::regclass, '{{schedules_table}}'::regclass, '{{statistics_table}}'::regclass
    ] LOOP
        IF (SELECT atttypid FROM pg_attribute WHERE attrelid = tbl AND attname = 'id') = 'integer'::regtype THEN
            EXECUTE format('ALTER TABLE %s ALTER COLUMN id TYPE BIGINT', tbl);
        END IF;
        seq := pg_get_serial_sequence(tbl::text, 'id');
        IF seq IS NOT NULL AND (
            SELECT seqtypid FROM pg_sequence WHERE seqrelid = seq::regclass
        ) <> 'bigint'::regtype THEN
            EXECUTE format('ALTER SEQUENCE %s AS BIGINT', seq);
        END IF;
    END LOOP;
END
$pgq$;
