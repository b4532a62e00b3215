"""What `fathom store verify` and `fathom store migrate` need of a LanceStore's insides: its
active tables, its rows in batches, its full-text index, and the repairs only the store can
make (a new pointer file, a table set aside, duplicates dropped, deleted rows collected).

What it owns: every one of those operations, reached through the store's own handles (its
pointer file, its table handles, its lock), so that nothing outside the store package touches
them; the checks and the choice of repair stay with `fathom.index.verify`.

What it refuses to do: judge a row (the caller passes what makes a row sound), or repair
without being asked (each function is one repair the caller chose, under its index lock).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa

from fathom.index.store.lance import LanceStore
from fathom.index.store.lance_tables import build_fts, fts_state, in_list
from fathom.index.store.rules import TABLE_KINDS, space_from_json, space_to_json
from fathom.index.store.values import Slot


def active_tables(store: LanceStore, project: str) -> list[str]:
    """The kinds of table the project's pointer file names an active table for (raises
    `DamagedProject` when that file cannot be read)."""
    state = store._read_state(project)
    return [t for t in TABLE_KINDS if state and state["tables"].get(t, {}).get("active")]


def record_batches(
    store: LanceStore, project: str, table: str, slot: Slot, batch_size: int
) -> Iterator[pa.RecordBatch]:
    """Every row of one slot of a table, in arrow batches (none when the slot is empty)."""
    tbl = store.slot_table(project, table, slot)
    if tbl is None:
        return
    try:
        batches = tbl.search().limit(None).to_batches(batch_size)
    except Exception:  # older LanceDB: a full read, sliced
        batches = tbl.to_arrow().to_batches(max_chunksize=batch_size)
    yield from batches


def fts_problem(
    store: LanceStore, project: str, table: str, short: Callable[[BaseException], str]
) -> str | None:
    """What is wrong with the active table's full-text index: missing, or not answering."""
    tbl = store.slot_table(project, table, Slot.ACTIVE)
    if tbl is None:
        return None
    if fts_state(tbl) == "missing":
        return f"the {table} table has no full-text index: every query is vector-only"
    try:
        tbl.search("fathom", query_type="fts").limit(1).to_arrow()
    except Exception as exc:  # any failure means keyword search is gone
        return f"the {table} table's full-text index does not answer ({short(exc)})"
    return None


def stale_fts(store: LanceStore, project: str, table: str) -> str | None:
    """Whether the active table's full-text index may have been built with other stop words
    than the product's, said as a problem."""
    tbl = store.slot_table(project, table, Slot.ACTIVE)
    if tbl is None or fts_state(tbl) != "stale":
        return None
    return (
        f"the {table} table's full-text index does not say it was built with this Fathom's "
        f"stop words (an index from an earlier Fathom, built with LanceDB's own list): "
        f"its keyword scores may differ from those of the in-memory index until it is rebuilt"
    )


def rebuild_fts(store: LanceStore, project: str, table: str) -> None:
    tbl = store.slot_table(project, table, Slot.ACTIVE)
    if tbl is not None:
        build_fts(tbl)


def purge(store: LanceStore, project: str, table: str) -> None:
    """A LanceDB delete only marks rows: their text stays in the table's data files, and in
    its earlier versions, until they are compacted and collected. Both now, so deleted
    credentials leave the disk. LanceDB warns that a reader still on an older version fails:
    a search running in a server at that instant is the price of not keeping the keys."""
    tbl = store.slot_table(project, table, Slot.ACTIVE)
    if tbl is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            tbl.optimize(cleanup_older_than=timedelta(0))


def rebuild_state(store: LanceStore, project: str) -> tuple[str, list[str]]:
    """A new pointer file from the tables on disk: the newest table of each kind (by the
    number in its name) becomes a shadow of the space its own schema records, so the next
    index run resumes it (embedding only the chunks it lacks) and promotes it. Returns the
    name the damaged file was kept under, and the tables kept."""
    d = store.project_dir(project)
    path = d / "state.json"
    aside = path.with_name(f"state.json.damaged-{int(store.clock())}")
    path.replace(aside)
    state: dict[str, Any] = {"project": project, "tables": {}, "next": 1}
    found: dict[str, tuple[int, str]] = {}
    for folder in d.glob("*.lance"):
        m = re.fullmatch(r"(code|docs)_(\d+)_[0-9a-f]+", folder.stem)
        if m:
            kind, n = m.group(1), int(m.group(2))
            state["next"] = max(state["next"], n + 1)
            if n > found.get(kind, (-1, ""))[0]:
                found[kind] = (n, folder.stem)
    kept = []
    for kind, (_, name) in found.items():
        try:
            meta = store._db(project).open_table(name).schema.metadata or {}
            space = space_from_json(json.loads(meta[b"fathom.space"]))
        except Exception:  # an unreadable table is left for collection
            continue
        if space is None or space.table != kind:
            continue
        state["tables"][kind] = {
            "active": None,
            "shadow": name,
            "shadow_space": space_to_json(space),
            "generation": 1,
        }
        kept.append(f"{kind} ({name})")
    store._write_state(project, state)
    with store._mutex:
        store._tables.clear()
        store.matrix_cache.entries.clear()
    return aside.name, kept


def set_aside(store: LanceStore, project: str, table: str) -> None:
    """A table that cannot be read in full stops being what searches read: its pointer is
    dropped and its folder collected, and the next index run rebuilds the table."""
    with store._locked(project) as state:
        entry = state["tables"].get(table, {})
        name = entry.get("active")
        entry["active"] = None
        entry.pop("space", None)
        entry["generation"] = entry.get("generation", 0) + 1
    if name:
        store._drop(project, name)


def dedupe(
    store: LanceStore, project: str, table: str, chunk_ids: list[str], sound: Callable[[dict[str, Any]], bool]
) -> int:
    """Keep one row per duplicated id: the first that `sound(row)` accepts (the row's columns
    as values); ids with no sound row lose all of them. Returns the rows kept."""
    tbl = store.slot_table(project, table, Slot.ACTIVE)
    if tbl is None:
        return 0
    keep = []
    for i in range(0, len(chunk_ids), store.BATCH):
        rows = store._rows_where(tbl, in_list("chunk_id", chunk_ids[i : i + store.BATCH]))
        seen: set[str] = set()
        for j in range(rows.num_rows):
            row = rows.slice(j, 1)
            values = {c: row[c][0].as_py() for c in row.column_names}
            if values["chunk_id"] not in seen and sound(values):
                seen.add(values["chunk_id"])
                keep.append(row)
    store.delete(project, table, chunk_ids=chunk_ids)
    if keep:
        tbl.add(pa.concat_tables(keep))
    store._bump(project, table)
    return len(keep)
