"""Index runs that outlive the call that asked for them: the MCP `index_project` tool starts a
first or full index here and answers at once with the job, which the client polls
(`index_status` with the job's id) and may cancel (`cancel_index`).

What it owns: starting a run after every check a caller can fix has passed (so a bad folder
is refused in the call, not as a failed job later), the refusal of a second run of a project
whose run is still going (naming that job), `wait` for a caller that blocks on the run (its
own cancellation cancels the job), and `cancel`.

What it refuses to do: index anything itself (`Fathom.index` runs the job, the indexer does
the work), hold the run's task (the process's `JobTable` runs it, as it runs the admin API's),
keep jobs across restarts (the admin API's `IndexJobs` does, with its ledger), or cancel by
killing the task: a cancel is the job's own flag, seen between batches and once
more right before promotion, so the active table is never replaced by a half-built one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from fathom.errors import ConfigError, UnknownJob
from fathom.index.job import IndexProgress, IndexReport, Job, JobState
from fathom.service.jobs import JobTable
from fathom.service.projects import (
    IndexTarget,
    ProjectRecords,
    check_includes,
    index_target,
    indexed_before,
)

log = logging.getLogger("fathom.service.background")


class IndexService(Protocol):
    """What background runs need of the service (`fathom.service.Fathom`)."""

    settings: Any
    records: ProjectRecords
    jobs: JobTable
    clock: Callable[[], float]

    async def index(
        self,
        path: Any,
        project: str | None = None,
        *,
        full: bool = False,
        progress: Callable[[IndexProgress], None] | None = None,
        job: Job | None = None,
        include: Sequence[str] | None = None,
        reason: str | None = None,
        target: IndexTarget | None = None,
    ) -> IndexReport: ...


class Busy(ConfigError):
    """A run of the project is still going: one writer per project."""

    def __init__(self, project: str, job: Job):
        self.project, self.job_id = project, job.id
        super().__init__(
            f"project {project!r} is being indexed by job {job.id} ({job.state.value}); follow it "
            f"with index_status(project={project!r}, job={job.id!r}), or stop it with "
            f"cancel_index(project={project!r}, job={job.id!r})"
        )


class BackgroundIndex:
    """Index runs started by a call, running as tasks of this event loop."""

    def __init__(self, service: IndexService):
        self.service = service

    async def check(self, path: str, project: str | None) -> IndexTarget:
        """Every check of the folder (`index_target`), made once for the call: a bad folder is
        refused in it, and the run is handed the result."""
        return await asyncio.to_thread(
            index_target, self.service.records, self.service.settings, path, project
        )

    async def first_or_full(self, target: IndexTarget, full: bool) -> bool:
        """Whether a run of the checked folder would build a whole table: asked for `full`, or
        the project was never indexed (those are the long runs that answer at once)."""
        if full:
            return True
        # A job seen done counts at once: its run records the project's last run just after.
        if any(j.state is JobState.DONE for j in self.service.jobs.of(target.name)):
            return False
        return not await asyncio.to_thread(indexed_before, self.service.records, target.name)

    async def start(
        self,
        target: IndexTarget,
        *,
        full: bool = False,
        include: Sequence[str] | None = None,
        progress: Callable[[IndexProgress], None] | None = None,
    ) -> Job:
        """Start a run of the checked folder (`check`) once what else it needs holds; the job
        is returned at once."""
        if include is not None:
            include = check_includes(include)
        for other in self.service.jobs.of(target.name):
            # A sync waits for the project lock; an interrupted job is a record, not a run.
            if not other.finished and other.reason != "sync" and other.state is not JobState.INTERRUPTED:
                raise Busy(target.name, other)
        job = Job(target.name, target.root, full=full, clock=self.service.clock)
        self.service.jobs.launch(
            job,
            self.service.index(
                target.root,
                target.name,
                full=full,
                progress=progress,
                job=job,
                include=include,
                target=target,
            ),
        )
        log.info(
            "index job %s started: project %s from %s%s",
            job.id,
            job.project,
            job.root,
            " (full)" if full else "",
        )
        return job

    async def wait(self, job: Job) -> IndexReport:
        """The run's report, for a caller that blocks on it; its cancellation cancels the job."""
        return await self.service.jobs.wait(job)

    def find(self, project: str, job_id: str) -> Job:
        """The job `job_id` of `project` (any job of this process: asked for, or a sync)."""
        job = self.service.jobs.get(job_id)
        if job is None or job.project != project:
            raise UnknownJob(job_id, f"index_status(project={project!r}) lists that project's jobs")
        return job

    def cancel(self, project: str, job_id: str) -> Job:
        """Ask the job to stop; it does at its next checkpoint (between batches, and before
        promotion). A first or full run (built in a shadow slot) then promotes nothing and
        leaves the active table as it was; an incremental run or a sync keeps the batches it
        already wrote into the active table (the rows they replace are deleted by the next
        run). A finished job is left as it ended."""
        job = self.find(project, job_id)
        job.cancel()
        return job
