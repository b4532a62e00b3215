"""Key discovery across the fleet: the sidecar that holds the key reads its limits, the server's
budget learns them, and nothing secret crosses (the key never leaves the sidecar).

Only a sidecar holds the OpenRouter key, so only a sidecar can ask OpenRouter what the key may
do: `GET /api/v1/key` (rate limit, credit cap, free tier) and `GET /api/v1/credits` (balance;
management keys only). This module owns the three pieces of that loop:

- `read_key(client, reason)`, sidecar side: both reads, answered as a `KeyCheck` frame holding
  only the non-secret figures and an outcome — ok, rejected (401), no_credits (402), throttled
  (429, or an in-flight 402) or unreachable. The label (OpenRouter's masked key) is dropped.
- `ThrottleStorm`, sidecar side: says when enough 429s/402s came close together that the key's
  limits deserve a fresh look (at most once per storm).
- `KeyCheckRecord` and `key_report(facts)`, server side: the record the hub keeps per sidecar
  (last outcome and when, for health displays), and the facts as the budget's `KeyReport`.

How far a reported rate limit is trusted, and what a rediscovery may change, is the budget's
business (`inference.budget.ceiling`, `effective`): a report only ever moves the ceiling.
"""

from __future__ import annotations

import logging
import math
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fathom.errors import ConfigError
from fathom.fleet import protocol as p
from fathom.inference.budget.ceiling import KeyReport, RateLimit

log = logging.getLogger("fathom.fleet.keycheck")

# A storm: this many 429s/402s within this many seconds; one re-check per storm at most.
STORM_COUNT = 5
STORM_WINDOW_S = 30.0


class BadKeyCheckInterval(ConfigError):
    def __init__(self, value: object):
        super().__init__(
            f"--key-check-interval must be a positive number of seconds; got {value!r}. "
            f"Give e.g. 300 (the default: every five minutes)."
        )


def check_interval(value: float) -> float:
    """The key-check interval, or `BadKeyCheckInterval` (zero or less would poll OpenRouter
    in a busy loop)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise BadKeyCheckInterval(value)
    return float(value)


def outcome_of(exc: BaseException) -> p.KeyOutcome:
    """What a failed key read says about the key, by the OpenRouter client's error classes."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "Unauthorized" in names:
        return "rejected"
    if "RateLimited" in names or "InFlightBudgetExhausted" in names:
        return "throttled"
    if "InsufficientCredits" in names:
        return "no_credits"
    return "unreachable"


def _figure(v: Any) -> float | None:
    """A reported number as the frame carries it; anything else (absent, not finite, absurd)
    counts as not reported rather than failing the whole check."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and abs(f) <= 1e12 else None


def facts_of(info: Any, credits: Any) -> p.KeyFacts:
    """The non-secret figures of the client's `KeyInfo` and `Credits` (None: not readable)."""
    rl = getattr(info, "rate_limit", None)
    interval = None if rl is None else str(rl.interval)
    return p.KeyFacts(
        rate_limit_requests=None if rl is None else _figure(rl.requests),
        rate_limit_interval=interval if interval and re.fullmatch(p.INTERVAL_PATTERN, interval) else None,
        limit=_figure(info.limit),
        limit_remaining=_figure(info.limit_remaining),
        usage=_figure(info.usage),
        is_free_tier=info.is_free_tier,
        total_credits=None if credits is None else _figure(credits.total_credits),
        total_usage=None if credits is None else _figure(credits.total_usage),
    )


async def read_key(client: Any, reason: p.KeyCheckReason) -> p.KeyCheck:
    """Read the key's limits and credits through `client` (an `OpenRouterClient`); never
    raises for an answer OpenRouter gives or fails to give."""
    try:
        info = await client.key_info()
        credits = await client.credits()
        facts = facts_of(info, credits)
    except Exception as exc:  # every failure is an outcome, not a crash
        outcome = outcome_of(exc)
        # The client scrubs the key from its messages; the class name is all a log needs.
        log.warning("key check (%s): %s (%s)", reason, outcome, type(exc).__name__)
        return p.KeyCheck(outcome=outcome, reason=reason)
    return p.KeyCheck(outcome="ok", reason=reason, facts=facts)


class ThrottleStorm:
    """Counts throttles (429s and 402s); `note(now)` is True once per storm, when the
    `count`-th throttle within `window_s` arrives."""

    def __init__(self, count: int = STORM_COUNT, window_s: float = STORM_WINDOW_S):
        self.count, self.window_s = count, window_s
        self._times: deque[float] = deque()

    def note(self, now: float) -> bool:
        self._times.append(now)
        while self._times and self._times[0] < now - self.window_s:
            self._times.popleft()
        if len(self._times) >= self.count:
            self._times.clear()  # the next storm needs `count` fresh throttles
            return True
        return False


@dataclass(frozen=True)
class KeyCheckRecord:
    """The last key check one sidecar reported, as the hub keeps it. No secret in any field."""

    sidecar: str
    outcome: str
    reason: str
    at: datetime
    facts: p.KeyFacts | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "at": self.at.isoformat(),
            "facts": None if self.facts is None else self.facts.model_dump(mode="json"),
        }


def key_report(facts: p.KeyFacts) -> KeyReport:
    """The facts as the budget's discovery input."""
    rate = None
    if facts.rate_limit_requests is not None:
        rate = RateLimit(facts.rate_limit_requests, facts.rate_limit_interval or "")
    return KeyReport(
        limit=facts.limit,
        limit_remaining=facts.limit_remaining,
        usage=facts.usage,
        is_free_tier=bool(facts.is_free_tier),
        rate_limit=rate,
        total_credits=facts.total_credits,
        total_usage=facts.total_usage,
    )


def feed_budget(budget: Any) -> Callable[[KeyCheckRecord], None]:
    """A hub listener that hands every successful key check to `budget.discover`. A failed
    check (rejected, no credits, throttled, unreachable) leaves what the budget knows as it
    is: an outage of the key-info endpoint is no reason to forget the key's limits."""

    def listener(record: KeyCheckRecord) -> None:
        if record.outcome == "ok" and record.facts is not None:
            budget.discover(key_report(record.facts))

    return listener
