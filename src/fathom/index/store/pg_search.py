"""The search primitives of PostgreSQL's store: cosine by pgvector's HNSW index (a halfvec
index re-scored exactly for wide vectors), keywords by the `tsv` column's GIN index, and the
chunk at a line.

What it refuses to do: change a table or a pointer; every read runs through the store's
`_retrying` (a table dropped by a concurrent promotion is read once more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from fathom.index.chunk import Chunk
from fathom.index.filters import SearchFilter
from fathom.index.store.pg_database import HIT_COLUMNS, Database, as_array, pg_text
from fathom.index.store.pg_tables import PgTables
from fathom.index.store.rules import query_vector, snippet_of, space_from_json
from fathom.index.store.values import Hit

_T = TypeVar("_T")


class SearchHost(Protocol):
    """What the searches use of the `PostgresStore` that holds them (not imported here: the
    store imports this module)."""

    db: Database
    ef_search: int
    refine: int
    ann_min_rows: int

    def _retrying(self, fn: Callable[[Any], _T]) -> _T: ...


def hit_from_row(row: Sequence[Any], table: str, kind: str) -> Hit:
    """A Hit from a row of HIT_COLUMNS followed by its score."""
    chunk_id, path, start, end, symbol, language, text, provider_id, symbol_kind, score = row[:10]
    score = float(score)
    return Hit(
        chunk_id=chunk_id,
        path=path,
        start_line=int(start),
        end_line=int(end),
        symbol=symbol,
        language=language,
        score=score,
        snippet=snippet_of(text or ""),
        provider_id=provider_id,
        table=table,
        vector_score=score if kind == "vector" else None,
        text_score=score if kind == "text" else None,
        kind=symbol_kind,
    )


def filter_sql(where: SearchFilter | None, alias: str = "") -> tuple[str, dict[str, Any]]:
    """` AND …` conditions for a search filter, with their named parameters."""
    if where is None:
        return "", {}
    col = f"{alias}." if alias else ""
    values = {"language": where.language, "kind": where.kind, "path": where.path_regex}
    ops = {"language": "=", "kind": "=", "path": "~"}
    params = {f"f_{k}": v for k, v in values.items() if v is not None}
    sql = "".join(f" AND {col}{k} {ops[k]} %(f_{k})s" for k, v in values.items() if v is not None)
    return sql, params


class PgSearch:
    """The searches of one PostgresStore. `store` is the PostgresStore that holds it
    (`SearchHost`): its tuning (`ef_search`, `refine`, `ann_min_rows`), its `db` and its
    `_retrying`."""

    def __init__(self, store: SearchHost, tables: PgTables):
        self.store = store
        self.tables = tables

    def _vector_sql(self, name: str, width: int, where: SearchFilter | None = None) -> Any:
        cols = ", ".join(HIT_COLUMNS)
        # Filter conditions sit inside the index scan's WHERE: pgvector's iterative scan (see
        # `_tune_ann`) keeps reading the index until k rows pass, so the top k stay the top k.
        cond = filter_sql(where)[0]
        cond = f" WHERE TRUE{cond}" if cond else ""
        if self.tables.vector_index_kind(width) == "halfvec":
            # Candidates by the half-precision index, then exact full-precision cosine: the
            # order returned is the exact cosine order of the candidates.
            return self.tables.q(
                f"SELECT {cols}, 1 - (c.vector <=> %(q)s) AS score FROM ("
                f" SELECT {cols}, vector FROM {{t}}{cond}"
                f" ORDER BY (vector::halfvec({width})) <=> (%(q)s::halfvec({width}))"
                f" LIMIT %(cand)s) AS c ORDER BY c.vector <=> %(q)s LIMIT %(k)s",
                t=name,
            )
        return self.tables.q(
            f"SELECT {cols}, 1 - (vector <=> %(q)s) AS score FROM {{t}}{cond} "
            f"ORDER BY vector <=> %(q)s LIMIT %(k)s",
            t=name,
        )

    def _vector_params(
        self, q: np.ndarray, k: int, where: SearchFilter | None = None
    ) -> tuple[dict[str, Any], int]:
        cand = k * self.store.refine
        params = {"q": q, "k": k, "cand": cand}
        params |= filter_sql(where)[1]
        return params, max(self.store.ef_search, cand)

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
            (str(ef), f'"{self.store.db.schema}"."{name}"', self.store.ann_min_rows),
        )

    def vector_search(
        self, project: str, table: str, vector: Any, k: int, where: SearchFilter | None
    ) -> list[Hit]:

        def read(conn: Any) -> list[Hit]:
            ptr = self.tables.active_or_raise(conn, project, table)
            space = space_from_json(ptr["space"]) if ptr else None
            q = query_vector(space, table, vector)
            if ptr is None or ptr["active"] is None or k <= 0:
                return []
            params, ef = self._vector_params(q, k, where)
            with conn.transaction():
                self._tune_ann(conn, ptr["active"], ef)
                rows = conn.execute(
                    self._vector_sql(ptr["active"], space.width, where),  # type: ignore[union-attr]  # active: has a space
                    params,
                ).fetchall()
            return [hit_from_row(r, table, "vector") for r in rows]

        return self.store._retrying(read)

    def explain_vector_search(self, project: str, table: str, vector: Any, k: int = 10) -> str:
        """The query plan of `vector_search` for this query (which index answers it)."""
        conn = self.store.db.conn()
        ptr = self.tables.active_or_raise(conn, project, table)
        if ptr is None or ptr["active"] is None:
            return ""
        space = space_from_json(ptr["space"])
        params, ef = self._vector_params(query_vector(space, table, vector), k)
        from psycopg import sql

        with conn.transaction():
            self._tune_ann(conn, ptr["active"], ef)
            rows = conn.execute(
                sql.SQL("EXPLAIN ") + self._vector_sql(ptr["active"], space.width),  # type: ignore[union-attr]  # active: has a space
                params,
            ).fetchall()
        return "\n".join(r[0] for r in rows)

    def text_search(
        self, project: str, table: str, query: str, k: int, where: SearchFilter | None
    ) -> list[Hit]:
        if not query or not query.strip() or k <= 0:
            return []
        cols = ", ".join(f"t.{c}" for c in HIT_COLUMNS)
        cond, cond_params = filter_sql(where, "t")

        def read(conn: Any) -> list[Hit]:
            ptr = self.tables.active_or_raise(conn, project, table)
            if ptr is None or ptr["active"] is None:
                return []
            rows = conn.execute(
                self.tables.q(
                    f"SELECT {cols}, ts_rank(t.tsv, q.q) AS score FROM {{t}} AS t, "
                    f"(SELECT {{s}}.or_query(%(query)s) AS q) AS q WHERE t.tsv @@ q.q{cond} "
                    f"ORDER BY score DESC, t.chunk_id LIMIT %(k)s",
                    t=ptr["active"],
                ),
                {"query": pg_text(query), "k": k} | cond_params,
            ).fetchall()
            return [hit_from_row(r, table, "text") for r in rows]

        return self.store._retrying(read)

    def chunk_at(self, project: str, table: str, path: str, line: int) -> tuple[Hit, np.ndarray] | None:
        cols = ", ".join(HIT_COLUMNS)

        def read(conn: Any) -> tuple[Hit, np.ndarray] | None:
            ptr = self.tables.active_or_raise(conn, project, table)
            if ptr is None or ptr["active"] is None:
                return None
            row = conn.execute(
                self.tables.q(
                    f"SELECT {cols}, 1.0, vector FROM {{t}} WHERE path = %s AND start_line <= %s "
                    f"AND end_line >= %s ORDER BY end_line - start_line, start_line LIMIT 1",
                    t=ptr["active"],
                ),
                (path, int(line), int(line)),
            ).fetchone()
            if row is None:
                return None
            # The innermost chunk (a method rather than its class) is the one meant.
            return hit_from_row(row, table, "vector"), as_array(row[10])

        return self.store._retrying(read)

    def chunks(self, project: str, table: str, path: str | None, chunk_ids: list[str]) -> list[Chunk]:
        """The active rows of one file (`path`) or of these chunk ids, as `Chunk`s."""
        if path is None and not chunk_ids:
            return []
        cond, arg = ("path = %s", path) if path is not None else ("chunk_id = ANY(%s)", chunk_ids)

        def read(conn: Any) -> list[Chunk]:
            ptr = self.tables.active_or_raise(conn, project, table)
            if ptr is None or ptr["active"] is None:
                return []
            rows = conn.execute(
                self.tables.q(
                    "SELECT path, language, start_line, end_line, symbol, text, kind FROM {t} "
                    f"WHERE {cond}",
                    t=ptr["active"],
                ),
                (arg,),
            ).fetchall()
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
                for p, lang, s, e, sym, text, kind in rows
            ]

        return self.store._retrying(read)
