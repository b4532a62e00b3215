"""Which projects the current caller may see: one context variable, and the store as it looks
from inside it.

A scoped MCP token (see `server.tokens`) sees only its own projects. This module owns how that
holds everywhere at once: while a caller's scope is set (`within`), `Fathom.store` answers as a
`ScopedStore` that lists only the scope's projects, says "no such project" for any other, and
refuses every per-project call on one outside it. So "search every project" means every project
of the scope, `list_projects` lists those, and a tool written later reads through the same
view without knowing scopes exist.

The scope is a `contextvars` variable: it follows a request into the threads (`asyncio.to_thread`
copies the context) and tasks it starts, and never leaks into another request. Outside any scope
(the admin API, the CLI, index jobs the operator starts) the store is the store.

It refuses to decide who may see what (the MCP endpoint resolves a request's token and sets the
scope) and to hide anything from the operator: `None` means every project.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from fathom.errors import StoreError
from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.store.contract import Store
from fathom.index.store.errors import UnknownProject
from fathom.index.store.values import (
    Hit,
    ManifestEntry,
    Pooled,
    ProjectInfo,
    ShadowInfo,
    Slot,
    TableInfo,
)
from fathom.space import Provenance, Space

_scope: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "fathom_project_scope", default=None
)


def current() -> frozenset[str] | None:
    """The projects the current caller may see; None for every project."""
    return _scope.get()


@contextlib.contextmanager
def within(projects: Iterable[str] | None) -> Iterator[None]:
    """Run the block as a caller who sees only `projects` (None: every project)."""
    token = _scope.set(None if projects is None else frozenset(projects))
    try:
        yield
    finally:
        _scope.reset(token)


def confine(store: Store) -> Store:
    """`store` as the current caller may see it: itself outside any scope."""
    projects = _scope.get()
    return store if projects is None else ScopedStore(store, projects)


class ScopedStore(Store):
    """A view of a store for a caller who sees only `projects`.

    Every method is written out here with its own check, and nothing else passes through: a
    method a backend adds, or the contract gains, is not reachable through a scope until its
    check is written here (a new abstract method makes this class refuse to instantiate, and
    `tests/test_scope.py` fails for a new public one). A project outside the scope is refused
    with the store's own "no such project" error, the same words whether or not it exists, so a
    scope learns nothing of the projects outside it; `list_projects` and `has_project` see
    only the scope's projects, and `search_many` refuses a list naming any other."""

    def __init__(self, store: Store, projects: frozenset[str]):
        super().__init__(store.clearance, clock=store.clock)
        self._store = store
        self._projects = projects

    @property
    def projects(self) -> frozenset[str]:
        return self._projects

    def refuse(self, *projects: str | None) -> None:
        """Raise the store's "no such project" error unless every one of `projects` is in the
        scope (None: none named, nothing to check)."""
        for project in projects:
            if project is not None and project not in self._projects:
                raise UnknownProject(str(project), [p.name for p in self.list_projects()])

    # ---- projects: only the scope's are seen

    def list_projects(self) -> list[ProjectInfo]:
        return [p for p in self._store.list_projects() if p.name in self._projects]

    def project_names(self) -> list[str]:
        return [n for n in self._store.project_names() if n in self._projects]

    def has_project(self, project: str) -> bool:
        return project in self._projects and self._store.has_project(project)

    def table_info(self, project: str, table: str) -> TableInfo:
        self.refuse(project)
        return self._store.table_info(project, table)

    def drop_project(self, project: str) -> None:
        self.refuse(project)
        self._store.drop_project(project)

    def project_lock(self, project: str, holder: str | None = None) -> contextlib.AbstractContextManager[Any]:
        """The backend's index lock of a project in the scope (a backend without one: none)."""
        self.refuse(project)
        lock = getattr(self._store, "project_lock", None)
        return contextlib.nullcontext() if lock is None else lock(project, holder=holder)

    def close(self) -> None:
        """Nothing: the view owns no resource, and the store it shows outlives it."""

    # ---- writes (the store behind validates and clears them)

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
        self.refuse(project)
        return self._store.write(project, table, rows, vectors, provenance, slot=slot)

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
        self.refuse(project)
        return self._store.replace_vectors(project, table, chunk_ids, vectors, provenance, slot=slot)

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
        self.refuse(project, lender)  # a lender's vectors are its rows too
        return self._store.carry_vectors(project, table, rows, slot=slot, source=source, lender=lender)

    def delete(
        self,
        project: str,
        table: str,
        *,
        chunk_ids: Iterable[str] = (),
        paths: Iterable[str] = (),
        slot: Slot = Slot.ACTIVE,
    ) -> int:
        self.refuse(project)
        return self._store.delete(project, table, chunk_ids=chunk_ids, paths=paths, slot=slot)

    def _upsert(self, *args: Any, **kwargs: Any) -> None:
        raise StoreError("a scoped view writes only through the store's public write paths")

    def _replace_vectors(self, *args: Any, **kwargs: Any) -> int:
        raise StoreError("a scoped view writes only through the store's public write paths")

    # ---- spaces and slots

    def open_table(self, project: str, table: str, space: Space) -> TableInfo:
        self.refuse(project)
        return self._store.open_table(project, table, space)

    def space_of(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> Space | None:
        self.refuse(project)
        return self._store.space_of(project, table, slot)

    def begin_shadow(self, project: str, table: str, space: Space) -> ShadowInfo:
        self.refuse(project)
        return self._store.begin_shadow(project, table, space)

    def promote(self, project: str, table: str) -> TableInfo:
        self.refuse(project)
        return self._store.promote(project, table)

    def promote_together(self, project: str, tables: Sequence[str]) -> list[TableInfo]:
        self.refuse(project)
        return self._store.promote_together(project, tables)

    def abandon_shadow(self, project: str, table: str) -> None:
        self.refuse(project)
        self._store.abandon_shadow(project, table)

    def refresh(self, project: str, table: str) -> None:
        self.refuse(project)
        self._store.refresh(project, table)

    # ---- rows, audit and search

    def manifest(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> list[ManifestEntry]:
        self.refuse(project)
        return self._store.manifest(project, table, slot)

    def chunk_ids(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> set[str]:
        self.refuse(project)
        return self._store.chunk_ids(project, table, slot)

    def provenance_counts(
        self, project: str, table: str, slot: Slot = Slot.ACTIVE
    ) -> dict[tuple[str, str | None], int]:
        self.refuse(project)
        return self._store.provenance_counts(project, table, slot)

    def written_since(
        self, project: str, table: str, since: datetime, provider_id: str | None = None
    ) -> list[ManifestEntry]:
        self.refuse(project)
        return self._store.written_since(project, table, since, provider_id)

    def chunk_texts(
        self, project: str, table: str, chunk_ids: Sequence[str], slot: Slot = Slot.ACTIVE
    ) -> dict[str, str]:
        self.refuse(project)
        return self._store.chunk_texts(project, table, chunk_ids, slot)

    def chunks(
        self, project: str, table: str, *, path: str | None = None, chunk_ids: Sequence[str] = ()
    ) -> list[Chunk]:
        self.refuse(project)
        return self._store.chunks(project, table, path=path, chunk_ids=chunk_ids)

    def chunk_at(self, project: str, table: str, path: str, line: int) -> tuple[Hit, np.ndarray] | None:
        self.refuse(project)
        return self._store.chunk_at(project, table, path, line)

    def vector_search(
        self, project: str, table: str, vector: Any, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]:
        self.refuse(project)
        return self._store.vector_search(project, table, vector, k, where=where)

    def text_search(
        self, project: str, table: str, query: str, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]:
        self.refuse(project)
        return self._store.text_search(project, table, query, k, where=where)

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
        """Refused whole when any of `projects` is outside the scope: a caller that filtered
        first loses nothing, and one that did not cannot read another project's rows."""
        self.refuse(*projects)
        return self._store.search_many(projects, table, vector, query, k, where=where)
