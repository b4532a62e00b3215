"""Index jobs started over the admin API: their tasks in this server's event loop, and their
records kept across restarts (`JobLedger`). The indexer runs them; this starts, steers and
records them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fathom.errors import ConfigError
from fathom.server.answers import refusal
from fathom.server.job_records import JobLedger, JobRecord

log = logging.getLogger("fathom.server.admin")


def _refused_root(root: Path, refused: list[str]) -> str | None:
    from fathom.index.walker import RefusedRoot, check_root

    try:
        check_root(root, refused)
    except RefusedRoot as exc:
        return str(exc)
    return None


class IndexJobs:
    """Index jobs started over the API, running in this server's event loop, and kept across
    restarts.

    Jobs live in the service's own `jobs` table (so `fathom status` and the MCP tools see the
    same ones); this keeps their tasks, so a failed job's exception is retrieved and logged, and
    their records in the `JobLedger` (`jobs.json`), saved on every change of state. Shutdown
    stops what still runs and records it as interrupted (the shadow table keeps its work); at
    the next start (`restore`) interrupted jobs are listed, and those the ledger says may are
    resumed; the operator resumes any other one (`act(id, "resume")`)."""

    def __init__(self, service: Any, *, ledger: JobLedger | None = None, resume_on_start: bool = True):
        self.service = service
        self.ledger = ledger
        self.resume_on_start = resume_on_start
        self._tasks: dict[str, asyncio.Task[Any]] = {}
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

    async def start(self, path: str, project: str, full: bool = False) -> Any:
        from fathom.index.indexer import Job, ProjectPathError
        from fathom.index.store import check_project_name

        problems = []
        try:
            check_project_name(project)
        except ConfigError as exc:
            problems.append(str(exc))
        try:
            root = Path(path).expanduser()
        except RuntimeError:  # `~name` of a user this machine does not have
            root = Path(path)
        if not root.is_absolute():
            problems.append(f"{path} is a relative path; give the absolute path of the project folder as the "
                            f"server sees it (the CLI resolves it for you)")
        elif (refused := _refused_root(root, self.service.settings.refused_roots)) is not None:
            problems.append(refused)
        elif not root.exists():
            problems.append(str(ProjectPathError(path, "no such folder on the server")))
        elif not root.is_dir():
            problems.append(str(ProjectPathError(path, "it is a file, not a folder")))
        if problems:
            raise ConfigError("cannot start the index job: " + "; ".join(problems), problems)
        job = Job(project, root, full=full, clock=self.service.clock)
        now = self.ledger.now() if self.ledger is not None else datetime.now(tz=UTC)
        self._records[job.id] = JobRecord(id=job.id, project=project, root=str(root), full=full,
                                          state=job.state.value, created_at=now, updated_at=now)
        self._launch(job)
        log.info("index job %s started: project %s from %s%s", job.id, project, root, " (full)" if full else "")
        await self._save()
        return job

    def _launch(self, job: Any) -> None:
        self.service.jobs[job.id] = job
        task = asyncio.get_running_loop().create_task(self._run(job), name=f"fathom.index:{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(lambda t, jid=job.id: self._tasks.pop(jid, None))

    async def _run(self, job: Any) -> None:
        from fathom.index.indexer import JobCancelled, JobState

        try:
            from fathom.inference.budget import current_project

            current_project.set(job.project)  # cloud permits are shared fairly across projects
        except ImportError:  # pragma: no cover - the budget is part of the package
            pass
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
        except Exception as exc:  # noqa: BLE001 - the job records it; the server goes on
            if not job.finished:  # failed before the indexer took it (e.g. the store would not open)
                job.state, job.error = JobState.FAILED, str(exc) or type(exc).__name__
            log.warning("index job %s (%s) failed: %s", job.id, job.project, job.error)
        finally:
            await self._saved(job)

    def all(self) -> list[Any]:
        return list(self.service.jobs.values())

    def get(self, job_id: str) -> Any:
        job = self.service.jobs.get(job_id)
        if job is None:
            raise refusal(404, f"no index job {job_id!r}; see GET /admin/jobs")
        return job

    async def act(self, job_id: str, action: str) -> Any:
        """Pause (between batches), resume (a paused job, or an interrupted one: a new run under
        the same id), or cancel; 409 for an action that does not apply to the job's state."""
        from fathom.index.indexer import JobState

        job = self.get(job_id)
        state = str(job.state.value)
        if state == "interrupted" and job_id in self._records:
            if action == "pause":
                raise refusal(409, f"job {job_id} is interrupted, not running; resume it with POST "
                                   f"/admin/jobs/{job_id}/resume, or cancel it")
            if action == "resume":
                job = self._job_for_run(self._records[job_id])
                self._launch(job)
            else:
                job.state, job.error = JobState.CANCELLED, None
            await self._saved(job)
            return job
        if job.finished:
            raise refusal(409, f"job {job_id} is {state}; there is nothing to {action}")
        if action == "resume" and state != "paused":
            raise refusal(409, f"job {job_id} is {state}, not paused; there is nothing to resume")
        if action == "pause" and state == "paused":
            raise refusal(409, f"job {job_id} is already paused; resume it with POST /admin/jobs/{job_id}/resume")
        getattr(job, action)()
        await self._saved(job)
        return job

    # -- records -------------------------------------------------------------------------

    def _job_of(self, record: JobRecord) -> Any:
        """A `Job` showing what a record says (a finished or interrupted job of an earlier run)."""
        from fathom.index.indexer import IndexProgress, IndexReport, Job, JobState

        job = Job(record.project, record.root, full=record.full, clock=self.service.clock)
        job.id = record.id
        job.state = JobState(record.state)
        job.error = record.error
        progress = {k: v for k, v in record.progress.items()
                    if k in ("phase", "files", "chunks_total", "chunks_done", "chunks_reused")}
        job.progress = IndexProgress(record.project, **{"phase": record.state, **progress})
        if record.report:
            with contextlib.suppress(TypeError):
                job.report = IndexReport(**record.report)
        return job

    def _job_for_run(self, record: JobRecord) -> Any:
        """A new run of an interrupted job, under its id (a full run resumes its shadow table)."""
        from fathom.index.indexer import Job

        job = Job(record.project, record.root, full=record.full, clock=self.service.clock)
        job.id = record.id
        record.paused, record.error = False, None
        log.info("index job %s (%s) resumed", record.id, record.project)
        return job

    async def _saved(self, job: Any) -> None:
        """Record `job`'s state (and progress, report) in its ledger record, and save."""
        record = self._records.get(job.id)
        if record is None:
            return  # a job this registry did not start (an MCP call's): not kept
        view = job.as_dict()
        record.state, record.error = view["state"], view["error"]
        record.progress = {k: view[k] for k in ("phase", "files", "chunks_total", "chunks_done", "chunks_reused")}
        if getattr(job, "report", None) is not None:
            record.report = dataclasses.asdict(job.report)
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
        from fathom.index.indexer import JobState

        tasks = list(self._tasks.values())
        stopped = [j for j in self.all() if not j.finished and j.state is not JobState.INTERRUPTED]
        for job in stopped:
            record = self._records.get(job.id)
            if record is not None:
                record.paused = job.state is JobState.PAUSED
            job.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=timeout)
        for job in stopped:
            record = self._records.get(job.id)
            if record is not None:
                record.interrupted_by("the server was stopped while it ran")
                job.state, job.error = JobState.INTERRUPTED, record.error
        await self._save()
