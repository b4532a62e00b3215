"""Hybrid search: vector top-k fused with full-text search by reciprocal rank fusion.

What it owns: turning a query into ranked `Hit`s — encoding the query with the table's
encoder (a `Provider`), asking the store for its two rankings (cosine vector top-k and
full-text BM25), and fusing them by reciprocal rank fusion (RRF). Fusion is backend-neutral
and works on any `Store` (LanceDB today, PostgreSQL later). Also `find_similar`: neighbours
of the chunk at a file and line, or of a snippet.

Concurrency: `hybrid_search` and `rrf_fuse` are synchronous (the store is blocking;
`hybrid_search` runs its keyword half on a small module thread pool beside the vector half);
`search` and `find_similar` are async and run the store calls in a worker thread
(`asyncio.to_thread`), so the event loop never blocks on LanceDB.

What it refuses to do: rank by raw score across the two searches (cosine and BM25 live on
different scales; RRF uses ranks only), or search a shadow slot.

API:
    rrf_fuse(rankings: Sequence[Sequence[Hit]], *, k: int = 60, limit: int | None = None)
        -> list[Hit]
    hybrid_search(store, project, table, vector, query, k=10, *, depth=None, rrf_k=60,
                  where=None) -> list[Hit]
    async search(store, encoder: Provider, project, query, *, table="code", k=10,
                 where=None) -> list[Hit]
    (`where`: a `fathom.index.filters.SearchFilter`, passed to both halves: the store applies
    it before cutting each top k)
    async find_similar(store, project, *, table="code", path=None, line=None, snippet=None,
                       encoder=None, k=10) -> list[Hit]
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from typing import Any

import numpy as np

from fathom.errors import ConfigError
from fathom.index.filters import SearchFilter
from fathom.index.store import Hit, Store, check_table_kind
from fathom.inference.provider import Provider

_KEYWORD_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fathom-keyword")
RRF_K = 60  # the constant from Cormack et al.; damps the head so one list cannot dominate


def rrf_fuse(rankings: Sequence[Sequence[Hit]], *, k: int = RRF_K,
             limit: int | None = None) -> list[Hit]:
    """Fuse best-first rankings: score(d) = sum over rankings of 1 / (k + rank(d)), rank from 1.

    A hit keeps the vector and text scores it had in each ranking, so a caller can tell why
    it ranked where it did. Ties keep first-seen order (vector ranking first)."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    vector_score: dict[str, float] = {}
    text_score: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + 1.0 / (k + rank)
            first.setdefault(hit.chunk_id, hit)
            if hit.vector_score is not None:
                vector_score.setdefault(hit.chunk_id, hit.vector_score)
            if hit.text_score is not None:
                text_score.setdefault(hit.chunk_id, hit.text_score)
    order = sorted(fused, key=lambda cid: -fused[cid])  # sorted() is stable: ties keep order
    if limit is not None:
        order = order[:limit]
    return [dataclasses.replace(first[cid], score=fused[cid],
                                vector_score=vector_score.get(cid),
                                text_score=text_score.get(cid)) for cid in order]


def hybrid_search(store: Store, project: str, table: str, vector: Any, query: str,
                  k: int = 10, *, depth: int | None = None, rrf_k: int = RRF_K,
                  where: SearchFilter | None = None) -> list[Hit]:
    """Vector top-`depth` and full-text top-`depth`, fused by RRF, best `k` returned."""
    check_table_kind(table)
    if k <= 0:
        raise ConfigError(f"k must be a positive number of results, got {k}")
    depth = depth or max(4 * k, 40)
    text = None
    if query and query.strip():
        # The keyword half runs beside the vector half: both release the GIL (LanceDB's Rust
        # engine, numpy's BLAS), so on two cores a hybrid query costs about the slower half.
        text = _KEYWORD_POOL.submit(store.text_search, project, table, query, depth, where=where)
    rankings = []
    if vector is not None:
        # If this raises, the keyword half finishes on its own and is dropped.
        rankings.append(store.vector_search(project, table, vector, depth, where=where))
    if text is not None:
        rankings.append(text.result())
    return rrf_fuse(rankings, k=rrf_k, limit=k)


async def _encode(encoder: Provider, text: str) -> np.ndarray:
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
    vector = await _encode(encoder, query)
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
        vector = await _encode(encoder, snippet)
        return await asyncio.to_thread(store.vector_search, project, table, vector, k)
    raise ConfigError("find_similar needs either path and line, or a snippet")
