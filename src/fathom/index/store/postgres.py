"""`PostgresStore`: the PostgreSQL + pgvector store: the same `Store` contract as LanceDB, for teams.

When one laptop's LanceDB is no longer enough — several Fathom servers for one team, millions
of chunks, backups and replicas run by a database team — Fathom runs on PostgreSQL with
pgvector. Validation and the clearance check stay in `Store.write` / `Store.replace_vectors`
(`fathom.index.store.contract`); this module implements the backend primitives and adds what only a
shared database needs.

API (blocking calls, like the LanceDB store; async callers use `asyncio.to_thread`):

    store = PostgresStore(url, clearance=None, *, schema="fathom", clock=time.time,
                          ef_search=100, refine=4, application_name="fathom")
    # ... every `Store` method (open_table, write, begin_shadow, promote, vector_search, ...)
    with store.project_lock(project, holder=None) as lock: ...   # ProjectLocked if taken
    store.lock_holder(project) -> LockHolder | None
    store.export_rows(project, table, slot=Slot.ACTIVE, batch_size=1000) -> Iterator[RowBatch]
    store.explain_vector_search(project, table, vector, k=10) -> str
    PgVerdictStore(store) / PgGoldenStore(store) / PgRoutingStore(store)   # gate + routing state
    redact_url(url) -> str

Layout, all inside one schema (`fathom` by default):
  * ``projects`` (name) and ``slots`` — the pointer rows: per (project, table kind) the active
    and shadow physical table names, their Space (jsonb), a generation counter and the last
    indexed time. Promotion is one transaction on the pointer row (and the old table's DROP),
    so a reader sees the old active table or the new one, never a half-built one, and a job
    killed at any instant leaves the pointer — and thus the active table — as it was.
  * ``vector_tables`` — the space identity of every physical table, checked when it is opened.
  * ``v<n>`` — one physical table per slot and vector space: ``vector vector(N)`` (pgvector
    refuses another width by itself, a second lock under `validate_vectors`), the chunk
    columns, provenance (provider_id, verdict_id, written_at) and a generated ``tsv``
    tsvector (symbol, path and text split along code boundaries: ``getUserName(a.b_c)`` is
    found by `user`, `b` or `getusername`) with a GIN index. Cosine ANN is HNSW on the vector;
    pgvector cannot index ``vector`` wider than 2000 dimensions, so a wider table (the 2560-d
    production table) is indexed through an expression index on ``vector::halfvec(N)`` and a
    search re-scores ``k × refine`` half-precision candidates with the exact full-precision
    cosine. Wider than 4000 (halfvec's limit) is searched exactly, without an index.
  * ``project_locks`` (who indexes what), ``verdicts``, ``golden``, ``routing`` — the gate's
    verdicts and golden vectors and the routing state, so every server sees the same cleared
    encoders and the same routes.

Several servers on one database: writes are idempotent upserts by chunk id (`INSERT … ON
CONFLICT`), each batch one transaction; a full or incremental index job holds
`project_lock(project)`, a session advisory lock (`pg_try_advisory_lock`) on a connection of
its own for as long as the job runs. PostgreSQL releases it when that connection dies, so a
crashed server never blocks a project; a second server is refused with `ProjectLocked`, which
says who holds it (holder, host, pid, since).

What it refuses to do: let a password reach a log line, a repr, an error message or status
output (every URL shown is `redact_url`-ed, connection errors are scrubbed); decide who is
cleared (the injected `Clearance` does, in the ABC); let a search see a shadow slot; write a
vector of another width (pgvector's typed column refuses it even if a caller bypassed the ABC).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from fathom.errors import ConfigError, StoreError
from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.store.contract import Store
from fathom.index.store.errors import (
    LockHolder,
    NoShadow,
    SpaceMismatch,
    UnknownProject,
)
from fathom.index.store.pg_database import (
    ROW_COLUMNS,
    Database,
    RowBatch,
    as_array,
    is_postgres_url,
    redact_url,
    utc,
)
from fathom.index.store.pg_locks import hold_pg_index_lock, pg_lock_holder
from fathom.index.store.pg_search import PgSearch
from fathom.index.store.pg_tables import PgTables
from fathom.index.store.rules import (
    check_project_name,
    check_space_kind,
    check_table_kind,
    space_from_json,
    space_to_json,
    validate_vectors,
)
from fathom.index.store.values import (
    Hit,
    ManifestEntry,
    ProjectInfo,
    ShadowInfo,
    Slot,
    StoredVector,
    TableInfo,
)
from fathom.space import Clearance, Provenance, Space

_T = TypeVar("_T")


class PostgresStore(Store):
    """The `Store` contract on PostgreSQL + pgvector (see the module docstring)."""

    def __init__(
        self,
        url: str,
        clearance: Clearance | None = None,
        *,
        schema: str = "fathom",
        clock: Callable[[], float] = time.time,
        ef_search: int = 100,
        refine: int = 4,
        application_name: str = "fathom",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 64,
        index_build_mem: str = "512MB",
        ann_min_rows: int = 10_000,
        connect_timeout: float = 10.0,
    ):
        super().__init__(clearance, clock=clock)
        if not is_postgres_url(url) and "://" in url:
            raise ConfigError(f"not a PostgreSQL URL: {redact_url(url)} (use postgresql://…)")
        self.db = Database(
            url, schema=schema, application_name=application_name, connect_timeout=connect_timeout
        )
        self.ef_search = int(ef_search)
        self.refine = max(1, int(refine))
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        self.index_build_mem = index_build_mem
        self.ann_min_rows = int(ann_min_rows)
        self._tables = PgTables(self.db, hnsw_m=self.hnsw_m, hnsw_ef_construction=self.hnsw_ef_construction)
        self._search = PgSearch(self, self._tables)
        self.db.conn()  # fail now, with a clear error, rather than at the first search

    def __repr__(self) -> str:
        return f"PostgresStore({self.db.url}, schema={self.db.schema!r})"

    @property
    def url(self) -> str:
        """The store's URL, password redacted (for status output)."""
        return self.db.url

    def _retrying(self, fn: Callable[[Any], _T]) -> _T:
        """Run a read once more if its table was dropped by a concurrent promotion between
        reading the pointer and reading the table."""
        import psycopg

        conn = self.db.conn()
        try:
            return fn(conn)
        except psycopg.errors.UndefinedTable:
            return fn(conn)

    # ---- spaces and slots

    def open_table(self, project: str, table: str, space: Space) -> TableInfo:
        check_project_name(project)
        check_table_kind(table)
        check_space_kind(table, space)
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._tables.locked_pointer(conn, project, table)
            current = space_from_json(ptr["space"])
            if ptr["active"] is None:
                name = self._tables.create_table(conn, project, table, space, indexed=True)
                conn.execute(
                    self._tables.q(
                        "UPDATE {s}.slots SET active = %s, space = %s, generation = generation + 1 "
                        "WHERE project = %s AND kind = %s"
                    ),
                    (name, json.dumps(space_to_json(space)), project, table),
                )
            elif current != space:
                raise SpaceMismatch(project, table, current, space)  # type: ignore[arg-type]  # set with active
            else:
                stored = self._tables.table_space(conn, ptr["active"])
                if stored != space:
                    raise SpaceMismatch(project, table, stored or space, space)
                # A table from before symbol kinds gains the column (empty until re-indexed).
                conn.execute(
                    self._tables.q("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS kind text", t=ptr["active"])
                )
        return self.table_info(project, table)

    def space_of(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> Space | None:
        check_table_kind(table)
        ptr = self._tables.pointer(self.db.conn(), project, table)
        if ptr is None or ptr[slot.value] is None:
            return None
        return space_from_json(ptr["space" if slot is Slot.ACTIVE else "shadow_space"])

    def begin_shadow(self, project: str, table: str, space: Space) -> ShadowInfo:
        check_project_name(project)
        check_table_kind(table)
        check_space_kind(table, space)
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._tables.locked_pointer(conn, project, table)
            name = ptr["shadow"]
            if name is not None and space_from_json(ptr["shadow_space"]) == space:
                rows = conn.execute(self._tables.q("SELECT count(*) FROM {t}", t=name)).fetchone()[0]
                return ShadowInfo(project, table, space, int(rows), resumed=True)
            if name is not None:
                self._tables.drop_table(conn, name)  # a shadow of another space is useless now
            name = self._tables.create_table(conn, project, table, space, indexed=False)
            conn.execute(
                self._tables.q(
                    "UPDATE {s}.slots SET shadow = %s, shadow_space = %s WHERE project = %s AND kind = %s"
                ),
                (name, json.dumps(space_to_json(space)), project, table),
            )
        return ShadowInfo(project, table, space, 0, resumed=False)

    def promote(self, project: str, table: str, *, last_indexed: datetime | None = None) -> TableInfo:
        """Switch searches to the shadow in one transaction; the old table is dropped in the
        same transaction. `last_indexed` (default: now) lets a migration keep the source's."""
        return self._promote(project, [table], last_indexed)[0]

    def promote_together(self, project: str, tables: Sequence[str]) -> list[TableInfo]:
        return self._promote(project, list(tables), None)

    def _promote(self, project: str, tables: list[str], last_indexed: datetime | None) -> list[TableInfo]:
        conn = self.db.conn()
        names: dict[str, str] = {}
        for table in tables:
            check_table_kind(table)
            ptr = self._tables.pointer(conn, project, table)
            if ptr is None:
                if not self._tables.project_exists(conn, project):
                    raise UnknownProject(project, self._tables.known(conn))
                raise NoShadow(project, table)
            name = ptr["shadow"]
            if name is None:
                raise NoShadow(project, table)
            space = space_from_json(ptr["shadow_space"])
            # Indexes first, outside the switch, so the first search after promotion is as
            # fast as the last one before it, and the pointer rows are locked for an instant.
            with conn.transaction():
                conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (self.index_build_mem,))
                self._tables.build_indexes(conn, name, space.width)  # type: ignore[union-attr]  # a shadow has a space
            conn.execute(self._tables.q("ANALYZE {t}", t=name))
            names[table] = name
        stamp = utc(last_indexed) or datetime.fromtimestamp(self.clock(), tz=UTC)
        # One transaction switches every table: searches see all old tables or all new ones.
        with conn.transaction():
            for table, name in names.items():
                ptr = self._tables.pointer(conn, project, table, for_update=True)
                if ptr is None or ptr["shadow"] != name:
                    raise NoShadow(project, table)
                old = ptr["active"]
                conn.execute(
                    self._tables.q(
                        "UPDATE {s}.slots SET active = shadow, space = shadow_space, shadow = NULL, "
                        "shadow_space = NULL, generation = generation + 1, last_indexed = %s "
                        "WHERE project = %s AND kind = %s"
                    ),
                    (stamp, project, table),
                )
                if old is not None:
                    self._tables.drop_table(conn, old)
        return [self.table_info(project, table) for table in names]

    def abandon_shadow(self, project: str, table: str) -> None:
        check_table_kind(table)
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._tables.pointer(conn, project, table, for_update=True)
            if ptr is None or ptr["shadow"] is None:
                return
            self._tables.drop_table(conn, ptr["shadow"])
            conn.execute(
                self._tables.q(
                    "UPDATE {s}.slots SET shadow = NULL, shadow_space = NULL WHERE project = %s AND kind = %s"
                ),
                (project, table),
            )

    def refresh(self, project: str, table: str) -> None:
        """Make sure the active table's indexes exist and its statistics are fresh. HNSW and
        GIN are maintained row by row by PostgreSQL, so nothing needs rebuilding."""
        check_table_kind(table)
        conn = self.db.conn()
        ptr = self._tables.pointer(conn, project, table)
        if ptr is None:
            if not self._tables.project_exists(conn, project):
                raise UnknownProject(project, self._tables.known(conn))
            return
        if ptr["active"] is None:
            return
        space = space_from_json(ptr["space"])
        with conn.transaction():
            conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (self.index_build_mem,))
            self._tables.build_indexes(conn, ptr["active"], space.width)  # type: ignore[union-attr]  # active: has one
        conn.execute(self._tables.q("ANALYZE {t}", t=ptr["active"]))
        conn.execute(
            self._tables.q(
                "UPDATE {s}.slots SET generation = generation + 1 WHERE project = %s AND kind = %s"
            ),
            (project, table),
        )

    # ---- writes

    def _write_batch(self, project: str, table: str, slot: Slot, batch: RowBatch, stamp: datetime) -> None:
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._tables.pointer(conn, project, table)
            name = None if ptr is None else ptr[slot.value]
            if name is None:
                raise (
                    NoShadow(project, table)
                    if slot is Slot.SHADOW
                    else StoreError(f"project {project!r} has no active {table!r} table")
                )
            self._tables.copy_in(conn, name, batch)
            if slot is Slot.ACTIVE:
                conn.execute(
                    self._tables.q(
                        "UPDATE {s}.slots SET generation = generation + 1, last_indexed = %s "
                        "WHERE project = %s AND kind = %s"
                    ),
                    (stamp, project, table),
                )

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
        batch = RowBatch(
            chunk_ids=[c.chunk_id for c in rows],
            content_hashes=[c.content_hash for c in rows],
            paths=[c.path for c in rows],
            languages=[c.language for c in rows],
            start_lines=[c.start_line for c in rows],
            end_lines=[c.end_line for c in rows],
            symbols=[c.symbol for c in rows],
            texts=[c.text for c in rows],
            vectors=matrix,
            provider_ids=[p.provider_id for p in provenances],
            verdict_ids=[p.verdict_id for p in provenances],
            written_at=list(written_at),
            kinds=[c.kind for c in rows],
        )
        self._write_batch(project, table, slot, batch, max(written_at))

    def _stored_vectors(
        self, project: str, table: str, slot: Slot, content_hashes: Sequence[str]
    ) -> dict[str, StoredVector]:
        hashes = list(content_hashes)

        def read(conn: Any) -> dict[str, StoredVector]:
            name = self._tables.slot_name(conn, project, table, slot)
            if name is None or not hashes:
                return {}
            rows = conn.execute(
                self._tables.q(
                    "SELECT DISTINCT ON (content_hash) content_hash, vector, provider_id, "
                    "verdict_id, written_at FROM {t} WHERE content_hash = ANY(%s) "
                    "ORDER BY content_hash, written_at",
                    t=name,
                ),
                (hashes,),
            ).fetchall()
            return {
                h: StoredVector(as_array(v), Provenance(p, vid), utc(at))  # type: ignore[arg-type]  # columns are NOT NULL
                for h, v, p, vid, at in rows
            }

        return self._retrying(read)

    def copy_admitted_rows(
        self, project: str, table: str, batch: RowBatch, *, slot: Slot = Slot.SHADOW
    ) -> int:
        """Copy rows another store already admitted, with their own provenance and written_at:
        the write path of a migration (`fathom.index.migrate`, `fathom store migrate`), and
        only of one. It is not part of the `Store` contract, so no scope
        (`fathom.scope.ScopedStore`) and no indexer reaches it.

        Width, finiteness and the table's space are validated like any write; the clearance
        is NOT asked again: these rows were admitted by the source store's lock, and rows of a
        since-quarantined verdict must arrive with their verdict id intact so the audit can
        still find and re-embed them (re-deciding admission here would silently drop that
        evidence)."""
        check_table_kind(table)
        space = self._require_space(project, table, slot)
        batch.vectors = validate_vectors(space, table, batch.vectors, len(batch))
        if not len(batch):
            return 0
        if any(not p for p in batch.provider_ids):
            raise StoreError(f"table {table!r}: every copied row needs a provider id")
        batch.written_at = [utc(w) or datetime.fromtimestamp(self.clock(), tz=UTC) for w in batch.written_at]
        self._write_batch(project, table, slot, batch, max(batch.written_at))
        return len(batch)

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
        from psycopg import sql

        conn = self.db.conn()
        with conn.transaction():
            name = self._tables.slot_name(conn, project, table, slot)
            tbl = sql.Identifier(self.db.schema, name)  # type: ignore[arg-type]  # the slot is written to
            found = {
                r[0]
                for r in conn.execute(
                    sql.SQL("SELECT chunk_id FROM {} WHERE chunk_id = ANY(%s) FOR UPDATE").format(tbl),
                    (chunk_ids,),
                ).fetchall()
            }
            missing = [c for c in chunk_ids if c not in found]
            if missing:
                err = StoreError(
                    f"project {project!r} table {table!r}: {len(missing)} chunk ids to re-embed "
                    f"are not in the table (e.g. {missing[:3]}); nothing was replaced"
                )
                err.missing = missing  # type: ignore[attr-defined]  # evidence for the caller
                raise err
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS fathom_revector "
                "(chunk_id text, vector vector) ON COMMIT DELETE ROWS"
            )
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY pg_temp.fathom_revector (chunk_id, vector) FROM STDIN WITH (FORMAT BINARY)"
                ) as copy,
            ):
                copy.set_types(["text", "vector"])
                for cid, vec in zip(chunk_ids, matrix, strict=True):
                    copy.write_row((cid, vec))
            cur = conn.execute(
                sql.SQL(
                    "UPDATE {} AS t SET vector = r.vector, provider_id = %s, verdict_id = %s, "
                    "written_at = %s FROM pg_temp.fathom_revector AS r "
                    "WHERE t.chunk_id = r.chunk_id"
                ).format(tbl),
                (provenance.provider_id, provenance.verdict_id, written_at),
            )
            n: int = cur.rowcount
            if slot is Slot.ACTIVE:
                conn.execute(
                    self._tables.q(
                        "UPDATE {s}.slots SET generation = generation + 1 WHERE project = %s AND kind = %s"
                    ),
                    (project, table),
                )
        return n

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
        ids, ps = list(chunk_ids), list(paths)
        conn = self.db.conn()
        with conn.transaction():
            name = self._tables.slot_name(conn, project, table, slot)
            if name is None or not (ids or ps):
                return 0
            cur = conn.execute(
                self._tables.q("DELETE FROM {t} WHERE chunk_id = ANY(%s) OR path = ANY(%s)", t=name),
                (ids, ps),
            )
            removed: int = cur.rowcount
            if removed and slot is Slot.ACTIVE:
                conn.execute(
                    self._tables.q(
                        "UPDATE {s}.slots SET generation = generation + 1, last_indexed = %s "
                        "WHERE project = %s AND kind = %s"
                    ),
                    (datetime.fromtimestamp(self.clock(), tz=UTC), project, table),
                )
        return removed

    def manifest(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> list[ManifestEntry]:
        check_table_kind(table)

        def read(conn: Any) -> list[ManifestEntry]:
            name = self._tables.slot_name(conn, project, table, slot)
            if name is None:
                return []
            rows = conn.execute(
                self._tables.q(
                    "SELECT chunk_id, content_hash, path FROM {t} ORDER BY path, start_line, chunk_id", t=name
                )
            ).fetchall()
            return [ManifestEntry(*r) for r in rows]

        return self._retrying(read)

    # ---- search

    def vector_search(
        self, project: str, table: str, vector: Any, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]:
        check_table_kind(table)
        return self._search.vector_search(project, table, vector, k, where)

    def explain_vector_search(self, project: str, table: str, vector: Any, k: int = 10) -> str:
        """The query plan of `vector_search` for this query (which index answers it)."""
        return self._search.explain_vector_search(project, table, vector, k)

    def text_search(
        self, project: str, table: str, query: str, k: int = 10, *, where: SearchFilter | None = None
    ) -> list[Hit]:
        check_table_kind(table)
        return self._search.text_search(project, table, query, k, where)

    def chunk_at(self, project: str, table: str, path: str, line: int) -> tuple[Hit, np.ndarray] | None:
        check_table_kind(table)
        return self._search.chunk_at(project, table, path, line)

    def chunks(
        self, project: str, table: str, *, path: str | None = None, chunk_ids: Sequence[str] = ()
    ) -> list[Chunk]:
        check_table_kind(table)
        return self._search.chunks(project, table, path, list(chunk_ids))

    # ---- projects and audit

    def table_info(self, project: str, table: str) -> TableInfo:
        check_table_kind(table)

        def read(conn: Any) -> TableInfo:
            ptr = self._tables.active_or_raise(conn, project, table) or {}
            return TableInfo(
                project=project,
                table=table,
                space=space_from_json(ptr.get("space")),
                rows=self._tables.count(conn, ptr.get("active")),
                last_indexed=utc(ptr.get("last_indexed")),
                shadow_rows=(self._tables.count(conn, ptr["shadow"]) if ptr.get("shadow") else None),
                shadow_space=space_from_json(ptr.get("shadow_space")),
            )

        return self._retrying(read)

    def list_projects(self) -> list[ProjectInfo]:
        conn = self.db.conn()
        rows = conn.execute(
            self._tables.q(
                "SELECT p.name, s.kind FROM {s}.projects AS p LEFT JOIN {s}.slots AS s "
                "ON s.project = p.name AND (s.active IS NOT NULL OR s.shadow IS NOT NULL) "
                "ORDER BY p.name, s.kind"
            )
        ).fetchall()
        out: dict[str, ProjectInfo] = {}
        for name, kind in rows:
            info = out.setdefault(name, ProjectInfo(name))
            if kind is not None:
                with contextlib.suppress(UnknownProject):  # dropped meanwhile
                    info.tables[kind] = self.table_info(name, kind)
        return list(out.values())

    def project_names(self) -> list[str]:
        return self._tables.known(self.db.conn())

    def has_project(self, project: str) -> bool:
        return self._tables.project_exists(self.db.conn(), project)

    def drop_project(self, project: str) -> None:
        conn = self.db.conn()
        with conn.transaction():
            if (
                conn.execute(
                    self._tables.q("SELECT 1 FROM {s}.projects WHERE name = %s FOR UPDATE"), (project,)
                ).fetchone()
                is None
            ):
                raise UnknownProject(project, self._tables.known(conn))
            names = [
                r[0]
                for r in conn.execute(
                    self._tables.q("SELECT name FROM {s}.vector_tables WHERE project = %s"), (project,)
                ).fetchall()
            ]
            for name in names:
                self._tables.drop_table(conn, name)
            conn.execute(self._tables.q("DELETE FROM {s}.projects WHERE name = %s"), (project,))

    def provenance_counts(
        self, project: str, table: str, slot: Slot = Slot.ACTIVE
    ) -> dict[tuple[str, str | None], int]:
        check_table_kind(table)

        def read(conn: Any) -> dict[tuple[str, str | None], int]:
            name = self._tables.slot_name(conn, project, table, slot)
            if name is None:
                return {}
            rows = conn.execute(
                self._tables.q(
                    "SELECT provider_id, verdict_id, count(*) FROM {t} GROUP BY provider_id, verdict_id",
                    t=name,
                )
            ).fetchall()
            return {(p, v): int(n) for p, v, n in rows}

        return self._retrying(read)

    def written_since(
        self, project: str, table: str, since: datetime, provider_id: str | None = None
    ) -> list[ManifestEntry]:
        check_table_kind(table)
        since = utc(since)  # type: ignore[assignment]  # a datetime in, a datetime out

        def read(conn: Any) -> list[ManifestEntry]:
            name = self._tables.slot_name(conn, project, table, Slot.ACTIVE)
            if name is None:
                return []
            rows = conn.execute(
                self._tables.q(
                    "SELECT chunk_id, content_hash, path FROM {t} WHERE written_at >= %s "
                    "AND (%s::text IS NULL OR provider_id = %s) ORDER BY path, start_line",
                    t=name,
                ),
                (since, provider_id, provider_id),
            ).fetchall()
            return [ManifestEntry(*r) for r in rows]

        return self._retrying(read)

    def chunk_texts(
        self, project: str, table: str, chunk_ids: Sequence[str], slot: Slot = Slot.ACTIVE
    ) -> dict[str, str]:
        check_table_kind(table)
        ids = list(chunk_ids)

        def read(conn: Any) -> dict[str, str]:
            name = self._tables.slot_name(conn, project, table, slot)
            if name is None or not ids:
                return {}
            rows = conn.execute(
                self._tables.q("SELECT chunk_id, text FROM {t} WHERE chunk_id = ANY(%s)", t=name), (ids,)
            ).fetchall()
            return dict(rows)

        return self._retrying(read)

    def export_rows(
        self, project: str, table: str, slot: Slot = Slot.ACTIVE, batch_size: int = 1000
    ) -> Iterator[RowBatch]:
        """Every row of a slot with its vector and provenance, in batches (chunk id order)."""
        check_table_kind(table)
        conn = self.db.conn()
        name = self._tables.slot_name(conn, project, table, slot)
        if name is None:
            return
        after = ""
        cols = ", ".join(ROW_COLUMNS)
        while True:
            rows = conn.execute(
                self._tables.q(
                    f"SELECT {cols} FROM {{t}} WHERE chunk_id > %s ORDER BY chunk_id LIMIT %s", t=name
                ),
                (after, batch_size),
            ).fetchall()
            if not rows:
                return
            cols_ = list(zip(*rows, strict=True))
            yield RowBatch(
                chunk_ids=list(cols_[0]),
                content_hashes=list(cols_[1]),
                paths=list(cols_[2]),
                languages=list(cols_[3]),
                start_lines=list(cols_[4]),
                end_lines=list(cols_[5]),
                symbols=list(cols_[6]),
                texts=list(cols_[7]),
                vectors=np.vstack([as_array(v) for v in cols_[8]]),
                provider_ids=list(cols_[9]),
                verdict_ids=list(cols_[10]),
                written_at=[utc(w) for w in cols_[11]],  # type: ignore[misc]  # rows are untyped tuples
                kinds=list(cols_[12]),
            )
            after = rows[-1][0]

    # ---- one indexer per project across servers

    def lock_holder(self, project: str) -> LockHolder | None:
        """Who holds the index lock of `project` now, or None (see `pg_locks`)."""
        return pg_lock_holder(self.db, self._tables.q, project)

    def project_lock(
        self, project: str, holder: str | None = None
    ) -> contextlib.AbstractContextManager[LockHolder]:
        """Hold the index lock of `project` for the duration of the block: a second server
        (or a second job in this one) gets `ProjectLocked` naming the holder, immediately."""
        return hold_pg_index_lock(self.db, self._tables.q, project, holder, self.clock)

    def close(self) -> None:
        self.db.close()
