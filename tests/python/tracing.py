"""Runs PgQueuer 1.6.0 with its `OpenTelemetryTracing` over an in-memory span exporter
and reports the spans it made, so the Rust side can check that a trace crosses over.

Spec:
  mode        "enqueue": enqueue `count` jobs of `entrypoint` (one `enqueue` call: a
              single job, or a batch when count > 1), inside a parent span `parent`
              "work": run a QueueManager in drain mode on `entrypoint` until the queue
              is empty
  entrypoint  the entrypoint
  count       [1] jobs to enqueue
  timeout_s   [30] (work) stop if still running after this
Answer: {"ids": [...] (enqueue), "spans": [{"name", "kind", "trace_id", "span_id",
         "parent_span_id" (null for a root), "status", "attributes"}]}
Ids are lowercase hex, as W3C Trace Context writes them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from interop_common import connect, main
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pgqueuer.adapters.tracing.opentelemetry import OpenTelemetryTracing
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Context, Job
from pgqueuer.ports.tracing import set_tracing_class
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode


def install() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    set_tracing_class(OpenTelemetryTracing())
    return exporter


def described(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    spans = []
    for span in exporter.get_finished_spans():
        ctx = span.get_span_context()
        spans.append(
            {
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": format(ctx.trace_id, "032x"),
                "span_id": format(ctx.span_id, "016x"),
                "parent_span_id": None if span.parent is None else format(span.parent.span_id, "016x"),
                "status": span.status.status_code.name,
                "attributes": dict(span.attributes or {}),
            }
        )
    return spans


async def enqueue(spec: dict[str, Any], exporter: InMemorySpanExporter) -> dict[str, Any]:
    entrypoint: str = spec["entrypoint"]
    count: int = spec.get("count", 1)
    conn = await connect()
    try:
        queries = Queries(AsyncpgDriver(conn))
        with trace.get_tracer("interop-test").start_as_current_span(spec.get("parent", "request")):
            if count == 1:
                ids = await queries.enqueue(entrypoint, b"from python")
            else:
                ids = await queries.enqueue(
                    [entrypoint] * count,
                    [f"job {i}".encode() for i in range(count)],
                    [0] * count,
                )
    finally:
        await conn.close()
    return {"ids": ids, "spans": described(exporter)}


async def work(spec: dict[str, Any], exporter: InMemorySpanExporter) -> dict[str, Any]:
    conn = await connect()
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint(spec["entrypoint"])
    async def handle(job: Job, ctx: Context) -> None:
        pass

    async def watchdog() -> None:
        await asyncio.sleep(spec.get("timeout_s", 30.0))
        qm.shutdown.set()

    guard = asyncio.create_task(watchdog())
    try:
        await qm.run(mode=QueueExecutionMode.drain, dequeue_timeout=timedelta(seconds=1))
    finally:
        guard.cancel()
        await conn.close()
    return {"spans": described(exporter)}


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    exporter = install()
    if spec["mode"] == "enqueue":
        return await enqueue(spec, exporter)
    if spec["mode"] == "work":
        return await work(spec, exporter)
    raise ValueError(f"unknown mode {spec['mode']!r}")


if __name__ == "__main__":
    main(run)
