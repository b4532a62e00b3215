"""Server index jobs survive restarts.

A real server process indexes a project through a job started with the CLI; the server is
killed (SIGKILL) mid-job, twice. After the first kill (the job was paused) the restarted server
lists it as "interrupted" and holds it until the operator resumes it with one command; after
the second (it was running) the restarted server resumes it by itself, and it completes with
every chunk of the project in the index.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from tests.fleet_fixtures import ADMIN, PY, ProcessGroup, free_port, spawn_server

pytestmark = pytest.mark.slow


def write_big_project(root: Path, files: int = 120, functions: int = 8) -> Path:
    for i in range(files):
        path = root / f"pkg{i % 6}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n\n".join(
            f"def step_{i}_{j}(value):\n    \"\"\"Stage {j} of pipeline {i}: scale and shift.\"\"\"\n"
            f"    total = value * {j + 1} + {i}\n    return total - {j}\n" for j in range(functions)))
    return root


def cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "fathom.cli", *args], capture_output=True, text=True, timeout=120,
                          env={"FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "200",
                               "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


def poll(fn: Callable[[], Any], *, timeout: float = 180.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


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
        paused = cli(url, "jobs", "pause", job_id)
        assert paused.returncode == 0, paused.stdout + paused.stderr
        poll(lambda: job(job_id)["state"] == "paused", what="the pause")
        group.kill(server)

        # Restarted: the job is listed as interrupted, and (it was paused) held for the operator.
        server = spawn_server(group, data, port)
        listed = cli(url, "jobs")
        assert listed.returncode == 0 and job_id in listed.stdout and "interrupted" in listed.stdout, listed.stdout
        view = job(job_id)
        assert view["state"] == "interrupted" and not view["finished"], view
        assert "server stopped" in view["error"] and "fathom jobs resume" in view["error"], view
        time.sleep(1.0)
        assert job(job_id)["state"] == "interrupted"
        resumed = cli(url, "jobs", "resume", job_id)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        poll(lambda: job(job_id)["state"] == "running" and job(job_id)["chunks_done"] > 0, what="the resumed run")
        group.kill(server)

        # Restarted again: a job that was running resumes by itself and completes.
        spawn_server(group, data, port)
        done = poll(lambda: (j := job(job_id))["finished"] and j, what="the job to finish")
        assert done["state"] == "done", done
        expected = int(done["report"]["tables"]["code"])
        assert expected >= 120 * 8
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
