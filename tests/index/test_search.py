"""Hybrid search: the previous rule (RRF) kept for comparison, keyword rescue, hits with line
ranges, find_similar. The shipped fusion has its own tests in test_fusion.py."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence

import numpy as np
import pytest

from fathom.errors import ConfigError, StoreError, WidthMismatch
from fathom.index.chunk import Chunk
from fathom.index.fusion import rrf_fuse
from fathom.index.search import find_similar, hybrid_search, search
from fathom.index.store import Hit, LanceStore, Slot
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.roles import EMBEDDING_ROLES
from fathom.space import Provenance, Space
from tests.index.store_fixtures import CLEARED, SPACE, WIDTH, clustered, make_chunks


def hit(cid: str, **kw) -> Hit:
    return Hit(
        chunk_id=cid,
        path=f"{cid}.py",
        start_line=1,
        end_line=2,
        symbol=None,
        language="python",
        score=0.0,
        snippet="",
        provider_id="p",
        **kw,
    )


def test_rrf_fuse_rewards_agreement():
    vector = [hit("a", vector_score=0.9), hit("b", vector_score=0.8), hit("c", vector_score=0.7)]
    text = [hit("c", text_score=7.0), hit("d", text_score=5.0)]
    fused = rrf_fuse([vector, text], k=60)
    assert [h.chunk_id for h in fused] == ["c", "a", "b", "d"]
    assert fused[0].score == pytest.approx(1 / 63 + 1 / 61)
    assert (fused[0].vector_score, fused[0].text_score) == (0.7, 7.0)
    assert fused[1].text_score is None
    assert [h.chunk_id for h in rrf_fuse([vector, text], limit=2)] == ["c", "a"]
    assert rrf_fuse([]) == []


def test_rrf_fuse_ties_keep_vector_order_first():
    fused = rrf_fuse([[hit("a")], [hit("b")]])
    assert [h.chunk_id for h in fused] == ["a", "b"]


def test_exact_keyword_match_ranks_high(store, haystack):
    chunks, vecs, needle, needle_vec = haystack
    query_vec = vecs[0]  # the vector half points somewhere else entirely
    vector_only = store.vector_search("p", "code", query_vec, 10)
    assert needle.chunk_id not in {h.chunk_id for h in vector_only}

    hits = hybrid_search(store, "p", "code", query_vec, "frobnicate_registry", k=5)
    assert hits[0].chunk_id == needle.chunk_id or hits[1].chunk_id == needle.chunk_id
    top = next(h for h in hits if h.chunk_id == needle.chunk_id)
    assert top.text_score is not None and top.text_score > 0


def test_hybrid_hits_carry_path_and_line_range(store, haystack):
    chunks, vecs, needle, _ = haystack
    hits = hybrid_search(store, "p", "code", vecs[17], "widget value 17", k=8)
    assert len(hits) == 8
    assert all(h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    by_id = {c.chunk_id: c for c in [*chunks, needle]}
    for h in hits:
        c = by_id[h.chunk_id]
        assert (h.path, h.start_line, h.end_line, h.symbol, h.language) == (
            c.path,
            c.start_line,
            c.end_line,
            c.symbol,
            c.language,
        )
        assert h.snippet and h.snippet in c.text
        assert h.provider_id == CLEARED.provider_id
        assert h.table == "code"
    # The chunk that agrees on both halves comes first.
    assert hits[0].chunk_id == chunks[17].chunk_id
    assert hits[0].vector_score == pytest.approx(1.0, abs=1e-5)


def test_hybrid_search_odd_queries_do_not_fail(store, haystack):
    chunks, vecs, _, _ = haystack
    for q in ['"quoted"', "foo(bar) && baz", "+-*&^%", "a AND b:c"]:
        # No chunk holds these words, so the vector half decides: the query vector is chunk 1's.
        assert hybrid_search(store, "p", "code", vecs[1], q, k=3)[0].chunk_id == chunks[1].chunk_id, q
    with pytest.raises(ConfigError):
        hybrid_search(store, "p", "code", vecs[1], "x", k=0)


def test_search_sees_only_the_active_slot(store, haystack):
    store.begin_shadow("p", "code", SPACE)
    shadow = make_chunks(3, prefix="shadowonly")
    store.write("p", "code", shadow, clustered(3, seed=8), CLEARED, slot=Slot.SHADOW)
    hits = hybrid_search(store, "p", "code", clustered(3, seed=8)[0], "shadowonly", k=10)
    assert not {h.chunk_id for h in hits} & {c.chunk_id for c in shadow}


# ---------------------------------------------------------------- through a Provider


class HashingEncoder(Provider):
    """A deterministic bag-of-words encoder: real vectors from text, no model needed."""

    def __init__(self, width: int = WIDTH, provider_id: str = CLEARED.provider_id):
        self.width = width
        self.info = ProviderInfo(
            id=provider_id, kind=Kind.LOCAL, roles=frozenset(EMBEDDING_ROLES), model="hashing", width=width
        )

    def encode(self, text: str) -> np.ndarray:
        v = np.zeros(self.width, np.float32)
        for word in re.findall(r"[a-z]+", text.lower()):
            v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.width] += 1.0
        v[0] += 1e-3  # never all zeros
        return v / np.linalg.norm(v)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.encode(t) for t in texts])


CORPUS = [
    ("net/socket.py", 1, 20, "open_socket", "def open_socket(host, port):\n    connect tcp socket"),
    ("cfg/parse.py", 5, 30, "parse_config", "def parse_config(path):\n    read yaml config file"),
    ("ui/render.py", 2, 9, "render_page", "def render_page(tpl):\n    render html template page"),
    ("db/query.py", 11, 40, "run_query", "def run_query(sql):\n    execute sql query rows"),
]


async def indexed_corpus(store: LanceStore, encoder: HashingEncoder) -> list[Chunk]:
    chunks = [Chunk(p, "python", "code", s, e, sym, t) for p, s, e, sym, t in CORPUS]
    store.open_table("p", "code", SPACE)
    store.write("p", "code", chunks, await encoder.embed([c.text for c in chunks]), CLEARED)
    return chunks


async def test_search_encodes_the_query_and_fuses(store):
    encoder = HashingEncoder()
    await indexed_corpus(store, encoder)
    hits = await search(store, encoder, "p", "read the yaml config file", k=3)
    assert (hits[0].path, hits[0].start_line, hits[0].end_line) == ("cfg/parse.py", 5, 30)
    with pytest.raises(ConfigError):
        await search(store, encoder, "p", "   ")


async def test_find_similar_from_file_and_line_and_from_snippet(store):
    encoder = HashingEncoder()
    chunks = await indexed_corpus(store, encoder)
    similar = await find_similar(store, "p", path="db/query.py", line=20, k=3)
    assert chunks[3].chunk_id not in {h.chunk_id for h in similar}  # itself excluded
    assert len(similar) == 3
    from_snippet = await find_similar(store, "p", snippet="render an html template", encoder=encoder, k=1)
    assert from_snippet[0].path == "ui/render.py"
    with pytest.raises(ConfigError):
        await find_similar(store, "p", path="nowhere.py", line=1)
    with pytest.raises(ConfigError):
        await find_similar(store, "p")


@pytest.mark.slow
async def test_real_encoder_hybrid_search(tmp_path, minilm_path):
    """The real path: MiniLM vectors written under the reference's provenance, then searched."""
    from fathom.inference.local import LocalEncoder

    encoder = LocalEncoder(minilm_path, model_name="sentence-transformers/all-minilm-l6-v2", width=384)
    space = Space("code", encoder.info.model, 384, encoder.id)
    store = LanceStore(tmp_path)
    chunks = [Chunk(p, "python", "code", s, e, sym, t) for p, s, e, sym, t in CORPUS]
    store.open_table("p", "code", space)
    store.write(
        "p", "code", chunks, await encoder.embed([c.text for c in chunks]), Provenance(encoder.id, None)
    )
    hits = await search(store, encoder, "p", "connect to a network server", k=2)
    assert hits[0].path == "net/socket.py"
    hits = await search(store, encoder, "p", "run_query", k=2)
    assert hits[0].path == "db/query.py"


def test_keyword_search_finds_camel_case_parts_and_paths(store):
    chunks = [
        Chunk(
            "src/auth/session_store.go",
            "go",
            "code",
            3,
            14,
            "SessionStore.getUserName",
            "func (s *SessionStore) getUserName(id int) string {\n\treturn s.names[id]\n}",
        ),
        Chunk(
            "src/ui/button.ts", "typescript", "code", 1, 6, "Button", "export class Button {\n  click() {}\n}"
        ),
    ]
    store.open_table("p", "code", SPACE)
    store.write("p", "code", chunks, clustered(2, seed=2), CLEARED)
    for query in ["getUserName", "user name", "session store", "auth"]:
        hits = store.text_search("p", "code", query, 2)
        assert hits and hits[0].chunk_id == chunks[0].chunk_id, query
    assert store.text_search("p", "code", "button", 1)[0].path == "src/ui/button.ts"


# ---------------------------------------------------------------- many projects


def test_a_search_over_many_projects_fans_out_and_ranks_on_one_scale(store, monkeypatch):
    """Three projects of one space: searched at once, merged by one comparable score (a
    project whose best is far from the query does not outrank another project's near hits),
    and a chunk id both projects hold comes back once per project."""
    import threading

    from fathom.index.search import hybrid_search_many

    rng = np.random.default_rng(5)
    query = rng.standard_normal(WIDTH).astype(np.float32)
    query /= np.linalg.norm(query)
    shared = Chunk("vendor/util.py", "python", "code", 1, 3, "helper", "def helper(): pass")
    near_of = {"near": 0.05, "mid": 0.6, "far": 3.0}  # noise around the query
    for project, noise in near_of.items():
        chunks = make_chunks(8, prefix=project) + [shared]
        v = query + noise * rng.standard_normal((9, WIDTH))
        v[-1] = query + 0.01 * rng.standard_normal(WIDTH)  # the shared chunk: nearest everywhere
        store.open_table(project, "code", SPACE)
        store.write(
            project,
            "code",
            chunks,
            (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32),
            CLEARED,
        )
    # Each project's vector half waits until all three have started: a serial loop would
    # never get past the first.
    barrier = threading.Barrier(3, timeout=20)
    vector_search = store.vector_search

    def together(*args, **kwargs):
        barrier.wait()
        return vector_search(*args, **kwargs)

    monkeypatch.setattr(store, "vector_search", together)
    hits, damaged = hybrid_search_many(store, list(near_of), "code", query, "", k=12)
    assert damaged == {}
    shared_hits = [h for h in hits if h.chunk_id == shared.chunk_id]
    assert sorted(h.project for h in shared_hits) == sorted(near_of)
    rest = [h.project for h in hits if h.chunk_id != shared.chunk_id]
    assert rest[:8] == ["near"] * 8 and "far" not in rest
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


WORDS = (
    "parse render retry cache token stream buffer index query vector table column socket "
    "request response handler config logger thread queue batch encode decode"
).split()


def _many_projects(root, projects=("a", "b", "c", "d", "e", "f"), n=120):
    """Projects of one space with clustered vectors and chunk texts drawn from one small
    vocabulary (so BM25 scores overlap across projects). "b" is a copy of "a" and "e" of
    "d": their hits tie exactly, and only the projects' order may decide between them."""
    writer = LanceStore(root)
    made = {}
    for p, project in enumerate(projects):
        seed = {"b": 0, "e": 3}.get(project, p)
        rng = np.random.default_rng(seed)
        chunks = [
            Chunk(
                f"src/{project if project not in 'be' else projects[seed]}_{i % 9}.py",
                "python",
                "code",
                1 + 10 * (i // 9),
                9 + 10 * (i // 9),
                f"fn_{seed}_{i}",
                f"def fn_{seed}_{i}():\n    " + " ".join(rng.choice(WORDS, 1 + i % 7)),
            )
            for i in range(n)
        ]
        made[project] = clustered(n, seed=seed)
        writer.open_table(project, "code", SPACE)
        writer.write(project, "code", chunks, made[project], CLEARED)
    return made


def _pooled_by_hand(store, projects, vector, query, depth, where=None):
    """The shipped rule, spelled out: each project searched on its own, the vector lists
    pooled by cosine and the keyword lists by BM25 (stable: equal scores keep the projects'
    order, then each project's own), each cut to `depth`."""
    vector_hits, text_hits = [], []
    for project in projects:
        vector_hits += [
            dataclasses.replace(h, project=project)
            for h in store.vector_search(project, "code", vector, depth, where=where)
        ]
        text_hits += [
            dataclasses.replace(h, project=project)
            for h in store.text_search(project, "code", query, depth, where=where)
        ]
    vector_hits.sort(key=lambda h: -h.score)
    text_hits.sort(key=lambda h: -h.score)
    return vector_hits[:depth], text_hits[:depth]


def test_all_projects_rank_as_the_union_of_one_project_searches(tmp_path):
    """A search over every project, with the projects the cache holds answered from memory and
    the others by LanceDB, returns the hits (ids, projects, scores, order) that searching each
    project alone and fusing the pooled lists once gives."""
    from fathom.index.filters import SearchFilter
    from fathom.index.fusion import fuse
    from fathom.index.search import hybrid_search_many
    from fathom.index.store import Store

    vectors = _many_projects(tmp_path)
    projects = list(vectors)
    probe = LanceStore(tmp_path)
    probe.vector_search("a", "code", vectors["a"][0], 1)
    one = next(iter(probe.matrix_cache.entries.values())).nbytes
    store = LanceStore(tmp_path, matrix_cache_bytes=int(3.5 * one))
    for project in ("a", "b", "c"):  # these three fill the cache; "d", "e", "f" do not fit
        store.vector_search(project, "code", vectors[project][0], 1)
    rng = np.random.default_rng(11)
    cases = [
        (vectors[p][j] + 0.05 * rng.standard_normal(WIDTH), " ".join(rng.choice(WORDS, w)))
        for p, j, w in (("a", 3, 1), ("d", 5, 2), ("f", 7, 3), ("c", 1, 2))
    ]
    cases += [(vectors["e"][2], ""), (vectors["b"][4], "fn_0_4 retry")]
    where = SearchFilter.of(path="src/?_[0-4].py")
    ties = 0
    for vector, query in cases:
        for k, flt in ((10, None), (5, where)):
            depth = max(4 * k, 40)
            hits, damaged = hybrid_search_many(store, projects, "code", vector, query, k, where=flt)
            v, t = _pooled_by_hand(store, projects, vector, query, depth, where=flt)
            assert damaged == {} and hits == fuse(v, t, query, limit=k), (query, flt)
            pooled = store.search_many(projects, "code", vector, query, depth, where=flt)
            assert (pooled.vector, pooled.text) == (v, t)
            assert Store.search_many(store, projects, "code", vector, query, depth, where=flt) == pooled
            ties += sum(a.score == b.score and a.project != b.project for a, b in zip(v, v[1:]))
    assert ties  # the copies' ties were there to be ordered
    assert set(store.matrix_cache.entries) == {("a", "code"), ("b", "code"), ("c", "code")}
    assert store.cache_stats.bypassed and store.cache_stats.hits
    # The reranker reads the hits' texts: from memory for a cached table, the same as LanceDB's.
    ids = [h.chunk_id for h in store.vector_search("a", "code", vectors["a"][0], 20)] + ["none"]
    from_memory = store.chunk_texts("a", "code", ids)
    from_lance = LanceStore(tmp_path, matrix_cache_bytes=0).chunk_texts("a", "code", ids)
    assert len(from_memory) == 20 and from_memory == from_lance


@pytest.mark.parametrize("room", [0.5, 0.8])
def test_searching_all_projects_again_and_again_does_not_thrash_the_cache(tmp_path, room):
    """More projects than the cache holds, searched together over and over: the tables in
    use stay (no eviction, no reload), the others are answered by LanceDB, and the hit rate
    is the share the cache holds. With room for 0.8 of a table left, a table whose matrix and
    hit columns would fit but not its keyword index must not be read (and dropped) again at
    every search."""
    from fathom.index.search import hybrid_search_many
    from tests.index.store_fixtures import FakeClock

    vectors = _many_projects(tmp_path)
    probe = LanceStore(tmp_path)
    probe.vector_search("a", "code", vectors["a"][0], 1)
    one = next(iter(probe.matrix_cache.entries.values())).nbytes
    clock = FakeClock()
    store = LanceStore(tmp_path, clock=clock, matrix_cache_bytes=int((3 + room) * one))
    hybrid_search_many(store, list(vectors), "code", vectors["a"][0], "retry cache", 10)
    held = set(store.matrix_cache.entries)  # the first search reads tables it cannot size yet
    assert len(held) == 3
    before = dataclasses.replace(store.cache_stats)
    for i in range(5):
        clock.now += 5
        hybrid_search_many(store, list(vectors), "code", vectors["d"][i], "parse token", 10)
        assert set(store.matrix_cache.entries) == held
    assert store.cache_stats.loads == before.loads  # nothing loaded again
    assert store.cache_stats.hits - before.hits == 15
    assert store.cache_stats.bypassed - before.bypassed == 15
    assert sum(m.nbytes for m in store.matrix_cache.entries.values()) <= store.matrix_cache_bytes


async def test_a_search_over_every_project_hands_the_reranker_full_texts(tmp_path):
    """The reranker stage reads each hit's whole chunk, whichever project it came from and
    whether the cache holds that project (from memory) or not (from LanceDB)."""
    from fathom.index import search as search_mod

    encoder = HashingEncoder()
    store = LanceStore(tmp_path)
    body = "\n".join(f"    retry the request, attempt {i}" for i in range(20))
    for project in ("held", "other"):
        chunks = [
            Chunk(
                f"src/{project}_{i}.py",
                "python",
                "code",
                1,
                22,
                f"call_{i}",
                f"def call_{i}():\n{body}\n    return {project}_{i}",
            )
            for i in range(6)
        ]
        store.open_table(project, "code", SPACE)
        store.write(project, "code", chunks, await encoder.embed([c.text for c in chunks]), CLEARED)
    one = LanceStore(tmp_path)
    one.vector_search("held", "code", encoder.encode("retry"), 1)
    store = LanceStore(
        tmp_path, matrix_cache_bytes=int(1.5 * next(iter(one.matrix_cache.entries.values())).nbytes)
    )
    store.vector_search("held", "code", encoder.encode("retry"), 1)  # "other" does not fit

    class Service:
        def __init__(self):
            self.store = store

        def searchable(self, project, table):
            return ["held", "other"], []

        def encoder_in(self, space, project):
            return encoder

    cands = await search_mod.candidates(Service(), "retry the request", None, "code", 12)
    assert {c.project for c in cands} == {"held", "other"} and len(cands) == 12
    assert set(store.matrix_cache.entries) == {("held", "code")}
    for c in cands:
        assert c.text.endswith(f"return {c.project}_{c.path[-4]}"), c
        assert c.text.count("\n") == 21


class Reindexing(HashingEncoder):
    """A model (`salt`: another one of the same width, other vectors for the same words);
    while it encodes a query with `then` set, the project is re-indexed by another model and
    promoted (a model change landing in the middle of a search)."""

    def __init__(self, provider_id: str = CLEARED.provider_id, salt: str = "", width: int = WIDTH):
        super().__init__(width=width, provider_id=provider_id)
        self.salt, self.queries, self.then = salt, [], None

    def encode(self, text: str) -> np.ndarray:
        return np.roll(super().encode(text + self.salt), len(self.salt))

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.then is not None:
            then, self.then = self.then, None
            await then()
        self.queries += texts
        return await super().embed(texts)


async def _model_change(store, width=WIDTH):
    """Two models (the second of `width`), the project indexed by the first; a search service
    over it, and `into(space)`: a re-index by that space's model, promoted."""
    first, second = Reindexing(), Reindexing("enc-b", salt=" salt", width=width)
    chunks = await indexed_corpus(store, first)
    first.queries.clear()
    other = Space("code", "other-encoder", width, "enc-b")
    models = {SPACE: first, other: second}

    def into(space):
        async def reindex() -> None:
            store.begin_shadow("p", "code", space)
            vectors = np.stack([models[space].encode(c.text) for c in chunks])
            store.write("p", "code", chunks, vectors, Provenance(space.reference, None), slot=Slot.SHADOW)
            store.promote("p", "code")

        return reindex

    class Service:
        def __init__(self):
            self.store = store

        def searchable(self, project, table):
            return ["p"], []

        def encoder_in(self, space, project):
            return models[space]

    return Service(), first, second, other, into


@pytest.mark.parametrize("project", ["p", None])
async def test_a_query_is_scored_only_against_rows_of_the_space_it_was_encoded_in(store, project):
    """A search reads each project's space once, encodes the query in it, and keeps the
    answer only if that space is still the table's once the store has answered: a project
    re-indexed by another model meanwhile is searched again, its query encoded by the new
    model, never scored with the old model's vector against the new model's rows."""
    from fathom.index import search as search_mod

    service, first, second, other, into = await _model_change(store)
    query = "read the yaml config file"
    first.then = into(other)
    found = await search_mod.candidates(service, query, project, "code", 4)
    assert store.space_of("p", "code") == other
    assert (first.queries, second.queries) == ([query], [query])  # encoded again, by the new model
    again = await search_mod.candidates(service, query, project, "code", 4)
    assert [(h.chunk_id, h.score) for h in found] == [(h.chunk_id, h.score) for h in again]
    assert len(found) == 4 and found.notes == again.notes == []


@pytest.mark.parametrize("project", ["p", None])
async def test_a_model_of_another_width_promoted_mid_search_is_searched_again(store, project):
    """The store refuses a query vector of the old width for the new model's rows; that is
    the same model change, searched again, not an error the caller is told to fix."""
    from fathom.index import search as search_mod

    service, first, second, other, into = await _model_change(store, width=2 * WIDTH)
    query = "read the yaml config file"
    first.then = into(other)
    found = await search_mod.candidates(service, query, project, "code", 4)
    assert (first.queries, second.queries) == ([query], [query])
    assert [h.chunk_id for h in found] == [
        h.chunk_id for h in await search_mod.candidates(service, query, project, "code", 4)
    ]
    second.width = WIDTH  # an encoder of another width than its table's, and no model change:
    with pytest.raises(WidthMismatch):
        await search_mod.candidates(service, query, project, "code", 4)


@pytest.mark.parametrize("project", ["p", None])
async def test_a_project_re_indexed_twice_during_one_search_is_left_out_and_named(store, project):
    from fathom.index import search as search_mod

    service, first, second, other, into = await _model_change(store)
    first.then, second.then = into(other), into(SPACE)
    found = await search_mod.candidates(service, "read the yaml config file", project, "code", 4)
    assert list(found) == [] and found.notes == [
        "left out project 'p': its code table switched to another embedding model while it was "
        "being searched; search again"
    ]
    assert len(await search_mod.candidates(service, "read the yaml config file", project, "code", 4)) == 4


@pytest.mark.parametrize("width", [WIDTH, 2 * WIDTH])
async def test_find_similar_keeps_its_neighbours_only_in_the_space_it_encoded_in(store, width):
    from fathom.index import search as search_mod

    service, first, second, other, into = await _model_change(store, width)

    async def similar() -> list[str]:
        encoder_in = lambda space: service.encoder_in(space, "p")  # noqa: E731
        args = dict(table="code", path=None, line=None, snippet="render an html template", k=2)
        return [h.chunk_id for h in await search_mod.nearest(store, "p", encoder_in=encoder_in, **args)]

    first.then = into(other)
    found = await similar()
    assert (first.queries, second.queries) == (["render an html template"], ["render an html template"])
    assert found == await similar()
    second.then, first.then = into(SPACE), into(other)
    with pytest.raises(StoreError) as raced:
        await similar()
    assert str(raced.value) == (
        "the code table of 'p' switched to another embedding model while it was being searched; search again"
    )


class Untouched:
    """A service the pipeline must not reach: its arguments are refused before any search."""

    def __getattr__(self, name):
        raise AssertionError(f"the pipeline reached the service ({name}) with bad arguments")


@pytest.mark.parametrize(
    "query, table, k, refusal",
    [
        ("", "code", 5, "the search query is empty: give a few words or an identifier"),
        ("  \n\t", "code", 5, "the search query is empty: give a few words or an identifier"),
        ("retry", "tests", 5, "unknown table 'tests': use 'code' or 'docs'"),
        ("retry", "code", 0, "k must be a whole number from 1 to 100, got 0"),
        ("retry", "code", 101, "k must be a whole number from 1 to 100, got 101"),
    ],
)
async def test_every_entry_of_the_pipeline_refuses_bad_arguments_before_searching(query, table, k, refusal):
    from fathom.index import search as search_mod
    from fathom.index.request import SearchRequest

    with pytest.raises(ConfigError) as refused:  # every search's arguments, made into a request
        SearchRequest(query, None, table, k)
    assert str(refused.value) == refusal
    with pytest.raises(ConfigError) as refused:  # the candidates entry (the agents' tools)
        await search_mod.candidates(Untouched(), query, None, table, k)
    assert str(refused.value) == refusal
