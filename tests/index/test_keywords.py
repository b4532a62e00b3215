"""The in-memory keyword index ranks as LanceDB's full-text search does.

A table the matrix cache holds answers its keyword half from `fathom.index.keywords`; one it
does not hold, from LanceDB. Both must give the same scores, or a project's ranking would
change with the cache's mood, and a search over all projects (which pools BM25 scores across
projects) would mix two scales. Checked here on real code: Fathom's own sources, cut by the
real chunker, written through the real store path."""

from __future__ import annotations

from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pytest

import fathom
from fathom.index.chunking import chunk_file
from fathom.index.filters import SearchFilter
from fathom.index.keywords import STOP_WORDS, KeywordIndex, terms
from fathom.index.store import LanceStore, Slot
from tests.index.store_fixtures import CLEARED, SPACE, WIDTH

QUERIES = [
    "parse the query string",  # stop words between stems
    "retries",
    "retry",
    "retrying",  # one stem, three spellings
    "QueryShape",  # camelCase: its parts are in the keywords column
    "getUserName",  # one word in the query: not split
    "getusername_nowhere",  # in no chunk: nothing, from both
    "matrix_cache_bytes",  # snake_case: three tokens
    "how does the cache evict a table when it is full",
    "WidthMismatch vector width",
    "atomic_write_text rename",
    "café naïve résumé",  # accents fold to ASCII
    "x" * 39 + " store",  # 39 bytes: indexed; 40 and more: not
    "store store store",  # a repeated word counts each time
    "utf 8 decode errors replace",
    "ourselves themselves because",  # stemmed before the stop-word check: kept
    "the and of",  # nothing but stop words
    "don't retry: it's not ready",  # stop words before LanceDB 0.41, words since
]


def _chunks():
    root = Path(fathom.__file__).parent
    chunks = []
    for path in sorted((root / "index").rglob("*.py")):
        chunks += [c for c in chunk_file(str(path.relative_to(root)), path.read_text()) if c.table == "code"]
    extra = chunk_file(
        "extra/accents.py", "def café():\n    return 'naïve résumé' # " + "x" * 39 + " " + "y" * 40 + "\n"
    )
    return chunks + extra


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """One real LanceDB table of Fathom's own code, and two stores over it: one whose cache
    holds it (keyword half in memory), one with no cache (keyword half by LanceDB)."""
    root = tmp_path_factory.mktemp("kw")
    writer = LanceStore(root)
    chunks = _chunks()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(chunks), WIDTH)).astype(np.float32)
    writer.begin_shadow("p", "code", SPACE)
    writer.write("p", "code", chunks, vectors, CLEARED, slot=Slot.SHADOW)
    writer.promote("p", "code")
    cached = LanceStore(root)
    cached.vector_search("p", "code", vectors[0], 1)  # loads the table and its keyword index
    assert cached.matrix_cache.entries[("p", "code")].keywords is not None
    return cached, LanceStore(root, matrix_cache_bytes=0), len(chunks)


def _ranked(hits):
    return [(h.chunk_id, h.score) for h in hits]


def _agree(memory, lance, query):
    """Same scores at every place; the same chunks wherever a score is not tied (LanceDB
    orders equal scores its own way)."""
    assert len(memory) == len(lance), query
    for (_mid, ms), (_lid, ls) in zip(memory, lance, strict=True):
        assert _same(ms, ls), query
    # Ties are found within the tolerance, never by rounding: two float32 sums of one score
    # can round to either side of a last digit.
    cut = lance[-1][1] if lance else None
    for cid, s in memory:
        if cut is None or not _same(s, cut):  # a tie across the cut may keep other members
            assert cid in {lid for lid, ls in lance if _same(s, ls)}, (query, cid)


def _same(a: float, b: float) -> bool:
    return bool(a == pytest.approx(b, rel=1e-5, abs=1e-6))


@pytest.mark.parametrize("query", QUERIES)
def test_the_keyword_half_scores_as_lancedb_does(tables, query):
    cached, uncached, _ = tables
    memory = _ranked(cached.text_search("p", "code", query, 20))
    lance = _ranked(uncached.text_search("p", "code", query, 20))
    assert uncached.matrix_cache.entries == {}  # really LanceDB's answer
    _agree(memory, lance, query)
    if query not in ("the and of", "getusername_nowhere"):
        assert memory, query  # every other query finds something in Fathom's own code


def test_a_filter_applies_before_the_top_k_in_both(tables):
    cached, uncached, _ = tables
    where = SearchFilter.of(path="index/s*.py")
    for query in ("store table", "cache bytes", "search query"):
        memory = cached.text_search("p", "code", query, 15, where=where)
        lance = uncached.text_search("p", "code", query, 15, where=where)
        assert memory and all(h.path.startswith("index/s") for h in memory)
        _agree(_ranked(memory), _ranked(lance), query)


def test_terms_follow_the_index_tokenizer():
    assert terms("The Retrying parsers, getUserName!") == ["retri", "parser", "getusernam"]
    assert terms("ourselves") == ["ourselv"]  # stop words are matched after stemming
    assert terms("a" * 39 + " " + "b" * 40) == ["a" * 39]
    assert terms("Café") == ["cafe"]


# What LanceDB's own list dropped before 0.41 besides the product's: negations and the pieces
# of English contractions.
NEGATIONS = """
    no nor not s t don d ll m o ve y ain aren couldn didn doesn hadn hasn haven isn ma
    mightn mustn needn shan shouldn wasn weren won wouldn
""".split()


def _left_out(tmp_path, words: list[str]) -> set[str]:
    """The words a keyword index the store would build never finds, each indexed alone."""
    from fathom.index.store.lance_tables import fts_config

    table = lancedb.connect(tmp_path).create_table(
        "t", pa.table({"id": list(range(len(words))), "text": [f"{w} filler" for w in words]})
    )
    table.create_index("text", config=fts_config())
    return {
        word
        for i, word in enumerate(words)
        if i not in table.search(word, query_type="fts").limit(len(words)).to_arrow()["id"].to_pylist()
    }


def test_the_keyword_index_leaves_out_exactly_the_products_stop_words(tmp_path, monkeypatch):
    """The store hands LanceDB the product's stop words (`custom_stop_words`), so a table's
    keyword half finds the same words whichever LanceDB release built it (0.41's own list
    stopped dropping negations): in a real LanceDB table built as the store builds one, the
    words its full-text search never finds are exactly those `terms` drops."""
    from fathom.index.store import lance_tables

    words = sorted(STOP_WORDS | set(NEGATIONS) | {"ourselves", "themselves", "retry", "nothing", "very"})
    assert _left_out(tmp_path / "a", words) == {w for w in words if not terms(w)}
    assert terms("not") == ["not"] and terms("don't") == ["don", "t"]  # negations are searchable
    # The index takes its list from the product, not from the release: one word more, left out.
    monkeypatch.setattr(lance_tables, "STOP_WORDS", STOP_WORDS | {"retri"})
    assert _left_out(tmp_path / "b", words) == {w for w in words if not terms(w)} | {"retry"}


def test_an_index_over_no_rows_or_no_words_finds_nothing():
    for texts in ([], ["", None, "the of and"]):
        index = KeywordIndex.build(texts)
        rows, scores = index.search("anything the", 5)
        assert len(rows) == len(scores) == 0
