"""What the effective limit is now: additive increase, multiplicative decrease under the ceiling.

The effective limit is `min(ceiling, cap)`. The cap is absent until the account first pushes
back; then a 429, or a 402 "in-flight budget exhausted", halves the limit (floor 1) and starts a
jittered cooldown that honors `Retry-After`: cooldown = max(Retry-After, base backoff) × a
factor drawn from [1, 1 + jitter), so the wait is never shorter than the server asked and many
keys' clients do not come back in step. No permit is granted during a cooldown, so nothing is
ever retried immediately. Each clean window after it (a stretch of `clean_window_s` with
traffic and without throttling) adds one permit, until the cap reaches the ceiling and is
dropped.

Invariants this part keeps:
- A rediscovery only moves the ceiling. The cap survives it, so a new discovery never undoes a
  halving; a lower ceiling clamps the limit at once (it is a min).
- One halving per congestion episode: a throttle answered to a request that started before
  the last halving extends the cooldown but does not halve again. Otherwise sixteen requests
  in flight when the account says "slow down" would take the limit from 16 to 1 in one burst
  (TCP reduces once per round trip for the same reason).

It refuses to know who waits, what a request is, or what the ceiling is made of.
"""

from __future__ import annotations

import math
import random


class EffectiveLimit:
    def __init__(
        self,
        ceiling: int,
        *,
        clean_window_s: float = 10.0,
        base_backoff_s: float = 1.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
    ):
        if clean_window_s <= 0 or base_backoff_s <= 0 or jitter < 0:
            raise ValueError("clean_window_s and base_backoff_s must be > 0, jitter >= 0")
        self.ceiling = max(1, ceiling)
        self.clean_window_s = clean_window_s
        self.base_backoff_s = base_backoff_s
        self.jitter = jitter
        self.rng = rng or random.Random()
        self.cap: int | None = None
        self.cooldown_until = -math.inf
        self.halvings = 0
        self._last_halving_at = -math.inf
        self._window_start: float | None = None
        self._window_traffic = False

    @property
    def value(self) -> int:
        return self.ceiling if self.cap is None else max(1, min(self.ceiling, self.cap))

    def set_ceiling(self, ceiling: int) -> None:
        # The cap is left alone: `value` is a min, so a lower ceiling clamps at once and a
        # higher one is reached only by clean windows if the account has pushed back.
        self.ceiling = max(1, ceiling)

    def in_cooldown(self, now: float) -> bool:
        return now < self.cooldown_until

    def cooldown_remaining(self, now: float) -> float:
        return max(0.0, self.cooldown_until - now)

    def throttled(self, now: float, retry_after: float | None, started_at: float) -> bool:
        """Record a throttle; return True if it halved the limit (first of its episode)."""
        wait = max(retry_after or 0.0, self.base_backoff_s)
        wait *= 1.0 + self.rng.random() * self.jitter
        self.cooldown_until = max(self.cooldown_until, now + wait)
        self._window_start = None  # the clean window restarts after the cooldown
        if started_at <= self._last_halving_at:
            return False
        self.cap = max(1, self.value // 2)
        self._last_halving_at = now
        self.halvings += 1
        return True

    def note_traffic(self) -> None:
        self._window_traffic = True

    def tick(self, now: float, busy: bool) -> None:
        """Advance clean windows up to `now`. `busy`: a permit is held at this moment.

        The budget calls this before every grant and release, so `busy` at a window boundary
        equals `busy` now: nothing changed in between.
        """
        if self.cap is None or now < self.cooldown_until:
            return
        if self._window_start is None:
            # A cap exists only after a throttle, so the cooldown end is a real time.
            self._window_start = self.cooldown_until
            self._window_traffic = busy
        while now >= self._window_start + self.clean_window_s:
            if self._window_traffic:
                self.cap += 1
            self._window_start += self.clean_window_s
            self._window_traffic = busy
            if self.cap >= self.ceiling:
                self.cap = None
                self._window_start = None
                return

    def next_change_at(self, now: float) -> float | None:
        """When the limit may next rise without any request finishing (None: never)."""
        if self.cap is None:
            return None
        if now < self.cooldown_until:
            return self.cooldown_until
        start = self._window_start if self._window_start is not None else now
        return start + self.clean_window_s
