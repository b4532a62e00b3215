"""The routes the fleet lends the server: each approved sidecar's `SidecarProvider`s in the
`ProviderRegistry`.

This module owns which providers a sidecar contributes (its local routes, plus a cloud route for
every role whose stored routing allows one), keeping the registry in step with that (a route
that now serves another model, pin or width is another provider), and mirroring "key missing"
into the registry's health flags.

It refuses to touch a flag it did not set: a gate quarantine stays when the key comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from fathom.config import RoutingState, RoutingStore
from fathom.errors import ConfigError
from fathom.fleet import protocol as p
from fathom.fleet.link import Link
from fathom.fleet.remote import SidecarChannel, SidecarProvider
from fathom.inference.provider import Provider
from fathom.roles import Role

log = logging.getLogger("fathom.fleet.hub")


def role_configs(state: RoutingState) -> dict[Role, p.RoleConfig]:
    return {
        role: p.RoleConfig(
            policy=r.policy,
            model=r.model,
            upstream=r.upstream,
            fallback=r.fallback,
            width=r.width,
            max_tokens=r.max_tokens,
        )
        for role, r in state.roles.items()
    }


def cloud_routes(state: RoutingState) -> dict[Role, Any]:
    """Roles whose stored routing lets a cloud route serve them (`RoleConfig.cloud_allowed`,
    the same rule the sidecar applies)."""
    configs = role_configs(state)
    return {role: state.roles[role] for role, cfg in configs.items() if cfg.cloud_allowed(role)}


def identity(provider: Provider) -> tuple[str, str, str | None, int | None]:
    """What a route is, for the gate: id, model, pin and width. A change to any of them makes
    another provider (a verdict is about one stack, and provenance names its model)."""
    i = provider.info
    return (i.id, i.model, i.upstream, i.width)


class Lender(SidecarChannel, Protocol):
    """What the routes need of the hub (`fathom.fleet.hub.Hub`): the channel its providers
    command through, and the registry they enter. Named here so that this module does not
    import the hub that imports it."""

    registry: Any
    wrap: Callable[[Any], Any] | None
    routing: RoutingStore

    def notify(self) -> None: ...


class SidecarRoutes:
    """Keeps each link's providers, and the registry, in step with what the link may serve."""

    def __init__(self, hub: Lender):
        self.hub = hub

    def desired(self, link: Link, state: RoutingState | None = None) -> dict[str, SidecarProvider]:
        out: dict[str, SidecarProvider] = {}
        for r in link.routes:
            prov = SidecarProvider(
                self.hub,
                link.name,
                r.role,
                "local",
                model=r.model,
                width=r.width,
                backend=r.backend,
                max_tokens=r.max_tokens,
            )
            out[prov.id] = prov
        if link.cloud_capable:
            if state is None:
                try:
                    state = self.hub.routing.load()
                except ConfigError as exc:
                    log.error("routing state unreadable, no cloud routes for %s: %s", link.name, exc)
                    state = None
            for role, route in (cloud_routes(state) if state else {}).items():
                prov = SidecarProvider(
                    self.hub,
                    link.name,
                    role,
                    "cloud",
                    model=route.model,
                    width=route.width,
                    upstream=route.upstream,
                    max_tokens=route.max_tokens,
                )
                out[prov.id] = prov
        return out

    def sync(self, link: Link, state: RoutingState | None = None) -> None:
        desired = self.desired(link, state) if link.approved else {}
        changed = False
        for pid in list(link.providers):
            if pid not in desired:
                self.remove(link.providers.pop(pid))
                changed = True
        for pid, prov in desired.items():
            current = link.providers.get(pid)
            if current is None or identity(current) != identity(prov):
                # New, or the same route now serving another model, pin or width: another
                # provider, which replaces the old one and has no verdict until it is probed.
                link.providers[pid] = prov
                self.add(prov)
                changed = True
        if changed:
            self.mark_key_health(link)
            self.hub.notify()

    def withdraw(self, link: Link) -> None:
        """Take every provider of `link` out of the registry (it dropped or was revoked)."""
        for pid in list(link.providers):
            self.remove(link.providers.pop(pid))

    def mark_key_health(self, link: Link) -> None:
        """Mirror "key missing" into the registry's health flags, so whoever lists available
        providers (router, pool, status) skips these cloud routes and shows the reason. Only a
        flag this hub set is lifted: a gate quarantine stays."""
        reg = self.hub.registry
        if reg is None or not hasattr(reg, "quarantine"):
            return
        reason = f"key missing on {link.name}"
        for pid, prov in link.providers.items():
            if prov.route != "cloud" or pid not in reg:
                continue
            health = reg.health(pid)
            if not link.key_present and health.state == "ok":
                reg.quarantine(pid, reason)
            elif link.key_present and health.reason == reason:
                reg.restore(pid)

    def add(self, provider: SidecarProvider) -> None:
        if self.hub.registry is not None:
            wrap = self.hub.wrap
            self.hub.registry.add(wrap(provider) if wrap is not None else provider)

    def remove(self, provider: SidecarProvider) -> None:
        if self.hub.registry is not None:
            self.hub.registry.remove(provider.id)
