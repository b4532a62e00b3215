"""The vector store: one vector space per (project, table kind), blue/green slots, provenance.

API summary (what the indexer, search and MCP tools code against)
-----------------------------------------------------------------
Everything below is a *blocking* call (LanceDB is synchronous); async callers wrap it in
`asyncio.to_thread(...)`. `fathom.index.search.search(...)` already does that for queries.
`table` is always a table kind, "code" or "docs"; `slot` is `Slot.ACTIVE` (what searches
read) or `Slot.SHADOW` (a full re-index being built).

    store = LanceStore(root: Path, clearance: Clearance | None = None, *, clock=time.time,
                       matrix_cache_bytes=MATRIX_CACHE_BYTES, exact_max_rows=EXACT_MAX_ROWS,
                       ann_min_rows=20_000, ann_nprobes=None, ann_candidates=None,
                       ann_background=True, cache_idle_s=60.0)
    store.cache_stats -> CacheStats(hits, loads, bypassed)     # the matrix cache, LanceDB only
    store.ann_pending(project, table) -> bool; store.wait_for_ann(timeout) -> bool
    store = open_store(settings)   # fathom.index.backend: PostgreSQL if settings.store_url is postgresql://…, else LanceDB

    # spaces and slots
    store.open_table(project, table, space) -> TableInfo        # creates; SpaceMismatch if other space
    store.space_of(project, table, slot=Slot.ACTIVE) -> Space | None
    store.begin_shadow(project, table, space) -> ShadowInfo     # resumes a same-space shadow
    store.chunk_ids(project, table, slot=Slot.ACTIVE) -> set[str]   # resume: what is already there
    store.promote(project, table) -> TableInfo                  # atomic switch, old version dropped
    store.promote_together(project, tables) -> list[TableInfo]  # several tables in ONE switch
    with store.project_lock(project, holder=None) as LockHolder: ...  # one writer per project
    store.abandon_shadow(project, table) -> None

    # writes: validated, then cleared, BEFORE anything is written (WidthMismatch / StoreError /
    # NotCleared); a refused batch changes nothing. Upserts by chunk_id (idempotent).
    store.write(project, table, rows: Sequence[Chunk], vectors: np.ndarray, provenance,
                *, slot=Slot.ACTIVE) -> int
    store.replace_vectors(project, table, chunk_ids, vectors, provenance, *, slot=Slot.ACTIVE) -> int
    store.carry_vectors(project, table, rows, *, slot=Slot.ACTIVE, source=Slot.ACTIVE) -> set[str]
        # content-keyed reuse: rows whose text already has a vector in `source` (same space)
        # are written with that vector and its own provenance; returns their chunk ids
    store.delete(project, table, *, chunk_ids=(), paths=(), slot=Slot.ACTIVE) -> int
    store.manifest(project, table, slot=Slot.ACTIVE) -> list[ManifestEntry]  # chunk_id, content_hash, path
    store.refresh(project, table) -> None       # rebuild keyword/ANN indexes after incremental writes

    # search primitives (fusion lives in fathom.index.search)
    store.vector_search(project, table, vector, k, *, where=None) -> list[Hit]   # cosine, best first
    store.text_search(project, table, query, k, *, where=None) -> list[Hit]      # BM25, best first
    store.search_many(projects, table, vector, query, k, *, where=None) -> Pooled
        # both, over several projects of one space: Pooled(vector, text, damaged), each list
        # the pooled best k (cosine / BM25; ties keep the projects' order), hits carry `project`
        # `where`: a fathom.index.filters.SearchFilter, applied before the top k is cut
    store.chunk_at(project, table, path, line) -> tuple[Hit, np.ndarray] | None   # find_similar

    # projects and provenance audit
    store.table_info(project, table) -> TableInfo   # rows, space, last_indexed, shadow_rows
    store.list_projects() -> list[ProjectInfo]      # ProjectInfo(name, tables: {kind: TableInfo})
    store.has_project(project) -> bool
    store.drop_project(project) -> None
    store.provenance_counts(project, table, slot=Slot.ACTIVE) -> dict[(provider_id, verdict_id), int]
    store.written_since(project, table, since: datetime, provider_id=None) -> list[ManifestEntry]
    store.chunk_texts(project, table, chunk_ids, slot=Slot.ACTIVE) -> dict[chunk_id, text]

Errors: `WidthMismatch`, `NotCleared`, `DiskFull` (fathom.errors), `SpaceMismatch`,
`UnknownProject`, `NoShadow`, `DamagedProject`, `DuplicateChunks`, `ProjectLocked` (here; all
`StoreError`). LanceStore reports what LanceDB or the filesystem says about a project's files
(a table folder gone, a truncated or corrupt file, a garbled state.json) as `DamagedProject`,
never as an empty project; `list_projects` lists a damaged project with its `damage`.

What this module owns
---------------------
* The `Store` contract (an ABC) and the backend-neutral rules every backend inherits and
  cannot bypass: batch validation (width, finiteness, table kind) and the clearance check run
  in `Store.write` / `Store.replace_vectors` before the backend's `_upsert` is reached. A
  PostgreSQL backend (issue 11) implements the same abstract methods.
* `LanceStore`, the embedded default. Layout under `root`:
  ``projects/<slug>/state.json`` (the pointer: per table kind its Space, active and shadow
  Lance table names, a generation counter and the last indexed time) and the LanceDB
  database in ``projects/<slug>/`` holding tables named ``<kind>_<n>_<random>``. The Space is also
  stored in each Lance table's Arrow schema metadata (``fathom.space``), so a table carries
  its identity on its own. Promotion rewrites state.json with `atomic_write_text` (a rename):
  readers see the old active tables or the new ones, never a half-built one, and never the code
  table of one run with the docs table of another. ``projects/<slug>/.index.lock`` is the
  project's index lock (flock, holder recorded in the file); ``.lock`` serialises state.json
  read-modify-writes.

Search speed: the choice. LanceDB's flat vector path is ~20-40x slower than a numpy matmul
(ARCHITECTURE.md), and an IVF-PQ index costs minutes to build per promotion and loses recall.
So every active table of at most `exact_max_rows` rows (250,000 by default, FATHOM_EXACT_MAX_ROWS)
whose float32 matrix fits in `matrix_cache_bytes` (2.5 GiB by default,
`Settings.matrix_cache_bytes` / FATHOM_MATRIX_CACHE_BYTES: 50 projects of 20k chunks at 384-d
with their keyword indexes) is answered from memory: the L2-normalised matrix plus the hit
columns, exact cosine by one matmul (exact recall). Past `exact_max_rows` an exact scan costs
more than the ANN index (1M x 384: 279 ms against 21.6 ms), so a bigger table goes to its ANN
index however much room the cache has.
The bound counts the matrices and their hit columns and is never exceeded; room is made by
evicting the least recently used tables idle for `cache_idle_s`, and a table that does not fit
beside the ones in use is answered by LanceDB instead (`cache_stats.bypassed`), so a search
over more projects than the cache holds does not reload every table on every query. numpy's
BLAS runs single-threaded (`single_threaded_blas`): searches are parallel already. Measured by
hand at 50k x 384-d on the shared 2-core machine *under load average ~6*: matmul + top-k 25-37
ms, store `vector_search` within ~3 ms of the raw matmul, `text_search` 11-15 ms,
`hybrid_search` (both halves in parallel) p50 ~26 ms; loading the cache once after a change
~0.8 s. Tables too big for the cache are searched through LanceDB with an IVF-PQ index from
`ann_min_rows` rows on, probing `ann_nprobes` partitions (by default by width: 32 up to 1024-d,
16 beyond, see `ann_params`, which also sizes the PQ codes) and re-ranking `ann_candidates` rows
on their full vectors (refine_factor = candidates / k). `promote`/`refresh` start that build in
a background thread after the switch (minutes at a million rows). Meanwhile a new table is
searched exactly over a memory-mapped copy of its vectors that the build thread writes first
(`fathom.index.window`: ~0.12 s at 1M x 384 against ~4.5 s for LanceDB's flat scan; tied to the
table's Lance version, dropped on any write and when the build ends; a filtered search goes to
LanceDB); a refreshed table keeps its previous index plus a flat scan of newer rows. A searcher
that finds a big table without its index starts the build itself. Figures at 1M x 384 and 200k x
2560: docs/benchmarks.md. Keyword search is LanceDB's native full-text index (`FTS`, offline;
the tantivy variant is not used), created with each table and folded forward by
`promote`/`refresh` (`optimize`); rows written since are still found (LanceDB searches unindexed
rows flat). A table the cache holds answers keyword queries from an in-memory copy of that
index (`fathom.index.keywords`: the same scores, without LanceDB's 3-5 ms per call), built when
the matrix is loaded and counted in the bound. The cache is invalidated by a generation number
in state.json that every write to the active slot bumps (and a finished ANN build), so a server
process sees writes made by a CLI process.

Many projects: `search_many` searches several projects of one space as one index (both
lists pooled, each cut to the best k). LanceStore answers the projects its cache holds with
one matmul and one keyword lookup each, split over two threads, and builds Hits only for
the pooled best; the others go to LanceDB at once on a thread pool. Measured (bench/
many_projects.py, docs/benchmarks.md): the keyword half was most of an all-project search
before; now the matmuls are (memory-bound: ~2-3.5 ms per 20k x 384 table on the shared
machine).

What it refuses to do: embed anything (vectors come from the caller), decide who is cleared
(the injected `Clearance` decides; the default clears only the space's reference encoder),
mix two spaces in one table, or let a search see a shadow slot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fathom.config import atomic_write_text
from fathom.errors import (
    ConfigError,
    DiskFull,
    FathomError,
    NotCleared,
    StoreError,
    WidthMismatch,
    is_disk_full,
)
from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.window import MappedMatrix, StaleCopy, WindowStats
from fathom.index.keywords import KeywordIndex
from fathom.space import Clearance, Provenance, ReferenceOnlyClearance, Space

log = logging.getLogger(__name__)

TABLE_KINDS = ("code", "docs")
# A search over many projects: the searches LanceDB answers (tables the matrix cache does
# not hold) run at once. They release the GIL (LanceDB's Rust engine), so a few threads per
# core keep the cores busy while one waits on its table's files.
_FANOUT_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fathom-fanout")
CACHED_THREADS = 2  # threads that share the cached projects of one search (see search_many)
SNIPPET_LINES = 12
SNIPPET_CHARS = 800


# --------------------------------------------------------------------------- errors


class SpaceMismatch(StoreError):
    """A table was opened, or written, as a different vector space than the one it holds."""

    def __init__(self, project: str, table: str, expected: Space, got: Space):
        self.project, self.table, self.expected, self.got = project, table, expected, got
        super().__init__(
            f"project {project!r} table {table!r} holds the space of {expected.model!r} "
            f"(reference {expected.reference!r}, width {expected.width}); it was opened as "
            f"{got.model!r} (reference {got.reference!r}, width {got.width}). Use the table's "
            f"own encoder, or run a full re-index to build the table in the new space."
        )


class UnknownProject(StoreError):
    def __init__(self, project: str, known: Sequence[str] = ()):
        self.project, self.known = project, list(known)
        hint = f" Known projects: {', '.join(self.known)}." if self.known else ""
        super().__init__(
            f"no project {project!r} in the store. Index it first (`fathom index PATH "
            f"--project {project}`).{hint}"
        )


class DamagedProject(StoreError):
    """A project's stored state cannot be read as it should: a garbled state.json, a table
    folder gone, a data or manifest file truncated or corrupt. Never read as "empty"."""

    def __init__(self, project: str, detail: str):
        self.project, self.detail = project, detail
        super().__init__(
            f"project {project!r} is damaged: {detail}. Run `fathom store verify {project} "
            f"--repair` to fix what can be fixed (then `fathom index ROOT --project {project}` "
            f"re-embeds only what is missing). Other projects are unaffected."
        )


class DuplicateChunks(StoreError):
    """A shadow slot holds one chunk id more than once (two writers raced, or damage): it is
    never promoted."""

    def __init__(self, project: str, table: str, rows: int, ids: int):
        self.project, self.table, self.rows, self.ids = project, table, rows, ids
        super().__init__(
            f"project {project!r} table {table!r}: the rebuilt table holds {rows} rows for "
            f"{ids} chunk ids, so it was not promoted and was discarded; the active index is "
            f"unchanged. Run the same `fathom index --full` again to rebuild it."
        )


@dataclass(frozen=True)
class LockHolder:
    project: str
    holder: str  # the process's name (`fathom@HOST:PID` unless given)
    host: str
    pid: int
    since: datetime


class ProjectLocked(StoreError):
    """Another Fathom process (a server, a CLI run) is indexing this project now."""

    def __init__(self, project: str, holder: LockHolder | None):
        self.project, self.holder = project, holder
        if holder is not None:
            who = (f"Fathom process {holder.holder!r} (host {holder.host}, pid {holder.pid}), "
                   f"indexing since {holder.since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
        else:
            who = "another Fathom process (it did not record its name)"
        super().__init__(
            f"project {project!r} is being indexed by {who}. Two writers never index one "
            f"project at once: wait for that job to finish, or stop it, then retry. "
            f"Searching the project works meanwhile."
        )


class NoShadow(StoreError):
    def __init__(self, project: str, table: str):
        self.project, self.table = project, table
        super().__init__(
            f"project {project!r} table {table!r} has no shadow slot being built; call "
            f"begin_shadow() first (a full re-index starts one)."
        )


# --------------------------------------------------------------------------- values


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


# --------------------------------------------------------------------------- neutral rules


def check_table_kind(table: str) -> str:
    if table not in TABLE_KINDS:
        raise ConfigError(f"unknown table {table!r}: use one of {', '.join(TABLE_KINDS)}")
    return table


def check_project_name(project: str) -> str:
    if not isinstance(project, str) or not project.strip() or len(project) > 200 or any(
        ord(c) < 32 for c in project
    ):
        raise ConfigError(
            f"invalid project name {project!r}: use 1-200 printable characters, e.g. the "
            f"repository's folder name"
        )
    return project


def validate_vectors(space: Space, table: str, vectors: Any, n: int) -> np.ndarray:
    """Return `vectors` as a C-contiguous float32 (n, width) matrix, or raise before any write.

    Width is the space's invariant (WidthMismatch); non-finite or zero vectors would poison
    cosine search for everyone (StoreError)."""
    arr = np.asarray(vectors)
    if arr.ndim == 1 and n == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise StoreError(
            f"table {table!r} needs a 2-d (rows, {space.width}) vector matrix; got shape "
            f"{arr.shape}"
        )
    if arr.shape[1] != space.width:
        raise WidthMismatch(table, space.width, int(arr.shape[1]))
    if arr.shape[0] != n:
        raise StoreError(
            f"table {table!r}: {n} rows but {arr.shape[0]} vectors; each row needs exactly "
            f"one vector"
        )
    if not np.issubdtype(arr.dtype, np.number):
        raise StoreError(f"table {table!r}: vectors must be numeric, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)[:5].tolist()
        err = StoreError(
            f"table {table!r}: vectors at rows {bad} contain NaN or infinity (an encoder "
            f"fault); nothing was written"
        )
        err.rows = bad  # type: ignore[attr-defined]
        raise err
    norms = np.linalg.norm(arr, axis=1)
    if (norms == 0).any():
        bad = np.flatnonzero(norms == 0)[:5].tolist()
        err = StoreError(
            f"table {table!r}: vectors at rows {bad} are all zeros (no direction, cosine is "
            f"undefined); nothing was written"
        )
        err.rows = bad  # type: ignore[attr-defined]
        raise err
    # Stored rows are unit vectors, whoever encoded them (cosine does not change), so a
    # vector of another length in a table is damage that `fathom store verify` can name. Rows
    # already unit (to float32 rounding) are kept bit for bit.
    off = np.abs(norms - 1.0) > 1e-5
    if off.any():
        arr = arr.copy()
        arr[off] /= norms[off, None]
    return arr


def validate_rows(table: str, rows: Sequence[Chunk]) -> None:
    for chunk in rows:
        if not isinstance(chunk, Chunk):
            raise StoreError(f"table {table!r}: rows must be Chunk objects, got {type(chunk)}")
        if chunk.table != table:
            raise StoreError(
                f"chunk {chunk.path}:{chunk.start_line} belongs to the {chunk.table!r} table; "
                f"refused by table {table!r}"
            )


_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def keywords_of(path: str, symbol: str | None, text: str) -> str:
    """The text full-text search indexes: the chunk's symbol, path and text, plus the words
    inside camelCase identifiers (`getUserName` is then found by `user name` as well as by
    `getUserName`). snake_case needs nothing: the tokenizer splits on `_` already."""
    extra = []
    for ident in sorted(set(_IDENT.findall(f"{symbol or ''} {path} {text}"))):
        parts = _PARTS.findall(ident)
        if len(parts) > 1:
            extra.extend(parts)
    return "\n".join([symbol or "", path.replace("/", " "), text, " ".join(extra)])


def snippet_of(text: str) -> str:
    lines = text.splitlines()[:SNIPPET_LINES]
    out = "\n".join(lines)
    return out if len(out) <= SNIPPET_CHARS else out[: SNIPPET_CHARS - 1] + "…"


def space_to_json(space: Space) -> dict[str, Any]:
    return asdict(space)


def space_from_json(data: dict[str, Any] | None) -> Space | None:
    if not data:
        return None
    return Space(table=data["table"], model=data["model"], width=int(data["width"]),
                 reference=data["reference"])


# --------------------------------------------------------------------------- the contract


class Store(ABC):
    """One contract, several backends. Validation and the clearance check live here, in the
    only public write paths, so no backend can skip them (R3: the store is the second lock)."""

    def __init__(self, clearance: Clearance | None = None, *,
                 clock: Callable[[], float] = time.time):
        self.clearance: Clearance = clearance or ReferenceOnlyClearance()
        self.clock = clock

    # ---- writes (template methods: validate, clear, then hand to the backend)

    def write(self, project: str, table: str, rows: Sequence[Chunk], vectors: Any,
              provenance: Provenance, *, slot: Slot = Slot.ACTIVE) -> int:
        """Upsert `rows` (by chunk_id) with their vectors; returns the number of rows written.

        Raises WidthMismatch / StoreError / NotCleared before anything is written."""
        check_project_name(project)
        check_table_kind(table)
        rows = list(rows)
        space = self._require_space(project, table, slot)
        matrix = validate_vectors(space, table, vectors, len(rows))
        validate_rows(table, rows)
        self.clearance.check(space, provenance)
        if not rows:
            return 0
        # Later duplicates win: one row per chunk_id, so upserts stay idempotent.
        last: dict[str, int] = {c.chunk_id: i for i, c in enumerate(rows)}
        if len(last) != len(rows):
            keep = sorted(last.values())
            rows = [rows[i] for i in keep]
            matrix = matrix[keep]
        written_at = datetime.fromtimestamp(self.clock(), tz=UTC)
        self._upsert(project, table, slot, rows, matrix, provenance, written_at)
        return len(rows)

    def replace_vectors(self, project: str, table: str, chunk_ids: Sequence[str], vectors: Any,
                        provenance: Provenance, *, slot: Slot = Slot.ACTIVE) -> int:
        """Re-embedding: give existing rows new vectors and provenance, through the same
        validation and clearance as `write`. Unknown chunk_ids are refused, nothing written."""
        check_table_kind(table)
        chunk_ids = list(chunk_ids)
        space = self._require_space(project, table, slot)
        matrix = validate_vectors(space, table, vectors, len(chunk_ids))
        self.clearance.check(space, provenance)
        if not chunk_ids:
            return 0
        written_at = datetime.fromtimestamp(self.clock(), tz=UTC)
        return self._replace_vectors(project, table, slot, chunk_ids, matrix, provenance,
                                     written_at)

    def carry_vectors(self, project: str, table: str, rows: Sequence[Chunk], *,
                      slot: Slot = Slot.ACTIVE, source: Slot = Slot.ACTIVE) -> set[str]:
        """Content-keyed reuse: write each of `rows` whose text (its content hash) already has
        a vector in the `source` slot, with that vector, so it is not embedded again. Returns
        the chunk ids written; the others are left for the caller to embed.

        Only within one space (the source slot's space must be the target's: the same
        encoder, model and width). A carried row keeps the provenance its vector was written
        under (provider, verdict, time), and that provenance must still pass the clearance
        like any write: a vector whose verdict was since revoked or superseded is not carried,
        it is embedded again."""
        check_project_name(project)
        check_table_kind(table)
        rows = list(rows)
        validate_rows(table, rows)
        space = self._require_space(project, table, slot)
        if not rows or self.space_of(project, table, source) != space:
            return set()
        stored = self._stored_vectors(project, table, source, sorted({c.content_hash
                                                                     for c in rows}))
        allowed: dict[Provenance, bool] = {}
        chosen: list[tuple[Chunk, StoredVector]] = []
        for chunk in rows:
            found = stored.get(chunk.content_hash)
            if found is None:
                continue
            if found.provenance not in allowed:
                try:
                    self.clearance.check(space, found.provenance)
                    allowed[found.provenance] = True
                except NotCleared:
                    allowed[found.provenance] = False
            if allowed[found.provenance]:
                chosen.append((chunk, found))
        if not chosen:
            return set()
        last = {c.chunk_id: i for i, (c, _) in enumerate(chosen)}  # one row per chunk id
        chosen = [chosen[i] for i in sorted(last.values())]
        matrix = validate_vectors(space, table, np.vstack([v.vector for _, v in chosen]),
                                  len(chosen))
        self._upsert_rows(project, table, slot, [c for c, _ in chosen], matrix,
                          [v.provenance for _, v in chosen], [v.written_at for _, v in chosen])
        return {c.chunk_id for c, _ in chosen}

    def _require_space(self, project: str, table: str, slot: Slot) -> Space:
        space = self.space_of(project, table, slot)
        if space is None:
            if slot is Slot.SHADOW:
                raise NoShadow(project, table)
            raise StoreError(
                f"project {project!r} has no active {table!r} table; call open_table() or "
                f"build one with begin_shadow() + promote()"
            )
        return space

    # ---- backend primitives

    @abstractmethod
    def _upsert(self, project: str, table: str, slot: Slot, rows: list[Chunk],
                matrix: np.ndarray, provenance: Provenance, written_at: datetime) -> None: ...

    @abstractmethod
    def _replace_vectors(self, project: str, table: str, slot: Slot, chunk_ids: list[str],
                         matrix: np.ndarray, provenance: Provenance,
                         written_at: datetime) -> int: ...

    def _upsert_rows(self, project: str, table: str, slot: Slot, rows: list[Chunk],
                     matrix: np.ndarray, provenances: list[Provenance],
                     written_at: list[datetime]) -> None:
        """Upsert rows that each carry their own provenance and write time (content reuse).
        This default groups them into `_upsert` calls; a backend may do it in one write."""
        groups: dict[tuple[Provenance, datetime], list[int]] = {}
        for i, key in enumerate(zip(provenances, written_at, strict=True)):
            groups.setdefault(key, []).append(i)
        for (provenance, stamp), idx in groups.items():
            self._upsert(project, table, slot, [rows[i] for i in idx], matrix[idx], provenance,
                         stamp)

    def _stored_vectors(self, project: str, table: str, slot: Slot,
                        content_hashes: Sequence[str]) -> dict[str, StoredVector]:
        """One stored vector per content hash found in the slot (any one of equal texts)."""
        return {}  # a backend that cannot look vectors up by content simply embeds again

    # ---- spaces and slots

    @abstractmethod
    def open_table(self, project: str, table: str, space: Space) -> TableInfo: ...

    @abstractmethod
    def space_of(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> Space | None: ...

    @abstractmethod
    def begin_shadow(self, project: str, table: str, space: Space) -> ShadowInfo: ...

    @abstractmethod
    def promote(self, project: str, table: str) -> TableInfo: ...

    @abstractmethod
    def promote_together(self, project: str, tables: Sequence[str]) -> list[TableInfo]:
        """Promote the shadows of several tables as ONE step: searches see every old table or
        every new one, never code from one run and docs from another (a kill in between would
        otherwise leave them out of step and make the next run re-embed a whole table)."""

    @abstractmethod
    def abandon_shadow(self, project: str, table: str) -> None: ...

    @abstractmethod
    def refresh(self, project: str, table: str) -> None: ...

    # ---- incremental

    @abstractmethod
    def manifest(self, project: str, table: str,
                 slot: Slot = Slot.ACTIVE) -> list[ManifestEntry]: ...

    def chunk_ids(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> set[str]:
        return {e.chunk_id for e in self.manifest(project, table, slot)}

    @abstractmethod
    def delete(self, project: str, table: str, *, chunk_ids: Iterable[str] = (),
               paths: Iterable[str] = (), slot: Slot = Slot.ACTIVE) -> int: ...

    # ---- search primitives

    @abstractmethod
    def vector_search(self, project: str, table: str, vector: Any, k: int = 10, *,
                      where: SearchFilter | None = None) -> list[Hit]: ...

    @abstractmethod
    def text_search(self, project: str, table: str, query: str, k: int = 10, *,
                    where: SearchFilter | None = None) -> list[Hit]: ...

    def search_many(self, projects: Sequence[str], table: str, vector: Any, query: str,
                    k: int = 10, *, where: SearchFilter | None = None) -> Pooled:
        """Both searches over several projects of ONE space, each pooled into one list of
        the best `k`: vector hits by cosine, keyword hits by BM25 (equal scores keep the
        projects' order, then each project's own), every hit carrying its `project`, as if
        the projects were one index. A damaged project is left out and named in `damaged`.

        This default runs every project's two searches at once on a thread pool; LanceStore
        answers the projects its cache holds from memory without it."""
        check_table_kind(table)
        has_text = bool(query and query.strip())
        halves = {p: (_FANOUT_POOL.submit(self.vector_search, p, table, vector, k, where=where),
                      _FANOUT_POOL.submit(self.text_search, p, table, query, k, where=where)
                      if has_text else None)
                  for p in projects}
        pooled = Pooled([], [], {})
        for project, (vec, text) in halves.items():
            try:
                v, t = vec.result(), text.result() if text is not None else []
            except DamagedProject as exc:
                pooled.damaged[project] = exc
                continue
            pooled.vector += [dataclasses.replace(h, project=project) for h in v]
            pooled.text += [dataclasses.replace(h, project=project) for h in t]
        return pooled.best(k)

    @abstractmethod
    def chunk_at(self, project: str, table: str, path: str,
                 line: int) -> tuple[Hit, np.ndarray] | None: ...

    # ---- projects and audit

    @abstractmethod
    def table_info(self, project: str, table: str) -> TableInfo:
        """Rows, space and last indexed time of one table (rows 0 and space None when the
        project has no such table yet); UnknownProject when the project is unknown."""

    @abstractmethod
    def list_projects(self) -> list[ProjectInfo]: ...

    def has_project(self, project: str) -> bool:
        return any(p.name == project for p in self.list_projects())

    @abstractmethod
    def drop_project(self, project: str) -> None: ...

    @abstractmethod
    def provenance_counts(self, project: str, table: str,
                          slot: Slot = Slot.ACTIVE) -> dict[tuple[str, str | None], int]: ...

    @abstractmethod
    def written_since(self, project: str, table: str, since: datetime,
                      provider_id: str | None = None) -> list[ManifestEntry]: ...

    def chunk_texts(self, project: str, table: str, chunk_ids: Sequence[str],
                    slot: Slot = Slot.ACTIVE) -> dict[str, str]:
        """The stored text of these rows, by chunk_id (the gate re-embeds exactly the rows a
        quarantined provider wrote). Unknown ids are simply absent."""
        raise StoreError(f"{type(self).__name__} cannot return stored chunk texts")

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        pass


# --------------------------------------------------------------------------- LanceDB


def _schema(space: Space) -> pa.Schema:
    return pa.schema(
        [
            ("chunk_id", pa.string()),
            ("content_hash", pa.string()),
            ("path", pa.string()),
            ("language", pa.string()),
            ("start_line", pa.int32()),
            ("end_line", pa.int32()),
            ("symbol", pa.string()),
            ("text", pa.string()),
            ("keywords", pa.string()),  # what full-text search indexes: see keywords_of()
            ("vector", pa.list_(pa.float32(), space.width)),
            ("provider_id", pa.string()),
            ("verdict_id", pa.string()),
            ("written_at", pa.timestamp("us", tz="UTC")),
            ("kind", pa.string()),  # symbol kind (last: tables from before it gain it there)
        ],
        metadata={b"fathom.space": json.dumps(space_to_json(space)).encode()},
    )


_HIT_COLUMNS = ["chunk_id", "path", "start_line", "end_line", "symbol", "language", "text",
                "provider_id", "kind"]


def _with_kind(tbl: Any) -> Any:
    """A table written before symbol kinds existed gains the column (empty: its chunks have
    no kind until a re-index writes them; `fathom index --full` reuses every vector)."""
    if "kind" not in tbl.schema.names:
        with contextlib.suppress(Exception):  # another process added it first
            tbl.add_columns({"kind": "CAST(NULL AS STRING)"})
        tbl.checkout_latest()
    return tbl


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _in_list(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(_sql_str(v) for v in values)})"


def _fts_config() -> Any:
    from lancedb.index import FTS

    # No positions: phrase queries are not offered, and the index stays about half the size.
    return FTS(with_position=False)


def _fts_query(query: str) -> str:
    # LanceDB parses quotes as phrase queries, which need positions we do not index; a
    # code query like `"foo"` must still work, so quotes become plain separators.
    return " ".join(query.replace('"', " ").split())


_RUST_SOURCE = re.compile(r",?\s*/\S+\.rs:\d+:\d+")


def _short(exc: BaseException) -> str:
    """An exception as one short line, without the Rust source locations LanceDB appends."""
    text = " ".join(_RUST_SOURCE.sub("", str(exc) or type(exc).__name__).split())
    return text[:300]


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """A LanceStore operation on one project whose storage failures come out typed: a full
    disk as `DiskFull`, anything LanceDB or the filesystem reports about the project's files
    (a table folder gone, a truncated data file, a corrupt manifest) as `DamagedProject`."""

    @functools.wraps(method)
    def wrapper(self: LanceStore, project: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, project, *args, **kwargs)
        except FathomError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, pa.ArrowException) as exc:
            if is_disk_full(exc):
                raise DiskFull(_short(exc)) from exc
            raise DamagedProject(project, _short(exc)) from exc

    return wrapper


# The matrix cache's default bound: 50 projects of 20k chunks at 384-d with their hit
# columns and keyword indexes (~2.1 GiB measured, bench/many_projects.py), with room to spare.
MATRIX_CACHE_BYTES = 5 << 29  # 2.5 GiB
# The most rows a table answered exactly from the cache may have: past it the ANN index is
# faster (exact 1M x 384: 279 ms; IVF-PQ 21.6 ms; docs/benchmarks.md).
EXACT_MAX_ROWS = 250_000

# LanceDB's cache of table metadata (manifests, file footers), shared by every project.
LANCE_METADATA_CACHE_BYTES = 128 << 20

# The ANN path (tables too big for the matrix cache), chosen by vector width from
# measurements on clustered vectors (docs/benchmarks.md): `ann_params` for the index and the
# probes, these for the rest.
ANN_NPROBES = 32
# From this width on, vectors take the wide settings (measured at 2560-d, Qwen3-Embedding-4B's).
ANN_WIDE = 1024
ANN_WIDE_NPROBES = 16
ANN_WIDE_CANDIDATES = 400
# Rows the PQ search hands to an exact re-ranking on full vectors, whatever k is
# (refine_factor = this / k). With 4-dim sub-vectors, at 200k x 384 in clusters of 2,000
# rows (as dense as 1M in 500): recall@10 0.953 from 100 candidates, 0.998 from 300; with
# 16-dim sub-vectors it was 0.70 from 500 at 1M.
ANN_CANDIDATES = 200
# A cached matrix used within this many seconds is never evicted to make room for another
# table: a search over more projects than the cache holds then serves the overflow through
# LanceDB instead of evicting (and reloading) the hot tables on every query.
CACHE_IDLE_S = 60.0


def ann_params(width: int) -> tuple[int, int, int]:
    """(PQ sub-vectors, partitions probed, candidates re-ranked) for an IVF-PQ index on
    `width`-dim vectors, from measurements on clustered vectors (docs/benchmarks.md).

    Up to `ANN_WIDE` dims: sub-vectors of 4 dims, 32 probes, 200 candidates (1M x 384: recall@10
    0.987, 21.6 ms; 16-dim sub-vectors left recall at 0.70 even from 500 candidates). Wider:
    sub-vectors of 16 dims, 16 probes, 400 candidates. At 200k x 2560, 4-dim sub-vectors (640
    codes a vector) took a 35-minute build and 76 ms p50; 16-dim ones build in a fraction of
    that (161 s at 50k, where 8-dim ones had not finished in 14 min) and scan a quarter of the
    codes per row, but rank more coarsely: recall@10 0.82 from 200 candidates, 0.95 from 300,
    1.00 from 500. Probes changed latency, not recall (8 to 64 probes: same recall; 17, 30, 59
    ms at 8, 16, 32 probes)."""
    dims, nprobes, candidates = ((4, ANN_NPROBES, ANN_CANDIDATES) if width <= ANN_WIDE
                                 else (16, ANN_WIDE_NPROBES, ANN_WIDE_CANDIDATES))
    # PQ needs sub-vectors that split the width evenly: at least width / dims of them.
    sub = next(s for s in range(max(1, width // dims), width + 1) if width % s == 0)
    return sub, nprobes, candidates


@dataclass
class CacheStats:
    """What the matrix cache did: `hits` (answered from memory), `loads` (read a table into
    memory, kept or, when it turned out bigger than estimated, used once), `bypassed` (did not
    fit beside the tables in use; answered by LanceDB)."""

    hits: int = 0
    loads: int = 0
    bypassed: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.loads + self.bypassed
        return self.hits / total if total else 0.0


@dataclass
class _Matrix:
    """The in-memory copy of one active table used for exact vector search."""

    key: tuple[str, str, int]  # (lance table name, kind, generation)
    matrix: np.ndarray  # (n, width) float32, rows L2-normalised
    meta: pa.Table  # _HIT_COLUMNS, same row order
    dead: np.ndarray | None = None  # indices of damaged rows (non-finite or zero vectors)
    used: float = 0.0  # the store clock at its last search
    keywords: KeywordIndex | None = None  # the keyword half, same row numbers

    @property
    def nbytes(self) -> int:
        extra = self.keywords.nbytes if self.keywords is not None else 0
        return int(self.matrix.nbytes + self.meta.nbytes + extra)

    def allowed(self, where: SearchFilter | None) -> np.ndarray | None:
        """The row numbers `where` lets through (None: every row)."""
        if where is None:
            return None
        return np.flatnonzero(where.mask(self.meta["language"].to_pylist(),
                                         self.meta["path"].to_pylist(),
                                         self.meta["kind"].to_pylist()))

    def vector_top(self, q: np.ndarray, k: int,
                   rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Row numbers and cosines of the exact top `k` among `rows` (None: all), damaged
        rows never."""
        if self.dead is not None:
            rows = np.setdiff1d(np.arange(self.matrix.shape[0]) if rows is None else rows,
                                self.dead, assume_unique=True)
        n = self.matrix.shape[0] if rows is None else len(rows)
        if n == 0 or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores = (self.matrix if rows is None else self.matrix[rows]) @ q
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return (top if rows is None else rows[top]), scores[top]


# One candidate of a search over many projects: (-score, the project's place, rank in the
# project's own list, project, source, row); sorting by the first three gives the default
# `Store.search_many` order. The source is a cached table (and the row in it) or a Hit.
Candidate = tuple[float, int, int, str, Any, int]


def _cached_tops(cached: Sequence[tuple[int, str, _Matrix]], q: np.ndarray | None, text: str,
                 k: int, where: SearchFilter | None) -> tuple[list[Candidate], list[Candidate]]:
    """The best `k` rows of each cached table by cosine and by BM25, as candidates."""
    vec: list[Candidate] = []
    txt: list[Candidate] = []
    for i, project, entry in cached:
        assert q is not None
        if q.shape[0] != entry.matrix.shape[1]:
            raise WidthMismatch(entry.key[1], entry.matrix.shape[1], int(q.shape[0]))
        allowed = entry.allowed(where)
        vec += _candidates(i, project, entry, *entry.vector_top(q, k, allowed))
        if text and entry.keywords is not None:
            txt += _candidates(i, project, entry, *entry.keywords.search(text, k, rows=allowed))
    return vec, txt


def _candidates(i: int, project: str, entry: _Matrix, rows: np.ndarray,
                scores: np.ndarray) -> list[Candidate]:
    return [(-s, i, r, project, entry, row)
            for r, (row, s) in enumerate(zip(rows.tolist(), scores.tolist(), strict=True))]


@functools.cache
def single_threaded_blas() -> None:
    """numpy's BLAS runs each matrix product on the calling thread alone, process-wide.

    Searches already run in parallel (both halves of a query, every project of a search over
    all of them), and a vector search is one matrix-vector product, bound by memory: a BLAS
    thread pool per product only fights those threads. Measured on the shared 2-core
    machine: 8,000 x 384 took 6.5 ms with OpenBLAS's two threads and 0.77 ms with one; at
    1M x 384 both took ~170 ms. torch (the local encoder) has its own thread pool."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; the default is only slower
        return
    threadpool_limits(1, user_api="blas")


class LanceStore(Store):
    """The embedded default: LanceDB tables under `root`, one database folder per project."""

    BATCH = 4096  # rows per IN (...) filter, keeps SQL filters a sane size

    def __init__(self, root: Path | str, clearance: Clearance | None = None, *,
                 clock: Callable[[], float] = time.time,
                 matrix_cache_bytes: int = MATRIX_CACHE_BYTES, exact_max_rows: int = EXACT_MAX_ROWS,
                 ann_min_rows: int = 20_000, ann_nprobes: int | None = None,
                 ann_candidates: int | None = None, ann_background: bool = True,
                 cache_idle_s: float = CACHE_IDLE_S):
        super().__init__(clearance, clock=clock)
        import lancedb  # local: keeps `import fathom` light for CLIs that never open a store

        self._lancedb = lancedb
        # One LanceDB session for every project, with its metadata cache bounded: left to
        # itself each connection keeps up to 1 GiB of it, and an index job writing a batch at
        # a time fills it with a manifest per version (hundreds of MiB at 200k rows, still
        # growing at 1M: bench/index_memory.py). Searches read the latest version only.
        self._session = lancedb.Session(metadata_cache_size_bytes=LANCE_METADATA_CACHE_BYTES)
        single_threaded_blas()
        self.root = Path(root)
        (self.root / "projects").mkdir(mode=0o700, parents=True, exist_ok=True)
        if matrix_cache_bytes < 0:
            raise ConfigError(f"matrix_cache_bytes must be 0 or more, got {matrix_cache_bytes}")
        if exact_max_rows < 1:
            raise ConfigError(f"exact_max_rows must be 1 or more, got {exact_max_rows}")
        self.matrix_cache_bytes = matrix_cache_bytes
        self.exact_max_rows = exact_max_rows
        self.ann_min_rows = ann_min_rows
        self.ann_nprobes = ann_nprobes  # None (both): by the table's width (`ann_params`)
        self.ann_candidates = ann_candidates
        self.ann_background = ann_background
        self.cache_idle_s = cache_idle_s
        self.cache_stats = CacheStats()
        self._ann_jobs: dict[tuple[str, str], threading.Thread] = {}
        self._ann_ready: set[tuple[str, str]] = set()
        self._ann_slots = threading.Semaphore(1)
        self._ann_failed: set[tuple[str, str]] = set()
        # (slug, lance name) -> the exact copy searched while that table's ANN index builds
        self._windows: dict[tuple[str, str], MappedMatrix] = {}
        self.window_stats = WindowStats()
        self._meta_row_bytes = 0  # the largest hit-column bytes per row seen (see _matrix)
        self._mutex = threading.RLock()
        self._dbs: dict[str, Any] = {}
        self._tables: dict[tuple[str, str], Any] = {}  # (slug, lance name) -> handle
        self._matrices: OrderedDict[tuple[str, str], _Matrix] = OrderedDict()
        self._seen: dict[tuple[str, str], int] = {}  # handle -> generation it was current at
        self._load_locks: dict[tuple[str, str], threading.Lock] = {}

    # ---- layout and state

    @staticmethod
    def slug(project: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", project).strip(".")[:64] or "project"
        if safe == project:
            return safe
        return f"{safe}-{hashlib.sha256(project.encode()).hexdigest()[:10]}"

    def _dir(self, project: str) -> Path:
        return self.root / "projects" / self.slug(check_project_name(project))

    def _state_path(self, project: str) -> Path:
        return self._dir(project) / "state.json"

    def _read_state(self, project: str) -> dict[str, Any] | None:
        """The project's pointer file; None only when there is none. A garbled one is damage,
        never "no project": reading it as empty would hide (or overwrite) a whole index."""
        path = self._state_path(project)
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DamagedProject(project, f"{path} is unreadable ({_short(exc)})") from None
        if not (isinstance(state, dict) and isinstance(state.get("tables"), dict)
                and isinstance(state.get("next"), int)):
            raise DamagedProject(project, f"{path} does not hold a project state")
        return state

    def _write_state(self, project: str, state: dict[str, Any]) -> None:
        atomic_write_text(self._state_path(project), json.dumps(state, indent=2, sort_keys=True))

    @contextlib.contextmanager
    def _locked(self, project: str) -> Iterator[dict[str, Any]]:
        """Read-modify-write of one project's state, serialised across threads and processes
        (flock), so two writers never lose each other's pointer change."""
        d = self._dir(project)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._mutex, open(d / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                state = self._read_state(project) or {"project": project, "tables": {},
                                                      "next": 1}
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    self._write_state(project, state)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def project_lock(self, project: str, holder: str | None = None) -> Iterator[LockHolder]:
        """Hold the index lock of `project` for the block: one writer per project across
        processes (CLI runs, servers, a file watcher).

        An OS lock (flock) on `.index.lock` in the project's folder, taken without waiting: a
        second writer gets `ProjectLocked` at once, naming the holder recorded in the file.
        The kernel releases the lock when its holder dies, however it dies, so a stale file
        from a killed run is simply taken over (its record is overwritten)."""
        host = socket.gethostname()
        holder = holder or f"fathom@{host}:{os.getpid()}"
        d = self._dir(project)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = d / ".index.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                raise ProjectLocked(project, self._lock_record(project, path)) from None
            since = datetime.fromtimestamp(self.clock(), tz=UTC)
            info = LockHolder(project, holder, host, os.getpid(), since)
            record = json.dumps({"holder": holder, "host": host, "pid": info.pid,
                                 "since": since.isoformat()}).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
            try:
                yield info
            finally:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def lock_holder(self, project: str) -> LockHolder | None:
        """Who holds the index lock of `project` now, or None."""
        path = self._dir(project) / ".index.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return self._lock_record(project, path)
        finally:
            os.close(fd)  # closing drops a lock this probe took
        return None

    @staticmethod
    def _lock_record(project: str, path: Path) -> LockHolder | None:
        # The holder writes its record right after taking the lock; give it a moment.
        for _ in range(20):
            try:
                data = json.loads(path.read_text() or "null")
                if data:
                    return LockHolder(project, str(data["holder"]), str(data["host"]),
                                      int(data["pid"]), datetime.fromisoformat(data["since"]))
            except (OSError, ValueError, KeyError, TypeError):
                pass
            time.sleep(0.01)
        return None

    def _db(self, project: str) -> Any:
        slug = self.slug(project)
        db = self._dbs.get(slug)
        if db is None:
            db = self._lancedb.connect(str(self._dir(project)), session=self._session)
            self._dbs[slug] = db
        return db

    def _table(self, project: str, name: str, *, latest: bool = True) -> Any:
        key = (self.slug(project), name)
        tbl = self._tables.get(key)
        if tbl is None:
            tbl = _with_kind(self._db(project).open_table(name))
            self._tables[key] = tbl
        elif latest:
            # Another process may have written since this handle was opened.
            tbl.checkout_latest()
        return tbl

    def _entry(self, project: str, table: str) -> dict[str, Any]:
        state = self._read_state(project)
        if state is None:
            raise UnknownProject(project, [p.name for p in self.list_projects()])
        return state["tables"].get(table, {})

    def _slot_name(self, project: str, table: str, slot: Slot) -> str | None:
        state = self._read_state(project)
        if state is None:
            return None
        return state["tables"].get(table, {}).get(slot.value)

    def _create(self, project: str, state: dict[str, Any], table: str, space: Space) -> str:
        # A random tail: a dropped and re-created project never reuses a name that another
        # process may still hold a handle or a cached matrix for.
        name = f"{table}_{state['next']}_{uuid.uuid4().hex[:8]}"
        state["next"] += 1
        db = self._db(project)
        with contextlib.suppress(Exception):
            db.drop_table(name)  # a leftover from a crash before the pointer was written
        tbl = db.create_table(name, schema=_schema(space))
        # The keyword index exists from birth: LanceDB answers full-text queries only on a
        # table with one, and then also searches rows added since the index was last updated.
        tbl.create_index("keywords", config=_fts_config(), replace=True)
        self._tables[(self.slug(project), name)] = tbl
        return name

    def _drop(self, project: str, name: str) -> None:
        self._tables.pop((self.slug(project), name), None)
        try:
            self._db(project).drop_table(name)
        except Exception as exc:  # noqa: BLE001 - a leftover is collected at the next promote
            log.warning("could not drop old table %s of %s: %s", name, project, exc)

    # ---- spaces and slots

    @_guarded
    def open_table(self, project: str, table: str, space: Space) -> TableInfo:
        check_table_kind(table)
        self._check_space_kind(table, space)
        with self._locked(project) as state:
            entry = state["tables"].setdefault(table, {})
            current = space_from_json(entry.get("space"))
            if entry.get("active") is None:
                entry["active"] = self._create(project, state, table, space)
                entry["space"] = space_to_json(space)
                entry["generation"] = entry.get("generation", 0) + 1
            elif current != space:
                raise SpaceMismatch(project, table, current, space)  # type: ignore[arg-type]
            else:
                self._check_table_metadata(project, entry["active"], space)
        return self.table_info(project, table)

    @staticmethod
    def _check_space_kind(table: str, space: Space) -> None:
        if space.table != table:
            raise StoreError(f"a {space.table!r} space cannot back the {table!r} table")

    def _check_table_metadata(self, project: str, name: str, space: Space) -> None:
        meta = self._table(project, name).schema.metadata or {}
        raw = meta.get(b"fathom.space")
        stored = space_from_json(json.loads(raw)) if raw else None
        if stored != space:
            raise SpaceMismatch(project, space.table, stored or space, space)

    @_guarded
    def space_of(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> Space | None:
        check_table_kind(table)
        state = self._read_state(project)
        if state is None:
            return None
        entry = state["tables"].get(table, {})
        if entry.get(slot.value) is None:
            return None
        key = "space" if slot is Slot.ACTIVE else "shadow_space"
        return space_from_json(entry.get(key))

    @_guarded
    def begin_shadow(self, project: str, table: str, space: Space) -> ShadowInfo:
        check_table_kind(table)
        self._check_space_kind(table, space)
        with self._locked(project) as state:
            entry = state["tables"].setdefault(table, {})
            name = entry.get("shadow")
            if name is not None and space_from_json(entry.get("shadow_space")) == space:
                rows = self._table(project, name).count_rows()
                return ShadowInfo(project, table, space, rows, resumed=True)
            if name is not None:
                # A shadow of another space is useless to this run: start over.
                self._drop(project, name)
            entry["shadow"] = self._create(project, state, table, space)
            entry["shadow_space"] = space_to_json(space)
        return ShadowInfo(project, table, space, 0, resumed=False)

    def promote(self, project: str, table: str) -> TableInfo:
        return self.promote_together(project, [table])[0]

    @_guarded
    def promote_together(self, project: str, tables: Sequence[str]) -> list[TableInfo]:
        names: dict[str, str] = {}
        for table in tables:
            check_table_kind(table)
            name = self._entry(project, table).get("shadow")
            if name is None:
                raise NoShadow(project, table)
            names[table] = name
        for table, name in names.items():
            # Self-check: a shadow holding one chunk id twice (two writers raced, or damage)
            # must never become what searches read.
            rows, ids = self._id_counts(project, name)
            if rows != ids:
                self.abandon_shadow(project, table)
                raise DuplicateChunks(project, table, rows, ids)
            # Indexes are built on the shadow before the switch, so the first search after
            # promotion is as fast as the last one before it.
            self._build_indexes(project, name)
        old: list[str] = []
        with self._locked(project) as state:
            for table, name in names.items():
                if state["tables"].get(table, {}).get("shadow") != name:
                    raise NoShadow(project, table)
            for table, name in names.items():
                entry = state["tables"][table]
                if entry.get("active") is not None:
                    old.append(entry["active"])
                entry["active"] = name
                entry["space"] = entry.pop("shadow_space")
                entry["shadow"] = None
                entry["generation"] = entry.get("generation", 0) + 1
                entry["last_indexed"] = self.clock()
            # The pointer file is rewritten (atomically) when this block exits: that one
            # rename is the promotion of every table. Dropping the old versions comes after.
        for name in old:
            self._drop(project, name)
        self._collect_garbage(project)
        return [self.table_info(project, table) for table in names]

    def _id_counts(self, project: str, name: str) -> tuple[int, int]:
        ids = (self._table(project, name).search().select(["chunk_id"]).limit(None)
               .to_arrow()["chunk_id"])
        return len(ids), len(ids.unique())

    @_guarded
    def abandon_shadow(self, project: str, table: str) -> None:
        check_table_kind(table)
        with self._locked(project) as state:
            entry = state["tables"].get(table, {})
            name = entry.get("shadow")
            entry["shadow"] = None
            entry.pop("shadow_space", None)
        if name is not None:
            self._drop(project, name)

    @_guarded
    def refresh(self, project: str, table: str) -> None:
        check_table_kind(table)
        name = self._entry(project, table).get("active")
        if name is None:
            return
        self._build_indexes(project, name)
        with self._locked(project) as state:
            entry = state["tables"][table]
            entry["generation"] = entry.get("generation", 0) + 1

    def _build_indexes(self, project: str, name: str) -> None:
        tbl = self._table(project, name)
        # Merges the small fragments left by batch writes and folds new rows into the
        # keyword index (LanceDB updates indexes incrementally here).
        tbl.optimize()
        if not any(i.index_type == "FTS" for i in tbl.list_indices()):
            tbl.create_index("keywords", config=_fts_config(), replace=True)
        if self._needs_ann(tbl):
            # Too big for the in-memory matrix. The ANN index takes minutes at a million rows,
            # so it is built after the switch, in the background: meanwhile a new table is
            # answered exactly from a memory-mapped copy (`_open_window`), a refreshed one by
            # its previous index plus a flat scan of the rows added since.
            self._ann_later(project, name)

    def _needs_ann(self, tbl: Any, *, uncached: bool = False) -> bool:
        """Whether the table deserves an ANN index: from `ann_min_rows` rows, when it is too
        big for the cache or past `exact_max_rows`, or (`uncached`) when the cache had no room
        for it beside the tables in use (many projects: their overflow is searched through
        LanceDB too)."""
        n = tbl.count_rows()
        width = tbl.schema.field("vector").type.list_size
        return n >= self.ann_min_rows and (uncached or self._too_big_for_exact(n, width))

    def _too_big_for_exact(self, rows: int, width: int) -> bool:
        """A table the matrix cache never holds: its matrix alone is past the bound, or it has
        more rows than an exact scan answers faster than the ANN index."""
        return rows > self.exact_max_rows or rows * width * 4 > self.matrix_cache_bytes

    def _ann_later(self, project: str, name: str) -> None:
        """Build (or rebuild) the table's ANN index: in a daemon thread, one per table at a
        time in this process, or right here when `ann_background` is off."""
        key = (self.slug(project), name)
        if not self.ann_background:
            self._build_ann(project, name)
            return
        with self._mutex:
            job = self._ann_jobs.get(key)
            if job is not None and job.is_alive():
                return
            job = threading.Thread(target=self._build_in_background, args=(project, name),
                                   daemon=True, name=f"fathom-ann-{name}")
            self._ann_jobs[key] = job
        job.start()

    def _build_in_background(self, project: str, name: str) -> None:
        """The background build: an exact memory-mapped copy serves the table's searches
        until the index exists (see `fathom.index.window`), then goes."""
        key = (self.slug(project), name)
        try:
            self._open_window(project, name)
            self._build_ann(project, name)
        finally:
            self._close_window(key)

    def _window_dir(self, project: str, name: str) -> Path:
        # A hidden folder beside the tables: LanceDB lists `*.lance` folders only, and so
        # do `store verify` and its repairs.
        return self._dir(project) / ".exact" / name

    def _open_window(self, project: str, name: str) -> None:
        """Copy a table without a vector index for the build window. A refreshed table
        keeps its previous index meanwhile (LanceDB scans only the rows added since), so it
        gets no copy; nor does one whose copy fails (disk full): LanceDB's flat scan serves."""
        try:
            tbl = self._table(project, name)
            if any(i.columns == ["vector"] for i in tbl.list_indices()):
                return
            window = MappedMatrix.write(self._window_dir(project, name), tbl)
        except (StaleCopy, OSError, RuntimeError, ValueError) as exc:
            log.info("no exact copy of %s of %s for its ANN build: %s", name, project,
                     _short(exc))
            return
        with self._mutex:
            self._windows[(self.slug(project), name)] = window
            self.window_stats.written += 1

    def _close_window(self, key: tuple[str, str], *, stale: bool = False) -> None:
        with self._mutex:
            window = self._windows.pop(key, None)
            if window is not None and stale:
                self.window_stats.dropped += 1
        if window is not None:
            window.remove()

    def _window_search(self, project: str, table: str, tbl: Any, q: np.ndarray,
                       k: int) -> list[Hit] | None:
        """The exact top k from the table's build-window copy, or None when it has none
        current: a copy of an older version (written to since) is dropped, never served."""
        key = (self.slug(project), tbl.name)
        window = self._windows.get(key)
        if window is None:
            return None
        if tbl.version != window.version:
            self._close_window(key, stale=True)
            return None
        rows, scores = window.top(q, k)
        row_ids = window.row_ids[rows]
        res = (tbl.take_row_ids(row_ids.tolist()).with_row_id()
               .select(_HIT_COLUMNS).to_arrow())
        where = {int(r): i for i, r in enumerate(res["_rowid"].to_pylist())}
        if len(where) != len(row_ids) or any(int(r) not in where for r in row_ids):
            self._close_window(key, stale=True)  # the rows moved: no longer this version
            return None
        res = res.take(pa.array([where[int(r)] for r in row_ids]))
        with self._mutex:
            self.window_stats.served += 1
        return self._hits_from(res, table, scores.tolist(), "vector")

    def _build_ann(self, project: str, name: str) -> None:
        from lancedb.index import IvfPq

        key = (self.slug(project), name)
        try:
            tbl = self._table(project, name)
            # The sub-vectors by width (`ann_params`); the partition count is LanceDB's own.
            sub, _, _ = ann_params(tbl.schema.field("vector").type.list_size)
            with self._ann_slots:  # one build at a time: each one takes the cores it finds
                tbl.create_index("vector",
                                 config=IvfPq(distance_type="cosine", num_sub_vectors=sub),
                                 replace=True)
        except Exception as exc:  # noqa: BLE001 - dropped meanwhile, or another process won
            log.info("ANN index for %s of %s not built: %s", name, project, _short(exc))
            with self._mutex:
                self._ann_failed.add(key)  # searches do not retry it; refresh/promote do
            return
        with self._mutex:
            self._ann_ready.add(key)
        # Searchers (this process and others) reopen the table at the next generation and
        # find the index.
        with contextlib.suppress(StoreError), self._locked(project) as state:
            for entry in state["tables"].values():
                if entry.get("active") == name:
                    entry["generation"] = entry.get("generation", 0) + 1

    def ann_pending(self, project: str, table: str) -> bool:
        """Whether the active table's ANN index is being built in this process now."""
        name, _ = self._active(project, table)
        job = self._ann_jobs.get((self.slug(project), name or ""))
        return job is not None and job.is_alive()

    def wait_for_ann(self, timeout: float | None = None) -> bool:
        """Wait for the ANN builds this process started; True when none is left running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for job in list(self._ann_jobs.values()):
            job.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(j.is_alive() for j in self._ann_jobs.values())

    def _collect_garbage(self, project: str) -> None:
        state = self._read_state(project) or {"tables": {}}
        live = {v for e in state["tables"].values() for k, v in e.items()
                if k in ("active", "shadow") and v}
        try:
            names = self._db(project).list_tables().tables
        except Exception:  # noqa: BLE001
            return
        for name in names:
            if name not in live:
                self._drop(project, name)
        # Build-window copies of tables no longer live (a process stopped mid-build); a
        # live table's copy is replaced by its next build and removed when that ends.
        for folder in (self._dir(project) / ".exact").glob("*"):
            if folder.name.removesuffix(".part") not in live:
                shutil.rmtree(folder, ignore_errors=True)

    # ---- writes

    @_guarded
    def _upsert(self, project: str, table: str, slot: Slot, rows: list[Chunk],
                matrix: np.ndarray, provenance: Provenance, written_at: datetime) -> None:
        n = len(rows)
        self._upsert_rows(project, table, slot, rows, matrix, [provenance] * n, [written_at] * n)

    @_guarded
    def _upsert_rows(self, project: str, table: str, slot: Slot, rows: list[Chunk],
                     matrix: np.ndarray, provenances: list[Provenance],
                     written_at: list[datetime]) -> None:
        name = self._slot_name(project, table, slot)
        tbl = self._table(project, name)  # type: ignore[arg-type]
        width = matrix.shape[1]
        # Lone surrogates (from undecodable files) cannot be stored as UTF-8.
        texts = [c.text.encode("utf-8", "replace").decode("utf-8") for c in rows]
        data = pa.table(
            {
                "chunk_id": [c.chunk_id for c in rows],
                "content_hash": [c.content_hash for c in rows],
                "path": [c.path for c in rows],
                "language": [c.language for c in rows],
                "start_line": pa.array([c.start_line for c in rows], pa.int32()),
                "end_line": pa.array([c.end_line for c in rows], pa.int32()),
                "symbol": [c.symbol for c in rows],
                "text": texts,
                "keywords": [keywords_of(c.path, c.symbol, t) for c, t in zip(rows, texts,
                                                                              strict=True)],
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), width),
                "provider_id": [p.provider_id for p in provenances],
                "verdict_id": pa.array([p.verdict_id for p in provenances], pa.string()),
                "written_at": pa.array(written_at, pa.timestamp("us", tz="UTC")),
                "kind": pa.array([c.kind for c in rows], pa.string()),
            },
            schema=tbl.schema,
        )
        self._merge(tbl, data)
        if slot is Slot.ACTIVE:
            self._bump(project, table)

    @_guarded
    def _stored_vectors(self, project: str, table: str, slot: Slot,
                        content_hashes: Sequence[str]) -> dict[str, StoredVector]:
        name = self._slot_name(project, table, slot)
        if name is None or not content_hashes:
            return {}
        tbl = self._table(project, name)
        out: dict[str, StoredVector] = {}
        hashes = list(content_hashes)
        for i in range(0, len(hashes), self.BATCH):
            res = self._rows_where(tbl, _in_list("content_hash", hashes[i:i + self.BATCH]),
                                   ["content_hash", "vector", "provider_id", "verdict_id",
                                    "written_at"])
            width = tbl.schema.field("vector").type.list_size
            vectors = (res["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
                       .reshape(-1, width))
            for j, (h, pid, vid, at) in enumerate(zip(
                    res["content_hash"].to_pylist(), res["provider_id"].to_pylist(),
                    res["verdict_id"].to_pylist(), res["written_at"].to_pylist(), strict=True)):
                out.setdefault(h, StoredVector(np.array(vectors[j], dtype=np.float32),
                                               Provenance(pid, vid), at))
        return out

    @staticmethod
    def _merge(tbl: Any, data: pa.Table) -> None:
        (tbl.merge_insert("chunk_id").when_matched_update_all()
         .when_not_matched_insert_all().execute(data))

    def _bump(self, project: str, table: str) -> None:
        with self._locked(project) as state:
            entry = state["tables"].setdefault(table, {})
            entry["generation"] = entry.get("generation", 0) + 1
            entry["last_indexed"] = self.clock()

    def _rows_where(self, tbl: Any, where: str, columns: list[str] | None = None) -> pa.Table:
        q = tbl.search().where(where)
        if columns:
            q = q.select(columns)
        return q.limit(None).to_arrow() if hasattr(q, "limit") else q.to_arrow()

    @_guarded
    def _replace_vectors(self, project: str, table: str, slot: Slot, chunk_ids: list[str],
                         matrix: np.ndarray, provenance: Provenance,
                         written_at: datetime) -> int:
        name = self._slot_name(project, table, slot)
        tbl = self._table(project, name)  # type: ignore[arg-type]
        parts = [self._rows_where(tbl, _in_list("chunk_id", chunk_ids[i:i + self.BATCH]))
                 for i in range(0, len(chunk_ids), self.BATCH)]
        existing = pa.concat_tables(parts) if parts else None
        found = set(existing["chunk_id"].to_pylist()) if existing is not None else set()
        missing = [c for c in chunk_ids if c not in found]
        if missing:
            err = StoreError(
                f"project {project!r} table {table!r}: {len(missing)} chunk ids to re-embed are "
                f"not in the table (e.g. {missing[:3]}); nothing was replaced"
            )
            err.missing = missing  # type: ignore[attr-defined]
            raise err
        order = {cid: i for i, cid in enumerate(chunk_ids)}
        existing = existing.select(tbl.schema.names)  # type: ignore[union-attr]
        idx = [order[c] for c in existing["chunk_id"].to_pylist()]
        width = matrix.shape[1]
        n = existing.num_rows
        cols = {name: existing[name] for name in existing.column_names}
        cols["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(matrix[idx].ravel()), width)
        cols["provider_id"] = pa.array([provenance.provider_id] * n, pa.string())
        cols["verdict_id"] = pa.array([provenance.verdict_id] * n, pa.string())
        cols["written_at"] = pa.array([written_at] * n, pa.timestamp("us", tz="UTC"))
        self._merge(tbl, pa.table(cols, schema=tbl.schema))
        if slot is Slot.ACTIVE:
            self._bump(project, table)
        return n

    @_guarded
    def delete(self, project: str, table: str, *, chunk_ids: Iterable[str] = (),
               paths: Iterable[str] = (), slot: Slot = Slot.ACTIVE) -> int:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        if name is None:
            return 0
        tbl = self._table(project, name)
        before = tbl.count_rows()
        for column, values in (("chunk_id", list(chunk_ids)), ("path", list(paths))):
            for i in range(0, len(values), self.BATCH):
                tbl.delete(_in_list(column, values[i:i + self.BATCH]))
        removed = before - tbl.count_rows()
        if removed and slot is Slot.ACTIVE:
            self._bump(project, table)
        return removed

    @_guarded
    def manifest(self, project: str, table: str,
                 slot: Slot = Slot.ACTIVE) -> list[ManifestEntry]:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        if name is None:
            return []
        data = (self._table(project, name).search().select(["chunk_id", "content_hash", "path"])
                .limit(None).to_arrow())
        return [ManifestEntry(*row) for row in zip(data["chunk_id"].to_pylist(),
                                                  data["content_hash"].to_pylist(),
                                                  data["path"].to_pylist(), strict=True)]

    # ---- search

    def _active(self, project: str, table: str) -> tuple[str | None, int]:
        state = self._read_state(project)
        if state is None:
            raise UnknownProject(project, [p.name for p in self.list_projects()])
        entry = state["tables"].get(table, {})
        return entry.get("active"), int(entry.get("generation", 0))

    def _active_handle(self, project: str, table: str) -> tuple[str | None, int, Any]:
        """The active table's name, generation and a Lance handle current to that generation.

        Handles are kept open between searches (opening costs ~1 ms); the generation in
        state.json says when another writer (thread or process) has changed the table."""
        name, generation = self._active(project, table)
        if name is None:
            return None, generation, None
        key = (self.slug(project), name)
        with self._mutex:
            tbl = self._tables.get(key)
            if tbl is None:
                tbl = _with_kind(self._db(project).open_table(name))
                self._tables[key] = tbl
            elif self._seen.get(key) != generation:
                tbl.checkout_latest()
            self._seen[key] = generation
        return name, generation, tbl

    def _matrix(self, project: str, table: str) -> tuple[_Matrix | None, Any]:
        """The cached matrix for the active table (loading it if it fits), or None when the
        table is answered by LanceDB; plus the Lance handle of the active table.

        The cache never holds more than `matrix_cache_bytes` (matrix plus hit columns). To
        make room it evicts the least recently used tables, but only those idle for
        `cache_idle_s`: a table that does not fit beside the ones in use is answered by
        LanceDB (counted as `bypassed`), so a search over more projects than the cache holds
        never turns every query into a reload."""
        name, generation, tbl = self._active_handle(project, table)
        if name is None:
            return None, None
        slug = self.slug(project)
        key = (name, table, generation)
        with self._mutex:
            load_lock = self._load_locks.setdefault((slug, table), threading.Lock())
        # One loader per table; other tables' searches and all writes go on meanwhile.
        with load_lock:
            now = self.clock()
            with self._mutex:
                cached = self._matrices.get((slug, table))
                if cached is not None and cached.key == key:
                    self._used(slug, table, now)
                    return cached, tbl
                if cached is not None:  # a stale generation: its memory is free again
                    del self._matrices[(slug, table)]
            width = tbl.schema.field("vector").type.list_size
            n = tbl.count_rows()
            # The size of the hit columns and the keyword index is known only after loading:
            # before, the largest size per row among the tables loaded so far is the estimate.
            if (self._too_big_for_exact(n, width)
                    or not self._make_room(n * (width * 4 + self._meta_row_bytes), now)):
                with self._mutex:
                    self.cache_stats.bypassed += 1
                return None, tbl
            entry = self._load_matrix(project, table, tbl, key, width)
            entry.used = now
            with self._mutex:
                rows = max(1, entry.matrix.shape[0])
                self._meta_row_bytes = max(self._meta_row_bytes,
                                           (entry.nbytes - entry.matrix.nbytes) // rows)
                self.cache_stats.loads += 1
                if not self._make_room(entry.nbytes, now):
                    return entry, tbl  # the rest tipped it over: used once, not kept
                self._matrices[(slug, table)] = entry
            return entry, tbl

    def _cached(self, project: str, table: str, *, use: bool = False) -> _Matrix | None:
        """The active table's cached entry if the cache holds it now; it loads nothing, and
        counts a hit only when `use` says this search is the table's vector half."""
        name, generation = self._active(project, table)
        slug = self.slug(project)
        with self._mutex:
            cached = self._matrices.get((slug, table))
            if cached is None or cached.key != (name, table, generation):
                return None
            if use:
                self._used(slug, table, self.clock())
        return cached

    def _used(self, slug: str, table: str, now: float) -> None:
        """A search read this cached table: most recently used, and a hit."""
        with self._mutex:
            self._matrices.move_to_end((slug, table))
            self._matrices[(slug, table)].used = now
            self.cache_stats.hits += 1

    def _make_room(self, nbytes: int, now: float) -> bool:
        """Evict idle tables (least recently used first) until `nbytes` more fit the bound;
        False, evicting nothing, when they cannot."""
        with self._mutex:
            held = sum(m.nbytes for m in self._matrices.values())
            idle = [k for k, m in self._matrices.items() if now - m.used >= self.cache_idle_s]
            freeable = sum(self._matrices[k].nbytes for k in idle)
            if held - freeable + nbytes > self.matrix_cache_bytes:
                return False
            for k in idle:  # OrderedDict order: least recently used first
                if held + nbytes <= self.matrix_cache_bytes:
                    break
                held -= self._matrices.pop(k).nbytes
            return True

    @staticmethod
    def _load_matrix(project: str, table: str, tbl: Any, key: tuple[str, str, int],
                     width: int) -> _Matrix:
        data = tbl.search().select(["vector", *_HIT_COLUMNS, "keywords"]).limit(None).to_arrow()
        vec = data["vector"].combine_chunks()
        matrix = np.array(vec.flatten().to_numpy(zero_copy_only=False), dtype=np.float32,
                          copy=True).reshape(-1, width)
        # The keyword half of a cached table is answered from memory too (its per-query cost
        # in LanceDB is most of a search over many projects); same ranking, see keywords.py.
        keywords = KeywordIndex.build(data["keywords"])
        meta = data.drop_columns(["vector", "keywords"]).combine_chunks()
        del data, vec
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        bad = ~np.isfinite(norms[:, 0]) | (norms[:, 0] == 0)
        if bad.any():
            # Damaged rows (a corrupt data file) never rank: zeroed, and named in the log.
            log.warning("project %s table %s: %d rows hold non-finite or zero vectors; "
                        "they are left out of vector search. Run `fathom store verify %s "
                        "--repair`.", project, table, int(bad.sum()), project)
            matrix[bad] = 0.0
            norms[bad] = 1.0
        with np.errstate(invalid="ignore", over="ignore"):
            matrix /= norms  # in place: loading holds one copy of the matrix, not three
        np.nan_to_num(matrix, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        return _Matrix(key, matrix, meta, np.flatnonzero(bad) if bad.any() else None,
                       keywords=keywords)

    @staticmethod
    def _hits_from(meta: pa.Table | dict[str, list[Any]], table: str, scores: Sequence[float],
                   kind: str, project: str | None = None) -> list[Hit]:
        cols = meta.to_pydict() if isinstance(meta, pa.Table) else meta
        out = []
        for i, score in enumerate(scores):
            out.append(Hit(
                chunk_id=cols["chunk_id"][i], path=cols["path"][i],
                start_line=int(cols["start_line"][i]), end_line=int(cols["end_line"][i]),
                symbol=cols["symbol"][i], language=cols["language"][i], score=float(score),
                snippet=snippet_of(cols["text"][i] or ""), provider_id=cols["provider_id"][i],
                table=table,
                vector_score=float(score) if kind == "vector" else None,
                text_score=float(score) if kind == "text" else None,
                kind=(cols.get("kind") or [None] * (i + 1))[i], project=project,
            ))
        return out

    def _query_vector(self, project: str, table: str, vector: Any) -> np.ndarray:
        space = self.space_of(project, table)
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if space is not None and q.shape[0] != space.width:
            raise WidthMismatch(table, space.width, int(q.shape[0]))
        if not np.isfinite(q).all() or not np.linalg.norm(q):
            raise StoreError("the query vector is zero or not finite; check the encoder")
        return q / np.linalg.norm(q)

    @_guarded
    def vector_search(self, project: str, table: str, vector: Any, k: int = 10, *,
                      where: SearchFilter | None = None) -> list[Hit]:
        check_table_kind(table)
        q = self._query_vector(project, table, vector)
        cached, tbl = self._matrix(project, table)
        if tbl is None or k <= 0:
            return []
        if cached is not None:
            # The filter picks the candidate rows first; the top k is cut among them.
            rows, scores = cached.vector_top(q, k, cached.allowed(where))
            return self._hits_from(cached.meta.take(pa.array(rows)), table, scores.tolist(),
                                   "vector")
        if where is None:
            hits = self._window_search(project, table, tbl, q, k)
            if hits is not None:
                return hits
        self._ensure_ann(project, tbl)
        _, nprobes, candidates = ann_params(len(q))
        search = (tbl.search(q, vector_column_name="vector").distance_type("cosine")
                  .nprobes(self.ann_nprobes or nprobes)
                  .refine_factor(max(1, -(-(self.ann_candidates or candidates) // k))))
        if where is not None:
            search = search.where(where.lance_sql(), prefilter=True)
        res = search.limit(k).select([*_HIT_COLUMNS, "_distance"]).to_arrow()
        scores = [1.0 - d for d in res["_distance"].to_pylist()]
        return self._hits_from(res, table, scores, "vector")

    def _ensure_ann(self, project: str, tbl: Any) -> None:
        """A table searched through LanceDB without an ANN index (the process that promoted
        it stopped before the build finished, or the cache had no room for it) gets one built
        here, in the background (served exactly meanwhile, see `_build_in_background`)."""
        key = (self.slug(project), tbl.name)
        if key in self._ann_ready or key in self._ann_failed:
            return
        if not self._needs_ann(tbl, uncached=True):
            return
        if any(i.columns == ["vector"] for i in tbl.list_indices()):
            with self._mutex:
                self._ann_ready.add(key)
            return
        self._ann_later(project, tbl.name)

    @_guarded
    def text_search(self, project: str, table: str, query: str, k: int = 10, *,
                    where: SearchFilter | None = None) -> list[Hit]:
        check_table_kind(table)
        text = _fts_query(query)
        if not text or k <= 0:
            return []
        cached = self._cached(project, table)
        if cached is not None and cached.keywords is not None:
            rows, scores = cached.keywords.search(text, k, rows=cached.allowed(where))
            return self._hits_from(cached.meta.take(pa.array(rows)), table, scores.tolist(),
                                   "text")
        for attempt in (1, 2):
            name, _, tbl = self._active_handle(project, table)
            if name is None:
                return []
            try:
                search = tbl.search(text, query_type="fts")
                if where is not None:
                    search = search.where(where.lance_sql(), prefilter=True)
                res = search.limit(k).select([*_HIT_COLUMNS, "_score"]).to_arrow()
                break
            except Exception as exc:  # noqa: BLE001
                if attempt == 1 and self._active(project, table)[0] != name:
                    continue  # promoted (and the old table dropped) under our feet: retry
                # A keyword query LanceDB cannot answer must not take the vector half down.
                log.warning("full-text query %r failed on %s/%s: %s", text, project, table, exc)
                return []
        return self._hits_from(res, table, res["_score"].to_pylist(), "text")

    def search_many(self, projects: Sequence[str], table: str, vector: Any, query: str,
                    k: int = 10, *, where: SearchFilter | None = None) -> Pooled:
        """`Store.search_many`, ranked the same, hit for hit, but a project the matrix
        cache holds costs one matmul and one keyword-index lookup: its best `k` row numbers
        join the pool, and Hits are built only for the pooled best `k`. The cached projects
        are split between this thread and one pool thread (the matmuls release the GIL); the
        other projects are searched through LanceDB meanwhile, all at once on the pool."""
        check_table_kind(table)
        text = _fts_query(query or "")
        damaged: dict[str, DamagedProject] = {}
        cached: list[tuple[int, str, _Matrix]] = []
        uncached: list[tuple[int, str, bool]] = []  # (place, project, its vector half too)
        for i, project in enumerate(projects):
            try:
                entry = self._cached(project, table, use=True)
            except DamagedProject as exc:
                damaged[project] = exc
                continue
            if entry is not None:
                cached.append((i, project, entry))
            if entry is None or (text and entry.keywords is None):
                uncached.append((i, project, entry is None))
        q = self._query_vector(cached[0][1], table, vector) if cached else None
        groups = [cached[j::CACHED_THREADS] for j in range(CACHED_THREADS)]
        # The cached share goes to the pool first: behind LanceDB calls it would wait.
        others = [_FANOUT_POOL.submit(_cached_tops, g, q, text, k, where) for g in groups[1:]]
        later = {i: (project,
                     _FANOUT_POOL.submit(self.vector_search, project, table, vector, k,
                                         where=where) if vector_too else None,
                     _FANOUT_POOL.submit(self.text_search, project, table, query, k,
                                         where=where) if text else None)
                 for i, project, vector_too in uncached}
        vec, txt = _cached_tops(groups[0], q, text, k, where)
        for other in others:
            other_vec, other_txt = other.result()
            vec += other_vec
            txt += other_txt
        for i, (project, v, t) in later.items():
            try:
                vh, th = v.result() if v is not None else [], t.result() if t is not None else []
            except DamagedProject as exc:
                damaged[project] = exc
                continue
            vec += [(-h.score, i, r, project, h, -1) for r, h in enumerate(vh)]
            txt += [(-h.score, i, r, project, h, -1) for r, h in enumerate(th)]
        return Pooled(self._best(vec, k, table, "vector"), self._best(txt, k, table, "text"),
                      damaged)

    def _best(self, pool: list[Candidate], k: int, table: str, kind: str) -> list[Hit]:
        """The pool's best `k` as Hits: a cached table's rows are read from its hit columns
        in one take per table."""
        best = sorted(pool, key=lambda c: c[:3])[:k]
        out: list[Hit | None] = [None] * len(best)
        groups: dict[int, tuple[_Matrix, str, list[tuple[int, int, float]]]] = {}
        for pos, (neg, i, _, project, source, row) in enumerate(best):
            if isinstance(source, Hit):
                out[pos] = dataclasses.replace(source, project=project)
            else:
                groups.setdefault(i, (source, project, []))[2].append((pos, row, -neg))
        for entry, project, items in groups.values():
            hits = self._hits_from(entry.meta.take(pa.array([row for _, row, _ in items])),
                                   table, [score for *_, score in items], kind, project)
            for (pos, _, _), hit in zip(items, hits, strict=True):
                out[pos] = hit
        return out  # type: ignore[return-value]

    @_guarded
    def chunk_at(self, project: str, table: str, path: str,
                 line: int) -> tuple[Hit, np.ndarray] | None:
        check_table_kind(table)
        name, _ = self._active(project, table)
        if name is None:
            return None
        tbl = self._table(project, name)
        where = (f"path = {_sql_str(path)} AND start_line <= {int(line)} "
                 f"AND end_line >= {int(line)}")
        res = self._rows_where(tbl, where, [*_HIT_COLUMNS, "vector"])
        if res.num_rows == 0:
            return None
        # The innermost chunk (a method rather than its class) is the one meant.
        spans = [e - s for s, e in zip(res["start_line"].to_pylist(), res["end_line"].to_pylist(),
                                       strict=True)]
        i = int(np.argmin(spans))
        row = res.slice(i, 1)
        vec = np.asarray(row["vector"][0].as_py(), dtype=np.float32)
        return self._hits_from(row, table, [1.0], "vector")[0], vec

    # ---- projects and audit

    @_guarded
    def table_info(self, project: str, table: str) -> TableInfo:
        entry = self._entry(project, table)
        rows = 0
        if entry.get("active"):
            rows = self._table(project, entry["active"]).count_rows()
        shadow_rows = None
        if entry.get("shadow"):
            shadow_rows = self._table(project, entry["shadow"]).count_rows()
        last = entry.get("last_indexed")
        return TableInfo(
            project=project, table=table, space=space_from_json(entry.get("space")), rows=rows,
            last_indexed=datetime.fromtimestamp(last, tz=UTC) if last else None,
            shadow_rows=shadow_rows, shadow_space=space_from_json(entry.get("shadow_space")),
        )

    def list_projects(self) -> list[ProjectInfo]:
        """Every project, a damaged one included (with `damage` saying why): one broken
        project must not hide the others, nor hide itself."""
        out = []
        for state_file in sorted((self.root / "projects").glob("*/state.json")):
            name = state_file.parent.name  # until the file itself names the project
            try:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    name = str(json.loads(state_file.read_text()).get("project") or name)
                state = self._read_state(name)
                if state is None:
                    continue  # dropped meanwhile
                tables = {t: self.table_info(name, t) for t, e in state["tables"].items()
                          if e.get("active") or e.get("shadow")}
                out.append(ProjectInfo(name, tables))
            except StoreError as exc:
                if isinstance(exc, DiskFull):
                    raise
                detail = exc.detail if isinstance(exc, DamagedProject) else str(exc)
                out.append(ProjectInfo(name, {}, damage=detail))
        return sorted(out, key=lambda p: p.name)

    def has_project(self, project: str) -> bool:
        return self._read_state(project) is not None

    @_guarded
    def drop_project(self, project: str) -> None:
        try:
            known = self._read_state(project) is not None
        except DamagedProject:
            known = True  # dropping is one way out of damage
        if not known:
            raise UnknownProject(project, [p.name for p in self.list_projects()])
        slug = self.slug(project)
        with self._mutex:
            self._dbs.pop(slug, None)
            for key in [k for k in self._tables if k[0] == slug]:
                del self._tables[key]
            for key in [k for k in self._matrices if k[0] == slug]:
                del self._matrices[key]
            for key in [k for k in self._windows if k[0] == slug]:
                del self._windows[key]  # its files go with the folder below
            # state.json goes first: from that instant the project is unknown to readers.
            self._state_path(project).unlink(missing_ok=True)
            shutil.rmtree(self._dir(project), ignore_errors=True)

    @_guarded
    def provenance_counts(self, project: str, table: str,
                          slot: Slot = Slot.ACTIVE) -> dict[tuple[str, str | None], int]:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        if name is None:
            return {}
        data = (self._table(project, name).search().select(["provider_id", "verdict_id"])
                .limit(None).to_arrow())
        counts: dict[tuple[str, str | None], int] = {}
        for key in zip(data["provider_id"].to_pylist(), data["verdict_id"].to_pylist(),
                       strict=True):
            counts[key] = counts.get(key, 0) + 1
        return counts

    @_guarded
    def written_since(self, project: str, table: str, since: datetime,
                      provider_id: str | None = None) -> list[ManifestEntry]:
        check_table_kind(table)
        name = self._slot_name(project, table, Slot.ACTIVE)
        if name is None:
            return []
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        stamp = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
        where = f"written_at >= TIMESTAMP '{stamp}'"
        if provider_id is not None:
            where += f" AND provider_id = {_sql_str(provider_id)}"
        res = self._rows_where(self._table(project, name), where,
                               ["chunk_id", "content_hash", "path"])
        return [ManifestEntry(*row) for row in zip(res["chunk_id"].to_pylist(),
                                                  res["content_hash"].to_pylist(),
                                                  res["path"].to_pylist(), strict=True)]

    @_guarded
    def chunk_texts(self, project: str, table: str, chunk_ids: Sequence[str],
                    slot: Slot = Slot.ACTIVE) -> dict[str, str]:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        ids = list(chunk_ids)
        if name is None or not ids:
            return {}
        cached = self._cached(project, table) if slot is Slot.ACTIVE else None
        if cached is not None:
            # The reranker stage reads the texts of a search's hits: from memory when the
            # cache holds the table (a LanceDB query per project costs 3-5 ms).
            found = cached.meta.filter(pc.is_in(cached.meta["chunk_id"],
                                                value_set=pa.array(ids, pa.string())))
            return dict(zip(found["chunk_id"].to_pylist(), found["text"].to_pylist(),
                            strict=True))
        tbl = self._table(project, name)
        out: dict[str, str] = {}
        for i in range(0, len(ids), self.BATCH):
            res = self._rows_where(tbl, _in_list("chunk_id", ids[i:i + self.BATCH]),
                                   ["chunk_id", "text"])
            out.update(zip(res["chunk_id"].to_pylist(), res["text"].to_pylist(), strict=True))
        return out

    def close(self) -> None:
        with self._mutex:
            windows = list(self._windows)
        for key in windows:
            self._close_window(key)
        with self._mutex:
            self._matrices.clear()
            self._tables.clear()
            self._dbs.clear()
