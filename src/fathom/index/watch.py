"""Live sync: the index of a watched project follows its files as they change.

What this module owns:

* One `ProjectSync` per watched project folder: a `watchfiles` watcher (Rust-backed, debounced)
  whose events pass the same `walker.Selection` a walk uses, so gitignored, `.fathomignore`d
  and skipped files (`.git/`, `node_modules/`, the data dir…) never start a sync.
* Coalescing: changes gather until the folder has been quiet for `quiet_s`, and changes that
  arrive while a sync runs wait for the next one. A `git checkout` of another branch or a
  formatter run over the tree is one incremental job, not thousands.
* Never dropping a change: a sync that fails (no encoder available, another process holding
  the project lock, the store unreachable) keeps its changes and is retried with a growing
  delay until it succeeds or the project stops being watched. A sync is a whole incremental
  job (walk, diff against the active table, embed what is new), so even an event the
  operating system lost is caught by the next sync.
* Confinement: before every sync the project's folder is resolved again, and a folder that
  now resolves elsewhere (replaced by a link, to a folder outside `FATHOM_INDEX_ROOTS` or
  anywhere else) stops the sync (`stopped`, with the reason and the fix) instead of indexing
  the other folder under the project's name. Nothing re-roots a project but an explicit index.
* The watch state each project is in (watching, syncing, waiting to retry, missing folder,
  stopped, off), for `index_status`, the admin API and the dashboard.

Searches keep answering during a sync: an incremental job writes new rows, then deletes the
replaced ones, in the active table, which searches read all along.

What it refuses to do: index by itself (`Fathom.index` runs each sync, under the project's
lock, so one process at a time syncs a project however many serve the data dir), block the
event loop, or watch a project whose setting is off.

Time and the change source are injected (`clock`, `sleep`, `changes`), so the coalescing and
retry logic is tested without waiting on a real clock; the real path is tested with
`watchfiles` on real folders.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fathom import scope as project_scope
from fathom.errors import ConfigError
from fathom.index.walker import IGNORE_FILES, Selection, SelectionOptions, resolve_roots, root_moved

if TYPE_CHECKING:  # pragma: no cover
    from fathom.config import Settings
    from fathom.index.job import IndexReport, Job
    from fathom.index.store import Store


class ProjectBook(Protocol):
    """The service's record of each project (`fathom.service.ProjectRecords`)."""

    def get(self, project: str) -> dict[str, Any] | None: ...

    def load(self) -> dict[str, dict[str, Any]]: ...


class Syncable(Protocol):
    """What live sync needs of the service (`fathom.service.indexing.Indexing`, or the `Fathom`
    that hands it on): its settings (the index roots), each project's record, the store's
    projects, the jobs it ran, what a walk of a project takes, and an index run. Named here so
    that retrieval does not import the service above it."""

    # Read-only (properties), so the service may hold narrower types: a `JobTable` is a
    # mapping of jobs, `ProjectRecords` a project book.
    @property
    def settings(self) -> Settings: ...

    @property
    def records(self) -> ProjectBook: ...

    @property
    def jobs(self) -> Mapping[str, Job]: ...

    @property
    def store(self) -> Store: ...

    def selection_of(self, project: str, root: Path) -> SelectionOptions: ...

    async def index(
        self, path: str | Path, project: str | None = None, *, reason: str | None = None
    ) -> IndexReport: ...


log = logging.getLogger(__name__)

# A source of change batches: (root, stop event, filter) -> absolute paths, batch by batch.
Changes = Callable[[Path, asyncio.Event, Callable[[Any, str], bool]], AsyncIterator[set[str]]]
# Told about every finished sync: (project, report or None, error or None).
OnSync = Callable[[str, "IndexReport | None", "BaseException | None"], None]


async def watchfiles_changes(
    root: Path,
    stop: asyncio.Event,
    admit: Callable[[Any, str], bool],
    *,
    step_ms: int = 50,
    debounce_ms: int = 1600,
) -> AsyncIterator[set[str]]:
    """Change batches from `watchfiles`: a batch closes after `step_ms` without a new event
    (or after `debounce_ms` at most). When the system's inotify watches run out (a huge tree),
    it falls back to polling rather than not watching."""
    from watchfiles import awatch

    polling = False
    while not stop.is_set():
        try:
            async for batch in awatch(
                root,
                watch_filter=admit,
                step=step_ms,
                debounce=debounce_ms,
                stop_event=stop,
                force_polling=polling or None,
                poll_delay_ms=500,
                raise_interrupt=False,
                ignore_permission_denied=True,
            ):
                yield {path for _, path in batch}
            return
        except OSError as exc:
            if polling or not root.is_dir():
                raise
            log.warning("watching %s with inotify failed (%s); polling it instead", root, exc)
            polling = True


@dataclass
class _Retry:
    """How long a failed sync waits before the next try: doubling from `first_s` to `max_s`.
    A project lock held by another process is not a fault: it is retried at `first_s`."""

    first_s: float = 1.0
    max_s: float = 30.0

    def delay(self, failures: int, busy: bool) -> float:
        if busy:
            return self.first_s
        return min(self.max_s, self.first_s * 2.0 ** max(0, failures - 1))


class RootMoved(ConfigError):
    """A watched project's folder no longer resolves to the folder it was indexed from: its
    sync stops rather than index another folder under its name."""

    def __init__(self, project: str, problem: str):
        self.project, self.problem = project, problem
        super().__init__(
            f"sync stopped: {problem}; fix: put the project folder back (a folder, not a link), "
            f"then turn sync on again (`fathom watching {project} --on`, or Sync in the "
            f"dashboard); to index the new place instead, the operator indexes it explicitly "
            f"(`fathom jobs start PATH --project {project}`)"
        )


def _busy(exc: BaseException) -> bool:
    # The store's project lock refusal (another process is indexing the project right now).
    return type(exc).__name__ == "ProjectLocked"


class ProjectSync:
    """Keeps one project's index current with its folder."""

    def __init__(
        self,
        fathom: Syncable,
        project: str,
        root: Path,
        *,
        changes: Changes,
        quiet_s: float,
        retry: _Retry,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[Any]],
        on_sync: OnSync | None,
        forced: bool = False,
        slots: asyncio.Semaphore | None = None,
    ):
        self.fathom = fathom
        self.forced = forced
        self.slots = slots or asyncio.Semaphore(1)
        self.project = project
        self.root = root
        self.changes = changes
        self.quiet_s = quiet_s
        self.retry = retry
        self.clock = clock
        self.sleep = sleep
        self.on_sync = on_sync
        options = fathom.selection_of(project, root)
        self.selection = Selection(root, include=options["include"], extra_ignores=options["extra_ignores"])
        self.pending: set[str] = set()
        self.state = "starting"
        self.detail: str | None = None
        self.syncs = 0  # sync jobs finished
        self.events = 0  # change batches received
        self.failures = 0  # consecutive failed syncs
        self.last_sync_at: float | None = None  # wall-clock time of the last finished sync
        self.last_job: str | None = None
        self.last_error: str | None = None
        self.retry_at: float | None = None
        self._dirty = asyncio.Event()
        self._dirty.set()  # a catch-up sync first: files may have changed while nobody watched
        self._last_change = clock() - quiet_s
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    # ---- lifecycle

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._feed(), name=f"fathom.watch:{self.project}"),
            asyncio.create_task(self._loop(), name=f"fathom.sync:{self.project}"),
        ]

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.state = "stopped"

    # ---- changes in

    def admit(self, change: Any, path: str) -> bool:
        """The watcher's filter: only a path a walk would consider starts a sync."""
        try:
            rel = Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return False
        if Path(path).name in IGNORE_FILES:
            self.selection.forget()  # the rules changed: read them again
        if os.path.isdir(path):
            return self.selection.admits(rel, is_dir=True)
        if os.path.lexists(path):
            return self.selection.admits(rel)
        # Gone: a deleted file or folder (a folder's rename reports only the folder). Either
        # reading must admit it; a path missed here is still caught by the next sync's diff.
        return self.selection.admits(rel) and self.selection.admits(rel, is_dir=True)

    def note(self, paths: set[str]) -> None:
        """A batch of changed paths: remembered until a sync has taken them."""
        self.pending |= paths
        self.events += 1
        self._last_change = self.clock()
        self._dirty.set()

    async def _feed(self) -> None:
        while not self._stop.is_set():
            try:
                self.state = "watching" if self.state == "starting" else self.state
                async for batch in self.changes(self.root, self._stop, self.admit):
                    if batch:
                        self.note(batch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a folder that vanished: wait for it
                self.state, self.detail = "missing", f"cannot watch {self.root}: {exc}"
                log.warning("watch of %s: %s; retrying", self.project, self.detail)
                await self.sleep(self.retry.max_s)
                self.note(set())

    # ---- syncs out

    async def _loop(self) -> None:
        while True:
            await self._dirty.wait()
            # Quiet for `quiet_s`: the rest of a burst (a checkout, a formatter) joins this job.
            while (left := self._last_change + self.quiet_s - self.clock()) > 0:
                await self.sleep(left)
            self._dirty.clear()
            taken, self.pending = self.pending, set()
            record = await asyncio.to_thread(self.fathom.records.get, self.project)
            if (record or {}).get("watch", True) is False and not self.forced:
                self.state = "off"  # turned off by another process since this one started
                self._stop.set()  # and the watcher with it
                return
            # Every sync, not once at start: the folder can be swapped for a link at any time.
            roots = resolve_roots(self.fathom.settings.index_root_list())
            problem = await asyncio.to_thread(root_moved, self.root, roots)
            if problem is not None:
                self._refuse(RootMoved(self.project, problem), taken)
                return
            await self._sync(taken)

    def _refuse(self, exc: RootMoved, taken: set[str]) -> None:
        self.pending |= taken
        self.state, self.retry_at = "stopped", None
        self.last_error = self.detail = str(exc)
        log.error("%s: %s", self.project, exc)
        self._notify(None, exc)
        self._stop.set()  # and the watcher with it: nothing from the other folder comes in

    async def _sync(self, taken: set[str]) -> None:
        self.state, self.retry_at = "syncing", None
        try:
            # The server's own job, whoever's request started the watch: a scoped token's
            # context (copied into these tasks) must not shape it.
            async with self.slots:
                with project_scope.within(None):
                    report = await self.fathom.index(self.root, self.project, reason="sync")
        except asyncio.CancelledError:
            self.pending |= taken
            raise
        except Exception as exc:  # recorded, retried; the changes stay pending
            self.pending |= taken
            self.failures += 1
            busy = _busy(exc)
            delay = self.retry.delay(self.failures, busy)
            self.state = "waiting"
            self.last_error = str(exc) or type(exc).__name__
            self.retry_at = time.time() + delay
            self.detail = (
                "another process is syncing it; retrying"
                if busy
                else f"sync failed, retrying in {delay:.0f} s: {self.last_error}"
            )
            log.warning("sync of %s failed (%s); retrying in %.1f s", self.project, self.last_error, delay)
            self._notify(None, exc)
            await self.sleep(delay)
            self._dirty.set()
            return
        self.failures, self.syncs = 0, self.syncs + 1
        self.last_sync_at, self.last_error, self.detail = time.time(), None, None
        self.last_job = self._job_of(report)
        self.state = "watching"
        self._notify(report, None)

    def _job_of(self, report: Any) -> str | None:
        jobs = [
            j
            for j in self.fathom.jobs.values()
            if j.project == self.project and j.reason == "sync" and j.report is report
        ]
        return jobs[-1].id if jobs else None

    def _notify(self, report: Any, error: BaseException | None) -> None:
        if self.on_sync is not None:
            try:
                self.on_sync(self.project, report, error)
            except Exception:  # a reporter must not stop the sync
                log.exception("sync reporter failed")

    def view(self) -> dict[str, Any]:
        def iso(t: float | None) -> str | None:
            return None if t is None else datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds")

        return {
            "state": self.state,
            "root": str(self.root),
            "pending": len(self.pending),
            "syncs": self.syncs,
            "last_sync": iso(self.last_sync_at),
            "last_job": self.last_job,
            "last_error": self.last_error,
            "retry_at": iso(self.retry_at),
            "detail": self.detail,
        }


class Watcher:
    """The live sync of one `Fathom`: a `ProjectSync` per watched project."""

    def __init__(
        self,
        fathom: Syncable,
        *,
        quiet_s: float = 0.3,
        step_ms: int = 50,
        retry_first_s: float = 1.0,
        retry_max_s: float = 30.0,
        changes: Changes | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        on_sync: OnSync | None = None,
        max_parallel: int = 2,
    ):
        self.fathom = fathom
        self.quiet_s = quiet_s
        self.retry = _Retry(retry_first_s, retry_max_s)
        self.changes: Changes = changes or (
            lambda root, stop, admit: watchfiles_changes(root, stop, admit, step_ms=step_ms)
        )
        self.clock = clock
        self.sleep = sleep
        self.on_sync = on_sync
        self.syncs: dict[str, ProjectSync] = {}
        # Syncs of different projects run side by side, a few at a time: a server starting
        # with many projects catches them up without saturating the machine.
        self.slots = asyncio.Semaphore(max_parallel)

    async def start_all(self) -> list[str]:
        """Watch every project with a root folder on this machine whose setting is on."""
        records = await asyncio.to_thread(self.fathom.records.load)
        known = {p.name for p in await asyncio.to_thread(self.fathom.store.list_projects)}
        started = []
        for project in sorted(known):
            record = records.get(project) or {}
            root = record.get("root")
            if root and record.get("watch", True) is not False and Path(root).is_dir():
                self.ensure(project, Path(root))
                started.append(project)
        return started

    def ensure(self, project: str, root: Path, *, force: bool = False) -> None:
        """Watch `project` at `root` (a no-op when it already is; a new root replaces the old
        watch). Refused quietly when the project's setting is off, unless `force` (an
        explicit `fathom watch`)."""
        record = self.fathom.records.get(project) or {}
        if record.get("watch", True) is False and not force:
            return
        # As recorded (the real path it was indexed from), not resolved again here: a folder
        # since replaced by a link must be caught by the sync's check, not followed.
        root = Path(os.path.abspath(Path(root).expanduser()))
        current = self.syncs.get(project)
        if current is not None and current.root == root and current.state not in ("stopped", "off"):
            return
        if current is not None:
            asyncio.get_running_loop().create_task(current.stop())
        sync = ProjectSync(
            self.fathom,
            project,
            root,
            changes=self.changes,
            quiet_s=self.quiet_s,
            retry=self.retry,
            clock=self.clock,
            sleep=self.sleep,
            on_sync=self.on_sync,
            forced=force,
            slots=self.slots,
        )
        self.syncs[project] = sync
        sync.start()
        log.info("watching %s (%s)", project, root)

    async def stop(self, project: str, *, off: bool = False) -> None:
        sync = self.syncs.pop(project, None)
        if sync is not None:
            await sync.stop()

    def state(self, project: str, *, enabled: bool = True) -> dict[str, Any]:
        sync = self.syncs.get(project)
        if not enabled:
            return {
                "enabled": False,
                "state": "off",
                "detail": "live sync is off for this "
                "project: `fathom watching PROJECT --on` turns it back on",
            }
        if sync is None:
            return {
                "enabled": True,
                "state": "not watched",
                "detail": "its folder is not on this machine, or it was never indexed here",
            }
        return {"enabled": True, **sync.view()}

    async def aclose(self) -> None:
        for project in list(self.syncs):
            await self.stop(project)
