"""`fathom store verify [PROJECT] [--repair]`: find damage in stored tables, and fix what can be.

What it owns: reading every row of a project's active tables and naming what is wrong, then
(on `--repair`) fixing it with the least work that restores a correct index.

The checks, per active table:
* the project's pointer file (state.json) is readable (`state`);
* the table can be opened and read in full (`unreadable`), and the rows read agree with the
  count its manifest records (`count-mismatch`);
* every chunk id is stored once (`duplicate-ids`);
* every vector is finite and of unit length (`bad-vectors`): the store writes unit vectors only;
* every row is what it claims to be (`damaged-rows`): its content hash is the hash of its text,
  and its chunk id the hash of its path, lines and content hash;
* the full-text index exists and answers (`fts-missing`): without it every query silently
  becomes vector-only;
* the full-text index is named as this release builds it (`fts-stale`): an index keeps the
  stop words it was built with (an earlier Fathom's, LanceDB's own list, which changes between
  releases), so one of another name may score keywords unlike the in-memory index;
* no row holds a credential (`secrets`): rows of a credential file the walker now leaves out
  by its name, or rows whose text holds key material the walker now redacts, written by a
  build without that rule. They are reported by project, path and count, never by content; a
  file the project takes back with a `!path` line in its `.fathomignore` is not reported.

The repairs: a garbled state.json is rebuilt from the tables on disk (the newest table of each
kind becomes a resumable shadow, so the next `fathom index` embeds only what is missing); a
table that cannot be read is set aside (the next `fathom index` rebuilds it); duplicate ids keep
their one healthy row; rows whose identity is broken are deleted (the next index re-adds them
from the files); the rows of a file that holds a secret are deleted, every row of that path in
every table (the next index leaves a credential file out, and brings any other file back with
its key material redacted);
bad vectors are re-embedded from the stored text by an encoder the gate has
cleared for the table, written through the store's clearance check like any other row; the
full-text and vector indexes are rebuilt.

What it refuses to do: write without the project's index lock (a repair is a writer like any
index run), re-embed through an encoder the gate has not cleared, or guess a project's files
(rows it cannot trust are removed, never invented).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fathom.errors import FathomError
from fathom.index.chunk import Chunk
from fathom.index.secrets import find_secret, secret_by_name
from fathom.index.store import (
    TABLE_KINDS,
    DamagedProject,
    LanceStore,
    Store,
    lance_repair,
)

if TYPE_CHECKING:  # pragma: no cover
    from contextlib import AbstractContextManager

    from fathom.inference.provider import Provider
    from fathom.space import Provenance, Space


class Repairer(Protocol):
    """What a repair needs of the service (`fathom.service.Fathom`): the store, the project's
    index lock, and the gate-cleared encoder of a table with the provenance its rows are
    written under. Named here so that retrieval does not import the service above it."""

    @property
    def store(self) -> Store: ...

    def project_lock(self, project: str) -> AbstractContextManager[Any]: ...

    async def verify_providers(self, table: str) -> Any: ...

    def encoder_in(self, space: Space, project: str) -> Provider: ...

    def provenance(self, provider: Provider, space: Space) -> Provenance: ...


UNIT_TOLERANCE = 1e-3  # float32 rounding of a unit vector stays far inside this

STATE = "state"
UNREADABLE = "unreadable"
COUNT_MISMATCH = "count-mismatch"
DUPLICATE_IDS = "duplicate-ids"
BAD_VECTORS = "bad-vectors"
DAMAGED_ROWS = "damaged-rows"
FTS_MISSING = "fts-missing"
FTS_STALE = "fts-stale"
SECRETS = "secrets"


@dataclass
class Problem:
    project: str
    table: str | None  # None: the whole project (its state file)
    kind: str
    detail: str
    chunk_ids: list[str] = field(default_factory=list)  # the rows concerned, when known
    repaired: str | None = None  # what --repair did about it
    paths: list[str] = field(default_factory=list)  # the files concerned, when it is per file

    def as_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "table": self.table,
            "kind": self.kind,
            "detail": self.detail,
            "rows": len(self.chunk_ids),
            "repaired": self.repaired,
            "paths": list(self.paths),
        }


@dataclass
class ProjectCheck:
    project: str
    tables: dict[str, int] = field(default_factory=dict)  # rows read per active table
    problems: list[Problem] = field(default_factory=list)


def _short(exc: BaseException) -> str:
    return (
        str(exc.detail)
        if isinstance(exc, DamagedProject)
        else " ".join(re.sub(r",?\s*/\S+\.rs:\d+:\d+", "", str(exc)).split())[:300]
    )


def check_project(
    store: Store, project: str, *, taken_back: Callable[[str], bool] | None = None
) -> ProjectCheck:
    """Every problem of one project's active tables (blocking). `taken_back(path)`: whether the
    project's `.fathomignore` takes that file back from the secret rules."""
    from fathom.index.migrate import read_rows

    out = ProjectCheck(project)
    if isinstance(store, LanceStore):
        try:
            kinds = lance_repair.active_tables(store, project)
        except DamagedProject as exc:
            out.problems.append(Problem(project, None, STATE, exc.detail))
            return out
    else:
        kinds = [t for t in TABLE_KINDS if store.space_of(project, t) is not None]
    for table in kinds:
        ids: list[str] = []
        bad_vectors: list[str] = []
        damaged: list[str] = []
        secret_rows: list[str] = []
        secret_paths: set[str] = set()
        try:
            expected = store.table_info(project, table).rows
            for batch in read_rows(store, project, table):
                ids += batch.chunk_ids
                norms = np.linalg.norm(batch.vectors, axis=1)
                off = ~np.isfinite(batch.vectors).all(axis=1) | (np.abs(norms - 1) > UNIT_TOLERANCE)
                bad_vectors += [c for c, o in zip(batch.chunk_ids, off, strict=True) if o]
                for i, cid in enumerate(batch.chunk_ids):
                    if not _identity_holds(
                        cid,
                        batch.content_hashes[i],
                        batch.paths[i],
                        batch.start_lines[i],
                        batch.end_lines[i],
                        batch.texts[i],
                    ):
                        damaged.append(cid)
                    if _holds_secret(batch.paths[i], batch.texts[i], taken_back):
                        secret_rows.append(cid)
                        secret_paths.add(batch.paths[i])
        except (FathomError, OSError, RuntimeError, ValueError) as exc:
            out.problems.append(
                Problem(
                    project, table, UNREADABLE, f"the {table} table cannot be read in full: {_short(exc)}"
                )
            )
            continue
        out.tables[table] = len(ids)
        if len(ids) != expected:
            out.problems.append(
                Problem(
                    project,
                    table,
                    COUNT_MISMATCH,
                    f"the {table} table's manifest counts {expected} rows but {len(ids)} were read",
                )
            )
        dups = sorted(c for c, n in Counter(ids).items() if n > 1)
        if dups:
            out.problems.append(
                Problem(
                    project,
                    table,
                    DUPLICATE_IDS,
                    f"{len(dups)} chunk ids are stored more than once ({len(ids)} rows for "
                    f"{len(set(ids))} ids)",
                    dups,
                )
            )
        damaged_set = set(damaged)
        if damaged:
            out.problems.append(
                Problem(
                    project,
                    table,
                    DAMAGED_ROWS,
                    f"{len(damaged_set)} rows do not match their own content hash or chunk id "
                    f"(damaged text or identity)",
                    sorted(damaged_set),
                )
            )
        bad = sorted(set(bad_vectors) - damaged_set)
        if bad:
            out.problems.append(
                Problem(
                    project,
                    table,
                    BAD_VECTORS,
                    f"{len(bad)} rows hold vectors that are not finite or not unit-length",
                    bad,
                )
            )
        if secret_rows:
            paths = sorted(secret_paths)
            shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
            out.problems.append(
                Problem(
                    project,
                    table,
                    SECRETS,
                    f"{len(secret_rows)} rows of {len(paths)} files hold credentials ({shown}): "
                    f"indexed before secrets were left out or redacted",
                    secret_rows,
                    paths=paths,
                )
            )
        if isinstance(store, LanceStore):
            fts = lance_repair.fts_problem(store, project, table, _short)
            if fts:
                out.problems.append(Problem(project, table, FTS_MISSING, fts))
            elif stale := lance_repair.stale_fts(store, project, table):
                out.problems.append(Problem(project, table, FTS_STALE, stale))
    return out


def _holds_secret(path: str, text: str | None, taken_back: Callable[[str], bool] | None) -> bool:
    """Whether a row is one the walker would not write now: of a credential file by name, or
    a text with key material it would redact (one such chunk condemns its file's rows)."""
    if not (secret_by_name(path) or (text is not None and find_secret(text, path) is not None)):
        return False
    return taken_back is None or not taken_back(path)


def _identity_holds(
    chunk_id: str, content_hash: str, path: str, start: int, end: int, text: str | None
) -> bool:
    if text is None:
        return False
    own_hash = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    if own_hash != content_hash:
        return False
    # The chunk id is derived from exactly these fields (see Chunk.chunk_id).
    probe = Chunk(
        path=path, language="", table="code", start_line=int(start), end_line=int(end), symbol=None, text=text
    )
    return probe.chunk_id == chunk_id


# --------------------------------------------------------------------------- repair


async def repair_project(fathom: Repairer, check: ProjectCheck) -> None:
    """Fix what `check` found, under the project's index lock; marks each problem repaired."""
    import asyncio

    store = fathom.store
    project = check.project
    lock = fathom.project_lock(project)
    await asyncio.to_thread(lock.__enter__)
    try:
        for problem in check.problems:
            if problem.kind == STATE and isinstance(store, LanceStore):
                problem.repaired = await asyncio.to_thread(_rebuild_state, store, project)
            elif problem.kind in (UNREADABLE, COUNT_MISMATCH) and isinstance(store, LanceStore):
                if problem.kind == COUNT_MISMATCH and any(
                    p.kind == UNREADABLE and p.table == problem.table for p in check.problems
                ):
                    continue
                problem.repaired = await asyncio.to_thread(_set_aside, store, project, problem.table)
            elif problem.kind == DUPLICATE_IDS and isinstance(store, LanceStore):
                problem.repaired = await asyncio.to_thread(
                    _dedupe, store, project, problem.table, problem.chunk_ids
                )
            elif problem.kind == DAMAGED_ROWS and problem.table is not None:
                n = await asyncio.to_thread(store.delete, project, problem.table, chunk_ids=problem.chunk_ids)
                problem.repaired = (
                    f"deleted {n} damaged rows; the next `fathom index` re-embeds them from the files"
                )
            elif problem.kind == SECRETS:
                problem.repaired = await asyncio.to_thread(_remove_files, store, project, problem.paths)
            elif problem.kind == BAD_VECTORS:
                problem.repaired = await _reembed(fathom, project, problem.table, problem.chunk_ids)
        for table in {
            p.table
            for p in check.problems
            if p.table
            and p.kind in (FTS_MISSING, FTS_STALE, DUPLICATE_IDS, DAMAGED_ROWS, BAD_VECTORS, SECRETS)
        }:
            await asyncio.to_thread(_rebuild_indexes, store, project, table)
            for p in check.problems:
                if p.table == table and p.kind in (FTS_MISSING, FTS_STALE):
                    p.repaired = "rebuilt the full-text index"
    finally:
        await asyncio.to_thread(lock.__exit__, None, None, None)


def _remove_files(store: Store, project: str, paths: list[str]) -> str:
    """Every row of these files, in every table of the project: the rows without the key go
    too, so that no half of a file is left for the next index to reconcile."""
    removed = 0
    for table in TABLE_KINDS:
        if store.space_of(project, table) is None:
            continue
        removed += store.delete(project, table, paths=paths)
        if isinstance(store, LanceStore):
            lance_repair.purge(store, project, table)
    return (
        f"deleted {removed} rows of {len(paths)} files; the next `fathom index` leaves "
        f"credential files out and indexes the others with their secrets redacted (a "
        f"`!path` line in .fathomignore takes one back)"
    )


def _rebuild_state(store: LanceStore, project: str) -> str:
    aside, kept = lance_repair.rebuild_state(store, project)
    return (
        f"rebuilt state.json (the damaged one kept as {aside}); kept "
        f"{', '.join(kept) or 'no table'} to resume: run `fathom index ROOT --project "
        f"{project}` to finish (only missing chunks are embedded)"
    )


def _set_aside(store: LanceStore, project: str, table: str | None) -> str:
    assert table is not None
    lance_repair.set_aside(store, project, table)
    return (
        f"set the unreadable {table} table aside; run `fathom index ROOT --project {project}` to rebuild it"
    )


def _dedupe(store: LanceStore, project: str, table: str | None, chunk_ids: list[str]) -> str:
    """Keep one row per duplicated id: the first whose identity holds and whose vector is
    sound; ids with no sound row lose all of them (the next index re-embeds them)."""
    assert table is not None

    def sound(row: dict[str, Any]) -> bool:
        vec = np.asarray(row["vector"], dtype=np.float32)
        return bool(
            np.isfinite(vec).all()
            and abs(float(np.linalg.norm(vec)) - 1) <= UNIT_TOLERANCE
            and _identity_holds(
                row["chunk_id"],
                row["content_hash"],
                row["path"],
                row["start_line"],
                row["end_line"],
                row["text"],
            )
        )

    kept = lance_repair.dedupe(store, project, table, chunk_ids, sound)
    return f"kept one row for {kept} of {len(chunk_ids)} duplicated ids" + (
        f"; {len(chunk_ids) - kept} are re-embedded by the next `fathom index`"
        if kept < len(chunk_ids)
        else ""
    )


async def _reembed(fathom: Repairer, project: str, table: str | None, chunk_ids: list[str]) -> str:
    """New vectors for rows whose vectors are damaged, from their stored text, by the table's
    own encoder once the gate has cleared it; the store checks that clearance again."""
    import asyncio

    assert table is not None
    await fathom.verify_providers(table)
    space = await asyncio.to_thread(fathom.store.space_of, project, table)
    assert space is not None
    encoder = fathom.encoder_in(space, project)  # the space as read: one reading for both
    provenance = fathom.provenance(encoder, space)
    texts = await asyncio.to_thread(fathom.store.chunk_texts, project, table, chunk_ids)
    present = [c for c in chunk_ids if c in texts]
    done = 0
    for i in range(0, len(present), 64):
        batch = present[i : i + 64]
        vectors = await encoder.embed([texts[c] for c in batch])
        done += await asyncio.to_thread(
            fathom.store.replace_vectors, project, table, batch, vectors, provenance
        )
    return f"re-embedded {done} rows with {encoder.id} (verdict {provenance.verdict_id or '-'})"


def _rebuild_indexes(store: Store, project: str, table: str) -> None:
    if isinstance(store, LanceStore):
        lance_repair.rebuild_fts(store, project, table)
    store.refresh(project, table)
