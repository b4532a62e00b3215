"""`fathom mcp` as a thin client: the MCP host's stdio relayed to the background Fathom this
user's sessions share (`server.daemon`), started by the first session that finds none.

Why: a `fathom mcp` serving in its own process loads its own encoder and watchers; each
session paid seconds before its first answer and hundreds of MB. Through one daemon, a session
after the first answers as soon as its bridge has started, and every session sees the same
index and the same watchers' edits.

What it owns:

- finding the daemon (`find_daemon`: the data dir's `local_daemon.json`, trusted only as
  `fathom.local_server` trusts it: this user's own 0600 file of a live process), checking it
  (`usable`: it answers its status within FATHOM_DAEMON_ANSWER_S and is of this release; one of
  another release is stopped and replaced) and starting one (`start_daemon`): detached in its
  own session, its output appended to `daemon.log` (0600, never through a link, moved to
  `daemon.log.1` past a size bound) in the data dir (0700), one spawner at a time (a lock
  file), bounded in time. Whatever keeps
  it from starting is raised as `DaemonUnavailable` naming why; `fathom mcp` then serves
  in-process and says so;
- `Bridge`: each JSON-RPC message from stdin is POSTed to the daemon's `/mcp`; answers (JSON
  or an SSE stream with the request's progress notifications) go to stdout as lines; a GET
  stream carries the server's own notifications (list_changed) and marks the session as
  attached. Requests run concurrently (an index that waits does not hold up a search);
  notifications and the host's answers go in order. If the daemon goes away, the bridge starts
  or finds one once, opens a new session with the host's own `initialize`, and sends the
  request again; a second loss ends the session with an error naming the daemon's log.

What it refuses: importing anything heavy (no numpy, LanceDB, ONNX Runtime or web framework:
`tests/server/test_mcp_daemon.py` checks), printing anything but MCP frames on stdout, and sending
the run's token anywhere but the daemon's loopback URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from fathom import __version__
from fathom.errors import FathomError
from fathom.local_server import DAEMON_FILE, DAEMON_KIND, LocalServer, read_local_server

DAEMON_LOG = "daemon.log"
LOG_KEEP_BYTES = 4 << 20  # daemon.log past this at a start becomes daemon.log.1 (one old file kept)
SPAWN_LOCK = "daemon.lock"
START_S = 120.0  # a cold start loads the encoder's libraries: tens of seconds on a loaded machine
ACCEPT = "application/json, text/event-stream"
RECONNECT_TRIES = 3  # finding the daemon that just died does not count as the one restart
GONE_WAIT_S = 10.0
STOP_WAIT_S = 30.0  # a daemon of another release, asked to stop, finishes its requests first
_spawned: list[subprocess.Popen[bytes]] = []  # reaped before each look, so a dead one is not taken alive


class DaemonUnavailable(FathomError):
    """No background Fathom could be found or started; the message says why."""


class SessionLost(FathomError):
    """The daemon went away twice during one session."""


def find_daemon(data_dir: Path) -> LocalServer | None:
    """The running daemon of `data_dir`, or None."""
    for child in _spawned:
        child.poll()  # a daemon this process started and that died is reaped, so its pid reads dead
    found = read_local_server(data_dir, DAEMON_FILE)
    return found if found is not None and found.kind == DAEMON_KIND else None


@contextlib.contextmanager
def _spawn_lock(data_dir: Path) -> Iterator[None]:
    import fcntl

    fd = os.open(data_dir / SPAWN_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # two sessions starting at once: the second finds the first's
        yield
    finally:
        os.close(fd)  # releases the lock


def start_daemon(
    data_dir: Path,
    *,
    watch: bool = True,
    timeout_s: float = START_S,
    command: list[str] | None = None,
    answer_s: float = 10.0,
    say: Callable[[str], None] | None = None,
) -> LocalServer:
    """The data dir's daemon: the running one if it answers and is of this release, else one
    started now and waited for. One that runs and does not answer within `answer_s` (hung, or
    too busy) is left alone: `DaemonUnavailable` says so, and the session serves in-process."""
    data_dir = Path(data_dir).expanduser()
    say = say or _stderr
    try:
        _private_dir(data_dir)
        with _spawn_lock(data_dir):
            found = find_daemon(data_dir)
            if found is not None and usable(found, data_dir, answer_s, say):
                return found
            return _spawn(data_dir, command or daemon_command(data_dir, watch=watch), timeout_s)
    except OSError as exc:
        raise DaemonUnavailable(
            f"cannot start the background Fathom in {data_dir}: "
            f"{exc.strerror or exc} ({getattr(exc, 'filename', None) or data_dir})"
        ) from None


def _private_dir(data_dir: Path) -> None:
    """The data dir, made or tightened to 0700 before the run file, lock and log go in: the
    daemon's token is handed over there, and `server.local` trusts a file only in it."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = data_dir.stat()
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        os.chmod(data_dir, 0o700)


def usable(found: LocalServer, data_dir: Path, answer_s: float, say: Callable[[str], None]) -> bool:
    """Whether the running daemon `found` serves this session. A daemon of another release is
    stopped (SIGTERM: it finishes its requests) and False; one whose address answers nothing
    (its pid reused, a file left behind), or that drops the connection and ends (killed a moment
    ago), is False; one that does not answer in time, or drops it and lives on, raises."""
    import signal

    if found.version != __version__:
        say(
            f"fathom mcp: the background Fathom (pid {found.pid}) is release {found.version or 'unknown'}, "
            f"this is {__version__}: stopping it and starting this release's"
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(found.pid, signal.SIGTERM)
        _wait_gone(found.pid, STOP_WAIT_S)
        if find_daemon(data_dir) == found:
            raise DaemonUnavailable(
                f"the background Fathom of release {found.version or 'unknown'} (pid {found.pid}) "
                f"did not stop within {STOP_WAIT_S:g} s; `kill {found.pid}` ends it"
            )
        return False
    try:
        answered = httpx.get(
            found.url.rstrip("/") + "/local/status",
            headers={"Authorization": f"Bearer {found.token}"},
            timeout=answer_s,
            trust_env=False,
        )
    except httpx.ConnectError:
        say(f"fathom mcp: nothing answers at the background Fathom's address (pid {found.pid}): starting one")
        return False
    except httpx.HTTPError as exc:
        dropped = isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.TimeoutException)
        # A dropped connection, not a silence: a daemon killed a moment ago keeps its pid while
        # the kernel tears it down. Once that pid is gone, there simply is no daemon.
        if dropped and _wait_gone(found.pid, GONE_WAIT_S):
            say(
                f"fathom mcp: the background Fathom (pid {found.pid}) dropped the connection and has ended: starting one"
            )
            return False
        raise DaemonUnavailable(
            f"the background Fathom (pid {found.pid}) runs but did not answer within {answer_s:g} s "
            f"({type(exc).__name__}: hung, or too busy; its log: {data_dir / DAEMON_LOG}). "
            f"`fathom status` shows it; `kill {found.pid}` ends it (FATHOM_DAEMON_ANSWER_S)"
        ) from None
    if answered.status_code == 200:
        return True
    say(
        f"fathom mcp: the background Fathom's address answered {answered.status_code} (a stale run file): starting one"
    )
    return False


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def daemon_command(data_dir: Path, *, watch: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fathom",
        "--data-dir",
        str(data_dir),
        "daemon",
        *([] if watch else ["--no-watch"]),
    ]


def _spawn(data_dir: Path, command: list[str], timeout_s: float) -> LocalServer:
    log_path = data_dir / DAEMON_LOG
    fd = _open_log(log_path)
    try:
        os.fchmod(fd, 0o600)  # a log made before by a looser umask is this user's alone too
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True
        )  # outlives the session; no Ctrl-C of its terminal
    finally:
        os.close(fd)
    _spawned.append(child)
    deadline = time.monotonic() + timeout_s
    while True:
        found = find_daemon(data_dir)
        if found is not None and found.pid == child.pid:
            return found
        code = child.poll()
        if code is not None:
            raise DaemonUnavailable(
                f"the background Fathom exited (code {code}) before it was ready: "
                f"{_last_line(log_path)} (its log: {log_path})"
            )
        if time.monotonic() > deadline:
            child.terminate()
            raise DaemonUnavailable(
                f"the background Fathom did not start within {timeout_s:g} s (its log: {log_path})"
            )
        time.sleep(0.05)  # polling a file another process writes; bounded by the deadline above


def _open_log(path: Path) -> int:
    """daemon.log for appending, this user's alone; never through a link planted in its place
    (O_NOFOLLOW: the daemon would write wherever it points). Past `LOG_KEEP_BYTES` it is moved
    to daemon.log.1 first (the one old file kept), so the log is bounded across starts."""
    with contextlib.suppress(FileNotFoundError):
        if os.lstat(path).st_size > LOG_KEEP_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return lines[-1][:300]
    return "it said nothing"


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The `data` of each event of a server-sent event stream."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether `pid` is gone (a child of this process reaped) within `timeout_s`."""
    from fathom.local_server import pid_alive

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in _spawned:
            child.poll()
        if not pid_alive(pid):
            return True
        time.sleep(0.05)  # a dying process, polled; bounded by the deadline
    return False


class _SessionGone(Exception):
    """The daemon answered 404 for this session: it is not the one that opened it."""


class Bridge:
    """One host session relayed to the daemon (see the module docstring)."""

    def __init__(
        self,
        daemon: LocalServer,
        *,
        data_dir: Path,
        watch: bool = True,
        write: Callable[[bytes], None] | None = None,
        say: Callable[[str], None] | None = None,
        restart: Callable[[], LocalServer] | None = None,
    ):
        self.daemon = daemon
        self.data_dir = data_dir
        self.write = write or _stdout_line
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.restart = restart or (lambda: start_daemon(data_dir, watch=watch))
        self.session_id: str | None = None
        self.protocol: str | None = None
        self.initialize: dict[str, Any] | None = None
        self.generation = 0
        self.restarts = 0
        self.closing = False
        self._lock = asyncio.Lock()
        # Clear while a reconnect opens the new session: a request sent meanwhile would carry no
        # session id (the daemon answers 400), so it waits and goes with the new one.
        self._ready = asyncio.Event()
        self._ready.set()
        self._answered: set[Any] = set()
        # trust_env=False: no HTTP(S)_PROXY from the environment; the daemon is on loopback,
        # and its run token goes nowhere else.
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0), trust_env=False)

    @property
    def url(self) -> str:
        return self.daemon.url.rstrip("/") + "/mcp"

    def _headers(self, accept: str = ACCEPT) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.daemon.token}", "Accept": accept}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        if self.protocol:
            headers["mcp-protocol-version"] = self.protocol
        return headers

    async def run(self, lines: Any) -> None:
        """Relay until the host closes stdin (or the session is lost: `SessionLost`)."""
        tasks: set[asyncio.Task[None]] = set()
        try:
            async with asyncio.TaskGroup() as group:
                async for line in lines:
                    if not line.strip():
                        continue
                    try:
                        message = json.loads(line)
                    except ValueError:
                        self._emit(
                            {
                                "jsonrpc": "2.0",
                                "id": None,
                                "error": {"code": -32700, "message": "parse error: not JSON"},
                            }
                        )
                        continue
                    if isinstance(message, dict) and message.get("method") == "initialize":
                        self.initialize = message
                        await self.send(message)
                        tasks.add(group.create_task(self.listen()))
                    elif isinstance(message, dict) and "method" in message and "id" in message:
                        tasks.add(group.create_task(self.send(message)))  # a request: may take long
                    else:
                        await self.send(message)  # notifications and answers keep their order
                # The host closed its end: nobody reads what is still on its way.
                self.closing = True
                await self._end_session()
                for task in tasks:
                    task.cancel()
        except* SessionLost as lost:
            raise lost.exceptions[0] from None
        finally:
            self.closing = True
            await self.http.aclose()

    async def send(self, message: Any) -> None:
        """POST `message`; once, on losing the daemon, reconnect and send it again."""
        await self._ready.wait()
        generation = self.generation
        try:
            await self._post(message)
            return
        except (httpx.TransportError, _SessionGone) as exc:
            first: BaseException = exc
        if self._answered_already(message):
            return
        try:
            await self.reconnect(generation, first)
            await self._post(message)
        except (httpx.TransportError, _SessionGone, DaemonUnavailable) as exc:
            self._fail(message, exc)

    def _answered_already(self, message: Any) -> bool:
        return isinstance(message, dict) and message.get("id") in self._answered

    async def _post(self, message: Any, *, quiet: bool = False) -> None:
        body = json.dumps(message).encode()
        headers = {**self._headers(), "Content-Type": "application/json"}
        async with self.http.stream("POST", self.url, content=body, headers=headers) as response:
            if response.status_code == 404 and self.session_id:
                raise _SessionGone
            if response.status_code == 202:
                return
            if response.status_code >= 400:
                text = (await response.aread()).decode(errors="replace")
                if isinstance(message, dict) and "id" in message and not quiet:
                    self._emit(
                        _error(
                            message["id"],
                            f"the background Fathom refused the request "
                            f"({response.status_code}): {text[:500]}",
                        )
                    )
                return
            if isinstance(message, dict) and message.get("method") == "initialize":
                self.session_id = response.headers.get("mcp-session-id") or self.session_id
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                async for data in sse_data(response):
                    self._relay(data, quiet=quiet)
            else:
                data = (await response.aread()).decode()
                if data.strip():
                    self._relay(data, quiet=quiet)

    def _relay(self, data: str, *, quiet: bool) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if isinstance(message, dict) and ("result" in message or "error" in message):
            self._answered.add(message.get("id"))
            version = (
                (message.get("result") or {}).get("protocolVersion")
                if isinstance(message.get("result"), dict)
                else None
            )
            if version:
                self.protocol = str(version)
        if not quiet:
            self._emit(message)

    def _emit(self, message: Any) -> None:
        self.write(json.dumps(message, separators=(",", ":")).encode())

    async def listen(self) -> None:
        """The session's server stream: the server's own notifications, while the session lasts."""
        while not self.closing:
            await self._ready.wait()
            generation = self.generation
            try:
                async with self.http.stream(
                    "GET", self.url, headers=self._headers("text/event-stream")
                ) as response:
                    if response.status_code == 405:
                        return  # no server stream offered: requests still carry their own
                    if response.status_code < 400:
                        async for data in sse_data(response):
                            self._relay(data, quiet=False)
                    elif response.status_code != 404:
                        return
            except httpx.TransportError:
                pass
            if self.closing:
                return
            await self.reconnect(generation, ConnectionError("the server stream ended"))

    async def reconnect(self, generation: int, cause: BaseException) -> None:
        """A daemon (found, or started) and a fresh session on it, once per bridge."""
        async with self._lock:
            if self.generation != generation:
                return  # another request already reconnected
            if self.restarts >= 1 or self.initialize is None:
                raise SessionLost(self._lost_line(cause))
            self.restarts += 1
            self._ready.clear()
            try:
                await self._reopen(cause)
            finally:
                self._ready.set()

    async def _reopen(self, cause: BaseException) -> None:
        """A daemon, and the host's session opened on it again (the `reconnect` lock held)."""
        assert self.initialize is not None
        self.say(
            f"fathom mcp: the background Fathom went away ({type(cause).__name__}); "
            f"starting or finding it again"
        )
        for _ in range(RECONNECT_TRIES):
            try:
                self.daemon = await asyncio.to_thread(self.restart)
                self.session_id = None
                await self._post({**self.initialize, "id": "fathom-bridge-reconnect"}, quiet=True)
                await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, quiet=True)
                self.generation += 1
                return
            except DaemonUnavailable as exc:
                raise SessionLost(self._lost_line(exc)) from None
            except (httpx.TransportError, _SessionGone) as exc:
                # Found the one that just died (its file outlives a SIGKILL until its pid is
                # gone): wait for it to be gone, then start one.
                cause = exc
                await asyncio.to_thread(_wait_gone, self.daemon.pid, GONE_WAIT_S)
        raise SessionLost(self._lost_line(cause))

    def _lost_line(self, cause: BaseException) -> str:
        return (
            f"the background Fathom went away and could not be reached again ({type(cause).__name__}: "
            f"{cause}); see {self.data_dir / DAEMON_LOG}. Restart the session, or serve in-process with "
            f"`fathom mcp --in-process` (FATHOM_MCP_IN_PROCESS=1)"
        )

    def _fail(self, message: Any, cause: BaseException) -> None:
        line = self._lost_line(cause)
        if isinstance(message, dict) and "id" in message and "method" in message:
            self._emit(_error(message["id"], line))
        raise SessionLost(line)

    async def _end_session(self) -> None:
        if self.session_id is None:
            return
        with contextlib.suppress(httpx.HTTPError):
            await self.http.delete(self.url, headers=self._headers(), timeout=2.0)


def _error(request_id: Any, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": text}}


def _stdout_line(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


async def stdin_lines() -> AsyncIterator[str]:
    """The host's lines: read on the event loop (a stop never waits on a blocked read,
    `server.stdio`), or from a worker thread for a regular file redirected in."""
    from fathom.server.stdio import loop_stdin

    async with loop_stdin() as lines:
        if lines is not None:
            async for line in lines:
                yield line
            return
    while line := await asyncio.to_thread(sys.stdin.readline):
        yield line


def daemon_status(data_dir: Path) -> dict[str, Any] | None:
    """What the data dir's daemon says of itself (`/local/status`), or None when none runs;
    a daemon that does not answer is described from its file."""
    found = find_daemon(data_dir)
    if found is None:
        return None
    try:
        response = httpx.get(
            found.url.rstrip("/") + "/local/status",
            timeout=5.0,
            trust_env=False,
            headers={"Authorization": f"Bearer {found.token}"},
        )
        response.raise_for_status()
        return dict(response.json())
    except (httpx.HTTPError, ValueError) as exc:
        return {"pid": found.pid, "url": found.url, "answering": f"no ({type(exc).__name__})"}
