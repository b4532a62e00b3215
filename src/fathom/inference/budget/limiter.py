"""The key's budget: the one limiter every cloud request passes, whoever sends it.

`CloudBudget` assembles the small parts — the ceiling (`ceiling.py`), the effective limit
(`effective.py`), the RPM window (`window.py`), the round-trip measurement (`roundtrip.py`) and
the waiting line (`line.py`) — and makes callers wait. A permit is granted when all hold:

- no cooldown is running (a throttle was answered less than its jittered cooldown ago);
- fewer permits are held than the effective limit;
- the RPM window, when armed, admits one more start.

Waiters are served round-robin across projects, FIFO within one. A permit measures its own
round trip from grant to release, so time spent queueing never inflates Little's law. Time,
randomness and sleeping are injected (`clock`, `rng`, `sleep`), so every rule is tested with a
fake clock. One budget per OpenRouter key, used from one event loop.

It refuses to retry anything: a throttled request is reported and re-raised, and what happens
to its batch is the pool's business. It never sees the key itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any

from fathom.errors import FathomError, ProviderError
from fathom.inference.budget.ceiling import (
    DEFAULT_PERMITS,
    HARD_CAP,
    Ceiling,
    CeilingSource,
    KeyReport,
    TrustedRpm,
    derive_ceiling,
    origin,
    trusted_rpm,
    validate_override,
)
from fathom.inference.budget.effective import EffectiveLimit
from fathom.inference.budget.fair_queue import WaitingLine
from fathom.inference.budget.roundtrip import RoundTrip
from fathom.inference.budget.window import RpmWindow

# The project a request is made for; fairness is round-robin over its values. The indexer and
# the MCP tools set it around a job; anything else counts as "default".
current_project: ContextVar[str] = ContextVar("fathom_current_project", default="default")

THROTTLE_KINDS = ("429", "402")
# Fallback for errors that do not carry `throttle_kind`: the OpenRouter client's class names.
_THROTTLE_CLASS_NAMES = {"RateLimited": "429", "InFlightBudgetExhausted": "402"}


def throttle_of(exc: BaseException) -> tuple[str, float | None] | None:
    """(kind, retry_after) if `exc` says the account pushed back, else None.

    Duck-typed so the budget never imports a client: a `ProviderError` carrying
    `throttle_kind` in ("429", "402") and `retry_after`, or one named RateLimited /
    InFlightBudgetExhausted.
    """
    if not isinstance(exc, ProviderError):
        return None
    kind = getattr(exc, "throttle_kind", None)
    if kind is None:
        kind = next(
            (
                _THROTTLE_CLASS_NAMES[c.__name__]
                for c in type(exc).__mro__
                if c.__name__ in _THROTTLE_CLASS_NAMES
            ),
            None,
        )
    kind = None if kind is None else str(kind)
    if kind not in THROTTLE_KINDS:
        return None
    retry_after = getattr(exc, "retry_after", None)
    try:
        retry_after = None if retry_after is None else float(retry_after)
    except (TypeError, ValueError):
        retry_after = None
    if retry_after is not None and not (math.isfinite(retry_after) and retry_after >= 0):
        retry_after = None
    return kind, retry_after


class BudgetClosed(FathomError):
    """The budget was closed (its key was removed); no permit will be granted."""

    def __init__(self) -> None:
        super().__init__(
            "the cloud budget for this key is closed, so no cloud request can be sent; push "
            "a key again to reopen the cloud route."
        )


@dataclass(frozen=True)
class LastThrottle:
    kind: str  # "429" or "402"
    retry_after_s: float | None
    at: float  # budget clock seconds
    ago_s: float
    halved: bool


@dataclass(frozen=True)
class BudgetState:
    """What the budget is doing, for status output, the dashboard and metrics (JSON-safe)."""

    ceiling_source: str
    ceiling: int
    effective_limit: int
    in_flight: int
    peak_in_flight: int
    window_armed: bool
    window_count: int
    window_allowance: int | None
    window_s: float
    trusted_rpm: float | None
    rpm_trust: str | None
    cooldown_remaining_s: float
    last_throttle: LastThrottle | None
    rtt_s: float
    rtt_measured: bool
    waiting: dict[str, int] = field(default_factory=dict)
    granted_total: int = 0
    granted_by_project: dict[str, int] = field(default_factory=dict)
    throttled_total: dict[str, int] = field(default_factory=dict)
    halvings: int = 0
    ceiling_origin: str = ""  # in words: "discovered: 120 req/min", "override", "default", ...

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KeyRate:
    """The key's trusted request rate, for sizing requests (`Pool(rate_limit=)`).
    `lanes_follow`: the ceiling is Little's law on this rate, so the budget grants as many
    permits as it takes to reach it, whatever each request carries."""

    per_s: float
    lanes_follow: bool


# The permit the calling code holds for the request it is about to make (see `Permit.bound`).
_bound: ContextVar[Permit | None] = ContextVar("fathom_bound_permit", default=None)


class Permit:
    """The right to have one cloud request in flight on the key.

    Report a throttle with `throttled()`; `release()` ends it (idempotent) and records the
    round trip since the grant, unless the request was throttled or abandoned.
    """

    __slots__ = ("_budget", "project", "granted_at", "released", "throttles", "in_use")

    def __init__(self, budget: CloudBudget, project: str, granted_at: float):
        self._budget = budget
        self.project = project
        self.granted_at = granted_at
        self.released = False
        self.throttles = 0
        self.in_use = False  # a BudgetedProvider call is running under it

    @property
    def budget(self) -> CloudBudget:
        return self._budget

    def throttled(self, retry_after: float | None = None, kind: str | None = "429") -> None:
        kind = "429" if kind is None else str(kind)
        if kind not in THROTTLE_KINDS:
            raise ValueError(f"throttle kind must be one of {THROTTLE_KINDS}, got {kind!r}")
        self.throttles += 1
        self._budget._throttled(self, kind, retry_after)

    def report(self, exc: BaseException) -> bool:
        """Report `exc` if it is a throttle; True if it was."""
        found = throttle_of(exc)
        if found is None:
            return False
        self.throttled(found[1], kind=found[0])
        return True

    def release(self, *, record_rtt: bool = True) -> None:
        if self.released:
            return
        self.released = True
        self._budget._release(self, record_rtt=record_rtt and self.throttles == 0)

    @contextlib.contextmanager
    def bound(self) -> Iterator[Permit]:
        """Within this block, a `BudgetedProvider` called from this task uses this permit
        instead of taking another (the pool takes a permit before pulling a batch)."""
        token = _bound.set(self)
        try:
            yield self
        finally:
            _bound.reset(token)

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Permit {self.project!r} {state}>"


def bound_permit(budget: CloudBudget) -> Permit | None:
    """The live, idle permit of `budget` bound in this context, if any.

    Child tasks inherit the binding (so a call wrapped in `asyncio.wait_for` still finds the
    pool's permit instead of deadlocking on a second one), but a permit carries one request at
    a time: while one call runs under it, a concurrent sibling must take its own.
    """
    p = _bound.get()
    if p is None or p.released or p.in_use or p.budget is not budget:
        return None
    return p


class _PermitRequest:
    """`async with budget.permit(project) as permit:` — acquire, bind, report, release."""

    def __init__(self, budget: CloudBudget, project: str | None):
        self._budget, self._project = budget, project
        self._permit: Permit | None = None
        self._token: Any = None

    async def __aenter__(self) -> Permit:
        self._permit = await self._budget.acquire(self._project)
        self._token = _bound.set(self._permit)
        return self._permit

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        permit = self._permit
        assert permit is not None
        with contextlib.suppress(ValueError):  # reset from another context: nothing to undo
            _bound.reset(self._token)
        if exc is not None:
            permit.report(exc)
        permit.release(record_rtt=exc is None or not isinstance(exc, asyncio.CancelledError))


Sleep = Callable[[float], Awaitable[Any]]
_TIMER_SLACK_S = 1e-6


class CloudBudget:
    """One per OpenRouter key, above every cloud provider that uses the key.

    `override` (1..256) and `rpm` (explicitly configured, hence trusted) come from the
    operator; `discover()` feeds what the key reports. Until the first round trip is measured,
    Little's law assumes `assumed_rtt_s`. `window_s` is the RPM window (60 s; scaled down only
    in tests and benchmarks), `clean_window_s` the stretch without throttling that earns one
    permit back, `base_backoff_s` the shortest cooldown, `jitter` its spread.
    """

    def __init__(
        self,
        *,
        override: int | None = None,
        rpm: float | None = None,
        report: KeyReport | Mapping[str, Any] | None = None,
        window_s: float = 60.0,
        window_margin_s: float | None = None,
        clean_window_s: float = 10.0,
        base_backoff_s: float = 1.0,
        jitter: float = 0.5,
        rtt_alpha: float = 0.2,
        assumed_rtt_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ):
        self._clock = clock
        self._sleep = sleep
        self._override = validate_override(override)
        self._configured_rpm = rpm
        self._report: KeyReport | None = None
        self._trusted: TrustedRpm | None = trusted_rpm(rpm, None)
        self._rtt = RoundTrip(alpha=rtt_alpha, assumed_s=assumed_rtt_s)
        self._window = RpmWindow(window_s=window_s, margin_s=window_margin_s)
        self._ceiling = Ceiling(DEFAULT_PERMITS, CeilingSource.DEFAULT)  # until _rederive
        self._effective = EffectiveLimit(
            1,
            clean_window_s=clean_window_s,
            base_backoff_s=base_backoff_s,
            jitter=jitter,
            rng=rng or random.Random(),
        )
        self._line: WaitingLine[asyncio.Future[Permit]] = WaitingLine()
        self._in_flight = 0
        self._peak = 0
        self._granted = 0
        self._granted_by_project: dict[str, int] = {}
        self._throttle_counts: dict[str, int] = {k: 0 for k in THROTTLE_KINDS}
        self._last_throttle: tuple[str, float | None, float, bool] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._timer_at = math.inf
        self._closed = False
        if report is not None:
            self._report = KeyReport.adapt(report)
        self._rederive()

    # -- configuration and discovery -------------------------------------------------------

    def discover(self, report: KeyReport | Mapping[str, Any] | Any) -> None:
        """Feed what `GET /api/v1/key` (and optionally `/credits`) returned.

        Only the ceiling moves; the effective limit keeps any halving (see `effective.py`).
        """
        self._report = KeyReport.adapt(report)
        self._rederive()
        self._dispatch()

    def set_override(self, value: int | None) -> None:
        self._override = validate_override(value)
        self._rederive()
        self._dispatch()

    def set_rpm(self, rpm: float | None) -> None:
        """Configure the key's RPM explicitly (trusted), or None to go back to discovery.
        A bad value is refused (`InvalidRpm`) and changes nothing."""
        trusted_rpm(rpm, None)
        self._configured_rpm = rpm
        self._rederive()
        self._dispatch()

    def _rederive(self) -> None:
        self._trusted = trusted_rpm(self._configured_rpm, self._report)
        self._ceiling = derive_ceiling(
            override=self._override,
            rpm=self._trusted,
            rtt_s=self._rtt.estimate,
            report=self._report,
        )
        self._effective.set_ceiling(self._ceiling.value)
        # The window gates a trusted RPM whatever sizes the ceiling (an override included).
        self._window.arm(self._trusted.rpm if self._trusted else None)

    # -- reading ---------------------------------------------------------------------------

    @property
    def ceiling(self) -> Ceiling:
        return self._ceiling

    def key_rate(self) -> KeyRate | None:
        """The trusted RPM (configured, free tier, or discovered from the key) as requests a
        second, or None when none is trusted. Lanes follow it when the ceiling is Little's law
        short of the hard cap; an override, or a cap Little's law hit, bounds them instead."""
        if self._trusted is None:
            return None
        follows = self._ceiling.source is CeilingSource.LITTLES_LAW and self._ceiling.value < HARD_CAP
        return KeyRate(self._trusted.rpm / 60.0, follows)

    @property
    def effective_limit(self) -> int:
        self._effective.tick(self._clock(), busy=self._in_flight > 0)
        return self._effective.value

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def state(self) -> BudgetState:
        now = self._clock()
        self._effective.tick(now, busy=self._in_flight > 0)
        last = None
        if self._last_throttle is not None:
            kind, retry_after, at, halved = self._last_throttle
            last = LastThrottle(kind, retry_after, at, max(0.0, now - at), halved)
        return BudgetState(
            ceiling_source=self._ceiling.source.value,
            ceiling=self._ceiling.value,
            effective_limit=self._effective.value,
            in_flight=self._in_flight,
            peak_in_flight=self._peak,
            window_armed=self._window.armed,
            window_count=self._window.count(now),
            window_allowance=self._window.allowance,
            window_s=self._window.window_s,
            trusted_rpm=self._trusted.rpm if self._trusted else None,
            rpm_trust=self._trusted.trust.value if self._trusted else None,
            cooldown_remaining_s=self._effective.cooldown_remaining(now),
            last_throttle=last,
            rtt_s=self._rtt.estimate,
            rtt_measured=self._rtt.measured,
            waiting=self._line.waiting(),
            granted_total=self._granted,
            granted_by_project=dict(self._granted_by_project),
            throttled_total=dict(self._throttle_counts),
            halvings=self._effective.halvings,
            ceiling_origin=origin(self._ceiling, self._trusted, self._report),
        )

    # -- permits ---------------------------------------------------------------------------

    def permit(self, project: str | None = None) -> _PermitRequest:
        """`async with budget.permit(project) as permit:`; project defaults to
        `current_project.get()`. Inside the block the permit is bound to this task."""
        return _PermitRequest(self, project)

    async def acquire(self, project: str | None = None) -> Permit:
        """Wait for a permit; the caller must `release()` it. Cancellation-safe: a cancelled
        waiter leaves the line, and a permit granted in the same instant is given back."""
        if self._closed:
            raise BudgetClosed()
        project = project if project is not None else current_project.get()
        fut: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        self._line.join(project, fut)
        self._dispatch()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                fut.result().release(record_rtt=False)
            else:
                self._line.leave(project, fut)
            raise

    async def admission(self, provider: Any = None) -> Permit:
        """The pool's hook: a permit for the current project, taken BEFORE a batch is pulled,
        and bound in the caller's context so the `BudgetedProvider` it then calls (even from
        a child task) uses it rather than taking a second one. The caller releases it; once
        released, the binding is inert."""
        permit = await self.acquire()
        _bound.set(permit)
        return permit

    def _can_grant(self, now: float) -> bool:
        return (
            not self._effective.in_cooldown(now)
            and self._in_flight < self._effective.value
            and self._window.admits(now)
        )

    def _dispatch(self) -> None:
        now = self._clock()
        self._effective.tick(now, busy=self._in_flight > 0)
        while self._line and self._can_grant(now):
            taken = self._line.next()
            assert taken is not None
            project, fut = taken
            if fut.done():  # cancelled; its task will find it gone from the line
                continue
            permit = Permit(self, project, now)
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            self._granted += 1
            self._granted_by_project[project] = self._granted_by_project.get(project, 0) + 1
            self._window.record(now)
            self._effective.note_traffic()
            fut.set_result(permit)
        if self._line:
            wake = self._next_wake(now)
            if wake is not None:
                self._arm_timer(now, wake)

    def _next_wake(self, now: float) -> float | None:
        """When a blocked waiter could next be served without any release."""
        if self._effective.in_cooldown(now):
            return self._effective.cooldown_until
        candidates = []
        free_at = self._window.next_free_at(now)
        if free_at is not None:
            candidates.append(free_at)
        if self._in_flight >= self._effective.value:
            change = self._effective.next_change_at(now)
            if change is not None:
                candidates.append(change)
        return min(candidates) if candidates else None

    def _arm_timer(self, now: float, at: float) -> None:
        if self._timer is not None and not self._timer.done():
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        # A hair past the boundary, so float rounding in `now + delay` never wakes us an ulp
        # early into a condition that is still false (and a busy loop of zero-length timers).
        delay = max(0.0, at - now) + _TIMER_SLACK_S
        self._timer = asyncio.get_running_loop().create_task(self._wake(delay))

    async def _wake(self, delay: float) -> None:
        try:
            await self._sleep(delay)
        except asyncio.CancelledError:
            return
        self._timer, self._timer_at = None, math.inf
        self._dispatch()

    def _release(self, permit: Permit, *, record_rtt: bool) -> None:
        now = self._clock()
        self._effective.tick(now, busy=True)
        self._in_flight -= 1
        if record_rtt:
            self._rtt.record(now - permit.granted_at)
            self._rederive()
        if not self._closed:
            self._dispatch()

    def _throttled(self, permit: Permit, kind: str, retry_after: float | None) -> None:
        now = self._clock()
        self._effective.tick(now, busy=True)
        halved = self._effective.throttled(now, retry_after, permit.granted_at)
        self._throttle_counts[kind] += 1
        self._last_throttle = (kind, retry_after, now, halved)

    async def aclose(self) -> None:
        """Refuse new permits and fail every waiter with `BudgetClosed`."""
        self._closed = True
        while self._line:
            taken = self._line.next()
            if taken and not taken[1].done():
                taken[1].set_exception(BudgetClosed())
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    def __repr__(self) -> str:
        return (
            f"<CloudBudget {self._ceiling.source.value} ceiling={self._ceiling.value} "
            f"effective={self._effective.value} in_flight={self._in_flight}>"
        )
