"""The reranker stage of the search pipeline.

What it owns: taking the hybrid search's candidates (vector top-k fused with keyword BM25,
`fathom.index.search` and `fathom.index.fusion`), handing their full chunk texts to the reranker role's provider
(`provider.rerank(query, docs)` returns one score per document, in the documents' order), and
ordering the candidates by those scores. The reranker is stateless (it scores a list and
writes nothing), so any provider the router allows may serve: a sidecar's TEI `/rerank`, the
in-process `CosineReranker`, or OpenRouter's `/api/v1/rerank` (default
`qwen/qwen3-reranker-8b`, unpinned) through the key's budget.

When no reranker can serve — none is configured, none is allowed by the policy, or the one
asked failed or answered garbage — search still answers, in retrieval order, and says so:
`SearchResults.reranked` is False and `reason` names why. Every hit carries `reranked` too.

It refuses to drop a hit it could not score, to trust a score list of the wrong length or
with non-finite values, and to let a reranker failure fail the search.

API:
    await search(fathom, query, project=None, table="code", k=10, *, reranker=None,
                 depth=None) -> SearchResults
    await RerankStage(reranker).apply(query, candidates, k, *, project=None) -> SearchResults
    CosineReranker(encoder)       a local Provider scoring by the encoder's cosine
"""

from __future__ import annotations

import asyncio
import functools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Sequence

import numpy as np

from fathom.errors import ConfigError, FathomError, StoreError
from fathom.index import search as search_mod
from fathom.index.filters import SearchFilter
from fathom.index.results import Noted, SearchHit, check_k, check_table, skipped_note
from fathom.index.store import DamagedProject, Store
from fathom.inference.calls import call_role
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.inference.router import Router
from fathom.roles import Role


class Searchable(Protocol):
    """What the pipeline needs of the service (`fathom.service.Fathom`): the store as the
    caller sees it, the projects a search reads, and each table's query encoder. Named here so
    that retrieval does not import the service above it."""

    @property
    def store(self) -> Store: ...

    def searchable(self, project: str | None, table: str) -> tuple[list[str], list[str]]: ...

    def encoder_for(self, table: str, project: str | None = None) -> Provider: ...

# The reranker reads whole chunks, but one huge chunk must not blow a cloud request's size.
MAX_DOC_CHARS = 4000
MAX_DEPTH = 100


class RerankFailed(FathomError):
    """The reranker answered something unusable; search falls back to retrieval order."""


@dataclass(frozen=True)
class Candidate:
    hit: SearchHit
    text: str  # the full chunk text the reranker reads (the snippet when the store has none)


@dataclass(frozen=True)
class RankedHit:
    hit: SearchHit  # `score` is the rerank score when reranked, else the retrieval score
    reranked: bool
    retrieval_score: float
    rerank_score: float | None = None
    retrieval_rank: int = 0  # 1-based position before reranking
    text: str = field(default="", repr=False)  # the chunk text that was scored; not sent out

    def __getattr__(self, name: str) -> Any:
        # A ranked hit reads like its hit (path, start_line, snippet...), so tools take either.
        if name == "hit":
            raise AttributeError(name)
        return getattr(self.hit, name)

    def as_dict(self) -> dict[str, Any]:
        return self.hit.as_dict() | {
            "reranked": self.reranked,
            "retrieval_score": self.retrieval_score,
            "rerank_score": self.rerank_score,
            "retrieval_rank": self.retrieval_rank,
        }


@dataclass(frozen=True)
class SearchResults:
    hits: list[RankedHit]
    reranked: bool
    reason: str | None = None  # why not reranked
    reranker: str | None = None  # the provider id that scored them
    candidates: int = 0
    notes: tuple[str, ...] = ()  # e.g. projects skipped as damaged

    def __iter__(self):
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def as_dict(self) -> dict[str, Any]:
        return {"reranked": self.reranked, "reason": self.reason, "reranker": self.reranker,
                "candidates": self.candidates, "hits": [h.as_dict() for h in self.hits],
                "notes": list(self.notes)}


class RerankStage:
    """Rescores candidates with `reranker`: a `Router` (the reranker role's route: policy,
    failover, budget-wrapped cloud providers), a single `Provider`, or None (not configured)."""

    def __init__(self, reranker: Router | Provider | None):
        self.reranker = reranker

    async def apply(self, query: str, candidates: Sequence[Candidate], k: int, *,
                    project: str | None = None) -> SearchResults:
        cands = list(candidates)
        if not cands:
            return SearchResults([], reranked=False, reason="no candidates to rerank")
        if self.reranker is None:
            return _unranked(cands, k, "no reranker is configured for role reranker")
        docs = [c.text[:MAX_DOC_CHARS] for c in cands]
        try:
            scores, provider_id = await self._score(query, docs, project)
            _check_scores(scores, len(docs), provider_id)
        except FathomError as exc:
            # A reranker is an improvement, never a precondition: search still answers.
            return _unranked(cands, k, f"not reranked: {exc}")
        order = sorted(range(len(cands)), key=lambda i: -scores[i])  # stable: ties keep retrieval order
        hits = [RankedHit(replace(cands[i].hit, score=round(float(scores[i]), 6)), True,
                          cands[i].hit.score, float(scores[i]), i + 1, cands[i].text)
                for i in order[:k]]
        return SearchResults(hits, reranked=True, reranker=provider_id, candidates=len(cands))

    async def _score(self, query: str, docs: list[str], project: str | None) -> tuple[list[float], str]:
        if isinstance(self.reranker, Router):
            served = await call_role(self.reranker, Role.RERANKER,
                                     lambda p: p.rerank(query, docs), project=project)
            return list(served.value), served.provider.id
        assert self.reranker is not None
        return list(await self.reranker.rerank(query, docs)), self.reranker.id


def _check_scores(scores: list[float], n: int, provider_id: str) -> None:
    if len(scores) != n:
        raise RerankFailed(f"reranker {provider_id} returned {len(scores)} scores for {n} documents")
    bad = [i for i, s in enumerate(scores) if not isinstance(s, (int, float)) or not math.isfinite(s)]
    if bad:
        raise RerankFailed(f"reranker {provider_id} returned non-finite scores at {bad[:5]}")


def _unranked(cands: list[Candidate], k: int, reason: str) -> SearchResults:
    hits = [RankedHit(c.hit, False, c.hit.score, None, i + 1, c.text) for i, c in enumerate(cands[:k])]
    return SearchResults(hits, reranked=False, reason=reason, candidates=len(cands))


# --------------------------------------------------------------------------- the pipeline


async def hybrid(fathom: Searchable, query: str, project: str | None, table: str, k: int, *,
                 where: SearchFilter | None = None) -> Noted:
    """The best `k` (project, `Hit`) pairs of the hybrid search over one project (or every
    searchable one), each project's query encoded by its table's own reference encoder; a
    damaged project a search over all of them meets is skipped, and noted."""
    check_table(table)
    check_k(k)
    if not isinstance(query, str) or not query.strip():
        raise ConfigError("the search query is empty: give a few words or an identifier")
    names, notes = await asyncio.to_thread(fathom.searchable, project, table)
    if project is not None:
        hits = await search_mod.search(fathom.store, fathom.encoder_for(table, project), project,
                                       query, table=table, k=k, where=where)
        return Noted([(project, h) for h in hits], notes)
    # Every project at once: those of one space share one query vector and one fusion
    # (`hybrid_search_many`: the projects' halves fan out in parallel, and one fusion over the
    # pooled lists puts every hit on one scale). Projects of different spaces (another
    # encoder) are fused apart and merged by fused score, each group normalised to [0, 1]
    # with the same boosts.
    groups: dict[tuple[Any, str], tuple[Any, list[str]]] = {}
    for name in names:
        try:
            space = await asyncio.to_thread(fathom.store.space_of, name, table)
        except DamagedProject as exc:
            notes.append(skipped_note(name, exc.detail))
            continue
        encoder = fathom.encoder_for(table, name)
        groups.setdefault((space, encoder.id), (encoder, []))[1].append(name)
    found: list[tuple[str, Any]] = []
    for encoder, members in groups.values():
        vector = await search_mod.encode_query(encoder, query)
        hits, damaged = await asyncio.to_thread(
            functools.partial(search_mod.hybrid_search_many, where=where), fathom.store,
            members, table, vector, query, k)
        notes.extend(skipped_note(n, exc.detail) for n, exc in damaged.items())
        found.extend((h.project or "", h) for h in hits)
    found.sort(key=lambda nh: -nh[1].score)
    return Noted(found[:k], notes)


async def candidates(fathom: Searchable, query: str, project: str | None = None, table: str = "code",
                     depth: int = 40, *, where: SearchFilter | None = None) -> list[Candidate]:
    """The hybrid search's best `depth` chunks over one project (or all), with full texts;
    `where` filters inside the store, before each top `depth` is cut."""
    found = await hybrid(fathom, query, project, table, depth, where=where)

    async def texts_of(name: str) -> dict[tuple[str, str], str]:
        ids = [h.chunk_id for n, h in found if n == name]
        try:
            got = await asyncio.to_thread(fathom.store.chunk_texts, name, table, ids)
        except StoreError:
            got = {}  # a backend without stored texts: the snippet is the best we have
        return {(name, cid): t for cid, t in got.items()}

    # Every project's texts at once: hits of a search over all projects come from many.
    texts: dict[tuple[str, str], str] = {}
    for got in await asyncio.gather(*(texts_of(n) for n in sorted({n for n, _ in found}))):
        texts.update(got)
    return Noted([Candidate(SearchHit.of(n, h), texts.get((n, h.chunk_id), h.snippet))
                  for n, h in found], found.notes)


async def search(fathom: Searchable, query: str, project: str | None = None, table: str = "code",
                 k: int = 10, *, reranker: Router | Provider | None = None,
                 depth: int | None = None, where: SearchFilter | None = None) -> SearchResults:
    """Hybrid search, then the reranker stage: the best `k` of `depth` candidates."""
    check_k(k)
    depth = min(MAX_DEPTH, max(depth or 3 * k, k, 20))
    cands = await candidates(fathom, query, project, table, depth, where=where)
    found = await RerankStage(reranker).apply(query, cands, k, project=project)
    return replace(found, notes=tuple(getattr(cands, "notes", ())))


# --------------------------------------------------------------------------- a local backend


class CosineReranker(Provider):
    """A local reranker from any embedding provider: score = cosine(query, document).

    It is a bi-encoder, not a cross-encoder, so it is weaker than a real reranker; it gives
    the stage a local backend that needs no extra model and no network (the embedded default
    and tests). A sidecar's TEI `/rerank` is the local backend meant for production."""

    def __init__(self, encoder: Provider, *, provider_id: str | None = None):
        self.encoder = encoder
        self.info = ProviderInfo(
            id=provider_id or f"rerank-cosine:{encoder.id}", kind=Kind.LOCAL,
            roles=frozenset({Role.RERANKER}), model=encoder.info.model, width=None,
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

