"""Exact vector search over a memory-mapped copy of one table, while its ANN index builds.

A table past the matrix cache is searched through LanceDB's ANN index. Building that index
takes minutes at a million rows, and until it exists LanceDB can only answer by a flat scan
that reads every row's columns through its query engine (4.5 s p50 at 1M x 384 on the shared
2-core machine, docs/benchmarks.md). So the build thread first copies the table's vectors,
L2-normalised, into a float32 ``.npy`` file beside the table (with each row's Lance row id),
and searches are answered exactly from that file meanwhile: one matrix-vector product per
block of rows, the best k kept, and the hit columns of those k read back by row id.

The file is memory-mapped and each block's pages are handed back to the kernel
(`MADV_DONTNEED`) once scanned, so a search holds one block (`BLOCK_BYTES`) of the matrix in
the process's memory, not the table; the file's pages stay in the page cache for the next
search while memory allows.

What it refuses to do: answer for any version of the table but the one it was copied at
(`version`: the Lance version read before the copy and checked after it; any later commit, a
write or a delete, makes the copy stale and the store drops it), or apply a search filter
(filtered searches go to LanceDB, which filters before it ranks).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

# Rows scanned per matrix-vector product: bounds what one search holds in memory.
BLOCK_BYTES = 64 << 20


class StaleCopy(Exception):
    """The table changed while it was being copied: the copy is thrown away."""


@dataclass
class StandInStats:
    """What the stand-in copies did: `written` (copies made), `served` (searches answered
    from one), `dropped` (copies discarded before their build finished: the table changed)."""

    written: int = 0
    served: int = 0
    dropped: int = 0


def _open_npy(path: Path) -> tuple[mmap.mmap, np.ndarray, int]:
    """A read-only mapping of an .npy file, the array over it (what np.load(mmap_mode="r")
    gives) and where the array starts in the mapping, whose pages `MappedMatrix.top` hands
    back."""
    with open(path, "rb") as fh:
        major, _ = np.lib.format.read_magic(fh)
        read_header = (
            np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(fh)
        offset = fh.tell()
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if fortran:  # pragma: no cover - this module writes C order only
        raise ValueError(f"{path} is not in C order")
    count = int(np.prod(shape))
    return mm, np.frombuffer(mm, dtype=dtype, count=count, offset=offset).reshape(shape), offset


def _copy_rows(tbl: Any, out: BinaryIO, n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Append the table's `n` vectors, L2-normalised, to `out` batch by batch; their Lance row
    ids and the row numbers of damaged ones (non-finite or zero: stored as zeros)."""
    row_ids = np.empty(n, np.uint64)
    dead: list[np.ndarray] = []
    at = 0
    for batch in tbl.search().select(["vector"]).with_row_id(True).limit(None).to_batches():
        m = batch.num_rows
        if at + m > n:
            raise StaleCopy(f"more than {n} rows")
        flat = batch.column("vector").flatten().to_numpy(zero_copy_only=False)
        block = np.asarray(flat, dtype=np.float32).reshape(m, width)
        norms = np.linalg.norm(block, axis=1)
        bad = ~np.isfinite(norms) | (norms == 0)
        norms[bad] = 1.0
        with np.errstate(invalid="ignore", over="ignore"):
            out.write(np.nan_to_num(block / norms[:, None]).astype("<f4").tobytes())
        row_ids[at : at + m] = batch.column("_rowid").to_numpy()
        dead.append(at + np.flatnonzero(bad))
        at += m
    if at != n:
        raise StaleCopy(f"{at} rows copied of {n}")
    return row_ids, np.concatenate(dead) if dead else np.empty(0, np.int64)


class MappedMatrix:
    """One table's normalised vectors at one Lance version, on disk under `folder`."""

    def __init__(self, folder: Path, version: int):
        self.folder = folder
        self.version = version
        self._mm, self.vectors, self._offset = _open_npy(folder / "vectors.npy")
        self.row_ids = np.load(folder / "row_ids.npy")
        dead = np.load(folder / "dead.npy")
        self.dead = dead if len(dead) else None
        width = max(1, self.vectors.shape[1])
        self.block = max(1, BLOCK_BYTES // (width * 4))

    @classmethod
    def write(cls, folder: Path, tbl: Any) -> MappedMatrix:
        """Copy the table's vectors (batch by batch: never the whole table in memory) into
        `folder`; `StaleCopy` when the table was committed to meanwhile."""
        version = tbl.version
        width = tbl.schema.field("vector").type.list_size
        n = tbl.count_rows()
        part = folder.with_name(folder.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(mode=0o700, parents=True)
        try:
            # Written through a file, not a writable mapping: a mapping's dirty pages count in
            # this process's RSS until it is closed (1.5 GB at 1M x 384, on top of the ANN build
            # that follows); written pages go to the page cache, which the kernel may reclaim.
            with open(part / "vectors.npy", "wb") as out:
                header = {"descr": "<f4", "fortran_order": False, "shape": (n, width)}
                np.lib.format.write_array_header_1_0(out, header)
                row_ids, dead = _copy_rows(tbl, out, n, width)
            if tbl.version != version:
                raise StaleCopy(f"version {tbl.version} != {version}")
            np.save(part / "row_ids.npy", row_ids)
            np.save(part / "dead.npy", dead)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(part, folder)
        except BaseException:
            shutil.rmtree(part, ignore_errors=True)
            raise
        return cls(folder, version)

    def top(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Row numbers and cosine scores of the exact top `k` for the unit query `q`, best
        first; damaged rows (non-finite or zero vectors) never rank."""
        n = self.vectors.shape[0]
        k = min(k, n - (0 if self.dead is None else len(self.dead)))
        if k <= 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        best_i = np.empty(0, np.int64)
        best_s = np.empty(0, np.float32)
        page = mmap.PAGESIZE
        row = self.vectors.strides[0]
        for s in range(0, n, self.block):
            scores = self.vectors[s : s + self.block] @ q
            if self.dead is not None:
                dead = self.dead[(self.dead >= s) & (self.dead < s + len(scores))]
                scores[dead - s] = -np.inf
            keep = np.argpartition(-scores, min(k, len(scores)) - 1)[:k]
            best_i = np.concatenate([best_i, keep + s])
            best_s = np.concatenate([best_s, scores[keep]])
            if len(best_s) > k:
                cut = np.argpartition(-best_s, k - 1)[:k]
                best_i, best_s = best_i[cut], best_s[cut]
            # This block's pages leave the process (they stay in the page cache).
            start = (self._offset + s * row) // page * page
            end = self._offset + (s + len(scores)) * row
            with contextlib.suppress(OSError, ValueError):
                self._mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        order = np.argsort(-best_s, kind="stable")
        return best_i[order], best_s[order]

    def remove(self) -> None:
        """Delete the files (a mapping still in use by a search stays valid until it ends)."""
        shutil.rmtree(self.folder, ignore_errors=True)
