"""Fusion of the vector and keyword rankings: the query's shape, the convex combination, the
boosts for named symbols and paths, the first window of a long definition, and why each hit
ranked. Pure functions over `Hit` lists; the same rules through real stores are in
test_store_conformance.py, and over MCP in test_mcp.py."""

from __future__ import annotations

import pytest

from fathom.index import fusion
from fathom.index.fusion import fuse, query_shape, rrf_fuse
from fathom.index.store import Hit


def hit(cid: str, score: float, *, path: str | None = None, symbol: str | None = None, start: int = 1) -> Hit:
    return Hit(
        chunk_id=cid,
        path=path or f"pkg/{cid}.py",
        start_line=start,
        end_line=start + 9,
        symbol=symbol,
        language="python",
        score=score,
        snippet="",
        provider_id="p",
    )


def ids(hits) -> list[str]:
    return [h.chunk_id for h in hits]


# ---------------------------------------------------------------- the query's shape


@pytest.mark.parametrize(
    "query",
    [
        "python check if a string is a number",
        "how do I retry a request after a timeout",
        "it's the object's class (or the object itself)",  # apostrophes are not quotes
        "read a file line by line",
        "python function to read a csv file",  # "function" introduces no name
        "a class of problems",
    ],
)
def test_plain_language_leans_on_vectors(query):
    shape = query_shape(query)
    assert not shape.is_code and not shape.names and not shape.paths
    assert shape.keyword_weight == fusion.NATURAL_WEIGHT


@pytest.mark.parametrize(
    "query,names",
    [
        ("build_request", {"build_request"}),
        ("`raise_for_status`", {"raise_for_status"}),
        ("HTTPTransport.handle_request", {"httptransport", "handle_request"}),
        ("where is `Retry-After` parsed", {"retry", "after"}),
        ("Retry-After header", {"retry", "after"}),
        ("getUserName", {"getusername"}),
        ("class Timeout", {"timeout"}),
        ("confirm", {"confirm"}),  # one word typed into a code search is a name
        ('the "NO_PROXY" variable', {"no_proxy"}),
        ("parse_date()", {"parse_date"}),
    ],
)
def test_code_leans_on_keywords_and_names_what_it_spells(query, names):
    shape = query_shape(query)
    assert shape.is_code and shape.keyword_weight == fusion.CODE_WEIGHT
    assert shape.names == names


def test_paths_are_read_as_paths():
    shape = query_shape("_transports/default.py AsyncHTTPTransport")
    assert shape.paths == ("_transports/default.py",)
    assert shape.names == {"asynchttptransport"}
    assert query_shape("where is config.toml read").paths == ("config.toml",)


def test_a_sentence_mentioning_a_name_gets_a_smaller_boost_than_a_lookup():
    lookup = query_shape("`parse_expression`")
    sentence = query_shape("works like `parse_expression` but a comma makes a tuple node")
    assert lookup.name_weight == 1.0
    assert 0 < sentence.name_weight < 0.5


# ---------------------------------------------------------------- the combination


def test_natural_language_keeps_a_clear_vector_first():
    # The vector half is sure of `a`; the keyword half prefers `b`, which the vector half
    # ranks second. RRF lets that agreement overturn the vector's clear first; fuse does not.
    vector = [hit("a", 0.82), hit("b", 0.61), hit("c", 0.60), hit("d", 0.40)]
    text = [hit("b", 7.5), hit("e", 6.0), hit("c", 2.0)]
    query = "remove html tags from a string"
    assert ids(rrf_fuse([vector, text]))[0] == "b"
    assert ids(fuse(vector, text, query))[:3] == ["a", "b", "c"]


def test_keywords_break_near_ties_in_natural_language():
    vector = [hit("a", 0.700), hit("b", 0.699), hit("c", 0.40)]
    text = [hit("b", 5.0), hit("c", 1.0)]
    assert ids(fuse(vector, text, "strip the tags out of some text"))[:2] == ["b", "a"]


def test_identifier_queries_lean_on_the_keyword_half():
    vector = [hit("a", 0.80), hit("b", 0.75), hit("c", 0.50)]
    text = [hit("c", 9.0), hit("b", 2.0)]
    # c is last for the vectors but first by far for the keywords: a code query trusts that.
    assert ids(fuse(vector, text, "frobnicate_registry"))[0] == "c"
    assert ids(fuse(vector, text, "a registry that frobnicates"))[0] == "a"


def test_every_hit_of_either_list_is_kept_once_and_one_empty_list_is_fine():
    vector = [hit("a", 0.9), hit("b", 0.8)]
    text = [hit("b", 3.0), hit("c", 1.0)]
    assert sorted(ids(fuse(vector, text, "q"))) == ["a", "b", "c"]
    assert ids(fuse(vector, [], "a question")) == ["a", "b"]
    assert ids(fuse([], text, "b_c")) == ["b", "c"]
    assert fuse([], [], "anything") == []
    assert ids(fuse(vector, text, "q", limit=1)) == ids(fuse(vector, text, "q"))[:1]


# ---------------------------------------------------------------- names and paths


def test_a_query_naming_a_function_finds_its_definition_first():
    # The definition is last in both lists (callers mention the name more often).
    vector = [hit("caller1", 0.7), hit("caller2", 0.69), hit("def", 0.5, symbol="Client.build_request")]
    text = [hit("caller2", 8.0), hit("caller1", 7.5), hit("def", 3.0, symbol="Client.build_request")]
    for query in (
        "build_request",
        "`build_request`",
        "Client.build_request",
        "where is build_request defined",
    ):
        top = fuse(vector, text, query)[0]
        assert (top.chunk_id, top.match) == ("def", "symbol"), query


def test_the_more_specific_definition_wins():
    cands = [
        hit("base", 0.9, symbol="BaseTransport.handle_request"),
        hit("cls", 0.85, symbol="HTTPTransport"),
        hit("meth", 0.5, symbol="HTTPTransport.handle_request"),
        hit("other", 0.8, symbol="HTTPTransport.close"),
    ]
    # Both parts named beats one; a method of another class named only by its own name, and
    # the class itself, follow; a method whose own name is not in the query is not boosted.
    assert ids(fuse(cands, [], "HTTPTransport.handle_request")) == ["meth", "base", "cls", "other"]
    basic = [
        hit("digest", 0.9, symbol="DigestAuth._build_auth_header"),
        hit("basic", 0.6, symbol="BasicAuth._build_auth_header"),
    ]
    assert ids(fuse(basic, [], "basic auth `_build_auth_header`"))[0] == "basic"


def test_plain_words_name_no_definition():
    vector = [hit("a", 0.9, symbol="load_theme"), hit("b", 0.5, symbol="read")]
    fused = fuse(vector, [], "read a theme file")
    assert ids(fused)[0] == "a" and all(h.match is None for h in fused)


def test_a_named_file_comes_first_and_a_named_file_and_symbol_first_of_all():
    vector = [
        hit("x", 0.9, path="httpx/_client.py", symbol="AsyncHTTPTransport"),
        hit("y", 0.8, path="httpx/_transports/default.py", symbol="HTTPTransport"),
        hit("z", 0.4, path="httpx/_transports/default.py", symbol="AsyncHTTPTransport"),
    ]
    fused = fuse(vector, [], "_transports/default.py AsyncHTTPTransport")
    assert [(h.chunk_id, h.match) for h in fused] == [("z", "symbol+path"), ("x", "symbol"), ("y", "path")]


def test_the_first_window_of_a_long_definition_is_shown_first():
    # A long function cut into windows: the second window matched better, but the first
    # holds the signature, so it takes the group's best score and comes first.
    vector = [
        hit("w2", 0.9, path="m.py", symbol="style", start=40),
        hit("other", 0.8),
        hit("w1", 0.5, path="m.py", symbol="style", start=1),
    ]
    fused = fuse(vector, [], "format text with colours")
    assert ids(fused)[:2] == ["w1", "w2"]
    assert fused[0].score == fused[1].score


def test_each_hit_says_why_it_ranked():
    vector = [hit("a", 0.9), hit("b", 0.5, symbol="parse_date")]
    text = [hit("b", 4.0)]
    by_id = {h.chunk_id: h for h in fuse(vector, text, "parse_date")}
    b, a = by_id["b"], by_id["a"]
    assert (b.vector_rank, b.text_rank, b.vector_score, b.text_score, b.match) == (2, 1, 0.5, 4.0, "symbol")
    assert (a.vector_rank, a.text_rank, a.text_score, a.match) == (1, None, None, None)
    assert b.score > 1 > a.score >= 0
