"""Drains N pre-inserted no-op jobs with Procrastinate and prints one JSON line.

Usage: python drain.py <connection string> [jobs] [concurrency] [pool max size]

The database is prepared as for every system: schema installed, CHECKPOINT on empty
tables, one bulk insert, VACUUM ANALYZE. The worker runs with `wait=False`, so it
returns once the queue is empty.
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import procrastinate

from peer_common import Clock, report, run_sql  # noqa: E402

CONN = sys.argv[1]
JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
CONCURRENCY = int(sys.argv[3]) if len(sys.argv) > 3 else 10
POOL = int(sys.argv[4]) if len(sys.argv) > 4 else 12

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=CONN, min_size=1, max_size=POOL)
)
done = 0


@app.task(name="noop")
async def noop(i: int) -> None:
    global done
    done += 1


async def main() -> None:
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        run_sql(CONN, "CHECKPOINT")
        chunk = 5000
        for start in range(0, JOBS, chunk):
            n = min(chunk, JOBS - start)
            await noop.batch_defer_async(*({"i": start + k} for k in range(n)))
        run_sql(CONN, "VACUUM ANALYZE")
        clock = Clock()
        await app.run_worker_async(
            concurrency=CONCURRENCY, wait=False, install_signal_handlers=False
        )
        measured = clock.stop()
    assert done == JOBS, f"ran {done} of {JOBS} jobs"
    report(
        "procrastinate",
        procrastinate.__version__,
        {"concurrency": CONCURRENCY, "pool_max_size": POOL},
        JOBS,
        measured,
    )


asyncio.run(main())
