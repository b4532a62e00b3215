"""The background Fathom and its `fathom mcp` bridges as real processes: the environment they
run in (`ENV`), a raw MCP host on a bridge's pipes that the test can signal or kill
(`RawHost`, `INIT`), `fathom status` (`status`), a process's end (`pid_gone`), and the
indexed sample project whose daemons are stopped after each test (`daemon_indexed`, `shop`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fathom.config import Settings
from fathom.local_server import DAEMON_FILE
from fathom.server.bridge import find_daemon
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project
from tests.server.mcp_fixtures import INIT

ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "FATHOM_WATCH": "1",
    "FATHOM_STOP_GRACE_S": "60",
    "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    # A proxy nothing listens on: a bridge that sent its loopback calls (and the run's
    # token) through the environment's proxy would fail every request.
    "HTTP_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
}


class RawHost:
    """An MCP host on a bridge's pipes, speaking JSON-RPC lines itself: its process can be
    signalled or killed, and it may run with `python -X importtime`."""

    def __init__(
        self, data: Path, tmp: Path, *, python_flags: tuple[str, ...] = (), env: dict[str, str] | None = None
    ):
        tmp.mkdir(exist_ok=True)
        self.out, self.err = tmp / "raw.out", tmp / "raw.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.popen = subprocess.Popen(
                [sys.executable, *python_flags, "-m", "fathom.cli", "--data-dir", str(data), "mcp"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env={**os.environ, **ENV, **(env or {})},
                start_new_session=True,
            )

    def send(self, message: dict) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write((json.dumps(message) + "\n").encode())
        self.popen.stdin.flush()

    def answer(self, msg_id: int, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.popen.poll() is None:
            for line in self.out.read_text().splitlines():
                message = json.loads(line)
                if message.get("id") == msg_id:
                    return message
            time.sleep(0.05)  # polling the host's file, bounded by the deadline
        raise AssertionError(f"no answer to {msg_id}: {self.err.read_text()}")

    def start(self) -> None:
        self.send(INIT)
        assert "result" in self.answer(1)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def search(self, msg_id: int, query: str) -> list[dict]:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "tools/call",
                "params": {"name": "search_code", "arguments": {"query": query, "project": "shop", "k": 5}},
            }
        )
        answer = self.answer(msg_id)
        assert "result" in answer and not answer["result"].get("isError"), answer
        return answer["result"]["structuredContent"]["results"]

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=30)


def status(data: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fathom.cli", "--data-dir", str(data), "status"],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (a child of this test's process group) counts as gone
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ")[1].startswith("Z")


@pytest.fixture(scope="module")
def daemon_indexed(tmp_path_factory, local_encoder):
    base = tmp_path_factory.mktemp("daemon")
    root = write_project(base / "shop")
    data = base / "data"
    asyncio.run(Fathom(Settings(data_dir=data), encoder=local_encoder).index(root, "shop"))
    return data, root


@pytest.fixture
def shop(daemon_indexed):
    """The indexed project and its data dir; every daemon started on it is stopped at the end."""
    data, root = daemon_indexed
    seen: list[int] = []
    yield data, root, seen
    if (daemon := find_daemon(data)) is not None:
        seen.append(daemon.pid)
    for pid in seen:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    run_file = data / DAEMON_FILE
    if run_file.is_dir():
        run_file.rmdir()
    run_file.unlink(missing_ok=True)
