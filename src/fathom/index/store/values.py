"""The values the store hands out and takes: slots, hits, table and project descriptions.

Plain frozen dataclasses, the same for every backend; no storage code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

import numpy as np

from fathom.index.store.errors import DamagedProject
from fathom.space import Provenance, Space


class Slot(str, Enum):
    ACTIVE = "active"  # what searches read
    SHADOW = "shadow"  # a full re-index being built; invisible to searches until promoted


@dataclass(frozen=True)
class Hit:
    """One search result. `score` is the ranking score of the search that produced it
    (cosine for vector search, BM25 for text search, the fused score for hybrid search, see
    `fathom.index.fusion`). A fused hit also says why it ranked: its place and raw score in
    each list (None where that list did not hold it) and whether the query named it."""

    chunk_id: str
    path: str
    start_line: int
    end_line: int
    symbol: str | None
    language: str
    score: float
    snippet: str
    provider_id: str
    table: str = "code"
    vector_score: float | None = None
    text_score: float | None = None
    kind: str | None = None  # symbol kind: "function", "method", "class" or None
    vector_rank: int | None = None
    text_rank: int | None = None
    match: str | None = None  # "symbol", "path" or "symbol+path": the query named this chunk
    project: str | None = None  # set by a search over several projects (chunk ids may repeat)


@dataclass
class Pooled:
    """The two searches of a search over several projects, each list best first
    (`Store.search_many`), and the projects left out as damaged."""

    vector: list[Hit]
    text: list[Hit]
    damaged: dict[str, DamagedProject]

    def best(self, k: int) -> Pooled:
        # Stable: equal scores keep the order the lists were pooled in.
        self.vector = sorted(self.vector, key=lambda h: -h.score)[:k]
        self.text = sorted(self.text, key=lambda h: -h.score)[:k]
        return self


@dataclass(frozen=True)
class StoredVector:
    """A vector already in a table, with the provenance it was written under (content reuse)."""

    vector: np.ndarray
    provenance: Provenance
    written_at: datetime


@dataclass(frozen=True)
class ManifestEntry:
    chunk_id: str
    content_hash: str
    path: str


@dataclass(frozen=True)
class TableInfo:
    project: str
    table: str
    space: Space | None
    rows: int
    last_indexed: datetime | None
    shadow_rows: int | None = None  # rows already in a shadow slot (an unfinished full run)
    shadow_space: Space | None = None


@dataclass(frozen=True)
class ShadowInfo:
    project: str
    table: str
    space: Space
    rows: int  # rows already written (non-zero when resuming)
    resumed: bool


@dataclass(frozen=True)
class ProjectInfo:
    name: str
    tables: dict[str, TableInfo] = field(default_factory=dict)
    damage: str | None = None  # why the project cannot be read (DamagedProject's message)
