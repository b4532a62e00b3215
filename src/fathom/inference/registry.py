"""The live providers, and whether each may serve right now.

The registry owns one list: every provider that can be reached at this moment (the server's
in-process model, each connected sidecar's routes, the cloud routes), keyed by provider id, and
per provider a health flag ("ejected" after repeated failures, "quarantined" by the gate)
valid until a given time. Whoever changes it (the fleet hub when a sidecar connects or drops,
the gate when it quarantines a drifting route) does so here, and listeners hear of it at once:
the pool starts a worker for a sidecar that joins mid-job and returns the in-flight batch of
one that drops.

It refuses to decide who *should* serve a role (that is the router, reading the policy table)
and never calls a provider.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from fathom.clock import Clock, SystemClock
from fathom.inference.provider import Kind, Provider
from fathom.roles import Role

log = logging.getLogger(__name__)


class ChangeKind(StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    HEALTH = "health"  # ejected, quarantined, restored, or another reason to look again


@dataclass(frozen=True)
class RegistryChange:
    kind: ChangeKind
    provider: Provider


Listener = Callable[[RegistryChange], None]


class HealthState(StrEnum):
    OK = "ok"
    EJECTED = "ejected"  # failed repeatedly; tried again after `until`
    QUARANTINED = "quarantined"  # the gate withdrew it (e.g. drift); not a failure count


@dataclass(frozen=True)
class Health:
    state: HealthState = HealthState.OK
    until: float = -math.inf  # the flag holds while now < until; math.inf: until restored
    reason: str = ""
    failures: int = 0  # consecutive failures since the last success

    def active(self, now: float) -> bool:
        return self.state is not HealthState.OK and now < self.until


class ProviderRegistry:
    def __init__(self, *, clock: Clock | None = None):
        self.clock = clock or SystemClock()
        self._providers: dict[str, Provider] = {}
        self._health: dict[str, Health] = {}
        self._listeners: list[Listener] = []

    # -- membership --------------------------------------------------------------------

    def add(self, provider: Provider) -> None:
        """Register a live provider. An id already present is replaced (a sidecar that
        reconnected): listeners hear it removed, then added, so nothing holds the old object."""
        old = self._providers.get(provider.id)
        if old is provider:
            return
        if old is not None:
            del self._providers[provider.id]
            self._emit(RegistryChange(ChangeKind.REMOVED, old))
        self._providers[provider.id] = provider
        self._emit(RegistryChange(ChangeKind.ADDED, provider))

    def remove(self, provider_id: str) -> Provider | None:
        provider = self._providers.pop(provider_id, None)
        if provider is not None:
            self._emit(RegistryChange(ChangeKind.REMOVED, provider))
        return provider

    def get(self, provider_id: str) -> Provider | None:
        return self._providers.get(provider_id)

    def __contains__(self, provider_id: object) -> bool:
        return provider_id in self._providers

    def __iter__(self) -> Iterator[Provider]:
        return iter(list(self._providers.values()))

    def __len__(self) -> int:
        return len(self._providers)

    def list(
        self, role: Role | None = None, *, kind: Kind | None = None, available_only: bool = False
    ) -> list[Provider]:
        """Live providers serving `role` (all if None), in id order so every reader sees the
        same order."""
        now = self.clock.now()
        out = [
            p
            for p in self._providers.values()
            if (role is None or role in p.info.roles)
            and (kind is None or p.info.kind is kind)
            and (not available_only or self.available(p.id, now))
        ]
        return sorted(out, key=lambda p: p.id)

    # -- listeners ---------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` on every change; returns the function that unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            try:
                self._listeners.remove(listener)
            except ValueError:
                pass

        return unsubscribe

    def touch(self, provider_id: str) -> None:
        """Tell listeners to look at this provider again (e.g. the gate just cleared it)."""
        p = self._providers.get(provider_id)
        if p is not None:
            self._emit(RegistryChange(ChangeKind.HEALTH, p))

    def _emit(self, change: RegistryChange) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:  # one broken listener must not hide the change from the rest
                log.exception("registry listener failed on %s %s", change.kind, change.provider.id)

    # -- health ------------------------------------------------------------------------

    def health(self, provider_id: str) -> Health:
        return self._health.get(provider_id, Health())

    def available(self, provider_id: str, now: float | None = None) -> bool:
        """Present and not under an ejection or quarantine that still holds."""
        if provider_id not in self._providers:
            return False
        now = self.clock.now() if now is None else now
        return not self.health(provider_id).active(now)

    def eject(self, provider_id: str, until: float, reason: str) -> None:
        h = self.health(provider_id)
        self._set(provider_id, Health(HealthState.EJECTED, until, reason, h.failures))

    def quarantine(self, provider_id: str, reason: str, until: float = math.inf) -> None:
        h = self.health(provider_id)
        self._set(provider_id, Health(HealthState.QUARANTINED, until, reason, h.failures))

    def restore(self, provider_id: str) -> None:
        self._set(provider_id, Health())

    def record_failure(self, provider_id: str, reason: str, *, eject_after: int, eject_for: float) -> Health:
        """Count a consecutive failure; at `eject_after` of them the provider is ejected for
        `eject_for` seconds (the count keeps growing, so a re-tried provider that fails again
        is ejected again at once)."""
        h = self.health(provider_id)
        failures = h.failures + 1
        if failures >= eject_after and h.state is not HealthState.QUARANTINED:
            new = Health(HealthState.EJECTED, self.clock.now() + eject_for, reason, failures)
        else:
            new = Health(h.state, h.until, h.reason, failures)
        self._set(provider_id, new)
        return new

    def record_success(self, provider_id: str) -> None:
        h = self.health(provider_id)
        if h.failures or h.state is HealthState.EJECTED:
            keep = h if h.state is HealthState.QUARANTINED else Health()
            self._set(provider_id, Health(keep.state, keep.until, keep.reason, 0))

    def _set(self, provider_id: str, health: Health) -> None:
        if health == Health():
            self._health.pop(provider_id, None)
        else:
            self._health[provider_id] = health
        p = self._providers.get(provider_id)
        if p is not None:
            self._emit(RegistryChange(ChangeKind.HEALTH, p))
