"""The ANN builder: IVF-PQ indexes for the Lance tables too big for the matrix cache, built in
the background, and the exact copy that serves a table's searches while its index builds.

Tables too big for the cache are searched through LanceDB with an IVF-PQ index from
`ann_min_rows` rows on (PQ codes sized by width, `ann_params`), probing `nprobes` partitions
and re-ranking `candidates` rows on their full vectors (refine_factor = candidates / k), both
by the table's rows (`search_params`) unless the operator set them. `promote`/`refresh` start
that build in a background thread after the switch (minutes at a million rows). Meanwhile a
new table is searched exactly over a copy of its vectors (memory-mapped when searched) that
the build thread writes first, through a file (`fathom.index.standin`: far faster than
LanceDB's flat scan; tied to the table's Lance version, dropped on any write and when the build
ends; a filtered search goes to LanceDB); a refreshed table keeps its previous index plus a
flat scan of newer rows. A searcher that finds a big table without its index starts the build
itself. Figures at 1M x 384 and 200k x 2560: docs/benchmarks.md.

What it refuses to do: decide where a table lives or when it is promoted (the store does);
it only builds, and serves the stand-in meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fathom.errors import StoreError
from fathom.index.standin import MappedMatrix, StaleCopy, StandInStats
from fathom.index.store.lance_tables import HIT_COLUMNS, hits_from, short
from fathom.index.store.values import Hit

log = logging.getLogger(__name__)

# The ANN path (tables too big for the matrix cache), chosen by vector width from
# measurements on clustered vectors (docs/benchmarks.md): `ann_params` for the index, and the
# search of wide vectors; narrow ones are searched by the table's size (`search_params`).
#
# The search by table size, narrow vectors (bench/ann_build.py, docs/benchmarks.md "ANN
# search parameters by size"): PROBES partitions up to PROBES * PROBED_ROWS_PER_PROBE rows (1M),
# then one more per PROBED_ROWS_PER_PROBE rows, so the share of the table probed at 1M is kept
# past it (LanceDB's partitions grow with the table); CANDIDATES rows re-ranked at every size.
PROBES = 8
PROBED_ROWS_PER_PROBE = 125_000
CANDIDATES = 300
# From this width on, vectors take the wide settings (measured at 2560-d, Qwen3-Embedding-4B's).
ANN_WIDE = 1024
ANN_WIDE_NPROBES = 16
ANN_WIDE_CANDIDATES = 400


def ann_params(width: int) -> tuple[int, int, int]:
    """(PQ sub-vectors, partitions probed, candidates re-ranked) for an IVF-PQ index on
    `width`-dim vectors, from measurements on clustered vectors (docs/benchmarks.md).

    Up to `ANN_WIDE` dims: sub-vectors of 4 dims, 8 probes, 300 candidates, the floor of
    `search_params` (16-dim sub-vectors left recall low however many candidates were
    re-ranked). Wider: sub-vectors of 16 dims, 16 probes, 400 candidates: 4-dim ones made
    the build take far too long and the scan slow at 2560-d, 8-dim ones too; 16-dim ones rank
    more coarsely, so more candidates are re-ranked. Probes changed latency, not recall."""
    dims, nprobes, candidates = (
        (4, PROBES, CANDIDATES) if width <= ANN_WIDE else (16, ANN_WIDE_NPROBES, ANN_WIDE_CANDIDATES)
    )
    # PQ needs sub-vectors that split the width evenly: at least width / dims of them.
    sub = next(s for s in range(max(1, width // dims), width + 1) if width % s == 0)
    return sub, nprobes, candidates


def search_params(width: int, rows: int) -> tuple[int, int]:
    """(partitions probed, candidates re-ranked) for a search of a `rows`-row IVF-PQ index on
    `width`-dim vectors; `ann_nprobes` / `ann_candidates` (FATHOM_ANN_NPROBES,
    FATHOM_ANN_CANDIDATES), when set, win over either (the store applies them).

    At 1M x 384 probes changed latency, not recall (4, 8, 16 and 32 probes all 0.991 at 200
    candidates; 8 took 16.2 ms p50, 32 took 26.9 ms), and recall followed the candidates (0.939
    at 100, 0.991 at 200, 0.997 at 300 for 17.2 ms); at 300k x 384, 8 probes and 300
    candidates gave 0.9975 at 11.9 ms (4 probes stopped at 0.9925). Wide vectors keep their
    width's settings (`ann_params`, measured at 200k x 2560 only)."""
    _, nprobes, candidates = ann_params(width)
    if width > ANN_WIDE:
        return nprobes, candidates
    return max(nprobes, -(-rows // PROBED_ROWS_PER_PROBE)), candidates


class AnnBuilder:
    """The ANN indexes of one LanceStore: which are built, which are building, which failed,
    and the stand-in copies. It reaches the store's tables through the store it is given,
    and starts every build through its own `build`, so whoever replaces that method on the
    builder (a test holding a build, a crash harness) sees every build."""

    def __init__(self, store: Any, *, min_rows: int, background: bool):
        # `store` is the LanceStore that holds this builder (not imported here: the store
        # imports this module). Used: slug, project_dir, matrix_cache (its size rule), and
        # within the store package _table, _active, _locked and _mutex.
        self.store = store
        self.min_rows = min_rows
        self.background = background
        self.jobs: dict[tuple[str, str], threading.Thread] = {}
        self.ready: set[tuple[str, str]] = set()
        self.failed: set[tuple[str, str]] = set()
        self._slots = threading.Semaphore(1)
        # (slug, lance name) -> the exact copy searched while that table's ANN index builds
        self.standins: dict[tuple[str, str], MappedMatrix] = {}
        self.standin_stats = StandInStats()
        # (slug, lance name) -> (generation, rows): the size that picks a search's parameters
        self._rows: dict[tuple[str, str], tuple[int | None, int]] = {}

    def needs(self, tbl: Any, *, uncached: bool = False) -> bool:
        """Whether the table deserves an ANN index: from `ann_min_rows` rows, when it is too
        big for the cache or past `exact_max_rows`, or (`uncached`) when the cache had no room
        for it beside the tables in use (many projects: their overflow is searched through
        LanceDB too)."""
        n = tbl.count_rows()
        width = tbl.schema.field("vector").type.list_size
        return n >= self.min_rows and (uncached or self.store.matrix_cache.too_big(n, width))

    def later(self, project: str, name: str) -> None:
        """Build (or rebuild) the table's ANN index: in a daemon thread, one per table at a
        time in this process, or right here when `ann_background` is off."""
        key = (self.store.slug(project), name)
        if not self.background:
            self.build(project, name)
            return
        with self.store._mutex:
            job = self.jobs.get(key)
            if job is not None and job.is_alive():
                return
            job = threading.Thread(
                target=self._build_in_background, args=(project, name), daemon=True, name=f"fathom-ann-{name}"
            )
            self.jobs[key] = job
        job.start()

    def _build_in_background(self, project: str, name: str) -> None:
        """The background build: an exact memory-mapped copy serves the table's searches
        until the index exists (see `fathom.index.standin`), then goes."""
        key = (self.store.slug(project), name)
        try:
            self._open_standin(project, name)
            self.build(project, name)
        finally:
            self.close_standin(key)

    def _standin_dir(self, project: str, name: str) -> Path:
        # A hidden folder beside the tables: LanceDB lists `*.lance` folders only, and so
        # do `store verify` and its repairs.
        folder: Path = self.store.project_dir(project)
        return folder / ".exact" / name

    def _open_standin(self, project: str, name: str) -> None:
        """Copy a table without a vector index for the stand-in. A refreshed table
        keeps its previous index meanwhile (LanceDB scans only the rows added since), so it
        gets no copy; nor does one whose copy fails (disk full): LanceDB's flat scan serves."""
        try:
            tbl = self.store._table(project, name)
            if any(i.columns == ["vector"] for i in tbl.list_indices()):
                return
            standin = MappedMatrix.write(self._standin_dir(project, name), tbl)
        except (StaleCopy, OSError, RuntimeError, ValueError) as exc:
            log.info("no exact copy of %s of %s for its ANN build: %s", name, project, short(exc))
            return
        with self.store._mutex:
            self.standins[(self.store.slug(project), name)] = standin
            self.standin_stats.written += 1

    def close_standin(self, key: tuple[str, str], *, stale: bool = False) -> None:
        with self.store._mutex:
            standin = self.standins.pop(key, None)
            if standin is not None and stale:
                self.standin_stats.dropped += 1
        if standin is not None:
            standin.remove()

    def standin_search(self, project: str, table: str, tbl: Any, q: np.ndarray, k: int) -> list[Hit] | None:
        """The exact top k from the table's stand-in copy, or None when it has none
        current: a copy of an older version (written to since) is dropped, never served."""
        key = (self.store.slug(project), tbl.name)
        standin = self.standins.get(key)
        if standin is None:
            return None
        if tbl.version != standin.version:
            self.close_standin(key, stale=True)
            return None
        rows, scores = standin.top(q, k)
        row_ids = standin.row_ids[rows]
        res = tbl.take_row_ids(row_ids.tolist()).with_row_id().select(HIT_COLUMNS).to_arrow()
        where = {int(r): i for i, r in enumerate(res["_rowid"].to_pylist())}
        if len(where) != len(row_ids) or any(int(r) not in where for r in row_ids):
            self.close_standin(key, stale=True)  # the rows moved: no longer this version
            return None
        res = res.take(pa.array([where[int(r)] for r in row_ids]))
        with self.store._mutex:
            self.standin_stats.served += 1
        return hits_from(res, table, scores.tolist(), "vector")

    def build(self, project: str, name: str) -> None:
        from lancedb.index import IvfPq

        key = (self.store.slug(project), name)
        try:
            tbl = self.store._table(project, name)
            # The sub-vectors by width (`ann_params`); the partition count is LanceDB's own.
            sub, _, _ = ann_params(tbl.schema.field("vector").type.list_size)
            with self._slots:  # one build at a time: each one takes the cores it finds
                tbl.create_index(
                    "vector", config=IvfPq(distance_type="cosine", num_sub_vectors=sub), replace=True
                )
        except Exception as exc:  # dropped meanwhile, or another process won
            log.info("ANN index for %s of %s not built: %s", name, project, short(exc))
            with self.store._mutex:
                self.failed.add(key)  # searches do not retry it; refresh/promote do
            return
        with self.store._mutex:
            self.ready.add(key)
        # Searchers (this process and others) reopen the table at the next generation and
        # find the index.
        with contextlib.suppress(StoreError), self.store._locked(project) as state:
            for entry in state["tables"].values():
                if entry.get("active") == name:
                    entry["generation"] = entry.get("generation", 0) + 1

    def search_params(self, project: str, tbl: Any, width: int) -> tuple[int, int]:
        """(partitions probed, candidates re-ranked) for a search of `tbl` through its index:
        the store's `ann_nprobes` / `ann_candidates` where set (an operator's setting wins),
        else by the table's rows and width (`search_params`). The rows are counted once per
        generation of the table's handle (a count costs about a millisecond)."""
        key = (self.store.slug(project), tbl.name)
        generation = self.store._seen.get(key)
        known = self._rows.get(key)
        if known is None or generation is None or known[0] != generation:
            known = (generation, tbl.count_rows())
            with self.store._mutex:
                self._rows[key] = known
        nprobes, candidates = search_params(width, known[1])
        return self.store.ann_nprobes or nprobes, self.store.ann_candidates or candidates

    def pending(self, project: str, table: str) -> bool:
        """Whether the active table's ANN index is being built in this process now."""
        name, _ = self.store._active(project, table)
        job = self.jobs.get((self.store.slug(project), name or ""))
        return job is not None and job.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the ANN builds this process started; True when none is left running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for job in list(self.jobs.values()):
            job.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(j.is_alive() for j in self.jobs.values())

    def ensure(self, project: str, tbl: Any) -> None:
        """A table searched through LanceDB without an ANN index (the process that promoted
        it stopped before the build finished, or the cache had no room for it) gets one built
        here, in the background (served exactly meanwhile, see `_build_in_background`)."""
        key = (self.store.slug(project), tbl.name)
        if key in self.ready or key in self.failed:
            return
        if not self.needs(tbl, uncached=True):
            return
        if any(i.columns == ["vector"] for i in tbl.list_indices()):
            with self.store._mutex:
                self.ready.add(key)
            return
        self.later(project, tbl.name)

    def collect_garbage(self, project: str, live: set[str]) -> None:
        # Build-standin copies of tables no longer live (a process stopped mid-build); a
        # live table's copy is replaced by its next build and removed when that ends.
        for folder in (self.store.project_dir(project) / ".exact").glob("*"):
            if folder.name.removesuffix(".part") not in live:
                shutil.rmtree(folder, ignore_errors=True)

    def forget(self, slug: str) -> None:
        """Drop one project's stand-in copies from the books (its folder goes with it)."""
        with self.store._mutex:
            for key in [k for k in self.standins if k[0] == slug]:
                del self.standins[key]
            for key in [k for k in self._rows if k[0] == slug]:
                del self._rows[key]

    def close(self) -> None:
        with self.store._mutex:
            windows = list(self.standins)
        for key in windows:
            self.close_standin(key)
