"""The tool list: what `tools/list` costs an agent's context, tool by tool.

    .venv/bin/python bench/tool_list.py [--git-remotes PREFIX] [--indexed]

Starts the MCP server in-process (`build_mcp_server` over a fresh data dir, the default
configuration unless `--git-remotes` allows a remote; `--indexed` indexes a two-function
project first, so the tools listed once a project has symbols are listed too), lists its tools through the SDK's own
client, and prints per tool the characters of its description, input schema and output
schema as sent (compact JSON), then the totals: what a model is shown (name + description +
input schema: hosts keep output schemas from the model) and the whole list. The budget
(14,000 and 25,000, with a project indexed) is held by tests/server/test_mcp_first_minutes.py.

Then what the check after every request costs (it tells clients when the list changed): the
names listed now (`ToolServer.listed_names`, what the check reads) beside the whole listing
with its compacted schemas (what it read before), in alternating rounds of one run, and the
ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client

from fathom.config import Settings
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


async def measure(git_remotes: str, indexed: bool) -> None:
    with tempfile.TemporaryDirectory() as data, tempfile.TemporaryDirectory() as project:
        fathom = Fathom(Settings(data_dir=data, git_remotes=git_remotes))
        if indexed:
            source = Path(project) / "app.py"
            source.write_text("def total(xs):\n    return add(xs)\n\n\ndef add(xs):\n    return sum(xs)\n")
            await fathom.index(project, "sample")
        server = build_mcp_server(fathom)
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
        names_ms, listing_ms = await check_cost(server)
    sees = whole = outputs = 0
    print(f"{'tool':18} {'description':>11} {'input':>7} {'output':>7} {'model sees':>10}")
    for tool in tools:
        wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        described, given = len(tool.description or ""), size(wire["inputSchema"])
        shown = len(tool.name) + described + given
        result = size(wire["outputSchema"]) if "outputSchema" in wire else 0
        sees, whole, outputs = sees + shown, whole + size(wire), outputs + result
        print(f"{tool.name:18} {described:11,} {given:7,} {result:7,} {shown:10,}")
    print(
        f"{len(tools)} tools: a model is shown {sees:,} characters; the whole list is "
        f"{whole:,}, output schemas {outputs:,}"
    )
    print(
        f"the check after every request: names only {names_ms:.3f} ms, the whole listing "
        f"{listing_ms:.3f} ms (median of 9 rounds of 100; ratio {names_ms / listing_ms:.2f})"
    )


async def check_cost(server: Any, rounds: int = 9, calls: int = 100) -> tuple[float, float]:
    """Milliseconds per call of the names the check reads and of the whole listing."""
    names: list[float] = []
    listing: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            server.listed_names()
        names.append((time.perf_counter() - start) / calls * 1000)
        start = time.perf_counter()
        for _ in range(calls):
            frozenset(t.name for t in await server.list_tools())
        listing.append((time.perf_counter() - start) / calls * 1000)
    return statistics.median(names), statistics.median(listing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-remotes", default="", help="FATHOM_GIT_REMOTES for the run")
    parser.add_argument("--indexed", action="store_true", help="index a small project first")
    args = parser.parse_args()
    asyncio.run(measure(args.git_remotes, args.indexed))


if __name__ == "__main__":
    main()
