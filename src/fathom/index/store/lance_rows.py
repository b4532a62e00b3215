"""Reads and writes of rows in one Lance table, by chunk id, content hash or time.

Free functions over a LanceDB table handle; which table a slot names, and bumping the
generation after a write, are the store's. Ids go into SQL `IN (...)` filters `BATCH` at a
time, so a filter stays a sane size.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from fathom.errors import StoreError
from fathom.index.store.lance_tables import in_list, rows_where, sql_str
from fathom.index.store.values import ManifestEntry, StoredVector
from fathom.space import Provenance

BATCH = 4096  # rows per IN (...) filter, keeps SQL filters a sane size


def stored_vectors_in(tbl: Any, hashes: list[str]) -> dict[str, StoredVector]:
    """One stored vector per content hash found in `tbl` (any one of equal texts)."""
    out: dict[str, StoredVector] = {}
    for i in range(0, len(hashes), BATCH):
        res = rows_where(
            tbl,
            in_list("content_hash", hashes[i : i + BATCH]),
            ["content_hash", "vector", "provider_id", "verdict_id", "written_at"],
        )
        width = tbl.schema.field("vector").type.list_size
        vectors = res["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
        for j, (h, pid, vid, at) in enumerate(
            zip(
                res["content_hash"].to_pylist(),
                res["provider_id"].to_pylist(),
                res["verdict_id"].to_pylist(),
                res["written_at"].to_pylist(),
                strict=True,
            )
        ):
            out.setdefault(h, StoredVector(np.array(vectors[j], dtype=np.float32), Provenance(pid, vid), at))
    return out


def replaced_rows(
    tbl: Any,
    project: str,
    table: str,
    chunk_ids: list[str],
    matrix: np.ndarray,
    provenance: Provenance,
    written_at: datetime,
) -> pa.Table:
    """The rows `chunk_ids` name, with new vectors and provenance, ready to merge. Unknown
    chunk ids are refused (StoreError carrying `missing`), nothing returned."""
    parts = [
        rows_where(tbl, in_list("chunk_id", chunk_ids[i : i + BATCH]))
        for i in range(0, len(chunk_ids), BATCH)
    ]
    existing = pa.concat_tables(parts) if parts else None
    found = set(existing["chunk_id"].to_pylist()) if existing is not None else set()
    missing = [c for c in chunk_ids if c not in found]
    if missing:
        err = StoreError(
            f"project {project!r} table {table!r}: {len(missing)} chunk ids to re-embed are "
            f"not in the table (e.g. {missing[:3]}); nothing was replaced"
        )
        err.missing = missing  # type: ignore[attr-defined]  # evidence for the caller
        raise err
    order = {cid: i for i, cid in enumerate(chunk_ids)}
    existing = existing.select(tbl.schema.names)  # type: ignore[union-attr]  # not None: rows were found
    idx = [order[c] for c in existing["chunk_id"].to_pylist()]
    width = matrix.shape[1]
    n = existing.num_rows
    cols = {name: existing[name] for name in existing.column_names}
    cols["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(matrix[idx].ravel()), width)
    cols["provider_id"] = pa.array([provenance.provider_id] * n, pa.string())
    cols["verdict_id"] = pa.array([provenance.verdict_id] * n, pa.string())
    cols["written_at"] = pa.array([written_at] * n, pa.timestamp("us", tz="UTC"))
    return pa.table(cols, schema=tbl.schema)


def delete_rows(tbl: Any, chunk_ids: list[str], paths: list[str]) -> int:
    """Delete the rows of these chunk ids and of these paths; the number of rows removed."""
    before: int = tbl.count_rows()
    for column, values in (("chunk_id", chunk_ids), ("path", paths)):
        for i in range(0, len(values), BATCH):
            tbl.delete(in_list(column, values[i : i + BATCH]))
    after: int = tbl.count_rows()
    return before - after


def manifest_of(tbl: Any, where: str | None = None) -> list[ManifestEntry]:
    """(chunk_id, content_hash, path) of every row, or of the rows `where` selects."""
    columns = ["chunk_id", "content_hash", "path"]
    data = (
        rows_where(tbl, where, columns)
        if where is not None
        else tbl.search().select(columns).limit(None).to_arrow()
    )
    return [
        ManifestEntry(*row)
        for row in zip(
            data["chunk_id"].to_pylist(),
            data["content_hash"].to_pylist(),
            data["path"].to_pylist(),
            strict=True,
        )
    ]


def written_since_where(since: datetime, provider_id: str | None) -> str:
    """The filter for rows written at or after `since` (naive: UTC), by one provider or any."""
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    stamp = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    where = f"written_at >= TIMESTAMP '{stamp}'"
    if provider_id is not None:
        where += f" AND provider_id = {sql_str(provider_id)}"
    return where


def provenance_counts_of(tbl: Any) -> dict[tuple[str, str | None], int]:
    """Rows per (provider_id, verdict_id)."""
    data = tbl.search().select(["provider_id", "verdict_id"]).limit(None).to_arrow()
    counts: dict[tuple[str, str | None], int] = {}
    for key in zip(data["provider_id"].to_pylist(), data["verdict_id"].to_pylist(), strict=True):
        counts[key] = counts.get(key, 0) + 1
    return counts


def texts_in(tbl: Any, ids: Sequence[str]) -> dict[str, str]:
    """The stored text of these chunk ids; unknown ids are absent."""
    out: dict[str, str] = {}
    for i in range(0, len(ids), BATCH):
        res = rows_where(tbl, in_list("chunk_id", list(ids[i : i + BATCH])), ["chunk_id", "text"])
        out.update(zip(res["chunk_id"].to_pylist(), res["text"].to_pylist(), strict=True))
    return out
