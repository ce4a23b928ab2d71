"""Drains N pre-inserted no-op jobs with Oban for Python and prints one JSON line.

Usage: python drain.py <connection string> [jobs] [queue limit] [pool max size]

The database is prepared as for every system: schema installed, CHECKPOINT on empty
tables, one bulk insert, VACUUM ANALYZE. Then a server instance runs the `default`
queue until every job has run.
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from oban import Oban, worker
from oban.schema import install

from peer_common import Clock, report, run_sql  # noqa: E402

CONN = sys.argv[1]
JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
LIMIT = int(sys.argv[3]) if len(sys.argv) > 3 else 64
POOL = int(sys.argv[4]) if len(sys.argv) > 4 else 10

done = 0
all_done = asyncio.Event()


@worker(queue="default")
class Noop:
    async def process(self, job):
        global done
        done += 1
        if done == JOBS:
            all_done.set()


async def main() -> None:
    pool = await Oban.create_pool(CONN, max_size=POOL)
    await install(pool)
    run_sql(CONN, "CHECKPOINT")
    async with Oban(pool=pool) as client:
        chunk = 5000
        for start in range(0, JOBS, chunk):
            n = min(chunk, JOBS - start)
            await client.enqueue_many([Noop.new({"i": start + k}) for k in range(n)])
    run_sql(CONN, "VACUUM ANALYZE")
    clock = Clock()
    server = Oban(pool=pool, queues={"default": LIMIT})
    await server.start()
    await all_done.wait()
    measured = clock.stop()
    await server.stop()
    await pool.close()
    report("oban-py", "0.7.0", {"queue_limit": LIMIT, "pool_max_size": POOL}, JOBS, measured)


asyncio.run(main())
