"""What a search returns, and the checks on a search's arguments: owned by retrieval.

What it owns: `SearchHit`, the one hit type of the search pipeline once the store's rankings
are fused (`SearchHit.of` maps a store `Hit` to it, once; the reranker stage fills in its
rerank fields), `Ranking` (the pipeline's answer: the hits, whether they were reranked and
why not), `Noted` (results with the notes a reader must see beside them), the note for a
damaged project a search skipped, and the docs snippet's clean head. They live here, not in
the service, so that the reranker stage (`fathom.index.rerank`), the pipeline and the service
share them without retrieval importing the layer above it. The checks on a search's arguments
are the request's (`fathom.index.request`).

`files_of` groups a ranking's hits by file (`FileAnswer`: how many of them a file holds, where
its best one ranks, a file score), because an agent's next step is usually to open the file;
`files_line` says it in one line ("3 of the top 5 hits are in x.py").

What it refuses to do: know the wire. The MCP tools' and the dashboard's answer models are
the server's (`fathom.server.search_answer`), mapped from a `SearchHit` in one function.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from fathom.index.store import Hit


@dataclass(frozen=True)
class SearchHit:
    """One result of a search, from the fusion to the front end. `score` orders it: the
    reranker's score when the reranker stage rescored it, else the fused score (the cosine in
    `find_similar`)."""

    project: str
    table: str
    path: str
    start_line: int
    end_line: int
    symbol: str | None
    language: str
    score: float
    snippet: str
    # The cosine similarity of the query and the chunk when the vector search found it
    # (None when only the keyword search did); `score` is the fused score.
    cosine: float | None = None
    kind: str | None = None  # symbol kind: "function", "method", "class"
    # Why it ranked (`fathom.index.fusion`): its place in the vector and the keyword list and
    # its keyword score (None where that list did not hold it), and whether the query named it.
    vector_rank: int | None = None
    text_rank: int | None = None
    text_score: float | None = None
    match: str | None = None
    # The reranker stage's part (`fathom.index.rerank`): whether it rescored the hit, the
    # score and 1-based place the hit had before it, and its own score (None: not reranked).
    # `retrieval_score` stays None for a hit that never reached the stage (`find_similar`).
    reranked: bool = False
    retrieval_score: float | None = None
    rerank_score: float | None = None
    retrieval_rank: int | None = None
    # The full chunk text the reranker reads (the snippet when the store keeps none); never
    # sent out (`as_dict` leaves it out, the wire model has no field for it).
    text: str = field(default="", repr=False, compare=False)
    # The chunk's row identity in its project's table (`Chunk.chunk_id`): what a hit's id on
    # the wire and `read_code` name it by. Empty for a hit made without a store row.
    chunk_id: str = ""
    # The commit the hit's file was indexed at, for a project from git (None otherwise).
    commit: str | None = None
    # One result per file: the file's other chunks of the same ranking, best first, as
    # (start_line, end_line, symbol, chunk_id); empty for a result per chunk.
    others: tuple[tuple[int, int, str | None, str], ...] = ()

    @classmethod
    def of(cls, project: str, hit: Hit, *, text: str = "") -> SearchHit:
        """The pipeline's hit for a store's `Hit` of `project`: the one place a hit changes
        shape inside retrieval (scores rounded, a docs snippet opening on words)."""
        snippet = docs_snippet(hit.snippet) if hit.table == "docs" else hit.snippet
        return cls(
            project,
            hit.table,
            hit.path,
            hit.start_line,
            hit.end_line,
            hit.symbol,
            hit.language,
            round(float(hit.score), 6),
            snippet,
            cosine=_rounded(hit.vector_score),
            kind=hit.kind,
            vector_rank=hit.vector_rank,
            text_rank=hit.text_rank,
            text_score=_rounded(hit.text_score),
            match=hit.match,
            text=text,
            chunk_id=hit.chunk_id,
        )

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "text"}


def _rounded(score: float | None) -> float | None:
    return None if score is None else round(float(score), 6)


@dataclass(frozen=True)
class Ranking:
    """What the search pipeline answers: the best hits, whether the reranker stage rescored
    them (`reason` says why not), which provider did, of how many candidates, and the notes
    a reader must see (e.g. projects skipped as damaged)."""

    hits: list[SearchHit]
    reranked: bool
    reason: str | None = None  # why not reranked
    reranker: str | None = None  # the provider id that scored them
    candidates: int = 0
    notes: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[SearchHit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def as_dict(self) -> dict[str, Any]:
        return {
            "reranked": self.reranked,
            "reason": self.reason,
            "reranker": self.reranker,
            "candidates": self.candidates,
            "hits": [h.as_dict() for h in self.hits],
            "notes": list(self.notes),
        }


class Noted(list[SearchHit]):
    """Results, with the notes a reader must see beside them (e.g. a project a search over
    every project skipped because it is damaged)."""

    def __init__(self, items: Iterable[SearchHit] = (), notes: Iterable[str] = ()):
        super().__init__(items)
        self.notes: list[str] = list(notes)


def skipped_note(project: str, detail: str) -> str:
    return (
        f"skipped project {project!r}, which is damaged ({detail}); run `fathom store "
        f"verify {project} --repair`"
    )


# What opens a docstring or a doc comment, and adornment lines that carry no words.
_OPENERS = re.compile(r"^\s*(?:[rRbBuUfF]{0,2}(?:\"{3}|'{3})|/\*\*?|\*/|\*(?!\*)|//[/!]|<!--|-->)\s*")
_CLOSERS = re.compile(r"(?:\"{3}|'{3}|\*/|-->)\s*$")
_ADORNMENT = re.compile(r"^\s*([-=~:^*#_`])\1*\s*$")


def docs_snippet(snippet: str) -> str:
    """A docs snippet that opens on words: a docstring's or a doc comment's delimiter (three
    quotes, `/**`, `///`), adornment lines and blank lines are dropped from its head, so the
    first line an agent reads says something. Headings (`# Install`) are words: kept."""
    lines = snippet.splitlines()
    while lines:
        head = _CLOSERS.sub("", _OPENERS.sub("", lines[0], count=1)).rstrip()
        if head.strip() and not _ADORNMENT.match(head):
            lines[0] = head.strip()
            break
        lines.pop(0)
    return "\n".join(lines)


# A file's score: 1/rank of its best hit, plus FILE_SUPPORT times 1/rank of each other hit it
# holds. 0 orders files by their best hit alone; `fathom eval` and bench/search_quality.py
# measure the other weights ("right file in the top 3", docs/benchmarks.md).
FILE_SUPPORT = 0.0


@dataclass(frozen=True)
class FileAnswer:
    """One file of a ranking: how many of its hits it holds, where its best one ranks
    (1-based), and its file score (`FILE_SUPPORT`)."""

    project: str
    path: str
    hits: int
    best_rank: int
    score: float


def files_of(hits: Sequence[Any], *, support: float = FILE_SUPPORT) -> list[FileAnswer]:
    """The files of a best-first ranking (anything with `path` and an optional `project`),
    best file first: by file score, then by best rank."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rank, h in enumerate(hits, start=1):
        groups.setdefault((getattr(h, "project", None) or "", h.path), []).append(rank)
    files = [
        FileAnswer(
            project,
            path,
            len(ranks),
            ranks[0],
            round(1.0 / ranks[0] + support * sum(1.0 / r for r in ranks[1:]), 6),
        )
        for (project, path), ranks in groups.items()
    ]
    return sorted(files, key=lambda f: (-f.score, f.best_rank))


def files_line(files: Sequence[FileAnswer], shown: int) -> str | None:
    """One line naming the file that holds several of the `shown` hits, or None when no file
    holds more than one."""
    if not files:
        return None
    top = max(files, key=lambda f: (f.hits, -f.best_rank))
    if top.hits < 2:
        return None
    where = f"{top.project}:{top.path}" if top.project else top.path
    return f"{top.hits} of the top {shown} hits are in {where}."
