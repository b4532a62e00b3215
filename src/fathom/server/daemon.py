"""The background Fathom every `fathom mcp` session of one user and data dir shares.

What it owns:

- `serve_daemon`: the hidden `fathom daemon` command's body. One process holds the encoder,
  the index handles and one watcher per project for every session; it serves the MCP tools
  over streamable HTTP on 127.0.0.1 (an ephemeral port), behind this run's token, which it
  hands to the same user's `fathom mcp` bridges (`fathom.server.bridge`) and CLI through
  `local_daemon.json` (`server.local`: 0600 under the 0700 data dir, so another user can
  neither read the token nor plant one). A file it cannot write stops the start: a daemon no
  session can find would only hold memory.
- `Attendance` and `stop_when_idle`: it stops once no session is attached (a bridge holds an
  MCP GET stream open for its whole life; a killed bridge's stream closes with its socket) and
  no request came for `FATHOM_DAEMON_IDLE_MINUTES`. The clock is injected.
- `/local/status` (`status_route`): pid, URL, sessions attached, idle time and timeout, for
  `fathom status`.

What it refuses: listening beyond loopback, any tool logic (`server.mcp_tools`), and being
started by anything but its bridge's spawn (`fathom.server.bridge.start_daemon`) or a person
debugging it in a terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

from fathom.local_server import DAEMON_KIND
from fathom.server.guard import LOCAL_PREFIX, MCP_PATH

if TYPE_CHECKING:
    from fathom.config import Settings
    from fathom.service import Fathom

log = logging.getLogger("fathom.server.daemon")

STATUS_PATH = LOCAL_PREFIX + "status"
HOST = "127.0.0.1"
# Until its first request, a daemon waits at least this long: the session that started it is
# on its way, but the encoder's load in a thread can starve the event loop for seconds.
FIRST_WAIT_S = 60.0
# The longest the idle check sleeps between looks: a long timeout is still noticed promptly
# after the last session leaves, without a busy loop.
CHECK_EVERY_S = 5.0


class Attendance:
    """Who is attached and when the last request ended, on an injected clock."""

    def __init__(self, idle_s: float, clock: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self.clock = clock
        self.inflight = 0  # requests to /mcp now open, the sessions' streams among them
        self.sessions = 0  # open GET streams: one per attached bridge
        self.requests = 0
        self._last = clock()

    def begin(self, *, stream: bool) -> None:
        self.inflight += 1
        self.requests += 1
        self.sessions += stream

    def end(self, *, stream: bool) -> None:
        self.inflight -= 1
        self.sessions -= stream
        self._last = self.clock()

    def touch(self) -> None:
        """Count idleness from now: the start, which the session that spawned it waits for."""
        self._last = self.clock()

    def idle_for(self) -> float:
        """Seconds since the last request ended, nothing open meanwhile (0 while any is)."""
        return 0.0 if self.inflight else max(0.0, self.clock() - self._last)

    def timeout_s(self) -> float:
        return self.idle_s if self.requests else max(self.idle_s, FIRST_WAIT_S)

    def expired(self) -> bool:
        return self.inflight == 0 and self.idle_for() >= self.timeout_s()

    def next_look_s(self) -> float:
        """How long the idle check may sleep before it looks again."""
        return min(CHECK_EVERY_S, max(0.01, self.timeout_s() - self.idle_for()))


class Attended:
    """ASGI middleware: every request to `/mcp` that carries this run's token (`admit`) is
    counted by `attendance` while it is open. One without it is refused further in and keeps
    nothing alive: anyone on this machine can knock, only the user's sessions hold the daemon."""

    def __init__(self, app: ASGIApp, attendance: Attendance, admit: Callable[[str | None], bool]):
        self.app = app
        self.attendance = attendance
        self.admit = admit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != MCP_PATH or not self.admit(_bearer(scope)):
            await self.app(scope, receive, send)
            return
        stream = scope.get("method") == "GET"
        self.attendance.begin(stream=stream)
        try:
            await self.app(scope, receive, send)
        finally:
            self.attendance.end(stream=stream)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


async def stop_when_idle(
    attendance: Attendance, stop: Callable[[], None], sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
) -> None:
    """Wait until `attendance` has been idle for its timeout, then `stop()`."""
    while not attendance.expired():
        await sleep(attendance.next_look_s())
    log.warning(
        "no session for %g minutes: the background Fathom stops (FATHOM_DAEMON_IDLE_MINUTES)",
        attendance.idle_s / 60,
    )
    stop()


def status_route(run_file: Any, attendance: Attendance) -> Any:
    """`GET /local/status`: what `fathom status` prints about this daemon."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    started = time.time()

    async def status(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "kind": run_file.kind,
                "pid": os.getpid(),
                "url": run_file.url,
                "sessions": attendance.sessions,
                "requests": attendance.requests,
                "idle_for_s": round(attendance.idle_for(), 1),
                "idle_timeout_s": attendance.idle_s,
                "started_at": started,
            }
        )

    return Route(STATUS_PATH, status, methods=["GET"])


def serve_daemon(fathom: Fathom, settings: Settings, *, watching: bool, say: Callable[[str], None]) -> None:
    """Serve `fathom` to this user's sessions until idle or stopped (see the module docstring)."""
    from fathom.server.connections import ConnectionLimits, listen, uvicorn_config
    from fathom.server.local import RunFile, local_routes, local_url, serve_with_run_file
    from fathom.server.mcp_http import standalone_app
    from fathom.server.mcp_tools import build_mcp_server
    from fathom.server.warm import wait_for_encoder

    sock = listen(HOST, 0)
    try:
        run_file = RunFile(settings.data_dir, local_url(HOST, sock.getsockname()[1]), kind=DAEMON_KIND)
        attendance = Attendance(settings.daemon_idle_minutes * 60)
        server = build_mcp_server(fathom)
        wait_for_encoder(server, fathom)
        servers: list[Any] = []
        tasks: set[asyncio.Task[Any]] = set()

        def stop() -> None:
            for uv in servers:
                uv.should_exit = True

        async def on_start() -> None:
            # In the background: the first session's first answer does not wait for the
            # watchers' catch-up over every project.
            attendance.touch()  # the load before this is not idleness
            if watching:
                tasks.add(asyncio.create_task(_logged(fathom.start_watching(), "starting the watchers")))
            tasks.add(asyncio.create_task(stop_when_idle(attendance, stop)))

        app = standalone_app(
            server,
            token=run_file.run_token(),
            host=HOST,
            allowed_hosts=(),
            on_start=on_start,
            local=run_file,
            routes=[*local_routes(lambda: fathom, run_file), status_route(run_file, attendance)],
        )
        config = uvicorn_config(
            Attended(app, attendance, run_file.check),
            host=HOST,
            port=0,
            limits=ConnectionLimits.of(settings),
            log_level="warning",
            timeout_graceful_shutdown=settings.stop_grace_s,
        )
    except BaseException:
        sock.close()
        raise
    say(
        f"fathom daemon (pid {os.getpid()}) on {run_file.url}/mcp for {settings.data_dir}; stops after "
        f"{settings.daemon_idle_minutes:g} idle minutes"
    )
    serve_with_run_file(
        config,
        sock,
        run_file,
        lambda name: say(f"fathom daemon: stopped by {name}"),
        strict=True,
        on_server=servers.append,
    )


async def _logged(work: Awaitable[Any], what: str) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        try:
            await work
        except Exception:  # noqa: BLE001 - a background start-up's failure is logged, not lost
            log.exception("%s failed", what)
