"""The audit log: every admin action on this server, who did it and when, in the data dir.

This module owns one file, `audit.log` (JSON lines, mode 0600), its older generations and its
three operations: `record` appends one entry, `refused` appends one at a bounded rate, `read`
returns the latest ones. An entry says when (UTC), who (the token's name: `admin`, `mcp:NAME`,
`unknown token`, or `server command line` for what an operator did on the server's own host),
what (the request line or the action, with names and ids only) and the outcome (`ok`, or the
refusal's status and reason).

Bounded, whatever clients send:
- refusals are written at a bounded rate (`RefusalRate`): a token bucket per (who, kind of
  refusal), a burst of 20 then one a second; what goes over is counted, and one summary entry
  ("N more refused requests ... not written") takes its place once the bucket refills (at the
  latest when the log is next written or read);
- the file rotates once it would pass `max_bytes` (FATHOM_AUDIT_MAX_BYTES): `audit.log` becomes
  `audit.log.1`, and so on up to `audit.log.3`; the oldest is dropped. Each is 0600;
- `read` reads the file from its end, as far back as the entries asked for, never whole.

Within a generation the file is append-only (`O_APPEND`, one write per entry), never rewritten.
It refuses to hold a secret: callers pass names and request lines, never bodies; every field goes
through the log scrubber anyway (`logsafe.scrub`: a key, token, JWT or credential that slipped in
is replaced before it reaches the disk, and a query string's secret-named values, `?key=…`,
`?access_token=…`, `?code=…`, are replaced whatever they look like).

It refuses to decide what counts as an admin action: `server.guard` records every authenticated
write to the admin API and every refused attempt of a token, the MCP endpoint records the tools
that write, and the server's command line records token rotations.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fathom.clock import Clock, SystemClock
from fathom.logsafe import scrub

COMMAND_LINE = "server command line"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
GENERATIONS = 3  # audit.log.1 .. audit.log.3 besides audit.log
_TAIL_BLOCK = 64 * 1024


@dataclass
class _Bucket:
    tokens: float
    at: float
    suppressed: int = 0
    who: str = ""
    kind: str = ""


class RefusalRate:
    """How many refusals of one (who, kind) are written: a token bucket of `burst`, refilled at
    `per_second`; over it, counted instead. At most `max_keys` buckets are kept (the least
    recently used goes, its count reported first)."""

    def __init__(
        self, *, burst: int = 20, per_second: float = 1.0, max_keys: int = 256, clock: Clock | None = None
    ):
        self.burst = burst
        self.per_second = per_second
        self.max_keys = max_keys
        self.clock = clock or SystemClock()
        self._buckets: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()

    def admit(self, who: str, kind: str) -> tuple[bool, list[tuple[str, str, int]]]:
        """Whether this refusal is written, and the (who, kind, count) summaries due now."""
        now = self.clock.now()
        key = (who, kind)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(tokens=float(self.burst), at=now, who=who, kind=kind)
            self._buckets[key] = bucket
        self._buckets.move_to_end(key)
        due = self.due(now)
        self._refill(bucket, now)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            written = True
        else:
            bucket.suppressed += 1
            written = False
        while len(self._buckets) > self.max_keys:
            _, old = self._buckets.popitem(last=False)
            if old.suppressed:
                due.append((old.who, old.kind, old.suppressed))
        return written, due

    def due(self, now: float | None = None) -> list[tuple[str, str, int]]:
        """The counts of the buckets that refilled since they began counting: each is written
        once, as one summary entry (which takes a token of its bucket)."""
        now = self.clock.now() if now is None else now
        out = []
        for bucket in self._buckets.values():
            if bucket.suppressed:
                self._refill(bucket, now)
                if bucket.tokens >= 1:
                    bucket.tokens -= 1
                    out.append((bucket.who, bucket.kind, bucket.suppressed))
                    bucket.suppressed = 0
        return out

    def _refill(self, bucket: _Bucket, now: float) -> None:
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_second)
        bucket.at = now


class AuditLog:
    FILENAME = "audit.log"

    def __init__(
        self,
        data_dir: Path,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(tz=UTC),
        max_bytes: int = DEFAULT_MAX_BYTES,
        rate: RefusalRate | None = None,
    ):
        self.path = Path(data_dir) / self.FILENAME
        self.max_bytes = max_bytes
        self.rate = rate or RefusalRate()
        self._now = now
        self._lock = threading.Lock()

    def record(self, who: str, what: str, outcome: str = "ok") -> dict[str, str]:
        """Append one entry (blocking: call it off the event loop); returns it."""
        with self._lock:
            self._summaries(self.rate.due())
            return self._append(who, what, outcome)

    def refused(self, who: str, what: str, outcome: str, kind: str) -> dict[str, str] | None:
        """Append a refusal at the bounded rate of (who, `kind`); the entry, or None when it was
        only counted (blocking)."""
        with self._lock:
            written, due = self.rate.admit(who, kind)
            self._summaries(due)
            return self._append(who, what, outcome) if written else None

    def _summaries(self, due: list[tuple[str, str, int]]) -> None:
        for who, kind, count in due:
            self._append(
                who,
                f"{count} more refused request{'s' if count != 1 else ''} not written one by one "
                f"(the audit log takes a burst, then one a second, of each kind)",
                kind,
            )

    def _append(self, who: str, what: str, outcome: str) -> dict[str, str]:
        entry = {
            "at": self._now().isoformat(timespec="seconds"),
            "who": scrub(who),
            "what": scrub(what),
            "outcome": scrub(outcome),
        }
        line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rotate_for(len(line))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return entry

    def generation(self, n: int) -> Path:
        return self.path if n == 0 else self.path.with_name(f"{self.FILENAME}.{n}")

    def _rotate_for(self, incoming: int) -> None:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return
        if size == 0 or size + incoming <= self.max_bytes:
            return
        for n in range(GENERATIONS, 0, -1):  # .2 -> .3 (the old .3 is dropped), ..., audit.log -> .1
            older = self.generation(n - 1)
            if older.exists():
                os.replace(older, self.generation(n))

    def read(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The latest `limit` entries (the whole current file with None), oldest first, read from
        the end of the file (and of older generations when the current one holds fewer). A line
        that is not an entry (a torn write after a crash) is shown as such, never dropped."""
        with self._lock:
            self._summaries(self.rate.due())
        if limit is None:
            return [_entry(line) for line in _lines(self.path)]
        lines: list[bytes] = []
        for n in range(GENERATIONS + 1):
            lines = _tail(self.generation(n), limit - len(lines)) + lines
            if len(lines) >= limit:
                break
        return [_entry(line) for line in lines]


def _lines(path: Path) -> list[bytes]:
    try:
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def _tail(path: Path, count: int) -> list[bytes]:
    """The last `count` non-empty lines of `path`, reading blocks back from its end."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return []
    with fh:
        end = fh.seek(0, os.SEEK_END)
        data = b""
        pos = end
        while pos > 0 and data.count(b"\n") <= count:
            step = min(_TAIL_BLOCK, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = [line for line in data.splitlines() if line.strip()]
    if pos > 0:
        lines = lines[1:]  # the first may be cut
    return lines[-count:] if count > 0 else []


def _entry(raw: bytes) -> dict[str, Any]:
    try:
        entry = json.loads(raw.decode("utf-8", errors="replace"))
        if not isinstance(entry, dict):
            raise ValueError
    except ValueError:
        entry = {"at": None, "who": "?", "what": "an unreadable line in the audit log", "outcome": "?"}
    return entry
