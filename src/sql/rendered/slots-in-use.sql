-- Rendered by src/sql for the default names; do not edit.
SELECT e.entrypoint,
         (SELECT slot FROM pgqueuer WHERE entrypoint = e.entrypoint AND status = 'picked'::pgqueuer_status AND slot IS NOT NULL ORDER BY slot DESC LIMIT 1) AS highest,
         (SELECT count(*) FROM pgqueuer WHERE entrypoint = e.entrypoint AND status = 'picked'::pgqueuer_status AND slot IS NOT NULL) AS in_use
         FROM UNNEST($1::text[]) WITH ORDINALITY AS e(entrypoint, ord) ORDER BY e.ord;
