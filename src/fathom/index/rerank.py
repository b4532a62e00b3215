"""The reranker stage of the search pipeline (`fathom.index.search.pipeline` runs it).

What it owns: taking the hybrid search's candidates (vector top-k fused with keyword BM25,
`fathom.index.search` and `fathom.index.fusion`), handing their full chunk texts to the reranker role's provider
(`provider.rerank(query, docs)` returns one score per document, in the documents' order), and
ordering the candidates by those scores. The reranker is stateless (it scores a list and
writes nothing), so any provider the router allows may serve: a sidecar's TEI `/rerank`, the
in-process `CosineReranker`, or OpenRouter's `/api/v1/rerank` (default
`qwen/qwen3-reranker-8b`, unpinned) through the key's budget.

When no reranker can serve — none is configured, none is allowed by the policy, or the one
asked failed or answered garbage — search still answers, in retrieval order, and says so:
`Ranking.reranked` is False and `reason` names why. Every hit carries `reranked` too. Where
no reranker is registered and no fleet is configured (`Router.has_fleet`: one machine, no
sidecar, no key), the reason is `NOT_CONFIGURED`, not the route's advice about sidecars and
OpenRouter keys.

It refuses to drop a hit it could not score, to trust a score list of the wrong length or
with non-finite values, to let a reranker failure fail the search, and to search or check a
search's arguments (the pipeline did both before it hands the candidates over).

API:
    await RerankStage(reranker).apply(query, candidates, k, *, project=None) -> Ranking
        (`candidates`: `SearchHit`s best first, each with its full `text`)
    CosineReranker(encoder)       a local Provider scoring by the encoder's cosine
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from fathom.errors import FathomError
from fathom.index.results import Ranking, SearchHit
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.inference.router import Router, call_role
from fathom.roles import Role

NO_CANDIDATES = "no candidates to rerank"
NOT_CONFIGURED = "no reranker is configured for role reranker"

# The reranker reads whole chunks, but one huge chunk must not blow a cloud request's size.
MAX_DOC_CHARS = 4000


class RerankFailed(FathomError):
    """The reranker answered something unusable; search falls back to retrieval order."""


class RerankStage:
    """Rescores candidates with `reranker`: a `Router` (the reranker role's route: policy,
    failover, budget-wrapped cloud providers), a single `Provider`, or None (not configured)."""

    def __init__(self, reranker: Router | Provider | None):
        self.reranker = reranker

    async def apply(
        self, query: str, candidates: Sequence[SearchHit], k: int, *, project: str | None = None
    ) -> Ranking:
        cands = list(candidates)
        if not cands:
            return Ranking([], reranked=False, reason=NO_CANDIDATES)
        if self.reranker is None or self._none_on_one_machine():
            return _unranked(cands, k, NOT_CONFIGURED)
        docs = [c.text[:MAX_DOC_CHARS] for c in cands]
        try:
            scores, provider_id = await self._score(query, docs, project)
            _check_scores(scores, len(docs), provider_id)
        except FathomError as exc:
            # A reranker is an improvement, never a precondition: search still answers.
            return _unranked(cands, k, f"not reranked: {exc}")
        order = sorted(range(len(cands)), key=lambda i: -scores[i])  # stable: ties keep retrieval order
        hits = [
            replace(
                cands[i],
                score=round(float(scores[i]), 6),
                reranked=True,
                retrieval_score=cands[i].score,
                rerank_score=float(scores[i]),
                retrieval_rank=i + 1,
            )
            for i in order[:k]
        ]
        return Ranking(hits, reranked=True, reranker=provider_id, candidates=len(cands))

    def _none_on_one_machine(self) -> bool:
        """No reranker registered and no fleet: the route's refusal would tell a user of one
        machine to start a sidecar or push an OpenRouter key; "not configured" is the truth."""
        router = self.reranker
        return (
            isinstance(router, Router) and not router.registry.list(Role.RERANKER) and not router.has_fleet()
        )

    async def _score(self, query: str, docs: list[str], project: str | None) -> tuple[list[float], str]:
        if isinstance(self.reranker, Router):
            served = await call_role(
                self.reranker, Role.RERANKER, lambda p: p.rerank(query, docs), project=project
            )
            return list(served.value), served.provider.id
        assert self.reranker is not None
        return list(await self.reranker.rerank(query, docs)), self.reranker.id


def _check_scores(scores: list[float], n: int, provider_id: str) -> None:
    if len(scores) != n:
        raise RerankFailed(f"reranker {provider_id} returned {len(scores)} scores for {n} documents")
    bad = [i for i, s in enumerate(scores) if not isinstance(s, (int, float)) or not math.isfinite(s)]
    if bad:
        raise RerankFailed(f"reranker {provider_id} returned non-finite scores at {bad[:5]}")


def _unranked(cands: list[SearchHit], k: int, reason: str) -> Ranking:
    hits = [
        replace(c, reranked=False, retrieval_score=c.score, retrieval_rank=i + 1)
        for i, c in enumerate(cands[:k])
    ]
    return Ranking(hits, reranked=False, reason=reason, candidates=len(cands))


# --------------------------------------------------------------------------- a local backend


class CosineReranker(Provider):
    """A local reranker from any embedding provider: score = cosine(query, document).

    It is a bi-encoder, not a cross-encoder, so it is weaker than a real reranker; it gives
    the stage a local backend that needs no extra model and no network (the embedded default
    and tests). A sidecar's TEI `/rerank` is the local backend meant for production."""

    def __init__(self, encoder: Provider, *, provider_id: str | None = None):
        self.encoder = encoder
        self.info = ProviderInfo(
            id=provider_id or f"rerank-cosine:{encoder.id}",
            kind=Kind.LOCAL,
            roles=frozenset({Role.RERANKER}),
            model=encoder.info.model,
            width=None,
            host=encoder.info.host,
        )

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        vecs = np.asarray(await self.encoder.embed([query, *documents]), dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1)
        norms[norms == 0] = 1.0
        unit = vecs / norms[:, None]
        return [float(s) for s in unit[1:] @ unit[0]]
