"""Where a running `fathom serve` or `fathom server` tells the same user's CLI how to reach it.

The serving process writes `local_server.json` in its data dir at start (`server.local`) and
removes it at stop: its URL, pid, kind (`serve` or `server`) and a token made for that run only,
in a 0600 file under the 0700 data dir. This module is the reading side, kept apart and light
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

LOCAL_FILE = "local_server.json"


@dataclass(frozen=True)
class LocalServer:
    """A running server as its `local_server.json` describes it (the CLI's view)."""

    url: str
    pid: int
    kind: str
    token: str = field(repr=False)  # never in a log line or a traceback


def read_local_server(data_dir: Path) -> LocalServer | None:
    """The server this data dir's file names, or None: no file, a file others could read, a
    damaged one, or one whose process is gone (a server killed before it could remove it)."""
    path = Path(data_dir).expanduser() / LOCAL_FILE
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
    return True
