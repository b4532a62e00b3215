"""LanceDB-only behaviour of the store (the contract both backends share is in test_store_conformance.py)."""

from __future__ import annotations

import json

import numpy as np

from fathom.index.store import (
    LanceStore,
    Slot,
    validate_vectors,
)
from fathom.space import Provenance, Space
from tests.store_fixtures import (  # noqa: F401
    CLEARED,
    DOCS_SPACE,
    REFERENCE,
    SPACE,
    WIDTH,
    FakeClock,
    clock,
    clustered,
    make_chunks,
    store,
)


def indexed(store, project: str = "p", n: int = 20, seed: int = 0):
    chunks = make_chunks(n)
    vecs = clustered(n, seed=seed)
    store.open_table(project, "code", SPACE)
    store.write(project, "code", chunks, vecs, CLEARED)
    return chunks, vecs


# ---------------------------------------------------------------- spaces


def test_space_lives_in_the_lance_table_metadata(store):
    store.open_table("p", "code", SPACE)
    name = store._active("p", "code")[0]
    meta = store._table("p", name).schema.metadata
    assert json.loads(meta[b"fathom.space"]) == {
        "table": "code", "model": "test-encoder", "width": WIDTH, "reference": REFERENCE}
    assert str(store._table("p", name).schema.field("vector").type) == \
        f"fixed_size_list<item: float>[{WIDTH}]"


# ---------------------------------------------------------------- refused writes


# ---------------------------------------------------------------- blue/green


# ---------------------------------------------------------------- incremental


# ---------------------------------------------------------------- audit


# ---------------------------------------------------------------- projects


# ---------------------------------------------------------------- the big-table path


def test_tables_over_the_cache_budget_use_an_ann_index(tmp_path):
    """Without the in-memory matrix, LanceDB answers through IVF-PQ with refinement."""
    store = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    n, width = 1200, 32
    space = Space("code", "m", width, "local:m")
    chunks = make_chunks(n)
    vecs = clustered(n, width=width, clusters=24, seed=7, spread=0.3)
    store.begin_shadow("p", "code", space)
    store.write("p", "code", chunks, vecs, Provenance("local:m", None), slot=Slot.SHADOW)
    store.promote("p", "code")
    name = store._active("p", "code")[0]
    kinds = {i.index_type for i in store._table("p", name).list_indices()}
    assert "IvfPq" in kinds and "FTS" in kinds
    assert store._matrices == {}
    # Recall on clustered vectors against exact search.
    rng = np.random.default_rng(0)
    recalls = []
    for qi in rng.choice(n, 20, replace=False):
        q = vecs[qi] + 0.05 * rng.standard_normal(width).astype(np.float32)
        exact = np.argsort(-(vecs @ (q / np.linalg.norm(q))))[:10]
        got = {h.chunk_id for h in store.vector_search("p", "code", q, 10)}
        recalls.append(len(got & {chunks[i].chunk_id for i in exact}) / 10)
    assert np.mean(recalls) >= 0.9


def test_validate_vectors_accepts_one_row_as_a_flat_vector():
    assert validate_vectors(SPACE, "code", np.ones(WIDTH), 1).shape == (1, WIDTH)


def test_recreated_project_is_not_served_from_a_stale_cache(store, tmp_path):
    indexed(store, n=5)
    server = LanceStore(tmp_path / "lance")
    assert len(server.vector_search("p", "code", clustered(1)[0], 10)) == 5  # cached
    store.drop_project("p")
    store.open_table("p", "code", SPACE)
    fresh = make_chunks(3, prefix="again")
    store.write("p", "code", fresh, clustered(3, seed=6), CLEARED)
    got = {h.chunk_id for h in server.vector_search("p", "code", clustered(1)[0], 10)}
    assert got == {c.chunk_id for c in fresh}


def test_searches_from_threads_while_batches_are_written(store):
    from concurrent.futures import ThreadPoolExecutor

    chunks, vecs = indexed(store, n=10)
    more = make_chunks(60, prefix="more")
    more_vecs = clustered(60, seed=12)

    def searcher(i: int) -> int:
        hits = store.vector_search("p", "code", vecs[i % 10], 5)
        store.text_search("p", "code", "widget", 5)
        return len(hits)

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(searcher, i) for i in range(30)]
        for b in range(0, 60, 10):
            store.write("p", "code", more[b:b + 10], more_vecs[b:b + 10], CLEARED)
        assert all(f.result(timeout=60) == 5 for f in futures)
    assert store.table_info("p", "code").rows == 70
    assert store.vector_search("p", "code", more_vecs[59], 1)[0].chunk_id == more[59].chunk_id
