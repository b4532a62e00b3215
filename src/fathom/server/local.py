"""The run file a local `fathom search` reads: a running `fathom serve` or `fathom server`
answers the CLI of the same user with its warm encoder, instead of the CLI loading its own.

It owns:

- `RunFile`: at start the serving process writes `local_server.json` (the background
  Fathom: `local_daemon.json`) in its data dir — its URL, its pid, its kind, its version and a
  token made for this run only — through a 0600 file in the 0700 data dir, so only the user who
  runs it can read it; at stop it removes the file (only while it
  is still its own: a second server on the same data dir may have taken it over). The token is
  never printed, logged or put on a command line, and dies with the process: a stale file left
  by a killed server opens nothing.
- `serve_with_run_file`: runs uvicorn with the run file written, removing it on every stop. uvicorn, once
  shut down gracefully, raises again the signal that stopped it; SIGTERM's default action then
  ends the process before any `finally` of the caller runs, so the file is removed before that.
  A Ctrl-C or SIGTERM that comes before uvicorn takes the signals over unwinds the start, and
  is noted too: should its exception be lost on the way (raised inside a callback that
  discards what it raises), uvicorn stops as soon as it starts instead of serving on.
- `/local/search` and `/local/projects` (`local_routes`): what `fathom search` and `fathom
  projects` print, computed here exactly as the CLI computes it in-process (`Fathom.search`,
  `Fathom.projects`), so both paths print the same. They take this run's local token or the
  admin token (the request guard checks it, `guard.Access`), never an MCP token.
The CLI's side, which reads the file back, is `fathom.local_server` (light to import: the
CLI asks before it loads anything).

It refuses any write: the local token reads (searches, lists projects) and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fathom import __version__
from fathom.config import atomic_write_text
from fathom.local_server import LOCAL_FILE as LOCAL_FILE  # re-exported: the serve's run file
from fathom.local_server import run_file_name
from fathom.server.guard import LOCAL_PREFIX

log = logging.getLogger("fathom.server.local")

LOCAL_TOKEN_PREFIX = "fl"


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server listening on `host`: loopback for
    a wildcard address."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host in ("::", "[::]"):
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


class RunFile:
    """This run's local token and the file that hands it to the same user's CLI."""

    def __init__(self, data_dir: Path, url: str, *, kind: str):
        # its own file per kind: a `fathom serve` and the background Fathom never clobber each other
        self.path = Path(data_dir).expanduser() / run_file_name(kind)
        self.url = url
        self.kind = kind
        self._token = f"{LOCAL_TOKEN_PREFIX}_{secrets.token_urlsafe(32)}"
        self.searches = 0  # answered through this run file's token: a counter a test or the operator reads

    def check(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self._token)

    def run_token(self) -> str:
        """This run's token, for a server whose `/mcp` takes it too (`server.daemon`: its
        sessions' bridges read it from the file). Never printed or logged."""
        return self._token

    def open(self, *, strict: bool = False) -> None:
        """Write the file (0600, replacing any earlier one: the newest server on a data dir is
        the one the CLI asks). A failure only means the CLI searches in-process; `strict`: it
        raises instead (a background Fathom nobody can find is of no use)."""
        body = json.dumps(
            {
                "url": self.url,
                "pid": os.getpid(),
                "kind": self.kind,
                "version": __version__,  # a bridge of another release replaces this daemon
                "token": self._token,
                "started_at": time.time(),
            }
        )
        try:
            atomic_write_text(self.path, body)  # a 0600 temp file renamed into place
        except OSError as exc:
            if strict:
                raise
            log.warning(
                "could not write %s (%s): `fathom search` will not find this server and searches in-process",
                self.path,
                exc.strerror or exc,
            )

    def close(self) -> None:
        """Remove the file if it is still this run's."""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if json.loads(self.path.read_text()).get("token") == self._token:
                self.path.unlink()


def serve_with_run_file(
    config: Any,
    sock: Any,
    run_file: RunFile,
    on_stopped: Callable[[str], None] | None = None,
    *,
    strict: bool = False,
    on_server: Callable[[Any], None] | None = None,
) -> None:
    """Run uvicorn's server for `config` on `sock` with `run_file` written; it is removed on any stop:
    a crash, Ctrl-C, and SIGTERM too (see the module docstring). `on_stopped` hears the name of
    the signal that stopped it, once it has shut down (before the signal is raised again).
    `strict`: a run file that cannot be written stops the start (`RunFile.open`). `on_server` is
    handed the uvicorn server before it runs (whoever may end it early sets `should_exit`)."""
    import signal

    import uvicorn

    stopped_by: list[int] = []
    heard: list[int] = []  # stop signals that reached the window before uvicorn took them over

    def unwind(sig: int, frame: Any) -> None:
        heard.append(sig)
        raise KeyboardInterrupt if sig == signal.SIGINT else _Terminated

    class DoorServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopped_by.append(sig)
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            with super().capture_signals():  # raises the stopping signal again as it exits
                if heard:
                    # A stop signal came, but its exception was lost on the way: raised inside
                    # code that discards what it raises (a weakref callback of the import
                    # system, "Exception ignored in ..."). Without this the server would serve
                    # on, deaf to the Ctrl-C it was sent.
                    self.handle_exit(heard[0], None)
                try:
                    yield
                finally:
                    run_file.close()
                    if stopped_by and on_stopped is not None:
                        on_stopped(signal.Signals(stopped_by[0]).name)

    # SIGTERM's default action ends the process at once: before uvicorn takes the signals over
    # (and when it raises the signal again after its shutdown) it unwinds instead, so the file
    # is removed; then the process ends by SIGTERM as it always did. Both signals are also
    # noted as heard, for uvicorn to stop at once should their exception have been lost.
    # (Loaded CI runs hit these windows: a signal just after the file was written, before
    # uvicorn had started.)
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, unwind) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        run_file.open(strict=strict)  # `fathom search` of this user answers through this server from now on
        uv = DoorServer(config)
        if on_server is not None:
            on_server(uv)
        uv.run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated) as stop:
        name = "SIGINT" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
        if not stopped_by and on_stopped is not None:  # before uvicorn heard it: said here
            on_stopped(name)
        run_file.close()
        if name == "SIGINT":
            raise
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        run_file.close()  # only this run's file is removed, once


class _Terminated(BaseException):
    """SIGTERM while `serve_with_run_file` holds the run file: unwinds to its `finally`."""


def local_routes(service: Callable[[], Any], run_file: RunFile) -> list[Any]:
    """`POST /local/search` and `GET /local/projects` over the service `service()` returns."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from fathom.errors import ConfigError, FathomError
    from fathom.index.request import SearchRequest
    from fathom.server.answers import failure_response

    async def search(request: Request) -> JSONResponse:
        try:
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("query"), str):
                raise ConfigError("the search needs a JSON body with a query")
            asked = SearchRequest.of(
                body["query"],
                body.get("project"),
                str(body.get("table") or "code"),
                int(body.get("k") or 10),
                language=body.get("language"),
                path=body.get("path"),
                kind=body.get("kind"),
                group=str(body.get("group") or "file"),
                ref=body.get("ref"),
            )
            hits = await service().searches.hits(asked)
        except ValueError as exc:
            return failure_response(ConfigError(f"invalid search request: {exc}"))
        except FathomError as exc:
            return failure_response(exc)
        run_file.searches += 1
        return JSONResponse(
            {
                "hits": [h.as_dict() for h in hits],
                "notes": list(getattr(hits, "notes", ())),
                "served_by": {"kind": run_file.kind, "pid": os.getpid(), "searches": run_file.searches},
            }
        )

    async def projects(request: Request) -> JSONResponse:
        items = await asyncio.to_thread(service().projects)
        return JSONResponse({"projects": [asdict(p) for p in items]})

    return [
        Route(LOCAL_PREFIX + "search", search, methods=["POST"]),
        Route(LOCAL_PREFIX + "projects", projects, methods=["GET"]),
    ]
