"""Where a running `fathom serve` or `fathom server` tells the same user's CLI how to reach it.

The serving process writes a run file in its data dir at start (`server.local`) and removes
it at stop: its URL, pid, kind, package version and a token made for that run only, in a 0600
file under the 0700 data dir. A `fathom serve` or `fathom server` writes `local_server.json`;
the background Fathom of `fathom mcp` sessions (`server.daemon`) writes `local_daemon.json`, so
neither clobbers the other's (a serve started beside a daemon would otherwise hide the daemon
from its sessions, and they would start a second one). `fathom search` and `fathom projects`
ask whichever runs, a serve first (a person started it). This module is the reading side, kept apart and light
(no web framework) because `fathom search` asks it before anything else is imported.

It refuses a file it cannot trust: one another user could read or write (its token could have
been read, or planted), one damaged, and one whose process is gone (a server killed before it
could remove it): each is as if no server ran.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

LOCAL_FILE = "local_server.json"  # `fathom serve`, `fathom server`
DAEMON_FILE = "local_daemon.json"  # the background Fathom (kind "daemon")
DAEMON_KIND = "daemon"


def run_file_name(kind: str) -> str:
    """The run file a server of `kind` writes in its data dir."""
    return DAEMON_FILE if kind == DAEMON_KIND else LOCAL_FILE


@dataclass(frozen=True)
class LocalServer:
    """A running server as its `local_server.json` describes it (the CLI's view)."""

    url: str
    pid: int
    kind: str
    token: str = field(repr=False)  # never in a log line or a traceback
    version: str = ""  # the package version that wrote it ("" before versions were written)


def read_local_server(data_dir: Path, name: str | None = None) -> LocalServer | None:
    """The server this data dir's run file `name` names (None: a serve's, else the daemon's),
    or None: no file, a file others could read, a damaged one, or one whose process is gone (a
    server killed before it could remove it)."""
    if name is None:
        return read_local_server(data_dir, LOCAL_FILE) or read_local_server(data_dir, DAEMON_FILE)
    path = Path(data_dir).expanduser() / name
    try:
        info = path.stat()
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            return None  # not this user's alone: its token cannot be trusted to be private
        data = json.loads(path.read_text())
        server = LocalServer(
            url=str(data["url"]),
            pid=int(data["pid"]),
            kind=str(data.get("kind") or "server"),
            token=str(data["token"]),
            version=str(data.get("version") or ""),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return server if pid_alive(server.pid) else None


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's: not our server
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that has ended and not been reaped yet (a daemon its bridge started, killed):
    signal 0 still reaches it, yet it serves nothing."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b") ", 1)[1][:1] == b"Z"
    except (OSError, IndexError):
        return False  # no /proc (macOS): as alive, as before
