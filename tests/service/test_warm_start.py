"""Warm when asked: the long-running front ends load the encoder at start, a tool call that comes
earlier waits for that load and says so, and `fathom search` answers through a running
`fathom serve` of its data dir (else in-process).

The waiting is tested with a load held on an event (no timing): the call must tell the client
why it waits before the load may end. The front ends are tested through the real thing: a
`fathom mcp` spawned over stdio by the SDK's own client, a `fathom serve` process on loopback
and `fathom search` processes beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from fathom.config import Settings
from fathom.local_server import LOCAL_FILE, read_local_server
from fathom.server.local import RunFile, local_routes
from fathom.server.mcp_http import ServeToken, standalone_app
from fathom.server.mcp_tools import build_mcp_server
from fathom.server.warm import wait_for_encoder
from fathom.service import Fathom
from fathom.service.warmup import Warmup
from tests.fleet.fleet_fixtures import free_port
from tests.index.retrieval_fixtures import index_sample

ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "FATHOM_WATCH": "0",
}


class HeldLoad:
    """An encoder's `load` that does not end until the test lets it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.loaded = False
        self.id = "held:encoder"

    def load(self) -> None:
        # Bounded: the load thread is not a daemon, so a test that fails before releasing it
        # must not keep the test process from exiting.
        self.loaded = self.release.wait(60)


def held_server(indexed) -> tuple[HeldLoad, object]:
    """An MCP server over the indexed shop whose encoder load is held until the test lets it."""
    data, _, encoder = indexed
    fathom = Fathom(Settings(data_dir=data), encoder=encoder)
    held = HeldLoad()
    fathom.warmup = Warmup(held).start()
    server = build_mcp_server(fathom)
    wait_for_encoder(server, fathom)
    return held, server


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, local_encoder):
    data, root = index_sample(tmp_path_factory.mktemp("warm"), local_encoder)
    return data, root, local_encoder


async def test_a_search_before_the_encoder_is_loaded_waits_and_says_so(indexed):
    held, server = held_server(indexed)
    said: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        said.append(message or "")
        held.release.set()  # the load may end only once the client was told why it waits

    async with Client(server) as client:
        # A tool that needs no encoder answers while the load is held.
        listed = await client.call_tool("list_projects", {})
        assert [p["name"] for p in listed.structured_content["projects"]] == ["shop"]
        assert not held.loaded
        result = await asyncio.wait_for(
            client.call_tool(
                "search_code", {"query": "hash a password", "k": 3}, progress_callback=on_progress
            ),
            timeout=60,
        )
    assert said and "waiting for the encoder held:encoder" in said[0]
    assert held.loaded and not result.is_error
    assert result.structured_content["results"][0]["path"] == "auth/password.py"


async def test_without_a_progress_token_the_call_just_waits(indexed):
    held, server = held_server(indexed)

    class ReleaseOnNotice(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for the encoder" in record.getMessage():
                held.release.set()

    handler = ReleaseOnNotice()
    logging.getLogger("fathom.server.warm").addHandler(handler)
    try:
        async with Client(server) as client:
            result = await asyncio.wait_for(client.call_tool("search_code", {"query": "retry"}), timeout=60)
    finally:
        logging.getLogger("fathom.server.warm").removeHandler(handler)
    assert held.loaded and not result.is_error


async def test_the_local_door_opens_local_reads_only(indexed, tmp_path):
    """`/local/` takes this run's token; the token opens nothing else, and the file that hands it
    over is the user's alone and gone at stop."""
    data, _, encoder = indexed
    door_dir = tmp_path / "door"
    fathom = Fathom(Settings(data_dir=data), encoder=encoder)
    door = RunFile(door_dir, "http://127.0.0.1:1", kind="serve")
    auth = ServeToken(door_dir)
    mcp_token = auth.issue()
    app = standalone_app(
        build_mcp_server(fathom),
        auth=auth,
        host="127.0.0.1",
        local=door,
        routes=local_routes(lambda: fathom, door),
    )
    door.open()
    mode = (door_dir / LOCAL_FILE).stat().st_mode & 0o777
    assert mode == 0o600
    token = json.loads((door_dir / LOCAL_FILE).read_text())["token"]
    assert read_local_server(door_dir) is not None and read_local_server(door_dir).token == token
    assert token not in repr(read_local_server(door_dir))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        ok = await http.post(
            "/local/search",
            json={"query": "hash a password", "k": 2},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert ok.status_code == 200 and ok.json()["hits"][0]["path"] == "auth/password.py"
        chunks = await http.post(
            "/local/search",
            json={"query": "hash a password", "k": 5, "group": "chunk"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert [h["path"] for h in chunks.json()["hits"]].count("auth/password.py") >= 2
        assert len({h["path"] for h in ok.json()["hits"]}) == len(ok.json()["hits"])  # one per file
        wrong = await http.post(
            "/local/search",
            json={"query": "x", "group": "line"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert wrong.status_code == 400 and "group must be one of" in wrong.text
        assert (await http.post("/local/search", json={"query": "x"})).status_code == 401
        bad = await http.get("/local/projects", headers={"Authorization": "Bearer fl_not-this-runs-token"})
        assert bad.status_code == 401
        # The local token is no MCP token; the operator's token still opens /local/.
        assert (
            await http.post("/mcp", json={}, headers={"Authorization": f"Bearer {token}"})
        ).status_code == 401
        assert (
            await http.get("/local/projects", headers={"Authorization": f"Bearer {mcp_token}"})
        ).status_code == 200
    assert door.searches == 2
    (door_dir / LOCAL_FILE).chmod(0o644)  # readable by others: its token is not trusted
    assert read_local_server(door_dir) is None
    door.close()
    assert not (door_dir / LOCAL_FILE).exists()


def test_a_file_whose_server_is_gone_is_ignored(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCAL_FILE).write_text(
        json.dumps({"url": "http://127.0.0.1:9", "pid": dead.pid, "kind": "serve", "token": "fl_x"})
    )
    (tmp_path / LOCAL_FILE).chmod(0o600)
    assert read_local_server(tmp_path) is None


# ------------------------------------------------------------------ the real processes


def fathom_cmd(data: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "fathom.cli", "--data-dir", str(data), *args]


def wait_for(predicate, what: str, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


@pytest.mark.slow
async def test_fathom_mcp_loads_the_encoder_before_the_first_call(indexed, tmp_path):
    data, _, _ = indexed
    log = tmp_path / "mcp.stderr"
    # stderr to a file (the host's log), so the test can read what the server said and when.
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'exec "$@" 2>"$LOG"', "sh", *fathom_cmd(data, "mcp", "--in-process")],
        env={**ENV, "LOG": str(log), "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    async with asyncio.timeout(300):
        async with Client(params, read_timeout_seconds=240) as client:
            # No call yet: the encoder loads on its own, and the server says when it is done.
            await asyncio.to_thread(
                wait_for,
                lambda: log.exists() and "loaded in" in log.read_text(),
                "fathom mcp to load its encoder",
            )
            result = await client.call_tool("search_code", {"query": "hash a password", "k": 3})
    assert not result.is_error
    assert result.structured_content["results"][0]["path"] == "auth/password.py"
    said = log.read_text()
    assert "in the background" in said and "waiting for the encoder" not in said


class Listener:
    """A TCP listener on 127.0.0.1 that keeps whatever is sent to it (a proxy nobody should
    use): `received` is every byte, from every connection."""

    def __init__(self) -> None:
        self.received = b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                with contextlib.suppress(OSError):
                    while chunk := conn.recv(65536):
                        self.received += chunk


@pytest.mark.slow
def test_fathom_search_answers_through_a_running_serve_else_in_process(indexed, tmp_path):
    data, _, _ = indexed
    port = free_port()
    env = {**os.environ, **ENV}
    serve = subprocess.Popen(
        fathom_cmd(data, "serve", "--port", str(port)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        found = wait_for(lambda: read_local_server(data), "fathom serve to write its local file", timeout=120)
        assert found.url == f"http://127.0.0.1:{port}" and found.pid == serve.pid
        # A model folder the CLI cannot load: only the server's warm encoder can answer. And a
        # proxy in the environment, which must never see the loopback call (nor its token).
        proxy = Listener()
        nowhere = {
            **env,
            "FATHOM_LOCAL_MODEL_PATH": str(tmp_path / "no-model"),
            **{name: proxy.url for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")},
        }
        served = subprocess.run(
            fathom_cmd(data, "search", "hash a password", "-k", "3"),
            env=nowhere,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert served.returncode == 0, served.stderr
        assert "auth/password.py" in served.stdout
        assert f"answered by the fathom serve at http://127.0.0.1:{port}" in served.stderr
        listed = subprocess.run(
            fathom_cmd(data, "projects"), env=nowhere, capture_output=True, text=True, timeout=120
        )
        assert listed.returncode == 0 and "shop" in listed.stdout
        # The token went nowhere but the 0600 file: not on a command line, not in the server's
        # output, not to a proxy.
        assert found.token not in served.stdout + served.stderr
        assert proxy.received == b"", proxy.received[:200]
    finally:
        serve.send_signal(signal.SIGINT)
        out, err = serve.communicate(timeout=60)
    assert found.token not in out + err
    assert not (data / LOCAL_FILE).exists()  # removed at stop
    alone = subprocess.run(
        fathom_cmd(data, "search", "hash a password", "-k", "3"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert alone.returncode == 0, alone.stderr
    assert "auth/password.py" in alone.stdout and "answered by" not in alone.stderr
