"""The answer to a search, as the MCP tools and the dashboard give it: one wire model for both.

What it owns: the result models of `search_code`, `search_docs` and `find_similar` (`Result`,
`SearchResults`: the tools' structured output, and the body of the dashboard's
`POST /admin/search`), the one meaning of each score field (`SCORES`), and the one mapping
from the search pipeline's hit to the wire (`Result.of`); `search_results` runs the pipeline
(`fathom.index.search.pipeline`) and `similar_results` wraps `find_similar`'s hits. Also the
two names a hit is opened by (`read_code`, resources): its `id` (`hit_id`, `parse_hit_id`) and
its resource URI (`resource_uri`, on the template `RESOURCE_TEMPLATE`).

What it refuses to do: check or search anything itself (the pipeline checks the arguments
once, at its entry, and its refusals reach the caller unchanged), or import the rest of the
server: the MCP tools and the admin API both import it, never the other way round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, cast
from urllib.parse import quote

from pydantic import BaseModel, Field

from fathom.errors import ConfigError
from fathom.index import search as search_mod
from fathom.index.filters import SearchFilter
from fathom.index.results import Ranking, SearchHit

# One meaning per score field, stated once and used in every schema that carries it.
SCORES = {
    "fused_score": (
        "Fused score of this chunk: the vector (cosine) ranking and the keyword (full-text) "
        "ranking fused, each list's scores normalised to 0..1 and combined with a keyword "
        "weight of 0.2 for a plain-language query and 0.6 for one that looks like code; a "
        "chunk whose symbol or file the query names gets a boost above 1 (see `match`). Then "
        "the file counts: tests, examples, vendored, generated and data files count less "
        "unless the query asks for them; a file the query names, or with several matching "
        "chunks, counts more. It orders search results when they are not reranked; it "
        "compares chunks within one response, not across responses. Null in find_similar."),
    "cosine": (
        "Cosine similarity between the query's (or the origin chunk's) vector and this chunk's "
        "vector, from -1 to 1, higher is closer; comparable across responses of one project "
        "table. Null when only the keyword search found the chunk."),
    "rerank_score": (
        "The reranker's relevance score for this chunk, on the reranker model's own scale; "
        "null when the response is not reranked (see `reranked` and `reason`)."),
}
ORDERED_BY = ("What the results are ordered by: `rerank_score` when a reranker rescored them, "
              "else `fused_score` (search_code, search_docs) or `cosine` (find_similar).")
SIMILAR_REASON = ("find_similar ranks by vector similarity alone: no keyword fusion, no "
                  "reranking")

Table = Literal["code", "docs"]

# A hit's id: `PROJECT:TABLE:CHUNK_ID`, the chunk's row identity in its project's table
# (`Chunk.chunk_id`: path, lines and text hashed). Stable while the chunk is indexed; an edit
# of its lines makes a new chunk with a new id.
_HIT_ID = re.compile(r"^(?P<project>.+):(?P<table>code|docs):(?P<chunk>[0-9a-f]{32})$", re.S)
# What `resources/read` takes: a file of a project, optionally a 1-based inclusive line range.
RESOURCE_TEMPLATE = "fathom://{project}/{+path}{?lines}"


def hit_id(project: str, table: str, chunk_id: str) -> str:
    return f"{project}:{table}:{chunk_id}"


def parse_hit_id(value: str) -> tuple[str, str, str]:
    """(project, table, chunk_id) of a hit's id, or `ConfigError` naming the shape."""
    found = _HIT_ID.match(value) if isinstance(value, str) else None
    if found is None:
        raise ConfigError(f"{value!r} is not a hit id: a hit's `id` reads PROJECT:TABLE:CHUNK, "
                          f"e.g. `shop:code:` and 32 hex digits; copy it from a search result")
    return found["project"], found["table"], found["chunk"]


def resource_uri(project: str, path: str, start: int | None = None,
                 end: int | None = None) -> str:
    """The `fathom://` URI of lines `start`..`end` of a file (the whole file without them)."""
    uri = f"fathom://{quote(project, safe='')}/{quote(path, safe='/')}"
    return uri if start is None else f"{uri}?lines={start}-{end if end is not None else start}"


class Range(BaseModel):
    start_line: int
    end_line: int
    symbol: str | None = None


class Result(BaseModel):
    id: str = Field(default="", description="the hit's id, PROJECT:TABLE:CHUNK: read_code(id=…) reads "
                    "its lines as indexed (stable while the chunk is unchanged)")
    uri: str = Field(default="", description="the resource URI of the hit's lines "
                     "(fathom://PROJECT/PATH?lines=START-END), for resources/read")
    project: str = Field(description="the project the chunk belongs to")
    path: str = Field(description="file path relative to the project root")
    start_line: int = Field(description="first line of the chunk, 1-based")
    end_line: int = Field(description="last line of the chunk, inclusive")
    symbol: str | None = Field(None, description="function, class or heading the chunk covers")
    kind: str | None = Field(None, description="what the symbol is: function, method or class; "
                                               "null for code between definitions and for prose")
    language: str = Field(description="the chunk's language, as the `language` filter takes it")
    rank: int = Field(description="1-based position in this response")
    fused_score: float | None = Field(None, description=SCORES["fused_score"])
    cosine: float | None = Field(None, description=SCORES["cosine"])
    rerank_score: float | None = Field(None, description=SCORES["rerank_score"])
    # Why it ranked: its place in each of the two rankings the fusion combined.
    vector_rank: int | None = Field(None, description="place (1 = best) in the vector search "
                                    "by meaning; null: not among its candidates")
    keyword_rank: int | None = Field(None, description="place (1 = best) in the keyword "
                                     "(full-text) search; null: not among its candidates")
    keyword_score: float | None = Field(None, description="full-text relevance (BM25-like; "
                                        "its scale depends on the store); null: not found by it")
    match: str | None = Field(None, description="'symbol', 'path' or 'symbol+path' when the "
                              "query named this definition or file (ranked first for it)")
    retrieval_rank: int | None = Field(None, description="place (1 = best) before reranking; "
                                       "null when not reranked")
    snippet: str = Field(description="the chunk's first lines (docs: from its first line of "
                                     "words, without docstring or comment delimiters), or the "
                                     "whole chunk when the answer's token budget allows (see "
                                     "`whole`)")
    whole: bool = Field(default=False, description="the snippet is the whole chunk")
    commit: str | None = Field(None, description="the git commit the chunk was indexed at, "
                               "for a project from git (searched at a `ref`); null otherwise")
    also: list[Range] = Field(default_factory=list, description="one result per file: the "
                              "file's other chunks that matched, best first (read_code reads "
                              "them by path and lines)")

    @classmethod
    def of(cls, hit: SearchHit, rank: int) -> Result:
        """The one mapping from the pipeline's hit to the wire. `fused_score` is the score
        the hit had when it reached the reranker stage (none for find_similar's, which never
        do); `retrieval_rank` only means something when the stage reordered the hits."""
        return cls(id=hit_id(hit.project, hit.table, hit.chunk_id) if hit.chunk_id else "",
                   uri=resource_uri(hit.project, hit.path, hit.start_line, hit.end_line),
                   project=hit.project, path=hit.path, start_line=hit.start_line,
                   end_line=hit.end_line, symbol=hit.symbol, kind=hit.kind,
                   language=hit.language, rank=rank, fused_score=hit.retrieval_score,
                   cosine=hit.cosine, rerank_score=hit.rerank_score,
                   vector_rank=hit.vector_rank, keyword_rank=hit.text_rank,
                   keyword_score=hit.text_score, match=hit.match,
                   retrieval_rank=hit.retrieval_rank if hit.reranked else None,
                   snippet=hit.snippet, commit=hit.commit,
                   also=[Range(start_line=a, end_line=b, symbol=sym)
                         for a, b, sym, _ in hit.others])


class FileGroup(BaseModel):
    project: str = Field(description="the project the file belongs to")
    path: str = Field(description="file path relative to the project root")
    hits: int = Field(description="how many of this response's results are in the file")
    best_rank: int = Field(description="rank of the file's best result in this response")


class SearchResults(BaseModel):
    query: str = Field(description="the query, or `path:line` for find_similar from a file")
    table: Table = Field(description="the table searched")
    ordered_by: Literal["rerank_score", "fused_score", "cosine"] = Field(description=ORDERED_BY)
    results: list[Result] = Field(description="best first")
    reranked: bool = Field(description="whether the reranker role rescored these results")
    reason: str | None = Field(None, description="why the response is as it is, for the whole "
                               "response (e.g. why it is not reranked); stated once here, not "
                               "on each result")
    reranker: str | None = Field(None, description="the provider that reranked the results")
    filters: str | None = Field(None, description="the filters applied, if any")
    notes: list[str] = Field(default_factory=list, description="what the reader must know "
                             "besides the results, e.g. a damaged project the search skipped")
    found: int | None = Field(default=None, description="how many results the search found (at most "
                              "k); `results` holds those that fit max_tokens")
    next_cursor: str | None = Field(default=None, description="more results did not fit max_tokens: "
                                    "call again with the same arguments and this cursor for "
                                    "the next page; null: nothing more")
    tokens: int | None = Field(default=None, description="tokens of the answer, as max_tokens counts "
                               "them")
    files: list[FileGroup] = Field(default_factory=list, description="the files of this "
                                   "response's results, best first, with how many results each "
                                   "holds: an agent's next step is often to open the file")


async def search_results(service: search_mod.Searchable, query: str, project: str | None,
                         table: str, k: int, *, where: SearchFilter | None = None,
                         reranker: Any = None, group: str = "file") -> SearchResults:
    """What `search_code` and `search_docs` answer (the dashboard's search box shows the same):
    vector + keyword candidates, rescored by the reranker role when one can serve; when none
    can, the results still come back, flagged not reranked with the reason."""
    found = await search_mod.pipeline(service, query, project, table, k, where=where,
                                      reranker=reranker, group=group)
    return answer_of(found, query, table, where)


def answer_of(found: Ranking, query: str, table: str,
              where: SearchFilter | None = None) -> SearchResults:
    """The answer for the pipeline's ranking: every hit, ranked from 1."""
    return SearchResults(query=query, table=cast(Table, table),
                         ordered_by="rerank_score" if found.reranked else "fused_score",
                         results=[Result.of(h, i) for i, h in enumerate(found.hits, start=1)],
                         reranked=found.reranked, reason=found.reason, reranker=found.reranker,
                         filters=where.describe() if where else None, notes=list(found.notes))


def similar_results(hits: Sequence[SearchHit], query: str, table: str) -> SearchResults:
    """What `find_similar` answers: its hits by cosine, `query` naming the origin."""
    return SearchResults(query=query, table=cast(Table, table), ordered_by="cosine",
                         results=[Result.of(h, i) for i, h in enumerate(hits, start=1)],
                         reranked=False, reason=SIMILAR_REASON, reranker=None, filters=None)
