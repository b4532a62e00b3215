"""The process's one runner of index runs (`JobTable.launch`, `wait`, `stop_runs`), which the
MCP tools' background runs and the admin API's jobs both go through.

The runs here are coroutines on the job's own checkpoints (what an index run awaits between
batches), so each test says exactly where a run stands; the admin API's shutdown through it,
with a real run, is `tests/service/test_jobs_restart.py`.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from fathom.errors import UnknownJob
from fathom.index.job import IndexReport, Job, JobCancelled, JobState
from fathom.service.jobs import JobTable


def running(job: Job) -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name() == f"fathom.index:{job.id}" and not t.done()]


async def until_cancelled(job: Job, ran: asyncio.Event | None = None) -> IndexReport:
    """A run that goes on, batch after batch, until its job is cancelled."""
    job.state = JobState.RUNNING
    if ran is not None:
        ran.set()
    try:
        while True:
            await job.checkpoint()
            await asyncio.sleep(0)
    except JobCancelled:
        job.state = JobState.CANCELLED
        raise


async def test_a_launched_run_is_listed_held_and_waited_for():
    table = JobTable()
    job = Job("p", "/tmp/p")
    report = IndexReport(
        project="p",
        root="/tmp/p",
        full=True,
        resumed=False,
        files=1,
        chunks=1,
        embedded=1,
        reused=0,
        deleted=0,
        skipped={},
        elapsed_s=0.0,
        embed_s=0.0,
        rate=0.0,
        tables={"code": 1},
    )

    async def run() -> IndexReport:
        await asyncio.sleep(0)
        job.state, job.report = JobState.DONE, report
        return report

    table.launch(job, run())
    assert table[job.id] is job and len(running(job)) == 1
    assert await table.wait(job) is report
    assert running(job) == []
    assert await table.wait(job) is report  # a finished run answers from its job
    with pytest.raises(UnknownJob, match="not running in this process"):
        await table.wait(Job("q", "/tmp/q"))


async def test_a_waiter_that_is_cancelled_cancels_the_job_and_the_run_ends_at_its_checkpoint():
    table = JobTable()
    job, ran = Job("p", "/tmp/p"), asyncio.Event()
    table.launch(job, until_cancelled(job, ran))
    await ran.wait()
    waiter = asyncio.create_task(table.wait(job))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await table.stop_runs(timeout=30)
    assert job.state is JobState.CANCELLED and running(job) == []


async def test_stop_runs_waits_for_a_run_that_stops_and_cancels_one_that_does_not():
    table = JobTable()
    polite = Job("a", "/tmp/a")
    table.launch(polite, until_cancelled(polite))
    await asyncio.sleep(0)
    polite.cancel()
    await table.stop_runs(timeout=30)  # it ends at its next checkpoint, well within the grace
    assert polite.state is JobState.CANCELLED and running(polite) == []

    stubborn, forever = Job("b", "/tmp/b"), asyncio.Event()

    async def ignores_its_flag() -> None:
        await forever.wait()

    table.launch(stubborn, ignores_its_flag())
    await asyncio.sleep(0)
    stubborn.cancel()
    await table.stop_runs(timeout=0)  # no grace: what has not ended is cancelled
    assert running(stubborn) == []


async def test_a_failure_that_escapes_a_run_is_retrieved_and_logged(caplog):
    table = JobTable()
    job = Job("p", "/tmp/p")

    async def fails() -> None:
        raise OSError("No space left on device")

    with caplog.at_level(logging.INFO, logger="fathom.server.jobs"):
        table.launch(job, fails())
        await table.stop_runs(timeout=30)
        await asyncio.sleep(0)  # the done callback runs on the loop's next turn
    assert f"index job {job.id} (p) failed: No space left on device" in caplog.text
    assert running(job) == []


async def test_a_job_resumed_under_its_id_keeps_its_new_run_when_the_old_one_ends():
    table = JobTable()
    first = Job("p", "/tmp/p")
    table.launch(first, until_cancelled(first))
    await asyncio.sleep(0)
    first.cancel()
    again = Job("p", "/tmp/p")
    again.id = first.id  # the admin API resumes an interrupted job under its id
    ran = asyncio.Event()
    table.launch(again, until_cancelled(again, ran))
    await ran.wait()
    await asyncio.sleep(0)  # the first run has ended, and its callback run
    assert first.state is JobState.CANCELLED
    waiter = asyncio.create_task(table.wait(again))  # still held: the new run is waited for
    await asyncio.sleep(0)
    assert not waiter.done()
    again.cancel()
    with pytest.raises(JobCancelled):
        await waiter
