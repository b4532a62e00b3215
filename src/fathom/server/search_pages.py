"""Search answers held to a token budget, in pages, and as the MCP client receives them.

What it owns: one page of a search (`search_page`, from a checked `SearchRequest`, through
the service's one search path `Searches.ranking`) or of `find_similar` (`similar_page`), and
filling it (`page`): the ranking's hits (each keeps its whole chunk text until here) in rank
order while the budget lasts (always at least one), each made a wire `Result` only as the
page takes it, then each snippet grown to its whole chunk, in rank order, where the rest of
the budget allows; the cursor for the rest (`fathom.index.pages`);
and the tool result a client receives (`tool_result`): the structured answer, a short text
summary (one line a hit: where it is and its id) and a `resource_link` to every hit's lines.

Why the text block is a summary: the SDK would otherwise put the whole structured answer into
the text block again as JSON, doubling every reply (measured over HTTP, a 15-hit page of
`rich`: 18.4 kB received, against 33.7 kB with the SDK's JSON text block; see
docs/benchmarks.md). A client that reads only text blocks still gets each hit's place, id
and link, and opens its lines with `read_code` or the link.

The budget counts what the client is sent: each result as JSON, its summary line and its
link, and the answer's fields around them (`fathom.server.answer_tokens` counts).

Which ranking a later page comes from: the one the first page cut, kept in memory
(`Rankings`); a ranking no longer kept is searched again and served only when it came out
the same (the cursor's digests check it).

What it refuses to do: rank anything itself, or serve a kept ranking to another scope.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from mcp.types import CallToolResult, ResourceLink, TextContent

from fathom import scope
from fathom.index.pages import Cursor, digest
from fathom.index.request import SearchRequest
from fathom.index.results import SearchHit, docs_snippet, files_line, files_of
from fathom.server.answer_tokens import ENVELOPE, AnswerTokens, tokens_of
from fathom.server.search_answer import (
    FileGroup,
    Result,
    SearchResults,
    answer_head,
    hit_id,
    results_of,
    similar_head,
)

if TYPE_CHECKING:
    from fathom.service.ports import Configured, SearchService


def summary_line(r: Result) -> str:
    where = f"{r.project}:{r.path}:{r.start_line}-{r.end_line}"
    what = f" {r.symbol}" + (f" ({r.kind})" if r.kind else "") if r.symbol else ""
    return f"{r.rank}. {where}{what}" + (f"  id={r.id}" if r.id else "")


def link_of(r: Result) -> ResourceLink:
    return ResourceLink(
        type="resource_link", uri=r.uri, name=f"{r.path}:{r.start_line}-{r.end_line}", mime_type="text/plain"
    )


def _json(value: Any) -> str:
    # As the SDK sends it: compact, and every non-ASCII character escaped (`\u2502`), which
    # costs a box-drawing table several tokens a character.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def _result_costs(tokens: AnswerTokens, results: Sequence[Result]) -> list[int]:
    """Tokens each result costs the client: its JSON, its summary line and its link."""
    texts = [
        _json(r.model_dump(mode="json"))
        + summary_line(r)
        + _json(link_of(r).model_dump(mode="json", by_alias=True, exclude_unset=True))
        for r in results
    ]
    return tokens.count(texts)


def page(
    ranked: Ranked, *, search: Sequence[Any], cursor: str | None, max_tokens: int, tokens: AnswerTokens
) -> SearchResults:
    """The page of `ranked` (the answer's head, and every hit of the search, best first, each
    with its whole chunk) that starts where `cursor` says and fits `max_tokens`; the hits it
    holds are mapped to the wire here, and only they. `search` is the search's arguments: a
    cursor given with others is refused."""
    answer, hits = ranked
    search_digest = digest(list(search))
    ranking = digest([_key(h) for h in hits])
    start = 0
    if cursor is not None:
        at = Cursor.decode(cursor)
        at.check(search_digest, ranking, len(hits))
        start = at.offset
    head = answer.model_copy(
        update={
            "results": [],
            "found": len(hits),
            "next_cursor": Cursor(search_digest, 1, "x" * 16).encode(),
            "tokens": max_tokens,
        }
    )
    used = ENVELOPE + sum(tokens.count([_json(head.model_dump(mode="json")), "\n".join(head_lines(head))]))
    rest = hits[start:]
    costs: list[int] = []
    taken: list[Result] = []
    for batch in range(0, len(rest), _COSTED):  # costed a few at a time: a page stops early
        results = results_of(rest[batch : batch + _COSTED], start + batch + 1)
        more = _result_costs(tokens, results)
        for r, cost in zip(results, more, strict=True):
            if taken and used + cost > max_tokens:
                break
            taken.append(r)
            costs.append(cost)
            used += cost
        else:
            continue
        break
    whole, _ = _grown(
        taken, costs, [h.text for h in rest[: len(taken)]], answer.table, max_tokens - used, tokens
    )
    return _measured(answer, taken, whole, start, len(hits), search_digest, ranking, max_tokens, tokens)


def _key(hit: SearchHit) -> str:
    """A hit's identity in a ranking's digest (its id, as the client sees it)."""
    return (
        hit_id(hit.project, hit.table, hit.chunk_id)
        if hit.chunk_id
        else f"{hit.project}:{hit.path}:{hit.start_line}"
    )


def _measured(
    answer: SearchResults,
    originals: list[Result],
    shown: list[Result],
    start: int,
    found: int,
    search_digest: str,
    ranking: str,
    max_tokens: int,
    tokens: AnswerTokens,
) -> SearchResults:
    """The page as sent, counted whole once (the sum of its parts tokenizes a little apart
    from it); only when that is over `max_tokens` (rare: the parts were counted first), the
    last grown snippet shrinks back, else the last hit's other ranges (`also`) are left out,
    else the last hit goes to the next page, until it fits or one short hit is left.
    `originals` are the page's hits before their snippets grew."""
    while True:
        end = start + len(shown)
        next_cursor = Cursor(search_digest, end, ranking).encode() if end < found else None
        page = answer.model_copy(
            update={"results": shown, "found": found, "next_cursor": next_cursor, "tokens": 0}
        )
        sent = tool_result(page).model_dump(mode="json", by_alias=True, exclude_unset=True)
        used = ENVELOPE + tokens.total(_json(sent))
        grown = [i for i, r in enumerate(shown) if r.snippet != originals[i].snippet]
        if used <= max_tokens or (len(shown) == 1 and not grown and not shown[0].also):
            return page.model_copy(update={"tokens": used})
        if grown:
            shown = [*shown[: grown[-1]], originals[grown[-1]], *shown[grown[-1] + 1 :]]
        elif shown[-1].also and len(shown) == 1:
            shown = [shown[0].model_copy(update={"also": []})]
        else:
            shown = shown[:-1]


def _grown(
    taken: list[Result],
    costs: Sequence[int],
    texts: Sequence[str],
    table: str,
    left: int,
    tokens: AnswerTokens,
) -> tuple[list[Result], int]:
    """`taken` with each snippet grown to its whole chunk, in rank order, while `left`
    tokens allow; and the tokens left."""
    fulls = [(docs_snippet(t) if table == "docs" else t) if t else "" for t in texts]
    grown = [
        r.model_copy(update={"snippet": full, "whole": True}) if full and full != r.snippet else None
        for r, full in zip(taken, fulls, strict=True)
    ]
    new_costs = iter(_result_costs(tokens, [g for g in grown if g is not None]))
    out: list[Result] = []
    for r, cost, g, full in zip(taken, costs, grown, fulls, strict=True):
        if g is None:  # the snippet is the whole chunk already, or the chunk is not known
            out.append(r.model_copy(update={"whole": bool(full)}))
            continue
        extra = next(new_costs) - cost
        if extra <= left:
            out.append(g)
            left -= extra
        else:
            out.append(r)
    return out, left


def head_lines(answer: SearchResults) -> list[str]:
    """The summary's first line (and, with a cursor, its last): what the page holds."""
    shown = answer.results
    if shown:
        span = f"results {shown[0].rank}-{shown[-1].rank} of {answer.found or len(shown)}"
    else:
        span = "no results"
    head = (
        f"{span} for {answer.query!r} ({answer.table}), best first; every field is in the "
        f"structured result. Read a hit's lines with read_code(id=…)."
    )
    return [head] + ([more_line(answer.next_cursor)] if answer.next_cursor and not shown else [])


def more_line(cursor: str) -> str:
    return f"More: call again with the same arguments and cursor={cursor!r}."


def with_files(answer: SearchResults) -> SearchResults:
    """The answer with its results grouped by file (`files_of`), best file first."""
    files = [
        FileGroup(project=f.project, path=f.path, hits=f.hits, best_rank=f.best_rank)
        for f in files_of(answer.results)
    ]
    return answer.model_copy(update={"files": files})


def tool_result(answer: SearchResults) -> CallToolResult:
    """The answer as the client receives it: structured, a summary (with a line naming the
    file that holds several of the hits), a link to every hit."""
    answer = with_files(answer)
    lines = head_lines(answer) + [summary_line(r) for r in answer.results]
    grouped = files_line(files_of(answer.results), len(answer.results))
    if grouped:
        lines.insert(1, grouped)
    if answer.next_cursor:
        lines.append(more_line(answer.next_cursor))
    content: list[Any] = [TextContent(type="text", text="\n".join(lines))]
    content += [link_of(r) for r in answer.results]
    return CallToolResult(content=content, structured_content=answer.model_dump(mode="json"))


Ranked = tuple[SearchResults, list[SearchHit]]  # an answer's head, and every hit with its text
_COSTED = 16  # hits mapped and costed at once while a page fills


class Rankings:
    """The rankings lately cut into pages, so that a later page comes from the very ranking
    the first one cut. Running a search again does not promise it: the approximate index and
    the in-memory matrix may answer one query a little apart at the tail (seen: the 84th of
    100 hits differed between two runs on an unchanged index). A ranking not kept (evicted,
    or another server process) is searched again, and the cursor's ranking digest refuses
    it if it came out different. Keyed by the caller's scope too: a ranking is never served
    to a caller who could not see it."""

    def __init__(self, size: int = 32):
        self.size = size
        self._kept: OrderedDict[tuple[Any, ...], Ranked] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Ranked | None:
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
            return found

    def put(self, key: tuple[Any, ...], ranked: Ranked) -> None:
        with self._lock:
            self._kept[key] = ranked
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)


async def paged(
    rankings: Rankings,
    run: Callable[[], Awaitable[Ranked]],
    *,
    search: Sequence[Any],
    cursor: str | None,
    max_tokens: int,
    tokens: AnswerTokens,
) -> SearchResults:
    """One page of a search: `run` searches (unless a cursor names a ranking kept), `search`
    is its arguments (what a cursor must be given with)."""
    kept = None
    if cursor is not None:
        at = Cursor.decode(cursor)
        kept = rankings.get((scope.current(), at.search, at.ranking))
    ranked = kept if kept is not None else await run()
    out = page(ranked, search=search, cursor=cursor, max_tokens=max_tokens, tokens=tokens)
    if out.next_cursor is not None and kept is None:
        at = Cursor.decode(out.next_cursor)
        rankings.put((scope.current(), at.search, at.ranking), ranked)
    return out


async def search_page(
    service: SearchService,
    rankings: Rankings,
    request: SearchRequest,
    *,
    reranker: Any,
    cursor: str | None,
    max_tokens: int,
) -> SearchResults:
    """One page of what `search_code` / `search_docs` found for `request` (at a git ref, or
    over a project from git, the git side answers: `Searches.ranking`)."""

    async def run() -> Ranked:
        found = await service.searches.ranking(request, reranker=reranker)
        return answer_head(found, request), list(found.hits)

    return await paged(
        rankings,
        run,
        cursor=cursor,
        max_tokens=max_tokens,
        search=request.arguments(),
        tokens=tokens_of(service),
    )


async def similar_page(
    service: Configured,
    rankings: Rankings,
    find: Callable[[], Awaitable[Any]],
    query: str,
    table: str,
    *,
    search: Sequence[Any],
    cursor: str | None,
    max_tokens: int,
) -> SearchResults:
    """One page of what `find_similar` found (`find` runs it)."""

    async def run() -> Ranked:
        hits: Sequence[SearchHit] = await find()
        return similar_head(query, table), list(hits)

    return await paged(
        rankings, run, search=search, cursor=cursor, max_tokens=max_tokens, tokens=tokens_of(service)
    )
