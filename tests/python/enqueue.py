"""Enqueues jobs through PgQueuer's own `Queries.enqueue`, as a Python producer would.

Spec: {"jobs": [{"entrypoint": str, "payload_hex": str | null, "priority": int,
                 "delay_s": float, "dedupe_key": str | null, "headers": object | null}],
       "on_conflict": "raise" | "skip" | "update_priority"  (default "raise")}
Answer: {"ids": [int | null, ...]} in input order (null: skipped as a duplicate).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from interop_common import connect, main
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries


async def enqueue(spec: dict[str, Any]) -> dict[str, Any]:
    jobs = spec["jobs"]
    conn = await connect()
    try:
        queries = Queries(AsyncpgDriver(conn))
        ids = await queries.enqueue(
            [j["entrypoint"] for j in jobs],
            [None if j["payload_hex"] is None else bytes.fromhex(j["payload_hex"]) for j in jobs],
            [j["priority"] for j in jobs],
            [timedelta(seconds=j["delay_s"]) for j in jobs],
            [j["dedupe_key"] for j in jobs],
            [j["headers"] for j in jobs],
            on_conflict=spec.get("on_conflict", "raise"),
        )
    finally:
        await conn.close()
    return {"ids": ids}


if __name__ == "__main__":
    main(enqueue)
