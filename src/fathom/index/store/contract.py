"""The `Store` contract: one abstract class every backend implements, and the rules no
backend can bypass.

Batch validation (width, finiteness, table kind) and the clearance check run in
`Store.write` / `Store.replace_vectors` / `Store.carry_vectors`, the only public write paths,
before a backend's `_upsert` is reached. What it refuses to do: embed anything (vectors come
from the caller) or decide who is cleared (the injected `Clearance` decides; the default
clears only the space's reference encoder).
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import numpy as np

from fathom.errors import NotCleared, StoreError
from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.store.errors import DamagedProject, NoShadow
from fathom.index.store.rules import (
    check_project_name,
    check_table_kind,
    validate_rows,
    validate_vectors,
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
from fathom.space import Clearance, Provenance, ReferenceOnlyClearance, Space

# A search over many projects: the searches LanceDB answers (tables the matrix cache does
# not hold) run at once. They release the GIL (LanceDB's Rust engine), so a few threads per
# core keep the cores busy while one waits on its table's files.
FANOUT_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fathom-fanout")


class Store(ABC):
    """One contract, several backends. Validation and the clearance check live here, in the
    only public write paths, so no backend can skip them (the store is the gate's second lock)."""

    def __init__(self, clearance: Clearance | None = None, *, clock: Callable[[], float] = time.time):
        self.clearance: Clearance = clearance or ReferenceOnlyClearance()
        self.clock = clock

    # ---- writes (template methods: validate, clear, then hand to the backend)

    def write(
        self,
        project: str,
        table: str,
        rows: Sequence[Chunk],
        vectors: Any,
        provenance: Provenance,
        *,
        slot: Slot = Slot.ACTIVE,
    ) -> int:
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

    def replace_vectors(
        self,
        project: str,
        table: str,
        chunk_ids: Sequence[str],
        vectors: Any,
        provenance: Provenance,
        *,
        slot: Slot = Slot.ACTIVE,
    ) -> int:
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
        return self._replace_vectors(project, table, slot, chunk_ids, matrix, provenance, written_at)

    def carry_vectors(
        self,
        project: str,
        table: str,
        rows: Sequence[Chunk],
        *,
        slot: Slot = Slot.ACTIVE,
        source: Slot = Slot.ACTIVE,
        lender: str | None = None,
    ) -> set[str]:
        """Content-keyed reuse: write each of `rows` whose text (its content hash) already has
        a vector in the `source` slot, with that vector, so it is not embedded again. Returns
        the chunk ids written; the others are left for the caller to embed.

        Only within one space (the source slot's space must be the target's: the same
        encoder, model and width). A carried row keeps the provenance its vector was written
        under (provider, verdict, time), and that provenance must still pass the clearance
        like any write: a vector whose verdict was since revoked or superseded is not carried,
        it is embedded again. `lender`: another project whose `source` slot lends the vectors
        (a sibling branch of a git project); by default the project's own."""
        check_project_name(project)
        check_table_kind(table)
        rows = list(rows)
        validate_rows(table, rows)
        space = self._require_space(project, table, slot)
        lender = lender or project
        if not rows or self.space_of(lender, table, source) != space:
            return set()
        stored = self._stored_vectors(lender, table, source, sorted({c.content_hash for c in rows}))
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
        matrix = validate_vectors(space, table, np.vstack([v.vector for _, v in chosen]), len(chosen))
        self._upsert_rows(
            project,
            table,
            slot,
            [c for c, _ in chosen],
            matrix,
            [v.provenance for _, v in chosen],
            [v.written_at for _, v in chosen],
        )
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
    def _upsert(
        self,
        project: str,
        table: str,
        slot: Slot,
        rows: list[Chunk],
        matrix: np.ndarray,
        provenance: Provenance,
        written_at: datetime,
    ) -> None: ...

    @abstractmethod
    def _replace_vectors(
        self,
        project: str,
        table: str,
        slot: Slot,
        chunk_ids: list[str],
        matrix: np.ndarray,
        provenance: Provenance,
        written_at: datetime,
    ) -> int: ...

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
        """Upsert rows that each carry their own provenance and write time (content reuse).
        This default groups them into `_upsert` calls; a backend may do it in one write."""
        groups: dict[tuple[Provenance, datetime], list[int]] = {}
        for i, key in enumerate(zip(provenances, written_at, strict=True)):
            groups.setdefault(key, []).append(i)
        for (provenance, stamp), idx in groups.items():
            self._upsert(project, table, slot, [rows[i] for i in idx], matrix[idx], provenance, stamp)

    def _stored_vectors(
        self, project: str, table: str, slot: Slot, content_hashes: Sequence[str]
    ) -> dict[str, StoredVector]:
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
    def manifest(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> list[ManifestEntry]: ...

    def chunk_ids(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> set[str]:
        return {e.chunk_id for e in self.manifest(project, table, slot)}

    @abstractmethod
    def delete(
        self,
        project: str,
        table: str,
        *,
        chunk_ids: Iterable[str] = (),
        paths: Iterable[str] = (),
        slot: Slot = Slot.ACTIVE,
    ) -> int: ...

    # ---- search primitives

    @abstractmethod
    def vector_search(
        self, project: str, table: str, vector: Any, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]: ...

    @abstractmethod
    def text_search(
        self, project: str, table: str, query: str, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]: ...

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
        """Both searches over several projects of ONE space, each pooled into one list of
        the best `k`: vector hits by cosine, keyword hits by BM25 (equal scores keep the
        projects' order, then each project's own), every hit carrying its `project`, as if
        the projects were one index. A damaged project is left out and named in `damaged`.

        This default runs every project's two searches at once on a thread pool; LanceStore
        answers the projects its cache holds from memory without it."""
        check_table_kind(table)
        has_text = bool(query and query.strip())
        halves = {
            p: (
                FANOUT_POOL.submit(self.vector_search, p, table, vector, k, where=where),
                FANOUT_POOL.submit(self.text_search, p, table, query, k, where=where) if has_text else None,
            )
            for p in projects
        }
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
    def chunk_at(self, project: str, table: str, path: str, line: int) -> tuple[Hit, np.ndarray] | None: ...

    # ---- projects and audit

    @abstractmethod
    def table_info(self, project: str, table: str) -> TableInfo:
        """Rows, space and last indexed time of one table (rows 0 and space None when the
        project has no such table yet); UnknownProject when the project is unknown."""

    @abstractmethod
    def list_projects(self) -> list[ProjectInfo]: ...

    def project_names(self) -> list[str]:
        """Every project's name, sorted, a damaged one included, without opening or counting
        its tables as `list_projects` does: a search over every project starts here."""
        return [p.name for p in self.list_projects()]

    def has_project(self, project: str) -> bool:
        return any(p.name == project for p in self.list_projects())

    @abstractmethod
    def drop_project(self, project: str) -> None: ...

    @abstractmethod
    def provenance_counts(
        self, project: str, table: str, slot: Slot = Slot.ACTIVE
    ) -> dict[tuple[str, str | None], int]: ...

    @abstractmethod
    def written_since(
        self, project: str, table: str, since: datetime, provider_id: str | None = None
    ) -> list[ManifestEntry]: ...

    def chunk_texts(
        self, project: str, table: str, chunk_ids: Sequence[str], slot: Slot = Slot.ACTIVE
    ) -> dict[str, str]:
        """The stored text of these rows, by chunk_id (the gate re-embeds exactly the rows a
        quarantined provider wrote). Unknown ids are simply absent."""
        raise StoreError(f"{type(self).__name__} cannot return stored chunk texts")

    def chunks(
        self, project: str, table: str, *, path: str | None = None, chunk_ids: Sequence[str] = ()
    ) -> list[Chunk]:
        """The active rows of one file (`path`, relative to the project root) or of these
        chunk ids, as the `Chunk`s they were written from (text, lines, symbol; the order is
        the backend's). `read_code` serves the indexed version of a file from them."""
        raise StoreError(f"{type(self).__name__} cannot return stored chunks")

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        pass
