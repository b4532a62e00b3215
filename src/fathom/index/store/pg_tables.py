"""The SQL of PostgreSQL's store: the pointer rows, the physical vector tables (made, indexed,
dropped), and the binary COPY a batch of rows is written with.

What it refuses to do: decide when a table is promoted or who may write (the store does);
every statement names the schema through `q`, never by string pasting.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fathom.index.store.errors import UnknownProject
from fathom.index.store.pg_database import (
    HNSW_MAX_HALFVEC,
    HNSW_MAX_VECTOR,
    ROW_COLUMNS,
    ROW_TYPES,
    Database,
    RowBatch,
    pg_text,
)
from fathom.index.store.rules import space_from_json, space_to_json
from fathom.index.store.values import Slot
from fathom.space import Space

log = logging.getLogger(__name__)


class PgTables:
    """The tables of one PostgresStore's schema, reached through `db`."""

    def __init__(self, db: Database, *, hnsw_m: int, hnsw_ef_construction: int):
        self.db = db
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construction = hnsw_ef_construction

    def q(self, template: str, **names: str) -> Any:
        """A SQL statement with `{s}` as the schema and `{t}`/... as identifiers in it."""
        from psycopg import sql

        ids = {k: sql.Identifier(self.db.schema, v) for k, v in names.items()}
        return sql.SQL(template).format(s=sql.Identifier(self.db.schema), **ids)

    def pointer(
        self, conn: Any, project: str, table: str, *, for_update: bool = False
    ) -> dict[str, Any] | None:
        sql = (
            "SELECT active, shadow, space, shadow_space, generation, last_indexed "
            "FROM {s}.slots WHERE project = %s AND kind = %s"
        )
        if for_update:
            sql += " FOR UPDATE"
        row = conn.execute(self.q(sql), (project, table)).fetchone()
        if row is None:
            return None
        keys = ("active", "shadow", "space", "shadow_space", "generation", "last_indexed")
        return dict(zip(keys, row, strict=True))

    def project_exists(self, conn: Any, project: str) -> bool:
        return (
            conn.execute(self.q("SELECT 1 FROM {s}.projects WHERE name = %s"), (project,)).fetchone()
            is not None
        )

    def known(self, conn: Any) -> list[str]:
        return [r[0] for r in conn.execute(self.q("SELECT name FROM {s}.projects ORDER BY name")).fetchall()]

    def locked_pointer(self, conn: Any, project: str, table: str) -> dict[str, Any]:
        """Inside a transaction: make sure the project and pointer rows exist, lock the
        pointer row and return it (serialises pointer changes across servers)."""
        conn.execute(
            self.q("INSERT INTO {s}.projects (name) VALUES (%s) ON CONFLICT (name) DO NOTHING"), (project,)
        )
        conn.execute(
            self.q(
                "INSERT INTO {s}.slots (project, kind) VALUES (%s, %s) ON CONFLICT (project, kind) DO NOTHING"
            ),
            (project, table),
        )
        ptr = self.pointer(conn, project, table, for_update=True)
        assert ptr is not None
        return ptr

    def slot_name(self, conn: Any, project: str, table: str, slot: Slot) -> str | None:
        ptr = self.pointer(conn, project, table)
        return None if ptr is None else ptr[slot.value]

    def create_table(self, conn: Any, project: str, table: str, space: Space, *, indexed: bool) -> str:
        n = conn.execute(self.q("SELECT nextval('{s}.table_seq')")).fetchone()[0]
        name = f"v{n}"
        width = int(space.width)
        conn.execute(
            self.q(
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
                "  to_tsvector('simple', {s}.code_words(text))) STORED)",
                t=name,
            )
        )
        conn.execute(self.q("CREATE INDEX ON {t} (path)", t=name))
        conn.execute(self.q("CREATE INDEX ON {t} (written_at)", t=name))
        conn.execute(self.q("CREATE INDEX ON {t} (content_hash)", t=name))  # content reuse
        conn.execute(
            self.q(
                "INSERT INTO {s}.vector_tables (name, project, kind, space, width) "
                "VALUES (%s, %s, %s, %s, %s)"
            ),
            (name, project, table, json.dumps(space_to_json(space)), width),
        )
        if indexed:
            self.build_indexes(conn, name, width)
        return name

    def vector_index_kind(self, width: int) -> str | None:
        if width <= HNSW_MAX_VECTOR:
            return "vector"
        if width <= HNSW_MAX_HALFVEC:
            return "halfvec"
        return None

    def build_indexes(self, conn: Any, name: str, width: int) -> None:
        """Keyword (GIN) and ANN (HNSW) indexes; idempotent. A shadow gets them just before
        promotion (one bulk build is much faster than maintaining them row by row)."""
        from psycopg import sql

        tbl = sql.Identifier(self.db.schema, name)
        conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (tsv)").format(
                sql.Identifier(f"{name}_tsv"), tbl
            )
        )
        kind = self.vector_index_kind(width)
        if kind is None:
            log.warning(
                "table %s is %d-d, wider than any pgvector index (%d): searched exactly",
                name,
                width,
                HNSW_MAX_HALFVEC,
            )
            return
        expr = (
            "(vector vector_cosine_ops)"
            if kind == "vector"
            else f"((vector::halfvec({width})) halfvec_cosine_ops)"
        )
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw "
                + expr
                + " WITH (m = {}, ef_construction = {})"
            ).format(
                sql.Identifier(f"{name}_ann"),
                tbl,
                sql.Literal(self.hnsw_m),
                sql.Literal(self.hnsw_ef_construction),
            )
        )

    def drop_table(self, conn: Any, name: str) -> None:
        conn.execute(self.q("DROP TABLE IF EXISTS {t}", t=name))
        conn.execute(self.q("DELETE FROM {s}.vector_tables WHERE name = %s"), (name,))

    def table_space(self, conn: Any, name: str) -> Space | None:
        row = conn.execute(self.q("SELECT space FROM {s}.vector_tables WHERE name = %s"), (name,)).fetchone()
        return space_from_json(row[0]) if row else None

    def copy_in(self, conn: Any, name: str, batch: RowBatch) -> None:
        """Stage `batch` with binary COPY, then upsert it by chunk id in the same transaction."""
        from psycopg import sql

        # The stage's vector column has no width: the INSERT below casts into the target's
        # vector(N), so pgvector itself refuses a row of another width.
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS fathom_stage (chunk_id text, "
            "content_hash text, path text, language text, start_line int, "
            "end_line int, symbol text, text text, vector vector, provider_id text, "
            "verdict_id text, written_at timestamptz, kind text) ON COMMIT DELETE ROWS"
        )
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in ROW_COLUMNS)
        with (
            conn.cursor() as cur,
            cur.copy(
                sql.SQL("COPY pg_temp.fathom_stage ({}) FROM STDIN WITH (FORMAT BINARY)").format(cols)
            ) as copy,
        ):
            copy.set_types(list(ROW_TYPES))
            for i in range(len(batch)):
                copy.write_row(
                    (
                        batch.chunk_ids[i],
                        batch.content_hashes[i],
                        pg_text(batch.paths[i]),
                        batch.languages[i],
                        int(batch.start_lines[i]),
                        int(batch.end_lines[i]),
                        pg_text(batch.symbols[i]),
                        pg_text(batch.texts[i]),
                        batch.vectors[i],
                        batch.provider_ids[i],
                        batch.verdict_ids[i],
                        batch.written_at[i],
                        batch.kind(i),
                    )
                )
        updates = sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in ROW_COLUMNS[1:]
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} ({cols}) SELECT {cols} FROM pg_temp.fathom_stage "
                "ON CONFLICT (chunk_id) DO UPDATE SET {updates}"
            ).format(t=sql.Identifier(self.db.schema, name), cols=cols, updates=updates)
        )

    def count(self, conn: Any, name: str | None) -> int:
        if name is None:
            return 0
        return int(conn.execute(self.q("SELECT count(*) FROM {t}", t=name)).fetchone()[0])

    def active_or_raise(self, conn: Any, project: str, table: str) -> dict[str, Any] | None:
        ptr = self.pointer(conn, project, table)
        if ptr is None and not self.project_exists(conn, project):
            raise UnknownProject(project, self.known(conn))
        return ptr
