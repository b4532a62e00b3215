"""PostgreSQL connections for the store: the `Database` (one connection per thread, the
schema bootstrapped once), the URL redaction every message goes through, the row batch a
migration carries, and the schema itself.

What it refuses to do: let a password reach a log line, a repr, an error message or status
output (every URL shown is `redact_url`-ed, connection errors are scrubbed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from fathom.errors import ConfigError, StoreError

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"  # 2: the gate's watch list (gate_watch)
HNSW_MAX_VECTOR = 2000  # pgvector: widest `vector` an HNSW index accepts
HNSW_MAX_HALFVEC = 4000  # pgvector: widest `halfvec` an HNSW index accepts
LOCK_NAMESPACE = 0x46415448  # "FATH": the first key of every Fathom advisory lock
_BOOTSTRAP_LOCK = 0x46415449
HIT_COLUMNS = (
    "chunk_id",
    "path",
    "start_line",
    "end_line",
    "symbol",
    "language",
    "text",
    "provider_id",
    "kind",
)
ROW_COLUMNS = (
    "chunk_id",
    "content_hash",
    "path",
    "language",
    "start_line",
    "end_line",
    "symbol",
    "text",
    "vector",
    "provider_id",
    "verdict_id",
    "written_at",
    "kind",
)
ROW_TYPES = (
    "text",
    "text",
    "text",
    "text",
    "int4",
    "int4",
    "text",
    "text",
    "vector",
    "text",
    "text",
    "timestamptz",
    "text",
)


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
        pairs = [
            (k, "***" if k.lower() == "password" else v) for k, v in parse_qsl(query, keep_blank_values=True)
        ]
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


def pg_text(value: str | None) -> str | None:
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


def utc(value: datetime | None) -> datetime | None:
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

    def __init__(
        self,
        url: str,
        *,
        schema: str = "fathom",
        application_name: str = "fathom",
        connect_timeout: float = 10.0,
    ):
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise ConfigError(
                f"invalid PostgreSQL schema name {schema!r}: use lower-case letters, digits and underscores"
            )
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
            conn = psycopg.connect(
                self.__url,
                autocommit=True,
                connect_timeout=max(1, int(self.connect_timeout)),
                application_name=(application_name or self.application_name)[:63],
            )
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
        except Exception:  # the extension may not exist yet in a fresh database
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
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.meta",)).fetchone()
        if row[0]:
            version = conn.execute(
                sql.SQL("SELECT value FROM {}.meta WHERE key = 'version'").format(s)
            ).fetchone()
            if version and version[0] == SCHEMA_VERSION:
                self._ready = True
                return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_BOOTSTRAP_LOCK,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
            for stmt in SCHEMA_DDL:
                conn.execute(sql.SQL(stmt).format(s=s))
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.meta (key, value) VALUES ('version', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ).format(s),
                (SCHEMA_VERSION,),
            )
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
SCHEMA_DDL = (
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


def as_array(value: Any) -> np.ndarray:
    """A pgvector value as a float32 array."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)
