"""The backend-neutral rules: what a table kind, a project name, a batch of rows and vectors
must be before any backend sees them, and the text a chunk is searched and shown by.

One function per rule, shared by every backend and by the callers that check input early
(a table name is checked by `check_table_kind`, nowhere else in the store).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from fathom.errors import ConfigError, StoreError, WidthMismatch
from fathom.index.chunk import Chunk
from fathom.space import Space

TABLE_KINDS = ("code", "docs")
SNIPPET_LINES = 12
SNIPPET_CHARS = 800


def check_table_kind(table: str) -> str:
    if table not in TABLE_KINDS:
        # The wording a search's caller has always read (`'code' or 'docs'`).
        raise ConfigError(f"unknown table {table!r}: use {' or '.join(map(repr, TABLE_KINDS))}")
    return table


def check_project_name(project: str) -> str:
    if (
        not isinstance(project, str)
        or not project.strip()
        or len(project) > 200
        or any(ord(c) < 32 for c in project)
    ):
        raise ConfigError(
            f"invalid project name {project!r}: use 1-200 printable characters, e.g. the "
            f"repository's folder name"
        )
    return project


def check_space_kind(table: str, space: Space) -> None:
    """A space backs the table kind it was made for, and no other."""
    if space.table != table:
        raise StoreError(f"a {space.table!r} space cannot back the {table!r} table")


def validate_vectors(space: Space, table: str, vectors: Any, n: int) -> np.ndarray:
    """Return `vectors` as a C-contiguous float32 (n, width) matrix, or raise before any write.

    Width is the space's invariant (WidthMismatch); non-finite or zero vectors would poison
    cosine search for everyone (StoreError)."""
    arr = np.asarray(vectors)
    if arr.ndim == 1 and n == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise StoreError(
            f"table {table!r} needs a 2-d (rows, {space.width}) vector matrix; got shape {arr.shape}"
        )
    if arr.shape[1] != space.width:
        raise WidthMismatch(table, space.width, int(arr.shape[1]))
    if arr.shape[0] != n:
        raise StoreError(
            f"table {table!r}: {n} rows but {arr.shape[0]} vectors; each row needs exactly one vector"
        )
    if not np.issubdtype(arr.dtype, np.number):
        raise StoreError(f"table {table!r}: vectors must be numeric, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)[:5].tolist()
        err = StoreError(
            f"table {table!r}: vectors at rows {bad} contain NaN or infinity (an encoder "
            f"fault); nothing was written"
        )
        err.rows = bad  # type: ignore[attr-defined]  # evidence for the caller
        raise err
    norms = np.linalg.norm(arr, axis=1)
    if (norms == 0).any():
        bad = np.flatnonzero(norms == 0)[:5].tolist()
        err = StoreError(
            f"table {table!r}: vectors at rows {bad} are all zeros (no direction, cosine is "
            f"undefined); nothing was written"
        )
        err.rows = bad  # type: ignore[attr-defined]  # evidence for the caller
        raise err
    # Stored rows are unit vectors, whoever encoded them (cosine does not change), so a
    # vector of another length in a table is damage that `fathom store verify` can name. Rows
    # already unit (to float32 rounding) are kept bit for bit.
    off = np.abs(norms - 1.0) > 1e-5
    if off.any():
        arr = arr.copy()
        arr[off] /= norms[off, None]
    return arr


def query_vector(space: Space | None, table: str, vector: Any) -> np.ndarray:
    """A query vector as a float32 unit vector of the table's width, or a typed error."""
    q = np.asarray(vector, dtype=np.float32).reshape(-1)
    if space is not None and q.shape[0] != space.width:
        raise WidthMismatch(table, space.width, int(q.shape[0]))
    if not np.isfinite(q).all() or not np.linalg.norm(q):
        raise StoreError("the query vector is zero or not finite; check the encoder")
    return q / np.linalg.norm(q)


def validate_rows(table: str, rows: Sequence[Chunk]) -> None:
    for chunk in rows:
        if not isinstance(chunk, Chunk):
            raise StoreError(f"table {table!r}: rows must be Chunk objects, got {type(chunk)}")
        if chunk.table != table:
            raise StoreError(
                f"chunk {chunk.path}:{chunk.start_line} belongs to the {chunk.table!r} table; "
                f"refused by table {table!r}"
            )


_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9]*")
# The words inside a camelCase identifier; the keyword index's own word split (fusion reads
# a query with it too).
CAMEL_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_PARTS = CAMEL_PARTS


def keywords_of(path: str, symbol: str | None, text: str) -> str:
    """The text full-text search indexes: the chunk's symbol, path and text, plus the words
    inside camelCase identifiers (`getUserName` is then found by `user name` as well as by
    `getUserName`). snake_case needs nothing: the tokenizer splits on `_` already."""
    extra = []
    for ident in sorted(set(_IDENT.findall(f"{symbol or ''} {path} {text}"))):
        parts = CAMEL_PARTS.findall(ident)
        if len(parts) > 1:
            extra.extend(parts)
    return "\n".join([symbol or "", path.replace("/", " "), text, " ".join(extra)])


def snippet_of(text: str) -> str:
    lines = text.splitlines()[:SNIPPET_LINES]
    out = "\n".join(lines)
    return out if len(out) <= SNIPPET_CHARS else out[: SNIPPET_CHARS - 1] + "…"


def space_to_json(space: Space) -> dict[str, Any]:
    return asdict(space)


def space_from_json(data: dict[str, Any] | None) -> Space | None:
    if not data:
        return None
    return Space(
        table=data["table"], model=data["model"], width=int(data["width"]), reference=data["reference"]
    )
