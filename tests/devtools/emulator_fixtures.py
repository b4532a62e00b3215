"""The OpenRouter emulator as pytest fixtures: a real HTTP server on 127.0.0.1.

A test names the fixture as a parameter (`tests/conftest.py` provides it):

    async def test_something(emulator):
        client = OpenRouterClient("sk-or-v1-test", base_url=emulator.base_url)
        emulator.control.set_limits(rpm=5)
        ...
        assert emulator.control.counters()["rate_limited"] == 1

`emulator_server` (session scope) starts one uvicorn server in a background thread on a free
port; `emulator` (function scope) resets it before each test, so knobs never leak between
tests. Encoders load lazily on first use and stay loaded for the session.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import uvicorn

from fathom.devtools.emulator import EmulatorConfig, EmulatorControl, EmulatorState, create_app


@dataclass
class EmulatorHandle:
    root_url: str  # http://127.0.0.1:PORT
    base_url: str  # …/api/v1, what OpenRouterClient takes
    control: EmulatorControl
    state: EmulatorState  # read-only view for assertions; change knobs through `control`

    def reset(self) -> None:
        self.control.reset()


class EmulatorServer:
    """Runs the emulator app under uvicorn in a daemon thread; `stop()` ends it."""

    def __init__(self, config: EmulatorConfig | None = None):
        self.app = create_app(config)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._run, name="openrouter-emulator", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def start(self, timeout: float = 20.0) -> EmulatorHandle:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OpenRouter emulator did not start")
            time.sleep(0.02)
        root = f"http://127.0.0.1:{self.port}"
        return EmulatorHandle(root, root + "/api/v1", EmulatorControl(root), self.app.state.emulator)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@pytest.fixture(scope="session")
def emulator_server() -> Iterator[EmulatorHandle]:
    server = EmulatorServer()
    handle = server.start()
    try:
        yield handle
    finally:
        handle.control.close()
        server.stop()


@pytest.fixture
def emulator(emulator_server: EmulatorHandle) -> Iterator[EmulatorHandle]:
    emulator_server.reset()
    yield emulator_server
    emulator_server.reset()
