-- Every index PgQueuer 1.6 declares, converged by definition: a missing index is
-- created, one whose definition differs from the declared one is dropped and rebuilt.
-- Each definition is written exactly as pg_get_indexdef renders it, and the index is
-- created from that same text, so the catalog matches PgQueuer's byte for byte.
DROP INDEX IF EXISTS {{schema_prefix}}{{queue_table_name}}_heartbeat_id_id1_idx;
DO $pgq$
DECLARE
    status_type text := format_type('{{status_type}}'::regtype, NULL);
    spec record;
    wanted text;
    found_def text;
    found_unique boolean;
BEGIN
    FOR spec IN SELECT * FROM (VALUES
        ('{{queue_table}}', '{{queue_table_name}}_ep_ea_idx', false,
         'USING btree (entrypoint, execute_after) WHERE (status = ''queued''::%1$s)'),
        ('{{queue_table}}', '{{queue_table_name}}_ep_prio_id_idx', false,
         'USING btree (entrypoint, priority DESC, id) WHERE (status = ''queued''::%1$s)'),
        ('{{queue_table}}', '{{queue_table_name}}_picked_heartbeat_idx', false,
         'USING btree (heartbeat) WHERE (status = ''picked''::%1$s)'),
        ('{{queue_table}}', '{{queue_table_name}}_picked_slot_idx', true,
         'USING btree (entrypoint, slot) WHERE ((status = ''picked''::%1$s) AND (slot IS NOT NULL))'),
        ('{{queue_table}}', '{{queue_table_name}}_priority_id_id1_idx', false,
         'USING btree (priority, id DESC) INCLUDE (id) WHERE (status = ''queued''::%1$s)'),
        ('{{queue_table}}', '{{queue_table_name}}_queue_manager_id_idx', false,
         'USING btree (queue_manager_id) WHERE (queue_manager_id IS NOT NULL)'),
        ('{{queue_table}}', '{{queue_table_name}}_unique_dedupe_key', true,
         'USING btree (dedupe_key) WHERE ((status = ANY (ARRAY[''queued''::%1$s, ''picked''::%1$s])) AND (dedupe_key IS NOT NULL))'),
        ('{{queue_table}}', '{{queue_table_name}}_updated_id_id1_idx', false,
         'USING btree (updated, id DESC) INCLUDE (id) WHERE (status = ''picked''::%1$s)'),
        ('{{log_table}}', '{{log_table_name}}_created', false,
         'USING btree (created)'),
        ('{{log_table}}', '{{log_table_name}}_job_id_status', false,
         'USING btree (job_id, created DESC)'),
        ('{{log_table}}', '{{log_table_name}}_not_aggregated', false,
         'USING btree ((1)) WHERE (NOT aggregated)'),
        ('{{log_table}}', '{{log_table_name}}_status', false,
         'USING btree (status)'),
        ('{{statistics_table}}', '{{statistics_table_name}}_unique_count', true,
         'USING btree (priority, date_trunc(''sec''::text, timezone(''UTC''::text, created)), status, entrypoint)')
    ) AS declared(tbl, name, is_unique, tail)
    LOOP
        wanted := format(spec.tail, status_type);
        SELECT regexp_replace(pg_get_indexdef(i.indexrelid), '^.*? USING ', 'USING '), i.indisunique
          INTO found_def, found_unique
          FROM pg_index i
          JOIN pg_class c ON c.oid = i.indexrelid
         WHERE c.relname = spec.name AND c.relnamespace = {{schema_oid}};
        IF found_def IS NOT NULL AND (found_def <> wanted OR found_unique <> spec.is_unique) THEN
            EXECUTE format('DROP INDEX %s%s', '{{schema_prefix}}', spec.name);
            found_def := NULL;
        END IF;
        IF found_def IS NULL THEN
            IF spec.name = '{{statistics_table_name}}_unique_count' THEN
                -- Fold duplicate per-second buckets into the lowest id before the
                -- unique index is built over them.
                {{statistics_fold}};
            END IF;
            EXECUTE format('CREATE %sINDEX %s ON %s %s',
                CASE WHEN spec.is_unique THEN 'UNIQUE ' ELSE '' END, spec.name, spec.tbl, wanted);
        END IF;
    END LOOP;
END
$pgq$;
