#!/usr/bin/env bash
# Runs our throughput benchmark and Python PgQueuer 1.6.0 in the same shapes, back to back
# on the same machine and server, and prints the ratio for each shape.
#
#   benches/compare.sh                 # 10 s flow windows, 50,000-job drains, 3 rounds
#   ROUNDS=1 WINDOW=5 DRAIN_JOBS=20000 benches/compare.sh
#
# Environment: PGHOST/PGPORT/PGUSER (default 127.0.0.1/5432/postgres); VENV (default
# benches/.venv, created with pgqueuer==1.6.0, asyncpg and uvloop if missing).
# Both run against one fresh database, dropped at the end; every run empties its tables.
set -euo pipefail
cd "$(dirname "$0")/.."

export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
export PGSSLMODE=disable
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-10}
DRAIN_JOBS=${DRAIN_JOBS:-50000}
VENV=${VENV:-benches/.venv}
DB=pgqbench_compare_$$
RESULTS=$(mktemp)
trap 'psql -qAtX -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true; rm -f "$RESULTS"' EXIT

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV with pgqueuer==1.6.0" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q pgqueuer==1.6.0 asyncpg==0.32.0 pydantic==2.14.4 \
        pydantic-settings==2.16.3 typer==0.29.2 uvloop==0.23.0
fi

psql -qAtX -d postgres -c "CREATE DATABASE $DB"
"$VENV/bin/pgq" --pg-dsn "postgresql://$PGUSER@$PGHOST:$PGPORT/$DB?sslmode=disable" install >/dev/null
cargo build -q --release --bench throughput

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round/$ROUNDS: rust" >&2
    PGQ_BENCH_DATABASE=$DB PGQ_BENCH_JSON="$RESULTS" PGQ_BENCH_SHAPES=flow,drain PGQ_BENCH_WINDOW=$WINDOW \
        PGQ_BENCH_DRAIN_JOBS=$DRAIN_JOBS cargo bench -q --bench throughput >/dev/null
    echo "round $round/$ROUNDS: python" >&2
    PGDATABASE=$DB "$VENV/bin/python" benches/pgqueuer_py.py --window "$WINDOW" \
        --drain-jobs "$DRAIN_JOBS" >>"$RESULTS"
done

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(impl, prefix):
    xs = [r["value"] for r in rows if r["impl"] == impl and r["shape"].startswith(prefix)]
    return statistics.median(xs) if xs else float("nan")
print("| shape | rust jobs/s (median) | python jobs/s (median) | rust / python |")
print("|---|---:|---:|---:|")
for label, rust_shape, py_shape in [
    ("flow, PgQueuer's shape (1 producer x10)", "flow pgqueuer", "flow pgqueuer"),
    ("flow, rust 64 threads + 2 producers x100 vs PgQueuer's shape", "flow 64 threads", "flow pgqueuer"),
    ("drain (rust 64 threads x64, python 5 consumers x10)", "drain 64", "drain"),
    ("drain (rust 128 threads x128, python 5 consumers x10)", "drain 128", "drain"),
]:
    if rust_shape.startswith("drain"):
        tag = rust_shape.split()[1] + " thr"
        xs = [x["value"] for x in rows if x["impl"] == "rust" and x["shape"].startswith("drain") and tag in x["shape"]]
        r = statistics.median(xs) if xs else float("nan")
    else:
        r = med("rust", rust_shape)
    p = med("python", py_shape)
    print(f"| {label} | {r:,.0f} | {p:,.0f} | {r / p:.2f}x |")
PY
