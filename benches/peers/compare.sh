#!/usr/bin/env bash
# Peers, side by side: our drain against graphile-worker's and pg-boss's on the same
# PostgreSQL, rounds alternating, each system on a fresh database of its own prepared the same way
# (schema, CHECKPOINT on empty tables, one bulk insert, VACUUM ANALYZE), no-op handlers.
#
#   benches/peers/compare.sh                    # 3 rounds of 50,000 jobs
#   ROUNDS=1 JOBS=20000 benches/peers/compare.sh
#
# Environment: PGHOST/PGPORT/PGUSER (default 127.0.0.1/5432/postgres). graphile-worker and
# pg-boss (each pinned in its folder's package.json and lock file) are installed from npm
# with `npm ci` when missing; Node.js must be on the PATH (pg-boss 12 asks for Node 22 but
# runs this driver on Node 20).
#
# Procrastinate, Oban and River are issue 21's remaining peers.
set -euo pipefail
cd "$(dirname "$0")"

export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-50000}
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT

command -v node >/dev/null || { echo "node is not on the PATH (install Node.js 20)" >&2; exit 1; }
for peer in graphile-worker pg-boss; do
    if [ ! -d "$peer/node_modules/$peer" ]; then
        echo "installing $peer from npm" >&2
        (cd "$peer" && npm ci --silent --engine-strict=false)
    fi
done
(cd ../.. && cargo build -q --release --bench throughput)

fresh() {
    # (DROP ... IF EXISTS says NOTICE when there is nothing to drop.)
    PGOPTIONS="-c client_min_messages=warning" psql -qAtX -d postgres \
        -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
}

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round/$ROUNDS: pgqueuer-rs (128 threads, batch 128)" >&2
    (cd ../.. && PGQ_BENCH_JSON="$RESULTS" PGQ_BENCH_SHAPES=drain PGQ_BENCH_DRAIN_THREADS=128 \
        PGQ_BENCH_DRAIN_JOBS=$JOBS cargo bench -q --bench throughput >/dev/null)
    echo "round $round/$ROUNDS: graphile-worker (concurrentJobs 64, maxPoolSize 20, localQueue 2000)" >&2
    fresh pgqbench_peer_graphile
    node graphile-worker/drain.mjs "postgresql://$PGUSER@$PGHOST:$PGPORT/pgqbench_peer_graphile" \
        "$JOBS" 64 20 2000 >>"$RESULTS"
    psql -qAtX -d postgres -c "DROP DATABASE IF EXISTS pgqbench_peer_graphile WITH (FORCE)"
    echo "round $round/$ROUNDS: pg-boss (batchSize 500, localConcurrency 4, max 8)" >&2
    fresh pgqbench_peer_pgboss
    node pg-boss/drain.mjs "postgresql://$PGUSER@$PGHOST:$PGPORT/pgqbench_peer_pgboss" \
        "$JOBS" 500 4 8 >>"$RESULTS"
    psql -qAtX -d postgres -c "DROP DATABASE IF EXISTS pgqbench_peer_pgboss WITH (FORCE)"
done

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [r["value"] for r in rows if r.get("impl") == "rust" and r["shape"].startswith("drain")]
o = statistics.median(ours)
print("| system | drain jobs/s (median) | rounds | ours / it | CPU per job: machine / its process |")
print("|---|---:|---|---:|---|")
print(f"| pgqueuer-rs (128 threads, batch 128) | {o:,.0f} | {', '.join(f'{x:,.0f}' for x in ours)} | 1.00 | |")
for system in ["graphile-worker", "pg-boss"]:
    mine = [r for r in rows if r.get("system") == system]
    if not mine:
        continue
    xs = [r["jobs_per_s"] for r in mine]
    m = statistics.median(xs)
    cpu_m = statistics.median(r["cpu_per_job_us"]["machine"] for r in mine)
    cpu_p = statistics.median(r["cpu_per_job_us"]["process"] for r in mine)
    print(f"| {system} {mine[0]['version']} | {m:,.0f} | {', '.join(f'{x:,.0f}' for x in xs)} "
          f"| {o / m:.2f}x | {cpu_m:.0f} us / {cpu_p:.0f} us |")
PY
