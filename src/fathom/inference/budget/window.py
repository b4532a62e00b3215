"""The RPM window: a trusted requests-per-minute enforced directly over request starts.

Little's law turns an RPM into concurrency through a latency estimate; while that estimate is
briefly too high the concurrency would overrun the account. This second gate counts request
starts in a sliding window and refuses the start that would exceed the RPM. It is armed only
for a trusted RPM: armed on a vestigial "1 per minute" it once collapsed the whole cloud fan-out
to one request a minute, so an untrusted or absent RPM arms nothing.

`window_s` is 60 s in production; tests and the emulator scale it down together with the RPM
(the allowance is `rpm × window_s / 60` starts per window). A start is held a `margin_s` longer
than the window (default: one second a minute, at least 0.1 s): the account counts arrivals,
not our starts, and a request that reaches it later than the one it replaces (a slower
connection, a busy event loop) must not land inside the same window. Measured against the
emulator on a loaded machine, a 33 ms margin let 1–2 % of requests through into a full window
(each one a halving and a cooldown); 100 ms let none. It owns only the start times.
"""

from __future__ import annotations

import math
from collections import deque

MIN_MARGIN_S = 0.1  # arrival jitter does not shrink with a scaled-down window


class RpmWindow:
    def __init__(self, *, window_s: float = 60.0, margin_s: float | None = None):
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.window_s = window_s
        self.margin_s = max(MIN_MARGIN_S, window_s / 60.0) if margin_s is None else margin_s
        if self.margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {margin_s!r}")
        self.rpm: float | None = None
        # Each start is kept as the instant it leaves the window, so the expiry test and the
        # wake-up time are the very same float (no start lingers an ulp past its minute).
        self._expiries: deque[float] = deque()

    @property
    def armed(self) -> bool:
        return self.rpm is not None

    @property
    def allowance(self) -> int | None:
        """Starts allowed in any window, None when unarmed."""
        if self.rpm is None:
            return None
        return max(1, math.floor(self.rpm * self.window_s / 60.0 + 1e-9))

    def arm(self, rpm: float | None) -> None:
        self.rpm = rpm

    def _expire(self, now: float) -> None:
        while self._expiries and self._expiries[0] <= now:
            self._expiries.popleft()

    def count(self, now: float) -> int:
        """Requests started in the last window (kept even while unarmed, for the status)."""
        self._expire(now)
        return len(self._expiries)

    def admits(self, now: float) -> bool:
        allowance = self.allowance
        return allowance is None or self.count(now) < allowance

    def record(self, now: float) -> None:
        self._expiries.append(now + self.window_s + self.margin_s)

    def next_free_at(self, now: float) -> float | None:
        """When the next start will be admitted, None if it is admitted now."""
        if self.admits(now):
            return None
        # The oldest start that must fall out of the window for one more to fit.
        excess = len(self._expiries) - (self.allowance or 0)
        return self._expiries[excess]
