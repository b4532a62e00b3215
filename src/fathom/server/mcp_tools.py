"""The MCP face of Fathom: six tools on the official `mcp` SDK (v2), over stdio or streamable
HTTP.

What it owns: the tool names, their argument and result shapes (structured output, described
for the model), and the translation of every anticipated failure — a bad argument, an unknown
project, a path that is not a folder, a refusal by the store — into the SDK's `ToolError`,
whose message reaches the client as an `is_error` result. The server keeps serving after one.

What it refuses to do: hold any logic of its own (every tool is one call on the `Fathom`
composition root), write anything to stdout in stdio mode (that stream is the protocol), or
let a traceback reach a client (an unexpected exception is the SDK's generic "Error executing
tool …", and is logged on stderr).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal, ParamSpec, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from fathom import __version__
from fathom.errors import ConfigError, FathomError, failure_of
from fathom.service import Fathom, SearchHit

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

INSTRUCTIONS = (
    "Fathom searches indexed codebases by meaning. Use search_code for functions and classes, "
    "search_docs for READMEs and documentation, find_similar to find code like a given file "
    "line or snippet. list_projects shows what is indexed; index_project adds or refreshes one."
)


class Result(BaseModel):
    project: str
    path: str = Field(description="file path relative to the project root")
    start_line: int = Field(description="first line of the chunk, 1-based")
    end_line: int = Field(description="last line of the chunk, inclusive")
    symbol: str | None = Field(None, description="function, class or heading the chunk covers")
    language: str
    score: float
    snippet: str

    @classmethod
    def of(cls, hit: SearchHit) -> Result:
        return cls(project=hit.project, path=hit.path, start_line=hit.start_line,
                   end_line=hit.end_line, symbol=hit.symbol, language=hit.language,
                   score=hit.score, snippet=hit.snippet)


class SearchResults(BaseModel):
    query: str
    table: str
    results: list[Result]
    reranked: bool | None = Field(None, description="whether the reranker role rescored the "
                                  "results (false: retrieval order, see reason)")
    reason: str | None = Field(None, description="why the results were not reranked")
    notes: list[str] = Field(default_factory=list, description="what the reader must know "
                             "besides the results, e.g. a damaged project the search skipped")


class ProjectEntry(BaseModel):
    name: str
    root: str | None
    code_chunks: int
    docs_chunks: int
    last_indexed: str | None
    indexing: bool
    damaged: str | None = Field(None, description="why the project cannot be read (searches "
                                "skip it); `fathom store verify NAME --repair` fixes it")


class ProjectList(BaseModel):
    projects: list[ProjectEntry]


class IndexSummary(BaseModel):
    project: str
    root: str
    full: bool
    resumed: bool
    files: int
    chunks: int
    embedded: int
    reused: int
    deleted: int
    skipped: dict[str, int]
    seconds: float
    code_chunks: int
    docs_chunks: int


class TableStatus(BaseModel):
    rows: int
    model: str | None
    width: int | None
    reference: str | None
    last_indexed: str | None
    shadow_rows: int | None
    provenance: dict[str, int]


class IndexStatusResult(BaseModel):
    project: str
    root: str | None
    tables: dict[str, TableStatus]
    last_run: dict[str, Any] | None
    jobs: list[dict[str, Any]]


def tool_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A `FathomError` is anticipated: its message (which names the fix) goes to the client."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except FathomError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:
            failure = failure_of(exc)  # a full disk, a lost database: anticipated, named
            if failure is None:
                raise
            raise ToolError(str(failure)) from exc

    return wrapper


def build_mcp_server(fathom: Fathom, *, router: Any = None) -> MCPServer:
    """An `MCPServer` whose tools call `fathom`. Run it with `run_stdio` / `run_http`, or
    mount `server.streamable_http_app()` in the ASGI app. `router` serves the stateless roles
    of `ask` and `explore` (the server passes its own; None: the standalone router)."""
    server = MCPServer(name="fathom", version=__version__, instructions=INSTRUCTIONS,
                       log_level="WARNING")

    async def reranked_search(query: str, project: str | None, table: str, k: int) -> SearchResults:
        # Vector + keyword candidates, rescored by the reranker role when one can serve; when
        # none can, the results still come back, flagged not reranked with the reason.
        from fathom.index import rerank

        if not isinstance(query, str) or not query.strip():
            raise ConfigError("the search query is empty: give a few words or an identifier")
        found = await rerank.search(fathom, query, project, table, k,
                                    reranker=router if router is not None else getattr(fathom, "router", None))
        return SearchResults(query=query, table=table, results=[Result.of(h) for h in found.hits],
                             reranked=found.reranked, reason=found.reason,
                             notes=list(found.notes))

    @server.tool(description="Search indexed source code by meaning and keywords. Returns "
                             "file paths with line ranges, the symbol and a snippet.")
    @tool_errors
    async def search_code(query: str, project: str | None = None, k: int = 10) -> SearchResults:
        return await reranked_search(query, project, "code", k)

    @server.tool(description="Search indexed documentation (README, Markdown, reST, "
                             "docstrings) by meaning and keywords.")
    @tool_errors
    async def search_docs(query: str, project: str | None = None, k: int = 10) -> SearchResults:
        return await reranked_search(query, project, "docs", k)

    @server.tool(description="Find code similar to the chunk at a file and line of a project "
                             "(path relative to the project root), or to a snippet.")
    @tool_errors
    async def find_similar(project: str, path: str | None = None, line: int | None = None,
                           snippet: str | None = None, k: int = 10,
                           table: Literal["code", "docs"] = "code") -> SearchResults:
        hits = await fathom.find_similar(project, path=path, line=line, snippet=snippet, k=k,
                                         table=table)
        query = snippet if snippet is not None else f"{path}:{line}"
        return SearchResults(query=query, table=table, results=[Result.of(h) for h in hits])

    @server.tool(description="Index (or re-index) a project folder on the server's machine. "
                             "Incremental by default: only changed chunks are embedded; "
                             "full=true rebuilds the index and swaps it in atomically.")
    @tool_errors
    async def index_project(path: str, project: str | None = None,
                            full: bool = False) -> IndexSummary:
        r = await fathom.index(path, project, full=full)
        return IndexSummary(project=r.project, root=r.root, full=r.full, resumed=r.resumed,
                            files=r.files, chunks=r.chunks, embedded=r.embedded, reused=r.reused,
                            deleted=r.deleted, skipped=r.skipped, seconds=round(r.elapsed_s, 2),
                            code_chunks=r.tables.get("code", 0),
                            docs_chunks=r.tables.get("docs", 0))

    @server.tool(description="List the indexed projects with their chunk counts.")
    @tool_errors
    async def list_projects() -> ProjectList:
        projects = await asyncio.to_thread(fathom.projects)
        return ProjectList(projects=[
            ProjectEntry(name=p.name, root=p.root, code_chunks=p.tables.get("code", 0),
                         docs_chunks=p.tables.get("docs", 0), last_indexed=p.last_indexed,
                         indexing=p.indexing, damaged=p.damaged)
            for p in projects])

    @server.tool(description="The index state of one project: rows per table, the encoder "
                             "that defines each table, provenance counts, the last run and "
                             "running jobs.")
    @tool_errors
    async def index_status(project: str) -> IndexStatusResult:
        s = await asyncio.to_thread(fathom.index_status, project)
        return IndexStatusResult(project=s.project, root=s.root,
                                 tables={t: TableStatus(**v) for t, v in s.tables.items()},
                                 last_run=s.last_run, jobs=s.jobs)

    from fathom.agents.mcp import register_agent_tools  # ask (code-assistant), explore (rlm)

    register_agent_tools(server, fathom, router)
    return server


async def run_stdio(fathom: Fathom) -> None:
    await build_mcp_server(fathom).run_stdio_async()


async def run_http(fathom: Fathom, host: str = "127.0.0.1", port: int = 8765,
                   path: str = "/mcp") -> None:
    await build_mcp_server(fathom).run_streamable_http_async(host=host, port=port,
                                                             streamable_http_path=path)
