"""Server index jobs survive restarts.

A real server process indexes a project through a job started with the CLI; the server is
killed (SIGKILL) mid-job, twice. After the first kill (the job was paused) the restarted server
lists it as "interrupted" and holds it until the operator resumes it with one command; after
the second (it was running) the restarted server resumes it by itself, and it completes with
every chunk of the project in the index.

Then, on the server app in this process: a job the server died under twice is held for the
operator instead of killing it at every start; a damaged job file is reported and left as it
is, never read as "no jobs"; a clean stop records running jobs as interrupted.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fleet.fleet_fixtures import ADMIN, PY, ProcessGroup, free_port, spawn_server
from tests.service.jobs_fixtures import write_big_project


def cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "fathom.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "FATHOM_SERVER": url,
            "FATHOM_ADMIN_TOKEN": ADMIN,
            "COLUMNS": "200",
            "PATH": "/usr/bin:/bin",
            "HF_HUB_OFFLINE": "1",
        },
    )


def poll(fn: Callable[[], Any], *, timeout: float = 180.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_a_killed_server_lists_its_jobs_as_interrupted_and_resumes_them(tmp_path: Path):
    root = write_big_project(tmp_path / "big")
    data = tmp_path / "data"
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)

    def job(job_id: str) -> dict[str, Any]:
        return admin.get(f"/admin/jobs/{job_id}").json()

    try:
        server = spawn_server(group, data, port)
        started = cli(url, "jobs", "start", str(root), "--project", "big", "--full")
        assert started.returncode == 0, started.stdout + started.stderr
        job_id = started.stdout.split("started job ", 1)[1].split()[0]
        poll(lambda: job(job_id)["chunks_done"] > 0, what="the job to embed")
        paused = admin.post(f"/admin/jobs/{job_id}/pause")  # at once: the CLI takes a second to start
        assert paused.status_code == 200 and paused.json()["state"] == "paused", paused.text
        group.kill(server)

        # Restarted: the job is listed as interrupted, and (it was paused) held for the operator.
        server = spawn_server(group, data, port)
        listed = cli(url, "jobs")
        assert listed.returncode == 0 and job_id in listed.stdout and "interrupted" in listed.stdout, (
            listed.stdout
        )
        view = job(job_id)
        assert view["state"] == "interrupted" and not view["finished"], view
        assert "server stopped" in view["error"] and "fathom jobs resume" in view["error"], view
        # No wait is needed to know it stays held: the server restores its jobs in its lifespan,
        # before its port answers, and saves a job it resumes as running at once
        # (`IndexJobs.restore`), so a resumed job would already read "running" above.
        resumed = cli(url, "jobs", "resume", job_id)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        poll(
            lambda: job(job_id)["state"] == "running" and job(job_id)["chunks_done"] > 0,
            what="the resumed run",
        )
        group.kill(server)

        # Restarted again: a job that was running resumes by itself and completes.
        spawn_server(group, data, port)
        done = poll(lambda: (j := job(job_id))["finished"] and j, what="the job to finish")
        assert done["state"] == "done", done
        expected = int(done["report"]["tables"]["code"])
        assert expected >= 60 * 6
        listed = cli(url, "jobs")
        assert job_id in listed.stdout and "done" in listed.stdout, listed.stdout
        # Nothing is missing: an incremental run over the same project embeds nothing.
        again = admin.post("/admin/jobs", json={"path": str(root), "project": "big"}).json()
        again = poll(lambda: (j := job(again["id"]))["finished"] and j, what="the incremental run")
        assert again["state"] == "done" and again["report"]["embedded"] == 0, again
        assert again["report"]["tables"]["code"] == expected
    finally:
        admin.close()
        group.stop()


def _record(job_id: str, root: Path, state: str, crashes: int = 0) -> dict[str, Any]:
    return {
        "id": job_id,
        "project": "demo",
        "root": str(root),
        "full": True,
        "state": state,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "crashes": crashes,
        "progress": {"phase": "embedding", "chunks_done": 3, "chunks_total": 9},
    }


async def test_jobs_the_server_died_under_resume_once_then_wait_for_the_operator(tmp_path: Path):
    from tests.fleet.fleet_fixtures import HashEmbedder, serve_in_loop
    from tests.server.admin_fixtures import build_operator_app, make_project

    data = tmp_path / "data"
    data.mkdir()
    root = make_project(tmp_path / "demo")
    (data / "jobs.json").write_text(
        json.dumps(
            {
                "jobs": [
                    _record("crashedonce", root, "running"),  # the server died under it once: resumes
                    _record("crashedtwice", root, "running", crashes=1),  # a second time: held
                    _record("finished", root, "done"),
                ]
            }
        )
    )
    gate = asyncio.Event()
    encoder = HashEmbedder(width=8, gate=gate)  # holds the resumed run in its first batch
    async with serve_in_loop(build_operator_app(data, encoder=encoder)) as url:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:

            async def state(job_id: str) -> dict[str, Any]:
                return (await admin.get(f"/admin/jobs/{job_id}")).json()

            await asyncio.wait_for(encoder.started.wait(), 60)
            # While it runs again, the file says so: a crash now would count against it.
            on_disk = {r["id"]: r for r in json.loads((data / "jobs.json").read_text())["jobs"]}
            assert on_disk["crashedonce"]["state"] in ("pending", "running"), on_disk["crashedonce"]
            assert on_disk["crashedonce"]["crashes"] == 1
            gate.set()
            deadline = time.monotonic() + 60
            while (await state("crashedonce"))["state"] != "done":
                assert time.monotonic() < deadline, await state("crashedonce")
                await asyncio.sleep(0.05)
            held = await state("crashedtwice")
            assert held["state"] == "interrupted" and "held after the server died 2 times" in held["error"], (
                held
            )
            assert (await state("finished"))["state"] == "done"
            assert (await admin.post("/admin/jobs/crashedtwice/pause")).status_code == 409
            assert (await admin.post("/admin/jobs/crashedtwice/cancel")).json()["state"] == "cancelled"
            on_disk = {r["id"]: r for r in json.loads((data / "jobs.json").read_text())["jobs"]}
            assert (
                on_disk["crashedonce"]["state"] == "done" and on_disk["crashedtwice"]["state"] == "cancelled"
            )


async def test_a_clean_stop_records_a_paused_job_as_interrupted_and_held(tmp_path: Path):
    from tests.fleet.fleet_fixtures import HashEmbedder, serve_in_loop
    from tests.server.admin_fixtures import build_operator_app, make_project

    data = tmp_path / "data"
    root = make_project(tmp_path / "demo")
    gate = asyncio.Event()
    encoder = HashEmbedder(width=8, gate=gate)  # holds the first batch until the job is paused
    async with serve_in_loop(build_operator_app(data, encoder=encoder)) as url:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
            started = (
                await admin.post("/admin/jobs", json={"path": str(root), "project": "demo", "full": True})
            ).json()
            await asyncio.wait_for(encoder.started.wait(), 30)
            paused = (await admin.post(f"/admin/jobs/{started['id']}/pause")).json()
            assert paused["state"] == "paused"
            gate.set()
    # The stop waited for the run to end: no index task of it is left on the loop.
    left = [t for t in asyncio.all_tasks() if t.get_name() == f"fathom.index:{started['id']}"]
    assert all(t.done() for t in left), left
    on_disk = {r["id"]: r for r in json.loads((data / "jobs.json").read_text())["jobs"]}
    record = on_disk[started["id"]]
    assert record["state"] == "interrupted" and record["paused"], record
    assert "server was stopped" in record["error"] and "fathom jobs resume" in record["error"], record


async def test_a_damaged_job_file_is_reported_and_left_alone(tmp_path: Path):
    from tests.fleet.fleet_fixtures import serve_in_loop
    from tests.server.admin_fixtures import build_operator_app, make_project

    data = tmp_path / "data"
    data.mkdir()
    root = make_project(tmp_path / "demo")
    garbled = b'{"jobs": [{"id": "x", "state": "runn'
    (data / "jobs.json").write_bytes(garbled)
    async with serve_in_loop(build_operator_app(data)) as url:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
            overview = (await admin.get("/admin/overview")).json()
            assert any(
                "jobs.json is not a valid job record" in p and "move it aside" in p
                for p in overview["problems"]
            ), overview["problems"]
            job = (await admin.post("/admin/jobs", json={"path": str(root), "project": "demo"})).json()
            assert job["state"] in ("pending", "running")  # jobs still run; they are not kept
    assert (data / "jobs.json").read_bytes() == garbled
