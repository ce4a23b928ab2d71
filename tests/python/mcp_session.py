"""Drives MCP servers with the official Python SDK's client (`mcp`, pinned in the tests'
venv): starts each server command over stdio, initializes, lists the tools and prompts,
gets the prompt, and makes each call of the plan in order.

Spec: {"servers": {"NAME": [argv...]}, "order": ["NAME", ...],
       "calls": [[tool, {arguments}], ...], "env": {"KEY": "VALUE"}}
The server runs with this script's environment (PGQUEUER_DSN...) plus `env`. A call
may be ["__pause__", {"until_file": PATH}] to wait for a file to exist (up to 60 s), or
["__signal__", {"file": PATH}] to create a file, so the test can act between calls.
Answer: {"NAME": {"protocol_version", "server_name", "tools": [names], "tool_defs": [...],
         "prompts": [names], "prompt_text", "calls": [{"name", "args", "is_error",
         "structured", "texts", "error"}]}}
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from interop_common import main
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError


async def session(argv: list[str], calls: list[list[Any]], env: dict[str, str]) -> dict[str, Any]:
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env={**os.environ, **env}
    )
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            init = await client.initialize()
            out["protocol_version"] = init.protocolVersion
            out["server_name"] = init.serverInfo.name
            tools = (await client.list_tools()).tools
            out["tools"] = [t.name for t in tools]
            out["tool_defs"] = [t.model_dump(mode="json") for t in tools]
            prompts = (await client.list_prompts()).prompts
            out["prompts"] = [p.name for p in prompts]
            prompt = await client.get_prompt("pgqueuer_guide")
            out["prompt_text"] = prompt.messages[0].content.text
            results = []
            for name, args in calls:
                if name == "__pause__":
                    waited = 0.0
                    while not Path(args["until_file"]).exists() and waited < 60:
                        await asyncio.sleep(0.05)
                        waited += 0.05
                    continue
                if name == "__signal__":
                    Path(args["file"]).write_text("ready")
                    continue
                entry: dict[str, Any] = {"name": name, "args": args}
                try:
                    res = await client.call_tool(name, args)
                    entry["is_error"] = bool(res.isError)
                    entry["structured"] = res.structuredContent
                    entry["texts"] = [c.text for c in res.content if c.type == "text"]
                    entry["error"] = None
                except McpError as e:
                    entry["is_error"] = True
                    entry["structured"] = None
                    entry["texts"] = []
                    entry["error"] = e.error.message
                    entry["error_code"] = e.error.code
                results.append(entry)
            out["calls"] = results
    return out


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    answer = {}
    for name in spec["order"]:
        answer[name] = await session(spec["servers"][name], spec["calls"], spec.get("env", {}))
    return answer


if __name__ == "__main__":
    main(run)
