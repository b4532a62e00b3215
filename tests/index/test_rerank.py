"""The reranker stage: hybrid candidates rescored by the reranker role, or flagged as not.

Real path: a real indexed project (LanceDB + MiniLM), the real Router, a budgeted OpenRouter
route to the emulator's /api/v1/rerank (real MiniLM scores over HTTP), and the in-process
cosine reranker. Fakes appear only at the Provider cut-off, for answers no real backend gives.
"""

from __future__ import annotations

import math

import pytest

from fathom.index import search
from fathom.index.request import SearchRequest
from fathom.index.rerank import CosineReranker, RerankStage
from fathom.inference.budget import CloudBudget
from fathom.inference.openrouter import OpenRouterClient
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.policy import Policy
from fathom.roles import DEFAULTS, FallbackMode, Role
from tests.agents.agents_fixtures import TEST_KEY, cloud, make_router, routing

# Keyword matches pull a chunk up in the fused ranking that the semantic scorer puts lower,
# so the reranker visibly reorders this one (checked below, not assumed).
QUERY = "cart items total"


def key(h) -> tuple[str, int, int]:
    return (h.path, h.start_line, h.end_line)


async def test_cloud_reranker_orders_by_the_emulators_scores(indexed_shop, emulator):
    fathom, project = indexed_shop.fathom, indexed_shop.project
    budget = CloudBudget()
    router = make_router(
        routing(reranker=(Policy.CLOUD, FallbackMode.ANY)), [cloud(emulator, Role.RERANKER, budget)]
    )

    # A result per chunk: the reranker's order, chunk by chunk.
    results = await search.pipeline(
        fathom, SearchRequest(QUERY, project, "code", 5, group="chunk"), reranker=router
    )

    assert results.reranked and results.reason is None
    assert results.reranker == f"openrouter:{DEFAULTS[Role.RERANKER].model}@any"  # unpinned
    assert all(h.reranked for h in results.hits)
    assert budget.state().granted_total == 1  # the cloud call took a permit

    # The emulator's own scores for the same candidates, asked directly.
    cands = await search.candidates(fathom, QUERY, project, "code", results.candidates)
    async with OpenRouterClient(TEST_KEY, base_url=emulator.base_url) as client:
        ranked = await client.rerank(DEFAULTS[Role.RERANKER].model, QUERY, [c.text for c in cands])
    scores = dict(ranked)
    expected = sorted(range(len(cands)), key=lambda i: -scores[i])[:5]
    assert [key(h) for h in results.hits] == [key(cands[i]) for i in expected]
    assert [h.rerank_score for h in results.hits] == pytest.approx([scores[i] for i in expected])
    # It really reordered: the retrieval ranks are not 1..5 in order.
    assert [h.retrieval_rank for h in results.hits] != sorted(h.retrieval_rank for h in results.hits)
    assert emulator.control.counters()["served"]["rerank"] == 2


async def test_no_reranker_configured_still_answers_in_retrieval_order(indexed_shop):
    fathom, project = indexed_shop.fathom, indexed_shop.project
    results = await search.pipeline(
        fathom, SearchRequest(QUERY, project, "code", 5, group="chunk"), reranker=None
    )
    assert not results.reranked
    assert "no reranker is configured" in results.reason
    assert [h.retrieval_rank for h in results.hits] == [1, 2, 3, 4, 5]
    assert [h.reranked for h in results.hits] == [False] * 5
    plain = await fathom.search(QUERY, project, "code", k=5, group="chunk")
    assert [key(h) for h in results.hits] == [key(h) for h in plain]
    d = results.as_dict()
    assert d["reranked"] is False and all(h["reranked"] is False for h in d["hits"])


async def test_no_reranker_allowed_by_the_policy_is_flagged(indexed_shop, emulator):
    # Policy local, only a cloud route registered: nothing may serve, nothing is sent.
    budget = CloudBudget()
    router = make_router(
        routing(reranker=(Policy.LOCAL, FallbackMode.ANY)), [cloud(emulator, Role.RERANKER, budget)]
    )
    results = await search.pipeline(
        indexed_shop.fathom, SearchRequest(QUERY, indexed_shop.project, "code", 3), reranker=router
    )
    assert not results.reranked and len(results.hits) == 3
    assert "no provider can serve role reranker under policy local" in results.reason
    assert emulator.control.counters()["requests"].get("rerank", 0) == 0


async def test_a_failing_cloud_reranker_is_flagged_not_fatal(indexed_shop, emulator):
    emulator.control.fail(status=502, count=None, endpoints=["rerank"])
    router = make_router(
        routing(reranker=(Policy.CLOUD, FallbackMode.ANY)), [cloud(emulator, Role.RERANKER, CloudBudget())]
    )
    results = await search.pipeline(
        indexed_shop.fathom, SearchRequest(QUERY, indexed_shop.project, "code", 3), reranker=router
    )
    assert not results.reranked and len(results.hits) == 3
    assert "502" in results.reason and results.reason.startswith("not reranked:")


async def test_backup_fails_over_from_a_failing_local_to_the_cloud(indexed_shop, emulator):
    from fathom.errors import ProviderUnavailable

    class DownLocal(Provider):
        info = ProviderInfo(
            id="sidecar:gpu-1:reranker:local",
            kind=Kind.LOCAL,
            roles=frozenset({Role.RERANKER}),
            model="tei",
            host="gpu-1",
        )

        async def rerank(self, query, documents):
            raise ProviderUnavailable("sidecar gpu-1 is not connected")

    router = make_router(
        routing(reranker=(Policy.BACKUP, FallbackMode.ANY)),
        [DownLocal(), cloud(emulator, Role.RERANKER, CloudBudget())],
    )
    results = await search.pipeline(
        indexed_shop.fathom, SearchRequest(QUERY, indexed_shop.project, "code", 3), reranker=router
    )
    assert results.reranked and results.reranker.startswith("openrouter:")


async def test_local_cosine_reranker_through_the_router(indexed_shop, local_encoder, emulator):
    local = CosineReranker(local_encoder)
    router = make_router(routing(reranker=(Policy.AGGREGATE, FallbackMode.ANY)), [local])
    results = await search.pipeline(
        indexed_shop.fathom,
        SearchRequest("verify a password", indexed_shop.project, "code", 4),
        reranker=router,
    )
    assert results.reranked and results.reranker == local.id
    scores = [h.rerank_score for h in results.hits]
    assert scores == sorted(scores, reverse=True)
    assert results.hits[0].path == "auth/password.py"
    assert emulator.control.counters()["requests"] == {}


class Garbage(Provider):
    info = ProviderInfo(
        id="local:garbage", kind=Kind.LOCAL, roles=frozenset({Role.RERANKER}), model="garbage"
    )

    def __init__(self, scores):
        self.scores = scores

    async def rerank(self, query, documents):
        return self.scores(len(documents))


@pytest.mark.parametrize(
    "scores, why",
    [
        (lambda n: [1.0] * (n - 1), "scores for"),
        (lambda n: [math.nan] * n, "non-finite"),
    ],
)
async def test_unusable_scores_are_refused(indexed_shop, scores, why):
    cands = await search.candidates(indexed_shop.fathom, QUERY, indexed_shop.project, "code", 6)
    results = await RerankStage(Garbage(scores)).apply(QUERY, cands, 4)
    assert not results.reranked and why in results.reason
    assert [h.retrieval_rank for h in results.hits] == [1, 2, 3, 4]


async def test_candidates_carry_full_chunk_texts(indexed_shop):
    cands = await search.candidates(indexed_shop.fathom, "verify a password", indexed_shop.project, "code", 5)
    top = next(c for c in cands if c.path == "auth/password.py" and c.start_line == 15)
    assert "compare_digest" in top.text
    assert top.text.count("\n") >= top.end_line - top.start_line - 1
