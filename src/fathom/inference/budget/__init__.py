"""One budget per OpenRouter key, above every cloud provider.

OpenRouter limits by key, not by caller: three providers each capped at eight in flight are
twenty-four requests on one shared budget, so the cap must sit above all of them. The parts,
each small and tested with a fake clock:

- `ceiling`    what the ceiling is: override > Little's law from a trusted RPM > credits > 4;
- `effective`  what the effective limit is now: AIMD with a jittered, Retry-After-honoring cooldown;
- `window`     the RPM window, armed only for a trusted RPM;
- `roundtrip`  the pool's measured round trip, feeding Little's law;
- `line`       who waits and in what order: round-robin across projects;
- `limiter`    `CloudBudget`, which assembles them and hands out `Permit`s;
- `budgeted`   `BudgetedProvider`, the wrapper that makes a cloud provider take permits.

Local providers are exempt: a cloud rate limit slows the cloud, never your GPUs.
"""

from fathom.inference.budget.budgeted import BudgetedProvider
from fathom.inference.budget.ceiling import (
    DEFAULT_PERMITS,
    FREE_TIER_RPM,
    HARD_CAP,
    Ceiling,
    CeilingSource,
    InvalidRpm,
    KeyReport,
    OverrideOutOfRange,
    RateLimit,
    RpmTrust,
    TrustedRpm,
    derive_ceiling,
    trusted_rpm,
)
from fathom.inference.budget.effective import EffectiveLimit
from fathom.inference.budget.fair_queue import WaitingLine
from fathom.inference.budget.limiter import (
    BudgetClosed,
    BudgetState,
    CloudBudget,
    KeyRate,
    LastThrottle,
    Permit,
    bound_permit,
    current_project,
    throttle_of,
)
from fathom.inference.budget.roundtrip import RoundTrip
from fathom.inference.budget.window import RpmWindow

__all__ = [
    "BudgetClosed",
    "BudgetState",
    "BudgetedProvider",
    "Ceiling",
    "CeilingSource",
    "CloudBudget",
    "DEFAULT_PERMITS",
    "EffectiveLimit",
    "FREE_TIER_RPM",
    "HARD_CAP",
    "InvalidRpm",
    "KeyRate",
    "KeyReport",
    "LastThrottle",
    "OverrideOutOfRange",
    "Permit",
    "RateLimit",
    "RoundTrip",
    "RpmTrust",
    "RpmWindow",
    "TrustedRpm",
    "WaitingLine",
    "bound_permit",
    "current_project",
    "derive_ceiling",
    "throttle_of",
    "trusted_rpm",
]
