"""The MCP face of Fathom: its tools on the official `mcp` SDK (v2), over stdio or streamable
HTTP.

What it owns: the tool names, their argument and result shapes (structured output; the
search tools' result shape is `fathom.server.search_answer`'s, which the dashboard shares),
and how they read to the agent that calls them: every parameter described in few words (its
default and bounds are in its schema; the listed schemas are `tool_schemas`' compact ones), a
title and annotations on every tool (read-only searches, the destructive
`drop_project`), a reason that concerns a whole
response stated once in it, docs hits that open on words, and `ask`/`explore` listed only
while some route can serve them (`index_project` and `cancel_index`, with their background
jobs, are `fathom.server.mcp_index`'s). Also
the translation of every anticipated failure — a bad argument, an unknown project, a path
that is not a folder, a refusal by the store — into the SDK's `ToolError`, whose message
reaches the client as an `is_error` result. The server keeps serving after one.

What it refuses to do: hold any logic of its own (every tool is one call on the `Fathom`
composition root), write anything to stdout in stdio mode (that stream is the protocol), or
let a traceback reach a client (an unexpected exception is the SDK's generic "Error executing
tool …", and is logged on stderr).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from fathom import __version__
from fathom.errors import FathomError, OutOfRange
from fathom.index.request import Group, K, Kind, Language, PathGlob, Query, Ref, SearchRequest
from fathom.index.store import UnknownProject
from fathom.server.answer_tokens import DEFAULT_MAX_TOKENS
from fathom.server.git_routes import register_git_tools
from fathom.server.mcp_agents import register_agent_tools  # ask (code-assistant), explore (rlm)
from fathom.server.mcp_calls import register_call_tools  # find_calls
from fathom.server.mcp_common import MaxTokens, PageCursor, ProjectName, ProjectOpt, tool_errors
from fathom.server.mcp_index import JobView, job_view, register_index_tools
from fathom.server.mcp_symbols import register_symbol_tools  # find_symbol, find_references, outline
from fathom.server.read_code import CodeRead, read_lines, read_resource
from fathom.server.search_answer import RESOURCE_TEMPLATE, SearchResults
from fathom.server.search_pages import Rankings, search_page, similar_page, tool_result
from fathom.server.stdio import loop_stdin
from fathom.server.tool_listing import ToolListing
from fathom.server.tool_schemas import compact_tool
from fathom.service import MAX_LINE, Fathom
from fathom.service.background import BackgroundIndex

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Fathom searches indexed codebases by meaning. Use search_code for functions and classes, "
    "search_docs for READMEs and documentation, find_similar to find code like a given file "
    "line or snippet; read_code reads a hit's lines (by its id) or any range of an indexed "
    "file. find_symbol finds where a name is defined, find_references where it is used, and "
    "outline lists a file's definitions. list_projects shows what is indexed; index_project "
    "adds or refreshes one. "
    "Indexes of watched projects follow file edits within seconds, with no re-index needed."
)


READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


class ProjectEntry(BaseModel):
    name: str
    root: str | None = Field(description="the project folder on the server's machine")
    code_chunks: int
    docs_chunks: int
    last_indexed: str | None = Field(description="ISO 8601, UTC")
    indexing: bool = Field(description="a run builds its index (a re-index: the old answers)")
    state: str = Field("indexed", description="indexed, indexing or damaged")
    progress: str | None = Field(None, description="the running index job's progress")
    watch: str = Field(
        description="live sync: watching, syncing, waiting (a failed sync is "
        "retried), off, or not watched by this server"
    )
    damaged: str | None = Field(
        None,
        description="why the project cannot be read (searches "
        "skip it); `fathom store verify NAME --repair` fixes it",
    )


class ProjectList(BaseModel):
    projects: list[ProjectEntry]


class TableStatus(BaseModel):
    rows: int
    model: str | None
    width: int | None
    reference: str | None
    last_indexed: str | None
    shadow_rows: int | None
    provenance: dict[str, int] = Field(description="rows per `provider|verdict` that wrote them")


class WatchStatus(BaseModel):
    enabled: bool = Field(description="the project's live sync setting")
    state: str = Field(
        description="watching, syncing, waiting (retrying a failed sync), "
        "missing (folder not found), off, or not watched"
    )
    detail: str | None = None
    root: str | None = None
    pending: int | None = Field(None, description="changed files not yet synced")
    syncs: int | None = Field(None, description="sync jobs finished since the watch began")
    last_sync: str | None = Field(None, description="ISO 8601, UTC")
    last_job: str | None = None
    last_error: str | None = None
    retry_at: str | None = Field(None, description="when a failed sync is retried, ISO 8601")


class IndexStatusResult(BaseModel):
    project: str
    root: str | None
    tables: dict[str, TableStatus]
    last_run: dict[str, Any] | None
    jobs: list[dict[str, Any]]
    watch: WatchStatus
    include: list[str] = Field(description="the project's include globs")
    job: JobView | None = Field(None, description="the job asked for with `job`")
    state: str = Field("indexed", description="indexed, indexing, or how a first index ended")
    progress: str | None = Field(None, description="the running index job's progress")


class DropResult(BaseModel):
    project: str
    dropped: bool
    rows: dict[str, int] = Field(description="rows removed per table")
    root: str | None = Field(description="the folder it was indexed from (left untouched)")


_BOUND_ERRORS = {
    "greater_than_equal",
    "less_than_equal",
    "greater_than",
    "less_than",
    "int_type",
    "int_parsing",
    "int_from_float",
}


def _bounds(schema: dict[str, Any], name: str) -> tuple[int, int] | None:
    """The integer bounds the tool's input schema gives parameter `name`, if it has both."""
    prop = schema.get("properties", {}).get(name, {})
    for part in [prop, *prop.get("anyOf", [])]:
        if part.get("type") == "integer" and "minimum" in part and "maximum" in part:
            return int(part["minimum"]), int(part["maximum"])
    return None


def argument_problems(tool: str, schema: dict[str, Any], exc: ValidationError) -> str:
    """One line naming every argument of a `tool` call that failed its schema, and why."""
    problems = []
    for err in exc.errors():
        name = ".".join(str(part) for part in err["loc"]) or "arguments"
        bounds = _bounds(schema, str(err["loc"][0])) if err["loc"] else None
        if bounds is not None and err["type"] in _BOUND_ERRORS:
            problems.append(str(OutOfRange(name, err.get("input"), *bounds)))
        else:
            msg = err["msg"]
            problems.append(f"{name}: {msg[:1].lower()}{msg[1:]}")
    return f"invalid arguments for {tool}: " + "; ".join(problems)


class ToolServer(MCPServer):
    """An `MCPServer` whose tools may be listed conditionally: a tool registered with
    `only_when(name, predicate)` appears in tools/list only while the predicate holds (it
    still answers a call, with its refusal)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._conditions: dict[str, Callable[[], bool]] = {}

    def only_when(self, name: str, predicate: Callable[[], bool]) -> None:
        self._conditions[name] = predicate

    async def run_stdio_async(self) -> None:
        """Serve over stdio, stdin read on the event loop (`fathom.server.stdio`): Ctrl-C or
        SIGTERM ends the session at once, whether or not the host ever writes again."""
        async with loop_stdin() as lines, stdio_server(stdin=cast(Any, lines)) as (read, write):
            lowlevel = self._lowlevel_server
            await lowlevel.run(read, write, lowlevel.create_initialization_options())

    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        return [compact_tool(t) for t in tools if self._listed(t.name)]

    def listed_names(self) -> frozenset[str]:
        """The names `list_tools` lists now, without building a schema: what the check after
        every request compares (`fathom.server.tool_listing`)."""
        return frozenset(t.name for t in self._tool_manager.list_tools() if self._listed(t.name))

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # Arguments that fail the schema the client was shown: the SDK's text is pydantic's
            # report; say it the way every other refusal is said, naming argument and bounds.
            if isinstance(exc.__cause__, ValidationError):
                tool = self._tool_manager.get_tool(name)
                schema = tool.parameters if tool is not None else {}
                raise ToolError(argument_problems(name, schema, exc.__cause__)) from None
            raise

    def _listed(self, name: str) -> bool:
        predicate = self._conditions.get(name)
        if predicate is None:
            return True
        try:
            return bool(predicate())
        except Exception:  # a broken check hides the tool, never the list
            log.exception("listing check of tool %s failed", name)
            return False


def build_mcp_server(fathom: Fathom, *, router: Any = None) -> MCPServer:
    """An `MCPServer` whose tools call `fathom`. Run it with `run_stdio`, or
    mount `server.streamable_http_app()` in the ASGI app. `router` serves the stateless roles
    of `ask` and `explore` (the server passes its own; None: the standalone router)."""
    bus = InMemorySubscriptionBus()  # where 2026-07-28 clients hear of tool list changes
    server = ToolServer(
        name="fathom", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING", subscriptions=bus
    )
    # Registered in this order, which is the order `tools/list` answers in.
    rankings = Rankings()  # the rankings later pages of a search come from
    _search_tools(server, fathom, router, rankings)
    _similar_tool(server, fathom, rankings)
    _read_tools(server, fathom)
    register_symbol_tools(server, fathom)
    register_call_tools(server, fathom)  # find_calls, listed once some project has symbols
    runs = register_index_tools(server, fathom)  # index_project, cancel_index
    register_git_tools(server, fathom)  # add_git_project (a writer: tokens that may index)
    _project_tools(server, fathom, runs)
    register_agent_tools(server, fathom, router)
    ToolListing(server, bus).install().watch(getattr(router, "registry", None))
    return server


def _search_tools(server: MCPServer, fathom: Fathom, router: Any, rankings: Rankings) -> None:
    """`search_code` and `search_docs`, reranked by `router` (or the service's own)."""

    async def paged_search(request: SearchRequest, cursor: str | None, max_tokens: int) -> CallToolResult:
        reranker = router if router is not None else getattr(fathom, "router", None)
        return tool_result(
            await search_page(
                fathom, rankings, request, reranker=reranker, cursor=cursor, max_tokens=max_tokens
            )
        )

    @server.tool(
        title="Search code",
        annotations=READ_ONLY,
        description="Search indexed source code by meaning and keywords. Hits best "
        "first: path, lines, symbol, scores and a snippet (whole chunks "
        "when max_tokens allows); read_code(id) reads a hit's lines.",
    )
    @tool_errors
    async def search_code(
        query: Query,
        project: ProjectOpt = None,
        k: K = 10,
        language: Language = None,
        path: PathGlob = None,
        kind: Kind = None,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
        cursor: PageCursor = None,
        ref: Ref = None,
        group: Group = "file",
    ) -> Annotated[CallToolResult, SearchResults]:
        return await paged_search(
            SearchRequest.of(
                query, project, "code", k, language=language, path=path, kind=kind, group=group, ref=ref
            ),
            cursor,
            max_tokens,
        )

    @server.tool(
        title="Search documentation",
        annotations=READ_ONLY,
        description="Search indexed documentation (README, Markdown, reST, "
        "docstrings) by meaning and keywords; answers as search_code "
        "(`kind`: the symbol a docstring documents).",
    )
    @tool_errors
    async def search_docs(
        query: Query,
        project: ProjectOpt = None,
        k: K = 10,
        language: Language = None,
        path: PathGlob = None,
        kind: Kind = None,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
        cursor: PageCursor = None,
        ref: Ref = None,
        group: Group = "file",
    ) -> Annotated[CallToolResult, SearchResults]:
        return await paged_search(
            SearchRequest.of(
                query, project, "docs", k, language=language, path=path, kind=kind, group=group, ref=ref
            ),
            cursor,
            max_tokens,
        )


def _similar_tool(server: MCPServer, fathom: Fathom, rankings: Rankings) -> None:
    """`find_similar`: the chunks nearest to a chunk, or to a snippet, by vector alone."""

    @server.tool(
        title="Find similar code",
        annotations=READ_ONLY,
        description="Find the chunks nearest by meaning (cosine) to the chunk at "
        "`path` + `line`, or to a `snippet`, the origin left out; answers "
        "as search_code.",
    )
    @tool_errors
    async def find_similar(
        project: ProjectName,
        path: Annotated[
            str | None, Field(description="A file path from the project root, with `line`.", max_length=1000)
        ] = None,
        line: Annotated[
            int | None,
            Field(
                description="A 1-based line of `path`: its innermost chunk is the origin.", ge=1, le=MAX_LINE
            ),
        ] = None,
        snippet: Annotated[
            str | None,
            Field(description="Code or text to match, instead of path and line.", max_length=20000),
        ] = None,
        k: K = 10,
        table: Annotated[Literal["code", "docs"], Field(description="The table to search.")] = "code",
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
        cursor: PageCursor = None,
    ) -> Annotated[CallToolResult, SearchResults]:
        origin = snippet if snippet is not None else f"{path}:{line}"
        return tool_result(
            await similar_page(
                fathom,
                rankings,
                lambda: fathom.find_similar(project, path=path, line=line, snippet=snippet, k=k, table=table),
                origin,
                table,
                search=["similar", project, origin, k, table],
                cursor=cursor,
                max_tokens=max_tokens,
            )
        )


def _read_tools(server: MCPServer, fathom: Fathom) -> None:
    """`read_code` and the `fathom://` resource template (`fathom.server.read_code`)."""

    @server.tool(
        title="Read code",
        annotations=READ_ONLY,
        description="Read an indexed file's lines as indexed, numbered: a search "
        "hit's by its `id`, or `project` + `path` and a line range. Says "
        "if the file changed since, and where to read on.",
    )
    @tool_errors
    async def read_code(
        project: ProjectOpt = None,
        path: Annotated[
            str | None, Field(description="A file path from the project root.", max_length=1000)
        ] = None,
        start_line: Annotated[
            int | None, Field(description="First line, 1-based; null: 1.", ge=1, le=MAX_LINE)
        ] = None,
        end_line: Annotated[
            int | None, Field(description="Last line, inclusive; null: the end.", ge=1, le=MAX_LINE)
        ] = None,
        id: Annotated[
            str | None, Field(description="A search hit's `id`, instead of project and path.", max_length=300)
        ] = None,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> Annotated[CallToolResult, CodeRead]:
        answer = await asyncio.to_thread(
            read_lines,
            fathom,
            project=project,
            path=path,
            start_line=start_line,
            end_line=end_line,
            hit=id,
            max_tokens=max_tokens,
        )
        return CallToolResult(
            content=[TextContent(type="text", text=answer.numbered())],
            structured_content=answer.read.model_dump(mode="json"),
        )

    @server.resource(
        RESOURCE_TEMPLATE,
        name="indexed_file",
        title="Indexed file",
        mime_type="text/plain",
        description="Lines of an indexed file, exactly as indexed: "
        "fathom://PROJECT/PATH, optionally ?lines=START-END (1-based, "
        "inclusive). Every search hit links its lines.",
    )
    async def indexed_file(project: str, path: str, lines: str | None = None) -> str:
        try:
            return await read_resource(fathom, project, path, lines)
        except FathomError as exc:
            raise ResourceError(str(exc)) from exc


def _project_tools(server: MCPServer, fathom: Fathom, runs: BackgroundIndex) -> None:
    """`list_projects`, `index_status` and `drop_project`."""

    @server.tool(
        title="List projects",
        annotations=READ_ONLY,
        description="The indexed projects: chunk counts, last indexed, live sync state.",
    )
    @tool_errors
    async def list_projects() -> ProjectList:
        def load() -> ProjectList:
            return ProjectList(
                projects=[
                    ProjectEntry(
                        name=p.name,
                        root=p.root,
                        code_chunks=p.tables.get("code", 0),
                        docs_chunks=p.tables.get("docs", 0),
                        last_indexed=p.last_indexed,
                        indexing=p.indexing,
                        watch=fathom.watch_state(p.name)["state"],
                        damaged=p.damaged,
                        state=p.state,
                        progress=p.progress,
                    )
                    for p in fathom.projects()
                ]
            )

        return await asyncio.to_thread(load)

    @server.tool(
        title="Index status",
        annotations=READ_ONLY,
        description="One project's index: rows and encoder per table, the last "
        "run, jobs, live sync; with `job`, that job's progress.",
    )
    @tool_errors
    async def index_status(
        project: ProjectName,
        job: Annotated[
            str | None, Field(description="An index job's id (index_project's `job.id`).", max_length=64)
        ] = None,
    ) -> IndexStatusResult:
        asked = job_view(runs.find(project, job)) if job is not None else None
        try:
            s = await asyncio.to_thread(fathom.index_status, project)
        except UnknownProject:
            if asked is None:
                raise
            # A first index that ended without a table (failed, cancelled): its job is all
            # there is to show.
            return IndexStatusResult(
                project=project,
                root=asked.root,
                tables={},
                last_run=None,
                jobs=[],
                watch=WatchStatus.model_validate({"enabled": False, "state": "off"}),
                include=[],
                job=asked,
                state=asked.state,
                progress=None,
            )
        return IndexStatusResult(
            project=s.project,
            root=s.root,
            tables={t: TableStatus(**v) for t, v in s.tables.items()},
            last_run=s.last_run,
            jobs=s.jobs,
            watch=WatchStatus(**s.watch),
            include=s.include,
            job=asked,
            state=s.state,
            progress=s.progress,
        )

    @server.tool(
        title="Drop a project",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
        description="Remove a project from the index (tables, record, jobs, live "
        "sync); its folder is untouched. Cannot be undone.",
    )
    @tool_errors
    async def drop_project(project: ProjectName) -> DropResult:
        return DropResult(**await fathom.drop(project))


async def run_stdio(fathom: Fathom, *, watch: bool = True) -> None:
    """Serve over stdio; with `watch`, the served projects' indexes follow their files."""
    if watch:
        await fathom.start_watching()
    await build_mcp_server(fathom).run_stdio_async()
