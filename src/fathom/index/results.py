"""What a search returns, and the checks on a search's arguments: owned by retrieval.

What it owns: `SearchHit` (one result as every front end shows it), `Noted` (results with the
notes a reader must see beside them), the note for a damaged project a search skipped, the
docs snippet's clean head, and the checks on `k` and on the table name. They live here, not in
the service, so that the reranker stage (`fathom.index.rerank`) and the service share them
without retrieval importing the layer above it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from fathom.errors import ConfigError, whole_number
from fathom.index.store import TABLE_KINDS, Hit

MAX_K = 100


@dataclass(frozen=True)
class SearchHit:
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

    @classmethod
    def of(cls, project: str, hit: Hit) -> SearchHit:
        snippet = docs_snippet(hit.snippet) if hit.table == "docs" else hit.snippet
        return cls(project, hit.table, hit.path, hit.start_line, hit.end_line, hit.symbol,
                   hit.language, round(float(hit.score), 6), snippet,
                   cosine=_rounded(hit.vector_score), kind=hit.kind,
                   vector_rank=hit.vector_rank, text_rank=hit.text_rank,
                   text_score=_rounded(hit.text_score), match=hit.match)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rounded(score: float | None) -> float | None:
    return None if score is None else round(float(score), 6)


class Noted(list):
    """Results, with the notes a reader must see beside them (e.g. a project a search over
    every project skipped because it is damaged)."""

    def __init__(self, items: Any = (), notes: Any = ()):
        super().__init__(items)
        self.notes: list[str] = list(notes)


def skipped_note(project: str, detail: str) -> str:
    return (f"skipped project {project!r}, which is damaged ({detail}); run `fathom store "
            f"verify {project} --repair`")


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


def check_k(k: Any) -> int:
    return whole_number("k", k, 1, MAX_K)



def check_table(table: str) -> str:
    if table not in TABLE_KINDS:
        raise ConfigError(f"unknown table {table!r}: use 'code' or 'docs'")
    return table
