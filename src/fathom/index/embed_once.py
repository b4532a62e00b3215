"""Each distinct text embedded once per run: the texts of a batch of chunks, less repeats, and
the vectors of texts embedded a moment ago for another table.

A vector means its text (`Chunk.content_hash` is the hash of exactly what is embedded), so two
chunks with the same text need one encoder pass between them, whatever their paths, lines or
tables: the same small helper in two files, a section of text that lands in both the code and
the docs table. `Folded` is one table's chunks of one window as the indexer embeds them: the
chunks whose text the run's `RecentVectors` holds (the latest texts it embedded, for this
table or another) are written with that vector, and the rest are folded onto their distinct
texts, one encoder input each, whose vector goes to every chunk of it.

What it refuses: to lend a vector across tables unless the encoder that made it is the
receiving table's own reference (a quantized writer the gate cleared for the code table may
not be cleared for the docs table: its vector goes only where its provider may write), and to
grow with the project: it holds at most `limit` vectors (a window's worth, a few MiB), the
latest ones, which is where a repeat across tables comes from (a file's chunks for both tables
arrive in the same window).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from fathom.index.chunk import Chunk
from fathom.inference.provider import Provider


def distinct(chunks: Sequence[Chunk]) -> list[list[int]]:
    """The chunks' positions grouped by text, each group in order, the groups in the order of
    their first chunk: one encoder input per group."""
    groups: dict[str, list[int]] = {}
    for i, chunk in enumerate(chunks):
        groups.setdefault(chunk.content_hash, []).append(i)
    return list(groups.values())


def spread(
    groups: Sequence[list[int]], picked: Sequence[int], vectors: np.ndarray
) -> tuple[list[int], np.ndarray]:
    """The vectors of `picked` groups handed to every chunk of each group: the chunk
    positions, and one row per position."""
    positions: list[int] = []
    rows: list[int] = []
    for row, g in enumerate(picked):
        positions.extend(groups[g])
        rows.extend([row] * len(groups[g]))
    return positions, vectors[rows]


class RecentVectors:
    """The latest `limit` vectors of one run, by content hash, with the provider that made
    each; a table takes one only when that provider is its reference."""

    def __init__(self, limit: int):
        self.limit = max(1, int(limit))
        self._vectors: OrderedDict[str, tuple[Provider, np.ndarray]] = OrderedDict()
        self.lent = 0  # chunks written with a vector made for another table (a counter tests read)

    def keep(self, hashes: Sequence[str], vectors: np.ndarray, provider: Provider) -> None:
        for key, vector in zip(hashes, vectors, strict=True):
            # A copy: a row of the batch would keep the whole batch's array alive.
            self._vectors[key] = (provider, vector.copy())
            self._vectors.move_to_end(key)
        while len(self._vectors) > self.limit:
            self._vectors.popitem(last=False)

    def lend(self, hashes: Sequence[str], reference: str) -> dict[str, tuple[Provider, np.ndarray]]:
        """The kept vectors of these texts made by the encoder `reference` names."""
        out = {}
        for key in hashes:
            got = self._vectors.get(key)
            if got is not None and got[0].id == reference:
                out[key] = got
        return out


# Each run's recent vectors, by its job: dropped with the job.
_RUNS: weakref.WeakKeyDictionary[object, RecentVectors] = weakref.WeakKeyDictionary()


def recent_for(job: object, limit: int) -> RecentVectors:
    """The recent vectors of the run `job` is the handle of (made on first use)."""
    return _RUNS.setdefault(job, RecentVectors(limit))


class Folded:
    """One table's chunks of one window (sorted as they are to be embedded): `lent`, the
    vectors `recent` holds for some of their texts (made by the table's reference), the
    provider and those chunks, or None; the rest folded onto their distinct texts (`heads`)."""

    def __init__(self, chunks: Sequence[Chunk], recent: RecentVectors, reference: str):
        self.recent = recent
        have = recent.lend([c.content_hash for c in chunks], reference)
        lent = [c for c in chunks if c.content_hash in have]
        self.lent: tuple[np.ndarray, Provider, list[Chunk]] | None = None
        if lent:
            vectors = np.stack([have[c.content_hash][1] for c in lent])
            self.lent = (vectors, have[lent[0].content_hash][0], lent)
            recent.lent += len(lent)
        self.chunks = [c for c in chunks if c.content_hash not in have]
        self.groups = distinct(self.chunks)
        self.heads = [self.chunks[g[0]] for g in self.groups]

    def rows(
        self, indices: list[int], vectors: np.ndarray, provider: Provider
    ) -> tuple[list[Chunk], np.ndarray]:
        """A batch of `heads` (by index) embedded: every chunk of those texts, one vector row
        each; the vectors are kept for the run's later tables and windows."""
        self.recent.keep([self.heads[i].content_hash for i in indices], vectors, provider)
        positions, rows = spread(self.groups, indices, vectors)
        return [self.chunks[i] for i in positions], rows
