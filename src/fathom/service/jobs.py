"""Index jobs at the service layer: the process's table of jobs, the server's kept jobs (start,
restore at start, pause / resume / cancel, shutdown) and the ledger that keeps them on disk.

What this module owns:

- `JobTable`: every index job of this process (asked for by the CLI, an MCP tool, the admin
  API, or the watcher's syncs), so `fathom status`, the MCP tools and the dashboard see the
  same ones; the one runner of the runs that outlive the call that started them (an MCP
  tool's, the admin API's: `launch`, `wait`, `stop_runs`); the rule that a watched project's
  finished syncs are pruned (`SYNC_JOBS_KEPT`); and which run is building a project now
  (`building`), which every front end shows as "indexing" with its progress (`progress_line`),
  and which a question about a project not yet searchable is answered with
  (`ProjectIndexing`) instead of "index it first".
- `IndexJobs`: the jobs started over the admin API, running in the server's event loop and
  kept across restarts in the `JobLedger`; an action that does not apply to a job's state is
  refused with `JobConflict`, an unknown id with `UnknownJob` (the HTTP edge maps them).
- `JobLedger` / `JobRecord`: `jobs.json` under the data dir: one record per job started over
  the admin API (its project, folder, kind, state, progress when last saved, why it stopped,
  how often the server died under it), written atomically on every state change. It also owns
  the rule for what a record read at start means:

  - a job recorded as pending or running was cut off by a crash or a kill: it is interrupted,
    and that crash is counted against it;
  - a job recorded as paused was cut off too, but held: the operator paused it;
  - a job recorded as interrupted was stopped by a server shutdown;
  - finished jobs (done, failed, cancelled) are history, the newest `KEEP_FINISHED` kept.

  And which interrupted jobs resume on start by themselves (`resumes_on_start`): those not
  paused, on which the server has not died `HOLD_AFTER_CRASHES` times (a job that keeps killing
  the server waits for the operator instead of killing it again at every start).

It refuses to do a job's work itself (`Fathom.index` does, through the indexer), to answer
HTTP (the admin routes map its typed errors), and to read a damaged ledger as "no jobs": a file
it cannot read is reported (`damaged`) and left as it is, and nothing is written over it until
an operator fixes or moves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fathom import scope
from fathom.config import Settings, atomic_write_text, state_defect
from fathom.errors import ConfigError, JobConflict, StoreError, UnknownJob, failure_of
from fathom.index.indexer import check_project_root
from fathom.index.job import IndexProgress, IndexReport, Job, JobCancelled, JobState, progress_line
from fathom.index.store import TABLE_KINDS, UnknownProject
from fathom.inference.budget import current_project
from fathom.service.projects import ProjectRecords, check_not_from_git

log = logging.getLogger("fathom.server.jobs")

KEEP_FINISHED = 200
HOLD_AFTER_CRASHES = 2
FINISHED = ("done", "failed", "cancelled")
SYNC_JOBS_KEPT = 5  # finished live-sync jobs remembered per project


# ---------------------------------------------------------------------------- the process's jobs


class JobTable(dict[str, Job]):
    """Every index job of this process, by id (a dict: front ends read it as one), and the one
    runner of the runs started for a caller that does not wait in line for them: each a task
    of the running event loop, held until it ends (none is collected mid-run), a failure that
    escapes it retrieved and logged."""

    def __init__(self) -> None:
        super().__init__()
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def launch(self, job: Job, run: Coroutine[Any, Any, Any]) -> None:
        """List `job` and start `run`, its work, as a task of the running event loop."""
        self[job.id] = job
        task = asyncio.get_running_loop().create_task(run, name=f"fathom.index:{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(functools.partial(self._ended, job))

    def _ended(self, job: Job, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(job.id) is task:  # a resumed job runs again under its id
            del self._tasks[job.id]
        if task.cancelled():
            return
        exc = task.exception()  # retrieved, so a failure is never "never retrieved"
        if isinstance(exc, JobCancelled):
            log.info("index job %s (%s) cancelled", job.id, job.project)
        elif exc is not None:
            log.warning("index job %s (%s) failed: %s", job.id, job.project, job.error or exc)

    async def wait(self, job: Job) -> IndexReport:
        """The run's report, for a caller that blocks on it. If that caller is cancelled (an
        MCP client sent `notifications/cancelled`), so is the job: it ends at its next
        checkpoint with the active table untouched."""
        task = self._tasks.get(job.id)
        if task is None:
            if job.report is None:
                raise UnknownJob(job.id, "it is not running in this process")
            return job.report
        try:
            report: IndexReport = await asyncio.shield(task)
            return report
        except asyncio.CancelledError:
            # Not waited for: the caller is gone (and a cancelled anyio scope would cancel
            # any wait here again). The task is held until it ends, at its next checkpoint.
            job.cancel()
            raise

    async def stop_runs(self, timeout: float) -> None:
        """Wait up to `timeout` s for the runs launched here (their jobs asked to stop before),
        then cancel the tasks still going and wait as long again."""
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def of(self, project: str) -> list[Job]:
        # A copy first: searches read the table from worker threads while the event loop
        # adds and prunes jobs (a dict changed mid-iteration raises).
        return [j for j in list(self.values()) if j.project == project]

    def prune_syncs(self, project: str, keep: int = SYNC_JOBS_KEPT) -> None:
        """A watched project syncs all day: only its last few finished sync jobs are kept."""
        syncs = [j for j in self.of(project) if j.reason == "sync" and j.finished]
        for job in syncs[:-keep]:
            self.pop(job.id, None)

    def cancel_running(self, project: str) -> None:
        for job in self.of(project):
            if not job.finished:
                job.cancel()

    def forget_finished(self, project: str) -> None:
        for job in self.of(project):
            if job.finished:
                del self[job.id]

    def building(self, project: str) -> Job | None:
        """The run building `project`'s index now (pending, running or paused; the newest if
        several), or None; None too for a project the current caller may not see (a scoped
        token learns nothing of the projects outside its scope). A live sync is not such a
        run (it keeps an index that answers), nor an interrupted job (a record of a run,
        waiting to be resumed)."""
        held = scope.current()
        if held is not None and project not in held:
            return None
        going = [
            j
            for j in self.of(project)
            if not j.finished and j.reason != "sync" and j.state is not JobState.INTERRUPTED
        ]
        return going[-1] if going else None

    def being_built(self) -> list[Job]:
        """Every project's building run (`building`), as far as the current caller may see."""
        jobs = (self.building(p) for p in dict.fromkeys(j.project for j in list(self.values())))
        return [j for j in jobs if j is not None]


class ProjectIndexing(UnknownProject):
    """A question about a project whose first index is still being built: it has no table to
    answer from yet. Says how far the run is and how to follow it, instead of "index it
    first" (which would have an agent start the same run again)."""

    def __init__(self, project: str, job: Job):
        self.project, self.known, self.job_id = project, [], job.id
        StoreError.__init__(
            self,
            f"project {project!r} is being indexed (job {job.id}, {progress_line(job)}); it "
            f"answers once that first index is done. Follow it with index_status(project="
            f"{project!r}, job={job.id!r}), or `fathom projects` on the command line",
        )


def ended_early(job: Job, exc: BaseException, clock: Callable[[], float]) -> None:
    """Record how a job ended that was refused before the indexer took it (a lock, a missing
    encoder): the indexer records the end of every job it took."""
    if job.finished:
        return
    failure = failure_of(exc) if isinstance(exc, Exception) else None
    job.state = JobState.CANCELLED if isinstance(exc, asyncio.CancelledError) else JobState.FAILED
    job.error = None if job.state is JobState.CANCELLED else (str(failure or exc) or type(exc).__name__)
    job.finished_at = clock()


def refuse_first_index(jobs: JobTable, store: Any, project: str) -> None:
    """`ProjectIndexing` when `project`'s first index is running: no table of it answers yet
    (a shadow at most, until promotion). A question then learns how far the run is, instead
    of "index it first", and is never answered as if the project were empty."""
    run = jobs.building(project)
    if run is not None and not any(store.space_of(project, t) for t in TABLE_KINDS):
        raise ProjectIndexing(project, run)


def first_index_notes(jobs: JobTable, store: Any, answering: list[str], skipped: list[str]) -> list[str]:
    """For a search of every project (`answering` the projects it reads, `skipped` its notes
    on those it leaves out): a note on each project whose first index is running (no table of
    it answers yet: a full re-index of an indexed project, or a project without the table
    asked, is no such project), saying that it answers keyword-only meanwhile when its walk
    has begun (`keyword_only`); when no project answers at all and no note explains why,
    `ProjectIndexing` for the first of them."""
    first = [
        j
        for j in jobs.being_built()
        if j.project not in answering and not any(store.space_of(j.project, t) for t in TABLE_KINDS)
    ]
    if first and not answering and not skipped and all(j.interim is None for j in first):
        raise ProjectIndexing(first[0].project, first[0])
    return [
        keyword_only_note(j)
        if j.interim is not None
        else f"{j.project!r} is being indexed ({progress_line(j)}): it joins searches once "
        f"that first index is done"
        for j in first
    ]


def keyword_only(jobs: JobTable, store: Any, project: str | None) -> list[Job]:
    """The first-index runs that answer keyword questions now: `project`'s (every project's
    the caller may see, for None) whose walk has begun and that have no table yet (once
    promoted, the tables answer, both halves). Blocking: it asks the store."""
    runs = jobs.being_built() if project is None else [jobs.building(project)]
    return [
        j
        for j in runs
        if j is not None
        and j.interim is not None
        and not any(store.space_of(j.project, t) for t in TABLE_KINDS)
    ]


def keyword_only_note(job: Job) -> str:
    """What every answer read from a first index's walked chunks says (`keyword_only`)."""
    interim = job.interim
    held = (
        f" (over its first {interim.chunks:,} chunks walked)" if interim is not None and interim.full else ""
    )
    return (
        f"{job.project!r} is being indexed ({progress_line(job)}): answers from it are "
        f"keyword-only{held} until that first index is done"
    )


# ---------------------------------------------------------------------------- the ledger


class JobRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=64)
    project: str
    root: str
    full: bool = False
    state: str
    error: str | None = None
    created_at: datetime
    updated_at: datetime
    crashes: int = Field(default=0, ge=0)  # times the server died while this job ran
    paused: bool = False  # paused when it was interrupted: held for the operator
    progress: dict[str, Any] = Field(default_factory=dict)  # phase, files, chunks done/total
    report: dict[str, Any] | None = None

    def interrupted_by(self, reason: str) -> None:
        self.state = "interrupted"
        self.error = f"interrupted: {reason}; " + (
            f"it was paused: resume it with `fathom jobs resume {self.id}`"
            if self.paused
            else f"held after the server died {self.crashes} times under it: resume it with "
            f"`fathom jobs resume {self.id}`"
            if self.crashes >= HOLD_AFTER_CRASHES
            else f"it resumes when the server starts, or with `fathom jobs resume {self.id}`"
        )

    @property
    def resumes_on_start(self) -> bool:
        return self.state == "interrupted" and not self.paused and self.crashes < HOLD_AFTER_CRASHES


class JobLedger:
    """`jobs.json`: load once at start (`restore`), then `save` the records on each change."""

    FILENAME = "jobs.json"

    def __init__(self, data_dir: Path, *, now: Callable[[], datetime] = lambda: datetime.now(tz=UTC)):
        self.path = Path(data_dir) / self.FILENAME
        self.now = now
        self.damaged: str | None = None  # why the file could not be read (and is left alone)

    def restore(self) -> list[JobRecord]:
        """The records on disk, with every unfinished one marked interrupted (blocking)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            return self._unreadable(state_defect(exc))
        try:
            data = json.loads(raw)
            records = [JobRecord.model_validate(r) for r in data["jobs"]]
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            return self._unreadable(
                state_defect(exc)
                if isinstance(exc, ValueError)
                else f"no list of jobs ({type(exc).__name__})"
            )
        for record in records:
            if record.state in ("pending", "running"):
                record.crashes += 1
                record.interrupted_by("the server stopped while it ran (a crash or a kill)")
            elif record.state == "paused":
                record.paused = True
                record.interrupted_by("the server stopped while it was paused")
            record.updated_at = self.now()
        return records

    def _unreadable(self, defect: str) -> list[JobRecord]:
        self.damaged = (
            f"{self.path} is not a valid job record ({defect}): the jobs it held are not "
            f"listed and new ones are not kept across restarts. Fix it, or move it aside"
        )
        log.error("%s", self.damaged)
        return []

    def save(self, records: list[JobRecord]) -> None:
        """Write `records` (blocking): every unfinished one, and the newest finished ones."""
        if self.damaged is not None:
            return  # never over a file an operator may still want to repair
        finished = [r for r in records if r.state in FINISHED]
        kept = [r for r in records if r.state not in FINISHED] + finished[-KEEP_FINISHED:]
        kept.sort(key=lambda r: r.created_at)
        atomic_write_text(
            self.path, json.dumps({"jobs": [r.model_dump(mode="json") for r in kept]}, indent=1)
        )


# ---------------------------------------------------------------------------- the server's jobs


class JobService(Protocol):
    """What `IndexJobs` needs of the service (`fathom.service.Fathom`)."""

    settings: Settings
    clock: Callable[[], float]
    jobs: JobTable
    records: ProjectRecords

    @property
    def store(self) -> Any: ...

    async def index(
        self, path: str | Path, project: str | None = None, *, full: bool = False, job: Job | None = None
    ) -> Any: ...


class IndexJobs:
    """Index jobs started over the API, running in this server's event loop, and kept across
    restarts.

    Jobs live in the service's own `jobs` table (so `fathom status` and the MCP tools see the
    same ones); this keeps their tasks, so a failed job's exception is retrieved and logged, and
    their records in the `JobLedger` (`jobs.json`), saved on every change of state. Shutdown
    stops what still runs and records it as interrupted (the shadow table keeps its work); at
    the next start (`restore`) interrupted jobs are listed, and those the ledger says may are
    resumed; the operator resumes any other one (`act(id, "resume")`)."""

    def __init__(self, service: JobService, *, ledger: JobLedger | None = None, resume_on_start: bool = True):
        self.service = service
        self.ledger = ledger
        self.resume_on_start = resume_on_start
        self._records: dict[str, JobRecord] = {}
        self._saving = asyncio.Lock()

    @property
    def problem(self) -> str | None:
        """Why jobs are not kept across restarts, when they are not."""
        return self.ledger.damaged if self.ledger is not None else None

    async def restore(self) -> None:
        """At start: list the jobs the ledger kept, and resume the interrupted ones it may."""
        if self.ledger is None:
            return
        records = await asyncio.to_thread(self.ledger.restore)
        for record in records:
            self._records[record.id] = record
            self.service.jobs.setdefault(record.id, self._job_of(record))
        await self._save()
        for record in records:
            if record.state == "interrupted":
                log.warning("index job %s (%s) was %s", record.id, record.project, record.error)
                if self.resume_on_start and record.resumes_on_start:
                    job = self._job_for_run(record)
                    self._launch(job)
                    # Saved as running at once: if it takes the server down again, the next
                    # start counts that against it instead of resuming it forever.
                    await self._saved(job)

    async def start(self, path: str, project: str, full: bool = False) -> Job:
        """Start indexing `path` (absolute, on the server) into `project`; `ConfigError` listing
        every problem (the name, the folder) when it cannot start."""
        from fathom.index.store import check_project_name

        problems = []
        try:
            check_project_name(project)
            await asyncio.to_thread(lambda: check_not_from_git(self.service.records.get(project), project))
        except ConfigError as exc:
            problems.append(str(exc))
        try:
            root = Path(path).expanduser()
        except RuntimeError:  # `~name` of a user this machine does not have
            root = Path(path)
        if not root.is_absolute():
            problems.append(
                f"{path} is a relative path; give the absolute path of the project folder as the "
                f"server sees it (the CLI resolves it for you)"
            )
        else:
            try:
                check_project_root(root, self.service.settings.refused_roots)
            except ConfigError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError("cannot start the index job: " + "; ".join(problems), problems)
        job = Job(project, root, full=full, clock=self.service.clock)
        now = self.ledger.now() if self.ledger is not None else datetime.now(tz=UTC)
        self._records[job.id] = JobRecord(
            id=job.id,
            project=project,
            root=str(root),
            full=full,
            state=job.state.value,
            created_at=now,
            updated_at=now,
        )
        self._launch(job)
        log.info(
            "index job %s started: project %s from %s%s", job.id, project, root, " (full)" if full else ""
        )
        await self._save()
        return job

    def _launch(self, job: Job) -> None:
        self.service.jobs.launch(job, self._run(job))

    async def _run(self, job: Job) -> None:
        current_project.set(job.project)  # cloud permits are shared fairly across projects
        try:
            # The service opens its store lazily, on the calling thread; the first open imports
            # and starts the vector store (seconds), which must not stall the event loop (the
            # sidecars' WebSockets and every other request live there).
            await asyncio.to_thread(getattr, self.service, "store")
            await self.service.index(job.root, job.project, full=job.full, job=job)
            log.info("index job %s (%s) done", job.id, job.project)
        except JobCancelled:
            log.info("index job %s (%s) cancelled", job.id, job.project)
        except asyncio.CancelledError:
            if not job.finished:
                job.state = JobState.CANCELLED
            raise
        except Exception as exc:  # the job records it; the server goes on
            if not job.finished:  # failed before the indexer took it (e.g. the store would not open)
                job.state, job.error = JobState.FAILED, str(exc) or type(exc).__name__
            log.warning("index job %s (%s) failed: %s", job.id, job.project, job.error)
        finally:
            await self._saved(job)

    def all(self) -> list[Job]:
        return list(self.service.jobs.values())

    def get(self, job_id: str) -> Job:
        job = self.service.jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id, "see GET /admin/jobs")
        return job

    async def act(self, job_id: str, action: str) -> Job:
        """Pause (between batches), resume (a paused job, or an interrupted one: a new run under
        the same id), or cancel; `JobConflict` for an action that does not apply to the job's
        state."""
        job = self.get(job_id)
        state = str(job.state.value)
        if state == "interrupted" and job_id in self._records:
            if action == "pause":
                raise JobConflict(
                    job_id,
                    state,
                    f"job {job_id} is interrupted, not running; resume it with POST "
                    f"/admin/jobs/{job_id}/resume, or cancel it",
                )
            if action == "resume":
                job = self._job_for_run(self._records[job_id])
                self._launch(job)
            else:
                job.state, job.error = JobState.CANCELLED, None
            await self._saved(job)
            return job
        if job.finished:
            raise JobConflict(job_id, state, f"job {job_id} is {state}; there is nothing to {action}")
        if action == "resume" and state != "paused":
            raise JobConflict(
                job_id, state, f"job {job_id} is {state}, not paused; there is nothing to resume"
            )
        if action == "pause" and state == "paused":
            raise JobConflict(
                job_id,
                state,
                f"job {job_id} is already paused; resume it with POST /admin/jobs/{job_id}/resume",
            )
        getattr(job, action)()
        await self._saved(job)
        return job

    # -- records -------------------------------------------------------------------------

    def _job_of(self, record: JobRecord) -> Job:
        """A `Job` showing what a record says (a finished or interrupted job of an earlier run)."""
        job = Job(record.project, record.root, full=record.full, clock=self.service.clock)
        job.id = record.id
        job.state = JobState(record.state)
        job.error = record.error
        progress = {
            k: v
            for k, v in record.progress.items()
            if k in ("phase", "files", "chunks_total", "chunks_done", "chunks_reused")
        }
        job.progress = IndexProgress(record.project, **{"phase": record.state, **progress})
        if record.report:
            with contextlib.suppress(TypeError):
                job.report = IndexReport(**record.report)
        return job

    def _job_for_run(self, record: JobRecord) -> Job:
        """A new run of an interrupted job, under its id (a full run resumes its shadow table)."""
        job = Job(record.project, record.root, full=record.full, clock=self.service.clock)
        job.id = record.id
        record.paused, record.error = False, None
        log.info("index job %s (%s) resumed", record.id, record.project)
        return job

    async def _saved(self, job: Job) -> None:
        """Record `job`'s state (and progress, report) in its ledger record, and save."""
        record = self._records.get(job.id)
        if record is None:
            return  # a job this registry did not start (an MCP call's): not kept
        view = job.as_dict()
        record.state, record.error = view["state"], view["error"]
        record.progress = {
            k: view[k] for k in ("phase", "files", "chunks_total", "chunks_done", "chunks_reused")
        }
        report = getattr(job, "report", None)
        if report is not None:
            record.report = dataclasses.asdict(report)
        if self.ledger is not None:
            record.updated_at = self.ledger.now()
        await self._save()

    async def _save(self) -> None:
        if self.ledger is None:
            return
        async with self._saving:  # one write at a time, in the order of the changes
            records = [r.model_copy(deep=True) for r in self._records.values()]
            try:
                await asyncio.to_thread(self.ledger.save, records)
            except OSError as exc:
                log.error("could not save the index jobs to %s: %s", self.ledger.path, exc.strerror or exc)

    async def aclose(self, timeout: float = 10.0) -> None:
        """Stop what runs; record it as interrupted (paused jobs held), to resume at next start."""
        stopped = [j for j in self.all() if not j.finished and j.state is not JobState.INTERRUPTED]
        for job in stopped:
            record = self._records.get(job.id)
            if record is not None:
                record.paused = job.state is JobState.PAUSED
            job.cancel()
        await self.service.jobs.stop_runs(timeout)
        for job in stopped:
            record = self._records.get(job.id)
            if record is not None:
                record.interrupted_by("the server was stopped while it ran")
                job.state, job.error = JobState.INTERRUPTED, record.error
        await self._save()
