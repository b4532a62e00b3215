"""The MCP tool `find_calls`: the callers, callees or impact of a definition, with call sites.

What it owns: the tool's name, description, parameters and result shape, and its listing: it
is listed only where the symbol table holds some project's symbols (an install with nothing
indexed is shown the tools that can help it first). Answers are held to `max_tokens` and paged
with a cursor as the other symbol tools are (`mcp_symbols.paged`).

What it refuses to do: resolve anything (`fathom.service.calls` and `fathom.index.symbols.calls`
do, in the caller's scope), or run a query on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from fathom.server.answer_tokens import DEFAULT_MAX_TOKENS, tokens_of
from fathom.server.mcp_common import MaxTokens, PageCursor, ProjectOpt, tool_errors
from fathom.server.mcp_symbols import READ_ONLY, Name, paged
from fathom.server.search_answer import resource_uri
from fathom.service import calls as service

if TYPE_CHECKING:
    from fathom.service.ports import SymbolSource

Grade = Literal["resolved", "likely", "name-only"]


class CallSite(BaseModel):
    project: str
    path: str
    line: int
    caller: str | None  # the definition the call is in; null: the file's top level
    callee: str  # what is called there: the name as written (callees) or the definition
    resolution: Grade
    targets: list[str] = []  # `path:line qualname` of the definitions it reaches
    depth: int = 1  # impact: calls away from the definition asked about
    text: str = ""
    uri: str


class CallResults(BaseModel):
    query: str
    direction: str
    definitions: list[str]  # `project:path:line qualname` of what `query` names
    found: int
    truncated: bool = False
    results: list[CallSite]
    notes: list[str] = []
    next_cursor: str | None = None
    tokens: int = 0


def _target(row: Any) -> str:
    return f"{row.path}:{row.start_line} {row.qualname}"


def sites_of(answer: service.CallAnswer) -> list[CallSite]:
    """The answer's call sites: impact grouped by file (nearest first within each)."""
    if answer.direction != "impact":
        return [
            CallSite(
                project=c.site.project,
                path=c.site.path,
                line=c.site.line,
                caller=c.site.enclosing,
                callee=c.site.name,
                resolution=c.how,  # type: ignore[arg-type]
                targets=[_target(t) for t in c.targets[:5]],
                text=c.site.text[:300],
                uri=resource_uri(c.site.project, c.site.path, c.site.line, c.site.line),
            )
            for c in answer.calls
        ]
    found = sorted(
        answer.impacted,
        key=lambda i: (i.definition.project, i.definition.path, i.depth, i.definition.start_line),
    )
    return [
        CallSite(
            project=i.definition.project,
            path=i.definition.path,
            line=i.via.site.line,
            caller=i.definition.qualname,
            callee=i.via.site.name,
            resolution=i.via.how,  # type: ignore[arg-type]
            targets=[_target(t) for t in i.via.targets[:5]],
            depth=i.depth,
            text=i.via.site.text[:300],
            uri=resource_uri(
                i.definition.project, i.definition.path, i.definition.start_line, i.definition.end_line
            ),
        )
        for i in found
    ]


def site_line(s: CallSite) -> str:
    deep = f" depth {s.depth}" if s.depth > 1 else ""
    reaches = f" -> {s.targets[0]}" if s.targets else ""
    return f"{s.project}:{s.path}:{s.line} [{s.resolution}{deep}] {s.caller or '<top>'}: {s.text}{reaches}"


def head_of(answer: service.CallAnswer, name: str, shown: int) -> str:
    if not answer.definitions:
        return f"no definition of {name!r}: find_symbol or search_code may find it"
    what = {
        "callers": "call site(s) calling",
        "callees": "call(s) made by",
        "impact": "definition(s) calling, transitively,",
    }[answer.direction]
    more = "+" if answer.truncated else ""
    return f"{shown}{more} {what} {name!r} ({len(answer.definitions)} definition(s)), resolved first"


def register_call_tools(server: MCPServer, fathom: SymbolSource) -> None:
    only_when = getattr(server, "only_when", None)
    if only_when is not None:  # read at every listing: the first index run lists it
        only_when("find_calls", lambda: service.has_symbols(fathom))

    @server.tool(
        title="Find calls",
        annotations=READ_ONLY,
        description="Callers, callees or impact (transitive callers, by file) of a "
        "definition, with call sites graded resolved/likely/name-only.",
    )
    @tool_errors
    async def find_calls(
        name: Name,
        direction: Annotated[
            Literal["callers", "callees", "impact"], Field(description="callers, callees, or impact.")
        ] = "callers",
        depth: Annotated[
            int, Field(description="impact: calls away.", ge=1, le=service.MAX_DEPTH)
        ] = service.DEFAULT_DEPTH,
        project: ProjectOpt = None,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
        cursor: PageCursor = None,
    ) -> Annotated[CallToolResult, CallResults]:
        def run() -> CallToolResult:
            answer = service.find_calls(fathom, name, direction=direction, project=project, depth=depth)
            found = sites_of(answer)
            return paged(
                CallResults(
                    query=name,
                    direction=direction,
                    definitions=[f"{d.project}:{_target(d)}" for d in answer.definitions[:20]],
                    found=len(found),
                    truncated=answer.truncated,
                    results=[],
                    notes=answer.notes,
                ),
                found,
                site_line,
                head_of(answer, name, len(found)),
                search=["calls", name, direction, depth, project],
                cursor=cursor,
                max_tokens=max_tokens,
                tokens=tokens_of(fathom),
            )

        return await asyncio.to_thread(run)
