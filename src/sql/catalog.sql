-- A normalized, order-independent description of every PgQueuer object in one schema:
-- tables (persistence), columns (type, nullability, default, identity), indexes
-- (pg_get_indexdef), constraints, sequences, enum labels in order, functions (body with
-- whitespace runs collapsed) and triggers. One line per fact, sorted, so two databases
-- can be compared as text regardless of column order.
--
-- The literal {{schema}} is replaced with the schema name before the query runs
-- (tests/fixtures/capture.sh does it with sed, the Rust tests with str::replace).
WITH rels AS (
    SELECT c.oid, c.relname, c.relkind, c.relpersistence
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = '{{schema}}' AND c.relkind IN ('r', 'S')
      -- not this crate's own tables (sql/rates.rs, sql/overrides.rs): PgQueuer has none
      AND c.relname !~ '_rs_(rates|limits|declared)'
)
SELECT line FROM (
    SELECT 'table ' || relname || ' persistence=' || relpersistence::text AS line
    FROM rels WHERE relkind = 'r'
    UNION ALL
    SELECT 'column ' || c.relname || '.' || a.attname || ' '
        || format_type(a.atttypid, a.atttypmod)
        || CASE WHEN a.attnotnull THEN ' not null' ELSE ' null' END
        || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
        || CASE WHEN a.attidentity <> '' THEN ' identity=' || a.attidentity::text ELSE '' END
    FROM rels c
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
    WHERE c.relkind = 'r'
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN rels c ON c.oid = i.indrelid
    UNION ALL
    SELECT 'constraint ' || c.relname || ' ' || con.conname || ' ' || pg_get_constraintdef(con.oid)
    FROM pg_constraint con JOIN rels c ON c.oid = con.conrelid
    UNION ALL
    SELECT 'sequence ' || s.relname || ' ' || format_type(seq.seqtypid, NULL)
        || ' start=' || seq.seqstart || ' increment=' || seq.seqincrement || ' cache=' || seq.seqcache
    FROM rels s JOIN pg_sequence seq ON seq.seqrelid = s.oid
    UNION ALL
    SELECT 'enum ' || t.typname || ' ' || string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
    FROM pg_type t
    JOIN pg_namespace n ON n.oid = t.typnamespace
    JOIN pg_enum e ON e.enumtypid = t.oid
    WHERE n.nspname = '{{schema}}'
    GROUP BY t.typname
    UNION ALL
    SELECT 'function ' || p.proname || ' returns ' || format_type(p.prorettype, NULL)
        || ' language ' || l.lanname
        || ' body ' || btrim(regexp_replace(p.prosrc, '\s+', ' ', 'g'))
    FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace
    JOIN pg_language l ON l.oid = p.prolang
    WHERE n.nspname = '{{schema}}'
      -- not this crate's statement functions (sql/functions.rs): PgQueuer has none
      AND p.proname !~ 'pgqueuer_rs_[0-9a-f]{16}$'
    UNION ALL
    SELECT 'trigger ' || pg_get_triggerdef(tg.oid)
    FROM pg_trigger tg JOIN rels c ON c.oid = tg.tgrelid
    WHERE NOT tg.tgisinternal
) facts
ORDER BY line;
