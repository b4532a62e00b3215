"""First answer: how long a user waits for a search, on each of the three ways to ask.

    .venv/bin/python bench/first_answer.py [--runs 5] [--path DIR] [--query TEXT]

A copy of a real package (the installed `httpx` by default) is indexed once into a temporary
data dir; then, side by side in one run, each timed `--runs` times and reported by its median:

* `fathom mcp`: from spawning it (the MCP SDK's stdio client, as an MCP host does) to the
  first `search_code` answer, handshake included: one fresh process per run;
* `fathom search`, cold, no server running: one fresh process per run, from its start to its
  exit (it loads its own encoder);
* `fathom search` with a local `fathom serve` of the same data dir running (started once,
  asked once before timing, so its encoder is loaded): the CLI finds it through the data
  dir's `local_server.json` and asks it;
* `fathom --version`, the floor: what starting a Python process and the CLI costs.

Each CLI run checks who answered (a served answer says so on stderr, an in-process one must
not), so a figure cannot be the other path's. Targets: first MCP answer <= 3 s, cold search
<= 2.5 s, served search <= 0.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import machine, table  # noqa: E402

TARGETS = {"mcp": 3.0, "cold": 2.5, "served": 0.5}
QUERY = "send a request and follow redirects"


def child_env() -> dict[str, str]:
    """The children run this checkout's code, offline, with no server named and no live sync."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FATHOM_")}
    return env | {
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", ""),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "FATHOM_WATCH": "0",
        "COLUMNS": "160",
    }


def fathom(data: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "fathom.cli", "--data-dir", str(data), *args]


def default_project() -> Path:
    import httpx

    return Path(httpx.__file__).parent


def timed_cli(cmd: list[str], *, served: bool | None) -> float:
    """Seconds from the process's start to its exit; `served` checks who answered."""
    started = time.monotonic()
    done = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed: {done.stderr.strip()}")
    said = "answered by the fathom serve" in done.stderr
    if served is not None and said != served:
        raise RuntimeError(
            f"expected {'a served' if served else 'an in-process'} answer; stderr: {done.stderr}"
        )
    return took


async def first_mcp_answer(data: Path, query: str) -> float:
    """From spawning `fathom mcp` to its first `search_code` answer."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=fathom(data, "mcp", "--in-process", "--no-watch")[1:], env=child_env()
    )
    started = time.monotonic()
    # The child's stderr (its loading lines) goes nowhere: the table is what this prints.
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            r = await session.call_tool(
                "search_code", {"query": query, "project": "bench", "k": 5}, read_timeout_seconds=600
            )
            took = time.monotonic() - started
    if r.is_error or not r.structured_content["results"]:
        raise RuntimeError(f"search_code did not answer: {r.content}")
    return took


def start_serve(data: Path, port: int) -> subprocess.Popen[str]:
    from fathom.local_server import read_local_server

    proc = subprocess.Popen(
        fathom(data, "serve", "--port", str(port), "--no-auth", "--no-watch"),
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 300
    while read_local_server(data) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("fathom serve did not start")
        time.sleep(0.2)
    return proc


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each path (median reported)")
    ap.add_argument("--path", type=Path, default=None, help="project to copy (default: httpx)")
    ap.add_argument("--query", default=QUERY)
    args = ap.parse_args()

    print(machine())
    work = Path(tempfile.mkdtemp(prefix="fathom-first-"))
    times: dict[str, list[float]] = {}
    try:
        root, data = work / "bench", work / "data"
        shutil.copytree(args.path or default_project(), root, ignore=shutil.ignore_patterns("__pycache__"))
        started = time.monotonic()
        subprocess.run(
            fathom(data, "index", str(root), "--project", "bench"),
            env=child_env(),
            check=True,
            capture_output=True,
            text=True,
        )
        print(
            f"project: a copy of {args.path or default_project()}, indexed in {time.monotonic() - started:.1f}s"
        )
        search = fathom(data, "search", args.query, "--project", "bench", "-k", "5")

        times["floor"] = [timed_cli(fathom(data, "--version"), served=None) for _ in range(args.runs)]
        times["mcp"] = [asyncio.run(first_mcp_answer(data, args.query)) for _ in range(args.runs)]
        times["cold"] = [timed_cli(search, served=False) for _ in range(args.runs)]
        serve = start_serve(data, free_port())
        try:
            timed_cli(search, served=True)  # the serve's encoder is loaded by this one, untimed
            times["served"] = [timed_cli(search, served=True) for _ in range(args.runs)]
        finally:
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    cold = statistics.median(times["cold"])
    labels = {
        "floor": "`fathom --version` (process start)",
        "mcp": "spawn `fathom mcp` -> first `search_code` answer",
        "cold": "`fathom search`, no server running",
        "served": "`fathom search`, a local `fathom serve` running",
    }
    rows = []
    for key, label in labels.items():
        median = statistics.median(times[key])
        target = TARGETS.get(key)
        rows.append(
            [
                label,
                median,
                min(times[key]),
                max(times[key]),
                cold / median,
                f"<= {target:.1f} s: {'met' if median <= target else 'missed'}" if target else "-",
            ]
        )
    print()
    print(table(["path", "median s", "min s", "max s", "cold search ÷ this", "target"], rows))
    print(
        "\nall runs (s): " + "; ".join(f"{k} " + ", ".join(f"{t:.2f}" for t in v) for k, v in times.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
