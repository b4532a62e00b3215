"""The emulator's request limits: an exact sliding-window RPM and a concurrency ceiling.

`RpmWindow` keeps the times of accepted requests. A request at time t is accepted only if
fewer than `rpm` accepted requests lie in the closed window [t - window, t]; so in every
closed window of that length there are never more than `rpm` accepted requests (the last
one accepted in any window saw all the others in its own look-back). And it is not
conservative: a request is refused only when the window really is full. Rejections are not
recorded, so a client hammering a full window does not push its own reopening back.

Time comes from an injected clock, so exactness is proven with a fake clock, not by sleeping.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable


class RpmWindow:
    def __init__(self, rpm: int, *, window: float = 60.0, clock: Callable[[], float] = time.monotonic):
        if rpm < 1:
            raise ValueError("rpm must be at least 1")
        self.rpm = rpm
        self.window = window
        self.clock = clock
        self._accepted: deque[float] = deque()

    def _prune(self, now: float) -> None:
        while self._accepted and self._accepted[0] < now - self.window:
            self._accepted.popleft()

    def try_acquire(self) -> tuple[bool, float]:
        """(accepted, seconds until a slot opens; 0 when accepted)."""
        now = self.clock()
        self._prune(now)
        if len(self._accepted) < self.rpm:
            self._accepted.append(now)
            return True, 0.0
        # The oldest accepted request leaves the closed window just after oldest + window.
        return False, max(0.0, self._accepted[0] + self.window - now)

    def in_window(self) -> int:
        self._prune(self.clock())
        return len(self._accepted)


class ConcurrencyGate:
    """Counts requests in flight and remembers the peak; refuses above `limit` (None: no
    limit, just counting)."""

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self.in_flight = 0
        self.peak = 0

    def try_enter(self) -> bool:
        if self.limit is not None and self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        return True

    def leave(self) -> None:
        self.in_flight -= 1

    def take_peak(self) -> int:
        """The peak since the last call (or the start), then start a new period from the
        requests in flight now: a test reads the peak of one step at a time."""
        peak, self.peak = self.peak, self.in_flight
        return peak


def retry_after_header(seconds: float) -> str:
    """Retry-After is whole delay-seconds. The window is closed at its old end, so a request
    exactly `seconds` later would still see the oldest one: name the next whole second."""
    return str(max(1, math.floor(seconds) + 1))
