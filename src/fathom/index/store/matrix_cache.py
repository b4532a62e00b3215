"""The matrix cache: the active tables LanceStore answers from memory, under one byte bound.

Every active table of at most `exact_max_rows` rows whose float32 matrix fits the bound is
answered from memory: the L2-normalised matrix plus the hit columns, exact cosine by one matmul
(exact recall), and its keyword index (`fathom.index.keywords`, the same scores as LanceDB's,
without LanceDB's per-call cost). LanceDB's flat vector path is many times slower than a numpy
matmul, and past `exact_max_rows` an exact scan costs more than the ANN index, so a bigger
table goes to its ANN index however much room the cache has (figures: docs/benchmarks.md).

The bound counts the matrices, their hit columns and keyword indexes and is never exceeded;
room is made by evicting the least recently used tables idle for `idle_s`, and a table that
does not fit beside the ones in use is answered by LanceDB instead (`stats.bypassed`), so a
search over more projects than the cache holds does not reload every table on every query.
An entry is keyed by the table's name and generation: a write to the active slot bumps the
generation in state.json, so a server process sees writes made by a CLI process.

What it refuses to do: open a table, read the pointer file, or search LanceDB; LanceStore
hands it the handle and the generation.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from fathom.errors import ConfigError, WidthMismatch
from fathom.index.filters import SearchFilter
from fathom.index.keywords import KeywordIndex
from fathom.index.store.lance_tables import HIT_COLUMNS

log = logging.getLogger(__name__)

# The matrix cache's default bound: 50 projects of 20k chunks at 384-d with their hit
# columns and keyword indexes (measured by bench/many_projects.py, docs/benchmarks.md), with
# room to spare.
MATRIX_CACHE_BYTES = 5 << 29  # 2.5 GiB
# The most rows a table answered exactly from the cache may have: past it the ANN index is
# faster (docs/benchmarks.md, "1M x 384 through the real store path").
EXACT_MAX_ROWS = 250_000
# A cached matrix used within this many seconds is never evicted to make room for another
# table: a search over more projects than the cache holds then serves the overflow through
# LanceDB instead of evicting (and reloading) the hot tables on every query.
CACHE_IDLE_S = 60.0


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
class CachedMatrix:
    """The in-memory copy of one active table used for exact vector search."""

    key: tuple[str, str, int]  # (lance table name, kind, generation)
    matrix: np.ndarray  # (n, width) float32, rows L2-normalised
    meta: pa.Table  # HIT_COLUMNS, same row order
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
        return np.flatnonzero(
            where.mask(
                self.meta["language"].to_pylist(),
                self.meta["path"].to_pylist(),
                self.meta["kind"].to_pylist(),
            )
        )

    def vector_top(self, q: np.ndarray, k: int, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Row numbers and cosines of the exact top `k` among `rows` (None: all), damaged
        rows never."""
        if self.dead is not None:
            rows = np.setdiff1d(
                np.arange(self.matrix.shape[0]) if rows is None else rows, self.dead, assume_unique=True
            )
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


def cached_tops(
    cached: Sequence[tuple[int, str, CachedMatrix]],
    q: np.ndarray | None,
    text: str,
    k: int,
    where: SearchFilter | None,
) -> tuple[list[Candidate], list[Candidate]]:
    """The best `k` rows of each cached table by cosine and by BM25, as candidates."""
    vec: list[Candidate] = []
    txt: list[Candidate] = []
    for i, project, entry in cached:
        assert q is not None
        if q.shape[0] != entry.matrix.shape[1]:
            raise WidthMismatch(entry.key[1], entry.matrix.shape[1], int(q.shape[0]))
        allowed = entry.allowed(where)
        vec += candidates(i, project, entry, *entry.vector_top(q, k, allowed))
        if text and entry.keywords is not None:
            txt += candidates(i, project, entry, *entry.keywords.search(text, k, rows=allowed))
    return vec, txt


def candidates(
    i: int, project: str, entry: CachedMatrix, rows: np.ndarray, scores: np.ndarray
) -> list[Candidate]:
    return [
        (-s, i, r, project, entry, row)
        for r, (row, s) in enumerate(zip(rows.tolist(), scores.tolist(), strict=True))
    ]


@functools.cache
def single_threaded_blas() -> None:
    """numpy's BLAS runs each matrix product on the calling thread alone, process-wide.

    Searches already run in parallel (both halves of a query, every project of a search over
    all of them), and a vector search is one matrix-vector product, bound by memory: a BLAS
    thread pool per product only fights those threads: a small product was several times
    slower with two BLAS threads than with one (docs/benchmarks.md). torch (the local
    encoder) has its own thread pool."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; the default is only slower
        return
    threadpool_limits(1, user_api="blas")


class MatrixCache:
    """The cached matrices of one store, least recently used first, within `bound` bytes."""

    def __init__(
        self,
        bound: int,
        exact_max_rows: int,
        idle_s: float,
        clock: Callable[[], float],
        mutex: threading.RLock,
    ):
        if bound < 0:
            raise ConfigError(f"matrix_cache_bytes must be 0 or more, got {bound}")
        if exact_max_rows < 1:
            raise ConfigError(f"exact_max_rows must be 1 or more, got {exact_max_rows}")
        self.bound = bound
        self.exact_max_rows = exact_max_rows
        self.idle_s = idle_s
        self.clock = clock
        self.stats = CacheStats()
        self._mutex = mutex  # the store's: its handles and this cache change together
        # (slug, table kind) -> the cached copy of that project's active table
        self.entries: OrderedDict[tuple[str, str], CachedMatrix] = OrderedDict()
        self._meta_row_bytes = 0  # the largest hit-column bytes per row seen (see `load`)
        self._load_locks: dict[tuple[str, str], threading.Lock] = {}

    def too_big(self, rows: int, width: int) -> bool:
        """A table the matrix cache never holds: its matrix alone is past the bound, or it has
        more rows than an exact scan answers faster than the ANN index."""
        return rows > self.exact_max_rows or rows * width * 4 > self.bound

    def load(
        self, project: str, slug: str, table: str, key: tuple[str, str, int], tbl: Any
    ) -> CachedMatrix | None:
        """The cached matrix for the active table `key` names (loading it if it fits), or
        None when the table is answered by LanceDB.

        The cache never holds more than `bound` (matrix plus hit columns). To make room it
        evicts the least recently used tables, but only those idle for `idle_s`: a table that
        does not fit beside the ones in use is answered by LanceDB (counted as `bypassed`), so
        a search over more projects than the cache holds never turns every query into a
        reload."""
        with self._mutex:
            load_lock = self._load_locks.setdefault((slug, table), threading.Lock())
        # One loader per table; other tables' searches and all writes go on meanwhile.
        with load_lock:
            now = self.clock()
            with self._mutex:
                cached = self.entries.get((slug, table))
                if cached is not None and cached.key == key:
                    self._used(slug, table, now)
                    return cached
                if cached is not None:  # a stale generation: its memory is free again
                    del self.entries[(slug, table)]
            width = tbl.schema.field("vector").type.list_size
            n = tbl.count_rows()
            # The size of the hit columns and the keyword index is known only after loading:
            # before, the largest size per row among the tables loaded so far is the estimate.
            if self.too_big(n, width) or not self._make_room(n * (width * 4 + self._meta_row_bytes), now):
                with self._mutex:
                    self.stats.bypassed += 1
                return None
            entry = read_matrix(project, table, tbl, key, width)
            entry.used = now
            with self._mutex:
                rows = max(1, entry.matrix.shape[0])
                self._meta_row_bytes = max(self._meta_row_bytes, (entry.nbytes - entry.matrix.nbytes) // rows)
                self.stats.loads += 1
                if not self._make_room(entry.nbytes, now):
                    return entry  # the rest tipped it over: used once, not kept
                self.entries[(slug, table)] = entry
            return entry

    def held(
        self, slug: str, table: str, key: tuple[str | None, str, int], *, use: bool = False
    ) -> CachedMatrix | None:
        """The table's cached entry if the cache holds it now at `key`; it loads nothing, and
        counts a hit only when `use` says this search is the table's vector half."""
        with self._mutex:
            cached = self.entries.get((slug, table))
            if cached is None or cached.key != key:
                return None
            if use:
                self._used(slug, table, self.clock())
        return cached

    def forget(self, slug: str) -> None:
        """Drop every entry of one project (it is being dropped)."""
        with self._mutex:
            for key in [k for k in self.entries if k[0] == slug]:
                del self.entries[key]

    def _used(self, slug: str, table: str, now: float) -> None:
        """A search read this cached table: most recently used, and a hit."""
        with self._mutex:
            self.entries.move_to_end((slug, table))
            self.entries[(slug, table)].used = now
            self.stats.hits += 1

    def _make_room(self, nbytes: int, now: float) -> bool:
        """Evict idle tables (least recently used first) until `nbytes` more fit the bound;
        False, evicting nothing, when they cannot."""
        with self._mutex:
            held = sum(m.nbytes for m in self.entries.values())
            idle = [k for k, m in self.entries.items() if now - m.used >= self.idle_s]
            freeable = sum(self.entries[k].nbytes for k in idle)
            if held - freeable + nbytes > self.bound:
                return False
            for k in idle:  # OrderedDict order: least recently used first
                if held + nbytes <= self.bound:
                    break
                held -= self.entries.pop(k).nbytes
            return True


def read_matrix(project: str, table: str, tbl: Any, key: tuple[str, str, int], width: int) -> CachedMatrix:
    """Read one table into memory: unit rows, hit columns and keyword index."""
    data = tbl.search().select(["vector", *HIT_COLUMNS, "keywords"]).limit(None).to_arrow()
    vec = data["vector"].combine_chunks()
    matrix = np.array(vec.flatten().to_numpy(zero_copy_only=False), dtype=np.float32, copy=True).reshape(
        -1, width
    )
    # The keyword half of a cached table is answered from memory too (its per-query cost
    # in LanceDB is most of a search over many projects); same ranking, see keywords.py.
    keywords = KeywordIndex.build(data["keywords"])
    meta = data.drop_columns(["vector", "keywords"]).combine_chunks()
    del data, vec
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    bad = ~np.isfinite(norms[:, 0]) | (norms[:, 0] == 0)
    if bad.any():
        # Damaged rows (a corrupt data file) never rank: zeroed, and named in the log.
        log.warning(
            "project %s table %s: %d rows hold non-finite or zero vectors; "
            "they are left out of vector search. Run `fathom store verify %s "
            "--repair`.",
            project,
            table,
            int(bad.sum()),
            project,
        )
        matrix[bad] = 0.0
        norms[bad] = 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        matrix /= norms  # in place: loading holds one copy of the matrix, not three
    np.nan_to_num(matrix, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return CachedMatrix(key, matrix, meta, np.flatnonzero(bad) if bad.any() else None, keywords=keywords)
