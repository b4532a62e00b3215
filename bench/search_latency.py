"""Search latency at >= 50k chunks, and recall@10 against exact search.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_latency.py [--rows 50000] [--queries 200]

Rows are synthetic but clustered (recall on uniform random vectors means nothing): C cluster
centres in 384-d, each row a centre plus noise, L2-normalised; queries are fresh draws around
the same centres. Every row goes through the real write path (`Store.write` into a shadow
slot, validated and cleared, then `promote`, which builds the keyword index), under the space
of the embedded MiniLM encoder, so the last measurement is the whole `Fathom.search` a user
runs: MiniLM query encoding + vector top-k + full-text search + fusion. The hybrid search is
timed with the shipped fusion and with equal-weight RRF (the previous rule) side by side, and
the fusion step alone on the same lists. Target: p50 < 50 ms.

`--store postgresql://…` runs the same measurement on PostgreSQL + pgvector (the `bench`
project is dropped there before and after). For 100k x 384-d and 50k x 2560-d (halfvec) beside
LanceDB in one run, see bench/search_latency_pg.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from fathom.config import Settings  # noqa: E402
from fathom.index.chunk import Chunk  # noqa: E402
from fathom.index.indexer import space_for  # noqa: E402
from fathom.index.fusion import fuse, rrf_fuse  # noqa: E402
from fathom.index.search import hybrid_search  # noqa: E402
from fathom.index.backend import open_store_url  # noqa: E402
from fathom.index.store import LanceStore, Slot  # noqa: E402
from fathom.inference.local import LocalEncoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402
from fathom.space import Provenance  # noqa: E402

WORDS = ("parse render retry cache token stream buffer index query vector table column "
         "socket request response handler config logger thread queue batch encode decode "
         "hash password invoice tax progress syntax markdown layout style").split()


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def clustered(rng: np.random.Generator, n: int, width: int, clusters: int,
              spread: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    centres = rng.standard_normal((clusters, width)).astype(np.float32)
    labels = rng.integers(0, clusters, n)
    x = centres[labels] + spread * rng.standard_normal((n, width)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, labels, centres


def rows_for(labels: np.ndarray, rng: np.random.Generator) -> list[Chunk]:
    out = []
    for i, c in enumerate(labels.tolist()):
        words = " ".join(rng.choice(WORDS, 6))
        out.append(Chunk(path=f"pkg/mod_{i // 40}.py", language="python", table="code",
                         start_line=(i % 40) * 10 + 1, end_line=(i % 40) * 10 + 9,
                         symbol=f"func_{i}", text=f"def func_{i}():\n    # cluster {c}: {words}\n"))
    return out


_POOL = ThreadPoolExecutor(max_workers=4)  # as the hybrid search runs its keyword half


def hybrid_rrf(store, vector, query: str, k: int = 10, depth: int = 40) -> list:
    """The hybrid search as it was: both halves side by side, fused by equal-weight RRF."""
    text = _POOL.submit(store.text_search, "bench", "code", query, depth)
    vector_hits = store.vector_search("bench", "code", vector, depth)
    return rrf_fuse([vector_hits, text.result()], limit=k)


def interleaved(a, b, n: int) -> tuple[list[float], list[float]]:
    out_a, out_b = [], []
    for i in range(n):
        for fn, out in ((a, out_a), (b, out_b)) if i % 2 == 0 else ((b, out_b), (a, out_a)):
            t0 = time.perf_counter()
            fn(i)
            out.append((time.perf_counter() - t0) * 1000)
    return out_a, out_b


def timed(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--clusters", type=int, default=500)
    ap.add_argument("--spread", type=float, default=0.8,
                    help="noise per dimension around a centre, relative to the centre (0.8 "
                         "gives ~0.6 cosine between rows of one cluster, like related code)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--store", default=None,
                    help="postgresql://… to measure PostgreSQL + pgvector (default: LanceDB in a "
                         "temporary folder)")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    work = Path(tempfile.mkdtemp(prefix="fathom-latency-"))
    try:
        settings = Settings(data_dir=work / "data")
        encoder = LocalEncoder.from_settings(settings)
        space = space_for(encoder, "code")
        width = space.width
        x, labels, centres = clustered(rng, args.rows, width, args.clusters, args.spread)
        rows = rows_for(labels, rng)

        store = open_store_url(args.store) if args.store else LanceStore(settings.lance_dir)
        if store.has_project("bench"):
            store.drop_project("bench")
        t0 = time.perf_counter()
        store.begin_shadow("bench", "code", space)
        prov = Provenance(encoder.id, None)
        for s in range(0, args.rows, 5000):
            store.write("bench", "code", rows[s:s + 5000], x[s:s + 5000], prov, slot=Slot.SHADOW)
        written = time.perf_counter() - t0
        t0 = time.perf_counter()
        store.promote("bench", "code")
        promote_s = time.perf_counter() - t0

        qlabels = rng.integers(0, args.clusters, args.queries)
        q = centres[qlabels] + args.spread * rng.standard_normal((args.queries, width)).astype(np.float32)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        qtext = [" ".join(rng.choice(WORDS, 3)) for _ in range(args.queries)]

        # Exact ground truth, and recall of the store's vector top-10.
        exact = np.argsort(-(x @ q.T), axis=0)[:10].T
        ids = np.array([r.chunk_id for r in rows])
        store.vector_search("bench", "code", q[0], 10)  # load the table once (not timed)
        recall = []
        for i in range(args.queries):
            got = {h.chunk_id for h in store.vector_search("bench", "code", q[i], 10)}
            recall.append(len(got & set(ids[exact[i]])) / 10)

        vec = timed(lambda i: store.vector_search("bench", "code", q[i], 10), args.queries)
        # The shipped fusion and the previous rule, interleaved query by query (which runs
        # first alternates), so the machine's load drifts over both alike.
        hyb, rrf = interleaved(lambda i: hybrid_search(store, "bench", "code", q[i], qtext[i], 10),
                               lambda i: hybrid_rrf(store, q[i], qtext[i]), args.queries)
        # The fusion step alone, on the same depth-40 lists (the halves dominate the rest).
        lists = [(store.vector_search("bench", "code", q[i], 40),
                  store.text_search("bench", "code", qtext[i], 40)) for i in range(args.queries)]
        fuse_only = timed(lambda i: fuse(*lists[i], qtext[i], limit=10), args.queries)
        rrf_only = timed(lambda i: rrf_fuse(list(lists[i]), limit=10), args.queries)

        fathom = Fathom(settings, encoder=encoder, store=store)
        await fathom.search("warm up", project="bench", k=10)
        full = []
        for i in range(args.queries):
            t0 = time.perf_counter()
            await fathom.search(qtext[i], project="bench", k=10)
            full.append((time.perf_counter() - t0) * 1000)

        print(f"store   : {getattr(store, 'url', None) or 'LanceDB (temporary folder)'}")
        print(f"machine : {platform.machine()}, {os.cpu_count()} CPUs, python "
              f"{sys.version.split()[0]}, one query at a time")
        print(f"rows    : {args.rows} x {width}-d, {args.clusters} clusters (spread "
              f"{args.spread}); write {written:.1f} s, promote (indexes) {promote_s:.1f} s")
        for name, v in [("vector top-10 (store)", vec),
                        ("hybrid vector+FTS, shipped fusion", hyb),
                        ("hybrid vector+FTS, RRF (previous rule)", rrf),
                        ("  fusion step alone, shipped", fuse_only),
                        ("  fusion step alone, RRF", rrf_only),
                        ("Fathom.search (MiniLM query + hybrid)", full)]:
            print(f"{name:<40} p50 {pct(v, 50):7.2f} ms   p95 {pct(v, 95):7.2f} ms   "
                  f"mean {statistics.fmean(v):7.2f} ms")
        print(f"recall@10 of the vector search vs exact: {statistics.fmean(recall):.4f} "
              f"(min {min(recall):.2f})")
        print(f"target  : p50 < 50 ms -> {'met' if pct(full, 50) < 50 else 'NOT met'} "
              f"for the full search")
        if args.store:
            store.drop_project("bench")
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
