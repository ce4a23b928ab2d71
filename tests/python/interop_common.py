"""Helpers shared by the interop scripts that tests/support/python.rs runs.

Contract with the Rust side: each script takes one JSON object as its only argument,
connects to the database named by PGQUEUER_DSN, prints exactly one JSON document on
stdout when it succeeds, and otherwise exits non-zero with the cause on stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any, Awaitable, Callable

import asyncpg


def spec() -> dict[str, Any]:
    """The JSON argument the test passed."""
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} '<json spec>'")
    return json.loads(sys.argv[1])


def dsn() -> str:
    return os.environ["PGQUEUER_DSN"]


async def connect() -> asyncpg.Connection:
    return await asyncpg.connect(dsn())


def iso(value: Any) -> str | None:
    """A timestamp as ISO-8601 text (None stays None)."""
    return None if value is None else value.isoformat()


def main(body: Callable[[dict[str, Any]], Awaitable[Any]]) -> None:
    """Runs `body(spec)` and prints its result as the script's JSON answer."""
    # PgQueuer's logger has only a NullHandler: without this, its warnings (including
    # notifications it cannot parse) would vanish instead of reaching stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = asyncio.run(body(spec()))
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
