"""Drains N pre-inserted no-op jobs with Procrastinate and prints one JSON line.

Usage: python drain.py <connection string> [jobs] [concurrency] [pool max size]

The database is prepared as for every system: schema installed, CHECKPOINT on empty
tables, one bulk insert, VACUUM ANALYZE. The worker runs with `wait=False`, so it
returns once the queue is empty.
"""

import asyncio
import json
import os
import sys
import time

import procrastinate
import psycopg

CONN = sys.argv[1]
JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
CONCURRENCY = int(sys.argv[3]) if len(sys.argv) > 3 else 10
POOL = int(sys.argv[4]) if len(sys.argv) > 4 else 12
TICKS = os.sysconf("SC_CLK_TCK")

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=CONN, min_size=1, max_size=POOL)
)
done = 0


@app.task(name="noop")
async def noop(i: int) -> None:
    global done
    done += 1


def machine_busy() -> int:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return sum(fields) - fields[3] - fields[4]


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


async def main() -> None:
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        with psycopg.connect(CONN, autocommit=True) as c:
            c.execute("CHECKPOINT")
        chunk = 5000
        for start in range(0, JOBS, chunk):
            n = min(chunk, JOBS - start)
            await noop.batch_defer_async(*({"i": start + k} for k in range(n)))
        with psycopg.connect(CONN, autocommit=True) as c:
            c.execute("VACUUM ANALYZE")
        t0, m0, p0 = time.perf_counter(), machine_busy(), own_cpu()
        await app.run_worker_async(
            concurrency=CONCURRENCY, wait=False, install_signal_handlers=False
        )
        secs = time.perf_counter() - t0
        m1, p1 = machine_busy(), own_cpu()
    assert done == JOBS, f"ran {done} of {JOBS} jobs"
    print(
        json.dumps(
            {
                "system": "procrastinate",
                "version": procrastinate.__version__,
                "settings": {"concurrency": CONCURRENCY, "pool_max_size": POOL},
                "shape": f"drain {JOBS}",
                "jobs_per_s": JOBS / secs,
                "cpu_per_job_us": {
                    "machine": (m1 - m0) / TICKS / JOBS * 1e6,
                    "process": (p1 - p0) / JOBS * 1e6,
                },
            }
        )
    )


asyncio.run(main())
