"""The LanceDB store through its real path: spaces, refusals, blue/green, incremental, audit."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import numpy as np
import pytest

from fathom.errors import ConfigError, NotCleared, StoreError, WidthMismatch
from fathom.index.chunk import Chunk
from fathom.index.store import (
    LanceStore,
    NoShadow,
    Slot,
    SpaceMismatch,
    UnknownProject,
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


def lance_tables(store: LanceStore, project: str) -> set[str]:
    return {p.name.removesuffix(".lance") for p in store._dir(project).glob("*.lance")}


def indexed(store: LanceStore, project: str = "p", n: int = 20, seed: int = 0):
    chunks = make_chunks(n)
    vecs = clustered(n, seed=seed)
    store.open_table(project, "code", SPACE)
    store.write(project, "code", chunks, vecs, CLEARED)
    return chunks, vecs


# ---------------------------------------------------------------- spaces


def test_open_table_records_the_space_and_refuses_another(store, tmp_path):
    info = store.open_table("p", "code", SPACE)
    assert info.space == SPACE and info.rows == 0
    assert store.open_table("p", "code", SPACE).space == SPACE  # same space: fine

    other_model = Space("code", "other-encoder", WIDTH, "local:other-encoder")
    with pytest.raises(SpaceMismatch) as err:
        store.open_table("p", "code", other_model)
    assert err.value.expected == SPACE and err.value.got == other_model
    with pytest.raises(SpaceMismatch):
        store.open_table("p", "code", Space("code", "test-encoder", 32, REFERENCE))

    # A fresh process (new store object) sees the same identity, from disk.
    again = LanceStore(tmp_path / "lance")
    assert again.space_of("p", "code") == SPACE
    with pytest.raises(SpaceMismatch):
        again.open_table("p", "code", other_model)


def test_space_lives_in_the_lance_table_metadata(store):
    store.open_table("p", "code", SPACE)
    name = store._active("p", "code")[0]
    meta = store._table("p", name).schema.metadata
    assert json.loads(meta[b"fathom.space"]) == {
        "table": "code", "model": "test-encoder", "width": WIDTH, "reference": REFERENCE}
    assert str(store._table("p", name).schema.field("vector").type) == \
        f"fixed_size_list<item: float>[{WIDTH}]"


def test_code_and_docs_are_separate_spaces(store):
    store.open_table("p", "code", SPACE)
    store.open_table("p", "docs", DOCS_SPACE)
    with pytest.raises(StoreError):
        store.open_table("p", "docs", SPACE)  # a code space cannot back the docs table
    with pytest.raises(ConfigError):
        store.open_table("p", "images", SPACE)


# ---------------------------------------------------------------- refused writes


def test_wrong_width_is_refused_and_nothing_written(store):
    store.open_table("p", "code", SPACE)
    gen = store._active("p", "code")[1]
    chunks = make_chunks(3)
    with pytest.raises(WidthMismatch) as err:
        store.write("p", "code", chunks, np.ones((3, WIDTH + 1), np.float32), CLEARED)
    assert (err.value.expected, err.value.got) == (WIDTH, WIDTH + 1)
    assert store.table_info("p", "code").rows == 0
    assert store._active("p", "code")[1] == gen  # not even the generation moved


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_vector_is_refused_and_nothing_written(store, bad):
    store.open_table("p", "code", SPACE)
    vecs = clustered(4)
    vecs[2, 5] = bad
    with pytest.raises(StoreError) as err:
        store.write("p", "code", make_chunks(4), vecs, CLEARED)
    assert err.value.rows == [2]
    assert store.table_info("p", "code").rows == 0


def test_other_malformed_batches_are_refused(store):
    store.open_table("p", "code", SPACE)
    with pytest.raises(StoreError):  # one vector short
        store.write("p", "code", make_chunks(3), clustered(2), CLEARED)
    with pytest.raises(StoreError):  # a zero vector has no direction
        store.write("p", "code", make_chunks(1), np.zeros((1, WIDTH)), CLEARED)
    with pytest.raises(StoreError):  # a docs chunk in the code table
        store.write("p", "code", make_chunks(1, table="docs"), clustered(1), CLEARED)
    assert store.table_info("p", "code").rows == 0


def test_uncleared_provider_is_refused_and_nothing_written(store):
    store.open_table("p", "code", SPACE)
    stranger = Provenance("openrouter:some-model@some-upstream", verdict_id="v-unknown")
    with pytest.raises(NotCleared) as err:
        store.write("p", "code", make_chunks(3), clustered(3), stranger)
    assert err.value.provider_id == stranger.provider_id
    assert err.value.verdict_id == "v-unknown"
    assert store.table_info("p", "code").rows == 0


class AllowList:
    """A real `Clearance`: the gate will provide one keyed on verdicts."""

    def __init__(self, allowed: set[tuple[str, str | None]]):
        self.allowed = allowed
        self.asked: list[tuple[Space, Provenance]] = []

    def check(self, space: Space, provenance: Provenance) -> None:
        self.asked.append((space, provenance))
        if (provenance.provider_id, provenance.verdict_id) not in self.allowed:
            raise NotCleared(space.table, provenance.provider_id, provenance.verdict_id)


def test_injected_clearance_decides_who_writes(tmp_path):
    sidecar = Provenance("sidecar:gpu1:test-encoder", "verdict-7")
    gate = AllowList({(sidecar.provider_id, sidecar.verdict_id)})
    store = LanceStore(tmp_path, clearance=gate)
    store.open_table("p", "code", SPACE)
    assert store.write("p", "code", make_chunks(2), clustered(2), sidecar) == 2
    with pytest.raises(NotCleared):  # the reference is not on this gate's list
        store.write("p", "code", make_chunks(2, prefix="g"), clustered(2), CLEARED)
    assert gate.asked[0] == (SPACE, sidecar)
    assert store.provenance_counts("p", "code") == {(sidecar.provider_id, "verdict-7"): 2}


def test_write_needs_an_open_table(store):
    with pytest.raises(StoreError):
        store.write("nowhere", "code", make_chunks(1), clustered(1), CLEARED)
    with pytest.raises(NoShadow):
        store.open_table("p", "code", SPACE)
        store.write("p", "code", make_chunks(1), clustered(1), CLEARED, slot=Slot.SHADOW)


# ---------------------------------------------------------------- blue/green


def test_shadow_build_is_invisible_until_promoted(store):
    old_chunks, old_vecs = indexed(store)
    old_table = store._active("p", "code")[0]
    new_chunks = make_chunks(30, prefix="fresh")
    new_vecs = clustered(30, seed=1)

    shadow = store.begin_shadow("p", "code", SPACE)
    assert not shadow.resumed and shadow.rows == 0
    store.write("p", "code", new_chunks[:10], new_vecs[:10], CLEARED, slot=Slot.SHADOW)

    # Mid-build: searches see exactly the old table.
    hits = store.vector_search("p", "code", new_vecs[0], 5)
    assert {h.chunk_id for h in hits} <= {c.chunk_id for c in old_chunks}
    assert store.text_search("p", "code", "fresh", 5) == []
    assert store.table_info("p", "code").rows == 20
    assert store.table_info("p", "code").shadow_rows == 10

    store.write("p", "code", new_chunks[10:], new_vecs[10:], CLEARED, slot=Slot.SHADOW)
    info = store.promote("p", "code")
    assert info.rows == 30 and info.shadow_rows is None
    assert store.vector_search("p", "code", new_vecs[7], 1)[0].chunk_id == new_chunks[7].chunk_id
    assert store.text_search("p", "code", "fresh_7", 1)[0].chunk_id == new_chunks[7].chunk_id
    # The old version is gone from disk.
    assert old_table not in lance_tables(store, "p")
    assert lance_tables(store, "p") == {store._active("p", "code")[0]}


def test_interrupted_shadow_leaves_active_intact_and_resumes(store, tmp_path):
    old_chunks, old_vecs = indexed(store)
    before = sorted(e.chunk_id for e in store.manifest("p", "code"))
    new_chunks = make_chunks(40, prefix="fresh")
    new_vecs = clustered(40, seed=2)
    store.begin_shadow("p", "code", SPACE)
    store.write("p", "code", new_chunks[:15], new_vecs[:15], CLEARED, slot=Slot.SHADOW)
    store.close()  # the job dies here: no promote, no clean-up

    restarted = LanceStore(tmp_path / "lance")
    assert sorted(e.chunk_id for e in restarted.manifest("p", "code")) == before
    assert restarted.vector_search("p", "code", old_vecs[3], 1)[0].chunk_id == \
        old_chunks[3].chunk_id

    resumed = restarted.begin_shadow("p", "code", SPACE)
    assert resumed.resumed and resumed.rows == 15
    done = restarted.chunk_ids("p", "code", Slot.SHADOW)
    assert done == {c.chunk_id for c in new_chunks[:15]}
    todo = [i for i, c in enumerate(new_chunks) if c.chunk_id not in done]
    restarted.write("p", "code", [new_chunks[i] for i in todo], new_vecs[todo], CLEARED,
                    slot=Slot.SHADOW)
    assert restarted.promote("p", "code").rows == 40


@pytest.mark.slow
def test_killed_writer_process_leaves_active_searchable(store, tmp_path):
    """A real process writes a shadow batch and dies (os._exit) before promoting."""
    old_chunks, old_vecs = indexed(store)
    script = f"""
import os, numpy as np
from fathom.index.store import LanceStore, Slot
from tests.store_fixtures import SPACE, CLEARED, make_chunks, clustered
s = LanceStore({str(tmp_path / 'lance')!r})
s.begin_shadow("p", "code", SPACE)
s.write("p", "code", make_chunks(12, prefix="half"), clustered(12, seed=5), CLEARED,
        slot=Slot.SHADOW)
os._exit(9)
"""
    proc = subprocess.run([sys.executable, "-c", script], timeout=120, capture_output=True,
                          text=True)
    assert proc.returncode == 9, proc.stderr[-2000:]
    # The server-side store object in this process keeps answering from the old table.
    assert store.vector_search("p", "code", old_vecs[5], 1)[0].chunk_id == old_chunks[5].chunk_id
    assert store.table_info("p", "code").rows == 20
    assert store.begin_shadow("p", "code", SPACE).rows == 12


def test_abandon_shadow_drops_it(store):
    indexed(store)
    store.begin_shadow("p", "code", SPACE)
    store.write("p", "code", make_chunks(3, prefix="x"), clustered(3), CLEARED, slot=Slot.SHADOW)
    store.abandon_shadow("p", "code")
    assert store.space_of("p", "code", Slot.SHADOW) is None
    assert len(lance_tables(store, "p")) == 1
    with pytest.raises(NoShadow):
        store.promote("p", "code")
    assert store.table_info("p", "code").rows == 20


def test_full_reindex_can_move_the_table_to_a_new_space(store):
    indexed(store)
    wider = Space("code", "bigger-encoder", 32, "local:bigger-encoder")
    store.begin_shadow("p", "code", wider)
    with pytest.raises(WidthMismatch):  # the shadow is the new space's
        store.write("p", "code", make_chunks(2), clustered(2), CLEARED, slot=Slot.SHADOW)
    store.write("p", "code", make_chunks(2), clustered(2, width=32),
                Provenance("local:bigger-encoder", None), slot=Slot.SHADOW)
    assert store.space_of("p", "code") == SPACE  # until promotion
    store.promote("p", "code")
    assert store.space_of("p", "code") == wider
    with pytest.raises(SpaceMismatch):
        store.open_table("p", "code", SPACE)


def test_a_shadow_of_another_space_is_not_resumed(store):
    store.begin_shadow("p", "code", SPACE)
    store.write("p", "code", make_chunks(2), clustered(2), CLEARED, slot=Slot.SHADOW)
    other = Space("code", "other", WIDTH, "local:other")
    info = store.begin_shadow("p", "code", other)
    assert not info.resumed and info.rows == 0 and info.space == other


def test_first_index_through_a_shadow(store):
    # A project never indexed: the first full run is a shadow promoted into place.
    store.begin_shadow("new", "code", SPACE)
    with pytest.raises(StoreError):
        store.write("new", "code", make_chunks(1), clustered(1), CLEARED)  # no active yet
    assert store.vector_search("new", "code", clustered(1)[0], 3) == []
    store.write("new", "code", make_chunks(5), clustered(5), CLEARED, slot=Slot.SHADOW)
    assert store.promote("new", "code").rows == 5


# ---------------------------------------------------------------- incremental


def test_incremental_delete_and_upsert(store, clock):
    chunks, vecs = indexed(store, n=10)
    manifest = {e.chunk_id: e for e in store.manifest("p", "code")}
    assert set(manifest) == {c.chunk_id for c in chunks}
    assert manifest[chunks[0].chunk_id].content_hash == chunks[0].content_hash
    assert manifest[chunks[0].chunk_id].path == chunks[0].path

    # The searcher has the table cached before the changes.
    assert store.vector_search("p", "code", vecs[4], 1)[0].chunk_id == chunks[4].chunk_id

    # File 4 changed: its old chunk goes, a new one comes; file 7 was deleted.
    changed = Chunk(chunks[4].path, "python", "code", 1, 12, "f_4",
                    "def f_4(x):\n    return a brand new zanzibar body\n")
    assert store.delete("p", "code", chunk_ids=[chunks[4].chunk_id]) == 1
    assert store.delete("p", "code", paths=[chunks[7].path]) == 1
    new_vec = clustered(1, seed=9)
    store.write("p", "code", [changed], new_vec, CLEARED)

    ids = store.chunk_ids("p", "code")
    assert changed.chunk_id in ids
    assert chunks[4].chunk_id not in ids and chunks[7].chunk_id not in ids
    assert len(ids) == 9
    assert store.vector_search("p", "code", new_vec[0], 1)[0].chunk_id == changed.chunk_id
    assert store.text_search("p", "code", "zanzibar", 3)[0].chunk_id == changed.chunk_id
    store.refresh("p", "code")  # indexes rebuilt: the same answers
    assert store.text_search("p", "code", "zanzibar", 3)[0].chunk_id == changed.chunk_id
    assert chunks[7].chunk_id not in {h.chunk_id for h in store.vector_search(
        "p", "code", vecs[7], 10)}


def test_upsert_is_idempotent(store):
    chunks, vecs = indexed(store, n=5)
    store.write("p", "code", chunks, vecs, CLEARED)
    store.write("p", "code", chunks + chunks[:2], np.vstack([vecs, vecs[:2]]), CLEARED)
    assert store.table_info("p", "code").rows == 5


def test_another_store_object_sees_writes(store, tmp_path):
    chunks, vecs = indexed(store, n=5)
    server = LanceStore(tmp_path / "lance")
    assert len(server.vector_search("p", "code", vecs[0], 10)) == 5  # cached now
    extra = make_chunks(3, prefix="late")
    store.write("p", "code", extra, clustered(3, seed=4), CLEARED)
    assert len(server.vector_search("p", "code", vecs[0], 10)) == 8
    assert server.text_search("p", "code", "late_2", 1)[0].chunk_id == extra[2].chunk_id


# ---------------------------------------------------------------- audit


def test_provenance_counts_written_since_and_replace_vectors(store, clock):
    chunks, vecs = indexed(store, n=6)
    t_before = datetime.fromtimestamp(clock.now, tz=UTC)
    clock.now += 3600
    t_mid = datetime.fromtimestamp(clock.now, tz=UTC)
    late = make_chunks(2, prefix="late")
    store.write("p", "code", late, clustered(2, seed=3), CLEARED)

    assert store.provenance_counts("p", "code") == {(REFERENCE, None): 8}
    assert len(store.written_since("p", "code", t_before)) == 8
    since = store.written_since("p", "code", t_mid, provider_id=REFERENCE)
    assert {e.chunk_id for e in since} == {c.chunk_id for c in late}
    assert store.written_since("p", "code", t_mid, provider_id="someone-else") == []

    # Re-embedding under a verdict: vectors and provenance replaced, text untouched.
    new = clustered(2, seed=11)
    verdicted = Provenance(REFERENCE, "verdict-1")
    assert store.replace_vectors("p", "code", [chunks[0].chunk_id, chunks[1].chunk_id], new,
                                 verdicted) == 2
    assert store.provenance_counts("p", "code") == {(REFERENCE, None): 6,
                                                    (REFERENCE, "verdict-1"): 2}
    hit, vec = store.chunk_at("p", "code", chunks[1].path, 2)
    assert hit.chunk_id == chunks[1].chunk_id and hit.symbol == chunks[1].symbol
    assert np.allclose(vec, new[1], atol=1e-6)
    assert store.vector_search("p", "code", new[0], 1)[0].chunk_id == chunks[0].chunk_id


def test_replace_vectors_is_validated_and_cleared(store):
    chunks, vecs = indexed(store, n=3)
    with pytest.raises(NotCleared):
        store.replace_vectors("p", "code", [chunks[0].chunk_id], vecs[:1],
                              Provenance("cloud:x", "v"))
    with pytest.raises(WidthMismatch):
        store.replace_vectors("p", "code", [chunks[0].chunk_id], np.ones((1, 3)), CLEARED)
    with pytest.raises(StoreError) as err:
        store.replace_vectors("p", "code", [chunks[0].chunk_id, "nope"], vecs[:2], CLEARED)
    assert err.value.missing == ["nope"]
    assert store.provenance_counts("p", "code") == {(REFERENCE, None): 3}
    hit, vec = store.chunk_at("p", "code", chunks[0].path, 1)
    assert np.allclose(vec, vecs[0])


# ---------------------------------------------------------------- projects


def test_list_and_drop_projects(store, clock):
    indexed(store, project="alpha", n=4)
    store.open_table("alpha", "docs", DOCS_SPACE)
    indexed(store, project="team/beta project", n=2)
    projects = {p.name: p for p in store.list_projects()}
    assert set(projects) == {"alpha", "team/beta project"}
    code = projects["alpha"].tables["code"]
    assert (code.rows, code.space.width, code.space.model) == (4, WIDTH, "test-encoder")
    assert code.last_indexed == datetime.fromtimestamp(clock.now, tz=UTC)
    assert projects["alpha"].tables["docs"].rows == 0
    assert projects["team/beta project"].tables["code"].rows == 2

    store.drop_project("alpha")
    assert [p.name for p in store.list_projects()] == ["team/beta project"]
    assert not store.has_project("alpha")
    with pytest.raises(UnknownProject) as err:
        store.vector_search("alpha", "code", clustered(1)[0], 3)
    assert err.value.known == ["team/beta project"]
    with pytest.raises(UnknownProject):
        store.drop_project("alpha")


def test_bad_project_names_are_refused(store):
    for bad in ["", "   ", "a\nb"]:
        with pytest.raises(ConfigError):
            store.open_table(bad, "code", SPACE)


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


def test_query_vector_of_the_wrong_width_is_refused(store):
    indexed(store, n=3)
    with pytest.raises(WidthMismatch):
        store.vector_search("p", "code", np.ones(WIDTH * 2), 3)


def test_validate_vectors_accepts_one_row_as_a_flat_vector():
    assert validate_vectors(SPACE, "code", np.ones(WIDTH), 1).shape == (1, WIDTH)


def test_fake_clock_drives_written_at(store, clock):
    clock.now = 1_900_000_000.0
    indexed(store, n=1)
    assert store.table_info("p", "code").last_indexed == datetime.fromtimestamp(
        1_900_000_000.0, tz=UTC)
    assert isinstance(clock, FakeClock)


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
