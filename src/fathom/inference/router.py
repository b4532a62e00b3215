"""Per role, which live providers may serve, and in what order.

The router owns the translation of one role's route (policy, fallback mode) and the live
registry into providers: the set allowed to serve, the order a stateless request tries them
in (with failover), and the pool an index job runs on. The encoder a query goes through is
the table's own reference as its space records it (`Fathom.encoder_in`).
What each policy allows is read from `fathom.policy.BEHAVIOUR` and nowhere else.

Embedding roles write a table, so only providers the gate cleared for that table may serve
them; `is_cleared` is injected (the service hands it the gate's verdicts, `Gate.is_cleared`).
Stateless roles (reranker, code-assistant, rlm) write nothing and fail over per request, all
through one door, `call_role`: the reranker stage and the agents alike. It charges the request
to the current project for the budget's fairness and checks the fallback mode a second time
at the moment of the call: under `FallbackMode.LOCAL_ONLY` a cloud provider is refused even if
a routing bug handed it over (`CloudForbidden`, not a `ProviderError`, so nothing fails over
past it).

It refuses to embed, rerank or chat itself (providers do), to size batches (the pool does), to
spend cloud budget (the budget does), or to decide whether two encoders agree (the gate does).

API:
    Router(registry, routing, ...)        .order(role) .call(role, fn) .pool(role) .permits(...)
    await call_role(router, role, fn, *, project=None) -> Served[T]     (.value, .provider)
    local_only(router, role) -> bool
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fathom.clock import Clock
from fathom.config import RoleRoute, RoutingState
from fathom.errors import FathomError, NoProviderAvailable, ProviderError
from fathom.inference.budget import current_project
from fathom.inference.pool import Pool, is_throttle
from fathom.inference.provider import ChatResult, Kind, Provider
from fathom.inference.registry import ProviderRegistry
from fathom.policy import BEHAVIOUR, Behaviour, Policy
from fathom.roles import EMBEDDING_ROLES, FallbackMode, Role

T = TypeVar("T")
IsCleared = Callable[[Role, Provider], bool]


class NoRoute(NoProviderAvailable):
    """No provider allowed by the role's route can serve; `reasons` says why, one line each,
    and `attempts` holds (provider id, error) for every provider that was tried."""

    def __init__(
        self, role: Role, policy: Policy, reasons: Sequence[str], attempts: Sequence[tuple[str, str]] = ()
    ):
        self.role, self.policy = role, policy
        self.reasons = list(reasons)
        self.attempts = list(attempts)
        tried = "".join(f"; {pid} failed: {err}" for pid, err in self.attempts)
        super().__init__(
            f"no provider can serve role {role} under policy {policy}: "
            + ("; ".join(self.reasons) or "every allowed provider failed")
            + tried
        )


class Router:
    def __init__(
        self,
        routing: RoutingState | Callable[[], RoutingState],
        registry: ProviderRegistry,
        *,
        is_cleared: IsCleared,
        clock: Clock | None = None,
        eject_after: int = 3,
        eject_for: float = 30.0,
        local_fix: Callable[[Role], str] | None = None,
        fleet: Callable[[], bool] | None = None,
    ):
        # A callable is read on every decision, so a policy change applies to the next request.
        self._routing = routing if callable(routing) else (lambda: routing)
        # How to add a local provider for a role, in a refusal: a server's fleet takes a
        # sidecar; one machine without a server takes a local LLM's URL (`standalone_router`).
        self.local_fix = local_fix or (lambda role: "start a sidecar for it")
        # Whether the server keeps a fleet record of its own (sidecars it approved or may
        # admit); `has_fleet` adds what the registry and the routing state show.
        self._fleet = fleet or (lambda: False)
        self.registry = registry
        self.is_cleared = is_cleared
        self.clock = clock or registry.clock
        self.eject_after = eject_after
        self.eject_for = eject_for
        self._in_flight: dict[str, int] = {}

    def has_fleet(self) -> bool:
        """Whether a fleet is configured: a sidecar's or a cloud route is registered, a key
        push was recorded, or the server's fleet record says so. Without one, a refusal says
        nothing of sidecars and OpenRouter keys to a user of one machine."""
        if any(p.info.host is not None or p.info.is_cloud for p in self.registry.list()):
            return True
        return self._routing().last_push is not None or bool(self._fleet())

    # -- the route ---------------------------------------------------------------------

    def route(self, role: Role) -> RoleRoute:
        role = Role.parse(role)
        route = self._routing().roles.get(role)
        return route if route is not None else RoleRoute()

    def policy(self, role: Role) -> Policy:
        return self.route(role).policy

    def behaviour(self, role: Role) -> Behaviour:
        return BEHAVIOUR[self.policy(role)]

    def cloud_allowed(self, role: Role) -> bool:
        """The policy lets the cloud serve and the fallback mode does not forbid it."""
        route = self.route(role)
        return BEHAVIOUR[route.policy].cloud and route.fallback is not FallbackMode.LOCAL_ONLY

    # -- who may serve -----------------------------------------------------------------

    def permits(self, role: Role, provider: Provider) -> bool:
        """May `provider` serve `role` now (ignoring load, and ignoring backup's reserve rule,
        which depends on the other providers)? Kind allowed by the policy table and the
        fallback mode, available in the registry, and for embedding roles cleared."""
        role = Role(role)
        if role not in provider.info.roles:
            return False
        if provider.info.kind is Kind.CLOUD:
            if not self.cloud_allowed(role):
                return False
        elif not self.behaviour(role).local:
            return False
        if not self.registry.available(provider.id):
            return False
        return role not in EMBEDDING_ROLES or bool(self.is_cleared(role, provider))

    def candidates(self, role: Role) -> list[Provider]:
        """Every provider permitted for `role`, locals first, then by id."""
        role = Role.parse(role)
        ps = [p for p in self.registry.list(role) if self.permits(role, p)]
        return sorted(ps, key=_local_first)

    def serving(self, role: Role) -> list[Provider]:
        """The set allowed to serve right now: under backup the cloud is held back while any
        local provider can serve."""
        ps = self.candidates(role)
        if self.behaviour(role).cloud_reserve_only and any(not p.info.is_cloud for p in ps):
            ps = [p for p in ps if not p.info.is_cloud]
        return ps

    def order(self, role: Role) -> list[Provider]:
        """The order a stateless request tries providers in. Aggregate: least loaded first
        (in-flight count; ties go to local hardware, then id). Backup: locals by load, then
        the cloud. Local and cloud: their own kind only, by load."""
        role = Role.parse(role)
        ps = self.candidates(role)
        if not ps:
            raise self._no_route(role)
        load = self.load
        if self.behaviour(role).cloud_reserve_only:
            return sorted(ps, key=lambda p: (p.info.is_cloud, load(p.id), p.id))
        return sorted(ps, key=lambda p: (load(p.id), p.info.is_cloud, p.id))

    def load(self, provider_id: str) -> int:
        return self._in_flight.get(provider_id, 0)

    @asynccontextmanager
    async def lease(self, provider: Provider) -> AsyncIterator[Provider]:
        """Count a request in flight on `provider` for least-loaded picking."""
        self._in_flight[provider.id] = self._in_flight.get(provider.id, 0) + 1
        try:
            yield provider
        finally:
            n = self._in_flight[provider.id] - 1
            if n:
                self._in_flight[provider.id] = n
            else:
                del self._in_flight[provider.id]

    async def call(self, role: Role, fn: Callable[[Provider], Awaitable[T]]) -> T:
        """Run `fn(provider)` on the first provider in `order(role)` that succeeds.

        A `ProviderError` (unavailable, throttled, failed) moves on to the next allowed
        provider; under backup that is how the cloud steps in when the locals fail. Any other
        exception is a bug in the caller and propagates at once. When every provider failed,
        `NoRoute` carries each attempt."""
        role = Role.parse(role)
        attempts: list[tuple[str, str]] = []
        last: BaseException | None = None
        for provider in self.order(role):
            # Re-check: an earlier attempt in this loop may have ejected it meanwhile.
            if not self.registry.available(provider.id):
                continue
            try:
                async with self.lease(provider):
                    result = await fn(provider)
            except ProviderError as exc:
                last = exc
                attempts.append((provider.id, _describe(exc)))
                # A throttle is the account's, and a refusal of the request itself (too long
                # for the model's context) is the caller's: neither says the provider is sick.
                if not is_throttle(exc) and getattr(exc, "provider_fault", True):
                    self.registry.record_failure(
                        provider.id,
                        _describe(exc),
                        eject_after=self.eject_after,
                        eject_for=self.eject_for,
                    )
                continue
            self.registry.record_success(provider.id)
            return result
        raise NoRoute(role, self.policy(role), [], attempts) from last

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        served = await call_role(self, Role.RERANKER, lambda p: p.rerank(query, documents))
        return served.value

    async def chat(self, role: Role, messages: Sequence[dict[str, Any]], **options: Any) -> ChatResult:
        served = await call_role(self, role, lambda p: p.chat(messages, **options))
        return served.value

    # -- bulk embedding ----------------------------------------------------------------

    def pool(self, role: Role, **options: Any) -> Pool:
        """A `Pool` for an index job of `role`: every provider this router permits pulls from
        one queue; under backup the cloud pulls only while no local can. Providers joining or
        leaving the registry mid-job join or leave the pool; a provider whose clearance is
        withdrawn stops pulling at its next batch."""
        role = Role.parse(role)
        if role not in EMBEDDING_ROLES:
            raise ValueError(f"role {role} writes no table; call it per request with call()")
        if not self.candidates(role):
            raise self._no_route(role)
        options.setdefault("clock", self.clock)
        return Pool(
            self.registry,
            role=role,
            eligible=lambda p: self.permits(role, p),
            cloud_reserve_only=lambda: self.behaviour(role).cloud_reserve_only,
            **options,
        )

    # -- explanations ------------------------------------------------------------------

    def _no_route(self, role: Role) -> NoRoute:
        route = self.route(role)
        behaviour = BEHAVIOUR[route.policy]
        reasons: list[str] = []
        embedding = role in EMBEDDING_ROLES
        if behaviour.local:
            reasons.append(self._why_not(role, Kind.LOCAL, embedding))
        if behaviour.cloud:
            if route.fallback is FallbackMode.LOCAL_ONLY:
                reasons.append(
                    f"fallback mode local-only: role {role} never calls the cloud; switch it "
                    f"with `fathom policy set {role} --fallback any` to allow it"
                )
            else:
                reasons.append(self._why_not(role, Kind.CLOUD, embedding))
        return NoRoute(role, route.policy, reasons)

    def _why_not(self, role: Role, kind: Kind, embedding: bool) -> str:
        registered = self.registry.list(role, kind=kind)
        label = "local provider (in-process model or sidecar)" if kind is Kind.LOCAL else "cloud route"
        labels = "local providers (in-process models or sidecars)" if kind is Kind.LOCAL else "cloud routes"
        if not registered:
            if kind is Kind.LOCAL:
                return f"no {label} is registered for role {role}: {self.local_fix(role)}"
            state = self._routing()
            why = f"no {label} is registered for role {role}"
            if state.last_push is None or not state.last_push.pushed:
                why += ": no OpenRouter key has been pushed to any sidecar (`fathom key push`)"
            elif embedding and not self.route(role).upstream:
                why += f": its embedding route has no upstream pin (the one provider behind the model); set one for role {role}"
            else:
                why += f": set a model for role {role} and push the key again"
            return why
        if embedding:
            cleared = [p for p in registered if self.is_cleared(role, p)]
            if not cleared:
                ids = ", ".join(p.id for p in registered)
                return (
                    f"none of the registered {labels} ({ids}) is cleared by the gate for "
                    f"the {role.table} table: run `fathom gate verify`"
                )
            registered = cleared
        now = self.clock.now()
        down = [p for p in registered if not self.registry.available(p.id, now)]
        if len(down) == len(registered):
            parts = []
            for p in down:
                h = self.registry.health(p.id)
                left = "until restored" if math.isinf(h.until) else f"for {h.until - now:.0f}s more"
                parts.append(f"{p.id} {h.state} ({h.reason or 'no reason'}) {left}")
            return f"every {label} for role {role} is out of service: " + "; ".join(parts)
        return f"no {label} can serve role {role}"


def _local_first(p: Provider) -> tuple[bool, bool, str]:
    # The server's own model before a sidecar's, then id: a stable order every reader shares.
    return (p.info.is_cloud, p.info.host is not None, p.id)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- the one door to a stateless role


class CloudForbidden(FathomError):
    """A cloud provider reached a role whose fallback mode is local-only. Not a
    `ProviderError` on purpose: the router must not fail over past it as if a provider had
    failed; it is a routing bug, and nothing was sent."""

    def __init__(self, role: Role, provider_id: str):
        self.role, self.provider_id = role, provider_id
        super().__init__(
            f"refused to send a {role} request to cloud provider {provider_id}: role {role} is "
            f"in fallback mode local-only, so it never calls the cloud whatever its policy"
        )


@dataclass(frozen=True)
class Served(Generic[T]):
    value: T
    provider: Provider


def local_only(router: Router, role: Role) -> bool:
    return router.route(role).fallback is FallbackMode.LOCAL_ONLY


async def call_role(
    router: Router, role: Role, fn: Callable[[Provider], Awaitable[T]], *, project: str | None = None
) -> Served[T]:
    """`fn(provider)` on the first provider of `router.order(role)` that serves it, charged
    to `project` (or the current one).

    Raises the router's `NoRoute` (a `NoProviderAvailable` naming every reason) when none can.
    """
    role = Role.parse(role)
    served: list[Provider] = []

    async def attempt(provider: Provider) -> T:
        if provider.info.is_cloud and local_only(router, role):
            raise CloudForbidden(role, provider.id)
        result = await fn(provider)
        served.append(provider)
        return result

    token = current_project.set(project) if project else None
    try:
        value = await router.call(role, attempt)
    finally:
        if token is not None:
            current_project.reset(token)
    return Served(value, served[-1])
