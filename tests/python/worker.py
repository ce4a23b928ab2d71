"""Runs a real PgQueuer `QueueManager` on one entrypoint in drain mode and reports what
its handler saw.

Spec (defaults in brackets):
  entrypoint         the entrypoint to register
  behaviour          what the handler does with each job:
                       "echo"        report the job as PgQueuer parsed it, plus the row's
                                     dedupe_key and the database clock at start
                       "raise"       raise ValueError (a handler failure)
                       "wait_cancel" mark itself started in interop_marks, then wait up to
                                     wait_s inside `ctx.cancellation` and report whether the
                                     scope was cancelled
                       "record_run"  take clock_timestamp(), sleep sleep_s, then insert
                                     (job_id, started, clock_timestamp(), name) into
                                     interop_runs
  concurrency_limit  [0]
  on_failure         ["delete"] or "hold"
  batch_size         [10]
  heartbeat_timeout_s [30] PgQueuer's heartbeat_timeout (also its stale re-pick threshold)
  timeout_s          [30] stop (and report timed_out) if still running after this
  name               ["python"] label for interop_runs and the ready mark
  gate               [false] first insert (0, 'ready:<name>') into interop_marks, then wait
                     until the entrypoint has a job before starting the manager
  wait_s             [20]
  sleep_s            [0.002]
Answer: {"seen": [one object per handler call], "timed_out": bool,
         "critical": [messages PgQueuer logged at CRITICAL, e.g. notifications it could
                      not parse]}
Times are integer microseconds since the Unix epoch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg
from interop_common import connect, dsn, main
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Context, Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(value: datetime) -> int:
    return (value - EPOCH) // timedelta(microseconds=1)


class Collect(logging.Handler):
    """Keeps the messages of the records it is given."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def wait_for_jobs(pool: asyncpg.Pool, entrypoint: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await pool.fetchval("SELECT count(*) FROM pgqueuer WHERE entrypoint = $1", entrypoint):
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"no job for {entrypoint!r} appeared within {timeout_s} s")


async def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    entrypoint: str = spec["entrypoint"]
    behaviour: str = spec["behaviour"]
    name: str = spec.get("name", "python")
    timeout_s: float = spec.get("timeout_s", 30.0)
    wait_s: float = spec.get("wait_s", 20.0)
    sleep_s: float = spec.get("sleep_s", 0.002)
    seen: list[dict[str, Any]] = []
    critical = Collect(logging.CRITICAL)
    logging.getLogger("pgqueuer").addHandler(critical)

    pool = await asyncpg.create_pool(dsn(), min_size=1, max_size=2)
    conn = await connect()
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint(
        entrypoint,
        concurrency_limit=spec.get("concurrency_limit", 0),
        on_failure=spec.get("on_failure", "delete"),
    )
    async def handle(job: Job, ctx: Context) -> None:
        if behaviour == "echo":
            row = await pool.fetchrow(
                "SELECT dedupe_key, clock_timestamp() AS now FROM pgqueuer WHERE id = $1", job.id
            )
            seen.append(
                {
                    "id": job.id,
                    "entrypoint": job.entrypoint,
                    "payload_hex": None if job.payload is None else job.payload.hex(),
                    "priority": job.priority,
                    "headers": job.headers,
                    "attempts": job.attempts,
                    "status": job.status,
                    "slot": job.slot,
                    "created": micros(job.created),
                    "execute_after": micros(job.execute_after),
                    "dedupe_key": row["dedupe_key"],
                    "started": micros(row["now"]),
                }
            )
        elif behaviour == "raise":
            seen.append({"id": job.id})
            raise ValueError(f"python handler refuses job {job.id}")
        elif behaviour == "wait_cancel":
            await pool.execute(
                "INSERT INTO interop_marks (job_id, what) VALUES ($1, 'started')", job.id
            )
            started = time.monotonic()
            with ctx.cancellation:
                await asyncio.sleep(wait_s)
            seen.append(
                {
                    "id": job.id,
                    "cancel_called": ctx.cancellation.cancel_called,
                    "cancelled_caught": ctx.cancellation.cancelled_caught,
                    "waited_s": time.monotonic() - started,
                }
            )
        elif behaviour == "record_run":
            started = await pool.fetchval("SELECT clock_timestamp()")
            await asyncio.sleep(sleep_s)
            await pool.execute(
                "INSERT INTO interop_runs (job_id, started, finished, worker) "
                "VALUES ($1, $2, clock_timestamp(), $3)",
                job.id,
                started,
                name,
            )
            seen.append({"id": job.id})
        else:
            raise ValueError(f"unknown behaviour {behaviour!r}")

    if spec.get("gate", False):
        await pool.execute(
            "INSERT INTO interop_marks (job_id, what) VALUES (0, $1)", f"ready:{name}"
        )
        await wait_for_jobs(pool, entrypoint, timeout_s)

    timed_out = False

    async def watchdog() -> None:
        nonlocal timed_out
        await asyncio.sleep(timeout_s)
        timed_out = True
        qm.shutdown.set()

    guard = asyncio.create_task(watchdog())
    try:
        await qm.run(
            mode=QueueExecutionMode.drain,
            batch_size=spec.get("batch_size", 10),
            dequeue_timeout=timedelta(seconds=1),
            heartbeat_timeout=timedelta(seconds=spec.get("heartbeat_timeout_s", 30.0)),
        )
    finally:
        guard.cancel()
        await pool.close()
        await conn.close()
    return {"seen": seen, "timed_out": timed_out, "critical": critical.messages}


if __name__ == "__main__":
    main(run_worker)
