"""The pool's measured round trip: an exponential moving average of request durations.

A sample is the time from a permit being granted (the request starting) to its release (the
response), never the time spent waiting for the permit: Little's law needs the service time,
and counting the queue would inflate the ceiling exactly when the account is saturated. It
owns nothing but the average; who feeds it, and when a sample is skipped (a throttled or
cancelled request), is the budget's decision.
"""

from __future__ import annotations

import math


class RoundTrip:
    """EMA of round-trip seconds; `estimate` is `assumed_s` until the first sample."""

    def __init__(self, *, alpha: float = 0.2, assumed_s: float = 1.0):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self.assumed_s = assumed_s
        self._ema: float | None = None
        self.samples = 0

    @property
    def estimate(self) -> float:
        return self.assumed_s if self._ema is None else self._ema

    @property
    def measured(self) -> bool:
        return self._ema is not None

    def record(self, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            return
        self._ema = seconds if self._ema is None else (self.alpha * seconds + (1.0 - self.alpha) * self._ema)
        self.samples += 1
