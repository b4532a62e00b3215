"""The MCP tools that write the index: `index_project` and `cancel_index`, registered on the
server `fathom.server.mcp_tools` builds.

What it owns: their argument and result shapes, the choice between answering at once and
blocking, progress notifications while a blocking run goes, and the shape of one job as
`index_status(project, job=ID)` shows it (`JobView`).

A first index of a project, or a `full` one, can take many minutes: `index_project` then
starts it as a background job and answers at once with `background: true` and the job
(`fathom.service.background`). The installed MCP SDK carries the tasks extension's wire
types but serves none of its methods, so the handle is Fathom's own: the client follows the
job with `index_status(project, job=ID)` and stops it with `cancel_index(project, job=ID)`.
`wait: true` blocks as before (with progress notifications); a client that cancels such a
call (`notifications/cancelled`) cancels its job too. An incremental run of an indexed
project blocks: it embeds only what changed.

What it refuses to do: index or cancel anything itself (`BackgroundIndex` and the service
do), or kill a run mid-write: a cancelled job stops at its next checkpoint and the project's
active table keeps answering as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from fathom.index.job import IndexReport, Job
from fathom.server.mcp_common import ProjectName, tool_errors
from fathom.service.background import BackgroundIndex

if TYPE_CHECKING:  # pragma: no cover
    from mcp.server.mcpserver import MCPServer

    from fathom.service import Fathom

JobId = Annotated[
    str,
    Field(
        description="The job's id, as index_project or index_status gives it.", min_length=1, max_length=64
    ),
]


class JobView(BaseModel):
    id: str
    project: str
    root: str
    full: bool
    state: str = Field(description="pending, running, paused, done, failed, cancelled or interrupted")
    cancelling: bool = Field(description="a cancel was asked for; the job stops at its next checkpoint")
    phase: str
    files: int
    chunks_total: int
    chunks_done: int
    error: str | None


def job_view(job: Job) -> JobView:
    d = job.as_dict()
    return JobView(
        id=job.id,
        project=job.project,
        root=str(job.root),
        full=job.full,
        state=d["state"],
        cancelling=job.stop.is_set() and not job.finished,
        phase=d["phase"],
        files=d["files"],
        chunks_total=d["chunks_total"],
        chunks_done=d["chunks_done"],
        error=d["error"],
    )


class IndexSummary(BaseModel):
    project: str
    root: str
    full: bool = Field(description="a full rebuild (else incremental)")
    background: bool = Field(
        default=False,
        description="the run goes on in the background: follow "
        "`job` with index_status(project, job=ID); the counts below are "
        "null until it is done",
    )
    job: JobView | None = Field(default=None, description="the job of this run")
    resumed: bool | None = Field(default=None, description="a full rebuild that resumed an interrupted one")
    files: int | None = None
    chunks: int | None = Field(default=None, description="chunks in the project now, both tables")
    embedded: int | None = Field(
        default=None, description="chunks embedded by this run: only those whose text is new to the index"
    )
    reused: int | None = Field(default=None, description="chunks already in place, untouched")
    carried: int | None = Field(
        default=None,
        description="chunks whose text was already indexed "
        "elsewhere (moved lines, a renamed file): their vector was "
        "reused, not embedded",
    )
    deleted: int | None = Field(default=None, description="chunks removed because their text is gone")
    skipped: dict[str, int] = Field(default_factory=dict, description="files left out, counted by reason")
    skipped_folders: dict[str, list[str]] = Field(
        default_factory=dict, description=("folders left out whole, by reason (first 50 of each)")
    )
    secret_files: list[str] = Field(
        default_factory=list,
        description=(
            "credential files left out whole by their name (first 50), by path; a `!path` line "
            "in .fathomignore takes one back"
        ),
    )
    redacted_files: list[str] = Field(
        default_factory=list,
        description=(
            "files indexed with the key material in them redacted (first 50), by path: each value "
            "reads `[REDACTED:<rule>]`, the code around it is searchable"
        ),
    )
    seconds: float | None = None
    code_chunks: int | None = None
    docs_chunks: int | None = None


def summary_of(r: IndexReport, job: Job) -> IndexSummary:
    return IndexSummary(
        project=r.project,
        root=r.root,
        full=r.full,
        job=job_view(job),
        resumed=r.resumed,
        files=r.files,
        chunks=r.chunks,
        embedded=r.embedded,
        reused=r.reused,
        carried=r.carried,
        deleted=r.deleted,
        skipped=r.skipped,
        skipped_folders={k: v[:50] for k, v in r.skipped_dirs.items()},
        secret_files=r.secrets[:50],
        redacted_files=r.redacted[:50],
        seconds=round(r.elapsed_s, 2),
        code_chunks=r.tables.get("code", 0),
        docs_chunks=r.tables.get("docs", 0),
    )


class ProgressReporter:
    """Index progress as MCP progress notifications: chunks done of the total and the rate,
    at most `per_s` a second (the last one always), sent from one task so a slow client never
    stalls the job."""

    def __init__(self, ctx: Context | None, per_s: float = 4.0):
        self.ctx = ctx
        self.interval = 1.0 / per_s
        self._latest: Any = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, progress: Any) -> None:
        self._latest = progress
        self._changed.set()

    async def __aenter__(self) -> ProgressReporter:
        if self.ctx is not None:
            self._task = asyncio.create_task(self._send())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            with contextlib.suppress(Exception):
                await self._report()  # the final state, whatever the throttle said

    async def _send(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            with contextlib.suppress(Exception):  # a client that left must not fail the job
                await self._report()
            await asyncio.sleep(self.interval)

    async def _report(self) -> None:
        p = self._latest
        if p is None or self.ctx is None:
            return
        total = p.chunks_total or None
        if p.chunks_total:
            message = (
                f"{p.phase}: {p.chunks_done} of {p.chunks_total} chunks embedded, "
                f"{p.rate:.1f} chunks/s"
                + (f", {p.chunks_carried} reused by content" if p.chunks_carried else "")
            )
        else:
            message = f"{p.phase}: {p.files} files" if p.files else p.phase
        await self.ctx.report_progress(float(p.chunks_done), float(total) if total else None, message)


def register_index_tools(server: MCPServer, fathom: Fathom) -> BackgroundIndex:
    """`index_project` and `cancel_index`; returns the runs' keeper, which `index_status`
    shares."""
    runs = BackgroundIndex(fathom)

    @server.tool(
        title="Index a project",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
        description="Index (or re-index) a folder on the server's machine and keep "
        "it in sync. A first or full run answers at once with a `job` "
        "(index_status(project, job=ID) follows it); others wait.",
    )
    @tool_errors
    async def index_project(
        path: Annotated[str, Field(description="The folder's absolute path.", min_length=1, max_length=4096)],
        project: Annotated[
            str | None, Field(description="The project's name; null: the folder's.", max_length=200)
        ] = None,
        full: Annotated[
            bool,
            Field(
                description="Rebuild aside and swap in (searches answer meanwhile); false: "
                "embed only new text."
            ),
        ] = False,
        include: Annotated[
            list[str] | None,
            Field(
                description="Globs (gitignore syntax) to index although skipped (vendor/, "
                '.gitignore…), e.g. ["vendor/mylib/"]; remembered. null: keep.',
                max_length=50,
            ),
        ] = None,
        wait: Annotated[
            bool, Field(description="Block until done, even a first or full run (sending progress).")
        ] = False,
        ctx: Context | None = None,
    ) -> IndexSummary:
        target = await runs.check(path, project)
        if not wait and await runs.first_or_full(target, full):
            job = await runs.start(target, full=full, include=include)
            return IndexSummary(
                project=job.project, root=str(job.root), full=full, background=True, job=job_view(job)
            )
        async with ProgressReporter(ctx) as report_progress:
            job = await runs.start(target, full=full, include=include, progress=report_progress)
            report = await runs.wait(job)
        return summary_of(report, job)

    @server.tool(
        title="Cancel an index job",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
        description="Cancel a running index job: a first or full run leaves the "
        "index as it was, an incremental one keeps what it wrote.",
    )
    @tool_errors
    async def cancel_index(project: ProjectName, job: JobId) -> JobView:
        return job_view(runs.cancel(project, job))

    return runs
