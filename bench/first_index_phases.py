"""First index phases: where a new user's first `index_project` spends its time before the
project answers, and what a search says meanwhile.

    .venv/bin/python bench/first_index_phases.py [--path DIR] [--warm-cache]

A copy of a folder (Fathom's own `src/fathom/index` by default) is indexed through a real
`fathom mcp` stdio session (the MCP SDK's client, as a host does) in a fresh data dir and, by
default, a fresh model cache (what a first run on a new machine builds: the ONNX graph). The
script follows the background job with `index_status(project, job=ID)` and prints how long
each phase lasted (opening the store, loading the model, the gate's check of the encoders,
walking, chunking, embedding), and what `search_code` on the project answered mid-run.

The gate's check ("checking encoders") runs once per data dir and model (a later project
reuses the verdicts) and again after a restart (a re-probe): each table's reference embeds the
gate's probe set, so its cost is one probe batch per table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import machine, table  # noqa: E402


async def follow(path: Path, cache: Path | None, tmp: Path) -> tuple[list[tuple[str, float]], str, float]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "LOG": str(tmp / "mcp.log"),
        "PYTHONPATH": str(ROOT / "src"),
    }
    if cache is not None:
        env["FATHOM_MODEL_CACHE"] = str(cache)
    params = StdioServerParameters(
        command="/bin/sh",
        args=[
            "-c",
            'exec "$@" 2>"$LOG"',
            "sh",
            sys.executable,
            "-m",
            "fathom.cli",
            "--data-dir",
            str(tmp / "data"),
            "mcp",
            "--in-process",
        ],
        env=env,
    )
    phases: list[tuple[str, float]] = []
    said = ""
    async with asyncio.timeout(1800), Client(params, read_timeout_seconds=600) as client:
        started = await client.call_tool("index_project", {"path": str(path), "project": "bench"})
        job = started.structured_content["job"]["id"]
        t0 = last_at = time.monotonic()
        last = None
        while True:
            view = (
                await client.call_tool("index_status", {"project": "bench", "job": job})
            ).structured_content["job"]
            phase = view["phase"] if view["state"] not in ("done", "failed", "cancelled") else view["state"]
            now = time.monotonic()
            if phase != last:
                if last is not None:
                    phases.append((last, now - last_at))
                last, last_at = phase, now
                if phase == "embedding" and not said:
                    asked = await client.call_tool("search_code", {"query": "chunk", "project": "bench"})
                    said = asked.content[0].text
            if view["state"] in ("done", "failed", "cancelled"):
                return phases, said, now - t0
            await asyncio.sleep(0.1)  # a poll, as a host would; nothing is timed by it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, default=ROOT / "src" / "fathom" / "index")
    parser.add_argument(
        "--warm-cache", action="store_true", help="use the usual model cache (the ONNX graph already built)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        project = tmp / "project"
        shutil.copytree(args.path, project)
        phases, said, total = asyncio.run(follow(project, None if args.warm_cache else tmp / "cache", tmp))
    print(machine())
    print(table(["phase", "seconds"], [(p, f"{s:.2f}") for p, s in phases] + [("total", f"{total:.2f}")]))
    print(f"search_code mid-embedding said: {said[:300]}")


if __name__ == "__main__":
    main()
