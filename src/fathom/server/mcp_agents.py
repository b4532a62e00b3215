"""The `ask` and `explore` MCP tools, registered on the server `fathom.server.mcp_tools` builds.

What it owns: the two tools' argument and result shapes (structured output, every parameter
described), whether they are listed (only while the router can route their role: a local LLM,
a sidecar or a cloud route; whatever providers the registry holds count), and turning a
`FathomError` (no provider for the role, local-only with no local LLM, an unknown project, a
bad limit) into the SDK's `ToolError`, whose message names the fix — for a missing route,
what to configure on this machine. The answers and traces come from `assistant.py` and
`rlm.py`; this module holds no logic of its own. Without a server (`fathom mcp`, `fathom
serve`) the router's providers are this machine's local LLMs (`FATHOM_LOCAL_CHAT_URL`, see
`routes.local_chat_providers`).

API:
    register_agent_tools(server, fathom, router=None) -> None
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from fathom.agents.rlm import MAX_DEPTH, MAX_STEPS
from fathom.errors import NoProviderAvailable
from fathom.roles import Role
from fathom.server.agent_answers import fit_answer
from fathom.server.answer_tokens import DEFAULT_MAX_TOKENS, tokens_of
from fathom.server.mcp_common import MaxTokens, ProjectName, ProjectOpt, tool_errors

if TYPE_CHECKING:  # pragma: no cover
    from mcp.server.mcpserver import MCPServer

    from fathom.inference.router import Router
    from fathom.service import Fathom


class AskResult(BaseModel):
    question: str
    answer: str
    citations: list[str] = Field(description="path:start-end ranges the answer cites, all retrieved")
    rejected: list[str] = Field(description="citations in the answer that name nothing retrieved")
    provider: str | None
    model: str | None
    reranked: bool
    truncated: bool = Field(default=False, description="the answer was cut to max_tokens")


class TraceEntry(BaseModel):
    depth: int
    step: int
    tool: str
    args: dict[str, Any]
    summary: str
    ok: bool


class ExploreResult(BaseModel):
    question: str
    answer: str
    complete: bool
    stopped: str | None = Field(description="the limit that ended the exploration, if any")
    citations: list[str]
    unverified: list[str]
    limits_hit: list[str]
    sub_questions: int
    tokens_used: int
    trace: list[TraceEntry]
    trace_omitted: int = Field(
        default=0, description="trace steps left out (the last ones) to keep the answer within max_tokens"
    )
    truncated: bool = Field(default=False, description="the answer was cut to max_tokens")


A = TypeVar("A", AskResult, ExploreResult)

# The LLM role each tool needs.
ROLE_OF_TOOL = {"ask": Role.CODE_ASSISTANT, "explore": Role.RLM}
# Model calls: the answer varies from call to call, and a cloud route may serve them.
LLM_TOOL = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
Question = Annotated[str, Field(description="The question, in words.", min_length=1, max_length=4000)]


def routable(router: Router, role: Role) -> bool:
    """Whether some provider the router allows can serve `role` now."""
    try:
        router.order(role)
    except NoProviderAvailable:
        return False
    return True


def how_to_enable(tool: str) -> str:
    """What to configure on this machine so that `tool` can run."""
    role = ROLE_OF_TOOL[tool]
    return (
        f"To make {tool} available, give role {role} a route: on this machine set "
        f"FATHOM_LOCAL_CHAT_URL to an OpenAI-compatible chat server (a local LLM) and "
        f"restart fathom; or use a fathom server's /mcp with a sidecar serving {role} "
        f"(`fathom sidecar --serve {role}=...`); or push an OpenRouter key to its "
        f"sidecars and allow the cloud for it (`fathom policy set {role} --fallback any`)."
    )


def register_agent_tools(server: MCPServer, fathom: Fathom, router: Router | None = None) -> None:
    from fathom.agents.assistant import CodeAssistant
    from fathom.agents.rlm import Explorer, Limits
    from fathom.agents.routes import standalone_router

    routers: list[Router] = [router] if router is not None else []

    def route() -> Router:
        if not routers:
            routers.append(standalone_router(fathom))
        return routers[0]

    async def fitted(answer: A, max_tokens: int) -> A:  # counting tokens is CPU work
        return await asyncio.to_thread(fit_answer, answer, max_tokens, tokens_of(fathom))

    def refusal(tool: str, exc: NoProviderAvailable) -> ToolError:
        return ToolError(f"{exc} {how_to_enable(tool)}")

    only_when = getattr(server, "only_when", None)
    if only_when is not None:  # listed only while some route can serve the role
        for name, role in ROLE_OF_TOOL.items():
            only_when(name, lambda role=role: routable(route(), role))

    @server.tool(
        title="Ask about the code",
        annotations=LLM_TOOL,
        description="Answer a question about indexed code from retrieved code and "
        "docs (the code-assistant role), citing the path:start-end ranges "
        "it used.",
    )
    @tool_errors
    async def ask(
        question: Question, project: ProjectOpt = None, max_tokens: MaxTokens = DEFAULT_MAX_TOKENS
    ) -> AskResult:
        r = route()
        try:
            a = await CodeAssistant(fathom, r, reranker=r).ask(question, project)
        except NoProviderAvailable as exc:
            raise refusal("ask", exc) from exc
        return await fitted(
            AskResult(
                question=a.question,
                answer=a.answer,
                citations=[str(c) for c in a.citations],
                rejected=a.rejected,
                provider=a.provider,
                model=a.model,
                reranked=a.reranked,
            ),
            max_tokens,
        )

    @server.tool(
        title="Explore a project",
        annotations=LLM_TOOL,
        description="Explore one indexed project step by step (search, read files, "
        "grep, sub-questions; the rlm role) to answer a hard question; "
        "bounded in depth, steps, tokens and time. Returns the answer and "
        "the trace.",
    )
    @tool_errors
    async def explore(
        question: Question,
        project: ProjectName,
        max_steps: Annotated[
            int,
            Field(
                description=f"Tool calls allowed at the top level, 1 to {MAX_STEPS}. Default 12.",
                ge=1,
                le=MAX_STEPS,
            ),
        ] = 12,
        max_depth: Annotated[
            int,
            Field(
                description=f"Levels of sub-questions allowed, 0 (none) to {MAX_DEPTH}. Default 2.",
                ge=0,
                le=MAX_DEPTH,
            ),
        ] = 2,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> ExploreResult:
        r = route()
        explorer = Explorer.for_project(
            fathom, r, project, reranker=r, limits=Limits(max_depth=max_depth, max_steps=max_steps)
        )
        try:
            e = await explorer.explore(question)
        except NoProviderAvailable as exc:
            raise refusal("explore", exc) from exc
        return await fitted(
            ExploreResult(
                question=e.question,
                answer=e.answer,
                complete=e.complete,
                stopped=e.stopped,
                citations=[str(c) for c in e.citations],
                unverified=e.unverified,
                limits_hit=e.limits_hit,
                sub_questions=e.sub_questions,
                tokens_used=e.tokens_used,
                trace=[
                    TraceEntry(
                        depth=s.depth, step=s.step, tool=s.tool, args=s.args, summary=s.summary, ok=s.ok
                    )
                    for s in e.trace
                ],
            ),
            max_tokens,
        )
