"""The search primitives of LanceStore: a vector or keyword search of one project, the pooled
search of several, and the chunk at a line.

A table the matrix cache holds is answered from memory (one matmul; its keyword index in
memory); the others through LanceDB: the stand-in copy or the IVF-PQ index for vectors
(`fathom.index.store.ann`), LanceDB's full-text index for keywords. What it refuses to do:
open a table or read a pointer file itself; the store it is given does that.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.store.contract import FANOUT_POOL
from fathom.index.store.errors import DamagedProject
from fathom.index.store.lance_tables import (
    HIT_COLUMNS,
    fts_query,
    hits_from,
    in_list,
    rows_where,
    sql_str,
)
from fathom.index.store.matrix_cache import CachedMatrix, Candidate, cached_tops
from fathom.index.store.values import Hit, Pooled

log = logging.getLogger(__name__)

CACHED_THREADS = 2  # threads that share the cached projects of one search (see `many`)


class LanceSearch:
    """The searches of one LanceStore. `store` is the LanceStore that holds it (not imported
    here: the store imports this module); its `vector_search` / `text_search` are what a
    pooled search calls for the projects the cache does not hold."""

    def __init__(self, store: Any):
        self.store = store

    def vector(self, project: str, table: str, vector: Any, k: int, where: SearchFilter | None) -> list[Hit]:
        store = self.store
        q = store._query_vector(project, table, vector)
        cached, tbl = store._matrix(project, table)
        if tbl is None or k <= 0:
            return []
        if cached is not None:
            # The filter picks the candidate rows first; the top k is cut among them.
            rows, scores = cached.vector_top(q, k, cached.allowed(where))
            return hits_from(cached.meta.take(pa.array(rows)), table, scores.tolist(), "vector")
        if where is None:
            hits: list[Hit] | None = store.ann.standin_search(project, table, tbl, q, k)
            if hits is not None:
                return hits
        store.ann.ensure(project, tbl)
        nprobes, candidates = store.ann.search_params(project, tbl, len(q))
        search = (
            tbl.search(q, vector_column_name="vector")
            .distance_type("cosine")
            .nprobes(nprobes)
            .refine_factor(max(1, -(-candidates // k)))
        )
        if where is not None:
            search = search.where(where.lance_sql(), prefilter=True)
        res = search.limit(k).select([*HIT_COLUMNS, "_distance"]).to_arrow()
        cosines = [1.0 - d for d in res["_distance"].to_pylist()]
        return hits_from(res, table, cosines, "vector")

    def text(self, project: str, table: str, query: str, k: int, where: SearchFilter | None) -> list[Hit]:
        store = self.store
        text = fts_query(query)
        if not text or k <= 0:
            return []
        cached = store._cached(project, table)
        if cached is not None and cached.keywords is not None:
            rows, scores = cached.keywords.search(text, k, rows=cached.allowed(where))
            return hits_from(cached.meta.take(pa.array(rows)), table, scores.tolist(), "text")
        for attempt in (1, 2):
            name, _, tbl = store._active_handle(project, table)
            if name is None:
                return []
            try:
                search = tbl.search(text, query_type="fts")
                if where is not None:
                    search = search.where(where.lance_sql(), prefilter=True)
                res = search.limit(k).select([*HIT_COLUMNS, "_score"]).to_arrow()
                break
            except Exception as exc:
                if attempt == 1 and store._active(project, table)[0] != name:
                    continue  # promoted (and the old table dropped) under our feet: retry
                # A keyword query LanceDB cannot answer must not take the vector half down.
                log.warning("full-text query %r failed on %s/%s: %s", text, project, table, exc)
                return []
        return hits_from(res, table, res["_score"].to_pylist(), "text")

    def many(
        self, projects: Sequence[str], table: str, vector: Any, query: str, k: int, where: SearchFilter | None
    ) -> Pooled:
        """`Store.search_many`, ranked the same, hit for hit, but a project the matrix
        cache holds costs one matmul and one keyword-index lookup: its best `k` row numbers
        join the pool, and Hits are built only for the pooled best `k`. The cached projects
        are split between this thread and one pool thread (the matmuls release the GIL); the
        other projects are searched through LanceDB meanwhile, all at once on the pool."""
        store = self.store
        text = fts_query(query or "")
        damaged: dict[str, DamagedProject] = {}
        cached: list[tuple[int, str, CachedMatrix]] = []
        uncached: list[tuple[int, str, bool]] = []  # (place, project, its vector half too)
        for i, project in enumerate(projects):
            try:
                entry = store._cached(project, table, use=True)
            except DamagedProject as exc:
                damaged[project] = exc
                continue
            if entry is not None:
                cached.append((i, project, entry))
            if entry is None or (text and entry.keywords is None):
                uncached.append((i, project, entry is None))
        q = store._query_vector(cached[0][1], table, vector) if cached else None
        groups = [cached[j::CACHED_THREADS] for j in range(CACHED_THREADS)]
        # The cached share goes to the pool first: behind LanceDB calls it would wait.
        others = [FANOUT_POOL.submit(cached_tops, g, q, text, k, where) for g in groups[1:]]
        later = {
            i: (
                project,
                FANOUT_POOL.submit(store.vector_search, project, table, vector, k, where=where)
                if vector_too
                else None,
                FANOUT_POOL.submit(store.text_search, project, table, query, k, where=where)
                if text
                else None,
            )
            for i, project, vector_too in uncached
        }
        vec, txt = cached_tops(groups[0], q, text, k, where)
        for other in others:
            other_vec, other_txt = other.result()
            vec += other_vec
            txt += other_txt
        for i, (project, v, t) in later.items():
            try:
                vh, th = v.result() if v is not None else [], t.result() if t is not None else []
            except DamagedProject as exc:
                damaged[project] = exc
                continue
            vec += [(-h.score, i, r, project, h, -1) for r, h in enumerate(vh)]
            txt += [(-h.score, i, r, project, h, -1) for r, h in enumerate(th)]
        return Pooled(best_hits(vec, k, table, "vector"), best_hits(txt, k, table, "text"), damaged)

    def chunk_at(self, project: str, table: str, path: str, line: int) -> tuple[Hit, np.ndarray] | None:
        store = self.store
        name, _ = store._active(project, table)
        if name is None:
            return None
        tbl = store._table(project, name)
        where = f"path = {sql_str(path)} AND start_line <= {int(line)} AND end_line >= {int(line)}"
        res = rows_where(tbl, where, [*HIT_COLUMNS, "vector"])
        if res.num_rows == 0:
            return None
        # The innermost chunk (a method rather than its class) is the one meant.
        spans = [
            e - s for s, e in zip(res["start_line"].to_pylist(), res["end_line"].to_pylist(), strict=True)
        ]
        i = int(np.argmin(spans))
        row = res.slice(i, 1)
        vec = np.asarray(row["vector"][0].as_py(), dtype=np.float32)
        return hits_from(row, table, [1.0], "vector")[0], vec

    def chunks(self, project: str, table: str, path: str | None, chunk_ids: list[str]) -> list[Chunk]:
        """The active rows of one file (`path`) or of these chunk ids, as `Chunk`s."""
        name, _ = self.store._active(project, table)
        if name is None or (path is None and not chunk_ids):
            return []
        where = f"path = {sql_str(path)}" if path is not None else in_list("chunk_id", chunk_ids)
        res = rows_where(self.store._table(project, name), where, CHUNK_COLUMNS).to_pydict()
        return [
            Chunk(
                path=p,
                language=lang,
                table=table,
                start_line=int(s),
                end_line=int(e),
                symbol=sym,
                text=text or "",
                kind=kind,
            )
            for p, lang, s, e, sym, text, kind in zip(*(res[c] for c in CHUNK_COLUMNS), strict=True)
        ]


CHUNK_COLUMNS = ["path", "language", "start_line", "end_line", "symbol", "text", "kind"]


def best_hits(pool: list[Candidate], k: int, table: str, kind: str) -> list[Hit]:
    """The pool's best `k` as Hits: a cached table's rows are read from its hit columns
    in one take per table."""
    best = sorted(pool, key=lambda c: c[:3])[:k]
    out: list[Hit | None] = [None] * len(best)
    groups: dict[int, tuple[CachedMatrix, str, list[tuple[int, int, float]]]] = {}
    for pos, (neg, i, _, project, source, row) in enumerate(best):
        if isinstance(source, Hit):
            out[pos] = dataclasses.replace(source, project=project)
        else:
            groups.setdefault(i, (source, project, []))[2].append((pos, row, -neg))
    for entry, project, items in groups.values():
        hits = hits_from(
            entry.meta.take(pa.array([row for _, row, _ in items])),
            table,
            [score for *_, score in items],
            kind,
            project,
        )
        for (pos, _, _), hit in zip(items, hits, strict=True):
            out[pos] = hit
    return out  # type: ignore[return-value]  # every slot filled above
