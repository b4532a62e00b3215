"""The blue/green slots of LanceStore's tables: open a table, build a shadow beside the active
one, promote shadows (several tables in one switch), abandon one, refresh the active one.

Promotion rewrites the project's state.json in one rename: readers see the old active tables
or the new ones, never a half-built one, and never the code table of one run with the docs
table of another. A shadow holding one chunk id twice is never promoted. What it refuses to
do: write rows (the store's writes do) or build indexes itself (the store's `_build_indexes`,
which a crash harness watches).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fathom.index.store.errors import DuplicateChunks, NoShadow, SpaceMismatch
from fathom.index.store.rules import check_table_kind, space_from_json, space_to_json
from fathom.index.store.values import ShadowInfo, TableInfo
from fathom.space import Space


class LanceSlots:
    """The slot changes of one LanceStore. `store` is the LanceStore that holds it (not
    imported here: the store imports this module); every pointer change goes through its
    `_locked`, every table made or dropped through its `_create` / `_drop`."""

    def __init__(self, store: Any):
        self.store = store

    def open(self, project: str, table: str, space: Space) -> TableInfo:
        store = self.store
        with store._locked(project) as state:
            entry = state["tables"].setdefault(table, {})
            current = space_from_json(entry.get("space"))
            if entry.get("active") is None:
                entry["active"] = store._create(project, state, table, space)
                entry["space"] = space_to_json(space)
                entry["generation"] = entry.get("generation", 0) + 1
            elif current != space:
                raise SpaceMismatch(project, table, current, space)  # type: ignore[arg-type]  # set with active
            else:
                self._check_table_metadata(project, entry["active"], space)
        info: TableInfo = store.table_info(project, table)
        return info

    def _check_table_metadata(self, project: str, name: str, space: Space) -> None:
        meta = self.store._table(project, name).schema.metadata or {}
        raw = meta.get(b"fathom.space")
        stored = space_from_json(json.loads(raw)) if raw else None
        if stored != space:
            raise SpaceMismatch(project, space.table, stored or space, space)

    def begin_shadow(self, project: str, table: str, space: Space) -> ShadowInfo:
        store = self.store
        with store._locked(project) as state:
            entry = state["tables"].setdefault(table, {})
            name = entry.get("shadow")
            if name is not None and space_from_json(entry.get("shadow_space")) == space:
                rows = store._table(project, name).count_rows()
                return ShadowInfo(project, table, space, rows, resumed=True)
            if name is not None:
                # A shadow of another space is useless to this run: start over.
                store._drop(project, name)
            entry["shadow"] = store._create(project, state, table, space)
            entry["shadow_space"] = space_to_json(space)
        return ShadowInfo(project, table, space, 0, resumed=False)

    def promote_together(self, project: str, tables: Sequence[str]) -> list[TableInfo]:
        store = self.store
        names: dict[str, str] = {}
        for table in tables:
            check_table_kind(table)
            name = store._entry(project, table).get("shadow")
            if name is None:
                raise NoShadow(project, table)
            names[table] = name
        for table, name in names.items():
            # Self-check: a shadow holding one chunk id twice (two writers raced, or damage)
            # must never become what searches read.
            rows, ids = self._id_counts(project, name)
            if rows != ids:
                store.abandon_shadow(project, table)
                raise DuplicateChunks(project, table, rows, ids)
            # Indexes are built on the shadow before the switch, so the first search after
            # promotion is as fast as the last one before it.
            store._build_indexes(project, name)
        old: list[str] = []
        with store._locked(project) as state:
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
                entry["last_indexed"] = store.clock()
            # The pointer file is rewritten (atomically) when this block exits: that one
            # rename is the promotion of every table. Dropping the old versions comes after.
        for name in old:
            store._drop(project, name)
        store.collect_garbage(project)
        return [store.table_info(project, table) for table in names]

    def _id_counts(self, project: str, name: str) -> tuple[int, int]:
        ids = (
            self.store._table(project, name).search().select(["chunk_id"]).limit(None).to_arrow()["chunk_id"]
        )
        return len(ids), len(ids.unique())

    def abandon_shadow(self, project: str, table: str) -> None:
        with self.store._locked(project) as state:
            entry = state["tables"].get(table, {})
            name = entry.get("shadow")
            entry["shadow"] = None
            entry.pop("shadow_space", None)
        if name is not None:
            self.store._drop(project, name)

    def refresh(self, project: str, table: str) -> None:
        store = self.store
        name = store._entry(project, table).get("active")
        if name is None:
            return
        store._build_indexes(project, name)
        with store._locked(project) as state:
            entry = state["tables"][table]
            entry["generation"] = entry.get("generation", 0) + 1
