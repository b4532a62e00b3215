"""One index run as the service tracks it: its `Job` (state, progress, the operator's pause,
resume and cancel), its `IndexProgress` events, its `IndexReport`, and `progress_line`, the one
line every surface shows of how far it is.

What it owns: a run's state and how it is told; what it refuses: running anything (the
`fathom.index.indexer.Indexer` runs a job; `fathom.service.jobs.JobTable` keeps them).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from fathom.errors import FathomError
from fathom.index.interim import InterimIndex


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # the server stopped while it ran; resumable (`server.job_records`)


class JobCancelled(FathomError):
    def __init__(self, job_id: str, project: str):
        self.job_id, self.project = job_id, project
        super().__init__(
            f"index job {job_id} for project {project!r} was cancelled; the active table is "
            f"unchanged and a later full run resumes from the rows already embedded"
        )


@dataclass(frozen=True)
class IndexProgress:
    """One progress event. `chunks_total` counts the chunks this run must embed (resumed or
    unchanged chunks are `chunks_reused`, not part of the total)."""

    project: str
    phase: str  # "starting", "loading model", "checking encoders", "walking", "chunking",
    #             "reusing vectors", "embedding", "promoting", "done"
    files: int = 0
    chunks_total: int = 0
    chunks_done: int = 0
    chunks_reused: int = 0
    chunks_deleted: int = 0
    chunks_carried: int = 0  # written with a vector reused by content (moved, renamed)
    elapsed_s: float = 0.0
    rate: float = 0.0  # chunks per second over the embedding phase
    eta_s: float | None = None
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexReport:
    project: str
    root: str
    full: bool
    resumed: bool
    files: int
    chunks: int  # chunks in the project now (both tables)
    embedded: int  # chunks embedded by this run: only those whose text is new to the table
    reused: int  # chunks already in place (unchanged, or resumed from an earlier run)
    deleted: int  # rows removed whose text is gone (changed or vanished chunks)
    skipped: dict[str, int]
    elapsed_s: float
    embed_s: float
    rate: float  # chunks embedded per second of the embedding phase
    tables: dict[str, int]  # active rows per table after the run
    providers: dict[str, int] = field(default_factory=dict)  # chunks embedded per provider id
    notes: dict[str, int] = field(default_factory=dict)  # files kept but worth saying, by kind
    carried: int = 0  # chunks written with a stored vector of the same text (lines moved,
    #                   file renamed, full rebuild in the same space): not embedded
    skipped_dirs: dict[str, list[str]] = field(default_factory=dict)  # folders left out, by reason
    split: int = 0  # chunks cut further to fit the encoder's token limit
    first: bool = False  # the project had no active table before this run (built whole: `full`)
    max_tokens: int | None = None  # that limit; None: sized in characters only
    secrets: list[str] = field(default_factory=list)  # files left out as `secret`, by path
    redacted: list[str] = field(default_factory=list)  # files indexed with key material redacted


class Job:
    """One indexing run's state, and the operator's handle on it.

    `pause()` takes effect between batches (a batch in flight finishes and is written);
    `cancel()` likewise, and the run ends with `JobCancelled`, leaving the shadow slot to be
    resumed by the next full run.
    """

    def __init__(
        self,
        project: str,
        root: Path | str,
        *,
        full: bool = False,
        clock: Callable[[], float] = time.monotonic,
        reason: str | None = None,
    ):
        self.id = uuid.uuid4().hex[:12]
        self.project = project
        self.root = Path(root)
        self.full = full
        self.clock = clock
        self.reason = reason  # why it runs: None when asked for, "sync" when the watcher started it
        self.paths: frozenset[str] | None = None  # an incremental run of these files only (a git diff)
        self.state = JobState.PENDING
        self.progress = IndexProgress(project, "pending")
        self.report: IndexReport | None = None
        self.error: str | None = None
        self.created_at = clock()
        self.finished_at: float | None = None
        self._running = asyncio.Event()
        self._running.set()
        self._cancelled = False
        # Seen by the worker thread walking the project, which cannot await anything.
        self.stop = threading.Event()
        self.interim: InterimIndex | None = None  # a first index's walked chunks, while it runs

    def pause(self) -> None:
        if self.state in (JobState.PENDING, JobState.RUNNING):
            self._running.clear()
            self.state = JobState.PAUSED

    def resume(self) -> None:
        if self.state is JobState.PAUSED:
            self.state = JobState.RUNNING
            self._running.set()

    def cancel(self) -> None:
        if not self.finished:
            self._cancelled = True
            self.stop.set()
            self._running.set()  # a paused job must wake up to notice

    @property
    def finished(self) -> bool:
        return self.state in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)

    async def checkpoint(self) -> None:
        """Called between batches: waits while paused, raises JobCancelled if cancelled."""
        if not self._running.is_set():
            await self._running.wait()
        if self._cancelled:
            raise JobCancelled(self.id, self.project)

    def as_dict(self) -> dict[str, Any]:
        p = self.progress
        return {
            "id": self.id,
            "project": self.project,
            "root": str(self.root),
            "full": self.full,
            "reason": self.reason,
            "state": self.state.value,
            "error": self.error,
            "phase": p.phase,
            "files": p.files,
            "chunks_total": p.chunks_total,
            "chunks_done": p.chunks_done,
            "chunks_reused": p.chunks_reused,
            "chunks_carried": p.chunks_carried,
            "rate": round(p.rate, 2),
            "eta_s": None if p.eta_s is None else round(p.eta_s, 1),
            "skipped": dict(p.skipped),
        }


def progress_line(job: Job) -> str:
    """How far a run is, in one line: `embedding: 1,240 of 2,947 chunks embedded, 212 files
    walked`. Until the walk ends the total is extrapolated from the share of bytes walked."""
    p = job.progress
    phase = "paused" if job.state is JobState.PAUSED else p.phase
    if p.chunks_total:
        return f"{phase}: {p.chunks_done:,} of {p.chunks_total:,} chunks embedded, {p.files:,} files walked"
    return f"{phase}: {p.files:,} files walked" if p.files else phase
