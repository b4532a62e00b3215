"""The narrow views of the service that the front ends (server, agents, CLI) code against.

Each `Protocol` here names only what one group of callers really uses of `Fathom`: a tool
that reads symbols asks for a `SymbolSource`, not for the whole composition root, so a reader
sees at the signature what a function can reach, and a test can hand it a small fake. `Fathom`
satisfies every one of them (mypy checks it where `Fathom` is defined, in `_fits_every_port`);
a caller that truly needs the whole root takes `Fathom` itself.

It owns no behaviour and refuses to grow any: a port that starts doing work belongs in a
service module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fathom.config import Settings
    from fathom.index.store import Store
    from fathom.index.walker import SelectionOptions
    from fathom.inference.provider import Provider
    from fathom.policy import Policy
    from fathom.roles import Role
    from fathom.service.git_projects import GitProjects
    from fathom.service.projects import IndexStatus, ProjectRecords, ProjectSummary
    from fathom.service.searching import Searches
    from fathom.service.warmup import Warmup
    from fathom.space import Space


class Configured(Protocol):
    """Anything that carries the server's settings (the answer counter reads its model folder)."""

    @property
    def settings(self) -> Settings: ...


class StoreReader(Protocol):
    """Reads the store as the current caller may see it (`fathom.scope`)."""

    @property
    def store(self) -> Store: ...


class IndexedData(StoreReader, Configured, Protocol):
    """The store and the data dir: what keeping a project's symbols after a run touches."""


class SymbolSource(IndexedData, Protocol):
    """What symbol and call lookups read: the store, the data dir, the searchable projects."""

    def searchable(self, project: str | None, table: str) -> tuple[list[str], list[str]]: ...


class CodeReader(StoreReader, Configured, Protocol):
    """What `read_code` reads: the store, each project's record and its walk's selection."""

    @property
    def records(self) -> ProjectRecords: ...

    def selection_of(self, project: str, root: Path) -> SelectionOptions: ...


class SearchService(Configured, Protocol):
    """Every search, ranked and kept by page (`service.searching.Searches`)."""

    @property
    def searches(self) -> Searches: ...


class ProjectsService(SearchService, StoreReader, Protocol):
    """The projects view of the admin API: summaries, status, drop and live sync."""

    @property
    def records(self) -> ProjectRecords: ...

    def projects(self) -> list[ProjectSummary]: ...

    def index_status(self, project: str) -> IndexStatus: ...

    async def drop(self, project: str, *, untracking: bool = False) -> dict[str, Any]: ...

    async def set_watch(self, project: str, enabled: bool) -> dict[str, Any]: ...


class SpaceService(StoreReader, Protocol):
    """Which encoder defines and queries each table (the operator API's policies view)."""

    def space(self, table: str) -> Space: ...

    def encoder_for(self, table: str, project: str | None = None) -> Provider: ...

    def reference_problem(self, role: Role, policy: Policy, model: str | None) -> str | None: ...


class GitService(Configured, Protocol):
    """Projects from git remotes (`service.git_projects.GitProjects`)."""

    @property
    def git(self) -> GitProjects: ...


class Warming(Protocol):
    """A front end's encoder warm-up, once started (`Fathom.warm_up`)."""

    @property
    def warmup(self) -> Warmup | None: ...


class OperatorService(ProjectsService, SpaceService, Protocol):
    """The whole of what the operator API steers through the service."""
