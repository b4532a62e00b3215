"""The pool's knobs in one frozen object, checked once when it is made.

`PoolOptions` holds the numbers that shape a job (batch bounds, the target latency, the
failure and straggler rules, the stall timeout); the collaborators a pool is handed (the
registry, the router's `eligible`, the budget's `admission`, the job's sink) are not options
and stay arguments of `Pool`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class PoolOptions:
    target_latency: float = 1.0  # seconds a batch should take; the batch size follows it
    initial_batch: int = 4  # a provider's first batch, without a history
    min_batch: int = 1
    max_batch: int = 256
    max_failures: int = 3  # consecutive failed batches that eject a provider
    eject_base: float = 5.0  # first ejection's back-off; doubles per failure episode
    eject_max: float = 120.0
    straggler_factor: float = 3.0  # a batch this many times overdue is duplicated
    throttle_wait: float = 1.0  # pause after a 429/402 that names no Retry-After
    stall_timeout: float | None = 600.0  # no batch written for this long fails the job
    recheck: float = 1.0  # how often a waiting lane looks again when no event will come

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.initial_batch <= self.max_batch:
            raise ValueError("need 1 <= min_batch <= initial_batch <= max_batch")

    @classmethod
    def of(cls, options: PoolOptions | None = None, **knobs: Any) -> PoolOptions:
        """`options` (or the defaults) with the named knobs changed: how `Pool(max_batch=…)`
        keeps working. An unknown name is refused with the names there are."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(knobs) - known)
        if unknown:
            raise TypeError(
                f"unknown pool option(s) {', '.join(unknown)}; the options are {', '.join(sorted(known))}"
            )
        return replace(options or cls(), **knobs)
