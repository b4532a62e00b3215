"""Whether each cloud route really serves: learned from what happened to it, never assumed.

A cloud route is only as good as the key behind it and the path to OpenRouter, and neither can
be seen from here until something is tried. This module keeps one record per target and one
entry point, `CloudHealth.note(target, outcome)`, fed by:

- the outcome of every real call through a cloud route (target: the provider id), and
- a key check made by the sidecar that holds the key (target: the sidecar's name), which
  speaks for every cloud route of that sidecar. A key push is noted as `Outcome.RESET`: what was
  known of the old key says nothing about the new one.

A route's state is the latest note about it or about its sidecar, in the order they were made
(a sequence, not a clock). It is `unchecked` until the first note and `serving` only after a
successful call or an ok key check; 401, 402, 429 and an unreachable OpenRouter are distinct
states, so the operator sees which of them to fix.

It refuses to route: the router and the registry decide who may serve. This is what the
dashboard, `fathom fleet` and `fathom_provider_up{health=...}` report.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from fathom.logsafe import scrub


class Outcome(StrEnum):
    """What a call or a key check found (the words a key-check report uses too)."""

    OK = "ok"
    REJECTED = "rejected"  # 401: the key is invalid, disabled or revoked
    NO_CREDITS = "no_credits"  # 402, not the transient in-flight budget: out of credits
    THROTTLED = "throttled"  # 429 or the in-flight 402: wait
    UNREACHABLE = "unreachable"  # no answer from OpenRouter (transport, timeout, 5xx)
    RESET = "reset"  # a new key was pushed: nothing is known of it yet


class CloudState(StrEnum):
    UNCHECKED = "unchecked"
    SERVING = "serving"
    KEY_REJECTED = "key_rejected"
    NO_CREDITS = "no_credits"
    THROTTLED = "throttled"
    UNREACHABLE = "unreachable"


STATE_OF = {
    Outcome.OK: CloudState.SERVING,
    Outcome.REJECTED: CloudState.KEY_REJECTED,
    Outcome.NO_CREDITS: CloudState.NO_CREDITS,
    Outcome.THROTTLED: CloudState.THROTTLED,
    Outcome.UNREACHABLE: CloudState.UNREACHABLE,
    Outcome.RESET: CloudState.UNCHECKED,
}

# What to do about each state, for the operator reading it.
ADVICE = {
    CloudState.UNCHECKED: "no call has gone through this route since the key was pushed",
    CloudState.SERVING: "the last call or key check succeeded",
    CloudState.KEY_REJECTED: "OpenRouter rejected the key (401); push a valid key with `fathom key push`",
    CloudState.NO_CREDITS: "the key has no credits left (402); add credits or raise the key's limit",
    CloudState.THROTTLED: "OpenRouter is throttling this key (429); the budget slows down and retries",
    CloudState.UNREACHABLE: "OpenRouter could not be reached from the host; check its network and base URL",
}

# Error class names (the in-process client's, or a sidecar's error code, which is the class
# name on the sidecar) and the outcome each one means for the route's health.
_OUTCOME_OF_ERROR = {
    "Unauthorized": Outcome.REJECTED,
    "InsufficientCredits": Outcome.NO_CREDITS,
    "RateLimited": Outcome.THROTTLED,
    "InFlightBudgetExhausted": Outcome.THROTTLED,
    "UpstreamError": Outcome.UNREACHABLE,
}


def outcome_of(exc: BaseException) -> Outcome | None:
    """The health outcome a failed cloud call means, or None when the failure says nothing
    about the route (a malformed request, the sidecar itself offline)."""
    names = [c.__name__ for c in type(exc).__mro__]
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        names.insert(0, code)
    return next((_OUTCOME_OF_ERROR[n] for n in names if n in _OUTCOME_OF_ERROR), None)


@dataclass(frozen=True)
class Record:
    state: CloudState = CloudState.UNCHECKED
    at: str | None = None  # when it was noted (UTC, ISO 8601)
    detail: str = ""  # what was seen (scrubbed), e.g. the error's first words
    source: str | None = None  # the provider id or sidecar the note was about
    seq: int = -1

    @property
    def serving(self) -> bool:
        return self.state is CloudState.SERVING

    @property
    def advice(self) -> str:
        return ADVICE[self.state]

    def to_dict(self) -> dict[str, str | None]:
        return {
            "state": self.state.value,
            "at": self.at,
            "detail": self.detail or None,
            "advice": self.advice,
            "source": self.source,
        }


class CloudHealth:
    """The records, one per target. Thread-safe: calls are noted from the event loop, reads
    come from a metrics scrape in a worker thread."""

    def __init__(self, now: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.now = now
        self._records: dict[str, Record] = {}
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def note(self, target: str, outcome: Outcome | str, detail: str = "") -> Record:
        """Record what a call through `target` (a provider id) or a key check on `target` (a
        sidecar name) found. The one way in."""
        record = Record(
            STATE_OF[Outcome(outcome)],
            self.now().isoformat(timespec="seconds"),
            scrub(" ".join(str(detail).split()))[:300],
            target,
        )
        with self._lock:
            record = Record(record.state, record.at, record.detail, target, next(self._seq))
            self._records[target] = record
        return record

    def note_failure(self, target: str, exc: BaseException) -> Record | None:
        """Note a failed call; a failure that says nothing about the route is not noted."""
        outcome = outcome_of(exc)
        return None if outcome is None else self.note(target, outcome, str(exc))

    def of(self, provider_id: str, sidecar: str | None = None) -> Record:
        """A route's state: the latest note about it or about the sidecar holding its key."""
        with self._lock:
            found = [
                r
                for r in (self._records.get(provider_id), self._records.get(sidecar) if sidecar else None)
                if r is not None
            ]
        return max(found, key=lambda r: r.seq) if found else Record()
