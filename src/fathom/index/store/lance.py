"""`LanceStore`, the embedded default: LanceDB tables under `root`, one database per project.

Layout under `root`: ``projects/<slug>/state.json`` (the pointer: per table kind its Space,
active and shadow Lance table names, a generation counter and the last indexed time) and the
LanceDB database in ``projects/<slug>/`` holding tables named ``<kind>_<n>_<random>``. The
Space is also stored in each Lance table's Arrow schema metadata (``fathom.space``), so a table
carries its identity on its own. Promotion rewrites state.json with `atomic_write_text` (a
rename): readers see the old active tables or the new ones, never a half-built one, and never
the code table of one run with the docs table of another. ``projects/<slug>/.index.lock`` is
the project's index lock (flock, holder recorded in the file); ``.lock`` serialises state.json
read-modify-writes.

LanceStore reports what LanceDB or the filesystem says about a project's files (a table folder
gone, a truncated or corrupt file, a garbled state.json) as `DamagedProject`, never as an empty
project; `list_projects` lists a damaged project with its `damage`.

Search: the active tables that fit are answered from memory (`MatrixCache`, exact cosine by
one matmul, the keyword half from an in-memory copy of the index); bigger ones through
LanceDB with an IVF-PQ index built in the background (`AnnBuilder`). numpy's BLAS runs
single-threaded (`single_threaded_blas`): searches are parallel already. Keyword search is
LanceDB's native full-text index (`FTS`, offline; the tantivy variant is not used), created
with each table and folded forward by `promote`/`refresh` (`optimize`); rows written since are
still found (LanceDB searches unindexed rows flat).

Many projects: `search_many` searches several projects of one space as one index (both lists
pooled, each cut to the best k). The projects the cache holds cost one matmul and one keyword
lookup each, split over two threads, and Hits are built only for the pooled best; the others
go to LanceDB at once on a thread pool (figures: docs/benchmarks.md, bench/many_projects.py).

What it refuses to do: mix two spaces in one table, or let a search see a shadow slot.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fathom.config import atomic_write_text
from fathom.errors import DiskFull, StoreError
from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.standin import StandInStats
from fathom.index.store.ann import AnnBuilder
from fathom.index.store.contract import Store
from fathom.index.store.errors import (
    DamagedProject,
    LockHolder,
    UnknownProject,
)
from fathom.index.store.lance_rows import (
    BATCH,
    delete_rows,
    manifest_of,
    provenance_counts_of,
    replaced_rows,
    stored_vectors_in,
    texts_in,
    written_since_where,
)
from fathom.index.store.lance_search import LanceSearch
from fathom.index.store.lance_slots import LanceSlots
from fathom.index.store.lance_tables import (
    build_fts,
    guarded,
    keep_fts_current,
    lance_schema,
    rows_table,
    rows_where,
    with_kind,
)
from fathom.index.store.matrix_cache import (
    CACHE_IDLE_S,
    EXACT_MAX_ROWS,
    MATRIX_CACHE_BYTES,
    CachedMatrix,
    CacheStats,
    MatrixCache,
    single_threaded_blas,
)
from fathom.index.store.project_files import (
    hold_index_lock,
    index_lock_holder,
    named_projects,
    project_slug,
    read_state_file,
    state_flock,
)
from fathom.index.store.rules import (
    check_project_name,
    check_space_kind,
    check_table_kind,
    query_vector,
    space_from_json,
)
from fathom.index.store.values import (
    Hit,
    ManifestEntry,
    Pooled,
    ProjectInfo,
    ShadowInfo,
    Slot,
    StoredVector,
    TableInfo,
)
from fathom.space import Clearance, Provenance, Space

log = logging.getLogger(__name__)

# LanceDB's cache of table metadata (manifests, file footers), shared by every project.
LANCE_METADATA_CACHE_BYTES = 128 << 20


class LanceStore(Store):
    """The embedded default: LanceDB tables under `root`, one database folder per project.
    It keeps the pointer files and the table handles; the matrix cache (`MatrixCache`) and
    the ANN builder (`AnnBuilder`) are parts it holds."""

    BATCH = BATCH  # rows per IN (...) filter (`lance_rows.BATCH`)

    def __init__(
        self,
        root: Path | str,
        clearance: Clearance | None = None,
        *,
        clock: Callable[[], float] = time.time,
        matrix_cache_bytes: int = MATRIX_CACHE_BYTES,
        exact_max_rows: int = EXACT_MAX_ROWS,
        ann_min_rows: int = 20_000,
        ann_nprobes: int | None = None,
        ann_candidates: int | None = None,
        ann_background: bool = True,
        cache_idle_s: float = CACHE_IDLE_S,
    ):
        super().__init__(clearance, clock=clock)
        import lancedb  # local: keeps `import fathom` light for CLIs that never open a store

        self._lancedb = lancedb
        # One LanceDB session for every project, with its metadata cache bounded: left to
        # itself each connection keeps up to 1 GiB of it, and an index job writing a batch at
        # a time fills it with a manifest per version (bench/index_memory.py,
        # docs/benchmarks.md). Searches read the latest version only.
        self._session = lancedb.Session(metadata_cache_size_bytes=LANCE_METADATA_CACHE_BYTES)
        single_threaded_blas()
        self.root = Path(root)
        (self.root / "projects").mkdir(mode=0o700, parents=True, exist_ok=True)
        self._mutex = threading.RLock()
        self.matrix_cache = MatrixCache(
            matrix_cache_bytes, exact_max_rows, cache_idle_s, self.clock, self._mutex
        )
        self.ann_nprobes = ann_nprobes  # None (both): by the table's size (`ann.search_params`)
        self.ann_candidates = ann_candidates
        self.ann = AnnBuilder(self, min_rows=ann_min_rows, background=ann_background)
        self._search = LanceSearch(self)
        self._slots = LanceSlots(self)
        self._dbs: dict[str, Any] = {}
        self._tables: dict[tuple[str, str], Any] = {}  # (slug, lance name) -> handle
        self._seen: dict[tuple[str, str], int] = {}  # handle -> generation it was current at

    # ---- the parts' figures, read where they always were

    @property
    def matrix_cache_bytes(self) -> int:
        return self.matrix_cache.bound

    @property
    def cache_stats(self) -> CacheStats:
        return self.matrix_cache.stats

    @property
    def standin_stats(self) -> StandInStats:
        return self.ann.standin_stats

    # ---- layout and state

    slug = staticmethod(project_slug)

    def project_dir(self, project: str) -> Path:
        """The project's folder: its pointer file, locks, LanceDB tables and stand-in copies."""
        return self.root / "projects" / self.slug(check_project_name(project))

    def _state_path(self, project: str) -> Path:
        return self.project_dir(project) / "state.json"

    def _read_state(self, project: str) -> dict[str, Any] | None:
        """The project's pointer file; None only when there is none. A garbled one is damage,
        never "no project": reading it as empty would hide (or overwrite) a whole index."""
        return read_state_file(self._state_path(project), project)

    def _write_state(self, project: str, state: dict[str, Any]) -> None:
        atomic_write_text(self._state_path(project), json.dumps(state, indent=2, sort_keys=True))

    @contextlib.contextmanager
    def _locked(self, project: str) -> Iterator[dict[str, Any]]:
        """Read-modify-write of one project's state, serialised across threads and processes
        (flock), so two writers never lose each other's pointer change."""
        d = self.project_dir(project)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._mutex, state_flock(d / ".lock"):
            state = self._read_state(project) or {"project": project, "tables": {}, "next": 1}
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                self._write_state(project, state)

    def project_lock(
        self, project: str, holder: str | None = None
    ) -> contextlib.AbstractContextManager[LockHolder]:
        """Hold the index lock of `project` for the block: one writer per project across
        processes (CLI runs, servers, a file watcher). See `fathom.index.store.project_files`."""
        d = self.project_dir(project)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        return hold_index_lock(d / ".index.lock", project, holder, self.clock)

    def lock_holder(self, project: str) -> LockHolder | None:
        """Who holds the index lock of `project` now, or None."""
        return index_lock_holder(self.project_dir(project) / ".index.lock", project)

    def _db(self, project: str) -> Any:
        slug = self.slug(project)
        db = self._dbs.get(slug)
        if db is None:
            db = self._lancedb.connect(str(self.project_dir(project)), session=self._session)
            self._dbs[slug] = db
        return db

    def _table(self, project: str, name: str, *, latest: bool = True) -> Any:
        key = (self.slug(project), name)
        tbl = self._tables.get(key)
        if tbl is None:
            tbl = with_kind(self._db(project).open_table(name))
            self._tables[key] = tbl
        elif latest:
            # Another process may have written since this handle was opened.
            tbl.checkout_latest()
        return tbl

    def _entry(self, project: str, table: str) -> dict[str, Any]:
        state = self._read_state(project)
        if state is None:
            raise UnknownProject(project, [p.name for p in self.list_projects()])
        entry: dict[str, Any] = state["tables"].get(table, {})
        return entry

    def _slot_name(self, project: str, table: str, slot: Slot) -> str | None:
        state = self._read_state(project)
        if state is None:
            return None
        name: str | None = state["tables"].get(table, {}).get(slot.value)
        return name

    def slot_table(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> Any | None:
        """The Lance table in `slot` (None: empty), at its latest version, to look at (schema,
        indexes, rows); rows are written through `write`, which checks them."""
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        return None if name is None else self._table(project, name)

    def _create(self, project: str, state: dict[str, Any], table: str, space: Space) -> str:
        # A random tail: a dropped and re-created project never reuses a name that another
        # process may still hold a handle or a cached matrix for.
        name = f"{table}_{state['next']}_{uuid.uuid4().hex[:8]}"
        state["next"] += 1
        db = self._db(project)
        with contextlib.suppress(Exception):
            db.drop_table(name)  # a leftover from a crash before the pointer was written
        tbl = db.create_table(name, schema=lance_schema(space))
        # The keyword index exists from birth: LanceDB answers full-text queries only on a
        # table with one, and then also searches rows added since the index was last updated.
        build_fts(tbl)
        self._tables[(self.slug(project), name)] = tbl
        return name

    def _drop(self, project: str, name: str) -> None:
        self._tables.pop((self.slug(project), name), None)
        try:
            self._db(project).drop_table(name)
        except Exception as exc:  # a leftover is collected at the next promote
            log.warning("could not drop old table %s of %s: %s", name, project, exc)

    # ---- spaces and slots

    @guarded
    def open_table(self, project: str, table: str, space: Space) -> TableInfo:
        check_table_kind(table)
        check_space_kind(table, space)
        return self._slots.open(project, table, space)

    @guarded
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

    @guarded
    def begin_shadow(self, project: str, table: str, space: Space) -> ShadowInfo:
        check_table_kind(table)
        check_space_kind(table, space)
        return self._slots.begin_shadow(project, table, space)

    def promote(self, project: str, table: str) -> TableInfo:
        return self.promote_together(project, [table])[0]

    @guarded
    def promote_together(self, project: str, tables: Sequence[str]) -> list[TableInfo]:
        return self._slots.promote_together(project, tables)

    @guarded
    def abandon_shadow(self, project: str, table: str) -> None:
        check_table_kind(table)
        self._slots.abandon_shadow(project, table)

    @guarded
    def refresh(self, project: str, table: str) -> None:
        check_table_kind(table)
        self._slots.refresh(project, table)

    def _build_indexes(self, project: str, name: str) -> None:
        tbl = self._table(project, name)
        # Merges the small fragments left by batch writes and folds new rows into the
        # keyword index (LanceDB updates indexes incrementally here); a keyword index that is
        # missing, or was built with other stop words (an earlier Fathom's), is built whole.
        tbl.optimize()
        keep_fts_current(tbl, f"{project} ({name})")
        if self.ann.needs(tbl):
            # Too big for the in-memory matrix. The ANN index takes minutes at a million rows,
            # so it is built after the switch, in the background: meanwhile a new table is
            # answered exactly from a memory-mapped copy (`_open_standin`), a refreshed one by
            # its previous index plus a flat scan of the rows added since.
            self.ann.later(project, name)

    def ann_pending(self, project: str, table: str) -> bool:
        """Whether the active table's ANN index is being built in this process now."""
        return self.ann.pending(project, table)

    def wait_for_ann(self, timeout: float | None = None) -> bool:
        """Wait for the ANN builds this process started; True when none is left running."""
        return self.ann.wait(timeout)

    def collect_garbage(self, project: str) -> None:
        """Drop the tables no slot names and the ANN builder's leftovers (each promotion ends so)."""
        state = self._read_state(project) or {"tables": {}}
        live = {v for e in state["tables"].values() for k, v in e.items() if k in ("active", "shadow") and v}
        try:
            names = self._db(project).list_tables().tables
        except Exception:  # unlistable now: the leftovers wait for the next collection
            return
        for name in names:
            if name not in live:
                self._drop(project, name)
        self.ann.collect_garbage(project, live)

    # ---- writes

    @guarded
    def _upsert(
        self,
        project: str,
        table: str,
        slot: Slot,
        rows: list[Chunk],
        matrix: np.ndarray,
        provenance: Provenance,
        written_at: datetime,
    ) -> None:
        n = len(rows)
        self._upsert_rows(project, table, slot, rows, matrix, [provenance] * n, [written_at] * n)

    @guarded
    def _upsert_rows(
        self,
        project: str,
        table: str,
        slot: Slot,
        rows: list[Chunk],
        matrix: np.ndarray,
        provenances: list[Provenance],
        written_at: list[datetime],
    ) -> None:
        name = self._slot_name(project, table, slot)
        tbl = self._table(project, name)  # type: ignore[arg-type]  # the slot is written to
        data = rows_table(tbl.schema, rows, matrix, provenances, written_at)
        self._merge(tbl, data)
        if slot is Slot.ACTIVE:
            self._bump(project, table)

    @guarded
    def _stored_vectors(
        self, project: str, table: str, slot: Slot, content_hashes: Sequence[str]
    ) -> dict[str, StoredVector]:
        name = self._slot_name(project, table, slot)
        if name is None or not content_hashes:
            return {}
        return stored_vectors_in(self._table(project, name), list(content_hashes))

    @staticmethod
    def _merge(tbl: Any, data: pa.Table) -> None:
        (tbl.merge_insert("chunk_id").when_matched_update_all().when_not_matched_insert_all().execute(data))

    def _bump(self, project: str, table: str) -> None:
        with self._locked(project) as state:
            entry = state["tables"].setdefault(table, {})
            entry["generation"] = entry.get("generation", 0) + 1
            entry["last_indexed"] = self.clock()

    def _rows_where(self, tbl: Any, where: str, columns: list[str] | None = None) -> pa.Table:
        return rows_where(tbl, where, columns)

    @guarded
    def _replace_vectors(
        self,
        project: str,
        table: str,
        slot: Slot,
        chunk_ids: list[str],
        matrix: np.ndarray,
        provenance: Provenance,
        written_at: datetime,
    ) -> int:
        name = self._slot_name(project, table, slot)
        tbl = self._table(project, name)  # type: ignore[arg-type]  # the slot is written to
        data = replaced_rows(tbl, project, table, chunk_ids, matrix, provenance, written_at)
        self._merge(tbl, data)
        if slot is Slot.ACTIVE:
            self._bump(project, table)
        return int(data.num_rows)

    @guarded
    def delete(
        self,
        project: str,
        table: str,
        *,
        chunk_ids: Iterable[str] = (),
        paths: Iterable[str] = (),
        slot: Slot = Slot.ACTIVE,
    ) -> int:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        if name is None:
            return 0
        removed = delete_rows(self._table(project, name), list(chunk_ids), list(paths))
        if removed and slot is Slot.ACTIVE:
            self._bump(project, table)
        return removed

    @guarded
    def manifest(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> list[ManifestEntry]:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        if name is None:
            return []
        return manifest_of(self._table(project, name))

    # ---- search

    def _active(self, project: str, table: str) -> tuple[str | None, int]:
        state = self._read_state(project)
        if state is None:
            raise UnknownProject(project, [p.name for p in self.list_projects()])
        entry = state["tables"].get(table, {})
        return entry.get("active"), int(entry.get("generation", 0))

    def generation(self, project: str, table: str) -> int:
        """How many times the active table has changed (a write, a promotion, an ANN index):
        a reader holding an older handle reopens it."""
        check_table_kind(table)
        return self._active(project, table)[1]

    def _active_handle(self, project: str, table: str) -> tuple[str | None, int, Any]:
        """The active table's name, generation and a Lance handle current to that generation.

        Handles are kept open between searches (opening one per search is measurable, see
        docs/benchmarks.md); the generation in
        state.json says when another writer (thread or process) has changed the table."""
        name, generation = self._active(project, table)
        if name is None:
            return None, generation, None
        key = (self.slug(project), name)
        with self._mutex:
            tbl = self._tables.get(key)
            if tbl is None:
                tbl = with_kind(self._db(project).open_table(name))
                self._tables[key] = tbl
            elif self._seen.get(key) != generation:
                tbl.checkout_latest()
            self._seen[key] = generation
        return name, generation, tbl

    def _matrix(self, project: str, table: str) -> tuple[CachedMatrix | None, Any]:
        """The cached matrix for the active table (loading it if it fits), or None when the
        table is answered by LanceDB; plus the Lance handle of the active table."""
        name, generation, tbl = self._active_handle(project, table)
        if name is None:
            return None, None
        return self.matrix_cache.load(project, self.slug(project), table, (name, table, generation), tbl), tbl

    def _cached(self, project: str, table: str, *, use: bool = False) -> CachedMatrix | None:
        """The active table's cached entry if the cache holds it now (see `MatrixCache.held`)."""
        name, generation = self._active(project, table)
        return self.matrix_cache.held(self.slug(project), table, (name, table, generation), use=use)

    def _query_vector(self, project: str, table: str, vector: Any) -> np.ndarray:
        return query_vector(self.space_of(project, table), table, vector)

    @guarded
    def vector_search(
        self, project: str, table: str, vector: Any, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]:
        check_table_kind(table)
        return self._search.vector(project, table, vector, k, where)

    @guarded
    def text_search(
        self, project: str, table: str, query: str, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]:
        check_table_kind(table)
        return self._search.text(project, table, query, k, where)

    def search_many(
        self,
        projects: Sequence[str],
        table: str,
        vector: Any,
        query: str,
        k: int = 10,
        *,
        where: SearchFilter | None = None,
    ) -> Pooled:
        """`Store.search_many`, ranked the same, hit for hit, but a project the matrix
        cache holds costs one matmul and one keyword-index lookup: its best `k` row numbers
        join the pool, and Hits are built only for the pooled best `k` (`LanceSearch.many`)."""
        check_table_kind(table)
        return self._search.many(projects, table, vector, query, k, where)

    @guarded
    def chunk_at(self, project: str, table: str, path: str, line: int) -> tuple[Hit, np.ndarray] | None:
        check_table_kind(table)
        return self._search.chunk_at(project, table, path, line)

    @guarded
    def chunks(
        self, project: str, table: str, *, path: str | None = None, chunk_ids: Sequence[str] = ()
    ) -> list[Chunk]:
        check_table_kind(table)
        return self._search.chunks(project, table, path, list(chunk_ids))

    # ---- projects and audit

    @guarded
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
            project=project,
            table=table,
            space=space_from_json(entry.get("space")),
            rows=rows,
            last_indexed=datetime.fromtimestamp(last, tz=UTC) if last else None,
            shadow_rows=shadow_rows,
            shadow_space=space_from_json(entry.get("shadow_space")),
        )

    def project_names(self) -> list[str]:
        return named_projects(self.root)

    def list_projects(self) -> list[ProjectInfo]:
        """Every project, a damaged one included (with `damage` saying why): one broken
        project must not hide the others, nor hide itself."""
        out = []
        for name in self.project_names():
            try:
                state = self._read_state(name)
                if state is None:
                    continue  # dropped meanwhile
                tables = {
                    t: self.table_info(name, t)
                    for t, e in state["tables"].items()
                    if e.get("active") or e.get("shadow")
                }
                out.append(ProjectInfo(name, tables))
            except StoreError as exc:
                if isinstance(exc, DiskFull):
                    raise
                detail = exc.detail if isinstance(exc, DamagedProject) else str(exc)
                out.append(ProjectInfo(name, {}, damage=detail))
        return sorted(out, key=lambda p: p.name)

    def has_project(self, project: str) -> bool:
        return self._read_state(project) is not None

    @guarded
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
            self.matrix_cache.forget(slug)
            self.ann.forget(slug)  # its files go with the folder below
            # state.json goes first: from that instant the project is unknown to readers.
            self._state_path(project).unlink(missing_ok=True)
            shutil.rmtree(self.project_dir(project), ignore_errors=True)

    @guarded
    def provenance_counts(
        self, project: str, table: str, slot: Slot = Slot.ACTIVE
    ) -> dict[tuple[str, str | None], int]:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        if name is None:
            return {}
        return provenance_counts_of(self._table(project, name))

    @guarded
    def written_since(
        self, project: str, table: str, since: datetime, provider_id: str | None = None
    ) -> list[ManifestEntry]:
        check_table_kind(table)
        name = self._slot_name(project, table, Slot.ACTIVE)
        if name is None:
            return []
        return manifest_of(self._table(project, name), written_since_where(since, provider_id))

    @guarded
    def chunk_texts(
        self, project: str, table: str, chunk_ids: Sequence[str], slot: Slot = Slot.ACTIVE
    ) -> dict[str, str]:
        check_table_kind(table)
        name = self._slot_name(project, table, slot)
        ids = list(chunk_ids)
        if name is None or not ids:
            return {}
        cached = self._cached(project, table) if slot is Slot.ACTIVE else None
        if cached is not None:
            # The reranker stage reads the texts of a search's hits: from memory when the
            # cache holds the table (a LanceDB query per project costs milliseconds).
            found = cached.meta.filter(
                pc.is_in(cached.meta["chunk_id"], value_set=pa.array(ids, pa.string()))
            )
            return dict(zip(found["chunk_id"].to_pylist(), found["text"].to_pylist(), strict=True))
        return texts_in(self._table(project, name), ids)

    def close(self) -> None:
        self.ann.close()
        with self._mutex:
            self.matrix_cache.entries.clear()
            self._tables.clear()
            self._dbs.clear()
