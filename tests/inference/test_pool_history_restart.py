"""Batch history survives a server restart (issue 20), through the real path.

A real `fathom server` on its data dir indexes a project with the in-process MiniLM encoder:
its pool ramps from batch 4 and the size it learned is written to `routing.json`. The server
is killed; one stored entry is damaged by hand; the server restarts on the same data dir. The
next job starts the encoder at the learned size (the pool says so in the server's log), the
damaged entry is reported and dropped, and routing is unaffected: the job completes and the
policies answer.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fleet.fleet_fixtures import ADMIN, ProcessGroup, free_port, spawn_server
from tests.service.jobs_fixtures import write_big_project

pytestmark = pytest.mark.slow


def poll(fn: Callable[[], Any], *, timeout: float = 240.0, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def test_the_next_job_after_a_restart_starts_at_the_learned_batch_size(tmp_path: Path):
    first = write_big_project(tmp_path / "first", files=40)
    second = tmp_path / "second"
    shutil.copytree(first, second)
    data = tmp_path / "data"
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    admin = httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
    )

    def index(root: Path, project: str) -> dict[str, Any]:
        started = admin.post("/admin/jobs", json={"path": str(root), "project": project})
        assert started.status_code in (200, 201, 202), started.text
        job_id = started.json()["id"]
        done = poll(
            lambda: (j := admin.get(f"/admin/jobs/{job_id}").json())["finished"] and j,
            what=f"the {project} job",
        )
        assert done["state"] == "done", done
        return done

    try:
        server = spawn_server(group, data, port)
        index(first, "first")
        stored = json.loads((data / "routing.json").read_text())["batches"]["code"]
        [(encoder, record)] = stored.items()  # the in-process encoder, the only provider
        learned = record["batch_size"]
        assert learned > 4 and record["spi"] > 0, record  # it ramped from 4 and measured
        assert "from its measured history" not in server.log_path.read_text()
        group.kill(server)

        routing = json.loads((data / "routing.json").read_text())
        routing["batches"]["code"]["sidecar-gone"] = {"batch_size": "lots"}
        (data / "routing.json").write_text(json.dumps(routing))

        server = spawn_server(group, data, port, log_name="server-2")
        index(second, "second")
        log = server.log_path.read_text()
        assert f"pool: {encoder} starts at batch {learned}, from its measured history" in log, log
        assert "sidecar-gone for the code table" in log and "is damaged" in log
        assert admin.get("/admin/policies").status_code == 200
        after = json.loads((data / "routing.json").read_text())["batches"]["code"]
        assert set(after) == {encoder}  # the damaged entry was dropped when the job wrote back
    finally:
        admin.close()
        group.stop()
