"""The symbol tools of the MCP server: `find_symbol`, `find_references` and `outline`.

What it owns: their names, descriptions, parameters (each with its default and bounds) and
result shapes (structured output, and a text block of one line an item, so the SDK does not
send the structured answer twice), and holding each answer to `max_tokens` the way the search
pages are held (`fathom.server.answer_tokens` counts what the client receives), with a cursor
for the rest (`fathom.index.pages`: the cursor names the query and the list it cut, and is
refused when the index changed in between).

What it refuses to do: find anything itself (`fathom.service.symbols` does, in the caller's
scope), or run a query on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from fathom.index.pages import Cursor, digest
from fathom.server.answer_tokens import (
    DEFAULT_MAX_TOKENS,
    ENVELOPE,
    AnswerTokens,
    tokens_of,
)
from fathom.server.mcp_common import MaxTokens, PageCursor, ProjectOpt, tool_errors
from fathom.server.search_answer import resource_uri
from fathom.service import symbols

if TYPE_CHECKING:
    from fathom.service.ports import SymbolSource

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

Name = Annotated[
    str,
    Field(
        description="A name as the code writes it (`send`) or qualified (`Client.send`, `::`). Exact.",
        min_length=1,
        max_length=symbols.MAX_NAME,
    ),
]
SymbolKind = Annotated[
    Literal["function", "method", "class", "module", "type", "macro", "other"] | None,
    Field(
        description="Only this kind (`class` takes structs, traits, enums; `module` namespaces); null: any."
    ),
]
SymbolLanguage = Annotated[
    str | None, Field(description="Only this language (`python`, `go`…); null: any.", max_length=40)
]


class SymbolHit(BaseModel):
    project: str
    path: str = Field(description="file path relative to the project root")
    language: str
    name: str
    qualname: str = Field(
        description="the name qualified by the definitions it sits in, dotted in every language"
    )
    kind: str
    signature: str = Field(description="the definition's head, on one line")
    start_line: int = Field(description="1-based")
    end_line: int = Field(description="inclusive")
    uri: str = Field(
        description="the resource URI of the definition's lines, for resources/read; read_code reads them too"
    )


class SymbolResults(BaseModel):
    query: str
    found: int = Field(description="definitions found in all")
    truncated: bool = Field(
        default=False, description="the name is defined so often that only the first definitions are listed"
    )
    results: list[SymbolHit]
    notes: list[str] = Field(
        default_factory=list, description="projects left out (damaged), each named with the fix"
    )
    next_cursor: str | None = Field(
        default=None, description="more did not fit max_tokens: call again with this cursor; null: all shown"
    )
    tokens: int = Field(default=0, description="tokens of the answer, as max_tokens counts them")


class Reference(BaseModel):
    project: str
    path: str
    language: str
    line: int = Field(description="1-based")
    column: int = Field(description="0-based, in characters")
    use: Literal["call", "import", "mention"] = Field(
        description="`call`: the name is what a call calls; `import`: an import names it; "
        "`mention`: any other use (an argument, an assignment, a type)"
    )
    enclosing: str | None = Field(
        description="the qualified name of the innermost definition holding it; null: the file's top level"
    )
    text: str = Field(description="the line, as indexed, trimmed")
    uri: str
    resolution: str = "name-only"  # resolved, likely or name-only (calls.RESOLUTIONS)


class ReferenceResults(BaseModel):
    query: str
    found: int = Field(description="usage sites found in all (calls first, then imports, then mentions)")
    truncated: bool = Field(
        default=False, description="the name is used so often that only the first sites are listed"
    )
    results: list[Reference]
    notes: list[str] = Field(
        default_factory=list, description="projects left out (damaged), each named with the fix"
    )
    next_cursor: str | None = None
    tokens: int = 0


class OutlineEntry(BaseModel):
    qualname: str
    name: str
    kind: str
    signature: str
    start_line: int
    end_line: int
    depth: int = Field(description="0 at the top of the file, 1 for a member, …")


class Outline(BaseModel):
    project: str
    path: str
    language: str | None
    found: int = Field(description="definitions in the file")
    results: list[OutlineEntry]
    next_cursor: str | None = None
    tokens: int = 0


COUNT_BATCH = 32  # items counted at once while a page fills
Page = TypeVar("Page", bound=BaseModel)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def _result(answer: BaseModel, head: str, lines: Sequence[str]) -> CallToolResult:
    """The answer as the client receives it: structured, and one line an item as its text."""
    more = getattr(answer, "next_cursor", None)
    tail = [f"More: call again with the same arguments and cursor={more!r}."] if more else []
    text = "\n".join([head, *lines, *tail])
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=answer.model_dump(mode="json")
    )


def paged(
    answer: Page,
    items: Sequence[BaseModel],
    line: Callable[[Any], str],
    head: str,
    *,
    search: Sequence[Any],
    cursor: str | None,
    max_tokens: int,
    tokens: AnswerTokens,
) -> CallToolResult:
    """The page of `items` that starts where `cursor` says and, with `answer`'s other fields
    and the text block, fits `max_tokens` (always at least one item)."""
    search_digest = digest(list(search))
    ranking = digest([i.model_dump_json() for i in items])
    start = 0
    if cursor is not None:
        at = Cursor.decode(cursor)
        at.check(search_digest, ranking, len(items))
        start = at.offset
    rest = items[start:]
    fixed = (
        ENVELOPE + tokens.total(head) + tokens.total(_json(answer.model_dump(mode="json"))) + 40
    )  # the cursor and its line
    taken, used = 0, fixed
    # Counted a batch at a time: a name used a thousand times fills a page with the first few
    # dozen, and counting the rest would be most of the answer's time.
    while taken < len(rest) and used <= max_tokens:
        batch = rest[taken : taken + COUNT_BATCH]
        costs = tokens.count([_json(i.model_dump(mode="json")) + line(i) for i in batch])
        for cost in costs:
            if taken and used + cost + 2 > max_tokens:
                used = max_tokens + 1
                break
            taken, used = taken + 1, used + cost + 2
    while True:  # counted whole, as sent: the sum of the parts tokenizes a little apart
        end = start + taken
        page = answer.model_copy(
            update={
                "results": list(rest[:taken]),
                "next_cursor": Cursor(search_digest, end, ranking).encode() if end < len(items) else None,
            }
        )
        result = _result(page, head, [line(i) for i in rest[:taken]])
        sent = ENVELOPE + tokens.total(
            _json(result.model_dump(mode="json", by_alias=True, exclude_unset=True))
        )
        if sent <= max_tokens or taken <= 1:
            page = page.model_copy(update={"tokens": sent})
            return _result(page, head, [line(i) for i in rest[:taken]])
        taken -= 1


@functools.lru_cache(maxsize=4096)
def _file_uri(project: str, path: str) -> str:
    # Quoting a path is most of the cost of a thousand references in one file.
    return resource_uri(project, path)


def _symbol_line(s: SymbolHit) -> str:
    return f"{s.project}:{s.path}:{s.start_line}-{s.end_line} {s.qualname} ({s.kind}) {s.signature}"


def _reference_line(r: Reference) -> str:
    where = f" in {r.enclosing}" if r.enclosing else ""
    return f"{r.project}:{r.path}:{r.line} {r.use} [{r.resolution}]{where}: {r.text}"


def _outline_line(e: OutlineEntry) -> str:
    return f"{'  ' * e.depth}{e.start_line}-{e.end_line} {e.qualname} ({e.kind}) {e.signature}"


def register_symbol_tools(server: MCPServer, fathom: SymbolSource) -> None:
    """`find_symbol`, `find_references` and `outline`, in that order."""
    _symbol_tool(server, fathom)
    _references_tool(server, fathom)
    _outline_tool(server, fathom)


def _symbol_tool(server: MCPServer, fathom: SymbolSource) -> None:
    @server.tool(
        title="Find a symbol",
        annotations=READ_ONLY,
        description="Find where a function, method, class or other symbol is defined, "
        "by name: each definition's signature, kind, path and lines.",
    )
    @tool_errors
    async def find_symbol(
        name: Name,
        project: ProjectOpt = None,
        kind: SymbolKind = None,
        language: SymbolLanguage = None,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
        cursor: PageCursor = None,
    ) -> Annotated[CallToolResult, SymbolResults]:
        def run() -> CallToolResult:
            found = symbols.find_symbol(fathom, name, project=project, kind=kind, language=language)
            hits = [
                SymbolHit(
                    project=r.project,
                    path=r.path,
                    language=r.language,
                    name=r.name,
                    qualname=r.qualname,
                    kind=r.kind,
                    signature=r.signature,
                    start_line=r.start_line,
                    end_line=r.end_line,
                    uri=resource_uri(r.project, r.path, r.start_line, r.end_line),
                )
                for r in found.rows
            ]
            head = f"{len(hits)}{'+' if found.truncated else ''} definition(s) of {name!r}" + (
                " (read one with read_code or its uri)" if hits else "; try search_code to find it by meaning"
            )
            return paged(
                SymbolResults(
                    query=name, found=len(hits), truncated=found.truncated, results=[], notes=found.notes
                ),
                hits,
                _symbol_line,
                head,
                search=["symbol", name, project, kind, language],
                cursor=cursor,
                max_tokens=max_tokens,
                tokens=tokens_of(fathom),
            )

        return await asyncio.to_thread(run)


def _references_tool(server: MCPServer, fathom: SymbolSource) -> None:
    @server.tool(
        title="Find references",
        annotations=READ_ONLY,
        description="Find where an identifier is used (definitions: find_symbol): "
        "each site's line and enclosing symbol, graded resolved, likely "
        "or name-only.",
    )
    @tool_errors
    async def find_references(
        name: Name,
        project: ProjectOpt = None,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
        cursor: PageCursor = None,
    ) -> Annotated[CallToolResult, ReferenceResults]:
        def run() -> CallToolResult:
            found = symbols.find_references(fathom, name, project=project)
            rows, truncated = found.rows, found.truncated
            refs = [
                Reference(
                    project=r.project,
                    path=r.path,
                    language=r.language,
                    line=r.line,
                    column=r.column,
                    use=r.use,
                    enclosing=r.enclosing,
                    resolution=r.resolution,
                    text=r.text[:300],
                    uri=f"{_file_uri(r.project, r.path)}?lines={r.line}-{r.line}",
                )
                for r in rows
            ]
            head = (
                f"{len(refs)}{'+' if truncated else ''} usage(s) of {name!r}, resolved "
                f"first, then likely, then name-only"
            )
            return paged(
                ReferenceResults(
                    query=name, found=len(refs), truncated=truncated, results=[], notes=found.notes
                ),
                refs,
                _reference_line,
                head,
                search=["references", name, project],
                cursor=cursor,
                max_tokens=max_tokens,
                tokens=tokens_of(fathom),
            )

        return await asyncio.to_thread(run)


def _outline_tool(server: MCPServer, fathom: SymbolSource) -> None:
    @server.tool(
        title="Outline a file",
        annotations=READ_ONLY,
        description="The definitions of one indexed code file in order, members "
        "under their class: qualified name, kind, signature, lines.",
    )
    @tool_errors
    async def outline(
        path: Annotated[
            str,
            Field(
                description="Its path from the project root, or a file "
                "or module name naming one indexed file "
                "(`_client.py`, `httpx._client`).",
                min_length=1,
                max_length=1000,
            ),
        ],
        project: ProjectOpt = None,
        max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
        cursor: PageCursor = None,
    ) -> Annotated[CallToolResult, Outline]:
        def run() -> CallToolResult:
            found_project, found_path, rows = symbols.outline(fathom, path, project=project)
            entries = [
                OutlineEntry(
                    qualname=r.qualname,
                    name=r.name,
                    kind=r.kind,
                    signature=r.signature,
                    start_line=r.start_line,
                    end_line=r.end_line,
                    depth=r.depth,
                )
                for r in rows
            ]
            language = rows[0].language if rows else None
            head = f"{found_project}:{found_path}: {len(entries)} definition(s), in order"
            return paged(
                Outline(
                    project=found_project, path=found_path, language=language, found=len(entries), results=[]
                ),
                entries,
                _outline_line,
                head,
                search=["outline", path, project],
                cursor=cursor,
                max_tokens=max_tokens,
                tokens=tokens_of(fathom),
            )

        return await asyncio.to_thread(run)
