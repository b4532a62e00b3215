"""LanceDB-only behaviour of the store (the contract both backends share is in test_store_conformance.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fathom.errors import ConfigError
from fathom.index.store import (
    LanceStore,
    Slot,
    ann_params,
    validate_vectors,
)
from fathom.space import Provenance, Space
from tests.index.store_fixtures import (
    CLEARED,
    REFERENCE,
    SPACE,
    WIDTH,
    FakeClock,
    clustered,
    make_chunks,
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
    tbl = store.slot_table("p", "code")
    meta = tbl.schema.metadata
    assert json.loads(meta[b"fathom.space"]) == {
        "table": "code",
        "model": "test-encoder",
        "width": WIDTH,
        "reference": REFERENCE,
    }
    assert str(tbl.schema.field("vector").type) == f"fixed_size_list<item: float>[{WIDTH}]"


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
    assert store.wait_for_ann(timeout=120)
    kinds = {i.index_type for i in store.slot_table("p", "code").list_indices()}
    assert "IvfPq" in kinds and "FTS" in kinds
    assert store.matrix_cache.entries == {}
    # Recall on clustered vectors against exact search.
    rng = np.random.default_rng(0)
    recalls = []
    for qi in rng.choice(n, 20, replace=False):
        q = vecs[qi] + 0.05 * rng.standard_normal(width).astype(np.float32)
        exact = np.argsort(-(vecs @ (q / np.linalg.norm(q))))[:10]
        got = {h.chunk_id for h in store.vector_search("p", "code", q, 10)}
        recalls.append(len(got & {chunks[i].chunk_id for i in exact}) / 10)
    assert np.mean(recalls) >= 0.9


def test_ann_parameters_follow_the_vector_width():
    """Measured settings (docs/benchmarks.md): narrow vectors keep 4-dim PQ codes, 8 probes
    and 300 candidates (1M x 384; more probes past 1M rows, `search_params`), wide ones take
    16-dim codes and 16 probes (200k x 2560)."""
    assert ann_params(384) == (96, 8, 300)
    assert ann_params(1024) == (256, 8, 300)
    assert ann_params(2560) == (160, 16, 400)
    assert ann_params(4096) == (256, 16, 400)
    assert ann_params(1030) == (103, 16, 400)  # no even 16-dim split: the next finer one
    assert ann_params(32) == (8, 8, 300)


def _big_table(store, project="p", n=1200, width=32):
    space = Space("code", "m", width, "local:m")
    chunks = make_chunks(n, prefix=project)
    vecs = clustered(n, width=width, clusters=24, seed=7, spread=0.3)
    store.begin_shadow(project, "code", space)
    store.write(project, "code", chunks, vecs, Provenance("local:m", None), slot=Slot.SHADOW)
    store.promote(project, "code")
    return chunks, vecs


def _vector_indexes(store, project="p"):
    tbl = store.slot_table(project, "code")
    return [i for i in tbl.list_indices() if i.columns == ["vector"]]


def test_a_table_past_exact_max_rows_is_searched_through_its_ann_index_whatever_the_room(tmp_path):
    """The cache has room for both tables (the default bound), but past `exact_max_rows` an
    exact scan is slower than the ANN index: the big table is never loaded, the small one is."""
    store = LanceStore(tmp_path, ann_min_rows=500, exact_max_rows=1000)
    big, big_vecs = _big_table(store, "big", n=1200)
    small, small_vecs = _big_table(store, "small", n=800)
    assert store.wait_for_ann(timeout=120)
    assert [h.chunk_id for h in store.vector_search("small", "code", small_vecs[3], 1)] == [small[3].chunk_id]
    assert store.vector_search("big", "code", big_vecs[3], 1)[0].chunk_id == big[3].chunk_id
    assert {slug for slug, _ in store.matrix_cache.entries} == {"small"}
    assert _vector_indexes(store, "big") and not _vector_indexes(store, "small")
    assert store.cache_stats.bypassed >= 1
    with pytest.raises(ConfigError, match="exact_max_rows"):
        LanceStore(tmp_path, exact_max_rows=0)


def test_the_ann_index_is_built_after_promotion_while_exact_search_serves(tmp_path):
    import threading

    store = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    gate = threading.Event()
    build = store.ann.build

    def held_build(project, name):  # the build takes as long as the test says
        gate.wait(60)
        build(project, name)

    store.ann.build = held_build
    chunks, vecs = _big_table(store)
    generation = store.generation("p", "code")
    # Promoted, and searchable at once: no index yet, LanceDB answers exactly meanwhile.
    assert store.ann_pending("p", "code") and _vector_indexes(store) == []
    for qi in (3, 500, 1100):
        exact = np.argsort(-(vecs @ vecs[qi]))[:10]
        got = [h.chunk_id for h in store.vector_search("p", "code", vecs[qi], 10)]
        assert got == [chunks[i].chunk_id for i in exact]
    gate.set()
    assert store.wait_for_ann(timeout=120) and not store.ann_pending("p", "code")
    assert [i.index_type for i in _vector_indexes(store)] == ["IvfPq"]
    # The generation moved, so searchers in other processes reopen the table with its index.
    assert store.generation("p", "code") == generation + 1


def _held_store(tmp_path):
    """A store whose background ANN build waits for `gate` once `started` (its exact copy
    for the stand-in is written by then)."""
    import threading

    store = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    started, gate = threading.Event(), threading.Event()
    build = store.ann.build

    def held_build(project, name):
        started.set()
        gate.wait(60)
        build(project, name)

    store.ann.build = held_build
    return store, started, gate


def _lance_vector_calls(store, project="p"):
    """Spy on the active handle's LanceDB vector queries: the list fills as they are made."""
    tbl = store.slot_table(project, "code")
    calls, search = [], tbl.search

    def spy(query=None, *args, **kwargs):
        if query is not None and not isinstance(query, str):
            calls.append(query)
        return search(query, *args, **kwargs)

    tbl.search = spy
    return calls


def test_the_standin_is_served_exactly_from_a_mapped_copy_then_by_the_index(tmp_path):
    from fathom.index.verify import check_project

    store, started, gate = _held_store(tmp_path)
    try:
        chunks, vecs = _big_table(store)
        assert started.wait(60) and store.ann_pending("p", "code")
        name = store.slot_table("p", "code").name
        copy = tmp_path / "projects" / "p" / ".exact" / name
        assert (copy / "vectors.npy").is_file() and store.standin_stats.written == 1
        lance = _lance_vector_calls(store)
        for served, qi in enumerate((3, 500, 1100), 1):
            exact = np.argsort(-(vecs @ vecs[qi]), kind="stable")[:10]
            hits = store.vector_search("p", "code", vecs[qi], 10)
            assert [h.chunk_id for h in hits] == [chunks[i].chunk_id for i in exact]
            assert [h.path for h in hits] == [chunks[i].path for i in exact]
            np.testing.assert_allclose([h.score for h in hits], vecs[exact] @ vecs[qi], atol=1e-5)
            assert store.standin_stats.served == served
        assert lance == []  # not one query reached LanceDB's flat scan
        # A filtered search is LanceDB's (the copy holds no filter columns).
        from fathom.index.filters import SearchFilter

        store.vector_search("p", "code", vecs[3], 5, where=SearchFilter(language="python"))
        assert len(lance) == 1 and store.standin_stats.served == 3
        # The copy is no table: verify and garbage collection leave it be.
        assert check_project(store, "p").problems == []
        store.collect_garbage("p")
        assert (copy / "vectors.npy").is_file()
        gate.set()
        assert store.wait_for_ann(timeout=120) and not copy.exists()
        assert [i.index_type for i in _vector_indexes(store)] == ["IvfPq"]
        lance = _lance_vector_calls(store)
        assert store.vector_search("p", "code", vecs[3], 10)[0].chunk_id == chunks[3].chunk_id
        assert len(lance) == 1 and store.standin_stats.served == 3  # the ANN path now
        assert not copy.exists() and store.standin_stats.dropped == 0
        # A refresh rebuilds the index while the previous one serves: no copy is made.
        store.refresh("p", "code")
        assert store.wait_for_ann(timeout=120) and store.standin_stats.written == 1
    finally:
        gate.set()
        store.wait_for_ann(timeout=120)


def test_a_write_during_the_build_window_drops_the_copy(tmp_path):
    store, started, gate = _held_store(tmp_path)
    try:
        chunks, vecs = _big_table(store)
        assert started.wait(60)
        name = store.slot_table("p", "code").name
        assert store.vector_search("p", "code", vecs[0], 10)[0].chunk_id == chunks[0].chunk_id
        assert store.standin_stats.served == 1
        # Another process writes a new row: the copy is of an older version from then on.
        other = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=10**9)
        new = make_chunks(1, prefix="fresh")
        fresh = clustered(1, width=32, seed=99)
        other.write("p", "code", new, fresh, Provenance("local:m", None))
        lance = _lance_vector_calls(store)
        hits = store.vector_search("p", "code", fresh[0], 10)
        assert hits[0].chunk_id == new[0].chunk_id
        assert len(lance) == 1 and store.standin_stats.served == 1
        assert store.standin_stats.dropped == 1
        assert not (tmp_path / "projects" / "p" / ".exact" / name).exists()
    finally:
        gate.set()
        store.wait_for_ann(timeout=120)


def test_a_big_table_left_without_its_ann_index_gets_one_from_the_next_searcher(tmp_path):
    writer = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    writer.ann.build = lambda project, name: None  # the promoting process stopped first
    chunks, vecs = _big_table(writer)
    assert _vector_indexes(writer) == []
    server = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    hits = server.vector_search("p", "code", vecs[0], 10)
    assert hits[0].chunk_id == chunks[0].chunk_id
    assert server.wait_for_ann(timeout=120)
    assert [i.index_type for i in _vector_indexes(server)] == ["IvfPq"]


def test_a_failed_ann_build_is_not_retried_by_every_search(tmp_path, caplog):
    caplog.set_level("INFO", logger="fathom.index.store")
    writer = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    writer.ann.build = lambda project, name: None  # the promoting process stopped first
    _, vecs = _big_table(writer)
    server = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    tbl = server.slot_table("p", "code")
    calls = []

    def refused(*args, **kwargs):
        calls.append(args)
        raise OSError("disk full")

    tbl.create_index = refused
    for _ in range(3):
        assert len(server.vector_search("p", "code", vecs[0], 10)) == 10  # exact meanwhile
        assert server.wait_for_ann(timeout=60)
    assert len(calls) == 1 and "not built" in caplog.text and "disk full" in caplog.text


def test_the_matrix_cache_stays_under_its_bound_and_keeps_the_tables_in_use(tmp_path):
    clock = FakeClock()
    writer = LanceStore(tmp_path, clock=clock)
    for project in ("a", "b", "c"):
        indexed(writer, project, n=200, seed=ord(project))
    query = clustered(1, seed=9)[0]
    probe = LanceStore(tmp_path)
    probe.vector_search("a", "code", query, 1)
    one = next(iter(probe.matrix_cache.entries.values())).nbytes  # the three tables are alike in size
    store = LanceStore(tmp_path, clock=clock, matrix_cache_bytes=int(2.5 * one), cache_idle_s=60)

    def held():
        return sum(m.nbytes for m in store.matrix_cache.entries.values())

    def top(project):
        return [h.chunk_id for h in store.vector_search(project, "code", query, 5)]

    expected = {p: top(p) for p in ("a", "b")}  # both loaded
    assert store.cache_stats.loads == 2 and held() <= store.matrix_cache_bytes
    # "c" does not fit beside two tables in use: LanceDB answers it, nothing is evicted.
    from_lance = top("c")
    assert store.cache_stats.bypassed == 1 and set(store.matrix_cache.entries) == {
        ("a", "code"),
        ("b", "code"),
    }
    assert [top(p) for p in ("a", "b")] == [expected["a"], expected["b"]]
    assert store.cache_stats.hits == 2
    # A minute later "a" and "b" are idle: "c" loads in place of the least recently used.
    clock.now += 61
    top("b")
    clock.now += 61
    assert top("c") == from_lance
    assert set(store.matrix_cache.entries) == {("b", "code"), ("c", "code")}
    assert held() <= store.matrix_cache_bytes
    assert store.cache_stats.hit_rate == 3 / 7


def test_a_table_the_cache_has_no_room_for_gets_an_ann_index(tmp_path):
    writer = LanceStore(tmp_path, ann_min_rows=500)
    _, vecs = _big_table(writer, "a")
    _big_table(writer, "b")
    assert _vector_indexes(writer, "a") == _vector_indexes(writer, "b") == []  # they fit
    probe = LanceStore(tmp_path)
    probe.vector_search("a", "code", vecs[0], 1)
    one = next(iter(probe.matrix_cache.entries.values())).nbytes
    store = LanceStore(tmp_path, ann_min_rows=500, matrix_cache_bytes=int(1.5 * one))
    store.vector_search("a", "code", vecs[0], 10)  # held
    store.vector_search("b", "code", vecs[0], 10)  # no room beside "a": LanceDB answers
    assert store.cache_stats.bypassed == 1 and store.wait_for_ann(timeout=120)
    assert _vector_indexes(store, "a") == []
    assert [i.index_type for i in _vector_indexes(store, "b")] == ["IvfPq"]


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
            store.write("p", "code", more[b : b + 10], more_vecs[b : b + 10], CLEARED)
        assert all(f.result(timeout=60) == 5 for f in futures)
    assert store.table_info("p", "code").rows == 70
    assert store.vector_search("p", "code", more_vecs[59], 1)[0].chunk_id == more[59].chunk_id
