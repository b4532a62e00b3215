"""Search answers held to a token budget, in pages, and as the MCP client receives them.

What it owns: filling one page of a search answer (`page`): hits in rank order while the
budget lasts (always at least one), then each hit's snippet grown to its whole chunk, in rank
order, where the rest of the budget allows; the cursor for the rest (`fathom.index.pages`);
and the tool result a client receives (`tool_result`): the structured answer, a short text
summary (one line a hit: where it is and its id) and a `resource_link` to every hit's lines.

Why the text block is a summary: the SDK would otherwise put the whole structured answer into
the text block again as JSON, doubling every reply (measured: a 100-hit answer went from
about 38 kB to 77 kB on the wire). A client that reads only text blocks still gets each
hit's place, id and link, and opens its lines with `read_code` or the link.

The budget counts what the client is sent: each result as JSON, its summary line and its
link, and the answer's fields around them (`fathom.server.answer_tokens` counts).

What it refuses to do: search (the caller runs the pipeline and hands the hits in) or keep
state between pages (the cursor carries what the next page needs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mcp.types import CallToolResult, ResourceLink, TextContent

from fathom.index import search as search_mod
from fathom.index.filters import SearchFilter
from fathom.index.pages import Cursor, digest
from fathom.index.results import SearchHit, docs_snippet
from fathom.server.answer_tokens import AnswerTokens, tokens_of
from fathom.server.search_answer import Result, SearchResults, answer_of, similar_results

ENVELOPE = 64  # the JSON-RPC envelope and the content list around the parts counted


def summary_line(r: Result) -> str:
    where = f"{r.project}:{r.path}:{r.start_line}-{r.end_line}"
    what = f" {r.symbol}" + (f" ({r.kind})" if r.kind else "") if r.symbol else ""
    return f"{r.rank}. {where}{what}" + (f"  id={r.id}" if r.id else "")


def link_of(r: Result) -> ResourceLink:
    return ResourceLink(type="resource_link", uri=r.uri, name=f"{r.path}:{r.start_line}-{r.end_line}",
                        mime_type="text/plain")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _result_costs(tokens: AnswerTokens, results: Sequence[Result]) -> list[int]:
    """Tokens each result costs the client: its JSON, its summary line and its link."""
    texts = [_json(r.model_dump(mode="json")) + summary_line(r)
             + link_of(r).model_dump_json(by_alias=True, exclude_none=True) for r in results]
    return tokens.count(texts)


def page(answer: SearchResults, texts: Sequence[str], *, search: Sequence[Any],
         cursor: str | None, max_tokens: int, tokens: AnswerTokens) -> SearchResults:
    """The page of `answer` (every hit of the search, ranked; `texts[i]` the whole chunk of
    `results[i]`, "" when unknown) that starts where `cursor` says and fits `max_tokens`.
    `search` is the search's arguments: a cursor given with others is refused."""
    ranked = answer.results
    search_digest = digest(list(search))
    ranking = digest([r.id or f"{r.project}:{r.path}:{r.start_line}" for r in ranked])
    start = 0
    if cursor is not None:
        at = Cursor.decode(cursor)
        at.check(search_digest, ranking, len(ranked))
        start = at.offset
    head = answer.model_copy(update={"results": [], "found": len(ranked),
                                     "next_cursor": Cursor(search_digest, 1, "x" * 16).encode(),
                                     "tokens": max_tokens})
    used = ENVELOPE + 2 * tokens.total(_json(head.model_dump(mode="json")))
    rest = ranked[start:]
    costs = _result_costs(tokens, rest)
    taken: list[Result] = []
    for r, cost in zip(rest, costs, strict=True):
        if taken and used + cost > max_tokens:
            break
        taken.append(r)
        used += cost
    whole, used = _grown(taken, costs, texts[start:start + len(taken)], answer.table,
                         max_tokens - used, tokens)
    used = max_tokens - used
    end = start + len(taken)
    next_cursor = Cursor(search_digest, end, ranking).encode() if end < len(ranked) else None
    return answer.model_copy(update={"results": whole, "found": len(ranked),
                                     "next_cursor": next_cursor, "tokens": used})


def _grown(taken: list[Result], costs: Sequence[int], texts: Sequence[str], table: str,
           left: int, tokens: AnswerTokens) -> tuple[list[Result], int]:
    """`taken` with each snippet grown to its whole chunk, in rank order, while `left`
    tokens allow; and the tokens left."""
    fulls = [(docs_snippet(t) if table == "docs" else t) if t else "" for t in texts]
    grown = [r.model_copy(update={"snippet": full, "whole": True})
             if full and full != r.snippet else None for r, full in zip(taken, fulls, strict=True)]
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


def tool_result(answer: SearchResults) -> CallToolResult:
    """The answer as the client receives it: structured, a summary, a link to every hit."""
    shown = answer.results
    if shown:
        span = f"results {shown[0].rank}-{shown[-1].rank} of {answer.found or len(shown)}"
    else:
        span = "no results"
    lines = [f"{span} for {answer.query!r} ({answer.table}), best first; every field is in "
             f"the structured result. Read a hit's lines with read_code(id=…)."]
    lines += [summary_line(r) for r in shown]
    if answer.next_cursor:
        lines.append(f"More: call again with the same arguments and cursor={answer.next_cursor!r}.")
    content: list[Any] = [TextContent(type="text", text="\n".join(lines))]
    content += [link_of(r) for r in shown]
    return CallToolResult(content=content, structured_content=answer.model_dump(mode="json"))


async def search_page(service: Any, query: str, project: str | None, table: str, k: int, *,
                      where: SearchFilter | None, reranker: Any, cursor: str | None,
                      max_tokens: int) -> SearchResults:
    """One page of what `search_code` / `search_docs` found (the pipeline runs again for a
    later page: the cursor checks it ranked the same)."""
    found = await search_mod.pipeline(service, query, project, table, k, where=where,
                                      reranker=reranker)
    return page(answer_of(found, query, table, where), [h.text for h in found.hits],
                search=[table, query, project, k, where.describe() if where else None],
                cursor=cursor, max_tokens=max_tokens, tokens=tokens_of(service))


def similar_page(service: Any, hits: Sequence[SearchHit], query: str, table: str, *,
                 search: Sequence[Any], cursor: str | None, max_tokens: int) -> SearchResults:
    """One page of what `find_similar` found."""
    return page(similar_results(hits, query, table), [h.text for h in hits], search=search,
                cursor=cursor, max_tokens=max_tokens, tokens=tokens_of(service))
