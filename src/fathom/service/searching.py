"""Searches as a use case: one path from a `SearchRequest` to a `Ranking`, for every front end.

What it owns: which side answers a request — the search pipeline (`fathom.index.search`) over
the index as it is, or the git side (`GitProjects.ranking`) when the request names a ref or
its project comes from git (the default branch is read then, and every hit carries its
commit) — with or without the reranker stage. The MCP tools, the dashboard, `fathom search`
(in-process and through a running server) and the agents all come through `ranking`, so a
search at a ref is a field of the request, not a second path.

It also decides which projects answer keyword-only: those whose first index is running and
whose walk has begun (`fathom.service.jobs.keyword_only`) are searched over their walked
chunks (`fathom.index.interim`) by the same pipeline, and every such answer carries a note
saying how far the embedding is; once the index is promoted the project answers in full.

What it refuses to do: check the request again (it was checked when made), or shape an
answer for the wire (`fathom.server.search_answer` does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fathom.errors import ConfigError
from fathom.index import search as search_mod
from fathom.index.request import SearchRequest
from fathom.index.results import Noted, Ranking
from fathom.index.store import Store
from fathom.inference.provider import Provider
from fathom.service.jobs import JobTable, first_index_notes, keyword_only, keyword_only_note
from fathom.service.projects import ProjectRecords
from fathom.space import Space


class QueryEncoders(Protocol):
    """Each table's query encoder (`fathom.service.spaces.Spaces`)."""

    def encoder_in(self, space: Space, project: str) -> Provider: ...


@dataclass
class SearchSources:
    """What a search reads, handed down by the composition root (a `search.Searchable`): the
    store as the caller may see it, the projects a search reads, each table's query encoder.
    A search goes down through these parts, never back up through the root."""

    store_access: Callable[[], Store]  # `fathom.service.store_access.StoreAccess`
    records: ProjectRecords
    jobs: JobTable
    encoders: QueryEncoders
    require_project: Callable[[str], None]  # refuses a project that is not indexed

    @property
    def store(self) -> Store:
        return self.store_access()

    def encoder_in(self, space: Space, project: str) -> Provider:
        return self.encoders.encoder_in(space, project)

    def searchable(self, project: str | None, table: str) -> tuple[list[str], list[str]]:
        """The projects a search reads, and notes on those it skips: a search over every
        project leaves a damaged one out (and says so) instead of failing for all."""
        if project is not None:
            self.require_project(project)
            return [project], []
        store = self.store
        overlays = {n for n, r in self.records.load().items() if r.get("overlay")}  # git branches
        notes: list[str] = []
        # Each project's pointer is read, its tables not opened (nor their rows counted): a
        # table damaged on disk is met, and noted, by the search itself.
        spaces = search_mod.spaces_of(store, store.project_names(), table, notes)
        names = [name for name, _ in spaces if name not in overlays]
        notes += first_index_notes(self.jobs, store, names, notes)
        if not names and not notes:
            raise ConfigError("no project is indexed yet: run `fathom index PATH` first")
        return names, notes


class GitSide(Protocol):
    """What a search needs of the git side (`fathom.service.git_projects.GitProjects`)."""

    def tracks(self, project: str | None) -> bool: ...

    async def ranking(
        self, request: SearchRequest, *, reranker: Any = None, rerank: bool = True
    ) -> Ranking: ...


class Searches:
    """Runs requests against `service` (a `search.Searchable`: the store as the caller sees
    it, the projects a search reads, each table's query encoder) and its git side."""

    def __init__(self, service: search_mod.Searchable, git: GitSide, jobs: JobTable | None = None):
        self.service, self.git = service, git
        self.jobs = jobs  # the runs building projects: a first index answers keyword-only

    def early(self, request: SearchRequest) -> list[search_mod.Early]:
        """The first indexes that answer `request` keyword-only, with their notes (blocking)."""
        if self.jobs is None:
            return []
        runs = keyword_only(self.jobs, self.service.store, request.project)
        return [(held, keyword_only_note(j)) for j in runs if (held := j.interim) is not None]

    async def from_git(self, request: SearchRequest) -> bool:
        """Whether the git side answers: a ref was given, or the project comes from git."""
        if request.ref is not None:
            return True
        return request.project is not None and await asyncio.to_thread(self.git.tracks, request.project)

    async def ranking(self, request: SearchRequest, *, reranker: Any = None, rerank: bool = True) -> Ranking:
        """The ranked answer to `request`: the reranker stage runs on its pool's head when
        `rerank` (flagged not reranked, with the reason, when `reranker` is None or cannot
        serve)."""
        if await self.from_git(request):
            return await self.git.ranking(request, reranker=reranker, rerank=rerank)
        early = await asyncio.to_thread(self.early, request)
        if rerank:
            return await search_mod.pipeline(self.service, request, reranker=reranker, early=early)
        hits = await search_mod.retrieve(self.service, request, early)
        return Ranking(list(hits), reranked=False, notes=tuple(hits.notes))

    async def hits(self, request: SearchRequest) -> Noted:
        """The best `k` files (or chunks) with no reranker stage: `fathom search`'s answer."""
        found = await self.ranking(request, rerank=False)
        return Noted(found.hits, found.notes)
