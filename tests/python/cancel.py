"""Cancels jobs with PgQueuer's `Queries.mark_job_as_cancelled` (delete, log, NOTIFY).

Spec: {"ids": [int, ...]}
Answer: {"cancelled": [int, ...]} (the ids passed on).
"""

from __future__ import annotations

from typing import Any

from interop_common import connect, main
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries


async def cancel(spec: dict[str, Any]) -> dict[str, Any]:
    conn = await connect()
    try:
        await Queries(AsyncpgDriver(conn)).mark_job_as_cancelled(spec["ids"])
    finally:
        await conn.close()
    return {"cancelled": spec["ids"]}


if __name__ == "__main__":
    main(cancel)
