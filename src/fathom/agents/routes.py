"""How the stateless roles (reranker, code-assistant, rlm) reach a provider.

The door itself, `call_role`, is `fathom.inference.router` (the reranker stage uses it too).
This module builds the cloud route of a stateless role
(`cloud_provider`, always wrapped in `BudgetedProvider`, so its calls take the key's permits),
and states what a role's fallback mode means (`fallback_status`) for status output and the
dashboard. On one machine without a server it builds the local LLM providers the settings name
(`local_chat_providers`: FATHOM_LOCAL_CHAT_URL and its per-role overrides), which are local
providers like a sidecar's: the policies count them as local, and a local-only role may use them.

It refuses to decide who may serve (the router reads the policy table), to retry on its own
(the router fails over, the budget never retries), and to build an unbudgeted cloud route.

API:
    cloud_provider(client, role, budget, *, model=None, upstream=None) -> BudgetedProvider
    fallback_status(role_route, role=None) -> str
    local_chat_providers(settings) -> list[Provider]
    local_reranker(router) -> Router
    standalone_router(fathom, registry=None) -> Router
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from fathom.config import RoleRoute, RoutingState, Settings
from fathom.inference.budget import BudgetedProvider, CloudBudget
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider
from fathom.inference.provider import Kind, Provider
from fathom.inference.registry import ProviderRegistry
from fathom.inference.router import Router
from fathom.policy import BEHAVIOUR, Policy
from fathom.roles import DEFAULTS, EMBEDDING_ROLES, FallbackMode, Role

if TYPE_CHECKING:  # pragma: no cover
    from fathom.service import Fathom


def cloud_provider(
    client: OpenRouterClient,
    role: Role,
    budget: CloudBudget,
    *,
    model: str | None = None,
    upstream: str | None = None,
) -> BudgetedProvider:
    """The OpenRouter route of a stateless role, behind the key's budget.

    Unpinned by default: reranking and chat write nothing, so two upstreams serving the same
    model id cannot split a vector space (only embedding routes must be pinned)."""
    role = Role.parse(role)
    if role in EMBEDDING_ROLES:
        raise ValueError(f"role {role} writes a table; its cloud route goes through the gate")
    model = model or DEFAULTS[role].model
    if model is None:
        raise ValueError(f"role {role} has no default model; name the model of its cloud route")
    inner = OpenRouterProvider(client, model=model, roles=[role], upstream=upstream)
    return BudgetedProvider(inner, budget)


def fallback_status(role_route: RoleRoute, role: Role | str | None = None) -> str:
    """One line for status output and the dashboard: what this route's fallback mode means.

    Local-only must be stated plainly, because the policy column alone would suggest the
    cloud may serve: under local-only the role never calls the cloud, whatever its policy."""
    who = f"role {Role.parse(role)}" if role is not None else "this role"
    policy: Policy = role_route.policy
    behaviour = BEHAVIOUR[policy]
    if role_route.fallback is FallbackMode.LOCAL_ONLY:
        line = (
            f"fallback local-only: {who} never calls the cloud, whatever its policy "
            f"({policy}); only local GPUs and sidecar hosts serve it"
        )
        if not behaviour.local:
            line += (
                "; its policy allows no local provider, so it cannot run until the policy "
                "or the fallback mode changes"
            )
        return line + ". Switch with `fathom policy set <role> --fallback any`."
    if not behaviour.cloud:
        return f"fallback any: {who} is local-only by policy ({policy}); nothing leaves the network."
    if behaviour.cloud_reserve_only:
        return (
            f"fallback any: {who} may call the cloud under policy {policy}, only while no "
            f"local provider can serve; every cloud call takes a budget permit."
        )
    if not behaviour.local:
        return (
            f"fallback any: {who} is served by the cloud only ({policy}); every call takes a budget permit."
        )
    return (
        f"fallback any: {who} may call the cloud under policy {policy} (least-loaded of local "
        f"and cloud); every cloud call takes a budget permit."
    )


CHAT_ROLES = (Role.CODE_ASSISTANT, Role.RLM)


class _ChatOptions(TypedDict, total=False):
    stream: bool
    timeout: float


def local_chat_providers(settings: Settings) -> list[Provider]:
    """This machine's local LLMs for the chat roles, from the settings: one provider per
    (URL, model), serving every chat role that names it. `ConfigError` for a URL without a
    model."""
    from fathom.fleet.backends import OpenAICompatibleChat

    wanted: dict[tuple[str, str], list[Role]] = {}
    for role in CHAT_ROLES:
        target = settings.local_chat(role)
        if target is not None:
            wanted.setdefault(target, []).append(role)
    options: _ChatOptions = {}  # what the settings leave unset keeps the backend's default
    if settings.local_chat_stream is not None:
        options["stream"] = settings.local_chat_stream
    if settings.local_chat_timeout is not None:
        options["timeout"] = settings.local_chat_timeout
    return [
        OpenAICompatibleChat(url, roles=roles, model=model, **options)
        for (url, model), roles in wanted.items()
    ]


def local_chat_fix(role: Role) -> str:
    """What to set so that one machine has a local LLM for `role` (named in refusals)."""
    own = f"FATHOM_LOCAL_{Role.parse(role).value.replace('-', '_').upper()}"
    return (
        f"for a local LLM on this machine, set FATHOM_LOCAL_CHAT_URL and "
        f"FATHOM_LOCAL_CHAT_MODEL (or {own}_URL and {own}_MODEL) to an OpenAI-compatible "
        f"server such as Ollama (http://127.0.0.1:11434/v1) or vLLM "
        f"(http://127.0.0.1:8000/v1); or run a fathom server with a sidecar serving {role}"
    )


def standalone_router(fathom: Fathom, registry: ProviderRegistry | None = None) -> Router:
    """The router a front end without a server uses (`fathom ask`, `fathom mcp`, `fathom
    serve`): the routing state from the data dir, read at every request, over `registry`; by
    default a registry of this machine's local LLMs (`local_chat_providers`) and the service's
    local reranker (`fathom models use reranker`), empty when neither is configured (the
    in-process encoder serves no stateless role). The server builds its own
    router over the fleet's registry and passes it in instead.

    No cosine reranker is added by default on purpose: it would re-sort by the same encoder
    the vector search used and undo the keyword rescue of the hybrid search."""
    if registry is None:
        registry = ProviderRegistry()
        for provider in local_chat_providers(fathom.settings):
            registry.add(provider)
        for provider in fathom.registry.list(Role.RERANKER, kind=Kind.LOCAL):
            registry.add(provider)  # the cross-encoder `fathom models use reranker` chose
    return Router(
        fathom.routing.load,
        registry,
        # Stateless roles write no table: the gate's clearance never applies.
        is_cleared=lambda role, provider: False,
        local_fix=local_chat_fix,
    )


def local_reranker(router: Router) -> Router:
    """The reranker role of `router` held to local providers (its policy kept, its fallback
    made local-only): what the search tool of a local-only exploration reranks with, so that
    such an exploration sends nothing to the cloud, not even code to a cloud reranker."""

    def routing() -> RoutingState:
        route = router.route(Role.RERANKER).model_copy(update={"fallback": FallbackMode.LOCAL_ONLY})
        return RoutingState(roles={Role.RERANKER: route})

    return Router(routing, router.registry, is_cleared=router.is_cleared, clock=router.clock)


async def close_providers(router: Router) -> None:
    """Close what a standalone router's providers hold open (their HTTP connections)."""
    for provider in router.registry:
        await provider.aclose()
