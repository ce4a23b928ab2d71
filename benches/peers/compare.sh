#!/usr/bin/env bash
# Peers, side by side: our drain against graphile-worker's, pg-boss's, Procrastinate's,
# Oban for Python's and River's (riverqueue, its Rust client) on the same PostgreSQL,
# rounds alternating, each system on a fresh database of its own prepared the same way
# (schema, CHECKPOINT on empty tables, one bulk insert, VACUUM ANALYZE), no-op handlers.
#
#   benches/peers/compare.sh                          # 3 rounds of 50,000 jobs, every peer
#   ROUNDS=1 JOBS=20000 PEERS="graphile pgboss" benches/peers/compare.sh
#
# Environment: PGHOST/PGPORT/PGUSER (default 127.0.0.1/5432/postgres); PEERS, a subset of
# "graphile pgboss procrastinate oban river" (default: all); SLOW_JOBS, the jobs for the
# peers that drain at a few hundred jobs/s (Procrastinate; default JOBS / 10); FLOOR=0 to
# leave out our durability-balanced drain and the floor (the writes PgQueuer's schema
# requires per job, with no worker: the throughput bench's `floor` shape); LATENCY=0 to
# leave out enqueue-to-start latency (ours and graphile-worker's: 200 jobs 50 ms apart to
# an idle worker, 1,000 jobs 5 ms apart); LIMITED=0 to leave out the limited drain
# (LIMITED_JOBS jobs, default 2,000, of an entrypoint limited to 1 against a
# graphile-worker named queue, which runs one job at a time fleet-wide, and a pg-boss
# singleton queue, one active job at a time: PGBOSS_LIMITED_JOBS, default LIMITED_JOBS /
# 20); FLOW=0 to leave out the flow (one producer enqueuing batches of 10 back to back
# while the workers run, WINDOW seconds after 2 s of warm-up, default 10: ours, in
# PgQueuer's benchmark shape, graphile-worker's and pg-boss's, with the backlog left).
#
# Every peer is pinned and installed by this script when missing, nothing by hand:
# graphile-worker and pg-boss from npm (`npm ci` on their lock files; Node.js must be on
# the PATH; pg-boss 12 asks for Node 22 and runs this driver on Node 20), Procrastinate
# and Oban from PyPI (pinned requirements files, in venvs made with uv, which fetches the
# Python 3.12 that Oban needs where no pyenv install of it is found), River from
# crates.io (its own Cargo.lock).
set -euo pipefail
cd "$(dirname "$0")"
HERE=$(pwd)

export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-50000}
SLOW_JOBS=${SLOW_JOBS:-$((JOBS / 10))}
PEERS=${PEERS:-graphile pgboss procrastinate oban river}
FLOOR=${FLOOR:-1}
LATENCY=${LATENCY:-1}
LIMITED=${LIMITED:-1}
LIMITED_JOBS=${LIMITED_JOBS:-2000}
GRAPHILE_LIMITED_JOBS=${GRAPHILE_LIMITED_JOBS:-$((LIMITED_JOBS / 10))}
PGBOSS_LIMITED_JOBS=${PGBOSS_LIMITED_JOBS:-$((LIMITED_JOBS / 20))}
FLOW=${FLOW:-1}
WINDOW=${WINDOW:-10}
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT

wants() { [[ " $PEERS " == *" $1 "* ]]; }

uv_tool() {
    if [ ! -x .tools/bin/uv ]; then
        echo "installing uv (for the Python peers' venvs)" >&2
        python3 -m venv .tools
        .tools/bin/pip install -q uv==0.13.9
    fi
    echo "$HERE/.tools/bin/uv"
}

python_peer() { # dir, python version
    if [ ! -x "$1/.venv/bin/python" ]; then
        local uv
        uv=$(uv_tool)
        echo "installing $1 from PyPI" >&2
        # A pyenv install of that version serves even when pyenv has not selected it
        # (its shim then refuses to run, and uv would look no further).
        local python=$2 root
        if root=$(pyenv root 2>/dev/null); then
            for candidate in "$root"/versions/"$2".*/bin/python"$2"; do
                [ -x "$candidate" ] && python=$candidate
            done
        fi
        if ! "$uv" venv -q --python "$python" "$1/.venv"; then
            echo "$1 needs Python $2 or newer, which is not installed and uv could not" \
                "download it: install one (python.org, or 'uv python install $2' where" \
                "GitHub is reachable), or leave $1 out of PEERS" >&2
            exit 1
        fi
        VIRTUAL_ENV="$HERE/$1/.venv" "$uv" pip install -q -r "$1/requirements.txt"
    fi
}

for peer in graphile-worker pg-boss; do
    short=${peer/-worker/}; short=${short/-/}
    if wants "$short" && [ ! -d "$peer/node_modules/$peer" ]; then
        command -v node >/dev/null || { echo "node is not on the PATH (install Node.js 20)" >&2; exit 1; }
        echo "installing $peer from npm" >&2
        (cd "$peer" && npm ci --silent --engine-strict=false)
    fi
done
if wants procrastinate; then python_peer procrastinate 3.11; fi
if wants oban; then python_peer oban 3.12; fi
if wants river; then
    echo "building the River driver (cargo, release)" >&2
    cargo build -q --release --manifest-path river/Cargo.toml
fi
(cd ../.. && cargo build -q --release --bench throughput)

fresh() {
    # (DROP ... IF EXISTS says NOTICE when there is nothing to drop.)
    PGOPTIONS="-c client_min_messages=warning" psql -qAtX -d postgres \
        -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
}

peer() { # name, label, command...
    local db=pgqbench_peer_$1
    echo "round $round/$ROUNDS: $2" >&2
    fresh "$db"
    local dsn="postgresql://$PGUSER@$PGHOST:$PGPORT/$db"
    shift 2
    "${@/DSN/$dsn}" >>"$RESULTS"
    psql -qAtX -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
}

ours() { # label, shapes, extra environment...
    echo "round $round/$ROUNDS: $1" >&2
    local shapes=$2
    shift 2
    (cd ../.. && env PGQ_BENCH_JSON="$RESULTS" PGQ_BENCH_SHAPES="$shapes" \
        PGQ_BENCH_DRAIN_THREADS=128 PGQ_BENCH_DRAIN_JOBS="$JOBS" "$@" \
        cargo bench -q --bench throughput 2>&1 >/dev/null) >&2
}

for round in $(seq 1 "$ROUNDS"); do
    ours "pgqueuer-rs (128 threads, batch 128)" drain
    if [ "$FLOOR" = 1 ]; then
        ours "pgqueuer-rs, durability balanced" drain PGQ_BENCH_DURABILITY=balanced
        ours "PgQueuer's schema alone: the floor (no worker)" floor
    fi
    if wants graphile; then
        peer graphile "graphile-worker (concurrentJobs 64, maxPoolSize 20, localQueue 2000)" \
            node graphile-worker/drain.mjs DSN "$JOBS" 64 20 2000
    fi
    if wants pgboss; then
        peer pgboss "pg-boss (batchSize 500, localConcurrency 4, max 8)" \
            node pg-boss/drain.mjs DSN "$JOBS" 500 4 8
    fi
    if wants procrastinate; then
        peer procrastinate "procrastinate ($SLOW_JOBS jobs, concurrency 10, pool 12)" \
            procrastinate/.venv/bin/python procrastinate/drain.py DSN "$SLOW_JOBS" 10 12
    fi
    if wants oban; then
        peer oban "oban-py (queue limit 64, pool 10)" \
            oban/.venv/bin/python oban/drain.py DSN "$JOBS" 64 10
    fi
    if wants river; then
        peer river "river (max_workers 100, fetch cooldown 1 ms)" \
            river/target/release/pgqueuer-peer-river DSN "$JOBS" 100 1
    fi
    if [ "$FLOW" = 1 ]; then
        ours "pgqueuer-rs flow (1 producer x10, 16 threads x10)" flow \
            PGQ_BENCH_FLOW=pgqueuer PGQ_BENCH_WINDOW="$WINDOW"
        if wants graphile; then
            peer graphile "graphile-worker flow (concurrentJobs 64, maxPoolSize 20, localQueue 2000)" \
                node graphile-worker/flow.mjs DSN "$WINDOW" 64 20 2000
        fi
        if wants pgboss; then
            peer pgboss "pg-boss flow (batchSize 500, localConcurrency 4, max 8)" \
                node pg-boss/flow.mjs DSN "$WINDOW" 500 4 8
        fi
    fi
    if [ "$LATENCY" = 1 ]; then
        ours "pgqueuer-rs latency (4 threads)" latency
        if wants graphile; then
            peer graphile "graphile-worker latency (concurrentJobs 4, maxPoolSize 10)" \
                node graphile-worker/latency.mjs DSN 200 4 10
        fi
    fi
    if [ "$LIMITED" = 1 ]; then
        ours "pgqueuer-rs, limit 1 ($LIMITED_JOBS jobs, 16 threads)" limits-drain \
            PGQ_BENCH_LIMITS=1 PGQ_BENCH_DRAIN_JOBS="$LIMITED_JOBS"
        if wants graphile; then
            peer graphile "graphile-worker, one named queue ($GRAPHILE_LIMITED_JOBS jobs)" \
                node graphile-worker/limited.mjs DSN "$GRAPHILE_LIMITED_JOBS" 16 10
        fi
        if wants pgboss; then
            peer pgboss "pg-boss, one singleton queue ($PGBOSS_LIMITED_JOBS jobs)" \
                node pg-boss/limited.mjs DSN "$PGBOSS_LIMITED_JOBS" 4 8
        fi
    fi
done

python3 - "$RESULTS" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]

def median_pair(notes, pattern, fmt):
    """Medians of the two numbers `pattern` finds in each note, formatted by `fmt`."""
    got = [re.search(pattern, n) for n in notes]
    got = [tuple(map(float, g.groups())) for g in got if g]
    if not got:
        return ""
    return fmt(statistics.median(g[0] for g in got), statistics.median(g[1] for g in got))

def cpu_of(notes):
    return median_pair(notes, r"CPU/job ([0-9.]+) us machine, ([0-9.]+) us process",
                       lambda m, p: f"{m:.0f} us / {p:.1f} us")

def wal_of(notes):
    return median_pair(notes, r"WAL/job ([0-9.]+) B, ([0-9.]+) records",
                       lambda b, r: f"{b:,.0f} B, {r:.1f}")

def rounds(xs):
    return ", ".join(f"{x:,.0f}" for x in xs)

def settings_of(row):
    return ", ".join(f"{k} {v}" for k, v in row["settings"].items())

def peer_cpu(mine):
    """A peer's median CPU per job, machine and its process."""
    m = statistics.median(r["cpu_per_job_us"]["machine"] for r in mine)
    p = statistics.median(r["cpu_per_job_us"]["process"] for r in mine)
    return f"{m:.0f} us / {p:.0f} us"

ours = {}
for r in rows:
    if r.get("impl") == "rust" and (r["shape"].startswith("drain") or r["shape"].startswith("floor")):
        ours.setdefault(r["shape"], []).append(r)
drain = next(k for k in ours if k.startswith("drain") and "durability" not in k)
o = statistics.median(r["value"] for r in ours[drain])
print("| system | settings | drain jobs/s (median) | rounds | ours / it | CPU per job: machine / its process | WAL per job: bytes, records |")
print("|---|---|---:|---|---:|---|---|")
for shape, mine in ours.items():
    xs = [r["value"] for r in mine]
    m = statistics.median(xs)
    name = "pgqueuer-rs" if shape.startswith("drain") else "PgQueuer's schema alone"
    notes = [r["note"] for r in mine]
    print(f"| {name} | {shape} | {m:,.0f} | {rounds(xs)} | {o / m:.2f}x "
          f"| {cpu_of(notes)} | {wal_of(notes)} |")
systems = []
for r in rows:
    if "system" in r and r["system"] not in systems:
        systems.append(r["system"])
for system in systems:
    mine = [r for r in rows if r.get("system") == system and r["shape"].startswith("drain")]
    if not mine:
        continue
    xs = [r["jobs_per_s"] for r in mine]
    m = statistics.median(xs)
    print(f"| {system} {mine[0]['version']} | {settings_of(mine[0])}; {mine[0]['shape']} | {m:,.0f} "
          f"| {rounds(xs)} | {o / m:.2f}x | {peer_cpu(mine)} | |")

flows = [r for r in rows if r.get("impl") == "rust" and r["shape"].startswith("flow")]
if flows:
    def backlog_of(note):
        m = re.search(r"backlog after: ([0-9]+)", note)
        return int(m.group(1)) if m else None
    xs = [r["value"] for r in flows]
    fo = statistics.median(xs)
    print()
    print("| system | settings | flow jobs/s (median) | rounds | backlog left (median) | ours / it | CPU per job: machine / its process |")
    print("|---|---|---:|---|---:|---:|---|")
    ours_backlog = statistics.median(b for b in map(backlog_of, (r["note"] for r in flows)) if b is not None)
    print(f"| pgqueuer-rs | {flows[0]['shape']} | {fo:,.0f} | {rounds(xs)} "
          f"| {ours_backlog:,.0f} | 1.00x | {cpu_of([r['note'] for r in flows])} |")
    for system in systems:
        mine = [r for r in rows if r.get("system") == system and r["shape"].startswith("flow")]
        if not mine:
            continue
        xs = [r["jobs_per_s"] for r in mine]
        m = statistics.median(xs)
        print(f"| {system} {mine[0]['version']} | {settings_of(mine[0])} | {m:,.0f} | {rounds(xs)} "
              f"| {statistics.median(r['backlog'] for r in mine):,.0f} | {fo / m:.2f}x | {peer_cpu(mine)} |")

latency = {}
for r in rows:
    if r.get("impl") == "rust" and r["shape"].startswith("latency"):
        shape, stat = r["shape"].rsplit(": ", 1)
        latency.setdefault(("pgqueuer-rs", "4 threads"), {}).setdefault((shape, stat), []).append(r["value"])
    elif "latency_ms" in r:
        shape = r["shape"].split(" (")[0]
        key = (f"{r['system']} {r['version']}", settings_of(r))
        for stat, label in (("p50", "median"), ("p99", "p99")):
            latency.setdefault(key, {}).setdefault((shape, label), []).append(r["latency_ms"][stat])
if latency:
    cols = [("latency idle", "median"), ("latency idle", "p99"),
            ("latency trickle 200/s", "median"), ("latency trickle 200/s", "p99")]
    print()
    print("| system | settings | idle median ms | idle p99 ms | 200/s median ms | 200/s p99 ms |")
    print("|---|---|---:|---:|---:|---:|")
    for (system, settings), got in latency.items():
        cells = [f"{statistics.median(got[c]):.2f}" if c in got else "" for c in cols]
        print(f"| {system} | {settings} | " + " | ".join(cells) + " |")
# The bench also records a binding limit's bound ("limits drain: limit 1, bound"): not a drain.
limited = [r for r in rows if r.get("impl") == "rust" and r["shape"].startswith("limits drain")
           and not r["shape"].endswith(", bound")]
theirs = [r for r in rows if r.get("shape", "").startswith("limited drain")]

if limited:
    xs = [r["value"] for r in limited]
    lo = statistics.median(xs)
    print()
    print("| system | settings | limited drain jobs/s (median) | rounds | ours / it |")
    print("|---|---|---:|---|---:|")
    print(f"| pgqueuer-rs | {limited[0]['shape']}, 16 threads | {lo:,.0f} | {rounds(xs)} | 1.00x |")
    for system in sorted({r["system"] for r in theirs}):
        mine = [r for r in theirs if r["system"] == system]
        xs = [r["jobs_per_s"] for r in mine]
        m = statistics.median(xs)
        print(f"| {system} {mine[0]['version']} | {settings_of(mine[0])} | {m:,.0f} | {rounds(xs)} | {lo / m:.2f}x |")
PY
