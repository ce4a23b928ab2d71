#!/usr/bin/env python3
"""Python PgQueuer 1.6.0 measured in the shapes of benches/throughput.rs, for compare.sh.

    flow   one producer enqueues batches of 10 while 5 PgQueuer consumers (one connection
           each) run no-op handlers with batch_size 10; jobs/s = handler calls inside the
           window, after 2 s of warm-up (PgQueuer's own benchmark shape).
    drain  N jobs enqueued up front, then 5 consumers in drain mode; jobs/s = N / time.

The database comes from PGDSN (or the libpq PG* variables) and must have the schema.
Prints one JSON line per result: {"impl": "python", "shape": ..., "value": ..., "unit": "jobs/s"}.
"""

import argparse
import asyncio
import json
import time

import asyncpg
from pgqueuer import AsyncpgDriver, Job, PgQueuer, Queries
from pgqueuer.types import QueueExecutionMode

try:
    import uvloop
except ImportError:  # the comparison still runs, a little slower
    uvloop = None

ENTRYPOINT = "fetch"
CONSUMERS = 5


async def connect(dsn):
    return await asyncpg.connect(dsn=dsn or None)


async def reset(dsn):
    conn = await connect(dsn)
    await conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
    await conn.execute("CHECKPOINT")
    await conn.close()


async def consumers(dsn, counter):
    conns, workers = [], []
    for _ in range(CONSUMERS):
        conn = await connect(dsn)
        conns.append(conn)
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(ENTRYPOINT)
        async def fetch(job: Job) -> None:
            counter[0] += 1

        workers.append(pgq)
    return conns, workers


async def flow(dsn, window):
    await reset(dsn)
    counter = [0]
    conns, workers = await consumers(dsn, counter)
    producer_conn = await connect(dsn)
    queries = Queries(AsyncpgDriver(producer_conn))
    stop = asyncio.Event()

    async def produce():
        n = 0
        while not stop.is_set():
            await queries.enqueue([ENTRYPOINT] * 10, [str(n + i).encode() for i in range(10)], [0] * 10)
            n += 10

    tasks = [asyncio.ensure_future(w.run(batch_size=10, mode=QueueExecutionMode.continuous)) for w in workers]
    producer = asyncio.ensure_future(produce())
    await asyncio.sleep(2.0)
    c0, t0 = counter[0], time.monotonic()
    await asyncio.sleep(window)
    c1, t1 = counter[0], time.monotonic()
    stop.set()
    await producer
    for w in workers:
        w.shutdown.set()
    await asyncio.wait(tasks, timeout=10)
    for c in conns + [producer_conn]:
        await c.close()
    return (c1 - c0) / (t1 - t0)


async def drain(dsn, jobs):
    await reset(dsn)
    conn = await connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    for start in range(0, jobs, 1000):
        n = min(1000, jobs - start)
        await queries.enqueue([ENTRYPOINT] * n, [str(start + i).encode() for i in range(n)], [0] * n)
    await conn.execute("VACUUM ANALYZE pgqueuer")
    await conn.close()
    counter = [0]
    conns, workers = await consumers(dsn, counter)
    started = time.monotonic()
    await asyncio.gather(*(w.run(batch_size=10, mode=QueueExecutionMode.drain) for w in workers))
    elapsed = time.monotonic() - started
    for c in conns:
        await c.close()
    assert counter[0] == jobs, f"drain ran {counter[0]} of {jobs} jobs"
    return jobs / elapsed


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default="")
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--drain-jobs", type=int, default=50_000)
    ap.add_argument("--shapes", default="flow,drain")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    if "flow" in shapes:
        rate = await flow(a.dsn, a.window)
        print(json.dumps({"impl": "python", "shape": "flow pgqueuer", "value": rate, "unit": "jobs/s"}), flush=True)
    if "drain" in shapes:
        rate = await drain(a.dsn, a.drain_jobs)
        print(json.dumps({"impl": "python", "shape": "drain", "value": rate, "unit": "jobs/s"}), flush=True)


if __name__ == "__main__":
    if uvloop is not None:
        uvloop.run(main())
    else:
        asyncio.run(main())
