"""Code-aware ranking and answers that spend their places on different files.

The stage's rules on hand-made hits (`fathom.index.ranking`): what a file is (tests, examples,
vendored, generated, data), a file the query names lifted, several hits lifting their file,
ties broken by path and line whatever order the store gave. Then the real path on a real
project (a copy of httpx's sources, indexed with the real MiniLM): the order is a function of
the query and the index, not of `k` (the first k results of any answer are the first k of a
longer one, over many questions and k, per file and per chunk), and the default answer's top
five are five different files.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.index import search
from fathom.index.fusion import query_shape
from fathom.index.ranking import asks_action, by_file, file_role, name_lift, name_share, rank
from fathom.index.request import SearchRequest
from fathom.index.store import Hit
from fathom.service import Fathom


def hit(path: str, score: float, line: int = 1, symbol: str | None = None) -> Hit:
    return Hit(
        chunk_id=f"{path}:{line}",
        path=path,
        start_line=line,
        end_line=line + 9,
        symbol=symbol,
        language="python",
        score=score,
        snippet="",
        provider_id="p",
        project="p",
    )


@pytest.mark.parametrize(
    "path,role",
    [
        ("src/retry.py", None),
        ("lib/router.go", None),
        ("tests/test_retry.py", "test"),
        ("pkg/retry_test.go", "test"),
        ("web/app.spec.ts", "test"),
        ("src/__tests__/a.js", "test"),
        ("conftest.py", "test"),
        ("examples/basic.py", "example"),
        ("docs_src/tutorial.py", "example"),
        ("vendor/github.com/x/y.go", "vendored"),
        ("node_modules/a/index.js", "vendored"),
        ("api/service_pb2.py", "generated"),
        ("dist/app.min.js", "generated"),
        ("routes.json", "data"),
        ("config/app.yaml", "data"),
        ("Cargo.lock", "data"),
        ("testing.py", None),
        ("contest.py", None),
        ("latest.py", None),
    ],
)
def test_what_a_file_is(path: str, role: str | None):
    assert file_role(path) == role


def test_a_test_or_data_file_ranks_below_the_code_unless_the_question_asks_for_it():
    pool = [hit("tests/test_router.py", 0.9), hit("routes.json", 0.88), hit("src/dispatch.py", 0.8)]
    plain = rank(pool, query_shape("dispatch a request to its handler"))
    assert plain[0].path == "src/dispatch.py"
    asked = rank(pool, query_shape("tests for dispatching a request"))
    assert asked[0].path == "tests/test_router.py"
    assert {h.path for h in plain} == {h.path for h in pool}  # demoted, never dropped


def test_a_file_the_question_names_is_lifted_by_its_words_either_way():
    shape = query_shape("how is the retry policy applied")
    assert name_share("src/retry_policy.py", shape) == 1.0
    assert name_share("src/RetryPolicy.java", query_shape("RetryPolicy")) == 1.0
    assert name_share("src/retry_policy.py", query_shape("retry_policy")) == 1.0
    assert name_share("src/index.js", query_shape("index the files")) == 0.0  # carries no name
    pool = [hit("src/backoff.py", 0.82), hit("src/retry_policy.py", 0.8)]
    assert rank(pool, shape)[0].path == "src/retry_policy.py"


def test_a_question_asking_for_an_action_lifts_a_file_by_the_share_of_it_the_name_holds():
    # An action asked for ("convert ...") describes a function, wherever it lives: "url" is
    # one word of seven, and `url.py` gets a seventh of the lift; the answer in `utils.py`,
    # which no word names, keeps its place.
    action = query_shape("convert a unicode url to an ascii percent encoded string")
    assert asks_action(action) and asks_action(query_shape("Returns the charset of a response"))
    assert name_share("util/url.py", action) == 1.0
    assert name_lift("util/url.py", action) == pytest.approx(0.5 / 7)
    pool = [hit("util/url.py", 0.7), hit("requests/utils.py", 0.8)]
    assert rank(pool, action)[0].path == "requests/utils.py"
    # A question about a subject is answered by the file named after it: the whole lift.
    for subject in (
        "how are urls parsed and joined",
        "url parsing and percent encoding",
        "Response type and HTTP response construction",
    ):
        assert not asks_action(query_shape(subject))
    assert name_lift("util/url.py", query_shape("url parsing and percent encoding")) == 0.5
    assert rank(pool, query_shape("url parsing and percent encoding"))[0].path == "util/url.py"
    # Words as often nouns in code open a subject: "test runner output", "store enhancers".
    assert not asks_action(query_shape("test runner output"))
    assert not asks_action(query_shape("store enhancers and middleware"))


def test_several_hits_lift_their_file():
    pool = [hit("a.py", 0.80), hit("b.py", 0.79, 1), hit("b.py", 0.75, 20), hit("b.py", 0.7, 40)]
    ranked = rank(pool, query_shape("something plain"))
    assert [f.best.path for f in by_file(ranked)] == ["b.py", "a.py"]


def test_ties_are_broken_by_path_and_line_whatever_order_the_store_gave():
    pool = [hit(f"m{i % 7}.py", 0.5, line=i) for i in range(40)]
    orders = set()
    for seed in range(10):
        shuffled = pool[:]
        random.Random(seed).shuffle(shuffled)
        orders.add(tuple(h.chunk_id for h in rank(shuffled, query_shape("x y z"))))
    assert len(orders) == 1


def test_by_file_keeps_each_files_best_and_its_other_ranges_in_order():
    ranked = [hit("a.py", 0.9, 1), hit("b.py", 0.8, 1), hit("a.py", 0.7, 30), hit("a.py", 0.6, 60)]
    files = by_file(ranked)
    assert [f.best.chunk_id for f in files] == ["a.py:1", "b.py:1"]
    assert [o.start_line for o in files[0].others] == [30, 60]
    assert by_file(ranked, others=1)[0].others == (ranked[2],)


QUESTIONS = [
    "follow redirects",
    "send a request with a timeout",
    "basic authentication",
    "digest auth challenge",
    "parse a url",
    "encode query parameters",
    "stream the response",
    "decode gzip content",
    "cookies jar",
    "connection pool limits",
    "proxy configuration",
    "retry on connect error",
    "multipart form upload",
    "raise for status",
    "event hooks",
    "Client.send",
    "HTTPStatusError",
    "build_request",
    "transport mounts",
    "read the body",
]


@pytest.fixture(scope="module")
def httpx_index(tmp_path_factory, local_encoder):
    import asyncio

    import httpx

    tmp = tmp_path_factory.mktemp("ranking")
    root = Path(shutil.copytree(Path(httpx.__file__).parent, tmp / "httpx"))
    fathom = Fathom(Settings(data_dir=tmp / "data"), encoder=local_encoder)
    asyncio.run(fathom.index(root, "httpx"))
    return fathom


@pytest.mark.slow
async def test_the_order_does_not_depend_on_k(httpx_index):
    for group in ("file", "chunk"):
        for question in QUESTIONS:
            longest = await search.pipeline(
                httpx_index, SearchRequest(question, "httpx", "code", 50, group=group)
            )
            ids = [(h.path, h.start_line) for h in longest.hits]
            for k in (1, 2, 3, 5, 10, 20):
                got = await search.pipeline(
                    httpx_index, SearchRequest(question, "httpx", "code", k, group=group)
                )
                assert [(h.path, h.start_line) for h in got.hits] == ids[:k], (group, question, k)
            plain = await search.retrieve(
                httpx_index, SearchRequest(question, "httpx", "code", 7, group=group)
            )
            assert [(h.path, h.start_line) for h in plain] == ids[:7], (group, question)


@pytest.mark.slow
async def test_the_default_answer_spends_its_top_five_on_five_files(httpx_index):
    for question in QUESTIONS:
        found = await search.pipeline(httpx_index, SearchRequest(question, "httpx", "code", 10))
        paths = [h.path for h in found.hits]
        assert len(set(paths)) == len(paths) and len(paths) >= 5, (question, paths)
        chunks = await search.pipeline(
            httpx_index, SearchRequest(question, "httpx", "code", 100, group="chunk")
        )
        # The file's other chunks of the ranking travel with it, best first, none repeated.
        for h in found.hits:
            mine = [(c.start_line, c.end_line) for c in chunks.hits if c.path == h.path]
            assert mine[0] == (h.start_line, h.end_line)
            assert [(a, b) for a, b, _, _ in h.others] == mine[1 : 1 + len(h.others)]


async def test_a_group_that_is_not_file_or_chunk_is_refused(httpx_index):
    with pytest.raises(ConfigError, match="group must be one of file, chunk"):
        SearchRequest("x", "httpx", "code", 5, group="line")
