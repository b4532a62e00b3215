"""Shared fixtures for the stateless roles (reranker, code-assistant, rlm).

`indexed_shop` is the retrieval fixtures' sample project, indexed once per session into a real
`Fathom` (LanceDB + the local MiniLM encoder). Tests only read it. `make_router` builds a real
`Router` over a real `ProviderRegistry`; `cloud` builds a budgeted OpenRouter route to the
emulator for one role.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fathom.agents.routes import cloud_provider
from fathom.config import RoleRoute, RoutingState, Settings
from fathom.inference.budget import CloudBudget
from fathom.inference.openrouter import OpenRouterClient
from fathom.inference.provider import ChatResult, Kind, Provider, ProviderInfo, ToolCall
from fathom.inference.registry import ProviderRegistry
from fathom.inference.router import Router
from fathom.policy import Policy
from fathom.roles import DEFAULTS, FallbackMode, Role
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project

TEST_KEY = "sk-or-v1-agents-test"


@dataclass
class IndexedProject:
    fathom: Fathom
    project: str
    root: Path


@pytest.fixture(scope="session")
def indexed_shop(tmp_path_factory, local_encoder) -> Iterator[IndexedProject]:
    base = tmp_path_factory.mktemp("agents")
    root = write_project(base / "shop")
    fathom = Fathom(Settings(data_dir=base / "data"), encoder=local_encoder)
    asyncio.run(fathom.index(root, "shop"))
    yield IndexedProject(fathom, "shop", root.resolve())
    fathom.store.close()


def routing(**routes: tuple[Policy, FallbackMode]) -> RoutingState:
    """A routing state with the given stateless roles set: role name (underscores) ->
    (policy, fallback)."""
    state = RoutingState()
    for name, (policy, fallback) in routes.items():
        role = Role(name.replace("_", "-"))
        state.roles[role] = RoleRoute(policy=policy, model=DEFAULTS[role].model, fallback=fallback)
    return state


def make_router(state: RoutingState, providers: list[Provider]) -> Router:
    registry = ProviderRegistry()
    for p in providers:
        registry.add(p)
    # Stateless roles write no table: the gate's clearance never applies to them.
    return Router(state, registry, is_cleared=lambda role, provider: False)


def cloud(emulator: Any, role: Role, budget: CloudBudget) -> Provider:
    client = OpenRouterClient(TEST_KEY, base_url=emulator.base_url)
    return cloud_provider(client, role, budget)


class LocalChat(Provider):
    """A local LLM at the Provider cut-off (no local model is small enough to ship in tests):
    answers a fixed script of ChatResults and records every request."""

    def __init__(self, turns: list[ChatResult], pid: str = "local:chat"):
        self.info = ProviderInfo(
            id=pid, kind=Kind.LOCAL, roles=frozenset({Role.RLM, Role.CODE_ASSISTANT}), model="local-llm"
        )
        self.turns = list(turns)
        self.requests: list[list[dict[str, Any]]] = []

    async def chat(self, messages, tools=None, **options):
        self.requests.append(list(messages))
        if self.turns:
            return self.turns.pop(0)
        return ChatResult(content="done", usage={"total_tokens": 10})


def tool_turn(name: str, **arguments: Any) -> ChatResult:
    return ChatResult(
        content=None,
        tool_calls=(ToolCall(f"c-{name}", name, arguments),),
        finish_reason="tool_calls",
        usage={"total_tokens": 10},
    )


class TickClock:
    """Each `now()` moves time forward by `tick` seconds: the loop's checks see time pass
    deterministically, however fast the machine is. `sleep` never returns on its own."""

    def __init__(self, tick: float, start: float = 0.0):
        self.tick, self.t = tick, start

    def now(self) -> float:
        t = self.t
        self.t += self.tick
        return t

    async def sleep(self, seconds: float) -> None:
        await asyncio.Event().wait()
