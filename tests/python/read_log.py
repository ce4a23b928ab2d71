"""Reads the whole log through PgQueuer's `Queries.queue_log`, which validates every row
with its `Log` model (and each traceback with `TracebackRecord`); a row it cannot parse
makes this script fail.

Spec: {} (no options)
Answer: {"rows": [{"job_id", "status", "entrypoint", "priority", "traceback"}]} where
`traceback` is the parsed record dumped back to JSON, or null.
"""

from __future__ import annotations

from typing import Any

from interop_common import connect, main
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Log, TracebackRecord
from pgqueuer.queries import Queries


async def read_log(spec: dict[str, Any]) -> dict[str, Any]:
    conn = await connect()
    try:
        logs = await Queries(AsyncpgDriver(conn)).queue_log()
    finally:
        await conn.close()
    rows = []
    for log in logs:
        assert isinstance(log, Log)
        tb = log.traceback
        assert tb is None or isinstance(tb, TracebackRecord)
        rows.append(
            {
                "job_id": log.job_id,
                "status": log.status,
                "entrypoint": log.entrypoint,
                "priority": log.priority,
                "traceback": None if tb is None else tb.model_dump(mode="json"),
            }
        )
    return {"rows": rows}


if __name__ == "__main__":
    main(read_log)
