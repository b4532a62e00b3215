"""The composition root: one `Fathom` object that the CLI, the MCP tools and the HTTP server
share.

It owns wiring, not mechanisms: the settings, the persisted routing state, the live provider
registry (the in-process local encoder, sidecars and cloud routes), the gate that clears them
per table, the cloud budget above every cloud route, the router that reads the policy table,
the store (whose writes the gate's clearance guards), the indexer and the jobs it runs, plus
the few records only this layer needs (each project's root folder, its last run, its
`include` globs and whether it is watched, in `projects.json` under the data dir), and the
live sync (`fathom.index.watch.Watcher`) when a front end turns it on. When the store URL is PostgreSQL, the gate's verdicts and
golden vectors and the routing state live in that database instead of the data dir, so every
server on it sees the same cleared encoders and routes.

An index job embeds through the role's pull pool (`Router.pool`): every provider the policy
allows and the gate cleared pulls from one queue, cloud ones only after taking a budget permit,
and every row is written with the verdict that cleared its provider. A query is encoded by the
table's own reference encoder (the one recorded in the table's space), never by whichever
provider happens to be free. Every public method validates its arguments and
raises a typed `FathomError` that names the problem and the fix, so each front end can show
one clear line instead of a traceback.

Its parts: `jobs` (the process's index jobs, the server's kept ones and their ledger),
`projects` (each project's record, include globs, whose folder is whose) and `batches` (each
provider's batch size across jobs); the class here wires them.

It refuses to decide who may write a table (the store's clearance does), to route or to
embed by itself (providers do), and to block the event loop (the store and the model run in
worker threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom import scope
from fathom.config import RoutingStore, Settings
from fathom.datadir import open_data_dir
from fathom.errors import ConfigError, FathomError, NoProviderAvailable, failure_of
from fathom.fleet.auth import FleetAuth
from fathom.index import search as search_mod
from fathom.index.backend import open_store
from fathom.index.filters import SearchFilter
from fathom.index.git_source import ChangedFiles
from fathom.index.indexer import Discovery, Indexer, space_for
from fathom.index.job import IndexProgress, IndexReport, Job, progress_line
from fathom.index.request import SearchRequest
from fathom.index.results import Noted, SearchHit, skipped_note
from fathom.index.search import MAX_LINE as MAX_LINE  # re-exported: the tools' bound
from fathom.index.store import (
    TABLE_KINDS,
    ProjectLocked,
    Store,
    UnknownProject,
    check_table_kind,
)
from fathom.index.walker import SelectionOptions
from fathom.inference.budget import CloudBudget, current_project
from fathom.inference.encoders import local_encoder, quantized_writer
from fathom.inference.gate import Gate, GateClearance, Verdict
from fathom.inference.gate.core import choose_anchor
from fathom.inference.model_choice import EarlierEncoders, chosen_reranker, moved_tables, with_chosen_models
from fathom.inference.pool import Pool
from fathom.inference.provider import Kind, Provider
from fathom.inference.registry import ProviderRegistry
from fathom.inference.router import Router
from fathom.policy import BEHAVIOUR, Policy, Reference
from fathom.roles import Role
from fathom.service.batches import BatchHistory, record_of, sizing_of  # noqa: F401 - re-exported
from fathom.service.git_projects import GitProjects
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
from fathom.service.searching import Searches
from fathom.service.warmup import Warmup
from fathom.space import Provenance, Space

log = logging.getLogger(__name__)

# Which embedding role writes (and encodes the queries of) each table.
ROLE_OF_TABLE = {"code": Role.CODE_EMBEDDING, "docs": Role.EMBEDDING}
# A drop tries the project's lock this many times, this long apart (about half a minute).
LOCK_TRIES, LOCK_PAUSE_S = 300, 0.1


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


def _cloud_width(anchor: Provider, set_width: int | None, table: str, role: Role) -> int:
    """The width of a table a cloud anchor defines: the anchor's own, or the one the role sets."""
    width = anchor.info.width or set_width
    if width is None:
        raise ConfigError(
            f"the width of the {table} table is unknown: the cloud anchor {anchor.id} "
            f"reports none and the {role} role sets none; set it with `fathom policy "
            f"set {role} --width N`"
        )
    return width


def store_location(settings: Settings) -> str:
    """Where the index lives, for status output: a PostgreSQL URL with its password redacted,
    or the LanceDB folder."""
    url = settings.store_url
    if url and url.startswith(("postgresql://", "postgres://")):
        from fathom.index.pgstore import redact_url

        return redact_url(url)
    return str(url or settings.lance_dir)


async def entered(lock: contextlib.AbstractContextManager[Any]) -> None:
    """`lock.__enter__()` off the loop (a PostgreSQL lock is a round trip). If the caller is
    cancelled meanwhile, the lock the thread takes anyway is released as it is taken: a lock
    held for nobody would refuse every later writer of the project until a restart."""
    taking = asyncio.ensure_future(asyncio.to_thread(lock.__enter__))

    def release_if_taken(done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and done.exception() is None:
            with contextlib.suppress(Exception):
                lock.__exit__(None, None, None)

    try:
        await asyncio.shield(taking)
    except asyncio.CancelledError:
        taking.add_done_callback(release_if_taken)
        raise


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
        self._store = store
        self.clock = clock
        self.records = ProjectRecords(self.settings.data_dir)
        self.jobs = JobTable()  # every index job of this process (`fathom.service.jobs`)
        self._index_lock: dict[str, asyncio.Lock] = {}
        self.batches = BatchHistory(self.routing)  # each provider's batch size, per table
        self.watcher: Watcher | None = None  # once a front end turns sync on
        self.registry = registry if registry is not None else ProviderRegistry()
        self.earlier = EarlierEncoders(self.settings, local_encoder)  # tables of earlier models
        if (reranker := chosen_reranker(self.settings)) is not None and reranker.id not in self.registry:
            self.registry.add(reranker)
        if gate is None:
            gate = shared.gate() if shared else Gate(self.settings.data_dir)
        self.gate = gate
        self.budget = budget if budget is not None else CloudBudget()
        # The in-process encoder is a local provider like any sidecar: it pulls from the
        # embedding pools, and it is the default reference of every table it defines.
        self.gate.attach(self.encoder)
        for own in (self.encoder, self.writer):
            if own is not None and own.id not in self.registry:
                self.registry.add(own)
        self._unbind_gate = self.gate.bind(self.registry)
        self._gate_clears = self.gate.for_router(self._current_space)
        self.router = router or Router(
            self.routing.load,
            self.registry,
            is_cleared=self._may_write,
            fleet=lambda: fleet_recorded(self.settings),
        )
        self.warmup: Warmup | None = None  # set by `warm_up`, in the front ends that stay up
        self.git = GitProjects(self, clock=clock)  # projects from git remotes, branch by branch
        self.searches = Searches(self, self.git, self.jobs)  # every search, at a git ref or not

    def warm_up(self, on_ready: Callable[[str], None] | None = None) -> Warmup:
        """Start loading the in-process encoder in the background (once): a long-running front
        end's first search waits for that load only if it comes earlier (`service.warmup`)."""
        if self.warmup is None:
            self.warmup = Warmup(self.encoder, on_ready=on_ready)
        return self.warmup.start()

    def _may_write(self, role: Role, provider: Provider) -> bool:
        """The router's clearance: the gate's, except that the embedded encoder steps aside
        for its quantized writer wherever the gate cleared that one and it is available. Both
        run on the same cores, so two of them pulling at once would only share them; the
        reference still encodes every query and judges the writer."""
        if not self._gate_clears(role, provider):
            return False
        writer = self.writer
        if writer is not None and provider is self.encoder and self.registry.available(writer.id):
            return not self._gate_clears(role, writer)
        return True

    @property
    def store(self) -> Store:
        """The store as the current caller may see it (`scope`: a scoped token, its projects)."""
        if self._store is None:
            self._store = open_store(self.settings, clearance=GateClearance(self.gate))
        return scope.confine(self._store)

    # ---- spaces: which encoder defines (and queries) each table

    def _current_space(self, role: Role) -> Space | None:
        try:  # a role that writes no table has no space
            return self.space(role.table) if role.table else None
        except FathomError:
            return None

    def space(self, table: str) -> Space:
        """The space a new build of `table` gets under the role's current policy: the local
        encoder's under local/aggregate/backup (agreement with local rows is the property);
        under `cloud` no local vector is written, so the deterministic cloud anchor's."""
        check_table_kind(table)
        role = ROLE_OF_TABLE[table]
        route = self.routing.load().roles[role]
        if BEHAVIOUR[route.policy].reference is Reference.LOCAL:
            if not route.model or route.model == self.encoder.info.model:
                return space_for(self.encoder, table)
            # The operator chose another model for this table: its reference is the local
            # provider (a sidecar) serving that model, the smallest id so every server agrees.
            locals_ = self._local_references(role, route.model)
            if not locals_:
                raise NoProviderAvailable(
                    f"role {role} is set to model {route.model}, but no local provider serving "
                    f"it is connected: join a sidecar serving {route.model}, or set the role's "
                    f"model back to {self.encoder.info.model}"
                )
            return space_for(locals_[0], table)
        clouds = self.registry.list(role, kind=Kind.CLOUD)
        model = route.model or (clouds[0].info.model if clouds else None)
        anchor = self.registry.get(choose_anchor(clouds, model, role) or "") if model else None
        if anchor is None:
            raise NoProviderAvailable(
                f"role {role} is under policy cloud but no pinned cloud route for "
                f"{model or 'its model'} is connected: join a sidecar with the key pushed, or "
                f"set `fathom policy set {role} --policy local`"
            )
        return Space(
            table=table,
            model=anchor.info.model,
            reference=anchor.id,
            width=_cloud_width(anchor, route.width, table, role),
        )

    def _local_references(self, role: Role, model: str) -> list[Provider]:
        return [
            p for p in self.registry.list(role, kind=Kind.LOCAL) if p.info.model == model and p.info.width
        ]

    def reference_problem(self, role: Role, policy: Policy, model: str | None) -> str | None:
        """Why no reference could judge `role`'s table under `policy` with `model`, or None.
        Under local, aggregate and backup the reference is local: the in-process encoder, or a
        connected local provider serving the model. `policy set` asks before it writes, so a
        change that would break every build of the table is refused, not stored."""
        if role not in ROLE_OF_TABLE.values() or BEHAVIOUR[policy].reference is not Reference.LOCAL:
            return None
        if not model or model == self.encoder.info.model or self._local_references(role, model):
            return None
        return (
            f"{role}: no local encoder serves model {model}, and under policy {policy} the "
            f"{role.table} table's reference must be local: join a sidecar serving {model} "
            f"first, use policy cloud, or keep model {self.encoder.info.model}"
        )

    def encoder_for(self, table: str, project: str | None = None) -> Provider:
        """The encoder of `project`'s `table` queries: the table's own reference encoder, as
        recorded in its space; under a cloud reference that cannot answer, another provider the
        gate cleared for the same space (never an unjudged one)."""
        check_table_kind(table)
        space = self.store.space_of(project, table) if project else None
        if space is None or space.reference == self.encoder.id:
            return self.encoder
        if (earlier := self.earlier.for_space(space)) is not None:
            return earlier  # a table an earlier embedding model built, until it is rebuilt
        role = ROLE_OF_TABLE[table]
        reference = self.registry.get(space.reference)
        candidates = ([reference] if reference is not None else []) + [
            p for p in self.registry.list(role) if p.id != space.reference
        ]
        for p in candidates:
            if self.registry.available(p.id) and self.gate.is_cleared(space, p):
                return p
        raise NoProviderAvailable(
            f"the {table} table of {project} was built by {space.reference}, which is not "
            f"connected, and no other provider is cleared for its space: reconnect it, or "
            f"re-index the project with `fathom index PATH --full`"
        )

    def provenance(self, provider: Provider, space: Space) -> Provenance:
        verdict = self.gate.verdict_for(space, provider)
        return Provenance(provider.id, verdict.verdict_id if verdict is not None else None)

    async def verify_providers(self, table: str) -> list[Verdict]:
        """Judge, for the table's current space, every provider that could serve its role and
        has no verdict yet, or owes a re-probe (`fathom.service.verification`)."""
        from fathom.service.verification import verify_providers

        return await verify_providers(self, table, ROLE_OF_TABLE[table])

    def indexer(
        self,
        *,
        include: Sequence[str] = (),
        extra_ignores: Sequence[str] = (),
        lenders: Sequence[str] = (),
        paths: frozenset[str] | None = None,
    ) -> Indexer:
        """An indexer built whole for one run (`paths`, a git diff's: only those files are read)."""
        batch = getattr(self.encoder, "batch_size", self.settings.local_batch_size)
        walk: Callable[..., Discovery] = (
            Discovery if paths is None else functools.partial(ChangedFiles, paths=paths)
        )
        return Indexer(
            self.store,
            self.encoder,
            batch_size=batch,
            clock=self.clock,
            runner=self._runner,
            provenance=self.provenance,
            space_of=self.space,
            discover_fn=functools.partial(walk, include=tuple(include), extra_ignores=tuple(extra_ignores)),
            refused_roots=self.settings.refused_roots,
            lenders=lenders,
        )

    def selection_of(self, project: str, root: Path) -> SelectionOptions:
        """What a walk of `project` takes beyond the built-in rules: its `include` globs (from
        its record) and the data dir when it lies inside the project (never index Fathom's
        own tables, nor let the watcher see their writes as edits)."""
        record = self.records.get(project) or {}
        extra: list[str] = []
        with contextlib.suppress(ValueError, OSError):
            inside = self.settings.data_dir.expanduser().resolve().relative_to(root.resolve())
            if str(inside) != ".":
                extra.append(f"/{inside.as_posix()}/")
        return {"include": list(record.get("include") or []), "extra_ignores": extra}

    def _runner(self, table: str) -> Pool:
        """The role's pull pool: cloud providers take a budget permit before they pull, and
        each runs as many lanes as the budget's effective limit allows in flight (an override
        of 16 puts 16 requests at the upstream, a halving half as many); locals run one.
        Each provider's batch size starts where its last job left it (`Pool(history=)`, kept
        in the routing state across restarts), and a cloud provider's batches are sized from
        the key's trusted rate limit (`CloudBudget.key_rate`)."""
        return self.router.pool(
            ROLE_OF_TABLE[table],
            admission=self.budget.admission,
            lanes=lambda p: self.budget.effective_limit if p.info.is_cloud else 1,
            history=self.batches.of(table),
            rate_limit=lambda p: self.budget.key_rate(),
        )

    # ---- indexing

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
    ) -> IndexReport:
        """Index `path` as `project`. `include` globs (None: the project's stored ones)
        take back folders and files the built-in skips and .gitignore leave out, and are
        remembered for later runs and syncs. `reason` marks a job ("sync": the watcher's).
        `paths`: an incremental run of only these files (a git diff), the rest left as it is."""
        # The one check of the folder, before anything is probed or loaded; the indexer is
        # handed its result and does not check again.
        target = await asyncio.to_thread(
            index_target, self.records, self.settings, path, project, from_git=reason == "git"
        )
        root, name = target.root, target.name
        if include is not None:
            include = check_includes(include)
        job = job or Job(name, root, full=full, clock=self.clock, reason=reason)
        job.paths = frozenset(paths) if paths is not None and not full else None
        self.jobs[job.id] = job

        def starting(phase: str) -> None:
            # Start-up is shown as what it is (opening the store, loading the model, the
            # gate's checks), not as a walk that has not begun.
            job.progress = IndexProgress(name, phase, elapsed_s=self.clock() - job.created_at)
            if progress is not None:
                progress(job.progress)

        token = current_project.set(name)  # the budget serves waiting projects round-robin
        try:
            starting("opening store")
            await asyncio.to_thread(getattr, self, "store")  # opening it blocks (imports, connects)
            report = await self._index_locked(job, target, include, progress, starting)
        except BaseException as exc:
            ended_early(job, exc, self.clock)  # refused before the indexer took it
            failure = failure_of(exc) if isinstance(exc, Exception) else None
            if failure is not None and failure is not exc:
                raise failure from exc
            raise
        finally:
            current_project.reset(token)
        await asyncio.to_thread(
            self.records.update,
            name,
            root=report.root,
            last_run={k: v for k, v in asdict(report).items() if k != "project"}
            | {"finished_at": datetime.now(tz=UTC).isoformat(timespec="seconds")},
        )
        if self.watcher is not None and reason != "sync":
            self.watcher.ensure(name, Path(report.root))  # a new project is watched from now on
        from fathom.service.symbols import after_index

        await asyncio.to_thread(after_index, self, name)  # find_symbol follows every run
        self.jobs.prune_syncs(name)
        return report

    async def _index_locked(
        self,
        job: Job,
        target: IndexTarget,
        include: Sequence[str] | None,
        progress: Callable[[IndexProgress], None] | None,
        starting: Callable[[str], None],
    ) -> IndexReport:
        """The run itself, under the project's lock: one writer per project, whoever asks (CLI,
        server job, MCP tool, the watcher). The lock is taken first, so a second writer is refused
        at once, before any provider is probed or a model loaded. Taken and released off the loop
        (a PostgreSQL lock is a database round trip)."""
        name, root, real = target.name, target.root, target.real
        lock = self.project_lock(name)
        await entered(lock)
        try:
            if include is not None:
                await asyncio.to_thread(self.records.update, name, include=list(include))
            selection = await asyncio.to_thread(self.selection_of, name, root)
            lenders = await asyncio.to_thread(lenders_of, self.records, name)
            indexer = self.indexer(**selection, lenders=lenders, paths=job.paths)
            # Two runs of one project in one process would race on its slots.
            async with self._index_lock.setdefault(name, asyncio.Lock()):
                if self._must_load(job):
                    starting("loading model")
                    await asyncio.to_thread(self.encoder.load)  # type: ignore[attr-defined]  # in-process: has load
                if moved := await asyncio.to_thread(self._moved, job, name):
                    starting(f"embedding model changed: rebuilding {', '.join(moved)} in full")
                starting("checking encoders")
                for table in TABLE_KINDS:
                    await self.verify_providers(table)
                try:
                    return await indexer.run(job, progress, root=real)
                finally:
                    await asyncio.shield(asyncio.to_thread(self.batches.save))
        finally:
            await asyncio.to_thread(lock.__exit__, None, None, None)

    def _moved(self, job: Job, project: str) -> list[str]:
        """The tables of `project` an earlier embedding model built: the run rebuilds them in
        full, as `--full` would, while they keep answering until promoted."""
        moved = (
            []
            if job.full
            else moved_tables(lambda t: self.store.space_of(project, t), self.space, TABLE_KINDS)
        )
        if moved:
            job.full = True
            log.warning(
                "project %s: %s built by another embedding model; rebuilding in full",
                project,
                ", ".join(moved),
            )
        return moved

    def _must_load(self, job: Job) -> bool:
        """Whether the gate's check will need the in-process model (a table whose reference
        has no verdict yet), so start-up says it is loading it."""
        if getattr(self.encoder, "loaded", True) or not callable(getattr(self.encoder, "load", None)):
            return False
        for table in TABLE_KINDS:
            try:
                space = self.space(table)
            except FathomError:
                continue
            if space.reference == self.encoder.id and self.gate.verdict_for(space, self.encoder) is None:
                return True
        return False

    # ---- managing what is indexed

    async def drop(self, project: str, *, untracking: bool = False) -> dict[str, Any]:
        """Remove `project` and everything of it: its tables (both slots), its record, its
        jobs and its watch. A running index job of it is cancelled first; another server
        indexing it holds the project lock and the drop waits for it (about half a minute,
        then refused naming the holder, its tables left whole), never tearing a job's tables away under it.
        A tracked git branch's index goes with its branch (`untracking`) or its project only."""
        if not isinstance(project, str) or not project:
            raise ConfigError("project must be a non-empty name; see `fathom projects`")
        known = await asyncio.to_thread(self.store.has_project, project)
        recorded = await asyncio.to_thread(self.records.get, project)
        if not known and recorded is None:
            names = [p.name for p in await asyncio.to_thread(self.store.list_projects)]
            raise UnknownProject(project, names)
        if not untracking:
            await asyncio.to_thread(self.git.refuse_branch_drop, project)
        if self.watcher is not None:
            await self.watcher.stop(project)
        if (recorded or {}).get("git"):
            await self.git.drop_all(project)  # its other branches, clone and files
        self.jobs.cancel_running(project)
        rows: dict[str, int] = {}
        async with self._index_lock.setdefault(project, asyncio.Lock()):
            if known:
                for t in TABLE_KINDS:
                    with contextlib.suppress(UnknownProject):
                        info = await asyncio.to_thread(self.store.table_info, project, t)
                        rows[t] = info.rows
                lock = await self._enter_project_lock(project)
                try:
                    with contextlib.suppress(UnknownProject):  # dropped meanwhile elsewhere
                        await asyncio.to_thread(self.store.drop_project, project)
                finally:
                    await asyncio.to_thread(lock.__exit__, None, None, None)
            await asyncio.to_thread(self.records.remove, project)
            from fathom.service.symbols import forget

            await asyncio.to_thread(forget, self, project)  # its symbols and indexed text too
        self.jobs.forget_finished(project)
        log.info(
            "project %s dropped (%s)",
            project,
            ", ".join(f"{t} {n} rows" for t, n in rows.items()) or "no tables",
        )
        return {"project": project, "dropped": True, "rows": rows, "root": (recorded or {}).get("root")}

    async def set_watch(self, project: str, enabled: bool) -> dict[str, Any]:
        """Turn live sync of one project on or off (remembered in its record)."""
        await asyncio.to_thread(self._require_project, project)
        if enabled:  # a project from git follows its remote, not a folder
            await asyncio.to_thread(self.git.refuse_watch, project)
        record = await asyncio.to_thread(self.records.update, project, watch=bool(enabled))
        if self.watcher is not None:
            if enabled and record.get("root"):
                self.watcher.ensure(project, Path(record["root"]))
            elif not enabled:
                await self.watcher.stop(project, off=True)
        return self.watch_state(project)

    def watch_state(self, project: str) -> dict[str, Any]:
        """The project's live sync: enabled (its setting), state (watching, syncing,
        waiting to retry, off, not running in this process…), last sync, last error."""
        record = self.records.get(project) or {}
        enabled = record.get("watch", True) is not False
        if self.watcher is not None:
            return self.watcher.state(project, enabled=enabled)
        return {
            "enabled": enabled,
            "state": "off" if not enabled else "not watched",
            "detail": None
            if not enabled
            else "this process does not watch (fathom index / ask); `fathom mcp`, `fathom serve`,"
            " `fathom server` and `fathom watch` do",
        }

    async def start_watching(self, **options: Any) -> Any:
        """Turn live sync on in this process: every project with a root folder here, whose
        setting is on, is watched; projects indexed later join."""
        from fathom.index.watch import Watcher

        if self.watcher is None:
            self.watcher = Watcher(self, **options)
        await self.watcher.start_all()
        return self.watcher

    async def _enter_project_lock(self, project: str) -> contextlib.AbstractContextManager[Any]:
        """The project's lock, entered, for a drop. A run that is ending holds it a moment
        longer than its slots (this process's cancelled job releases it last), and another
        server's run holds it to its end: either is waited for, a bounded number of times
        (about half a minute), then refused with `ProjectLocked` naming the holder."""
        for attempt in range(LOCK_TRIES):
            lock = self.project_lock(project)
            try:
                await entered(lock)
                return lock
            except ProjectLocked:
                if attempt == LOCK_TRIES - 1:
                    raise
                await asyncio.sleep(LOCK_PAUSE_S)
        raise ProjectLocked(project, None)  # not reached: the last try raises

    def project_lock(self, project: str) -> contextlib.AbstractContextManager[Any]:
        """The project's index lock, held for a whole run: an OS file lock on LanceDB, a
        PostgreSQL advisory lock on a shared database. The one place every writer passes."""
        # Both stores hold one; a store without (a test's) runs unlocked.
        lock: Callable[..., contextlib.AbstractContextManager[Any]] | None = getattr(
            self.store, "project_lock", None
        )
        if lock is None:
            return contextlib.nullcontext()
        return lock(project, holder=f"fathom@{socket.gethostname()}:{os.getpid()}")

    # ---- search

    def _require_project(self, project: str) -> None:
        if not isinstance(project, str) or not project:
            raise ConfigError("project must be a non-empty name; see `fathom projects`")
        refuse_first_index(self.jobs, self.store, project)  # "being indexed", with how far
        if not self.store.has_project(project):
            raise UnknownProject(project, [p.name for p in self.store.list_projects()])

    def searchable(self, project: str | None, table: str) -> tuple[list[str], list[str]]:
        """The projects a search reads, and notes on those it skips: a search over every
        project leaves a damaged one out (and says so) instead of failing for all."""
        if project is not None:
            self._require_project(project)
            return [project], []
        projects = self.store.list_projects()
        notes = [skipped_note(p.name, p.damage) for p in projects if p.damage]
        overlays = {n for n, r in self.records.load().items() if r.get("overlay")}  # git branches
        names = [
            p.name
            for p in projects
            if not p.damage
            and table in p.tables
            and p.tables[table].space is not None
            and p.name not in overlays
        ]
        notes += first_index_notes(self.jobs, self.store, names, notes)
        if not names and not notes:
            raise ConfigError("no project is indexed yet: run `fathom index PATH` first")
        return names, notes

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
        await asyncio.to_thread(self._require_project, project)
        if path is not None:
            path = path.replace("\\", "/").removeprefix("./")
        hits = await search_mod.nearest(
            self.store,
            project,
            table=table,
            path=path,
            line=line,
            snippet=snippet,
            encoder=self.encoder_for(table, project),
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
            self._require_project(project)
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
        if self._store is not None:
            self._store.close()
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
