"""What the ceiling is: the most permits the key's budget may ever hand out at once.

This module owns the discovery input (what `GET /api/v1/key` and optionally
`GET /api/v1/credits` returned), the rule deciding whether an RPM is worth trusting, and the
ordered derivation of the ceiling:

1. a manual override, 1..256 (anything else is `OverrideOutOfRange`, never clamped silently);
2. Little's law from a trusted RPM: ceil(RPM / 60 × RTT), RTT being the pool's own measured
   round trip, so the ceiling follows latency as it drifts;
3. a size from the credit balance, for a funded account whose key reports a degenerate rate
   limit or none (the modern form): one permit per whole dollar of balance, at least 4,
   at most 64 (beyond that, configure an RPM or an override);
4. 4 when nothing could be discovered.

Every result is capped at 256, so a typo cannot saturate the account. It refuses to know
anything about time, waiting or throttling: those belong to the other parts of the budget.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fathom.errors import ConfigError

HARD_CAP = 256
OVERRIDE_RANGE = (1, HARD_CAP)
DEFAULT_PERMITS = 4
# OpenRouter documents 20 requests per minute for a free-tier key's `:free` models
# (openrouter.ai/docs, "Free Variant" / "Limits").
FREE_TIER_RPM = 20.0
# A funded account is never documented to get less than a free one, so a reported figure under
# the free tier's is the vestigial value that once collapsed the whole cloud fan-out to one
# request a minute: not trusted, and no window gate is armed for it.
PLAUSIBLE_FUNDED_RPM = FREE_TIER_RPM
CREDIT_PERMITS_PER_DOLLAR = 1.0
CREDIT_PERMITS_MIN = DEFAULT_PERMITS
CREDIT_PERMITS_MAX = 64


class OverrideOutOfRange(ConfigError):
    """A manual ceiling override outside 1..256."""

    def __init__(self, value: object):
        self.value = value
        self.low, self.high = OVERRIDE_RANGE
        super().__init__(
            f"the cloud budget override must be a whole number of permits from {self.low} to "
            f"{self.high}; got {value!r}. Set an override in that range, or remove it to let "
            f"the budget size itself from the key's limits."
        )


class InvalidRpm(ConfigError):
    """A configured requests-per-minute that is not a positive number."""

    def __init__(self, value: object):
        self.value = value
        super().__init__(
            f"a configured rate limit must be a positive number of requests per minute; got "
            f"{value!r}. Set the key's real RPM, or leave it unset to discover it."
        )


def validate_override(value: object) -> int | None:
    """Return the override as an int, None for no override; refuse anything out of range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise OverrideOutOfRange(value)
    if not OVERRIDE_RANGE[0] <= value <= OVERRIDE_RANGE[1]:
        raise OverrideOutOfRange(value)
    return value


_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def interval_seconds(interval: str | float | int) -> float | None:
    """'10s' -> 10.0, '1m' -> 60.0; None when unreadable (an unreadable limit is no limit)."""
    if isinstance(interval, (int, float)) and not isinstance(interval, bool):
        return float(interval) if interval > 0 else None
    m = _INTERVAL.match(str(interval))
    if not m:
        return None
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    return seconds if seconds > 0 else None


@dataclass(frozen=True)
class RateLimit:
    """The deprecated `rate_limit {requests, interval}` of `GET /api/v1/key`."""

    requests: float
    interval: str

    @property
    def rpm(self) -> float | None:
        seconds = interval_seconds(self.interval)
        if seconds is None or self.requests <= 0:  # -1 has meant "unlimited"
            return None
        return self.requests * 60.0 / seconds


@dataclass(frozen=True)
class KeyReport:
    """What discovery learnt about the key; adapted from the OpenRouter client's answer.

    `label` is OpenRouter's masked rendering of the key: it is kept out of repr and out of the
    budget's state all the same.
    """

    label: str | None = field(default=None, repr=False)
    limit: float | None = None  # the key's credit cap, None when unlimited
    limit_remaining: float | None = None
    usage: float | None = None
    is_free_tier: bool = False
    rate_limit: RateLimit | None = None
    total_credits: float | None = None  # from /credits, when the key may read it
    total_usage: float | None = None

    @classmethod
    def from_json(cls, key: Mapping[str, Any], credits: Mapping[str, Any] | None = None) -> KeyReport:
        """Build from the JSON bodies (with or without their `data` envelope)."""
        key = key.get("data", key) if isinstance(key.get("data"), Mapping) else key
        rl = key.get("rate_limit")
        rate = None
        if isinstance(rl, Mapping) and rl.get("requests") is not None:
            rate = RateLimit(float(rl["requests"]), str(rl.get("interval", "")))
        total_credits = total_usage = None
        if credits is not None:
            c = credits.get("data", credits) if isinstance(credits.get("data"), Mapping) else credits
            total_credits, total_usage = c.get("total_credits"), c.get("total_usage")
        return cls(
            label=key.get("label"),
            limit=key.get("limit"),
            limit_remaining=key.get("limit_remaining"),
            usage=key.get("usage"),
            is_free_tier=bool(key.get("is_free_tier", False)),
            rate_limit=rate,
            total_credits=total_credits,
            total_usage=total_usage,
        )

    @classmethod
    def adapt(cls, obj: Any) -> KeyReport:
        """A KeyReport from a KeyReport, the JSON body, or any object with the same
        attribute names (such as the OpenRouter client's own key record)."""
        if isinstance(obj, KeyReport):
            return obj
        if isinstance(obj, Mapping):
            return cls.from_json(obj)
        rl = getattr(obj, "rate_limit", None)
        rate = None
        if isinstance(rl, Mapping) and rl.get("requests") is not None:
            rate = RateLimit(float(rl["requests"]), str(rl.get("interval", "")))
        elif rl is not None and getattr(rl, "requests", None) is not None:
            rate = RateLimit(float(rl.requests), str(getattr(rl, "interval", "")))
        return cls(
            label=getattr(obj, "label", None),
            limit=getattr(obj, "limit", None),
            limit_remaining=getattr(obj, "limit_remaining", None),
            usage=getattr(obj, "usage", None),
            is_free_tier=bool(getattr(obj, "is_free_tier", False)),
            rate_limit=rate,
            total_credits=getattr(obj, "total_credits", None),
            total_usage=getattr(obj, "total_usage", None),
        )

    @property
    def balance(self) -> float | None:
        """Dollars this key can still spend: the smaller of account balance and key cap."""
        known = []
        if self.total_credits is not None:
            known.append(self.total_credits - (self.total_usage or 0.0))
        if self.limit_remaining is not None:
            known.append(self.limit_remaining)
        return min(known) if known else None

    @property
    def funded(self) -> bool:
        if self.is_free_tier:
            return False
        balance = self.balance
        return balance is not None and balance > 0


class RpmTrust(StrEnum):
    CONFIGURED = "configured"
    FREE_TIER = "free-tier-documented"
    REPORTED = "reported"


@dataclass(frozen=True)
class TrustedRpm:
    rpm: float
    trust: RpmTrust


def trusted_rpm(configured: float | None, report: KeyReport | None) -> TrustedRpm | None:
    """The RPM worth trusting, or None: explicit configuration first, then the free tier's
    documented figure, then a reported figure that is plausible for a funded account."""
    if configured is not None:
        if (
            isinstance(configured, bool)
            or not isinstance(configured, (int, float))
            or not (configured > 0 and math.isfinite(configured))
        ):
            raise InvalidRpm(configured)
        return TrustedRpm(float(configured), RpmTrust.CONFIGURED)
    if report is None:
        return None
    if report.is_free_tier:
        return TrustedRpm(FREE_TIER_RPM, RpmTrust.FREE_TIER)
    reported = report.rate_limit.rpm if report.rate_limit else None
    if reported is not None and reported >= PLAUSIBLE_FUNDED_RPM:
        return TrustedRpm(reported, RpmTrust.REPORTED)
    return None


class CeilingSource(StrEnum):
    OVERRIDE = "override"
    LITTLES_LAW = "littles-law"
    CREDITS = "credits"
    DEFAULT = "default"


@dataclass(frozen=True)
class Ceiling:
    value: int
    source: CeilingSource


def littles_law(rpm: float, rtt_s: float) -> int:
    """Concurrency that sustains `rpm` when each request takes `rtt_s`: L = λ × W."""
    return max(1, min(HARD_CAP, math.ceil(rpm / 60.0 * rtt_s - 1e-9)))


def credit_permits(balance: float) -> int:
    return max(
        CREDIT_PERMITS_MIN,
        min(CREDIT_PERMITS_MAX, math.floor(balance * CREDIT_PERMITS_PER_DOLLAR)),
    )


def derive_ceiling(
    *,
    override: int | None,
    rpm: TrustedRpm | None,
    rtt_s: float,
    report: KeyReport | None,
) -> Ceiling:
    """The ceiling and where it comes from, in the documented order."""
    if override is not None:
        return Ceiling(min(HARD_CAP, override), CeilingSource.OVERRIDE)
    if rpm is not None:
        return Ceiling(littles_law(rpm.rpm, rtt_s), CeilingSource.LITTLES_LAW)
    if report is not None and report.funded:
        return Ceiling(min(HARD_CAP, credit_permits(report.balance or 0.0)), CeilingSource.CREDITS)
    return Ceiling(DEFAULT_PERMITS, CeilingSource.DEFAULT)


def origin(ceiling: Ceiling, rpm: TrustedRpm | None, report: KeyReport | None) -> str:
    """Where the ceiling came from, in words an operator reads in `fathom budget`:
    "override", "discovered: 120 req/min", "configured: 600 req/min", "free tier: 20 req/min",
    "credits: $12.00 balance" or "default"."""
    if ceiling.source is CeilingSource.LITTLES_LAW and rpm is not None:
        said = {
            RpmTrust.REPORTED: "discovered",
            RpmTrust.CONFIGURED: "configured",
            RpmTrust.FREE_TIER: "free tier",
        }[rpm.trust]
        return f"{said}: {rpm.rpm:g} req/min"
    if ceiling.source is CeilingSource.CREDITS and report is not None and report.balance is not None:
        return f"credits: ${report.balance:.2f} balance"
    return ceiling.source.value
