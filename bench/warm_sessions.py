"""Warm sessions: what an MCP host's second `fathom mcp` session costs beside its first.

    .venv/bin/python bench/warm_sessions.py [--projects 5] [--query TEXT] [--peer-python PY | --no-peer]

Installed packages (httpx, h11, idna, anyio, certifi: up to `--projects`) are indexed once into
a temporary data dir. Then, with live sync on (every project watched), side by side in one run:

* session 1, cold: no background Fathom runs; spawning `fathom mcp` (the MCP SDK's stdio
  client, as a host does) to its first `search_code` answer includes starting the daemon;
* session 2, warm: a second `fathom mcp` while the first is open, to its first answer;
* `fathom mcp --in-process`: what every session paid before (its own encoder and watchers);

and the resident memory (VmRSS) of each session's own process and of the daemon, read from
/proc while every session is open. Targets: session 2 <= 1 s and <= 100 MB; session 1 <= 3 s.
The daemon is stopped at the end.

In the same run, the peer (cocoindex-code, in its own virtualenv: `--peer-python`) beside it:
copies of the same projects are indexed by its client (`bench/_peer_driver.py`, same MiniLM
folder), which then stops the peer's daemon; then its `ccc mcp` (one project per session, the
folder it runs in) is spawned in the first project (cold: it starts the peer's daemon) and in
the second (warm), each to its first `search` answer, with the same RSS reading.
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
PEER_PYTHON = "/tmp/peer-venv/bin/python"
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


class PeerSession(Session):
    """One host session on the peer's `ccc mcp`, run in the project's folder."""

    def __init__(self, python: str, home: Path, root: Path):
        super().__init__(root)
        self.ccc, self.home = str(Path(python).parent / "ccc"), home

    async def first_answer(self, query: str) -> float:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters

        before = peer_pids(self.ccc)
        params = StdioServerParameters(
            command=self.ccc, args=["mcp"], env=peer_env(self.home), cwd=str(self.data)
        )
        started = time.monotonic()
        client = await self.stack.enter_async_context(Client(params, read_timeout_seconds=600))
        result = await client.call_tool("search", {"query": query, "limit": 5})
        took = time.monotonic() - started
        if result.is_error:
            raise RuntimeError(f"the peer's search did not answer: {result.content}")
        self.pid = max(peer_pids(self.ccc) - before, default=0)
        return took


def peer_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("FATHOM_")}
    return env | {
        "COCOINDEX_CODE_DIR": str(home),
        "COCOINDEX_CODE_RUNTIME_DIR": str(home / "run"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def peer_pids(ccc: str) -> set[int]:
    """The peer's `ccc mcp` processes."""
    found = set()
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if b"mcp" in argv and ccc.encode() in argv:
                found.add(int(proc.name))
    return found


def index_peer(python: str, work: Path, names: list[str]) -> list[Path]:
    """Copies of the projects indexed by the peer's own client (which stops its daemon after)."""
    import json

    from fathom.config import Settings

    roots = []
    for name in names:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        roots.append(Path(shutil.copytree(Path(spec.origin).parent, work / "peer" / name)))
    job = {
        "home": str(work / "peer-home"),
        "model": str(Settings().local_model_path),
        "limit": 5,
        "projects": [{"root": str(root), "queries": [QUERY]} for root in roots],
    }
    done = subprocess.run(
        [python, str(ROOT / "bench" / "_peer_driver.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=peer_env(work / "peer-home"),
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the peer failed to index ({done.returncode}): {done.stderr[-3000:]}")
    return roots


async def measure_peer(python: str, work: Path, roots: list[Path], query: str) -> dict[str, Any]:
    home = work / "peer-home"
    first, second = PeerSession(python, home, roots[0]), PeerSession(python, home, roots[1 % len(roots)])
    try:
        cold_s = await first.first_answer(query)
        warm_s = await second.first_answer(query)
        pid_file = home / "run" / "daemon.pid"
        daemon = int(pid_file.read_text().strip()) if pid_file.exists() else 0
        return {
            "cold_s": cold_s,
            "warm_s": warm_s,
            "cold_mib": rss_mib(first.pid),
            "warm_mib": rss_mib(second.pid),
            "daemon_mib": rss_mib(daemon) if daemon else 0.0,
            "daemon_pid": daemon,
        }
    finally:
        for session in (second, first):
            with contextlib.suppress(Exception):
                await session.close()


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
    ap.add_argument("--peer-python", default=PEER_PYTHON, help="the Python cocoindex-code is installed in")
    ap.add_argument("--no-peer", action="store_true", help="measure Fathom alone")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="fathom-warm-"))
    data = base / "data"
    figures: dict[str, Any] = {}
    peer: dict[str, Any] = {}
    try:
        names = index_projects(data, args.projects)
        figures = asyncio.run(measure(data, args.query))
        if not args.no_peer:
            roots = index_peer(args.peer_python, base, names)
            peer = asyncio.run(measure_peer(args.peer_python, base, roots, args.query))
    finally:
        for pid in (figures.get("daemon_pid"), peer.get("daemon_pid")):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
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
    if peer:
        rows += [
            [
                "peer `ccc mcp` session 1 (cold: starts its daemon)",
                f"{peer['cold_s']:.2f}",
                f"{peer['cold_mib']:.0f}",
                "",
            ],
            [
                "peer `ccc mcp` session 2 (warm: another project)",
                f"{peer['warm_s']:.2f}",
                f"{peer['warm_mib']:.0f}",
                "",
            ],
            ["the peer's daemon", "", f"{peer['daemon_mib']:.0f}", ""],
        ]
    print(table(["spawn `fathom mcp` -> first search_code answer", "s", "own RSS MiB", "target"], rows))
    print(
        f"ratios: warm/cold time {figures['warm_s'] / figures['cold_s']:.2f}, "
        f"warm/in-process RSS {figures['warm_mib'] / max(figures['alone_mib'], 1):.2f}"
    )
    if peer:
        print(
            f"Fathom/peer: cold time {figures['cold_s'] / peer['cold_s']:.2f}, warm time "
            f"{figures['warm_s'] / peer['warm_s']:.2f}, warm session RSS {figures['warm_mib'] / max(peer['warm_mib'], 1):.2f}"
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
