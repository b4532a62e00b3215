"""`/admin/jobs`: start an index job, its live progress, pause, resume, cancel. The jobs'
logic is the service's `IndexJobs` (`fathom.service.jobs`); these routes only call it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter

from fathom.errors import ConfigError, JobConflict, UnknownJob
from fathom.server.admin.bodies import JobStart
from fathom.server.admin.views import job_view
from fathom.server.answers import failure_status, refusal

if TYPE_CHECKING:
    from fathom.server.admin.operator import OperatorParts

log = logging.getLogger("fathom.server.admin")


def jobs_router(parts: OperatorParts) -> APIRouter:
    """Start, list, read and steer index jobs."""
    router = APIRouter()

    @router.post("/jobs", tags=["jobs"], status_code=202)
    async def start_job(body: JobStart) -> dict[str, Any]:
        """Start indexing a folder (absolute path on the server) into a project."""
        jobs = parts.need("jobs")
        try:
            job = await jobs.start(body.path, body.project, body.full)
        except ConfigError as exc:
            raise refusal(400, str(exc), exc.problems) from None
        return job_view(job)

    @router.get("/jobs", tags=["jobs"])
    async def list_jobs() -> dict[str, Any]:
        return {"jobs": [job_view(j) for j in parts.need("jobs").all()]}

    @router.get("/jobs/{job_id}", tags=["jobs"])
    async def get_job(job_id: str) -> dict[str, Any]:
        """One job's live progress: phase, chunks done of total, rate, ETA."""
        try:
            return job_view(parts.need("jobs").get(job_id))
        except UnknownJob as exc:
            raise refusal(404, str(exc)) from None

    @router.post("/jobs/{job_id}/{action}", tags=["jobs"])
    async def control_job(job_id: str, action: Literal["pause", "resume", "cancel"]) -> dict[str, Any]:
        """Pause (between batches), resume (a paused job, or one a server stop interrupted), or
        cancel (the active table is unchanged; a later full run resumes from the rows already
        embedded)."""
        try:
            job = await parts.need("jobs").act(job_id, action)
        except (UnknownJob, JobConflict) as exc:
            raise refusal(failure_status(exc), str(exc)) from None
        log.info("index job %s: %s by the operator", job_id, action)
        return job_view(job)

    return router
