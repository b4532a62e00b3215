"""The answer to a search, as the MCP tools and the dashboard give it: one wire model for both.

What it owns: the result models of `search_code`, `search_docs` and `find_similar` (`Result`,
`SearchResults`: the tools' structured output, and the body of the dashboard's
`POST /admin/search`), the one meaning of each score field (`SCORES`), and the one mapping
from the search pipeline's hit to the wire (`Result.of`), made only for the hits an answer
holds (a page maps its own; until then a hit keeps its whole text); the answer around them
(`answer_head`, `similar_head`), and the whole answer the dashboard shows (`answer_of`). Also the
two names a hit is opened by (`read_code`, resources): its `id` (`hit_id`, `parse_hit_id`) and
its resource URI (`resource_uri`, on the template `RESOURCE_TEMPLATE`).

What it refuses to do: check or search anything itself (a `SearchRequest` is checked when
made, and its refusals reach the caller unchanged), or import the rest of the
server: the MCP tools and the admin API both import it, never the other way round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, cast
from urllib.parse import quote

from pydantic import BaseModel, Field

from fathom.errors import ConfigError
from fathom.index.request import SearchRequest
from fathom.index.results import Ranking, SearchHit

# One meaning per score field, stated once and used in every schema that carries it; short,
# since agents' hosts transfer the schema (how the fused score is made: docs/architecture.md).
SCORES = {
    "fused_score": (
        "Vector (cosine) and keyword (full-text) rankings fused, each normalised to 0..1; above "
        "1 when the query names the chunk's symbol or file (see `match`). Orders unreranked "
        "results; compares chunks within one response only. Null in find_similar."
    ),
    "cosine": (
        "Cosine similarity of the query's (or origin chunk's) vector and this chunk's, -1..1; "
        "comparable across responses. Null when only the keyword search found it."
    ),
    "rerank_score": ("The reranker's score, on its model's scale; null when not reranked."),
}
SIMILAR_REASON = "find_similar ranks by vector similarity alone: no keyword fusion, no reranking"

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
        raise ConfigError(
            f"{value!r} is not a hit id: a hit's `id` reads PROJECT:TABLE:CHUNK, "
            f"e.g. `shop:code:` and 32 hex digits; copy it from a search result"
        )
    return found["project"], found["table"], found["chunk"]


def resource_uri(project: str, path: str, start: int | None = None, end: int | None = None) -> str:
    """The `fathom://` URI of lines `start`..`end` of a file (the whole file without them)."""
    uri = f"fathom://{quote(project, safe='')}/{quote(path, safe='/')}"
    return uri if start is None else f"{uri}?lines={start}-{end if end is not None else start}"


class Range(BaseModel):
    start_line: int
    end_line: int
    symbol: str | None = None


class Result(BaseModel):
    # Fields that explain themselves go undescribed: the schema is sent with every tool list.
    id: str = Field(default="", description="read_code(id=…) reads the hit's lines")
    uri: str = Field(default="", description="the hit's lines, for resources/read")
    project: str
    path: str
    start_line: int
    end_line: int
    symbol: str | None = None
    kind: str | None = None
    language: str
    rank: int
    fused_score: float | None = Field(None, description=SCORES["fused_score"])
    cosine: float | None = Field(None, description=SCORES["cosine"])
    rerank_score: float | None = Field(None, description=SCORES["rerank_score"])
    # Why it ranked: its place in each of the two rankings the fusion combined.
    vector_rank: int | None = Field(
        None, description="place in the vector search (1 = best); null: not a candidate"
    )
    keyword_rank: int | None = Field(None, description="place in the keyword search; null: not a candidate")
    keyword_score: float | None = None
    match: str | None = Field(
        None, description="'symbol', 'path' or 'symbol+path': the query named this definition or file"
    )
    retrieval_rank: int | None = Field(None, description="place before reranking")
    snippet: str
    whole: bool = Field(default=False, description="the snippet is the whole chunk")
    commit: str | None = None  # the git commit indexed, for a project from git
    also: list[Range] = Field(default_factory=list, description="the file's other matches")

    @classmethod
    def of(cls, hit: SearchHit, rank: int) -> Result:
        """The one mapping from the pipeline's hit to the wire. `fused_score` is the score
        the hit had when it reached the reranker stage (none for find_similar's, which never
        do); `retrieval_rank` only means something when the stage reordered the hits."""
        return cls(
            id=hit_id(hit.project, hit.table, hit.chunk_id) if hit.chunk_id else "",
            uri=resource_uri(hit.project, hit.path, hit.start_line, hit.end_line),
            project=hit.project,
            path=hit.path,
            start_line=hit.start_line,
            end_line=hit.end_line,
            symbol=hit.symbol,
            kind=hit.kind,
            language=hit.language,
            rank=rank,
            fused_score=hit.retrieval_score,
            cosine=hit.cosine,
            rerank_score=hit.rerank_score,
            vector_rank=hit.vector_rank,
            keyword_rank=hit.text_rank,
            keyword_score=hit.text_score,
            match=hit.match,
            retrieval_rank=hit.retrieval_rank if hit.reranked else None,
            snippet=hit.snippet,
            commit=hit.commit,
            also=[Range(start_line=a, end_line=b, symbol=sym) for a, b, sym, _ in hit.others],
        )


class FileGroup(BaseModel):
    project: str
    path: str
    hits: int
    best_rank: int


class SearchResults(BaseModel):
    query: str = Field(description="the query, or `path:line` for find_similar from a file")
    table: Table
    ordered_by: Literal["rerank_score", "fused_score", "cosine"]  # the score that orders
    results: list[Result] = Field(description="best first")
    reranked: bool
    reason: str | None = Field(
        None, description="why the response is as it is (e.g. not reranked), once for all results"
    )
    reranker: str | None = None
    filters: str | None = None
    notes: list[str] = Field(default_factory=list)  # e.g. a damaged project skipped
    found: int | None = Field(
        default=None, description="results found (at most k); `results` holds those that fit max_tokens"
    )
    next_cursor: str | None = Field(
        default=None, description="pass as `cursor` (same arguments) for the next page; null: no more"
    )
    tokens: int | None = None  # as max_tokens counts them
    files: list[FileGroup] = Field(default_factory=list)  # the results' files, best first


def answer_head(found: Ranking, request: SearchRequest) -> SearchResults:
    """The answer to `request` around its results (ordered by, reranked or why not, filters,
    notes), with none in it yet: a page puts in the ones it holds (`Result.of`)."""
    return SearchResults(
        query=request.query,
        table=cast(Table, request.table),
        ordered_by="rerank_score" if found.reranked else "fused_score",
        results=[],
        reranked=found.reranked,
        reason=found.reason,
        reranker=found.reranker,
        filters=request.where.describe() if request.where else None,
        notes=list(found.notes),
    )


def answer_of(found: Ranking, request: SearchRequest) -> SearchResults:
    """The whole answer to `request`: every hit of its ranking, ranked from 1 (the
    dashboard's search box, which pages nothing)."""
    return answer_head(found, request).model_copy(update={"results": results_of(found.hits)})


def results_of(hits: Sequence[SearchHit], first: int = 1) -> list[Result]:
    return [Result.of(h, i) for i, h in enumerate(hits, start=first)]


def similar_head(query: str, table: str) -> SearchResults:
    """What `find_similar` answers around its hits (by cosine), `query` naming the origin."""
    return SearchResults(
        query=query,
        table=cast(Table, table),
        ordered_by="cosine",
        results=[],
        reranked=False,
        reason=SIMILAR_REASON,
        reranker=None,
        filters=None,
    )
