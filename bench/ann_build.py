"""The ANN path at several table sizes: peak memory of writing and building, and the search
parameters swept (partitions probed x candidates re-ranked) against exact search.

    nice -n 10 .venv/bin/python bench/ann_build.py --rows 100000,300000,1000000

Each size runs in a child process of its own, so its peak RSS (VmHWM) is that of the store
alone (no encoder, no ground-truth matrix): the clustered corpus of bench/search_latency.py
(`_corpus`) is written 20k rows at a time through the real write path (`Store.write` into a
shadow slot, then `promote`), the background ANN build runs as in a server (the build-window
copy first, then the IVF-PQ index), and the exact top 10 of every query is kept batch by batch
while writing, so nothing holds the corpus. The matrix cache is off (`matrix_cache_bytes=0`):
every size is searched through its ANN index, as a table the cache has no room for is.

Printed per size: write, promote and ANN build time with the peak RSS of each phase and of all
three (the build peak), then p50 and recall@10 of the vector search with the store's defaults
for that size and for each point of the sweep. The last line per size reads
`<rows> x 384: build peak <MiB> MiB, default p50 <ms> ms, recall@10 <r>`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _common import machine, peak_rss_mib, reset_peak_rss, rss_mib  # noqa: E402
from _corpus import rows_for, unit, vocabulary  # noqa: E402

from fathom.index.store import LanceStore, Slot  # noqa: E402
from fathom.index.store.ann import search_params  # noqa: E402
from fathom.space import Provenance, Space  # noqa: E402

BATCH = 20_000
WIDTH = 384
SWEEP = [(p, c) for p in (4, 8, 16, 32) for c in (100, 200, 300, 400)]


def merge_top(best_s: np.ndarray, best_i: np.ndarray, scores: np.ndarray, start: int, k: int = 10):
    """The running exact top `k` per query, with one more block of scores merged in."""
    both_s = np.concatenate([best_s, scores], axis=1)
    both_i = np.concatenate(
        [best_i, np.arange(start, start + scores.shape[1])[None].repeat(len(scores), 0)], 1
    )
    keep = np.argpartition(-both_s, k - 1, axis=1)[:, :k]
    return np.take_along_axis(both_s, keep, 1), np.take_along_axis(both_i, keep, 1)


def child(rows: int, queries: int, seed: int, points: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(seed)
    work = Path(tempfile.mkdtemp(prefix="fathom-annbuild-"))
    try:
        store = LanceStore(work / "lance", matrix_cache_bytes=0)
        space = Space("code", "synthetic-384", WIDTH, "synthetic")
        words, weights = vocabulary(20_000)
        centres = rng.standard_normal((500, WIDTH)).astype(np.float32)
        q = unit(centres[rng.integers(0, 500, queries)] + 0.8 * rng.standard_normal((queries, WIDTH)))
        q = q.astype(np.float32)
        best_s = np.full((queries, 10), -np.inf, np.float32)
        best_i = np.zeros((queries, 10), np.int64)
        ids = np.empty(rows, "S32")
        prov = Provenance(space.reference, None)
        start_rss = rss_mib()
        reset_peak_rss()
        t0 = time.perf_counter()
        store.begin_shadow("bench", "code", space)
        for s in range(0, rows, BATCH):
            n = min(BATCH, rows - s)
            labels = rng.integers(0, 500, n)
            x = unit(centres[labels] + 0.8 * rng.standard_normal((n, WIDTH)).astype(np.float32))
            chunks = rows_for(s, labels, rng.choice(words, 6 * n, p=weights).tolist())
            store.write("bench", "code", chunks, x, prov, slot=Slot.SHADOW)
            best_s, best_i = merge_top(best_s, best_i, q @ x.T, s)
            ids[s : s + n] = [c.chunk_id.encode() for c in chunks]
            del chunks, x
        phases = [("write", time.perf_counter() - t0, peak_rss_mib())]
        reset_peak_rss()
        t0 = time.perf_counter()
        store.promote("bench", "code")
        phases.append(("promote", time.perf_counter() - t0, peak_rss_mib()))
        reset_peak_rss()
        t0 = time.perf_counter()
        store.wait_for_ann()
        phases.append(("ANN build", time.perf_counter() - t0, peak_rss_mib()))
        exact = [set(ids[r].tolist()) for r in best_i]
        del ids
        print(f"rows    : {rows} x {WIDTH}-d, RSS {start_rss:.0f} MiB at start")
        for name, took, peak in phases:
            print(f"  {name:<10}: {took:7.1f} s, peak RSS {peak:6.0f} MiB")
        build_peak = max(p for _, _, p in phases)

        def measure(nprobes: int | None, candidates: int | None) -> tuple[float, float]:
            store.ann_nprobes, store.ann_candidates = nprobes, candidates
            lat, rec = [], []
            for i in range(queries):
                t = time.perf_counter()
                hits = store.vector_search("bench", "code", q[i], 10)
                lat.append((time.perf_counter() - t) * 1000)
                rec.append(len({h.chunk_id.encode() for h in hits} & exact[i]) / 10)
            return float(np.percentile(lat, 50)), statistics.fmean(rec)

        measure(None, None)  # the index opened and read once (not counted)
        default = search_params(WIDTH, rows)
        for nprobes, candidates in points:
            p50, rec = measure(nprobes, candidates)
            mark = "   (store default)" if (nprobes, candidates) == default else ""
            print(
                f"  sweep : nprobes {nprobes:3d}, {candidates:4d} candidates: p50 {p50:6.2f} ms, "
                f"recall@10 {rec:.4f}{mark}"
            )
        p50, rec = measure(None, None)
        print(
            f"  default (nprobes {default[0]}, {default[1]} candidates): p50 {p50:.2f} ms, "
            f"recall@10 {rec:.4f}"
        )
        print(
            f"{rows} x {WIDTH}: build peak {build_peak:.0f} MiB, default p50 {p50:.2f} ms, recall@10 {rec:.4f}"
        )
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="100000,300000,1000000", help="table sizes, comma-separated")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--points",
        default=None,
        help="sweep points as NPROBESxCANDIDATES, comma-separated (default: 4x4 grid)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        points = (
            [tuple(int(v) for v in p.split("x")) for p in args.points.split(",")] if args.points else SWEEP
        )
        child(int(args.rows), args.queries, args.seed, points)
        return
    print(f"machine : {machine()}")
    for rows in [int(r) for r in args.rows.split(",")]:
        cmd = [sys.executable, "-u", __file__, "--child", "--rows", str(rows), "--queries", str(args.queries)]
        cmd += ["--points", args.points] if args.points else []
        subprocess.run([*cmd, "--seed", str(args.seed)], check=True, env=os.environ)


if __name__ == "__main__":
    main()
