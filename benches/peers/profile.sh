#!/usr/bin/env bash
# Where PostgreSQL spends its time per job: our drain and graphile-worker's, statement by
# statement, from pg_stat_statements (execution time, rows, WAL records and bytes per job),
# and WAL per job for the whole run from pg_current_wal_lsn().
#
#   benches/peers/profile.sh            # 30,000 jobs each
#   JOBS=50000 benches/peers/profile.sh
#
# Needs pg_stat_statements preloaded (shared_preload_libraries = 'pg_stat_statements', a
# server restart); the script says so and stops otherwise. Environment as compare.sh.
set -euo pipefail
cd "$(dirname "$0")"

export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
JOBS=${JOBS:-30000}
P="psql -qAtX -d postgres"

if ! $P -c "SHOW shared_preload_libraries" | grep -q pg_stat_statements; then
    echo "pg_stat_statements is not preloaded: run" >&2
    echo "  psql -c \"ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'\"" >&2
    echo "and restart the server (pg_ctlcluster 15 main restart), then run this again" >&2
    exit 1
fi
$P -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
if [ ! -d graphile-worker/node_modules/graphile-worker ]; then
    (cd graphile-worker && npm ci --silent)
fi
(cd ../.. && cargo build -q --release --bench throughput)

report() { # database, label
    echo
    echo "## $2: per job, statements of database $1 (calls and time include setup)"
    $P -F ' | ' -c "
        SELECT round(calls::numeric / $JOBS, 3) AS calls_per_job,
               round((total_exec_time * 1000 / $JOBS)::numeric, 1) AS exec_us_per_job,
               round(rows::numeric / $JOBS, 2) AS rows_per_job,
               round(wal_records::numeric / $JOBS, 2) AS wal_records_per_job,
               round(wal_bytes::numeric / $JOBS, 0) AS wal_bytes_per_job,
               left(regexp_replace(query, '\s+', ' ', 'g'), 70) AS statement
          FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = '$1' AND total_exec_time * 1000 / $JOBS >= 0.05
         ORDER BY total_exec_time DESC LIMIT 12" |
        sed '1i calls/job | exec µs/job | rows/job | WAL records/job | WAL bytes/job | statement'
}

wal_now() { $P -c "SELECT pg_current_wal_lsn()"; }
wal_per_job() { $P -c "SELECT round(pg_wal_lsn_diff('$2', '$1') / $JOBS)"; }

fresh() {
    PGOPTIONS="-c client_min_messages=warning" $P \
        -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
}

fresh pgqbench_profile_ours
$P -c "SELECT pg_stat_statements_reset()" >/dev/null
start=$(wal_now)
(cd ../.. && PGQ_BENCH_DATABASE=pgqbench_profile_ours PGQ_BENCH_SHAPES=drain \
    PGQ_BENCH_DRAIN_THREADS=128 PGQ_BENCH_DRAIN_JOBS=$JOBS cargo bench -q --bench throughput \
    2>&1 >/dev/null | grep -E "drain")
end=$(wal_now)
report pgqbench_profile_ours "pgqueuer-rs, 128 threads, batch 128"
echo "WAL per job, whole run (insert included): $(wal_per_job "$start" "$end") bytes"
$P -c "DROP DATABASE IF EXISTS pgqbench_profile_ours WITH (FORCE)"

fresh pgqbench_profile_graphile
$P -c "SELECT pg_stat_statements_reset()" >/dev/null
start=$(wal_now)
node graphile-worker/drain.mjs "postgresql://$PGUSER@$PGHOST:$PGPORT/pgqbench_profile_graphile" \
    "$JOBS" 64 20 2000
end=$(wal_now)
report pgqbench_profile_graphile "graphile-worker 0.18.0, concurrentJobs 64"
echo "WAL per job, whole run (insert included): $(wal_per_job "$start" "$end") bytes"
$P -c "DROP DATABASE IF EXISTS pgqbench_profile_graphile WITH (FORCE)"
