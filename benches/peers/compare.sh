#!/usr/bin/env bash
# Peers, side by side: our drain against graphile-worker's on the same PostgreSQL, rounds
# alternating, each system on a fresh database of its own prepared the same way
# (schema, CHECKPOINT on empty tables, one bulk insert, VACUUM ANALYZE), no-op handlers.
#
#   benches/peers/compare.sh                    # 3 rounds of 50,000 jobs
#   ROUNDS=1 JOBS=20000 benches/peers/compare.sh
#
# Environment: PGHOST/PGPORT/PGUSER (default 127.0.0.1/5432/postgres). graphile-worker
# (pinned in graphile-worker/package.json and its lock file) is installed from npm with
# `npm ci` when missing; Node.js must be on the PATH.
#
# Only graphile-worker so far: pg-boss, Procrastinate, Oban and River are issue 21's
# remaining peers.
set -euo pipefail
cd "$(dirname "$0")"

export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-50000}
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT

command -v node >/dev/null || { echo "node is not on the PATH (install Node.js 20)" >&2; exit 1; }
if [ ! -d graphile-worker/node_modules/graphile-worker ]; then
    echo "installing graphile-worker from npm" >&2
    (cd graphile-worker && npm ci --silent)
fi
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
done

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [r["value"] for r in rows if r.get("impl") == "rust" and r["shape"].startswith("drain")]
gw = [r["jobs_per_s"] for r in rows if r.get("system") == "graphile-worker"]
gw_cpu = [r["cpu_per_job_us"] for r in rows if r.get("system") == "graphile-worker"]
print("| system | drain jobs/s (median) | rounds | ours / it |")
print("|---|---:|---|---:|")
o = statistics.median(ours)
print(f"| pgqueuer-rs | {o:,.0f} | {', '.join(f'{x:,.0f}' for x in ours)} | 1.00 |")
g = statistics.median(gw)
cpu = statistics.median(c["machine"] for c in gw_cpu), statistics.median(c["process"] for c in gw_cpu)
print(f"| graphile-worker 0.18.0 | {g:,.0f} | {', '.join(f'{x:,.0f}' for x in gw)} | {o / g:.2f}x |")
print(f"\ngraphile-worker CPU per job: {cpu[0]:.0f} us machine, {cpu[1]:.0f} us in its process")
PY
