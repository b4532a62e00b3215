"""Hybrid search: vector top-k and full-text search, fused by the query's shape.

What it owns: turning a query into ranked `Hit`s — encoding the query with the table's
encoder (a `Provider`), asking the store for its two rankings (cosine vector top-k and
full-text BM25), and fusing them (`fathom.index.fusion.fuse`: normalised scores in a convex
combination weighted by how much the query looks like code, with boosts for the symbols and
paths it names). Fusion is backend-neutral and works on any `Store` (LanceDB, PostgreSQL).
Also `find_similar`: neighbours of the chunk at a file and line, or of a snippet.

Concurrency: `hybrid_search` is synchronous (the store is blocking;
`hybrid_search` runs its keyword half on a small module thread pool beside the vector half);
`search` and `find_similar` are async and run the store calls in a worker thread
(`asyncio.to_thread`), so the event loop never blocks on LanceDB.

What it refuses to do: rank by raw score across the two searches (cosine and BM25 live on
different scales; fusion normalises each list first), or search a shadow slot.

API:
    hybrid_search(store, project, table, vector, query, k=10, *, depth=None,
                  where=None) -> list[Hit]
    hybrid_search_many(store, projects, table, vector, query, k=10, *, depth=None,
                       where=None) -> (list[Hit], {project: DamagedProject})
        (projects of one space searched in parallel, fused once: one comparable score)
    async search(store, encoder: Provider, project, query, *, table="code", k=10,
                 where=None) -> list[Hit]
    (`where`: a `fathom.index.filters.SearchFilter`, passed to both halves: the store applies
    it before cutting each top k)
    async find_similar(store, project, *, table="code", path=None, line=None, snippet=None,
                       encoder=None, k=10) -> list[Hit]
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fathom.errors import ConfigError
from fathom.index.filters import SearchFilter
from fathom.index.fusion import fuse
from fathom.index.store import DamagedProject, Hit, Store, check_table_kind
from fathom.inference.provider import Provider

_KEYWORD_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fathom-keyword")


def hybrid_search(store: Store, project: str, table: str, vector: Any, query: str,
                  k: int = 10, *, depth: int | None = None,
                  where: SearchFilter | None = None) -> list[Hit]:
    """Vector top-`depth` and full-text top-`depth`, fused (`fusion.fuse`), best `k` returned."""
    check_table_kind(table)
    if k <= 0:
        raise ConfigError(f"k must be a positive number of results, got {k}")
    depth = depth or max(4 * k, 40)
    text = None
    if query and query.strip():
        # The keyword half runs beside the vector half: both release the GIL (LanceDB's Rust
        # engine, numpy's BLAS), so on two cores a hybrid query costs about the slower half.
        text = _KEYWORD_POOL.submit(store.text_search, project, table, query, depth, where=where)
    # If the vector half raises, the keyword half finishes on its own and is dropped.
    vector_hits = (store.vector_search(project, table, vector, depth, where=where)
                   if vector is not None else [])
    text_hits = text.result() if text is not None else []
    return fuse(vector_hits, text_hits, query, limit=k)


def hybrid_search_many(store: Store, projects: Sequence[str], table: str, vector: Any,
                       query: str, k: int = 10, *, depth: int | None = None,
                       where: SearchFilter | None = None,
                       ) -> tuple[list[Hit], dict[str, DamagedProject]]:
    """One hybrid search over several projects of ONE space: the store pools every project's
    vector list by cosine and keyword list by BM25, each cut to `depth`
    (`Store.search_many`: in parallel, or from memory for the tables LanceStore's cache
    holds), and they are fused once, so every hit's score is on one scale (as if the
    projects were one index). Hits carry their `project`. A damaged project is left out and
    returned beside the hits; any other error is raised."""
    check_table_kind(table)
    if k <= 0:
        raise ConfigError(f"k must be a positive number of results, got {k}")
    depth = depth or max(4 * k, 40)
    pooled = store.search_many(projects, table, vector, query, depth, where=where)
    return fuse(pooled.vector, pooled.text, query, limit=k), pooled.damaged


async def encode_query(encoder: Provider, text: str) -> np.ndarray:
    # Encoders with a query form (E5's "query: " prefix) expose embed_query; others embed
    # the query like any passage.
    embed_query = getattr(encoder, "embed_query", None)
    if embed_query is not None:
        return np.asarray(await embed_query(text), dtype=np.float32).reshape(-1)
    vectors = await encoder.embed([text])
    return np.asarray(vectors, dtype=np.float32)[0]


async def search(store: Store, encoder: Provider, project: str, query: str, *,
                 table: str = "code", k: int = 10,
                 where: SearchFilter | None = None) -> list[Hit]:
    """Encode `query` with the table's encoder and run the hybrid search off the event loop."""
    check_table_kind(table)
    if not query or not query.strip():
        raise ConfigError("the search query is empty: give a few words or an identifier")
    vector = await encode_query(encoder, query)
    return await asyncio.to_thread(functools.partial(hybrid_search, where=where), store,
                                   project, table, vector, query, k)


async def find_similar(store: Store, project: str, *, table: str = "code",
                       path: str | None = None, line: int | None = None,
                       snippet: str | None = None, encoder: Provider | None = None,
                       k: int = 10) -> list[Hit]:
    """Chunks whose vectors lie nearest to the chunk at `path`:`line` (itself excluded), or
    to `snippet` encoded by `encoder`."""
    check_table_kind(table)
    if k <= 0:
        raise ConfigError(f"k must be a positive number of results, got {k}")
    if path is not None:
        if line is None:
            raise ConfigError("find_similar from a file needs a line number too")
        found = await asyncio.to_thread(store.chunk_at, project, table, path, int(line))
        if found is None:
            raise ConfigError(
                f"no indexed {table} chunk covers {path}:{line} in project {project!r}; check "
                f"the path (relative to the project root) and that the project is indexed"
            )
        origin, vector = found
        hits = await asyncio.to_thread(store.vector_search, project, table, vector, k + 1)
        return [h for h in hits if h.chunk_id != origin.chunk_id][:k]
    if snippet is not None and snippet.strip():
        if encoder is None:
            raise ConfigError("find_similar from a snippet needs the table's encoder")
        vector = await encode_query(encoder, snippet)
        return await asyncio.to_thread(store.vector_search, project, table, vector, k)
    raise ConfigError("find_similar needs either path and line, or a snippet")
