"""Warm sessions: what an MCP host's second `fathom mcp` session costs beside its first.

    .venv/bin/python bench/warm_sessions.py [--projects 5] [--query TEXT]

Installed packages (httpx, h11, idna, anyio, certifi: up to `--projects`) are indexed once into
a temporary data dir. Then, with live sync on (every project watched), side by side in one run:

* session 1, cold: no background Fathom runs; spawning `fathom mcp` (the MCP SDK's stdio
  client, as a host does) to its first `search_code` answer includes starting the daemon;
* session 2, warm: a second `fathom mcp` while the first is open, to its first answer;
* `fathom mcp --in-process`: what every session paid before (its own encoder and watchers);

and the resident memory (VmRSS) of each session's own process and of the daemon, read from
/proc while every session is open. Targets: session 2 <= 1 s and <= 100 MB; session 1 <= 3 s.
The daemon is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import machine, table  # noqa: E402

PACKAGES = ("httpx", "h11", "idna", "anyio", "certifi")
QUERY = "send a request and follow redirects"
TARGETS = {"warm_s": 1.0, "warm_mib": 100.0, "cold_s": 3.0}


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FATHOM_")}
    return env | {
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", ""),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "FATHOM_WATCH": "1",
    }


def fathom(data: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "fathom.cli", "--data-dir", str(data), *args]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def session_pids(data: Path, *flags: str) -> set[int]:
    """The `fathom mcp` processes of this data dir (a session's own process)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"mcp" in argv and str(data).encode() in argv and all(f.encode() in argv for f in flags):
                found.add(int(proc.name))
    return found


class Session:
    """One host session on `fathom mcp`, open until `close`."""

    def __init__(self, data: Path, *flags: str):
        self.data, self.flags = data, flags
        self.stack = contextlib.AsyncExitStack()
        self.pid = 0

    async def first_answer(self, query: str) -> float:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters

        before = session_pids(self.data)
        params = StdioServerParameters(
            command=sys.executable, args=fathom(self.data, "mcp", *self.flags)[1:], env=child_env()
        )
        started = time.monotonic()
        client = await self.stack.enter_async_context(Client(params, read_timeout_seconds=600))
        result = await client.call_tool("search_code", {"query": query, "k": 5})
        took = time.monotonic() - started
        if result.is_error or not result.structured_content["results"]:
            raise RuntimeError(f"search_code did not answer: {result.content}")
        self.pid = max(session_pids(self.data, *self.flags) - before, default=0)
        return took

    async def close(self) -> None:
        await self.stack.aclose()


def index_projects(data: Path, count: int) -> list[str]:
    names = []
    for name in PACKAGES[:count]:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        done = subprocess.run(
            fathom(data, "index", str(Path(spec.origin).parent), "--project", name),
            env=child_env() | {"FATHOM_WATCH": "0"},
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0:
            raise RuntimeError(f"indexing {name} failed: {done.stderr[-2000:]}")
        names.append(name)
    return names


async def measure(data: Path, query: str) -> dict[str, Any]:
    from fathom.server.bridge import find_daemon

    first, second, alone = Session(data), Session(data), Session(data, "--in-process")
    try:
        cold_s = await first.first_answer(query)
        warm_s = await second.first_answer(query)
        daemon = find_daemon(data)
        alone_s = await alone.first_answer(query)
        return {
            "cold_s": cold_s,
            "warm_s": warm_s,
            "alone_s": alone_s,
            "cold_mib": rss_mib(first.pid),
            "warm_mib": rss_mib(second.pid),
            "alone_mib": rss_mib(alone.pid),
            "daemon_mib": rss_mib(daemon.pid) if daemon else 0.0,
            "daemon_pid": daemon.pid if daemon else 0,
        }
    finally:
        for session in (alone, second, first):
            with contextlib.suppress(Exception):
                await session.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--projects", type=int, default=5, help="installed packages indexed and watched (at most 5)"
    )
    ap.add_argument("--query", default=QUERY)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="fathom-warm-"))
    data = base / "data"
    figures: dict[str, Any] = {}
    try:
        names = index_projects(data, args.projects)
        figures = asyncio.run(measure(data, args.query))
    finally:
        if figures.get("daemon_pid"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(figures["daemon_pid"], signal.SIGTERM)
        shutil.rmtree(base, ignore_errors=True)
    print(f"{machine()}; {len(names)} projects watched ({', '.join(names)})")
    rows = [
        [
            "session 1 (cold: starts the daemon)",
            f"{figures['cold_s']:.2f}",
            f"{figures['cold_mib']:.0f}",
            f"<= {TARGETS['cold_s']:g} s",
        ],
        [
            "session 2 (warm: attaches)",
            f"{figures['warm_s']:.2f}",
            f"{figures['warm_mib']:.0f}",
            f"<= {TARGETS['warm_s']:g} s, <= {TARGETS['warm_mib']:g} MiB",
        ],
        [
            "`fathom mcp --in-process` (each session alone)",
            f"{figures['alone_s']:.2f}",
            f"{figures['alone_mib']:.0f}",
            "",
        ],
        ["the daemon, shared by sessions 1 and 2", "", f"{figures['daemon_mib']:.0f}", ""],
    ]
    print(table(["spawn `fathom mcp` -> first search_code answer", "s", "own RSS MiB", "target"], rows))
    print(
        f"ratios: warm/cold time {figures['warm_s'] / figures['cold_s']:.2f}, "
        f"warm/in-process RSS {figures['warm_mib'] / max(figures['alone_mib'], 1):.2f}"
    )
    ok = (
        figures["warm_s"] <= TARGETS["warm_s"]
        and figures["warm_mib"] <= TARGETS["warm_mib"]
        and figures["cold_s"] <= TARGETS["cold_s"]
    )
    print("targets met" if ok else "targets NOT met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
