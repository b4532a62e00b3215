"""The PostgreSQL store's old import path: everything lives in `fathom.index.store` now
(`postgres`, `pg_database`, `pg_state`); this module re-exports what callers import from it."""

from fathom.index.store.errors import LockHolder, ProjectLocked
from fathom.index.store.pg_database import (
    Database,
    ExtensionMissing,
    RowBatch,
    StoreUnavailable,
    is_postgres_url,
    redact_url,
)
from fathom.index.store.pg_state import PgGoldenStore, PgRoutingStore, PgVerdictStore
from fathom.index.store.postgres import PostgresStore

__all__ = [
    "Database",
    "ExtensionMissing",
    "LockHolder",
    "PgGoldenStore",
    "PgRoutingStore",
    "PgVerdictStore",
    "PostgresStore",
    "ProjectLocked",
    "RowBatch",
    "StoreUnavailable",
    "is_postgres_url",
    "redact_url",
]
