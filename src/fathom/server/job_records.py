"""What the server's index jobs were doing, kept on disk so a restart does not forget them.

This module owns `jobs.json` under the data dir: one record per index job started over the admin
API (its project, folder, kind, state, progress when last saved, why it stopped, how often the
server died under it), written atomically on every state change. It also owns the rule for what
a record read at start means:

- a job recorded as pending or running was cut off by a crash or a kill: it is interrupted, and
  that crash is counted against it;
- a job recorded as paused was cut off too, but held: the operator paused it;
- a job recorded as interrupted was stopped by a server shutdown;
- finished jobs (done, failed, cancelled) are history, the newest `KEEP_FINISHED` kept.

And which interrupted jobs resume on start by themselves (`resumes_on_start`): those not paused,
on which the server has not died `HOLD_AFTER_CRASHES` times (a job that keeps killing the server
waits for the operator instead of killing it again at every start).

It refuses to read a damaged file as "no jobs": a file it cannot read is reported (`damaged`)
and left as it is, and nothing is written over it until an operator fixes or moves it.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fathom.config import atomic_write_text, state_defect

log = logging.getLogger("fathom.server.jobs")

KEEP_FINISHED = 200
HOLD_AFTER_CRASHES = 2
FINISHED = ("done", "failed", "cancelled")


class JobRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=64)
    project: str
    root: str
    full: bool = False
    state: str
    error: str | None = None
    created_at: datetime
    updated_at: datetime
    crashes: int = Field(default=0, ge=0)  # times the server died while this job ran
    paused: bool = False  # paused when it was interrupted: held for the operator
    progress: dict[str, Any] = Field(default_factory=dict)  # phase, files, chunks done/total
    report: dict[str, Any] | None = None

    def interrupted_by(self, reason: str) -> None:
        self.state = "interrupted"
        self.error = (f"interrupted: {reason}; " + (
            f"it was paused: resume it with `fathom jobs resume {self.id}`" if self.paused else
            f"held after the server died {self.crashes} times under it: resume it with "
            f"`fathom jobs resume {self.id}`" if self.crashes >= HOLD_AFTER_CRASHES else
            f"it resumes when the server starts, or with `fathom jobs resume {self.id}`"))

    @property
    def resumes_on_start(self) -> bool:
        return self.state == "interrupted" and not self.paused and self.crashes < HOLD_AFTER_CRASHES


class JobLedger:
    """`jobs.json`: load once at start (`restore`), then `save` the records on each change."""

    FILENAME = "jobs.json"

    def __init__(self, data_dir: Path, *, now: Callable[[], datetime] = lambda: datetime.now(tz=UTC)):
        self.path = Path(data_dir) / self.FILENAME
        self.now = now
        self.damaged: str | None = None  # why the file could not be read (and is left alone)

    def restore(self) -> list[JobRecord]:
        """The records on disk, with every unfinished one marked interrupted (blocking)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            return self._unreadable(state_defect(exc))
        try:
            data = json.loads(raw)
            records = [JobRecord.model_validate(r) for r in data["jobs"]]
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            return self._unreadable(state_defect(exc) if isinstance(exc, ValueError) else
                                    f"no list of jobs ({type(exc).__name__})")
        for record in records:
            if record.state in ("pending", "running"):
                record.crashes += 1
                record.interrupted_by("the server stopped while it ran (a crash or a kill)")
            elif record.state == "paused":
                record.paused = True
                record.interrupted_by("the server stopped while it was paused")
            record.updated_at = self.now()
        return records

    def _unreadable(self, defect: str) -> list[JobRecord]:
        self.damaged = (f"{self.path} is not a valid job record ({defect}): the jobs it held are not "
                        f"listed and new ones are not kept across restarts. Fix it, or move it aside")
        log.error("%s", self.damaged)
        return []

    def save(self, records: list[JobRecord]) -> None:
        """Write `records` (blocking): every unfinished one, and the newest finished ones."""
        if self.damaged is not None:
            return  # never over a file an operator may still want to repair
        finished = [r for r in records if r.state in FINISHED]
        kept = [r for r in records if r.state not in FINISHED] + finished[-KEEP_FINISHED:]
        kept.sort(key=lambda r: r.created_at)
        atomic_write_text(self.path, json.dumps({"jobs": [r.model_dump(mode="json") for r in kept]}, indent=1))
