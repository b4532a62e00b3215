"""Indexing as a use case: a project's index runs, its drop, and its live sync setting.

What it owns: the one path of every index run (CLI, server job, MCP tool, the watcher, a git
sync), from the folder's check to the record of the run: the project's lock taken first (one
writer per project, whoever asks, so a second writer is refused before any provider is probed
or a model loaded), the walk's selection, the indexer built whole for the run, the role's pull
pool it embeds through (`Router.pool`, under the cloud budget, with each provider's batch
size), the rebuild of tables an earlier embedding model built, and the gate's check of every
provider first. Also a project's drop (its running job cancelled, the lock waited for a
bounded time) and its watch setting and state; the live watcher (`fathom.index.watch`) is
built by the composition root and held here.

It is handed exactly what it uses, as typed fields: the settings, the store as the caller
sees it, the records, the jobs, the encoder and the gate, each table's space (`TableSpaces`),
the router and budget, the batch sizes and the git side's refusals (`BranchRules`).

What it refuses to do: decide which encoder defines a table (`TableSpaces` does), judge a
provider (the gate does), embed (the pool's providers do) or block the event loop (the store,
the lock and the model run in worker threads).
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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fathom.config import Settings
from fathom.errors import ConfigError, FathomError, failure_of
from fathom.index.git_source import ChangedFiles
from fathom.index.indexer import Discovery, Indexer
from fathom.index.job import IndexProgress, IndexReport, Job
from fathom.index.store import TABLE_KINDS, ProjectLocked, Store, UnknownProject
from fathom.index.walker import SelectionOptions
from fathom.inference.budget import CloudBudget, current_project
from fathom.inference.gate import Gate, Verdict
from fathom.inference.model_choice import moved_tables
from fathom.inference.pool import Pool
from fathom.inference.provider import Provider
from fathom.inference.router import Router
from fathom.service.batches import BatchHistory
from fathom.service.jobs import JobTable, ended_early, refuse_first_index
from fathom.service.projects import IndexTarget, ProjectRecords, check_includes, index_target, lenders_of
from fathom.service.spaces import ROLE_OF_TABLE
from fathom.space import Provenance, Space

if TYPE_CHECKING:
    from fathom.index.watch import Watcher

log = logging.getLogger("fathom.service")

# A drop tries the project's lock this many times, this long apart (about half a minute).
LOCK_TRIES, LOCK_PAUSE_S = 300, 0.1


class TableSpaces(Protocol):
    """What a run needs to know of each table's space: which encoder defines it, the
    provenance a provider's rows carry in it, and the gate's check of its providers."""

    def space(self, table: str) -> Space: ...

    def provenance(self, provider: Provider, space: Space) -> Provenance: ...

    async def verify_providers(self, table: str) -> list[Verdict]: ...


class BranchRules(Protocol):
    """What a drop and a watch setting ask of the git side (`GitProjects`)."""

    def refuse_branch_drop(self, name: str) -> None: ...

    async def drop_all(self, project: str) -> None: ...

    def refuse_watch(self, project: str) -> None: ...


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


@dataclass(kw_only=True, eq=False)
class Indexing:
    """Index runs, drops and watch settings, over the parts the composition root hands it."""

    settings: Settings
    open_store: Callable[[], Store]  # the store as the current caller may see it (`scope`)
    records: ProjectRecords
    jobs: JobTable
    encoder: Provider  # the in-process encoder: loaded before a run that needs it
    gate: Gate
    spaces: TableSpaces
    router: Router
    budget: CloudBudget
    batches: BatchHistory
    git: BranchRules
    clock: Callable[[], float] = time.monotonic
    watcher: Watcher | None = None  # once a front end turns sync on
    # Two runs of one project in one process would race on its slots.
    _index_lock: dict[str, asyncio.Lock] = field(default_factory=dict)

    @property
    def store(self) -> Store:
        return self.open_store()

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
            provenance=self.spaces.provenance,
            space_of=self.spaces.space,
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

    # ---- a run

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
        """Index `path` as `project`. `include` globs (None: the project's stored ones)
        take back folders and files the built-in skips and .gitignore leave out, and are
        remembered for later runs and syncs. `reason` marks a job ("sync": the watcher's).
        `paths`: an incremental run of only these files (a git diff), the rest left as it is.
        `target`: the folder's checks, made by a caller that refuses within its call
        (`index_target`, as `BackgroundIndex.check` makes them), not made again."""
        # The one check of the folder, before anything is probed or loaded; the indexer is
        # handed its result and does not check again.
        if target is None:
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
            await asyncio.to_thread(self.open_store)  # opening it blocks (imports, connects)
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
                    await self.spaces.verify_providers(table)
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
            else moved_tables(lambda t: self.store.space_of(project, t), self.spaces.space, TABLE_KINDS)
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
                space = self.spaces.space(table)
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
        await asyncio.to_thread(self.require_project, project)
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

    def require_project(self, project: str) -> None:
        """A named project that is indexed and answers (`ProjectIndexing` while its first
        index runs, `UnknownProject` naming the known ones otherwise)."""
        if not isinstance(project, str) or not project:
            raise ConfigError("project must be a non-empty name; see `fathom projects`")
        refuse_first_index(self.jobs, self.store, project)  # "being indexed", with how far
        if not self.store.has_project(project):
            raise UnknownProject(project, [p.name for p in self.store.list_projects()])
