"""The audit log: every admin action on this server, who did it and when, in the data dir.

This module owns one file, `audit.log` (JSON lines, mode 0600), and its two operations:
`record` appends one entry, `read` returns the latest ones. An entry says when (UTC), who (the
token's name: `admin`, `mcp:NAME`, or `server command line` for what an operator did on the
server's own host), what (the request line or the action, with names and ids only) and the
outcome (`ok`, or the refusal's status and reason).

Append-only: the file is opened for appending only (`O_APPEND`, one write per entry), never
rewritten, truncated or rotated by the server. It refuses to hold a secret: callers pass names
and request lines, never bodies, and every field goes through the log scrubber anyway (a key or
bearer-shaped string that slipped in is replaced before it reaches the disk).

It refuses to decide what counts as an admin action: `server.guard` records every authenticated
write to the admin API and every refused attempt by an MCP token, the MCP endpoint records the
tools that write, and the server's command line records token rotations.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable

from fathom.logsafe import scrub

COMMAND_LINE = "server command line"


class AuditLog:
    FILENAME = "audit.log"

    def __init__(self, data_dir: Path, *, now: Callable[[], datetime] = lambda: datetime.now(tz=UTC)):
        self.path = Path(data_dir) / self.FILENAME
        self._now = now
        self._lock = threading.Lock()

    def record(self, who: str, what: str, outcome: str = "ok") -> dict[str, str]:
        """Append one entry (blocking: call it off the event loop); returns it."""
        entry = {"at": self._now().isoformat(timespec="seconds"), "who": scrub(who), "what": scrub(what),
                 "outcome": scrub(outcome)}
        line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return entry

    def read(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The latest `limit` entries (all with None), oldest first. A line that is not an entry
        (a torn write after a crash) is shown as such, never dropped silently."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                lines = deque(fh, maxlen=limit) if limit else list(fh)
        except FileNotFoundError:
            return []
        out = []
        for raw in lines:
            raw = raw.strip()
            if not raw:
                continue
            try:
                entry = json.loads(raw)
                if not isinstance(entry, dict):
                    raise ValueError
            except ValueError:
                entry = {"at": None, "who": "?", "what": "an unreadable line in the audit log", "outcome": "?"}
            out.append(entry)
        return out
