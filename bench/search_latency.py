"""Search latency from 50k to 1M chunks, recall@10 against exact search, ANN build time, RSS.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_latency.py [--rows 50000] [--queries 200]
    nice -n 10 .venv/bin/python bench/search_latency.py --rows 1000000 --vocab 20000
    nice -n 10 .venv/bin/python bench/search_latency.py --rows 200000 --width 2560 --vocab 20000

Rows are synthetic but clustered (recall on uniform random vectors means nothing): C cluster
centres, each row a centre plus noise, L2-normalised; queries are fresh draws around the same
centres. Every row goes through the real write path (`Store.write` into a shadow slot,
validated and cleared, then `promote`, which builds the keyword index and, for a table past
the matrix cache, starts the ANN build in the background), generated and written 20k rows at a
time so the script itself never holds the corpus (a copy goes to a memory-mapped file on disk
for the exact ground truth). At 384-d the vectors live in the space of the embedded MiniLM
encoder, so the last measurement is the whole `Fathom.search` a user runs; at another width
(`--width 2560`, Qwen3-Embedding-4B's) that step is left out.

Reported: write and promote time, vector search *while the ANN index builds* (exact, over the
memory-mapped copy the build thread writes first, with LanceDB's flat scan on the same queries
beside it: what served that window before), the ANN build time, then p50/p95 of the vector and
hybrid searches, recall@10 of the vector search against exact search, a sweep of `nprobes` x
`refine_factor`, the peak RSS during the searches (the configured cache bound plus 1 GiB is the
limit) and over the whole run, and exact numpy top-10 over the same matrix (read into memory
after the searches) in the same run for the ratio. `--vocab N` draws the chunk and query words
from N words with a Zipf law (the 30 real words first): real code at a million chunks has a
vocabulary of that order, while 30 words would put every query word in a fifth of the rows. The
last line reads `p50 <ms> ms, recall@10 <r>` for the vector search.

`--store postgresql://…` runs the same measurement on PostgreSQL + pgvector (the `bench`
project is dropped there before and after). For 100k x 384-d and 50k x 2560-d (halfvec) beside
LanceDB in one run, see bench/search_latency_pg.py.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _common import machine, peak_rss_mib, reset_peak_rss, rss_mib  # noqa: E402
from _corpus import WORDS, rows_for, unit, vocabulary  # noqa: E402

from fathom.config import Settings  # noqa: E402
from fathom.index.backend import open_store_url  # noqa: E402
from fathom.index.fusion import fuse, rrf_fuse  # noqa: E402
from fathom.index.indexer import space_for  # noqa: E402
from fathom.index.search import hybrid_search  # noqa: E402
from fathom.index.store import HIT_COLUMNS, LanceStore, Slot, ann_params  # noqa: E402
from fathom.index.store.ann import search_params  # noqa: E402
from fathom.inference.local import LocalEncoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402
from fathom.space import Provenance, Space  # noqa: E402

BATCH = 20_000


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def exact_top(matrix: np.ndarray, q: np.ndarray, k: int = 10) -> np.ndarray:
    """Row numbers of the exact top `k` for each query, in blocks (the matrix may be a memmap)."""
    best_s = np.full((len(q), k), -np.inf, np.float32)
    best_i = np.zeros((len(q), k), np.int64)
    for s in range(0, matrix.shape[0], 50_000):
        sc = q @ np.asarray(matrix[s : s + 50_000]).T
        both_s = np.concatenate([best_s, sc], axis=1)
        both_i = np.concatenate([best_i, np.arange(s, s + sc.shape[1])[None].repeat(len(q), 0)], 1)
        keep = np.argpartition(-both_s, k - 1, axis=1)[:, :k]
        best_s = np.take_along_axis(both_s, keep, 1)
        best_i = np.take_along_axis(both_i, keep, 1)
    return best_i


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


def latency_line(name: str, v: list[float], width: int = 44) -> str:
    return (
        f"{name:<{width}} p50 {pct(v, 50):8.2f} ms   p95 {pct(v, 95):8.2f} ms   "
        f"mean {statistics.fmean(v):8.2f} ms"
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument(
        "--width",
        type=int,
        default=None,
        help="vector width (default: the embedded MiniLM's, 384); another width "
        "skips the Fathom.search step, which needs that encoder",
    )
    ap.add_argument("--clusters", type=int, default=500)
    ap.add_argument(
        "--spread",
        type=float,
        default=0.8,
        help="noise per dimension around a centre, relative to the centre (0.8 "
        "gives ~0.6 cosine between rows of one cluster, like related code)",
    )
    ap.add_argument(
        "--vocab",
        type=int,
        default=len(WORDS),
        help="words the chunk texts and queries draw from (Zipf law past 30)",
    )
    ap.add_argument(
        "--while-building",
        type=int,
        default=5,
        help="vector searches timed while the ANN index builds (exact; each also "
        "through LanceDB's flat scan, slow, for the ratio)",
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--store",
        default=None,
        help="postgresql://… to measure PostgreSQL + pgvector (default: LanceDB in a temporary folder)",
    )
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    work = Path(tempfile.mkdtemp(prefix="fathom-latency-"))
    try:
        settings = Settings(data_dir=work / "data")
        encoder = LocalEncoder.from_settings(settings)
        minilm = args.width in (None, encoder.width)
        space = (
            space_for(encoder, "code")
            if minilm
            else Space("code", f"synthetic-{args.width}", args.width, "synthetic")
        )
        width = space.width
        words, weights = vocabulary(args.vocab)
        store = (
            open_store_url(args.store)
            if args.store
            else LanceStore(settings.lance_dir, matrix_cache_bytes=settings.matrix_cache_bytes)
        )
        if store.has_project("bench"):
            store.drop_project("bench")
        if minilm:  # loaded before the measurements, as in a server that answers searches
            await encoder.embed(["warm up"])

        centres = rng.standard_normal((args.clusters, width)).astype(np.float32)
        matrix = np.lib.format.open_memmap(work / "matrix.npy", "w+", np.float32, (args.rows, width))
        ids = np.empty(args.rows, "S32")
        prov = Provenance(space.reference, None)
        t0 = time.perf_counter()
        store.begin_shadow("bench", "code", space)
        for s in range(0, args.rows, BATCH):
            n = min(BATCH, args.rows - s)
            labels = rng.integers(0, args.clusters, n)
            x = unit(centres[labels] + args.spread * rng.standard_normal((n, width)).astype(np.float32))
            rows = rows_for(s, labels, rng.choice(words, 6 * n, p=weights).tolist())
            store.write("bench", "code", rows, x, prov, slot=Slot.SHADOW)
            matrix[s : s + n] = x
            ids[s : s + n] = [r.chunk_id.encode() for r in rows]
            del rows, x
        written = time.perf_counter() - t0
        matrix.flush()
        t0 = time.perf_counter()
        store.promote("bench", "code")
        promote_s = time.perf_counter() - t0
        ann_t0 = time.perf_counter()

        q = unit(
            centres[rng.integers(0, args.clusters, args.queries)]
            + args.spread * rng.standard_normal((args.queries, width)).astype(np.float32)
        )
        qtext = [" ".join(rng.choice(words, 3, p=weights)) for _ in range(args.queries)]
        exact_rows = exact_top(matrix, q)
        exact = [set(ids[r].tolist()) for r in exact_rows]
        del matrix  # unmapped: its pages leave this process's RSS

        def recall_of(i: int, hits: list) -> float:
            return len({h.chunk_id.encode() for h in hits} & exact[i]) / 10

        # While the ANN index builds, searches are answered exactly: from the memory-mapped
        # copy the build thread writes first, and LanceDB's flat scan (what answered before
        # that copy existed) side by side on the same queries.
        building = getattr(store, "ann_pending", lambda *a: False)("bench", "code")
        during, during_recall, flat, copy_s, window_rss = [], [], [], None, None
        if building and isinstance(store, LanceStore):
            while not store.standin_stats.written and store.ann_pending("bench", "code"):
                time.sleep(0.05)
            copy_s = time.perf_counter() - ann_t0
            served = store.standin_stats.served
            tbl = store.slot_table("bench", "code")
            for i in range(args.while_building):
                t0 = time.perf_counter()
                hits = store.vector_search("bench", "code", q[i], 10)
                during.append((time.perf_counter() - t0) * 1000)
                during_recall.append(recall_of(i, hits))
                t0 = time.perf_counter()
                tbl.search(q[i], vector_column_name="vector").distance_type(
                    "cosine"
                ).bypass_vector_index().limit(10).select([*HIT_COLUMNS, "_distance"]).to_arrow()
                flat.append((time.perf_counter() - t0) * 1000)
            window_rss = rss_mib()
            if store.standin_stats.served - served != len(during):
                during = []  # the build ended first: these were not the copy's answers
        if hasattr(store, "wait_for_ann"):
            store.wait_for_ann()
        ann_s = time.perf_counter() - ann_t0 if building else None

        store.vector_search("bench", "code", q[0], 10)  # open / load once (not timed)
        run_peak = peak_rss_mib()  # writing, promotion, the ANN build
        reset = reset_peak_rss()
        rss_before = rss_mib()
        recall = [recall_of(i, store.vector_search("bench", "code", q[i], 10)) for i in range(args.queries)]
        vec = timed(lambda i: store.vector_search("bench", "code", q[i], 10), args.queries)
        # The shipped fusion and the previous rule, interleaved query by query (which runs
        # first alternates), so the machine's load drifts over both alike.
        hyb, rrf = interleaved(
            lambda i: hybrid_search(store, "bench", "code", q[i], qtext[i], 10),
            lambda i: hybrid_rrf(store, q[i], qtext[i]),
            args.queries,
        )
        text_only = timed(lambda i: store.text_search("bench", "code", qtext[i], 40), args.queries)
        # The fusion step alone, on the same depth-40 lists (the halves dominate the rest).
        lists = [
            (store.vector_search("bench", "code", q[i], 40), store.text_search("bench", "code", qtext[i], 40))
            for i in range(args.queries)
        ]
        fuse_only = timed(lambda i: fuse(*lists[i], qtext[i], limit=10), args.queries)
        rrf_only = timed(lambda i: rrf_fuse(list(lists[i]), limit=10), args.queries)
        full = []
        if minilm:
            fathom = Fathom(settings, encoder=encoder, store=store)
            await fathom.search("warm up", project="bench", k=10)
            for i in range(args.queries):
                t0 = time.perf_counter()
                await fathom.search(qtext[i], project="bench", k=10)
                full.append((time.perf_counter() - t0) * 1000)
        search_peak = peak_rss_mib()

        # The ANN knobs side by side on the same index (store defaults marked).
        sweep = []
        if hasattr(store, "ann_nprobes") and building:
            kept = (store.ann_nprobes, store.ann_candidates)
            by_size_p, by_size_c = search_params(width, args.rows)
            default = (store.ann_nprobes or by_size_p, store.ann_candidates or by_size_c)
            m = min(args.queries, 100)
            for nprobes, candidates in [
                (16, 100),
                (8, 200),
                (16, 200),
                (32, 200),
                (16, 300),
                (8, 400),
                (16, 400),
                (32, 400),
                (64, 400),
                (16, 500),
            ]:
                store.ann_nprobes, store.ann_candidates = nprobes, candidates
                rec = [recall_of(i, store.vector_search("bench", "code", q[i], 10)) for i in range(m)]
                lat = timed(lambda i: store.vector_search("bench", "code", q[i], 10), m)
                sweep.append(
                    (
                        nprobes,
                        candidates,
                        pct(lat, 50),
                        statistics.fmean(rec),
                        (nprobes, candidates) == default,
                    )
                )
            store.ann_nprobes, store.ann_candidates = kept

        # Exact numpy top-10 over the same matrix in memory (read after the searches, so it
        # is not in their RSS): one matrix-vector product and a partial sort.
        matrix = np.load(work / "matrix.npy")

        def numpy_top(i: int) -> np.ndarray:
            scores = matrix @ q[i]
            top = np.argpartition(-scores, 9)[:10]
            return top[np.argsort(-scores[top])]

        numpy_exact = timed(numpy_top, min(args.queries, 50))
        matrix = None  # the closure above is done with it; its pages leave RSS

        print(f"store   : {getattr(store, 'url', None) or 'LanceDB (temporary folder)'}")
        print(f"machine : {machine()}")
        print(
            f"rows    : {args.rows} x {width}-d, {args.clusters} clusters (spread "
            f"{args.spread}), vocabulary {len(words)}; write {written:.1f} s, promote "
            f"(keyword index) {promote_s:.1f} s"
            + (f", ANN build (background) {ann_s:.1f} s" if ann_s is not None else "")
        )
        cache = getattr(store, "matrix_cache_bytes", None)
        if building and isinstance(store, LanceStore):
            sub, _, _ = ann_params(width)
            nprobes, candidates = search_params(width, args.rows)
            print(
                f"index   : IVF-PQ, {sub} sub-vectors of {width // sub} dims, nprobes "
                f"{store.ann_nprobes or nprobes}, {store.ann_candidates or candidates} "
                "candidates re-ranked"
            )
        if during:
            print(
                f"window  : the build thread's exact copy was ready {copy_s:.1f} s after "
                f"promotion; RSS {window_rss:.0f} MiB after the searches below"
            )
            print(
                latency_line("vector top-10 while the ANN builds (mapped)", during)
                + f"   recall {statistics.fmean(during_recall):.3f}"
            )
            print(
                latency_line("  LanceDB flat scan, same queries (before)", flat)
                + f"   {pct(flat, 50) / pct(during, 50):.1f}x the mapped copy's p50"
            )
        for name, v in [
            ("vector top-10 (store)", vec),
            ("hybrid vector+FTS, shipped fusion", hyb),
            ("hybrid vector+FTS, RRF (previous rule)", rrf),
            ("  keyword top-40 alone", text_only),
            ("  fusion step alone, shipped", fuse_only),
            ("  fusion step alone, RRF", rrf_only),
            ("Fathom.search (MiniLM query + hybrid)", full),
            ("exact numpy top-10 (matrix in memory)", numpy_exact),
        ]:
            if v:
                print(latency_line(name, v))
        print(f"ratio   : exact numpy p50 / store vector p50 = {pct(numpy_exact, 50) / pct(vec, 50):.1f}x")
        for nprobes, candidates, p50, rec, is_default in sweep:
            print(
                f"sweep   : nprobes {nprobes:3d}, {candidates:4d} candidates re-ranked "
                f"(refine_factor {candidates // 10:3d} at k=10): p50 {p50:6.2f} ms, "
                f"recall@10 {rec:.4f}{'   (store default)' if is_default else ''}"
            )
        print(
            f"RSS     : {rss_before:.0f} MiB before the searches, peak during them "
            f"{search_peak:.0f} MiB{'' if reset else ' (peak not resettable: whole run)'}"
            + (
                f"; cache bound {cache / 2**20:.0f} MiB, limit {cache / 2**20 + 1024:.0f} MiB "
                f"-> {'met' if search_peak < cache / 2**20 + 1024 else 'NOT met'}"
                if cache is not None
                else ""
            )
            + f"; peak before the searches (write, promote, ANN build) {run_peak:.0f} MiB"
        )
        print(
            f"recall@10 of the vector search vs exact: {statistics.fmean(recall):.4f} (min {min(recall):.2f})"
        )
        if args.store:
            store.drop_project("bench")
        store.close()
        print(f"p50 {pct(vec, 50):.2f} ms, recall@10 {statistics.fmean(recall):.4f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
