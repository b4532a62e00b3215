"""A pool's job state: the queue of items, the work in flight and its attempts, each
provider's standing (`Member`), what is reported, and the one signal every part waits on.

Plain state with the few operations that keep it consistent (`PoolJob.take` and
`PoolJob.requeue` move items between the queue and the work in flight); it decides nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from fathom.clock import Clock, wait_event
from fathom.inference.pool.sizing import Sizing
from fathom.inference.provider import Provider

Sink = Callable[[list[int], np.ndarray, Provider], Awaitable[None]]
Admission = Callable[[Provider], Awaitable[Any]]


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    elapsed: float
    rate: float  # items per second since the job started
    per_provider: dict[str, int]
    in_flight: int
    queued: int
    ejected: tuple[str, ...] = ()
    cooling: tuple[str, ...] = ()  # rate-limited providers waiting out a cooldown

    @property
    def eta(self) -> float | None:
        left = self.total - self.done
        return left / self.rate if self.rate > 0 else None


@dataclass
class PoolReport:
    total: int
    elapsed: float
    per_provider: dict[str, int] = field(default_factory=dict)  # items written by each
    batches: dict[str, int] = field(default_factory=dict)  # batches written by each
    failures: dict[str, int] = field(default_factory=dict)  # failed batches (not throttles)
    throttles: dict[str, int] = field(default_factory=dict)
    too_large: dict[str, int] = field(default_factory=dict)  # batches refused as too large
    ejections: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0  # straggler copies started
    discarded: int = 0  # items computed by a losing copy and thrown away

    @property
    def rate(self) -> float:
        return self.total / self.elapsed if self.elapsed > 0 else math.inf


class Work:
    """Items being computed: by one attempt, or by two when a straggler was duplicated."""

    __slots__ = ("indices", "copies", "attempts", "done", "has_result")

    def __init__(self, indices: list[int]):
        self.indices = indices
        self.copies = 0
        self.attempts: list[Attempt] = []
        self.done = False
        self.has_result = False  # some copy holds vectors and is waiting to write them


class Attempt:
    __slots__ = ("work", "member", "started", "expected", "probe", "task", "superseded")

    def __init__(self, work: Work, member: Member, started: float, expected: float, probe: bool):
        self.work, self.member = work, member
        self.started, self.expected, self.probe = started, expected, probe
        self.task: asyncio.Future[Any] | None = None
        self.superseded = False


class Phase(Enum):
    IDLE = 0
    EMBED = 1
    DELIVER = 2


class Member:
    def __init__(self, provider: Provider, sizing: Sizing, lanes: int):
        self.provider = provider
        self.sizing = sizing
        self.start = sizing.batch_size  # where its history started it in this pool
        self.lanes = lanes
        self.present = True
        self.tasks: dict[asyncio.Task[None], Phase] = {}
        self.attempts: set[Attempt] = set()
        self.failures = 0  # consecutive
        self.ejections = 0
        self.ejected_until: float | None = None
        self.ejected_at: float | None = None  # when the current failure episode ejected it
        self.eject_reason = ""
        self.probing = False
        self.cooldown_until = -math.inf
        self.admitting = 0  # lanes waiting for a cloud permit (their start time is the key's)

    @property
    def id(self) -> str:
        return self.provider.id

    @property
    def is_cloud(self) -> bool:
        return self.provider.info.is_cloud

    def describe(self, now: float) -> str:
        if not self.present:
            return "left"
        if self.ejected_until is not None:
            return f"ejected ({self.eject_reason}), re-probe in {max(0.0, self.ejected_until - now):.0f}s"
        if self.cooldown_until > now:
            return f"rate-limited for {self.cooldown_until - now:.0f}s"
        return f"{len(self.attempts)} batch(es) in flight"


class PoolJob:
    def __init__(
        self, texts: Sequence[str], sink: Sink, started: float, on_progress: Callable[[Progress], Any] | None
    ):
        self.texts = texts
        self.sink = sink
        self.total = len(texts)
        self.queue: deque[int] = deque(range(self.total))
        self.done = 0
        self.live: set[Work] = set()
        self.started = started
        self.last_progress = started
        self.error: BaseException | None = None
        self.on_progress = on_progress
        self.report = PoolReport(total=self.total, elapsed=0.0)
        self.sink_lock = asyncio.Lock()
        # The caller's context (e.g. the budget's `current_project`), given to every lane,
        # including lanes of providers that join later from another task's context.
        self.context = contextvars.copy_context()

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def take(self, n: int) -> Work:
        """Up to `n` items from the queue front, as work in flight."""
        work = Work([self.queue.popleft() for _ in range(min(n, len(self.queue)))])
        self.live.add(work)
        return work

    def requeue(self, work: Work) -> None:
        """Work with no copy left in flight: unless written, its items go back to the front."""
        self.live.discard(work)
        if not work.done:
            self.queue.extendleft(reversed(work.indices))


def bump(d: dict[str, int], key: str, n: int = 1) -> None:
    d[key] = d.get(key, 0) + n


class PoolState:
    """What the parts of one pool share: the running job, its members, and the change signal
    a waiting lane or the supervisor wakes on."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.job: PoolJob | None = None
        self.members: dict[str, Member] = {}
        self.departed: list[Member] = []  # replaced members whose lanes may still unwind
        self.changed = asyncio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait(self, until: float | None) -> None:
        timeout = None if until is None else max(0.0, until - self.clock.now())
        await wait_event(self.clock, self.changed, timeout)

    def progress(self, job: PoolJob) -> Progress:
        now = self.clock.now()
        elapsed = now - job.started
        return Progress(
            done=job.done,
            total=job.total,
            elapsed=elapsed,
            rate=job.done / elapsed if elapsed > 0 else 0.0,
            per_provider=dict(job.report.per_provider),
            in_flight=sum(len(w.indices) for w in job.live if not w.done),
            queued=len(job.queue),
            ejected=tuple(
                sorted(m.id for m in self.members.values() if m.present and m.ejected_until is not None)
            ),
            cooling=tuple(
                sorted(m.id for m in self.members.values() if m.present and now < m.cooldown_until)
            ),
        )
