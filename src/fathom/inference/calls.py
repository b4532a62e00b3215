"""The one door to a stateless role (reranker, code-assistant, rlm): `call_role`.

What it owns: running `fn(provider)` on a provider the `Router` picks for the role (aggregate:
least loaded; backup: local first, cloud on failure; local / cloud: strict), charging the
request to the current project for the budget's fairness, and checking the fallback mode a
second time at the moment of the call: under `FallbackMode.LOCAL_ONLY` a cloud provider is
refused even if a routing bug handed it over. It lives in the inference layer so that the
reranker stage (`fathom.index.rerank`) and the agents share it without retrieval importing the
agents.

It refuses to decide who may serve (the router reads the policy table) and to retry on its own
(the router fails over).

API:
    await call_role(router, role, fn, *, project=None) -> Served[T]     (.value, .provider)
    local_only(router, role) -> bool
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from fathom.errors import FathomError
from fathom.inference.budget import current_project
from fathom.inference.provider import Provider
from fathom.inference.router import Router
from fathom.roles import FallbackMode, Role

T = TypeVar("T")


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
    """`fn(provider)` on the first provider of `router.order(role)` that serves it.

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
