"""The keyword-only index of a project's first index, while that first index runs.

What it owns: answering keyword questions about a project before any of its rows is
searchable. A project's first index builds its tables in a shadow slot and promotes them
whole at the end (`fathom.index.indexer`), so until then the store has nothing of it to
answer from. The walk reads and chunks the whole project long before the encoder has
embedded it; this index takes every window of chunks the walk reads (`add`, on the walk's
thread) and answers BM25 questions over them (`search`), ranked by the same scorer the
store's full-text half uses (`fathom.index.keywords`, over the same text: `keywords_of`).

Why it is a plain in-memory index held by the running `Job`, and not rows in the store:

* It has no vector column, so no row of it can ever pass for an embedded one: the store's
  guarantee that every row it serves was written by an encoder cleared for the table (and
  interchangeable with the query's) is not touched, and the answers built from it say they
  are keyword-only (the service adds the note, with how far the embedding is).
* It lives and dies with the run: the indexer drops it when the run ends, whether the
  tables were promoted, the run failed or it was cancelled; a crash takes it with the
  process. Nothing of it is on disk, so a restarted server cannot serve it.

Each window the walk reads is one segment with its own BM25 statistics (built once, never
rebuilt as the project grows); a search asks every segment and keeps the best scores, as a
search of several projects pools their keyword lists. It holds the chunks' texts, up to
`MAX_CHUNKS` of them (a few hundred MiB at most); a project larger than that is
keyword-searchable over its first `MAX_CHUNKS` walked chunks, and says so.

It keeps each chunk's location and text, not the walk's `Chunk` objects, and at most
`MAX_TEXT_BYTES` of text (the chunk cache's bound): a run's memory otherwise stays at the two
windows the indexer holds, and a first index adds at most this much to it.

What it refuses to do: hold a vector, be written to the store, outlive its run, or answer a
question about a project that already has a table (the service asks it only while the
project has none).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.keywords import KeywordIndex
from fathom.index.store.rules import keywords_of, snippet_of
from fathom.index.store.values import Hit

# Chunks, and bytes of their text, held at most: past either the walk goes on, but what it
# reads is answered only once the index is promoted.
MAX_CHUNKS = 300_000
MAX_TEXT_BYTES = 64 << 20


class _Held(NamedTuple):
    """What a keyword answer shows of a walked chunk (its text is held apart, by id)."""

    chunk_id: str
    path: str
    start_line: int
    end_line: int
    symbol: str | None
    language: str
    kind: str | None


@dataclass(frozen=True)
class _Segment:
    """One window of one table's chunks and their BM25 postings."""

    chunks: tuple[_Held, ...]
    keywords: KeywordIndex


class InterimIndex:
    """The walked chunks of one project's first index, by table, for keyword questions."""

    def __init__(self, project: str, *, max_chunks: int = MAX_CHUNKS, max_text_bytes: int = MAX_TEXT_BYTES):
        self.project, self.max_chunks, self.max_text_bytes = project, max_chunks, max_text_bytes
        self.chunks = 0  # held now
        self.text_bytes = 0  # of their texts (characters: a bound, not an exact size)
        self.full = False  # the walk read more than either bound: later chunks are not held
        self._segments: dict[str, tuple[_Segment, ...]] = {}
        self._texts: dict[tuple[str, str], str] = {}  # (table, chunk id) -> text
        self._lock = threading.Lock()  # one writer (the walk); readers take a snapshot

    def add(self, chunks: Sequence[Chunk]) -> None:
        """One window of walked chunks (blocking: the walk's thread calls it)."""
        room, taken = self.max_chunks - self.chunks, 0
        by_table: dict[str, list[Chunk]] = {}
        for chunk in chunks:
            if room <= 0 or self.text_bytes + taken + len(chunk.text) > self.max_text_bytes:
                self.full = True
                break
            by_table.setdefault(chunk.table, []).append(chunk)
            room, taken = room - 1, taken + len(chunk.text)
        for table, got in by_table.items():
            keywords = KeywordIndex.build([keywords_of(c.path, c.symbol, c.text) for c in got])
            held = tuple(
                _Held(c.chunk_id, c.path, c.start_line, c.end_line, c.symbol, c.language, c.kind) for c in got
            )
            segment = _Segment(held, keywords)
            with self._lock:
                # A new tuple, never one changed in place: a search reading the old one
                # meanwhile sees a whole set of segments.
                self._segments[table] = (*self._segments.get(table, ()), segment)
                self._texts.update(((table, h.chunk_id), c.text) for h, c in zip(held, got))
                self.chunks += len(got)
        self.text_bytes += taken

    def search(self, table: str, query: str, k: int, where: SearchFilter | None = None) -> list[Hit]:
        """The best `k` chunks of `table` for `query` by BM25, best first, each carrying the
        project (blocking: a few milliseconds per ten thousand chunks)."""
        scored: list[tuple[float, int, Hit]] = []
        for segment in self._segments.get(table, ()):
            chunks = segment.chunks
            rows = None
            if where is not None:
                keep = where.mask(
                    [c.language for c in chunks], [c.path for c in chunks], [c.kind for c in chunks]
                )
                rows = keep.nonzero()[0]
            found, scores = segment.keywords.search(query, k, rows=rows)
            for row, score in zip(found.tolist(), scores.tolist(), strict=True):
                c = chunks[row]
                hit = Hit(
                    c.chunk_id,
                    c.path,
                    c.start_line,
                    c.end_line,
                    c.symbol,
                    c.language,
                    float(score),
                    snippet_of(self._texts.get((table, c.chunk_id), "")),
                    "",  # no provider: nothing of it was embedded
                    table=table,
                    kind=c.kind,
                    project=self.project,
                )
                scored.append((-float(score), len(scored), hit))
        scored.sort(key=lambda s: (s[0], s[1]))
        return [h for _, _, h in scored[:k]]

    def text(self, table: str, chunk_id: str) -> str:
        """A held chunk's full text ("" when not held)."""
        return self._texts.get((table, chunk_id), "")
