#!/usr/bin/env python3
"""Runs one schedule with the real PgQueuer (SchedulerManager) for a while.

Used by tests/it/scheduler.rs to show that a schedule registered by Python is run by
Rust and the other way round. Each fire of the schedule inserts a row into
`interop_fires` (side 'python', the schedule row's id, its expression as Python got
it, when the row was claimed, the next run its claim set, and clock_timestamp()). On exit it prints one JSON line:
the expression PgQueuer normalized and how many fires it ran.

    python tests/python/scheduler_interop.py DSN ENTRYPOINT EXPRESSION SECONDS

Needs pgqueuer==1.6.0 and asyncpg (the tests make a venv with the pins: tests/support/python.rs).
"""

import asyncio
import json
import sys

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Schedule
from pgqueuer.queries import Queries
from pgqueuer.sm import SchedulerManager

CREATE = """CREATE TABLE IF NOT EXISTS interop_fires (
    side text NOT NULL,
    schedule_id bigint NOT NULL,
    expression text NOT NULL,
    picked_at timestamptz NOT NULL,
    next_run timestamptz NOT NULL,
    fired_at timestamptz NOT NULL DEFAULT clock_timestamp())"""


async def main(dsn: str, entrypoint: str, expression: str, seconds: float) -> None:
    scheduler_conn = await asyncpg.connect(dsn)
    record_conn = await asyncpg.connect(dsn)
    await record_conn.execute(CREATE)
    manager = SchedulerManager(Queries(AsyncpgDriver(scheduler_conn)))
    fires = 0

    @manager.schedule(entrypoint, expression)
    async def fired(schedule: Schedule) -> None:
        nonlocal fires
        fires += 1
        await record_conn.execute(
            "INSERT INTO interop_fires (side, schedule_id, expression, picked_at, next_run)"
            " VALUES ('python', $1, $2, $3, $4)",
            schedule.id,
            schedule.expression,
            schedule.updated,
            schedule.next_run,
        )

    async def stop_later() -> None:
        await asyncio.sleep(seconds)
        manager.shutdown.set()

    stopper = asyncio.create_task(stop_later())
    await manager.run()
    await stopper
    (key,) = manager.registry.keys()
    print(json.dumps({"normalized": key.expression, "fires": fires}))
    await record_conn.close()
    await scheduler_conn.close()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
