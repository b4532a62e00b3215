"""The pull-based fan-out pool that embeds an index job over every allowed provider at once.

One job is one shared queue of items (text indices). Each provider runs its own worker loop
("lane"; a provider may have several) and pulls a batch only when it has capacity, so a fast
GPU simply comes back more often than a slow one and nobody is handed work it cannot do.
What the pool guarantees, whatever fails:

- Every item is written exactly once. A batch that fails, or whose provider drops, goes back
  to the FRONT of the queue. A batch duplicated to beat a straggler is written by whichever
  copy finishes first; the other result is discarded, never written.
- A throttled cloud provider holds no work while it waits. The budget's permit is taken
  BEFORE items are pulled (`admission`), and after a 429/402 the batch goes back to the queue
  and that provider pauses pulling for the cooldown, while the locals keep pulling.
- A provider that keeps failing (other than rate limits) is ejected and re-probed later with
  one small batch, on an exponential backoff that grows once per failure episode (the batches
  its other lanes had in flight when it was ejected fail with it, and count as that episode).
- The end of a job is not held hostage: near the end each lane pulls its part of a plan in
  which every lane finishes as early as it can, together (a lane that would finish after the
  others finish everything pulls nothing), and when the queue is empty an idle provider
  duplicates a batch that has been in flight much longer than its provider's own history
  predicts for a batch of that size.
- Under backup the cloud pulls only while no local provider can serve, and stops pulling
  (mid-job) as soon as one can again.

Batch size adapts per provider to a target batch latency: it starts small (or, given a
`history`, where the provider's last job left it), follows the measured seconds per item, at
most doubling per batch, within [min_batch, max_batch]. A cloud provider whose key has a
known request rate sends batches large enough that its requests, not its lanes, are spent
(`rate_limit`; up to max_batch for a low RPM). Each provider's latency is kept as a line,
fixed cost plus cost per item, so a straggler is judged against what its own provider takes
for a batch of that size.

A provider that refuses a batch as too large (a per-request input limit: `is_too_large`) gets
a ceiling: its batch is halved, the refused items go back to the queue front, and no growth,
rate floor or later success takes it past that size again (`Sizing.ceiling`, kept across
restarts with the rest of the history). A size the provider never served is tried by one lane
at a time, so a limit costs one refused request, not one per lane.

The pool refuses to decide who may serve (its `eligible` predicate comes from the router),
to know what a permit is made of (the budget's `admission` hands them out), or to write rows
(the job's `sink` does, once per finished batch, serialised so the store sees one writer).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Awaitable, Callable, Iterable, Sequence

import numpy as np

from fathom.clock import Clock, SystemClock, wait_event
from fathom.errors import NoProviderAvailable, ProviderError
from fathom.inference.provider import Provider
from fathom.inference.registry import ChangeKind, ProviderRegistry, RegistryChange
from fathom.roles import Role

log = logging.getLogger(__name__)

Sink = Callable[[list[int], np.ndarray, Provider], Awaitable[None]]
FIXED_SHARE = 0.1  # a request's fixed cost the batch size aims to keep under (`_learn`)
STRETCH = 2.0  # ... at batches of no more than this many target latencies
# The least cost an item is taken to have: a provider measured at ~0 s an item (all fixed
# cost) still gets an even part of the end game, not whatever one bisection step rounds to.
MIN_PER_ITEM = 1e-6
Admission = Callable[[Provider], Awaitable[Any]]


class MalformedBatch(ProviderError):
    """A provider returned vectors that cannot be written (wrong count or width, or values
    that are not finite). Nothing from that batch is written; the provider is ejected."""

    retryable = False

    def __init__(self, provider_id: str, problem: str):
        self.provider_id, self.problem = provider_id, problem
        super().__init__(f"provider {provider_id} returned a malformed batch: {problem}")


class PoolStalled(NoProviderAvailable):
    """No batch finished for `stall_timeout` seconds: nothing that may serve could."""

    def __init__(self, done: int, total: int, waited: float, members: dict[str, str]):
        self.done, self.total, self.waited, self.members = done, total, waited, members
        state = "; ".join(f"{pid}: {s}" for pid, s in sorted(members.items())) or "no provider at all"
        super().__init__(
            f"the embedding pool made no progress for {waited:.0f}s with {total - done} of "
            f"{total} items left ({state}). Start a sidecar, fix the failing providers, or "
            f"check the role's policy; the items written so far are kept."
        )


def is_too_large(exc: BaseException) -> bool:
    """The provider refused a request for carrying more than it takes at once (too many
    inputs, too many tokens over the batch, a 413): the same items in smaller batches pass.
    Duck-typed on `too_large`; a sidecar relays the error's class name as `code`."""
    return getattr(exc, "too_large", False) is True or getattr(exc, "code", None) == "BatchTooLarge"


def is_throttle(exc: BaseException) -> bool:
    """A rate limit (429) or an exhausted in-flight budget (402): the account says wait; the
    provider is healthy, so it is paused, never ejected. Duck-typed on `throttle_kind` (and
    `retry_after`), so routing never imports a provider module."""
    return getattr(exc, "throttle_kind", None) in ("429", "402")


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


# -- job state -------------------------------------------------------------------------------


class _Work:
    """Items being computed: by one attempt, or by two when a straggler was duplicated."""

    __slots__ = ("indices", "copies", "attempts", "done", "has_result")

    def __init__(self, indices: list[int]):
        self.indices = indices
        self.copies = 0
        self.attempts: list[_Attempt] = []
        self.done = False
        self.has_result = False  # some copy holds vectors and is waiting to write them


class _Attempt:
    __slots__ = ("work", "member", "started", "expected", "probe", "task", "superseded")

    def __init__(self, work: _Work, member: _Member, started: float, expected: float, probe: bool):
        self.work, self.member = work, member
        self.started, self.expected, self.probe = started, expected, probe
        self.task: asyncio.Future[Any] | None = None
        self.superseded = False


class _Phase(Enum):
    IDLE = 0
    EMBED = 1
    DELIVER = 2


class LatencyLine:
    """A provider's batch latency as `base + per_item × n`, fitted by exponentially weighted
    least squares over its recent batches (each older batch weighs `DECAY` times less).

    Why a line and not seconds per item: a request has a fixed cost (a round trip, a model
    call) that a small batch pays in full, so `n × seconds-per-item` measured on whole
    batches says an end-game sliver of 8 should take a tenth of what it does, and a healthy
    slow provider's last batch looks overdue. Batches all of one size cannot separate the two
    terms: the line then keeps its base and moves its slope to the latest latencies."""

    DECAY = 0.8
    SPREAD = 0.05  # sizes must differ by this share of their mean to fit both terms

    def __init__(self, base: float | None = None, per_item: float | None = None):
        self.base, self.per_item = base, per_item
        self._w = self._n = self._l = self._nn = self._nl = 0.0

    @property
    def known(self) -> bool:
        return self.base is not None and self.per_item is not None

    def observe(self, n: int, latency: float) -> None:
        d = self.DECAY
        self._w = d * self._w + 1.0
        self._n = d * self._n + n
        self._l = d * self._l + latency
        self._nn = d * self._nn + n * n
        self._nl = d * self._nl + n * latency
        mean_n, mean_l = self._n / self._w, self._l / self._w
        var = self._nn / self._w - mean_n * mean_n
        if var > (self.SPREAD * mean_n) ** 2:
            slope = (self._nl / self._w - mean_n * mean_l) / var
            # Noise can tilt the fit past what a latency can be: no negative cost.
            slope = min(max(0.0, slope), mean_l / mean_n)
            self.base, self.per_item = max(0.0, mean_l - slope * mean_n), slope
        elif self.base is not None:
            self.base = min(self.base, mean_l)
            self.per_item = (mean_l - self.base) / mean_n

    def at(self, n: int) -> float:
        assert self.base is not None and self.per_item is not None
        return self.base + self.per_item * n


@dataclass
class Sizing:
    """What the pool has learned about a provider's speed; kept across jobs (`history`), and
    by the service across restarts (`config.BatchRecord` in the routing state)."""

    batch_size: int
    spi: float | None = None  # EWMA seconds per item, from batches of the size it pulls
    line: LatencyLine = field(default_factory=LatencyLine, compare=False)
    # The largest batch the provider takes, learned from its refusal of a larger one (a
    # per-request input limit). A provider's limit is fixed: no success raises it, and
    # neither growth nor a rate floor goes past it. None: no limit seen.
    ceiling: int | None = None
    # The largest batch it has served in this process (`Pool._proven`).
    accepted: int = field(default=0, compare=False)

    def capped(self, n: int) -> int:
        return n if self.ceiling is None else min(n, self.ceiling)

    def expected(self, n: int) -> float | None:
        """Seconds a batch of `n` should take by this history, erring long; None if unmeasured.
        Without a line, a batch smaller than the usual one is given the usual one's time: a
        smaller batch is never slower, and may be no faster (the request's fixed cost)."""
        if self.line.known:
            return self.line.at(n)
        if self.spi is None:
            return None
        return self.spi * max(n, self.batch_size)


class _Member:
    def __init__(self, provider: Provider, sizing: Sizing, lanes: int):
        self.provider = provider
        self.sizing = sizing
        self.start = sizing.batch_size  # where its history started it in this pool
        self.lanes = lanes
        self.present = True
        self.tasks: dict[asyncio.Task[None], _Phase] = {}
        self.attempts: set[_Attempt] = set()
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


class _Job:
    def __init__(self, texts: Sequence[str], sink: Sink, started: float,
                 on_progress: Callable[[Progress], Any] | None):
        self.texts = texts
        self.sink = sink
        self.total = len(texts)
        self.queue: deque[int] = deque(range(self.total))
        self.done = 0
        self.live: set[_Work] = set()
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


def _bump(d: dict[str, int], key: str, n: int = 1) -> None:
    d[key] = d.get(key, 0) + n


@dataclass(frozen=True)
class _Plan:
    action: str  # "exit" | "wait" | "pull" | "dup"
    until: float | None = None  # wait: time to look again (None: on the next change)
    size: int = 0
    probe: bool = False
    work: _Work | None = None


_EXIT = _Plan("exit")
_WAIT = _Plan("wait")


class Pool:
    def __init__(
        self,
        providers: ProviderRegistry | Iterable[Provider],
        *,
        role: Role | None = None,
        clock: Clock | None = None,
        eligible: Callable[[Provider], bool] | None = None,
        cloud_reserve_only: bool | Callable[[], bool] = False,
        admission: Admission | None = None,
        lanes: int | Callable[[Provider], int] = 1,
        target_latency: float = 1.0,
        initial_batch: int = 4,
        min_batch: int = 1,
        max_batch: int = 256,
        max_failures: int = 3,
        eject_base: float = 5.0,
        eject_max: float = 120.0,
        straggler_factor: float = 3.0,
        throttle_wait: float = 1.0,
        stall_timeout: float | None = 600.0,
        recheck: float = 1.0,
        on_progress: Callable[[Progress], None] | None = None,
        history: dict[str, Sizing] | None = None,
        rate_limit: Callable[[Provider], Any] | None = None,
    ):
        """`providers`: a registry (the pool follows its changes for `role`) or a fixed list
        (change it mid-job with `add`/`remove`). `eligible(provider)` is asked before every
        pull (the router's "may serve now", clearance included). `admission(provider)` is
        awaited for a cloud provider BEFORE it pulls items and returns a permit with
        `release()` and `throttled(retry_after, kind)` (sync or async), e.g.
        `CloudBudget.admission`, which also binds the permit so a `BudgetedProvider` uses it
        instead of taking a second. The pool calls `throttled(...)` on a rate-limited call
        (unless the permit already recorded it), then `release()` once per permit
        (`record_rtt=False` when it carried no request). Locals never ask it; an exception
        from it pauses that provider for `throttle_wait`.
        `lanes(provider)`: batches one provider may have in flight at once, asked again
        before every pull, so a cloud provider's lanes follow the budget's effective limit.
        `history`: what earlier pools learned of each provider's speed (provider id ->
        `Sizing`), shared and updated in place, so a provider's first batch of the next job
        starts at the size its measured speed calls for instead of `initial_batch`.
        `rate_limit(provider)`: for a cloud provider, the key's known request rate (an object
        with `per_s`, requests a second, and `lanes_follow`, true when the budget adds lanes
        until that rate is reached), or None when no trusted rate is known
        (`CloudBudget.key_rate`). Requests are then the scarce resource: see `_rate_floor`."""
        if not 1 <= min_batch <= initial_batch <= max_batch:
            raise ValueError("need 1 <= min_batch <= initial_batch <= max_batch")
        if isinstance(providers, ProviderRegistry):
            if role is None:
                raise ValueError("a pool over a registry needs the role it embeds for")
            self.registry: ProviderRegistry | None = providers
            self._static: list[Provider] = []
        else:
            self.registry = None
            self._static = list(providers)
        self.role = Role(role) if role is not None else None
        self.clock = clock or (self.registry.clock if self.registry else SystemClock())
        self._eligible = eligible or (lambda p: True)
        self._reserve = cloud_reserve_only if callable(cloud_reserve_only) else (lambda: cloud_reserve_only)
        self.admission = admission
        self._lanes = lanes if callable(lanes) else (lambda p: lanes)
        self.target_latency = target_latency
        self.initial_batch, self.min_batch, self.max_batch = initial_batch, min_batch, max_batch
        self.max_failures = max_failures
        self.eject_base, self.eject_max = eject_base, eject_max
        self.straggler_factor = straggler_factor
        self.throttle_wait = throttle_wait
        self.stall_timeout = stall_timeout
        self.recheck = recheck
        self.on_progress = on_progress
        self._sizing: dict[str, Sizing] = {} if history is None else history
        self._rate_limit = rate_limit
        self._members: dict[str, _Member] = {}
        self._departed: list[_Member] = []  # replaced members whose lanes may still unwind
        self._job: _Job | None = None
        self._changed = asyncio.Event()

    # -- public ------------------------------------------------------------------------

    async def run(self, texts: Sequence[str], sink: Sink, *,
                  on_progress: Callable[[Progress], Any] | None = None) -> PoolReport:
        """Embed every text; `sink(indices, vectors, provider)` is awaited once per finished
        batch, one at a time, and every index reaches it exactly once. Raises the sink's
        exception if a write fails, `PoolStalled` if nothing could make progress."""
        if self._job is not None:
            raise RuntimeError("a pool runs one job at a time")
        job = _Job(texts, sink, self.clock.now(), on_progress or self.on_progress)
        if job.total == 0:
            return job.report
        self._job = job
        self._changed = asyncio.Event()
        unsubscribe = None
        try:
            if self.registry is not None:
                unsubscribe = self.registry.subscribe(self._on_registry)
                initial = self.registry.list(self.role)
            else:
                initial = [p for p in self._static if self.role is None or self.role in p.info.roles]
                if not initial:
                    raise NoProviderAvailable("the embedding pool was given no provider to pull with")
            for p in initial:
                self._join(p)
            await self._supervise(job)
            job.report.elapsed = self.clock.now() - job.started
            return job.report
        finally:
            if unsubscribe:
                unsubscribe()
            await self._stop_all()
            self._job = None

    def add(self, provider: Provider) -> None:
        """A provider joins the running job (and later ones, for a fixed list)."""
        if self.registry is None and provider not in self._static:
            self._static.append(provider)
        if self._job is not None and (self.role is None or self.role in provider.info.roles):
            self._join(provider)

    def remove(self, provider_id: str) -> None:
        """A provider leaves: its in-flight batches go back to the queue, nothing is lost."""
        self._static = [p for p in self._static if p.id != provider_id]
        self._leave(provider_id)

    @property
    def progress(self) -> Progress | None:
        return self._progress(self._job) if self._job else None

    # -- membership --------------------------------------------------------------------

    def _on_registry(self, change: RegistryChange) -> None:
        if change.kind is ChangeKind.ADDED:
            if self.role is None or self.role in change.provider.info.roles:
                self._join(change.provider)
        elif change.kind is ChangeKind.REMOVED:
            m = self._members.get(change.provider.id)
            if m is not None and m.provider is change.provider:
                self._leave(change.provider.id)
        self._notify()

    def _join(self, provider: Provider) -> None:
        job = self._job
        if job is None:
            return
        existing = self._members.get(provider.id)
        if existing is not None and existing.present:
            if existing.provider is provider:
                return
            self._leave(provider.id)
        if existing is not None:
            self._departed.append(existing)
        sizing = self._sizing.setdefault(provider.id, Sizing(self.initial_batch))
        # Learned by another pool, perhaps with other bounds: within this one's, and never past
        # the provider's own limit.
        sizing.batch_size = sizing.capped(max(self.min_batch, min(self.max_batch, sizing.batch_size)))
        if sizing.spi is not None:
            log.info("pool: %s starts at batch %d, from its measured history", provider.id,
                     sizing.batch_size)
        m = _Member(provider, sizing, self._wanted_lanes(provider))
        self._members[provider.id] = m
        self._spawn_lanes(m, m.lanes)
        self._notify()

    def _wanted_lanes(self, provider: Provider) -> int:
        return max(1, int(self._lanes(provider)))

    def _spawn_lanes(self, m: _Member, n: int) -> None:
        job = self._job
        assert job is not None
        for _ in range(n):
            task = asyncio.get_running_loop().create_task(
                self._lane(m), name=f"pool-lane:{m.id}:{len(m.tasks)}", context=job.context.copy())
            m.tasks[task] = _Phase.IDLE

    def _follow_lanes(self, m: _Member, me: asyncio.Task[Any]) -> bool:
        """Match the member's lane count to `lanes(provider)` as it is now (for a cloud
        provider: the budget's effective limit, which an override, a discovery or a halving
        moves mid-job). Grows at once; shrinks by letting this lane go. False: this lane
        must exit."""
        want = self._wanted_lanes(m.provider)
        live = [t for t in m.tasks if not t.done()]
        m.lanes = want
        if len(live) < want:
            self._spawn_lanes(m, want - len(live))
        elif len(live) > want:
            m.tasks.pop(me, None)
            return False
        return True

    def _leave(self, provider_id: str) -> None:
        m = self._members.get(provider_id)
        if m is None or not m.present:
            return
        m.present = False
        for task, phase in list(m.tasks.items()):
            # A lane in the middle of writing finishes its write (the rows are good); every
            # other lane stops now, and its batch returns to the queue as it unwinds.
            if phase is not _Phase.DELIVER:
                task.cancel()
        self._notify()

    async def _stop_all(self) -> None:
        members = [*self._members.values(), *self._departed]
        tasks = [t for m in members for t in m.tasks]
        for m in members:
            m.present = False
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._members.clear()
        self._departed.clear()

    # -- supervision -------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, until: float | None) -> None:
        timeout = None if until is None else max(0.0, until - self.clock.now())
        await wait_event(self.clock, self._changed, timeout)

    async def _supervise(self, job: _Job) -> None:
        while not job.finished:
            if job.error is not None:
                raise job.error
            until = None
            if self.stall_timeout is not None:
                until = job.last_progress + self.stall_timeout
                if self.clock.now() >= until:
                    now = self.clock.now()
                    raise PoolStalled(job.done, job.total, now - job.last_progress,
                                      {m.id: m.describe(now) for m in self._members.values()})
            await self._wait(until)
        if job.error is not None:
            raise job.error

    # -- one lane ----------------------------------------------------------------------

    async def _lane(self, m: _Member) -> None:
        try:
            await self._pull_loop(m)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A sink failure is already recorded; anything else is a bug that must fail the
            # job loudly rather than leave its items stranded in a dead lane.
            job = self._job
            if job is not None and job.error is None:
                job.error = exc
                self._notify()
            raise

    async def _pull_loop(self, m: _Member) -> None:
        me = asyncio.current_task()
        assert me is not None
        while True:
            if not self._follow_lanes(m, me):
                return
            plan = self._plan(m)
            if plan.action == "exit":
                return
            if plan.action == "wait":
                await self._wait(plan.until)
                continue
            permit = None
            if m.is_cloud and self.admission is not None:
                # Wait for the budget holding no items: the queue stays available to the
                # locals for as long as this wait lasts.
                m.admitting += 1
                try:
                    permit = await self.admission(m.provider)
                except Exception as exc:  # a budget refusal pauses this provider, not the job
                    log.warning("pool: %s could not get a cloud permit (%s: %s); pausing",
                                m.id, type(exc).__name__, exc)
                    m.cooldown_until = self.clock.now() + self.throttle_wait
                    continue
                finally:
                    m.admitting -= 1
                plan = self._plan(m)  # the world moved while we waited
                if plan.action not in ("pull", "dup"):
                    await _release(permit, used=False)
                    continue
            attempt = self._start(m, plan)
            m.tasks[me] = _Phase.EMBED
            try:
                await self._attempt(m, attempt, permit)
            finally:
                if me in m.tasks:
                    m.tasks[me] = _Phase.IDLE

    def _plan(self, m: _Member) -> _Plan:
        job = self._job
        if job is None or job.finished or job.error is not None or not m.present:
            return _EXIT
        now = self.clock.now()
        if not self._eligible(m.provider):
            # Clearance or registry health can lapse or return with no event; look again.
            return _Plan("wait", until=now + self.recheck)
        probe = False
        if m.ejected_until is not None:
            if now < m.ejected_until:
                return _Plan("wait", until=m.ejected_until)
            if m.probing:
                return _WAIT
            probe = True
        if now < m.cooldown_until:
            return _Plan("wait", until=m.cooldown_until)
        if m.is_cloud and self._reserve() and self._local_can_serve():
            # Backup holds the cloud in reserve; a local's clearance can lapse silently, so
            # look again now and then as well as on every change.
            return _Plan("wait", until=now + self.recheck)
        if job.queue:
            size = self._size(m, probe)
            if size == 0:  # the end game leaves what is left to faster lanes
                return _Plan("wait", until=now + self.recheck)
            return _Plan("pull", size=size, probe=probe)
        if probe:
            return _WAIT
        work, next_at = self._straggler(m, now)
        if work is not None:
            return _Plan("dup", work=work)
        return _Plan("wait", until=next_at)

    def _local_can_serve(self) -> bool:
        return any(
            not m.is_cloud and m.present and m.ejected_until is None and self._eligible(m.provider)
            for m in self._members.values()
        )

    def _size(self, m: _Member, probe: bool) -> int:
        """Items this lane pulls now; 0 when it should leave what is left to faster lanes."""
        job = self._job
        assert job is not None
        if probe:
            return self.min_batch
        floor = self._rate_floor(m)
        n = m.sizing.capped(max(m.sizing.batch_size, floor))
        if m.sizing.expected(1) is not None and len(job.queue) < self._pull_capacity():
            share = self._end_share(m, len(job.queue))
            # Where requests are the scarce resource, a lane given any part takes a whole
            # request's worth: splitting the tail would spend requests to save seconds.
            n = min(n, share) if floor == 0 or share == 0 else n
        proven = self._proven(m)
        if n > proven and any(len(a.work.indices) > proven for a in m.attempts):
            # A size the provider never served is tried by one request at a time: if it is
            # over the provider's limit, that costs one refused request, not one per lane.
            # Where requests are the scarce resource the other lanes wait for the answer
            # rather than spend requests on small batches.
            n = 0 if floor else proven
        return min(n, len(job.queue))

    def _proven(self, m: _Member) -> int:
        """The largest batch this provider is known to take: the largest it served, the size
        its history started it at in this pool (earlier jobs grew it there from batches it
        served), or the batch a pool starts at (every provider takes that); never past its
        ceiling."""
        return m.sizing.capped(max(m.sizing.accepted, m.start, self.initial_batch))

    def _end_share(self, m: _Member, queued: int) -> int:
        """End game: this lane's part of what is left, such that every lane finishes the job
        as early as it can, together. Each lane is free when its batch in flight is expected
        to end (now, if idle), then works through batches of its provider's size, each
        costing its latency line (a request's fixed cost plus its cost per item). The
        earliest moment by which all lanes together can have done `queued` items is found by
        bisection; this lane takes what it can do by then (at most one batch now). Shares by
        speed alone would cut the tail into ever smaller batches, each paying the fixed cost
        again. A lane that could do no item by then takes none (0) and waits, unless no lane
        could finish one item sooner."""
        now = self.clock.now()
        reserve_held = self._reserve() and self._local_can_serve()
        lanes: list[tuple[float, float, float, int]] = []  # (free at, fixed s, s/item, batch)
        for o in self._members.values():
            if not (o.present and o.ejected_until is None and now >= o.cooldown_until
                    and self._eligible(o.provider) and not (o.is_cloud and reserve_held)):
                continue
            # A provider not measured yet (new to this pool and to its history) is taken to be
            # as fast as this one: a speed known from an earlier job must not let one provider
            # take the whole queue in its first pull.
            base, per = self._line_of(o if o.sizing.expected(1) is not None else m)
            floor = self._rate_floor(o)
            size = max(1, o.sizing.capped(max(o.sizing.batch_size, floor)))
            busy = [max(now, a.started + a.expected) for a in o.attempts]
            lanes += [(t, base, per, size) for t in busy]
            # A lane waiting for a permit under a known request rate starts when the key's
            # window allows, perhaps seconds away: not counted on. Without one, a permit
            # comes as a request ends (or is granted already and its lane not yet resumed).
            waiting = o.admitting if floor else 0
            lanes += [(now, base, per, size)] * max(0, o.lanes - len(busy) - waiting)
        base, per = self._line_of(m)
        mine = (now, base, per, max(1, m.sizing.capped(max(m.sizing.batch_size, self._rate_floor(m)))))
        if mine not in lanes:
            lanes.append(mine)
        low = now
        high = min(now + t for t in (_time_for(lane, queued) - now for lane in lanes))
        for _ in range(64):
            if high - low < MIN_PER_ITEM / 10:  # finer than one item of the fastest lane
                break
            mid = (low + high) / 2
            if sum(_items_by(lane, mid) for lane in lanes) >= queued:
                high = mid
            else:
                low = mid
        share = _items_by(mine, high)
        if share >= 1:
            return share
        # Nobody's part rounds to an item: the lane that finishes one item first takes it.
        return 1 if _time_for(mine, 1) <= min(_time_for(lane, 1) for lane in lanes) + 1e-9 else 0

    def _line_of(self, m: _Member) -> tuple[float, float]:
        """(fixed seconds, seconds per item) of a measured provider's batches."""
        line, spi = m.sizing.line, m.sizing.spi
        if line.known:
            assert line.base is not None and line.per_item is not None
            return line.base, max(line.per_item, MIN_PER_ITEM)
        return 0.0, max(spi or 0.0, MIN_PER_ITEM)

    def _rate_floor(self, m: _Member) -> int:
        """The smallest batch a cloud provider under a known request rate should send (0: no
        floor). Each lane may start a request only every `lanes / rate` seconds; a batch that
        finishes sooner leaves the lane waiting on the key, so until a batch takes that long,
        every item added to a request is throughput gained at no request cost. Where the
        budget adds lanes until the rate is reached (Little's law on a trusted RPM), any size
        keeps the key busy and the largest carries the most: `max_batch`. Unmeasured yet:
        `max_batch` too (a low-RPM key's first requests are the ones it can least spare)."""
        if not m.is_cloud or self._rate_limit is None:
            return 0
        rate = self._rate_limit(m.provider)
        per_s = getattr(rate, "per_s", None)
        if not per_s or per_s <= 0:
            return 0
        if getattr(rate, "lanes_follow", False):
            return self.max_batch
        every = m.lanes / per_s
        line, spi = m.sizing.line, m.sizing.spi
        if line.known and line.per_item:
            n = (every - (line.base or 0.0)) / line.per_item
        elif spi:
            n = every / spi
        else:
            return self.max_batch
        return max(self.min_batch, min(self.max_batch, math.ceil(n)))

    def _pull_capacity(self) -> int:
        return sum(m.sizing.batch_size * m.lanes for m in self._members.values() if m.present)

    def _expected(self, m: _Member, n: int) -> float:
        expected = m.sizing.expected(n)
        return self.target_latency if expected is None else expected

    def _straggler(self, m: _Member, now: float) -> tuple[_Work | None, float | None]:
        """The batch this idle lane should duplicate now, or when to look again."""
        job = self._job
        assert job is not None
        best: _Work | None = None
        best_started = math.inf
        next_at: float | None = None
        for work in job.live:
            if work.done or work.has_result or work.copies != 1:
                continue
            (a,) = work.attempts
            if a.member is m:
                continue
            # Overdue against its own provider's history (its latency line: a provider that
            # is simply slow, or a sliver paying a request's fixed cost, is not overdue), and
            # this lane expects to finish it sooner than the straggler has already taken.
            mine = m.sizing.expected(len(work.indices)) or 0.0
            at = max(a.started + self.straggler_factor * a.expected, a.started + mine)
            if now >= at:
                if a.started < best_started:
                    best, best_started = work, a.started
            elif next_at is None or at < next_at:
                next_at = at
        return best, next_at

    def _start(self, m: _Member, plan: _Plan) -> _Attempt:
        job = self._job
        assert job is not None
        now = self.clock.now()
        if plan.action == "pull":
            n = min(plan.size, len(job.queue))
            work = _Work([job.queue.popleft() for _ in range(n)])
            job.live.add(work)
        else:
            assert plan.work is not None
            work = plan.work
            job.report.duplicates += 1
            log.info("pool: %s duplicates a straggling batch of %d from %s",
                     m.id, len(work.indices), work.attempts[0].member.id)
        a = _Attempt(work, m, now, self._expected(m, len(work.indices)), plan.probe)
        work.copies += 1
        work.attempts.append(a)
        m.attempts.add(a)
        if plan.probe:
            m.probing = True
        self._notify()
        return a

    def _end(self, a: _Attempt) -> None:
        """An attempt is over (written, failed, superseded or cancelled). When it was the
        work's last copy and the work is not written, its items return to the queue front."""
        job = self._job
        work, m = a.work, a.member
        if a in m.attempts:
            m.attempts.discard(a)
        if a in work.attempts:
            work.attempts.remove(a)
            work.copies -= 1
        if a.probe:
            m.probing = False
        if work.copies == 0 and job is not None:
            job.live.discard(work)
            if not work.done:
                job.queue.extendleft(reversed(work.indices))
        self._notify()

    async def _attempt(self, m: _Member, a: _Attempt, permit: Any) -> None:
        job = self._job
        assert job is not None
        texts = [job.texts[i] for i in a.work.indices]
        a.task = asyncio.ensure_future(m.provider.embed(texts))
        try:
            raw = await a.task
            vectors = _check(m.provider, raw, len(texts))
        except asyncio.CancelledError:
            self._end(a)
            me = asyncio.current_task()
            if permit is not None:
                await _release(permit, used=False, background=True)
            if a.superseded and me is not None and not me.cancelling():
                return  # the other copy was written first; this lane carries on
            raise
        except Exception as exc:
            self._end(a)
            await self._failed(m, a, exc, permit)
            return
        if permit is not None:
            await _release(permit)
        self._learn(m, len(texts), self.clock.now() - a.started)
        if a.probe or m.ejected_until is not None:
            log.info("pool: %s passed its re-probe and pulls again", m.id)
        m.failures, m.ejections, m.ejected_until, m.ejected_at = 0, 0, None, None
        a.work.has_result = True
        try:
            await self._deliver(m, a, vectors)
        finally:
            if not a.work.done:
                a.work.has_result = False
            self._end(a)

    async def _deliver(self, m: _Member, a: _Attempt, vectors: np.ndarray) -> None:
        job = self._job
        assert job is not None
        me = asyncio.current_task()
        async with job.sink_lock:
            work = a.work
            if work.done:
                job.report.discarded += len(work.indices)
                return
            if me is not None and me in m.tasks:
                m.tasks[me] = _Phase.DELIVER
            try:
                await job.sink(list(work.indices), vectors, m.provider)
            except BaseException as exc:
                if not isinstance(exc, asyncio.CancelledError):
                    job.error = exc
                    self._notify()
                raise
            work.done = True
            job.done += len(work.indices)
            job.last_progress = self.clock.now()
            _bump(job.report.per_provider, m.id, len(work.indices))
            _bump(job.report.batches, m.id)
            if job.on_progress is not None:
                try:  # under the lock, so reports arrive in order, one per written batch
                    job.on_progress(self._progress(job))
                except Exception:  # a progress bar must never fail an index job
                    log.exception("pool: progress callback failed")
        # The losing copy, if any, stops now instead of finishing work nobody will write.
        for other in list(work.attempts):
            if other is not a and other.task is not None and not other.task.done():
                other.superseded = True
                other.task.cancel()
        self._notify()

    async def _failed(self, m: _Member, a: _Attempt, exc: Exception, permit: Any) -> None:
        job = self._job
        assert job is not None
        now = self.clock.now()
        if is_throttle(exc):
            retry_after = getattr(exc, "retry_after", None)
            wait = retry_after if retry_after is not None and retry_after > 0 else self.throttle_wait
            m.cooldown_until = max(m.cooldown_until, now + wait)
            _bump(job.report.throttles, m.id)
            log.info("pool: %s rate-limited (%s), pauses %.1fs holding no work",
                     m.id, getattr(exc, "throttle_kind", "?"), wait)
            if permit is not None:
                # A budget-wrapped provider already told its permit; say it once.
                if not getattr(permit, "throttles", 0):
                    await _settle(permit, "throttled", retry_after, getattr(exc, "throttle_kind", None))
                await _release(permit)
            self._notify()
            return
        if permit is not None:
            await _release(permit)
        if is_too_large(exc) and len(a.work.indices) > 1:
            # Its items are back at the queue front already; the next pull is smaller.
            _bump(job.report.too_large, m.id)
            self._refused_as_too_large(m, len(a.work.indices), exc)
            self._notify()
            return
        _bump(job.report.failures, m.id)
        m.failures += 1
        m.sizing.batch_size = max(self.min_batch, m.sizing.batch_size // 2)
        retryable = getattr(exc, "retryable", True)
        if m.ejected_at is not None and a.started <= m.ejected_at and not a.probe:
            # A batch that was already in flight when this episode ejected the provider: the
            # same failure, seen by another lane. The back-off grows once per episode.
            self._notify()
            return
        if a.probe or not retryable or m.failures >= self.max_failures:
            m.ejections += 1
            m.ejected_at = now
            backoff = min(self.eject_max, self.eject_base * 2 ** (m.ejections - 1))
            m.ejected_until = now + backoff
            m.eject_reason = f"{type(exc).__name__}: {exc}"
            _bump(job.report.ejections, m.id)
            log.warning("pool: %s ejected for %.0fs after %d failure(s): %s",
                        m.id, backoff, m.failures, m.eject_reason)
        self._notify()

    def _refused_as_too_large(self, m: _Member, n: int, exc: Exception) -> None:
        """A batch of `n` was refused as too large: the provider has a limit under `n`. Its
        ceiling becomes the largest size it served below `n` or half of `n`, whichever is
        larger (halving again if that is refused too), and its batch size drops to it. A batch
        of `n` another lane had in flight is refused as well; it finds the ceiling already
        there and changes nothing, so a limit is learned once, not once per lane."""
        s = m.sizing
        size = max(1, n // 2, s.accepted if s.accepted < n else 0)
        if s.ceiling is None or size < s.ceiling:
            s.ceiling = size
            log.warning("pool: %s refused a batch of %d as too large (%s); its batches stay at "
                        "or under %d from now on", m.id, n, type(exc).__name__, size)
        s.batch_size = s.capped(s.batch_size)

    def _learn(self, m: _Member, n: int, latency: float) -> None:
        s = m.sizing
        s.accepted = max(s.accepted, n)
        latency = max(0.0, latency)
        s.line.observe(n, latency)
        if s.spi is not None and 2 * n < s.batch_size:
            # An end-game sliver (or a probe) measures the request's fixed cost more than the
            # provider's speed: it informs the line, not the batch size the next job starts at.
            return
        sample = latency / n
        s.spi = sample if s.spi is None else 0.5 * sample + 0.5 * s.spi
        want = self.max_batch if s.spi <= 0 else int(self.target_latency / s.spi)
        line = s.line
        if line.known and line.base and line.per_item:
            # A request's fixed cost is throughput lost on every batch (a remote endpoint's
            # round trip): past the target latency, grow until it is at most FIXED_SHARE of a
            # batch's latency, as long as a batch stays within STRETCH times the target.
            amortised = line.base * (1.0 / FIXED_SHARE - 1.0) / line.per_item
            within = (STRETCH * self.target_latency - line.base) / line.per_item
            want = max(want, int(min(amortised, within)))
        # Grow at most by doubling (one good batch is thin evidence); shrink at once.
        s.batch_size = s.capped(max(self.min_batch, min(self.max_batch, want, 2 * max(s.batch_size, n))))

    def _progress(self, job: _Job) -> Progress:
        now = self.clock.now()
        elapsed = now - job.started
        return Progress(
            done=job.done, total=job.total, elapsed=elapsed,
            rate=job.done / elapsed if elapsed > 0 else 0.0,
            per_provider=dict(job.report.per_provider),
            in_flight=sum(len(w.indices) for w in job.live if not w.done),
            queued=len(job.queue),
            ejected=tuple(sorted(m.id for m in self._members.values()
                                 if m.present and m.ejected_until is not None)),
            cooling=tuple(sorted(m.id for m in self._members.values()
                                 if m.present and now < m.cooldown_until)),
        )


def _items_by(lane: tuple[float, float, float, int], t: float) -> int:
    """Items a lane (free at, fixed seconds, seconds per item, batch size) has done by `t`."""
    free, base, per, size = lane
    left = t - free
    whole = base + per * size
    batches = int(left // whole) if whole > 0 else 0
    left -= batches * whole
    extra = int((left - base) / per + 1e-9) if left > base else 0
    return batches * size + max(0, min(size, extra))


def _time_for(lane: tuple[float, float, float, int], n: int) -> float:
    """When a lane would have done `n` items, batch after batch."""
    free, base, per, size = lane
    return free + math.ceil(n / size) * base + per * n


def _check(provider: Provider, raw: Any, n: int) -> np.ndarray:
    arr = np.asarray(raw, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise MalformedBatch(provider.id, f"expected {n} vectors, got shape {arr.shape}")
    width = provider.info.width
    if width is not None and arr.shape[1] != width:
        raise MalformedBatch(provider.id, f"expected width {width}, got {arr.shape[1]}")
    if not np.isfinite(arr).all():
        raise MalformedBatch(provider.id, "non-finite values")
    return arr


async def _release(permit: Any, *, used: bool = True, background: bool = False) -> None:
    """Give a permit back. One that carried no request (the queue emptied while it was
    awaited, or the call was cancelled) must not count as a round trip: a ~0 s sample would
    drag the budget's Little's-law estimate down."""
    fn = getattr(permit, "release", None)
    kwargs: dict[str, Any] = {}
    if fn is not None and not used:
        try:
            if "record_rtt" in inspect.signature(fn).parameters:
                kwargs["record_rtt"] = False
        except (TypeError, ValueError):
            pass
    await _settle(permit, "release", background=background, **kwargs)


async def _settle(permit: Any, method: str, *args: Any, background: bool = False, **kwargs: Any) -> None:
    """Call a permit method that may be sync or async; never let a permit error fail a job."""
    fn = getattr(permit, method, None)
    if fn is None:
        return
    try:
        r = fn(*args, **kwargs)
        if inspect.isawaitable(r):
            if background:
                asyncio.ensure_future(r)
            else:
                await r
    except Exception:
        log.exception("pool: permit.%s failed", method)
