"""The PostgreSQL + pgvector store: the same `Store` contract as LanceDB, for teams.

When one laptop's LanceDB is no longer enough — several Fathom servers for one team, millions
of chunks, backups and replicas run by a database team — Fathom runs on PostgreSQL with
pgvector. Validation and the clearance check stay in `Store.write` / `Store.replace_vectors`
(fathom.index.store); this module implements the backend primitives and adds what only a
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

import base64
import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from fathom.config import RoutingState, RoutingStateDamaged, RoutingStore, default_routes, state_defect
from fathom.errors import ConfigError, StoreError
from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.store import (
    Hit,
    LockHolder,
    ManifestEntry,
    NoShadow,
    ProjectInfo,
    ProjectLocked,
    ShadowInfo,
    Slot,
    SpaceMismatch,
    Store,
    StoredVector,
    TableInfo,
    UnknownProject,
    check_project_name,
    check_table_kind,
    snippet_of,
    space_from_json,
    space_to_json,
    validate_vectors,
)
from fathom.space import Clearance, Provenance, Space

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"  # 2: the gate's watch list (gate_watch)
HNSW_MAX_VECTOR = 2000  # pgvector: widest `vector` an HNSW index accepts
HNSW_MAX_HALFVEC = 4000  # pgvector: widest `halfvec` an HNSW index accepts
LOCK_NAMESPACE = 0x46415448  # "FATH": the first key of every Fathom advisory lock
_BOOTSTRAP_LOCK = 0x46415449
_HIT_COLUMNS = ("chunk_id", "path", "start_line", "end_line", "symbol", "language", "text",
                "provider_id", "kind")
_ROW_COLUMNS = ("chunk_id", "content_hash", "path", "language", "start_line", "end_line",
                "symbol", "text", "vector", "provider_id", "verdict_id", "written_at", "kind")
_ROW_TYPES = ("text", "text", "text", "text", "int4", "int4", "text", "text", "vector", "text",
              "text", "timestamptz", "text")


# --------------------------------------------------------------------------- secrets


_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact_url(url: str | None) -> str:
    """`url` with any password replaced by `***`: `postgresql://user:***@host/db`.

    Handles URL userinfo, a `password=` query parameter and key=value conninfo strings."""
    if not url:
        return ""
    if "://" not in url:
        return _PASSWORD_KV.sub(r"\1***", url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable store URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = parts.query
    if query:
        pairs = [(k, "***" if k.lower() == "password" else v)
                 for k, v in parse_qsl(query, keep_blank_values=True)]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _password_of(url: str) -> str | None:
    if "://" not in url:
        m = _PASSWORD_KV.search(url)
        return m.group(2).strip("'") if m else None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    for k, v in parse_qsl(parts.query):
        if k.lower() == "password":
            return v
    return parts.password


def is_postgres_url(value: str | os.PathLike[str] | None) -> bool:
    return isinstance(value, str) and value.startswith(("postgresql://", "postgres://"))


# --------------------------------------------------------------------------- errors


class StoreUnavailable(StoreError):
    """The database cannot be reached or refused the login. Carries the redacted URL only."""

    def __init__(self, url: str, detail: str):
        self.url, self.detail = url, detail
        super().__init__(
            f"cannot connect to the PostgreSQL store at {url}: {detail}. Check that the server "
            f"is running and FATHOM_STORE_URL (host, port, user, database, password) is right."
        )


class ExtensionMissing(StoreError):
    def __init__(self, url: str, detail: str):
        self.url = url
        super().__init__(
            f"the database at {url} has no pgvector extension and this user may not create it "
            f"({detail}). Ask a database administrator to run `CREATE EXTENSION vector;` in "
            f"this database once (pgvector 0.7 or later for halfvec indexes)."
        )


# --------------------------------------------------------------------------- values


@dataclass
class RowBatch:
    """Stored rows with everything that identifies them, provenance included (migration)."""

    chunk_ids: list[str]
    content_hashes: list[str]
    paths: list[str]
    languages: list[str]
    start_lines: list[int]
    end_lines: list[int]
    symbols: list[str | None]
    texts: list[str]
    vectors: np.ndarray  # (n, width) float32
    provider_ids: list[str]
    verdict_ids: list[str | None]
    written_at: list[datetime]
    kinds: list[str | None] | None = None  # symbol kinds (None: rows from before them)

    def __len__(self) -> int:
        return len(self.chunk_ids)

    def kind(self, i: int) -> str | None:
        return self.kinds[i] if self.kinds else None


def _pg_text(value: str | None) -> str | None:
    """PostgreSQL text holds neither NUL nor lone surrogates; replace them, keep the rest."""
    if value is None:
        return None
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


# --------------------------------------------------------------------------- connections


class Database:
    """Connections to one PostgreSQL database and the Fathom schema in it.

    One connection per thread (psycopg connections are not meant to be shared by threads
    mid-transaction; `asyncio.to_thread` callers each get their own), reconnected when
    broken. The URL (with its password) is kept only in a private attribute; `repr` and every
    message show `redact_url(url)`."""

    def __init__(self, url: str, *, schema: str = "fathom", application_name: str = "fathom",
                 connect_timeout: float = 10.0):
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise ConfigError(f"invalid PostgreSQL schema name {schema!r}: use lower-case "
                              f"letters, digits and underscores")
        self.__url = url
        self.url = redact_url(url)
        self.schema = schema
        self.application_name = application_name[:63]
        self.connect_timeout = connect_timeout
        self._local = threading.local()
        self._all: list[Any] = []
        self._mutex = threading.Lock()
        self._ready = False

    def __repr__(self) -> str:
        return f"Database({self.url}, schema={self.schema!r})"

    def _scrub(self, text: str) -> str:
        secret = _password_of(self.__url)
        if secret:
            text = text.replace(secret, "***")
        return text.replace(self.__url, self.url)

    def connect(self, *, application_name: str | None = None, register: bool = True) -> Any:
        """A new connection (autocommit; transactions are explicit `conn.transaction()`)."""
        import psycopg

        try:
            conn = psycopg.connect(self.__url, autocommit=True,
                                   connect_timeout=max(1, int(self.connect_timeout)),
                                   application_name=(application_name
                                                     or self.application_name)[:63])
        except psycopg.Error as exc:
            # libpq messages name host, port and user, never the password; scrub anyway, and
            # drop the chained exception so no frame of it carries the URL.
            raise StoreUnavailable(self.url, self._scrub(str(exc)).strip()) from None
        if register:
            self._register(conn)
        return conn

    def _register(self, conn: Any) -> None:
        from pgvector.psycopg import register_vector

        try:
            register_vector(conn)
        except Exception:  # noqa: BLE001 - the extension may not exist yet in a fresh database
            self.ensure_extension(conn)
            register_vector(conn)

    def ensure_extension(self, conn: Any) -> None:
        import psycopg

        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise ExtensionMissing(self.url, self._scrub(str(exc)).strip()) from None

    def conn(self) -> Any:
        """This thread's connection, opened (and the schema made ready) on first use."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = self.connect()
            self._local.conn = conn
            with self._mutex:
                self._all = [c for c in self._all if not c.closed]
                self._all.append(conn)
        if not self._ready:
            self.bootstrap(conn)
        return conn

    def bootstrap(self, conn: Any) -> None:
        """Create the schema and shared tables if missing (idempotent, safe under races: the
        DDL runs under a transaction-scoped advisory lock)."""
        from psycopg import sql

        s = sql.Identifier(self.schema)
        row = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.meta",)).fetchone()
        if row[0]:
            version = conn.execute(sql.SQL("SELECT value FROM {}.meta WHERE key = 'version'")
                                   .format(s)).fetchone()
            if version and version[0] == SCHEMA_VERSION:
                self._ready = True
                return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_BOOTSTRAP_LOCK,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
            for stmt in _SCHEMA_DDL:
                conn.execute(sql.SQL(stmt).format(s=s))
            conn.execute(sql.SQL(
                "INSERT INTO {}.meta (key, value) VALUES ('version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value").format(s),
                (SCHEMA_VERSION,))
        self._ready = True

    def close(self) -> None:
        with self._mutex:
            conns, self._all = self._all, []
        for c in conns:
            with contextlib.suppress(Exception):
                c.close()
        self._local = threading.local()


# `{s}` is the schema identifier. The word splitter is a SQL function so that the generated
# tsvector column and the query side split text the same way.
_SCHEMA_DDL = (
    "CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.projects (name text PRIMARY KEY, "
    "created_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE IF NOT EXISTS {s}.slots ("
    " project text NOT NULL REFERENCES {s}.projects (name) ON DELETE CASCADE,"
    " kind text NOT NULL, active text, shadow text, space jsonb, shadow_space jsonb,"
    " generation bigint NOT NULL DEFAULT 0, last_indexed timestamptz,"
    " PRIMARY KEY (project, kind))",
    "CREATE TABLE IF NOT EXISTS {s}.vector_tables (name text PRIMARY KEY, project text NOT NULL,"
    " kind text NOT NULL, space jsonb NOT NULL, width int NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now())",
    "CREATE SEQUENCE IF NOT EXISTS {s}.table_seq",
    "CREATE TABLE IF NOT EXISTS {s}.project_locks (project text PRIMARY KEY, holder text NOT NULL,"
    " host text NOT NULL, pid int NOT NULL, backend_pid int NOT NULL,"
    " since timestamptz NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.verdicts (verdict_id text PRIMARY KEY,"
    " seq bigint GENERATED ALWAYS AS IDENTITY, body jsonb NOT NULL,"
    " updated_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE IF NOT EXISTS {s}.golden (space text PRIMARY KEY, body jsonb NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.gate_watch (space text NOT NULL, provider_id text NOT NULL,"
    " body jsonb NOT NULL, PRIMARY KEY (space, provider_id))",
    "CREATE TABLE IF NOT EXISTS {s}.routing (id int PRIMARY KEY CHECK (id = 1),"
    " state jsonb NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())",
    # Code words: every run of letters/digits (so `a.b_c` gives a, b, c) plus camelCase parts
    # (`getUserName` also gives get, user, name).
    "CREATE OR REPLACE FUNCTION {s}.code_words(t text) RETURNS text LANGUAGE sql IMMUTABLE"
    " PARALLEL SAFE AS $$ SELECT regexp_replace(coalesce(t, ''), '[^[:alnum:]]+', ' ', 'g')"
    " || ' ' || regexp_replace(regexp_replace(coalesce(t, ''),"
    " '([[:lower:][:digit:]])([[:upper:]])', '\\1 \\2', 'g'), '[^[:alnum:]]+', ' ', 'g') $$",
    # A keyword query matches any of its words (like BM25 engines); rank favours rows with
    # more of them, symbol and path matches above body matches.
    "CREATE OR REPLACE FUNCTION {s}.or_query(q text) RETURNS tsquery LANGUAGE sql IMMUTABLE"
    " PARALLEL SAFE AS $$ SELECT to_tsquery('simple', string_agg(quote_literal(l), ' | '))"
    " FROM unnest(tsvector_to_array(to_tsvector('simple', {s}.code_words(q)))) AS l $$",
)


# --------------------------------------------------------------------------- the store


class PostgresStore(Store):
    """The `Store` contract on PostgreSQL + pgvector (see the module docstring)."""

    def __init__(self, url: str, clearance: Clearance | None = None, *, schema: str = "fathom",
                 clock: Callable[[], float] = time.time, ef_search: int = 100, refine: int = 4,
                 application_name: str = "fathom", hnsw_m: int = 16,
                 hnsw_ef_construction: int = 64, index_build_mem: str = "512MB",
                 ann_min_rows: int = 10_000, connect_timeout: float = 10.0):
        super().__init__(clearance, clock=clock)
        if not is_postgres_url(url) and "://" in url:
            raise ConfigError(f"not a PostgreSQL URL: {redact_url(url)} (use postgresql://…)")
        self.db = Database(url, schema=schema, application_name=application_name,
                           connect_timeout=connect_timeout)
        self.ef_search = int(ef_search)
        self.refine = max(1, int(refine))
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        self.index_build_mem = index_build_mem
        self.ann_min_rows = int(ann_min_rows)
        self.db.conn()  # fail now, with a clear error, rather than at the first search

    def __repr__(self) -> str:
        return f"PostgresStore({self.db.url}, schema={self.db.schema!r})"

    @property
    def url(self) -> str:
        """The store's URL, password redacted (for status output)."""
        return self.db.url

    # ---- SQL helpers

    def _q(self, template: str, **names: str) -> Any:
        """A SQL statement with `{s}` as the schema and `{t}`/... as identifiers in it."""
        from psycopg import sql

        ids = {k: sql.Identifier(self.db.schema, v) for k, v in names.items()}
        return sql.SQL(template).format(s=sql.Identifier(self.db.schema), **ids)

    def _pointer(self, conn: Any, project: str, table: str, *,
                 for_update: bool = False) -> dict[str, Any] | None:
        sql = ("SELECT active, shadow, space, shadow_space, generation, last_indexed "
               "FROM {s}.slots WHERE project = %s AND kind = %s")
        if for_update:
            sql += " FOR UPDATE"
        row = conn.execute(self._q(sql), (project, table)).fetchone()
        if row is None:
            return None
        keys = ("active", "shadow", "space", "shadow_space", "generation", "last_indexed")
        return dict(zip(keys, row, strict=True))

    def _project_exists(self, conn: Any, project: str) -> bool:
        return conn.execute(self._q("SELECT 1 FROM {s}.projects WHERE name = %s"),
                            (project,)).fetchone() is not None

    def _known(self, conn: Any) -> list[str]:
        return [r[0] for r in conn.execute(
            self._q("SELECT name FROM {s}.projects ORDER BY name")).fetchall()]

    def _locked_pointer(self, conn: Any, project: str, table: str) -> dict[str, Any]:
        """Inside a transaction: make sure the project and pointer rows exist, lock the
        pointer row and return it (serialises pointer changes across servers)."""
        conn.execute(self._q("INSERT INTO {s}.projects (name) VALUES (%s) "
                             "ON CONFLICT (name) DO NOTHING"), (project,))
        conn.execute(self._q("INSERT INTO {s}.slots (project, kind) VALUES (%s, %s) "
                             "ON CONFLICT (project, kind) DO NOTHING"), (project, table))
        ptr = self._pointer(conn, project, table, for_update=True)
        assert ptr is not None
        return ptr

    def _slot_name(self, conn: Any, project: str, table: str, slot: Slot) -> str | None:
        ptr = self._pointer(conn, project, table)
        return None if ptr is None else ptr[slot.value]

    def _create_table(self, conn: Any, project: str, table: str, space: Space, *,
                      indexed: bool) -> str:
        n = conn.execute(self._q("SELECT nextval('{s}.table_seq')")).fetchone()[0]
        name = f"v{n}"
        width = int(space.width)
        conn.execute(self._q(
            "CREATE TABLE {t} ("
            " chunk_id text PRIMARY KEY, content_hash text NOT NULL, path text NOT NULL,"
            " language text NOT NULL, start_line int NOT NULL, end_line int NOT NULL,"
            " symbol text, text text NOT NULL,"
            f" vector vector({width}) NOT NULL,"
            " provider_id text NOT NULL, verdict_id text, written_at timestamptz NOT NULL,"
            " kind text,"
            " tsv tsvector GENERATED ALWAYS AS ("
            "  setweight(to_tsvector('simple', {s}.code_words(symbol)), 'A') ||"
            "  setweight(to_tsvector('simple', {s}.code_words(path)), 'B') ||"
            "  to_tsvector('simple', {s}.code_words(text))) STORED)", t=name))
        conn.execute(self._q("CREATE INDEX ON {t} (path)", t=name))
        conn.execute(self._q("CREATE INDEX ON {t} (written_at)", t=name))
        conn.execute(self._q("CREATE INDEX ON {t} (content_hash)", t=name))  # content reuse
        conn.execute(self._q(
            "INSERT INTO {s}.vector_tables (name, project, kind, space, width) "
            "VALUES (%s, %s, %s, %s, %s)"),
            (name, project, table, json.dumps(space_to_json(space)), width))
        if indexed:
            self._build_indexes(conn, name, width)
        return name

    def _vector_index_kind(self, width: int) -> str | None:
        if width <= HNSW_MAX_VECTOR:
            return "vector"
        if width <= HNSW_MAX_HALFVEC:
            return "halfvec"
        return None

    def _build_indexes(self, conn: Any, name: str, width: int) -> None:
        """Keyword (GIN) and ANN (HNSW) indexes; idempotent. A shadow gets them just before
        promotion (one bulk build is much faster than maintaining them row by row)."""
        from psycopg import sql

        tbl = sql.Identifier(self.db.schema, name)
        conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (tsv)").format(
            sql.Identifier(f"{name}_tsv"), tbl))
        kind = self._vector_index_kind(width)
        if kind is None:
            log.warning("table %s is %d-d, wider than any pgvector index (%d): searched exactly",
                        name, width, HNSW_MAX_HALFVEC)
            return
        expr = ("(vector vector_cosine_ops)" if kind == "vector"
                else f"((vector::halfvec({width})) halfvec_cosine_ops)")
        conn.execute(sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw " + expr
            + " WITH (m = {}, ef_construction = {})").format(
            sql.Identifier(f"{name}_ann"), tbl, sql.Literal(self.hnsw_m),
            sql.Literal(self.hnsw_ef_construction)))

    def _drop_table(self, conn: Any, name: str) -> None:
        conn.execute(self._q("DROP TABLE IF EXISTS {t}", t=name))
        conn.execute(self._q("DELETE FROM {s}.vector_tables WHERE name = %s"), (name,))

    def _table_space(self, conn: Any, name: str) -> Space | None:
        row = conn.execute(self._q("SELECT space FROM {s}.vector_tables WHERE name = %s"),
                           (name,)).fetchone()
        return space_from_json(row[0]) if row else None

    @staticmethod
    def _check_space_kind(table: str, space: Space) -> None:
        if space.table != table:
            raise StoreError(f"a {space.table!r} space cannot back the {table!r} table")

    def _retrying(self, fn: Callable[[Any], Any]) -> Any:
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
        self._check_space_kind(table, space)
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._locked_pointer(conn, project, table)
            current = space_from_json(ptr["space"])
            if ptr["active"] is None:
                name = self._create_table(conn, project, table, space, indexed=True)
                conn.execute(self._q(
                    "UPDATE {s}.slots SET active = %s, space = %s, generation = generation + 1 "
                    "WHERE project = %s AND kind = %s"),
                    (name, json.dumps(space_to_json(space)), project, table))
            elif current != space:
                raise SpaceMismatch(project, table, current, space)  # type: ignore[arg-type]
            else:
                stored = self._table_space(conn, ptr["active"])
                if stored != space:
                    raise SpaceMismatch(project, table, stored or space, space)
                # A table from before symbol kinds gains the column (empty until re-indexed).
                conn.execute(self._q("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS kind text",
                                     t=ptr["active"]))
        return self.table_info(project, table)

    def space_of(self, project: str, table: str, slot: Slot = Slot.ACTIVE) -> Space | None:
        check_table_kind(table)
        ptr = self._pointer(self.db.conn(), project, table)
        if ptr is None or ptr[slot.value] is None:
            return None
        return space_from_json(ptr["space" if slot is Slot.ACTIVE else "shadow_space"])

    def begin_shadow(self, project: str, table: str, space: Space) -> ShadowInfo:
        check_project_name(project)
        check_table_kind(table)
        self._check_space_kind(table, space)
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._locked_pointer(conn, project, table)
            name = ptr["shadow"]
            if name is not None and space_from_json(ptr["shadow_space"]) == space:
                rows = conn.execute(self._q("SELECT count(*) FROM {t}", t=name)).fetchone()[0]
                return ShadowInfo(project, table, space, int(rows), resumed=True)
            if name is not None:
                self._drop_table(conn, name)  # a shadow of another space is useless now
            name = self._create_table(conn, project, table, space, indexed=False)
            conn.execute(self._q(
                "UPDATE {s}.slots SET shadow = %s, shadow_space = %s "
                "WHERE project = %s AND kind = %s"),
                (name, json.dumps(space_to_json(space)), project, table))
        return ShadowInfo(project, table, space, 0, resumed=False)

    def promote(self, project: str, table: str, *,
                last_indexed: datetime | None = None) -> TableInfo:
        """Switch searches to the shadow in one transaction; the old table is dropped in the
        same transaction. `last_indexed` (default: now) lets a migration keep the source's."""
        return self._promote(project, [table], last_indexed)[0]

    def promote_together(self, project: str, tables: Sequence[str]) -> list[TableInfo]:
        return self._promote(project, list(tables), None)

    def _promote(self, project: str, tables: list[str],
                 last_indexed: datetime | None) -> list[TableInfo]:
        conn = self.db.conn()
        names: dict[str, str] = {}
        for table in tables:
            check_table_kind(table)
            ptr = self._pointer(conn, project, table)
            if ptr is None:
                if not self._project_exists(conn, project):
                    raise UnknownProject(project, self._known(conn))
                raise NoShadow(project, table)
            name = ptr["shadow"]
            if name is None:
                raise NoShadow(project, table)
            space = space_from_json(ptr["shadow_space"])
            # Indexes first, outside the switch, so the first search after promotion is as
            # fast as the last one before it, and the pointer rows are locked for an instant.
            with conn.transaction():
                conn.execute("SELECT set_config('maintenance_work_mem', %s, true)",
                             (self.index_build_mem,))
                self._build_indexes(conn, name, space.width)  # type: ignore[union-attr]
            conn.execute(self._q("ANALYZE {t}", t=name))
            names[table] = name
        stamp = _utc(last_indexed) or datetime.fromtimestamp(self.clock(), tz=UTC)
        # One transaction switches every table: searches see all old tables or all new ones.
        with conn.transaction():
            for table, name in names.items():
                ptr = self._pointer(conn, project, table, for_update=True)
                if ptr is None or ptr["shadow"] != name:
                    raise NoShadow(project, table)
                old = ptr["active"]
                conn.execute(self._q(
                    "UPDATE {s}.slots SET active = shadow, space = shadow_space, shadow = NULL, "
                    "shadow_space = NULL, generation = generation + 1, last_indexed = %s "
                    "WHERE project = %s AND kind = %s"), (stamp, project, table))
                if old is not None:
                    self._drop_table(conn, old)
        return [self.table_info(project, table) for table in names]

    def abandon_shadow(self, project: str, table: str) -> None:
        check_table_kind(table)
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._pointer(conn, project, table, for_update=True)
            if ptr is None or ptr["shadow"] is None:
                return
            self._drop_table(conn, ptr["shadow"])
            conn.execute(self._q("UPDATE {s}.slots SET shadow = NULL, shadow_space = NULL "
                                 "WHERE project = %s AND kind = %s"), (project, table))

    def refresh(self, project: str, table: str) -> None:
        """Make sure the active table's indexes exist and its statistics are fresh. HNSW and
        GIN are maintained row by row by PostgreSQL, so nothing needs rebuilding."""
        check_table_kind(table)
        conn = self.db.conn()
        ptr = self._pointer(conn, project, table)
        if ptr is None:
            if not self._project_exists(conn, project):
                raise UnknownProject(project, self._known(conn))
            return
        if ptr["active"] is None:
            return
        space = space_from_json(ptr["space"])
        with conn.transaction():
            conn.execute("SELECT set_config('maintenance_work_mem', %s, true)",
                         (self.index_build_mem,))
            self._build_indexes(conn, ptr["active"], space.width)  # type: ignore[union-attr]
        conn.execute(self._q("ANALYZE {t}", t=ptr["active"]))
        conn.execute(self._q("UPDATE {s}.slots SET generation = generation + 1 "
                             "WHERE project = %s AND kind = %s"), (project, table))

    # ---- writes

    def _copy_in(self, conn: Any, name: str, batch: RowBatch) -> None:
        """Stage `batch` with binary COPY, then upsert it by chunk id in the same transaction."""
        from psycopg import sql

        # The stage's vector column has no width: the INSERT below casts into the target's
        # vector(N), so pgvector itself refuses a row of another width.
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS fathom_stage (chunk_id text, "
                     "content_hash text, path text, language text, start_line int, "
                     "end_line int, symbol text, text text, vector vector, provider_id text, "
                     "verdict_id text, written_at timestamptz, kind text) ON COMMIT DELETE ROWS")
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in _ROW_COLUMNS)
        with conn.cursor() as cur, cur.copy(
                sql.SQL("COPY pg_temp.fathom_stage ({}) FROM STDIN WITH (FORMAT BINARY)")
                .format(cols)) as copy:
            copy.set_types(list(_ROW_TYPES))
            for i in range(len(batch)):
                copy.write_row((
                    batch.chunk_ids[i], batch.content_hashes[i], _pg_text(batch.paths[i]),
                    batch.languages[i], int(batch.start_lines[i]), int(batch.end_lines[i]),
                    _pg_text(batch.symbols[i]), _pg_text(batch.texts[i]), batch.vectors[i],
                    batch.provider_ids[i], batch.verdict_ids[i], batch.written_at[i],
                    batch.kind(i),
                ))
        updates = sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in _ROW_COLUMNS[1:])
        conn.execute(sql.SQL(
            "INSERT INTO {t} ({cols}) SELECT {cols} FROM pg_temp.fathom_stage "
            "ON CONFLICT (chunk_id) DO UPDATE SET {updates}").format(
            t=sql.Identifier(self.db.schema, name), cols=cols, updates=updates))

    def _write_batch(self, project: str, table: str, slot: Slot, batch: RowBatch,
                     stamp: datetime) -> None:
        conn = self.db.conn()
        with conn.transaction():
            ptr = self._pointer(conn, project, table)
            name = None if ptr is None else ptr[slot.value]
            if name is None:
                raise NoShadow(project, table) if slot is Slot.SHADOW else StoreError(
                    f"project {project!r} has no active {table!r} table")
            self._copy_in(conn, name, batch)
            if slot is Slot.ACTIVE:
                conn.execute(self._q(
                    "UPDATE {s}.slots SET generation = generation + 1, last_indexed = %s "
                    "WHERE project = %s AND kind = %s"), (stamp, project, table))

    def _upsert(self, project: str, table: str, slot: Slot, rows: list[Chunk],
                matrix: np.ndarray, provenance: Provenance, written_at: datetime) -> None:
        n = len(rows)
        self._upsert_rows(project, table, slot, rows, matrix, [provenance] * n, [written_at] * n)

    def _upsert_rows(self, project: str, table: str, slot: Slot, rows: list[Chunk],
                     matrix: np.ndarray, provenances: list[Provenance],
                     written_at: list[datetime]) -> None:
        batch = RowBatch(
            chunk_ids=[c.chunk_id for c in rows], content_hashes=[c.content_hash for c in rows],
            paths=[c.path for c in rows], languages=[c.language for c in rows],
            start_lines=[c.start_line for c in rows], end_lines=[c.end_line for c in rows],
            symbols=[c.symbol for c in rows], texts=[c.text for c in rows], vectors=matrix,
            provider_ids=[p.provider_id for p in provenances],
            verdict_ids=[p.verdict_id for p in provenances], written_at=list(written_at),
            kinds=[c.kind for c in rows])
        self._write_batch(project, table, slot, batch, max(written_at))

    def _stored_vectors(self, project: str, table: str, slot: Slot,
                        content_hashes: Sequence[str]) -> dict[str, StoredVector]:
        hashes = list(content_hashes)

        def read(conn: Any) -> dict[str, StoredVector]:
            name = self._slot_name(conn, project, table, slot)
            if name is None or not hashes:
                return {}
            rows = conn.execute(self._q(
                "SELECT DISTINCT ON (content_hash) content_hash, vector, provider_id, "
                "verdict_id, written_at FROM {t} WHERE content_hash = ANY(%s) "
                "ORDER BY content_hash, written_at", t=name), (hashes,)).fetchall()
            return {h: StoredVector(_as_array(v), Provenance(p, vid), _utc(at))  # type: ignore[arg-type]
                    for h, v, p, vid, at in rows}

        return self._retrying(read)

    def _copy_rows(self, project: str, table: str, batch: RowBatch, *,
                   slot: Slot = Slot.SHADOW) -> int:
        """Copy already-stored rows (from another store) with their own provenance and
        written_at: private to `fathom.index.migrate` (`fathom store migrate`), its only caller.

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
        batch.written_at = [_utc(w) or datetime.fromtimestamp(self.clock(), tz=UTC)
                            for w in batch.written_at]
        self._write_batch(project, table, slot, batch, max(batch.written_at))
        return len(batch)

    def _replace_vectors(self, project: str, table: str, slot: Slot, chunk_ids: list[str],
                         matrix: np.ndarray, provenance: Provenance,
                         written_at: datetime) -> int:
        from psycopg import sql

        conn = self.db.conn()
        with conn.transaction():
            name = self._slot_name(conn, project, table, slot)
            tbl = sql.Identifier(self.db.schema, name)  # type: ignore[arg-type]
            found = {r[0] for r in conn.execute(sql.SQL(
                "SELECT chunk_id FROM {} WHERE chunk_id = ANY(%s) FOR UPDATE").format(tbl),
                (chunk_ids,)).fetchall()}
            missing = [c for c in chunk_ids if c not in found]
            if missing:
                err = StoreError(
                    f"project {project!r} table {table!r}: {len(missing)} chunk ids to re-embed "
                    f"are not in the table (e.g. {missing[:3]}); nothing was replaced")
                err.missing = missing  # type: ignore[attr-defined]
                raise err
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS fathom_revector "
                         "(chunk_id text, vector vector) ON COMMIT DELETE ROWS")
            with conn.cursor() as cur, cur.copy(
                    "COPY pg_temp.fathom_revector (chunk_id, vector) FROM STDIN "
                    "WITH (FORMAT BINARY)") as copy:
                copy.set_types(["text", "vector"])
                for cid, vec in zip(chunk_ids, matrix, strict=True):
                    copy.write_row((cid, vec))
            cur = conn.execute(sql.SQL(
                "UPDATE {} AS t SET vector = r.vector, provider_id = %s, verdict_id = %s, "
                "written_at = %s FROM pg_temp.fathom_revector AS r "
                "WHERE t.chunk_id = r.chunk_id").format(tbl),
                (provenance.provider_id, provenance.verdict_id, written_at))
            n = cur.rowcount
            if slot is Slot.ACTIVE:
                conn.execute(self._q("UPDATE {s}.slots SET generation = generation + 1 "
                                     "WHERE project = %s AND kind = %s"), (project, table))
        return n

    def delete(self, project: str, table: str, *, chunk_ids: Iterable[str] = (),
               paths: Iterable[str] = (), slot: Slot = Slot.ACTIVE) -> int:
        check_table_kind(table)
        ids, ps = list(chunk_ids), list(paths)
        conn = self.db.conn()
        with conn.transaction():
            name = self._slot_name(conn, project, table, slot)
            if name is None or not (ids or ps):
                return 0
            cur = conn.execute(self._q(
                "DELETE FROM {t} WHERE chunk_id = ANY(%s) OR path = ANY(%s)", t=name), (ids, ps))
            removed = cur.rowcount
            if removed and slot is Slot.ACTIVE:
                conn.execute(self._q(
                    "UPDATE {s}.slots SET generation = generation + 1, last_indexed = %s "
                    "WHERE project = %s AND kind = %s"),
                    (datetime.fromtimestamp(self.clock(), tz=UTC), project, table))
        return removed

    def manifest(self, project: str, table: str,
                 slot: Slot = Slot.ACTIVE) -> list[ManifestEntry]:
        check_table_kind(table)

        def read(conn: Any) -> list[ManifestEntry]:
            name = self._slot_name(conn, project, table, slot)
            if name is None:
                return []
            rows = conn.execute(self._q(
                "SELECT chunk_id, content_hash, path FROM {t} ORDER BY path, start_line, chunk_id",
                t=name)).fetchall()
            return [ManifestEntry(*r) for r in rows]

        return self._retrying(read)

    # ---- search

    def _active_or_raise(self, conn: Any, project: str, table: str) -> dict[str, Any] | None:
        ptr = self._pointer(conn, project, table)
        if ptr is None and not self._project_exists(conn, project):
            raise UnknownProject(project, self._known(conn))
        return ptr

    @staticmethod
    def _hit(row: Sequence[Any], table: str, kind: str) -> Hit:
        chunk_id, path, start, end, symbol, language, text, provider_id, symbol_kind, score = \
            row[:10]
        score = float(score)
        return Hit(chunk_id=chunk_id, path=path, start_line=int(start), end_line=int(end),
                   symbol=symbol, language=language, score=score,
                   snippet=snippet_of(text or ""), provider_id=provider_id, table=table,
                   vector_score=score if kind == "vector" else None,
                   text_score=score if kind == "text" else None, kind=symbol_kind)

    @staticmethod
    def _filter_sql(where: SearchFilter | None, alias: str = "") -> tuple[str, dict[str, Any]]:
        """` AND …` conditions for a search filter, with their named parameters."""
        if where is None:
            return "", {}
        col = f"{alias}." if alias else ""
        values = {"language": where.language, "kind": where.kind, "path": where.path_regex}
        ops = {"language": "=", "kind": "=", "path": "~"}
        params = {f"f_{k}": v for k, v in values.items() if v is not None}
        sql = "".join(f" AND {col}{k} {ops[k]} %(f_{k})s" for k, v in values.items()
                      if v is not None)
        return sql, params

    def _query_vector(self, space: Space | None, table: str, vector: Any) -> np.ndarray:
        from fathom.errors import WidthMismatch

        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if space is not None and q.shape[0] != space.width:
            raise WidthMismatch(table, space.width, int(q.shape[0]))
        if not np.isfinite(q).all() or not np.linalg.norm(q):
            raise StoreError("the query vector is zero or not finite; check the encoder")
        return q / np.linalg.norm(q)

    def _vector_sql(self, name: str, width: int, where: SearchFilter | None = None) -> Any:
        cols = ", ".join(_HIT_COLUMNS)
        # Filter conditions sit inside the index scan's WHERE: pgvector's iterative scan (see
        # `_tune_ann`) keeps reading the index until k rows pass, so the top k stay the top k.
        cond = self._filter_sql(where)[0]
        cond = f" WHERE TRUE{cond}" if cond else ""
        if self._vector_index_kind(width) == "halfvec":
            # Candidates by the half-precision index, then exact full-precision cosine: the
            # order returned is the exact cosine order of the candidates.
            return self._q(
                f"SELECT {cols}, 1 - (c.vector <=> %(q)s) AS score FROM ("
                f" SELECT {cols}, vector FROM {{t}}{cond}"
                f" ORDER BY (vector::halfvec({width})) <=> (%(q)s::halfvec({width}))"
                f" LIMIT %(cand)s) AS c ORDER BY c.vector <=> %(q)s LIMIT %(k)s", t=name)
        return self._q(f"SELECT {cols}, 1 - (vector <=> %(q)s) AS score FROM {{t}}{cond} "
                       f"ORDER BY vector <=> %(q)s LIMIT %(k)s", t=name)

    def _vector_params(self, q: np.ndarray, k: int,
                       where: SearchFilter | None = None) -> tuple[dict[str, Any], int]:
        cand = k * self.refine
        params = {"q": q, "k": k, "cand": cand}
        params |= self._filter_sql(where)[1]
        return params, max(self.ef_search, cand)

    def _tune_ann(self, conn: Any, name: str, ef: int) -> None:
        """Transaction-local planner settings for one vector query.

        HNSW returns at most `hnsw.ef_search` rows, so it must cover the re-score candidates.
        And the planner under-prices a sequential scan of wide vectors (they live out of line,
        in TOAST, which its cost model barely counts): on a big table it would pick an exact
        scan that detoasts every row. From `ann_min_rows` rows on, the ANN index answers;
        below that an exact scan is both fast and exact."""
        conn.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_seqscan', "
            "CASE WHEN (SELECT reltuples FROM pg_class WHERE oid = %s::regclass) >= %s "
            "THEN 'off' ELSE 'on' END, true), "
            # A filtered query must not return the filtered remains of ef_search candidates:
            # the iterative scan reads on until enough rows pass (pgvector 0.8+).
            "set_config('hnsw.iterative_scan', 'strict_order', true)",
            (str(ef), f'"{self.db.schema}"."{name}"', self.ann_min_rows))

    def vector_search(self, project: str, table: str, vector: Any, k: int = 10, *,
                      where: SearchFilter | None = None) -> list[Hit]:
        check_table_kind(table)

        def read(conn: Any) -> list[Hit]:
            ptr = self._active_or_raise(conn, project, table)
            space = space_from_json(ptr["space"]) if ptr else None
            q = self._query_vector(space, table, vector)
            if ptr is None or ptr["active"] is None or k <= 0:
                return []
            params, ef = self._vector_params(q, k, where)
            with conn.transaction():
                self._tune_ann(conn, ptr["active"], ef)
                rows = conn.execute(self._vector_sql(ptr["active"], space.width, where),  # type: ignore[union-attr]
                                    params).fetchall()
            return [self._hit(r, table, "vector") for r in rows]

        return self._retrying(read)

    def explain_vector_search(self, project: str, table: str, vector: Any, k: int = 10) -> str:
        """The query plan of `vector_search` for this query (which index answers it)."""
        conn = self.db.conn()
        ptr = self._active_or_raise(conn, project, table)
        if ptr is None or ptr["active"] is None:
            return ""
        space = space_from_json(ptr["space"])
        params, ef = self._vector_params(self._query_vector(space, table, vector), k)
        from psycopg import sql

        with conn.transaction():
            self._tune_ann(conn, ptr["active"], ef)
            rows = conn.execute(sql.SQL("EXPLAIN ") + self._vector_sql(ptr["active"],
                                                                       space.width),  # type: ignore[union-attr]
                                params).fetchall()
        return "\n".join(r[0] for r in rows)

    def text_search(self, project: str, table: str, query: str, k: int = 10, *,
                    where: SearchFilter | None = None) -> list[Hit]:
        check_table_kind(table)
        if not query or not query.strip() or k <= 0:
            return []
        cols = ", ".join(f"t.{c}" for c in _HIT_COLUMNS)
        cond, cond_params = self._filter_sql(where, "t")

        def read(conn: Any) -> list[Hit]:
            ptr = self._active_or_raise(conn, project, table)
            if ptr is None or ptr["active"] is None:
                return []
            rows = conn.execute(self._q(
                f"SELECT {cols}, ts_rank(t.tsv, q.q) AS score FROM {{t}} AS t, "
                f"(SELECT {{s}}.or_query(%(query)s) AS q) AS q WHERE t.tsv @@ q.q{cond} "
                f"ORDER BY score DESC, t.chunk_id LIMIT %(k)s", t=ptr["active"]),
                {"query": _pg_text(query), "k": k} | cond_params).fetchall()
            return [self._hit(r, table, "text") for r in rows]

        return self._retrying(read)

    def chunk_at(self, project: str, table: str, path: str,
                 line: int) -> tuple[Hit, np.ndarray] | None:
        check_table_kind(table)
        cols = ", ".join(_HIT_COLUMNS)

        def read(conn: Any) -> tuple[Hit, np.ndarray] | None:
            ptr = self._active_or_raise(conn, project, table)
            if ptr is None or ptr["active"] is None:
                return None
            row = conn.execute(self._q(
                f"SELECT {cols}, 1.0, vector FROM {{t}} WHERE path = %s AND start_line <= %s "
                f"AND end_line >= %s ORDER BY end_line - start_line, start_line LIMIT 1",
                t=ptr["active"]), (path, int(line), int(line))).fetchone()
            if row is None:
                return None
            # The innermost chunk (a method rather than its class) is the one meant.
            return self._hit(row, table, "vector"), _as_array(row[10])

        return self._retrying(read)

    # ---- projects and audit

    def _count(self, conn: Any, name: str | None) -> int:
        if name is None:
            return 0
        return int(conn.execute(self._q("SELECT count(*) FROM {t}", t=name)).fetchone()[0])

    def table_info(self, project: str, table: str) -> TableInfo:
        check_table_kind(table)

        def read(conn: Any) -> TableInfo:
            ptr = self._active_or_raise(conn, project, table) or {}
            return TableInfo(
                project=project, table=table, space=space_from_json(ptr.get("space")),
                rows=self._count(conn, ptr.get("active")),
                last_indexed=_utc(ptr.get("last_indexed")),
                shadow_rows=(self._count(conn, ptr["shadow"]) if ptr.get("shadow") else None),
                shadow_space=space_from_json(ptr.get("shadow_space")),
            )

        return self._retrying(read)

    def list_projects(self) -> list[ProjectInfo]:
        conn = self.db.conn()
        rows = conn.execute(self._q(
            "SELECT p.name, s.kind FROM {s}.projects AS p LEFT JOIN {s}.slots AS s "
            "ON s.project = p.name AND (s.active IS NOT NULL OR s.shadow IS NOT NULL) "
            "ORDER BY p.name, s.kind")).fetchall()
        out: dict[str, ProjectInfo] = {}
        for name, kind in rows:
            info = out.setdefault(name, ProjectInfo(name))
            if kind is not None:
                with contextlib.suppress(UnknownProject):  # dropped meanwhile
                    info.tables[kind] = self.table_info(name, kind)
        return list(out.values())

    def has_project(self, project: str) -> bool:
        return self._project_exists(self.db.conn(), project)

    def drop_project(self, project: str) -> None:
        conn = self.db.conn()
        with conn.transaction():
            if conn.execute(self._q("SELECT 1 FROM {s}.projects WHERE name = %s FOR UPDATE"),
                            (project,)).fetchone() is None:
                raise UnknownProject(project, self._known(conn))
            names = [r[0] for r in conn.execute(self._q(
                "SELECT name FROM {s}.vector_tables WHERE project = %s"), (project,)).fetchall()]
            for name in names:
                self._drop_table(conn, name)
            conn.execute(self._q("DELETE FROM {s}.projects WHERE name = %s"), (project,))

    def provenance_counts(self, project: str, table: str,
                          slot: Slot = Slot.ACTIVE) -> dict[tuple[str, str | None], int]:
        check_table_kind(table)

        def read(conn: Any) -> dict[tuple[str, str | None], int]:
            name = self._slot_name(conn, project, table, slot)
            if name is None:
                return {}
            rows = conn.execute(self._q(
                "SELECT provider_id, verdict_id, count(*) FROM {t} "
                "GROUP BY provider_id, verdict_id", t=name)).fetchall()
            return {(p, v): int(n) for p, v, n in rows}

        return self._retrying(read)

    def written_since(self, project: str, table: str, since: datetime,
                      provider_id: str | None = None) -> list[ManifestEntry]:
        check_table_kind(table)
        since = _utc(since)  # type: ignore[assignment]

        def read(conn: Any) -> list[ManifestEntry]:
            name = self._slot_name(conn, project, table, Slot.ACTIVE)
            if name is None:
                return []
            rows = conn.execute(self._q(
                "SELECT chunk_id, content_hash, path FROM {t} WHERE written_at >= %s "
                "AND (%s::text IS NULL OR provider_id = %s) ORDER BY path, start_line",
                t=name), (since, provider_id, provider_id)).fetchall()
            return [ManifestEntry(*r) for r in rows]

        return self._retrying(read)

    def chunk_texts(self, project: str, table: str, chunk_ids: Sequence[str],
                    slot: Slot = Slot.ACTIVE) -> dict[str, str]:
        check_table_kind(table)
        ids = list(chunk_ids)

        def read(conn: Any) -> dict[str, str]:
            name = self._slot_name(conn, project, table, slot)
            if name is None or not ids:
                return {}
            rows = conn.execute(self._q(
                "SELECT chunk_id, text FROM {t} WHERE chunk_id = ANY(%s)", t=name),
                (ids,)).fetchall()
            return dict(rows)

        return self._retrying(read)

    def export_rows(self, project: str, table: str, slot: Slot = Slot.ACTIVE,
                    batch_size: int = 1000) -> Iterator[RowBatch]:
        """Every row of a slot with its vector and provenance, in batches (chunk id order)."""
        check_table_kind(table)
        conn = self.db.conn()
        name = self._slot_name(conn, project, table, slot)
        if name is None:
            return
        after = ""
        cols = ", ".join(_ROW_COLUMNS)
        while True:
            rows = conn.execute(self._q(
                f"SELECT {cols} FROM {{t}} WHERE chunk_id > %s ORDER BY chunk_id LIMIT %s",
                t=name), (after, batch_size)).fetchall()
            if not rows:
                return
            cols_ = list(zip(*rows, strict=True))
            yield RowBatch(
                chunk_ids=list(cols_[0]), content_hashes=list(cols_[1]), paths=list(cols_[2]),
                languages=list(cols_[3]), start_lines=list(cols_[4]), end_lines=list(cols_[5]),
                symbols=list(cols_[6]), texts=list(cols_[7]),
                vectors=np.vstack([_as_array(v) for v in cols_[8]]),
                provider_ids=list(cols_[9]), verdict_ids=list(cols_[10]),
                written_at=[_utc(w) for w in cols_[11]], kinds=list(cols_[12]))  # type: ignore[misc]
            after = rows[-1][0]

    # ---- one indexer per project across servers

    def lock_holder(self, project: str) -> LockHolder | None:
        """Who holds the index lock of `project` now, or None. The recorded row is trusted
        only while its backend really holds the advisory lock (a crashed holder's row is
        stale: PostgreSQL released its lock with its connection)."""
        conn = self.db.conn()
        row = conn.execute(self._q(
            "SELECT l.holder, l.host, l.pid, l.since FROM {s}.project_locks AS l "
            "WHERE l.project = %s AND EXISTS (SELECT 1 FROM pg_locks AS k "
            " WHERE k.locktype = 'advisory' AND k.granted AND k.pid = l.backend_pid"
            " AND k.classid = %s::int4::oid AND k.objid = hashtext(%s)::oid AND k.objsubid = 2)"),
            (project, LOCK_NAMESPACE, project)).fetchone()
        if row is not None:
            return LockHolder(project, row[0], row[1], int(row[2]), _utc(row[3]))  # type: ignore[arg-type]
        # Not recorded (yet): the holding session's application_name still names the server.
        row = conn.execute(
            "SELECT a.application_name, host(a.client_addr), a.pid, a.backend_start "
            "FROM pg_locks AS k JOIN pg_stat_activity AS a ON a.pid = k.pid "
            "WHERE k.locktype = 'advisory' AND k.granted AND k.classid = %s::int4::oid "
            "AND k.objid = hashtext(%s)::oid AND k.objsubid = 2",
            (LOCK_NAMESPACE, project)).fetchone()
        if row is None:
            return None
        name = (row[0] or "").removeprefix("fathom-lock:")
        return LockHolder(project, name or "unknown", row[1] or "local", int(row[2]),
                          _utc(row[3]))  # type: ignore[arg-type]

    @contextlib.contextmanager
    def project_lock(self, project: str, holder: str | None = None) -> Iterator[LockHolder]:
        """Hold the index lock of `project` for the duration of the block.

        A session advisory lock on a dedicated connection: PostgreSQL keeps it while that
        connection lives, and drops it if the holder dies. A second server (or a second job in
        this one) gets `ProjectLocked` naming the holder, immediately."""
        check_project_name(project)
        host = socket.gethostname()
        holder = holder or f"{host}:{os.getpid()}"
        conn = self.db.connect(application_name=f"fathom-lock:{holder}")
        try:
            got = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))",
                               (LOCK_NAMESPACE, project)).fetchone()[0]
            if not got:
                raise ProjectLocked(project, self.lock_holder(project))
            since = datetime.fromtimestamp(self.clock(), tz=UTC)
            conn.execute(self._q(
                "INSERT INTO {s}.project_locks (project, holder, host, pid, backend_pid, since) "
                "VALUES (%s, %s, %s, %s, pg_backend_pid(), %s) ON CONFLICT (project) DO UPDATE "
                "SET holder = EXCLUDED.holder, host = EXCLUDED.host, pid = EXCLUDED.pid, "
                "backend_pid = EXCLUDED.backend_pid, since = EXCLUDED.since"),
                (project, holder, host, os.getpid(), since))
            info = LockHolder(project, holder, host, os.getpid(), since)
            log.info("index lock of project %r taken by %s", project, holder)
            try:
                yield info
            finally:
                with contextlib.suppress(Exception):
                    conn.execute(self._q("DELETE FROM {s}.project_locks WHERE project = %s "
                                         "AND backend_pid = pg_backend_pid()"), (project,))
                    conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))",
                                 (LOCK_NAMESPACE, project))
        finally:
            conn.close()

    def close(self) -> None:
        self.db.close()


def _as_array(value: Any) -> np.ndarray:
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


# --------------------------------------------------------------------------- gate + routing


def _database(source: PostgresStore | Database | str) -> Database:
    if isinstance(source, PostgresStore):
        return source.db
    if isinstance(source, Database):
        return source
    return Database(source)


class PgVerdictStore:
    """The gate's `VerdictStore` in the shared database: every server reads the same verdicts.

    `put` replaces a verdict with the same id in place (its decision order is kept), like
    `JsonVerdictStore`; reads go to the database each time, so a verdict revoked by one server
    is revoked for all of them at once."""

    def __init__(self, source: PostgresStore | Database | str):
        self.db = _database(source)

    def __repr__(self) -> str:
        return f"PgVerdictStore({self.db.url})"

    def _q(self, template: str) -> Any:
        from psycopg import sql

        return sql.SQL(template).format(s=sql.Identifier(self.db.schema))

    def put(self, verdict: Any) -> None:
        self.db.conn().execute(self._q(
            "INSERT INTO {s}.verdicts (verdict_id, body) VALUES (%s, %s) "
            "ON CONFLICT (verdict_id) DO UPDATE SET body = EXCLUDED.body, updated_at = now()"),
            (verdict.verdict_id, json.dumps(verdict.to_json())))

    def get(self, verdict_id: str) -> Any:
        from fathom.inference.gate.verdict import Verdict

        row = self.db.conn().execute(self._q(
            "SELECT body FROM {s}.verdicts WHERE verdict_id = %s"), (verdict_id,)).fetchone()
        return Verdict.from_json(row[0]) if row else None

    def all(self) -> list[Any]:
        from fathom.inference.gate.verdict import Verdict

        rows = self.db.conn().execute(self._q(
            "SELECT body FROM {s}.verdicts ORDER BY seq")).fetchall()
        return [Verdict.from_json(r[0]) for r in rows]

    def watch(self, watched: Any) -> None:
        self.db.conn().execute(self._q(
            "INSERT INTO {s}.gate_watch (space, provider_id, body) VALUES (%s, %s, %s) "
            "ON CONFLICT (space, provider_id) DO UPDATE SET body = EXCLUDED.body"),
            (watched.space.key, watched.provider_id, json.dumps(watched.to_json())))

    def unwatch(self, space_key: str, provider_id: str) -> None:
        self.db.conn().execute(self._q(
            "DELETE FROM {s}.gate_watch WHERE space = %s AND provider_id = %s"),
            (space_key, provider_id))

    def watched(self) -> list[Any]:
        from fathom.inference.gate.verdict import Watched

        rows = self.db.conn().execute(self._q(
            "SELECT body FROM {s}.gate_watch ORDER BY space, provider_id")).fetchall()
        return [Watched.from_json(r[0]) for r in rows]


class PgGoldenStore:
    """The gate's golden vectors in the shared database (same interface as `GoldenStore`)."""

    def __init__(self, source: PostgresStore | Database | str):
        self.db = _database(source)

    def __repr__(self) -> str:
        return f"PgGoldenStore({self.db.url})"

    def get(self, space_key: str, probe_set: str | None = None) -> Any:
        from psycopg import sql

        from fathom.inference.gate.golden import Golden

        row = self.db.conn().execute(sql.SQL("SELECT body FROM {}.golden WHERE space = %s")
                                     .format(sql.Identifier(self.db.schema)),
                                     (space_key,)).fetchone()
        if row is None:
            return None
        d = row[0]
        n, w = d["shape"]
        vec = np.frombuffer(base64.b64decode(d["vectors"]), dtype="<f4").reshape(n, w).copy()
        golden = Golden(space=d["space"], probe_set=d["probe_set"],
                        probe_ids=tuple(d["probe_ids"]), reference=d["reference"],
                        recorded_at=d["recorded_at"], vectors=vec)
        if probe_set is not None and golden.probe_set != probe_set:
            return None
        return golden

    def put(self, golden: Any) -> None:
        from psycopg import sql

        vec = np.ascontiguousarray(golden.vectors, dtype="<f4")
        body = {"space": golden.space, "probe_set": golden.probe_set,
                "probe_ids": list(golden.probe_ids), "reference": golden.reference,
                "recorded_at": golden.recorded_at, "shape": list(vec.shape),
                "vectors": base64.b64encode(vec.tobytes()).decode("ascii")}
        self.db.conn().execute(sql.SQL(
            "INSERT INTO {}.golden (space, body) VALUES (%s, %s) "
            "ON CONFLICT (space) DO UPDATE SET body = EXCLUDED.body").format(
            sql.Identifier(self.db.schema)), (golden.space, json.dumps(body)))


class PgRoutingStore(RoutingStore):
    """`RoutingStore` in the shared database: load / save / update, same validation.

    `update` runs in one transaction with the routing row locked, so two servers changing
    routes at once never lose each other's change. Only safe fields exist in `RoutingState`
    (no key field, unknown fields refused), so nothing secret can reach the table."""

    def __init__(self, source: PostgresStore | Database | str):  # noqa: D107 - no data_dir
        self.db = _database(source)
        self.path = None  # type: ignore[assignment]  # not a file

    def __repr__(self) -> str:
        return f"PgRoutingStore({self.db.url})"

    def _q(self, template: str) -> Any:
        from psycopg import sql

        return sql.SQL(template).format(s=sql.Identifier(self.db.schema))

    def load(self) -> RoutingState:
        row = self.db.conn().execute(self._q("SELECT state FROM {s}.routing WHERE id = 1")
                                     ).fetchone()
        if row is None:
            return RoutingState()
        try:
            state = RoutingState.model_validate(row[0])
        except ValueError as exc:
            raise RoutingStateDamaged(
                f"the routing row in {self.db.url}", state_defect(exc),
                "correct it, or delete the row to start again from the default routes") from None
        for role, route in default_routes().items():
            state.roles.setdefault(role, route)
        return state

    def save(self, state: RoutingState) -> None:
        self.db.conn().execute(self._q(
            "INSERT INTO {s}.routing (id, state) VALUES (1, %s) ON CONFLICT (id) DO UPDATE "
            "SET state = EXCLUDED.state, updated_at = now()"), (state.model_dump_json(),))

    @contextlib.contextmanager
    def _changing_state(self) -> Iterator[None]:
        """One transaction holding the routing row (and this process's turn), so
        read-modify-writes from two servers (a policy change, a key push's record, a job's
        batch history) never lose each other's change."""
        conn = self.db.conn()
        with self._changing, conn.transaction():
            conn.execute(self._q("INSERT INTO {s}.routing (id, state) VALUES (1, %s) "
                                 "ON CONFLICT (id) DO NOTHING"),
                         (RoutingState().model_dump_json(),))
            conn.execute(self._q("SELECT 1 FROM {s}.routing WHERE id = 1 FOR UPDATE"))
            yield


__all__ = [
    "Database", "ExtensionMissing", "LockHolder", "PgGoldenStore", "PgRoutingStore",
    "PgVerdictStore", "PostgresStore", "ProjectLocked", "RowBatch",
    "StoreUnavailable", "is_postgres_url", "redact_url",
]
