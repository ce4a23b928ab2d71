#!/usr/bin/env python3
"""Python PgQueuer 1.6.0 through a held horizon, in the shape of benches/horizon.rs.

One PgQueuer consumer (batch_size 10) runs handlers that sleep HANDLER_MS, one producer
offers RATE jobs/s in batches of BATCH (each payload its send time), and a third session
takes a REPEATABLE READ snapshot at HOLD_AT s and keeps it open HOLD_SECS s. One row per
WINDOW s: completions/s, enqueue-to-start p50/p99/max, queued depth, dead tuples.

    target/tmp/pgqueuer-python/bin/python benches/horizon_py.py --dsn postgres://postgres@127.0.0.1/db

The database must have PgQueuer's schema (cargo bench --bench horizon makes one; `pgq
install` too). The interpreter must import pgqueuer 1.6.0 and asyncpg (the tests' venv).
"""

import argparse
import asyncio
import time

import asyncpg
from pgqueuer import AsyncpgDriver, Job, PgQueuer, Queries
from pgqueuer.types import QueueExecutionMode

ENTRYPOINT = "held"


def pct(values, q):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, round((len(values) - 1) * q))]


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default="")
    ap.add_argument("--rate", type=int, default=800)
    ap.add_argument("--batch", type=int, default=40)
    ap.add_argument("--handler-ms", type=float, default=1.0)
    ap.add_argument("--hold-at", type=float, default=60.0)
    ap.add_argument("--hold-secs", type=float, default=600.0)
    ap.add_argument("--after", type=float, default=30.0)
    ap.add_argument("--window", type=float, default=30.0)
    a = ap.parse_args()
    total = a.hold_at + a.hold_secs + a.after

    admin = await asyncpg.connect(dsn=a.dsn or None)
    await admin.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
    worker_conn = await asyncpg.connect(dsn=a.dsn or None)
    producer_conn = await asyncpg.connect(dsn=a.dsn or None)
    pgq = PgQueuer(AsyncpgDriver(worker_conn))
    windows = {}
    began = time.monotonic()

    def window_of():
        return int((time.monotonic() - began) / a.window)

    @pgq.entrypoint(ENTRYPOINT)
    async def held(job: Job) -> None:
        sent = float(job.payload.decode())
        w = windows.setdefault(window_of(), {"waits": [], "done": 0})
        w["waits"].append((time.time() - sent) * 1000.0)
        await asyncio.sleep(a.handler_ms / 1000.0)
        windows.setdefault(window_of(), {"waits": [], "done": 0})["done"] += 1

    queries = Queries(AsyncpgDriver(producer_conn))

    async def produce():
        every = a.batch / a.rate
        next_at = time.monotonic()
        while time.monotonic() - began < total:
            sent = str(time.time()).encode()
            await queries.enqueue([ENTRYPOINT] * a.batch, [sent] * a.batch, [0] * a.batch)
            next_at += every
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    consumer = asyncio.ensure_future(pgq.run(batch_size=10, mode=QueueExecutionMode.continuous))
    producer = asyncio.ensure_future(produce())
    holder = None
    printed = 0
    print(f"horizon (Python PgQueuer): {a.rate} jobs/s in batches of {a.batch}, {a.handler_ms} ms "
          f"handlers; snapshot held from {a.hold_at} s for {a.hold_secs} s", flush=True)
    print("\n| t (s) | held | done/s | p50 ms | p99 ms | max ms | queued | dead tuples |", flush=True)
    print("|---:|---|---:|---:|---:|---:|---:|---:|", flush=True)
    rows = []
    while time.monotonic() - began < total + a.window:
        await asyncio.sleep(0.2)
        t = time.monotonic() - began
        if holder is None and a.hold_at <= t < a.hold_at + a.hold_secs:
            holder = await asyncpg.connect(dsn=a.dsn or None)
            await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await holder.fetchval("SELECT count(*) FROM pgqueuer")
            print(f"  (snapshot taken at {t:.0f} s)", flush=True)
        if holder is not None and t >= a.hold_at + a.hold_secs:
            await holder.execute("COMMIT")
            await holder.close()
            holder = None
            print(f"  (snapshot released at {t:.0f} s)", flush=True)
        while printed < window_of():
            end = a.window * (printed + 1)
            held_now = a.hold_at < end <= a.hold_at + a.hold_secs + a.window
            w = windows.get(printed, {"waits": [], "done": 0})
            queued = await admin.fetchval("SELECT count(*) FROM pgqueuer WHERE status = 'queued'")
            dead = await admin.fetchval(
                "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relname = 'pgqueuer'")
            row = (f"| {end:.0f} | {'yes' if held_now else 'no'} | {w['done'] / a.window:.0f} | "
                   f"{pct(w['waits'], 0.5):.1f} | {pct(w['waits'], 0.99):.1f} | "
                   f"{max(w['waits'], default=0.0):.1f} | {queued} | {dead} |")
            print(row, flush=True)
            rows.append(row)
            printed += 1
    await producer
    pgq.shutdown.set()
    await asyncio.wait([consumer], timeout=10)
    print("\n" + "\n".join(rows), flush=True)
    for c in (worker_conn, producer_conn, admin):
        await c.close()


if __name__ == "__main__":
    asyncio.run(main())
