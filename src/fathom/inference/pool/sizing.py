"""How large a provider's batches are: what the pool learned of its speed, and the rules that
turn it into a batch size.

`LatencyLine` and `Sizing` are what is measured and kept (across jobs in a pool's `history`,
across restarts by the service). `Sizer` applies the rules: growth toward the target latency,
the ceiling a too-large refusal sets, the floor a known request rate sets, the largest size a
provider is known to take. It refuses to decide who pulls or when (`plan`), and never sees the
queue.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fathom.inference.pool.options import PoolOptions
from fathom.inference.provider import Provider

log = logging.getLogger(__name__)

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
