"""Which store backend a location names, opened: PostgreSQL + pgvector or LanceDB.

It lives apart from both backends so that neither imports the other: `fathom.index.pgstore`
builds on `fathom.index.store` (the `Store` contract and its shared parts), and this module,
above both, is the one place that chooses between them (psycopg is imported only when a
PostgreSQL URL is opened).

API:
    open_store(settings=None, clearance=None, **kwargs) -> Store
    open_store_url(url_or_path, clearance=None, **kwargs) -> Store
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fathom.index.store import LanceStore, Store
from fathom.space import Clearance


def open_store(settings: Any = None, clearance: Clearance | None = None, **kwargs: Any) -> Store:
    """The store named by settings: PostgreSQL + pgvector when `store_url` (FATHOM_STORE_URL)
    is a `postgresql://…` URL, a LanceDB folder when it is a path, else LanceDB under
    `settings.lance_dir`."""
    from fathom.config import Settings

    settings = settings or Settings()
    url = getattr(settings, "store_url", None)
    if not (url or "").startswith(("postgresql://", "postgres://")):
        for name in ("matrix_cache_bytes", "exact_max_rows", "ann_nprobes", "ann_candidates"):
            if hasattr(settings, name):
                kwargs.setdefault(name, getattr(settings, name))
    return open_store_url(url or settings.lance_dir, clearance, **kwargs)


def open_store_url(url_or_path: str | Path, clearance: Clearance | None = None, **kwargs: Any) -> Store:
    """The store a URL names: `postgresql://…` (or `postgres://…`) opens the PostgreSQL +
    pgvector backend, anything else is a LanceDB folder."""
    if isinstance(url_or_path, str) and url_or_path.startswith(("postgresql://", "postgres://")):
        from fathom.index.pgstore import PostgresStore  # local: psycopg only when used

        return PostgresStore(url_or_path, clearance, **kwargs)
    return LanceStore(Path(url_or_path), clearance, **kwargs)
