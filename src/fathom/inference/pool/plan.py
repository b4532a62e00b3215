"""What a lane does next, and everything that decision reads: the pool's knobs, the job's
state, and what is learned of each provider's speed.

- The knobs: `PoolOptions` holds the numbers that shape a job (batch bounds, the target
  latency, the failure and straggler rules, the stall timeout) in one frozen object, checked
  once when it is made. The collaborators a pool is handed (the registry, the router's
  `eligible`, the budget's `admission`, the job's sink) are not options and stay arguments of
  `Pool`.
- How large a provider's batches are: `LatencyLine` and `Sizing` are what is measured and
  kept (across jobs in a pool's `history`, across restarts by the service). `Sizer` applies
  the rules that turn them into a batch size: growth toward the target latency, the ceiling a
  too-large refusal sets, the floor a known request rate sets, the largest size a provider is
  known to take. It never sees the queue.
- The job's state: the queue of items, the work in flight and its attempts, each provider's
  standing (`Member`), what is reported, and the one signal every part waits on. Plain state
  with the few operations that keep it consistent (`PoolJob.take` and `PoolJob.requeue` move
  items between the queue and the work in flight); it decides nothing.
- The plan: `Planner.next` says exit, wait (until when), pull (how many), or duplicate a
  straggler. It reads the job state and decides; it changes nothing. The end game
  (`end_share`) plans every lane to finish as early as it can, together; the straggler rule
  picks a batch that has been in flight much longer than its provider's own history predicts.

It refuses to act: nothing here awaits a provider, takes a permit or writes a row (`lanes`
does), and whether a provider may serve at all comes from outside (`eligible`, the router's).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any

import numpy as np

from fathom.clock import Clock, wait_event
from fathom.inference.provider import Provider

log = logging.getLogger(__name__)

# -- the knobs -------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolOptions:
    target_latency: float = 1.0  # seconds a batch should take; the batch size follows it
    initial_batch: int = 4  # a provider's first batch, without a history
    min_batch: int = 1
    max_batch: int = 256
    max_failures: int = 3  # consecutive failed batches that eject a provider
    eject_base: float = 5.0  # first ejection's back-off; doubles per failure episode
    eject_max: float = 120.0
    straggler_factor: float = 3.0  # a batch this many times overdue is duplicated
    throttle_wait: float = 1.0  # pause after a 429/402 that names no Retry-After
    stall_timeout: float | None = 600.0  # no batch written for this long fails the job
    recheck: float = 1.0  # how often a waiting lane looks again when no event will come

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.initial_batch <= self.max_batch:
            raise ValueError("need 1 <= min_batch <= initial_batch <= max_batch")

    @classmethod
    def of(cls, options: PoolOptions | None = None, **knobs: Any) -> PoolOptions:
        """`options` (or the defaults) with the named knobs changed: how `Pool(max_batch=…)`
        keeps working. An unknown name is refused with the names there are."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(knobs) - known)
        if unknown:
            raise TypeError(
                f"unknown pool option(s) {', '.join(unknown)}; the options are {', '.join(sorted(known))}"
            )
        return replace(options or cls(), **knobs)


# -- how large a batch: what is learned of a provider's speed, and the rules -----------

FIXED_SHARE = 0.1  # a request's fixed cost the batch size aims to keep under (`Sizer.learn`)
STRETCH = 2.0  # ... at batches of no more than this many target latencies
# The least cost an item is taken to have: a provider measured at ~0 s an item (all fixed
# cost) still gets an even part of the end game, not whatever one bisection step rounds to.
MIN_PER_ITEM = 1e-6


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
    # The largest batch it has served in this process (`Sizer.proven`).
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


class Sizer:
    """The batch-size rules of one pool, over its options and the key's known request rate."""

    def __init__(self, options: PoolOptions, rate_limit: Callable[[Provider], Any] | None = None):
        self.options = options
        self._rate_limit = rate_limit

    def start(self, history: dict[str, Sizing], provider_id: str) -> Sizing:
        """The provider's sizing as this pool starts it: from `history` when an earlier pool
        measured it (shared, updated in place), else a fresh one at `initial_batch`."""
        o = self.options
        sizing = history.setdefault(provider_id, Sizing(o.initial_batch))
        # Learned by another pool, perhaps with other bounds: within this one's, and never past
        # the provider's own limit.
        sizing.batch_size = sizing.capped(max(o.min_batch, min(o.max_batch, sizing.batch_size)))
        if sizing.spi is not None:
            log.info("pool: %s starts at batch %d, from its measured history", provider_id, sizing.batch_size)
        return sizing

    def expected(self, s: Sizing, n: int) -> float:
        expected = s.expected(n)
        return self.options.target_latency if expected is None else expected

    def proven(self, s: Sizing, start: int) -> int:
        """The largest batch this provider is known to take: the largest it served, the size
        its history started it at in this pool (`start`: earlier jobs grew it there from
        batches it served), or the batch a pool starts at (every provider takes that); never
        past its ceiling."""
        return s.capped(max(s.accepted, start, self.options.initial_batch))

    @staticmethod
    def line_of(s: Sizing) -> tuple[float, float]:
        """(fixed seconds, seconds per item) of a measured provider's batches."""
        line, spi = s.line, s.spi
        if line.known:
            assert line.base is not None and line.per_item is not None
            return line.base, max(line.per_item, MIN_PER_ITEM)
        return 0.0, max(spi or 0.0, MIN_PER_ITEM)

    def rate_floor(self, provider: Provider, lanes: int, s: Sizing) -> int:
        """The smallest batch a cloud provider under a known request rate should send (0: no
        floor). Each lane may start a request only every `lanes / rate` seconds; a batch that
        finishes sooner leaves the lane waiting on the key, so until a batch takes that long,
        every item added to a request is throughput gained at no request cost. Where the
        budget adds lanes until the rate is reached (Little's law on a trusted RPM), any size
        keeps the key busy and the largest carries the most: `max_batch`. Unmeasured yet:
        `max_batch` too (a low-RPM key's first requests are the ones it can least spare)."""
        o = self.options
        if not provider.info.is_cloud or self._rate_limit is None:
            return 0
        rate = self._rate_limit(provider)
        per_s: float | None = getattr(rate, "per_s", None)  # requests per second, when known
        if not per_s or per_s <= 0:
            return 0
        if getattr(rate, "lanes_follow", False):
            return o.max_batch
        every = lanes / per_s
        line, spi = s.line, s.spi
        if line.known and line.per_item:
            n = (every - (line.base or 0.0)) / line.per_item
        elif spi:
            n = every / spi
        else:
            return o.max_batch
        return max(o.min_batch, min(o.max_batch, math.ceil(n)))

    def refused_as_too_large(self, s: Sizing, provider_id: str, n: int, exc: Exception) -> None:
        """A batch of `n` was refused as too large: the provider has a limit under `n`. Its
        ceiling becomes the largest size it served below `n` or half of `n`, whichever is
        larger (halving again if that is refused too), and its batch size drops to it. A batch
        of `n` another lane had in flight is refused as well; it finds the ceiling already
        there and changes nothing, so a limit is learned once, not once per lane."""
        size = max(1, n // 2, s.accepted if s.accepted < n else 0)
        if s.ceiling is None or size < s.ceiling:
            s.ceiling = size
            log.warning(
                "pool: %s refused a batch of %d as too large (%s); its batches stay at "
                "or under %d from now on",
                provider_id,
                n,
                type(exc).__name__,
                size,
            )
        s.batch_size = s.capped(s.batch_size)

    def failed(self, s: Sizing) -> None:
        """A batch failed (not a throttle, not too large): the next one is half the size."""
        s.batch_size = max(self.options.min_batch, s.batch_size // 2)

    def learn(self, s: Sizing, n: int, latency: float) -> None:
        o = self.options
        s.accepted = max(s.accepted, n)
        latency = max(0.0, latency)
        s.line.observe(n, latency)
        if s.spi is not None and 2 * n < s.batch_size:
            # An end-game sliver (or a probe) measures the request's fixed cost more than the
            # provider's speed: it informs the line, not the batch size the next job starts at.
            return
        sample = latency / n
        s.spi = sample if s.spi is None else 0.5 * sample + 0.5 * s.spi
        want = o.max_batch if s.spi <= 0 else int(o.target_latency / s.spi)
        line = s.line
        if line.known and line.base and line.per_item:
            # A request's fixed cost is throughput lost on every batch (a remote endpoint's
            # round trip): past the target latency, grow until it is at most FIXED_SHARE of a
            # batch's latency, as long as a batch stays within STRETCH times the target.
            amortised = line.base * (1.0 / FIXED_SHARE - 1.0) / line.per_item
            within = (STRETCH * o.target_latency - line.base) / line.per_item
            want = max(want, int(min(amortised, within)))
        # Grow at most by doubling (one good batch is thin evidence); shrink at once.
        s.batch_size = s.capped(max(o.min_batch, min(o.max_batch, want, 2 * max(s.batch_size, n))))


# -- the job's state -------------------------------------------------------------------

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


# -- what a lane does next -------------------------------------------------------------

Lane = tuple[float, float, float, int]  # (free at, fixed seconds, seconds per item, batch size)


@dataclass(frozen=True)
class Step:
    action: str  # "exit" | "wait" | "pull" | "dup"
    until: float | None = None  # wait: time to look again (None: on the next change)
    size: int = 0
    probe: bool = False
    work: Work | None = None


EXIT = Step("exit")
WAIT = Step("wait")


class Planner:
    def __init__(
        self,
        state: PoolState,
        options: PoolOptions,
        sizer: Sizer,
        eligible: Callable[[Provider], bool],
        reserve: Callable[[], bool],
    ):
        self.state, self.options, self.sizer = state, options, sizer
        self.eligible, self.reserve = eligible, reserve

    def next(self, m: Member) -> Step:
        job = self.state.job
        if job is None or job.finished or job.error is not None or not m.present:
            return EXIT
        now = self.state.clock.now()
        recheck = self.options.recheck
        if not self.eligible(m.provider):
            # Clearance or registry health can lapse or return with no event; look again.
            return Step("wait", until=now + recheck)
        probe = False
        if m.ejected_until is not None:
            if now < m.ejected_until:
                return Step("wait", until=m.ejected_until)
            if m.probing:
                return WAIT
            probe = True
        if now < m.cooldown_until:
            return Step("wait", until=m.cooldown_until)
        if m.is_cloud and self.reserve() and self.local_can_serve():
            # Backup holds the cloud in reserve; a local's clearance can lapse silently, so
            # look again now and then as well as on every change.
            return Step("wait", until=now + recheck)
        if job.queue:
            size = self.size(m, probe)
            if size == 0:  # the end game leaves what is left to faster lanes
                return Step("wait", until=now + recheck)
            return Step("pull", size=size, probe=probe)
        if probe:
            return WAIT
        work, next_at = self.straggler(m, now)
        if work is not None:
            return Step("dup", work=work)
        return Step("wait", until=next_at)

    def local_can_serve(self) -> bool:
        return any(
            not m.is_cloud and m.present and m.ejected_until is None and self.eligible(m.provider)
            for m in self.state.members.values()
        )

    def _floor(self, m: Member) -> int:
        return self.sizer.rate_floor(m.provider, m.lanes, m.sizing)

    def size(self, m: Member, probe: bool) -> int:
        """Items this lane pulls now; 0 when it should leave what is left to faster lanes."""
        job = self.state.job
        assert job is not None
        if probe:
            return self.options.min_batch
        floor = self._floor(m)
        n = m.sizing.capped(max(m.sizing.batch_size, floor))
        if m.sizing.expected(1) is not None and len(job.queue) < self._pull_capacity():
            share = self.end_share(m, len(job.queue))
            # Where requests are the scarce resource, a lane given any part takes a whole
            # request's worth: splitting the tail would spend requests to save seconds.
            n = min(n, share) if floor == 0 or share == 0 else n
        proven = self.sizer.proven(m.sizing, m.start)
        if n > proven and any(len(a.work.indices) > proven for a in m.attempts):
            # A size the provider never served is tried by one request at a time: if it is
            # over the provider's limit, that costs one refused request, not one per lane.
            # Where requests are the scarce resource the other lanes wait for the answer
            # rather than spend requests on small batches.
            n = 0 if floor else proven
        return min(n, len(job.queue))

    def _pull_capacity(self) -> int:
        return sum(m.sizing.batch_size * m.lanes for m in self.state.members.values() if m.present)

    def _lanes_now(self, m: Member, now: float) -> list[Lane]:
        """Every lane that can take part in the end game, as (free at, fixed s, s/item, batch)."""
        reserve_held = self.reserve() and self.local_can_serve()
        lanes: list[Lane] = []
        for o in self.state.members.values():
            if not (
                o.present
                and o.ejected_until is None
                and now >= o.cooldown_until
                and self.eligible(o.provider)
                and not (o.is_cloud and reserve_held)
            ):
                continue
            # A provider not measured yet (new to this pool and to its history) is taken to be
            # as fast as this one: a speed known from an earlier job must not let one provider
            # take the whole queue in its first pull.
            base, per = self.sizer.line_of((o if o.sizing.expected(1) is not None else m).sizing)
            floor = self._floor(o)
            size = max(1, o.sizing.capped(max(o.sizing.batch_size, floor)))
            busy = [max(now, a.started + a.expected) for a in o.attempts]
            lanes += [(t, base, per, size) for t in busy]
            # A lane waiting for a permit under a known request rate starts when the key's
            # window allows, perhaps seconds away: not counted on. Without one, a permit
            # comes as a request ends (or is granted already and its lane not yet resumed).
            waiting = o.admitting if floor else 0
            lanes += [(now, base, per, size)] * max(0, o.lanes - len(busy) - waiting)
        return lanes

    def end_share(self, m: Member, queued: int) -> int:
        """End game: this lane's part of what is left, such that every lane finishes the job
        as early as it can, together. Each lane is free when its batch in flight is expected
        to end (now, if idle), then works through batches of its provider's size, each
        costing its latency line (a request's fixed cost plus its cost per item). The
        earliest moment by which all lanes together can have done `queued` items is found by
        bisection; this lane takes what it can do by then (at most one batch now). Shares by
        speed alone would cut the tail into ever smaller batches, each paying the fixed cost
        again. A lane that could do no item by then takes none (0) and waits, unless no lane
        could finish one item sooner."""
        now = self.state.clock.now()
        lanes = self._lanes_now(m, now)
        base, per = self.sizer.line_of(m.sizing)
        mine = (now, base, per, max(1, m.sizing.capped(max(m.sizing.batch_size, self._floor(m)))))
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

    def straggler(self, m: Member, now: float) -> tuple[Work | None, float | None]:
        """The batch this idle lane should duplicate now, or when to look again."""
        job = self.state.job
        assert job is not None
        best: Work | None = None
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
            at = max(a.started + self.options.straggler_factor * a.expected, a.started + mine)
            if now >= at:
                if a.started < best_started:
                    best, best_started = work, a.started
            elif next_at is None or at < next_at:
                next_at = at
        return best, next_at


def _items_by(lane: Lane, t: float) -> int:
    """Items a lane (free at, fixed seconds, seconds per item, batch size) has done by `t`."""
    free, base, per, size = lane
    left = t - free
    whole = base + per * size
    batches = int(left // whole) if whole > 0 else 0
    left -= batches * whole
    extra = int((left - base) / per + 1e-9) if left > base else 0
    return batches * size + max(0, min(size, extra))


def _time_for(lane: Lane, n: int) -> float:
    """When a lane would have done `n` items, batch after batch."""
    free, base, per, size = lane
    return free + math.ceil(n / size) * base + per * n
