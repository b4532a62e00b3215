"""The composition root: one `Fathom` object that the CLI, the MCP tools and the HTTP server
share. It is wiring: it builds each part once and hands each use case, as typed fields, only
the parts that use case reads.

The parts: the settings, the persisted routing state, the live provider registry (the
in-process local encoder, sidecars and cloud routes), the gate that clears them per table,
the cloud budget above every cloud route, the router that reads the policy table, the store
(whose writes the gate's clearance guards; `service.store_access`: opened on first use,
seen through `scope`), the process's index jobs (`service.jobs`), each project's record
(`service.projects`) and each provider's batch size (`service.batches`). When the store URL
is PostgreSQL, the gate's verdicts and golden vectors and the routing state live in that
database instead of the data dir, so every server on it sees the same cleared encoders and
routes.

Where each use case lives (`Fathom`'s methods of the same names are one-line calls on it):

* `service.indexing.Indexing` — every index run (the project's lock first, the indexer built
  whole, the role's pull pool under the budget), a drop, the watch setting and state. The
  live watcher (`fathom.index.watch.Watcher`) is built here, over that use case, when a front
  end turns sync on.
* `service.spaces.Spaces` — which encoder defines each table and encodes its queries, the
  provenance of a provider's rows, the gate's check of a table's providers, and the router's
  clearance.
* `service.searching.Searches` — every search, at a git ref or not, over the `SearchSources`
  handed to it (the store access, the records, the jobs, `Spaces`); `service.git_projects`
  the projects from git remotes; `service.verification` the check of stored tables;
  `service.symbols` the symbol table.

Every public method validates its arguments and raises a typed `FathomError` that names the
problem and the fix, so each front end can show one clear line instead of a traceback.

It refuses to hold a use case's logic (each lives in its module above), to decide who may
write a table (the store's clearance does), to route or to embed by itself (providers do),
and to block the event loop (the store and the model run in worker threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.config import RoutingStore, Settings
from fathom.datadir import open_data_dir
from fathom.fleet.auth import FleetAuth
from fathom.index import search as search_mod
from fathom.index.filters import SearchFilter
from fathom.index.indexer import Indexer
from fathom.index.job import IndexProgress, IndexReport, Job, progress_line
from fathom.index.request import SearchRequest
from fathom.index.results import Noted, SearchHit
from fathom.index.search import MAX_LINE as MAX_LINE  # re-exported: the tools' bound
from fathom.index.store import TABLE_KINDS, Store
from fathom.index.walker import SelectionOptions
from fathom.inference.budget import CloudBudget
from fathom.inference.encoders import local_encoder, quantized_writer
from fathom.inference.gate import Gate, Verdict
from fathom.inference.model_choice import EarlierEncoders, chosen_reranker, with_chosen_models
from fathom.inference.provider import Provider
from fathom.inference.registry import ProviderRegistry
from fathom.inference.router import Router
from fathom.policy import Policy
from fathom.roles import Role
from fathom.service.batches import BatchHistory, record_of, sizing_of  # noqa: F401 - re-exported
from fathom.service.git_projects import GitProjects
from fathom.service.indexing import Indexing, entered  # noqa: F401 - re-exported
from fathom.service.jobs import (  # noqa: F401 - re-exported
    SYNC_JOBS_KEPT,
    JobTable,
    ProjectIndexing,
    ended_early,
    first_index_notes,
    refuse_first_index,
)
from fathom.service.projects import (  # noqa: F401 - re-exported
    MAX_INCLUDES,
    FolderTaken,
    IndexStatus,
    IndexTarget,
    ProjectRecords,
    ProjectSummary,
    check_includes,
    check_not_taken,
    index_target,
    lenders_of,
    summaries,
)
from fathom.service.searching import Searches, SearchSources
from fathom.service.spaces import ROLE_OF_TABLE, Spaces  # noqa: F401 - re-exported
from fathom.service.store_access import StoreAccess
from fathom.service.warmup import Warmup
from fathom.space import Provenance, Space

log = logging.getLogger(__name__)


class _SharedState:
    """The gate and routing stores of a PostgreSQL store URL, on one lazily connecting
    `Database` (one connection per thread, opened on first use)."""

    def __init__(self, url: str):
        from fathom.index.pgstore import Database

        self.db = Database(url)

    def routing(self) -> RoutingStore:
        from fathom.index.pgstore import PgRoutingStore

        return PgRoutingStore(self.db)

    def gate(self) -> Gate:
        from fathom.index.pgstore import PgGoldenStore, PgVerdictStore

        return Gate(verdicts=PgVerdictStore(self.db), golden=PgGoldenStore(self.db))


def _shared_state(store_url: str | None) -> _SharedState | None:
    if store_url and store_url.startswith(("postgresql://", "postgres://")):
        return _SharedState(store_url)
    return None


def store_location(settings: Settings) -> str:
    """Where the index lives, for status output: a PostgreSQL URL with its password redacted,
    or the LanceDB folder."""
    url = settings.store_url
    if url and url.startswith(("postgresql://", "postgres://")):
        from fathom.index.pgstore import redact_url

        return redact_url(url)
    return str(url or settings.lance_dir)


def table_status(store: Store, project: str, table: str) -> dict[str, Any] | None:
    """One table of `index_status`: rows, encoder, last indexed, shadow and provenance (None:
    the project has no such table, active or shadow)."""
    info = store.table_info(project, table)
    if info.space is None and info.shadow_rows is None:
        return None
    return {
        "rows": info.rows,
        "model": info.space.model if info.space else None,
        "width": info.space.width if info.space else None,
        "reference": info.space.reference if info.space else None,
        "last_indexed": info.last_indexed.isoformat(timespec="seconds") if info.last_indexed else None,
        "shadow_rows": info.shadow_rows,
        "provenance": {
            f"{pid}|{vid or '-'}": n for (pid, vid), n in store.provenance_counts(project, table).items()
        },
    }


def fleet_recorded(settings: Settings) -> bool:
    """The server was given a join token or approved a sidecar (its fleet record exists),
    though none may be connected now: searches still name the fleet's fixes."""
    return (settings.data_dir / FleetAuth.FILENAME).exists()


class Fathom:
    """Everything a front end needs, built from `Settings`.

    Heavy parts start lazily: the store opens on first use and the model loads on the first
    embed, so `fathom projects` answers without loading a model.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        encoder: Provider | None = None,
        store: Store | None = None,
        clock: Callable[[], float] = time.monotonic,
        registry: ProviderRegistry | None = None,
        gate: Gate | None = None,
        budget: CloudBudget | None = None,
        router: Router | None = None,
        routing: RoutingStore | None = None,
    ):
        # `fathom models use` (models.json): the chosen embedding model and reranker.
        self.settings = with_chosen_models(settings or Settings())
        open_data_dir(self.settings.data_dir)  # 0700, and tightened if an older one was not
        # On a shared PostgreSQL store the gate's verdicts and golden vectors and the routing
        # state live in that database, so every server on it sees the same cleared encoders and
        # the same routes. Built before the store (whose clearance is this gate); nothing
        # connects until first used, so `fathom projects` stays as quick as before.
        shared = self._shared = _shared_state(self.settings.store_url)
        self.routing = routing or (shared.routing() if shared else RoutingStore(self.settings.data_dir))
        self.encoder: Provider = encoder or local_encoder(self.settings)
        # FATHOM_LOCAL_QUANTIZED: a faster copy of the embedded encoder, a provider of its own
        # that writes a table in the reference's place once the gate cleared it there.
        self.writer: Provider | None = quantized_writer(self.settings) if encoder is None else None
        self.clock = clock
        self.records = ProjectRecords(self.settings.data_dir)
        self.jobs = JobTable()  # every index job of this process (`fathom.service.jobs`)
        self.batches = BatchHistory(self.routing)  # each provider's batch size, per table
        self.registry = registry if registry is not None else ProviderRegistry()
        self.earlier = EarlierEncoders(self.settings, local_encoder)  # tables of earlier models
        if (reranker := chosen_reranker(self.settings)) is not None and reranker.id not in self.registry:
            self.registry.add(reranker)
        if gate is None:
            gate = shared.gate() if shared else Gate(self.settings.data_dir)
        self.gate = gate
        self.store_access = StoreAccess(self.settings, self.gate, store)  # opened on first use
        self.budget = budget if budget is not None else CloudBudget()
        # The in-process encoder is a local provider like any sidecar: it pulls from the
        # embedding pools, and it is the default reference of every table it defines.
        self.gate.attach(self.encoder)
        for own in (self.encoder, self.writer):
            if own is not None and own.id not in self.registry:
                self.registry.add(own)
        self._unbind_gate = self.gate.bind(self.registry)
        self.spaces = Spaces(  # each table's space, query encoder and writers
            routing=self.routing,
            encoder=self.encoder,
            writer=self.writer,
            registry=self.registry,
            gate=self.gate,
            earlier=self.earlier,
            open_store=self.store_access,
        )
        self.router = router or Router(
            self.routing.load,
            self.registry,
            is_cleared=self.spaces.may_write,
            fleet=lambda: fleet_recorded(self.settings),
        )
        self.spaces.router = self.router
        self.warmup: Warmup | None = None  # set by `warm_up`, in the front ends that stay up
        self.git = GitProjects(self, clock=clock)  # projects from git remotes, branch by branch
        self.indexing = Indexing(  # every index run, drop and watch setting
            settings=self.settings,
            open_store=self.store_access,
            records=self.records,
            jobs=self.jobs,
            encoder=self.encoder,
            gate=self.gate,
            spaces=self.spaces,
            router=self.router,
            budget=self.budget,
            batches=self.batches,
            git=self.git,
            clock=clock,
        )
        sources = SearchSources(
            self.store_access, self.records, self.jobs, self.spaces, self.indexing.require_project
        )
        self.searches = Searches(sources, self.git, self.jobs)  # every search, at a git ref or not

    def warm_up(self, on_ready: Callable[[str], None] | None = None) -> Warmup:
        """Start loading the in-process encoder in the background (once): a long-running front
        end's first search waits for that load only if it comes earlier (`service.warmup`)."""
        if self.warmup is None:
            self.warmup = Warmup(self.encoder, on_ready=on_ready)
        return self.warmup.start()

    @property
    def store(self) -> Store:
        """The store as the current caller may see it (`scope`: a scoped token, its projects)."""
        return self.store_access()

    # ---- spaces: which encoder defines (and queries) each table (`service.spaces.Spaces`)

    def space(self, table: str) -> Space:
        """The space a new build of `table` gets under the role's current policy."""
        return self.spaces.space(table)

    def encoder_for(self, table: str, project: str | None = None) -> Provider:
        """The encoder of `project`'s `table` queries: the table's own reference encoder."""
        return self.spaces.encoder_for(table, project)

    def encoder_in(self, space: Space, project: str) -> Provider:
        """The encoder of queries against `project`'s table of `space`, as the caller read it."""
        return self.spaces.encoder_in(space, project)

    def reference_problem(self, role: Role, policy: Policy, model: str | None) -> str | None:
        return self.spaces.reference_problem(role, policy, model)

    def provenance(self, provider: Provider, space: Space) -> Provenance:
        return self.spaces.provenance(provider, space)

    async def verify_providers(self, table: str) -> list[Verdict]:
        return await self.spaces.verify_providers(table)

    # ---- indexing: runs, drops and watch settings (`service.indexing.Indexing`)

    async def index(
        self,
        path: str | Path,
        project: str | None = None,
        *,
        full: bool = False,
        progress: Callable[[IndexProgress], None] | None = None,
        job: Job | None = None,
        include: Sequence[str] | None = None,
        reason: str | None = None,
        paths: Sequence[str] | None = None,
        target: IndexTarget | None = None,
    ) -> IndexReport:
        """Index `path` as `project` (`Indexing.index`)."""
        return await self.indexing.index(
            path,
            project,
            full=full,
            progress=progress,
            job=job,
            include=include,
            reason=reason,
            paths=paths,
            target=target,
        )

    async def drop(self, project: str, *, untracking: bool = False) -> dict[str, Any]:
        """Remove `project` and everything of it (`Indexing.drop`)."""
        return await self.indexing.drop(project, untracking=untracking)

    def indexer(
        self,
        *,
        include: Sequence[str] = (),
        extra_ignores: Sequence[str] = (),
        lenders: Sequence[str] = (),
        paths: frozenset[str] | None = None,
    ) -> Indexer:
        return self.indexing.indexer(
            include=include, extra_ignores=extra_ignores, lenders=lenders, paths=paths
        )

    def selection_of(self, project: str, root: Path) -> SelectionOptions:
        return self.indexing.selection_of(project, root)

    def project_lock(self, project: str) -> contextlib.AbstractContextManager[Any]:
        return self.indexing.project_lock(project)

    async def set_watch(self, project: str, enabled: bool) -> dict[str, Any]:
        return await self.indexing.set_watch(project, enabled)

    def watch_state(self, project: str) -> dict[str, Any]:
        return self.indexing.watch_state(project)

    @property
    def watcher(self) -> Watcher | None:
        """The live sync, once a front end turned it on (`fathom watch` sets its own)."""
        return self.indexing.watcher

    @watcher.setter
    def watcher(self, watcher: Watcher | None) -> None:
        self.indexing.watcher = watcher

    async def start_watching(self, **options: Any) -> Any:
        """Turn live sync on in this process: every project with a root folder here, whose
        setting is on, is watched; projects indexed later join. Wiring: the watcher syncs
        through the indexing use case itself."""
        from fathom.index.watch import Watcher

        if self.watcher is None:
            self.watcher = Watcher(self.indexing, **options)
        await self.watcher.start_all()
        return self.watcher

    # ---- search

    def searchable(self, project: str | None, table: str) -> tuple[list[str], list[str]]:
        """The projects a search reads, and notes on those it skips (`SearchSources`)."""
        return self.searches.service.searchable(project, table)

    async def search(
        self,
        query: str,
        project: str | None = None,
        table: str = "code",
        k: int = 10,
        *,
        where: SearchFilter | None = None,
        group: str = "file",
        ref: str | None = None,
    ) -> Noted:
        """The ranked search's best `k` files (or chunks), no reranker: `fathom search`'s,
        at `ref` for a project from git (its default branch without one)."""
        return await self.searches.hits(SearchRequest(query, project, table, k, where, group, ref))

    async def find_similar(
        self,
        project: str,
        *,
        path: str | None = None,
        line: int | None = None,
        snippet: str | None = None,
        k: int = 10,
        table: str = "code",
    ) -> list[SearchHit]:
        search_mod.check_similar(table, k, path=path, line=line, snippet=snippet)
        await asyncio.to_thread(self.indexing.require_project, project)
        if path is not None:
            path = path.replace("\\", "/").removeprefix("./")
        hits = await search_mod.nearest(
            self.store,
            project,
            table=table,
            path=path,
            line=line,
            snippet=snippet,
            encoder_in=lambda space: self.encoder_in(space, project),
            k=k,
        )
        return [SearchHit.of(project, h) for h in hits]

    # ---- projects

    def projects(self) -> list[ProjectSummary]:
        return summaries(self.records, self.store, self.jobs.being_built())

    async def verify_store(self, project: str | None = None, *, repair: bool = False) -> list[Any]:
        """Check one project's stored tables (or every project's, damaged ones included) and,
        with `repair`, fix what can be fixed; returns a `verify.ProjectCheck` per project."""
        from fathom.service.verification import verify_store

        return await verify_store(self, project, repair=repair)

    def index_status(self, project: str) -> IndexStatus:
        with contextlib.suppress(ProjectIndexing):  # a first index: its job (and shadow) shown
            self.indexing.require_project(project)
        record, run = self.records.get(project) or {}, self.jobs.building(project)
        tables = {
            t: v
            for t in (TABLE_KINDS if self.store.has_project(project) else ())
            if (v := table_status(self.store, project, t)) is not None
        }
        jobs = [j.as_dict() for j in self.jobs.of(project)]
        return IndexStatus(
            project,
            record.get("root") or (str(run.root) if run else None),
            tables,
            record.get("last_run"),
            jobs,
            store_location(self.settings),
            self.watch_state(project),
            list(record.get("include") or []),
            state="indexing" if run else "indexed",
            progress=progress_line(run) if run else None,
        )

    async def aclose(self) -> None:
        await self.git.aclose()  # background syncs first: they write through what follows
        if self.watcher is not None:
            await self.watcher.aclose()
        self._unbind_gate()
        await self.encoder.aclose()
        await self.earlier.aclose()
        self.store_access.close()
        if self._shared is not None:
            self._shared.db.close()


if TYPE_CHECKING:
    from fathom.index.watch import Watcher
    from fathom.service import ports

    def _fits_every_port(
        f: Fathom,
    ) -> tuple[ports.SymbolSource, ports.CodeReader, ports.OperatorService, ports.GitService, ports.Warming]:
        """Never called: mypy proves here that `Fathom` satisfies every port the front ends use."""
        return f, f, f, f, f
