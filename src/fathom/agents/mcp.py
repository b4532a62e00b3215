"""The `ask` and `explore` MCP tools, registered on the server `fathom.server.mcp_tools` builds.

What it owns: the two tools' argument and result shapes (structured output), and turning a
`FathomError` (no provider for the role, local-only with no local LLM, an unknown project, a
bad limit) into the SDK's `ToolError`, whose message names the fix. The answers and traces
come from `assistant.py` and `rlm.py`; this module holds no logic of its own. Without a server
(`fathom mcp`, `fathom serve`) a tool is listed only when this machine has a local LLM its role
may use (`FATHOM_LOCAL_CHAT_URL`, see `routes.local_chat_providers`).

API:
    register_agent_tools(server, fathom, router=None) -> None
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from fathom.server.mcp_tools import tool_errors

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


def register_agent_tools(server: MCPServer, fathom: Fathom, router: Router | None = None) -> None:
    from fathom.agents.assistant import CodeAssistant
    from fathom.agents.rlm import Explorer, Limits
    from fathom.agents.routes import standalone_router

    routers: list[Router] = [router] if router is not None else []

    def route() -> Router:
        if not routers:
            routers.append(standalone_router(fathom))
        return routers[0]

    @server.tool(description="Answer a question about indexed code from retrieved code and "
                             "docs, citing the path:start-end ranges it used.")
    @tool_errors
    async def ask(question: str, project: str | None = None) -> AskResult:
        r = route()
        a = await CodeAssistant(fathom, r, reranker=r).ask(question, project)
        return AskResult(question=a.question, answer=a.answer,
                         citations=[str(c) for c in a.citations], rejected=a.rejected,
                         provider=a.provider, model=a.model, reranked=a.reranked)

    @server.tool(description="Explore one indexed project step by step (search, read files, "
                             "grep, sub-questions) to answer a hard question; bounded in "
                             "depth, steps, tokens and time. Returns the answer and the trace.")
    @tool_errors
    async def explore(question: str, project: str, max_steps: int = 12,
                      max_depth: int = 2) -> ExploreResult:
        r = route()
        explorer = Explorer.for_project(fathom, r, project, reranker=r,
                                        limits=Limits(max_depth=max_depth, max_steps=max_steps))
        e = await explorer.explore(question)
        return ExploreResult(
            question=e.question, answer=e.answer, complete=e.complete, stopped=e.stopped,
            citations=[str(c) for c in e.citations], unverified=e.unverified,
            limits_hit=e.limits_hit, sub_questions=e.sub_questions, tokens_used=e.tokens_used,
            trace=[TraceEntry(depth=s.depth, step=s.step, tool=s.tool, args=s.args,
                              summary=s.summary, ok=s.ok) for s in e.trace])

    if router is None:
        # One machine without a server: its local LLMs are fixed when it starts, so a tool that
        # nothing may serve is not listed at all (`fathom ask`/`explore` name the variable to set).
        from fathom.roles import Role

        for name, role in (("ask", Role.CODE_ASSISTANT), ("explore", Role.RLM)):
            if not route().candidates(role):
                server.remove_tool(name)
