"""What a Lance table holds and how the LanceDB store reads it: the Arrow schema, the hit
columns, SQL filter pieces, the keyword index's configuration and name, hits from rows, and the
guard that turns a storage failure into a typed error.

Free functions over a LanceDB table handle; the project layout and the pointer file are
`fathom.index.store.lance`'s.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import numpy as np
import pyarrow as pa

from fathom.errors import DiskFull, FathomError, is_disk_full
from fathom.index.chunk import Chunk
from fathom.index.keywords import STOP_WORDS
from fathom.index.store.errors import DamagedProject
from fathom.index.store.rules import keywords_of, snippet_of, space_to_json
from fathom.index.store.values import Hit
from fathom.space import Provenance, Space

log = logging.getLogger(__name__)

_Store = TypeVar("_Store")
_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def lance_schema(space: Space) -> pa.Schema:
    return pa.schema(
        [
            ("chunk_id", pa.string()),
            ("content_hash", pa.string()),
            ("path", pa.string()),
            ("language", pa.string()),
            ("start_line", pa.int32()),
            ("end_line", pa.int32()),
            ("symbol", pa.string()),
            ("text", pa.string()),
            ("keywords", pa.string()),  # what full-text search indexes: see keywords_of()
            ("vector", pa.list_(pa.float32(), space.width)),
            ("provider_id", pa.string()),
            ("verdict_id", pa.string()),
            ("written_at", pa.timestamp("us", tz="UTC")),
            ("kind", pa.string()),  # symbol kind (last: tables from before it gain it there)
        ],
        metadata={b"fathom.space": json.dumps(space_to_json(space)).encode()},
    )


HIT_COLUMNS = [
    "chunk_id",
    "path",
    "start_line",
    "end_line",
    "symbol",
    "language",
    "text",
    "provider_id",
    "kind",
]


def with_kind(tbl: Any) -> Any:
    """A table written before symbol kinds existed gains the column (empty: its chunks have
    no kind until a re-index writes them; `fathom index --full` reuses every vector)."""
    if "kind" not in tbl.schema.names:
        with contextlib.suppress(Exception):  # another process added it first
            tbl.add_columns({"kind": "CAST(NULL AS STRING)"})
        tbl.checkout_latest()
    return tbl


def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def in_list(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(sql_str(v) for v in values)})"


def fts_config() -> Any:
    from lancedb.index import FTS

    # No positions: phrase queries are not offered, and the index stays about half the size.
    # The stop words are the product's (`keywords.STOP_WORDS`), not the installed release's.
    return FTS(with_position=False, remove_stop_words=True, custom_stop_words=sorted(STOP_WORDS))


# The keyword index is named for how it was built: an index keeps the stop words it was built
# with (LanceDB's own list changed at 0.41, and indexes from before the store gave it the
# product's were built with it), and the in-memory keyword index beside a cached matrix scores
# with the product's. The name is a digest of that list and of the index's configuration; an
# index of another name (one from before names were given, `keywords_idx`, included) is rebuilt.
@functools.cache
def fts_name() -> str:
    # Computed once, on first use: LanceDB is imported only by what opens a table.
    digest = hashlib.sha256(f"{' '.join(sorted(STOP_WORDS))}|{fts_config()!r}".encode())
    return "keywords_stop_" + digest.hexdigest()[:12]


def fts_state(tbl: Any) -> str:
    """The table's keyword index: "current" (only the one built as this release builds it),
    "stale" (any other, alone or beside it: a rebuild cut short leaves both) or "missing"."""
    names = [i.name for i in tbl.list_indices() if i.index_type == "FTS"]
    return "current" if names == [fts_name()] else "stale" if names else "missing"


def build_fts(tbl: Any) -> None:
    """The table's keyword index, built whole as this release builds it (one of that name that
    no longer answers is replaced); any other is dropped once it stands, so a search never
    finds the column without one."""
    tbl.create_index("keywords", config=fts_config(), name=fts_name(), replace=True)
    for index in tbl.list_indices():
        if index.index_type == "FTS" and index.name != fts_name():
            tbl.drop_index(index.name)


def keep_fts_current(tbl: Any, what: str) -> None:
    """Builds the table's keyword index when it is missing, or was built otherwise (said in
    the log: on a big table this rebuild is the longest step of the run)."""
    state = fts_state(tbl)
    if state == "stale":
        log.info("rebuilding the keyword index of %s: it was built with other stop words", what)
    if state != "current":
        build_fts(tbl)


def fts_query(query: str) -> str:
    # LanceDB parses quotes as phrase queries, which need positions we do not index; a
    # code query like `"foo"` must still work, so quotes become plain separators.
    return " ".join(query.replace('"', " ").split())


RUST_SOURCE = re.compile(r",?\s*/\S+\.rs:\d+:\d+")


def short(exc: BaseException) -> str:
    """An exception as one short line, without the Rust source locations LanceDB appends."""
    text = " ".join(RUST_SOURCE.sub("", str(exc) or type(exc).__name__).split())
    return text[:300]


def guarded(
    method: Callable[Concatenate[_Store, str, _Params], _Result],
) -> Callable[Concatenate[_Store, str, _Params], _Result]:
    """A LanceStore operation on one project whose storage failures come out typed: a full
    disk as `DiskFull`, anything LanceDB or the filesystem reports about the project's files
    (a table folder gone, a truncated data file, a corrupt manifest) as `DamagedProject`."""

    @functools.wraps(method)
    def wrapper(self: _Store, project: str, *args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        try:
            return method(self, project, *args, **kwargs)
        except FathomError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, pa.ArrowException) as exc:
            if is_disk_full(exc):
                raise DiskFull(short(exc)) from exc
            raise DamagedProject(project, short(exc)) from exc

    # The method's own signature: `Concatenate` makes `self` and `project` positional-only,
    # which the wrapper does not (a caller may still name `project`).
    return cast(Callable[Concatenate[_Store, str, _Params], _Result], wrapper)


def hits_from(
    meta: pa.Table | dict[str, list[Any]],
    table: str,
    scores: Sequence[float],
    kind: str,
    project: str | None = None,
) -> list[Hit]:
    """Hits from a table's hit columns, one per score, in order."""
    cols = meta.to_pydict() if isinstance(meta, pa.Table) else meta
    out = []
    for i, score in enumerate(scores):
        out.append(
            Hit(
                chunk_id=cols["chunk_id"][i],
                path=cols["path"][i],
                start_line=int(cols["start_line"][i]),
                end_line=int(cols["end_line"][i]),
                symbol=cols["symbol"][i],
                language=cols["language"][i],
                score=float(score),
                snippet=snippet_of(cols["text"][i] or ""),
                provider_id=cols["provider_id"][i],
                table=table,
                vector_score=float(score) if kind == "vector" else None,
                text_score=float(score) if kind == "text" else None,
                kind=(cols.get("kind") or [None] * (i + 1))[i],
                project=project,
            )
        )
    return out


def rows_table(
    schema: pa.Schema,
    rows: list[Chunk],
    matrix: np.ndarray,
    provenances: list[Provenance],
    written_at: list[datetime],
) -> pa.Table:
    """The Arrow rows `rows` are written as, each with its vector, provenance and time."""
    width = matrix.shape[1]
    # Lone surrogates (from undecodable files) cannot be stored as UTF-8.
    texts = [c.text.encode("utf-8", "replace").decode("utf-8") for c in rows]
    return pa.table(
        {
            "chunk_id": [c.chunk_id for c in rows],
            "content_hash": [c.content_hash for c in rows],
            "path": [c.path for c in rows],
            "language": [c.language for c in rows],
            "start_line": pa.array([c.start_line for c in rows], pa.int32()),
            "end_line": pa.array([c.end_line for c in rows], pa.int32()),
            "symbol": [c.symbol for c in rows],
            "text": texts,
            "keywords": [keywords_of(c.path, c.symbol, t) for c, t in zip(rows, texts, strict=True)],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), width),
            "provider_id": [p.provider_id for p in provenances],
            "verdict_id": pa.array([p.verdict_id for p in provenances], pa.string()),
            "written_at": pa.array(written_at, pa.timestamp("us", tz="UTC")),
            "kind": pa.array([c.kind for c in rows], pa.string()),
        },
        schema=schema,
    )


def rows_where(tbl: Any, where: str, columns: list[str] | None = None) -> pa.Table:
    """Every row of `tbl` that `where` (LanceDB SQL) selects, with `columns` (None: all)."""
    q = tbl.search().where(where)
    if columns:
        q = q.select(columns)
    return q.limit(None).to_arrow() if hasattr(q, "limit") else q.to_arrow()


# The names other modules imported before they were public (kept until those imports go).
_HIT_COLUMNS = HIT_COLUMNS
_in_list = in_list
_fts_config = fts_config
