"""Hostile files on disk, through the product as it is operated: a FIFO where an ignore file
should be, a file name that is not UTF-8, a system folder given as a project, a walk that must
stop when its job is cancelled, and a flood of index calls that must not starve searches."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from mcp import Client
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.index import indexer as indexer_mod
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import serve_in_loop
from tests.index.retrieval_fixtures import write_project
from tests.server.admin_fixtures import AUTH, Operator, build_operator_app

runner = CliRunner()


def release_fifo_readers(*fifos: Path, seconds: float = 3.0) -> None:
    """Give every reader blocked on these FIFOs an end of file, for a few seconds (a walker
    released from one FIFO may block on the next): a walker that hangs on one would otherwise
    keep the test process alive."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for fifo in fifos:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno in (errno.ENXIO, errno.ENOENT):
                    continue  # no reader waiting
                raise
            os.close(fd)
        time.sleep(0.01)


# ---------------------------------------------------------------- a FIFO named .gitignore


async def test_fifo_ignore_files_and_a_flood_of_index_calls_never_hang_the_mcp_server(
    tmp_path, local_encoder
):
    root = write_project(tmp_path / "p")
    (root / "sub").mkdir()
    (root / "sub" / "code.py").write_text("def in_sub():\n    return 'sub'\n")
    (root / ".git" / "info").mkdir(parents=True)
    fifos = [root / "sub" / ".gitignore", root / ".git" / "info" / "exclude", root / "pipe.py"]
    for fifo in fifos:
        os.mkfifo(fifo)
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    # A walker that reads a FIFO blocks until a writer comes: this watchdog is that writer,
    # so a hang shows up as a failed test instead of a stuck test process.
    watchdog = threading.Timer(120, release_fifo_readers, fifos, {"seconds": 30})
    watchdog.daemon = True
    watchdog.start()
    try:
        async with Client(build_mcp_server(fathom)) as client:
            # More index calls at once than the default executor has threads (6 on 2 cores).
            started = time.monotonic()
            results = await asyncio.gather(
                *(
                    client.call_tool("index_project", {"path": str(root), "project": f"p{i}", "wait": True})
                    for i in range(8)
                )
            )
            took = time.monotonic() - started
            assert took < 100, f"the index calls hung for {took:.0f}s on a FIFO"
            for r in results:
                assert not r.is_error, r.content[0].text
                skipped = r.structured_content["skipped"]
                # Both ignore files and the FIFO posing as code: skipped and counted, never read.
                assert skipped.get("special-file") == 3, skipped
                assert r.structured_content["files"] == 6  # the sample's 5 files and sub/code.py
            # The session still answers every tool.
            found = await client.call_tool(
                "search_code", {"query": "retry a flaky network call", "project": "p0", "k": 3}
            )
            assert not found.is_error and found.structured_content["results"]
            listed = await client.call_tool("list_projects", {})
            assert len(listed.structured_content["projects"]) == 8
    finally:
        watchdog.cancel()
        release_fifo_readers(*fifos)


def test_walker_reads_only_regular_files_with_bounded_reads(tmp_path):
    from fathom.index.walker import SLOW, SPECIAL, TOO_LARGE, read_regular, walk

    root = tmp_path / "p"
    root.mkdir()
    (root / "ok.py").write_text("x = 1\n")
    os.mkfifo(root / ".gitignore")
    os.mkfifo(root / "fifo.md")
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(root / "sock.py"))
        result = walk(root)
    assert [f.path for f in result.files] == ["ok.py"]
    assert result.skipped[SPECIAL] == 3  # the .gitignore FIFO, the FIFO and the socket
    release_fifo_readers(root / ".gitignore", root / "fifo.md", seconds=0.2)

    big = root / "big.py"
    big.write_text("y = 2\n" * 1000)
    with pytest.raises(Exception) as err:
        read_regular(big, 100)
    assert err.value.reason == TOO_LARGE  # type: ignore[attr-defined]
    ticks = iter(range(0, 1000, 20))  # an injected clock: every read "takes" 20 s
    with pytest.raises(Exception) as err:
        read_regular(big, 10**6, seconds=10, clock=lambda: float(next(ticks)))
    assert err.value.reason == SLOW  # type: ignore[attr-defined]


def test_walk_stops_between_entries_once_cancelled(tmp_path):
    from fathom.index.walker import WalkCancelled, walk

    root = tmp_path / "p"
    for d in range(5):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(20):
            (root / f"d{d}" / f"f{f}.py").write_text(f"v = {f}\n")

    class AfterN:
        """A cancel event that becomes set after `n` checks (one check per entry)."""

        def __init__(self, n: int):
            self.n, self.checks = n, 0

        def is_set(self) -> bool:
            self.checks += 1
            return self.checks > self.n

    cancel = AfterN(7)
    with pytest.raises(WalkCancelled):
        walk(root, cancel=cancel)  # type: ignore[arg-type]
    assert cancel.checks == 8  # it stopped at the first entry after the cancel


@pytest.mark.slow
async def test_cancelled_server_jobs_stop_their_walks_and_walks_are_bounded(tmp_path):
    """Index jobs flood the server with walks of a large tree: at most MAX_WALKS walk at once,
    in their own threads (the default executor stays free for searches), and cancelling the
    jobs through the admin API stops every walk between two entries."""
    big = tmp_path / "big"
    for d in range(40):
        sub = big / f"d{d}"
        sub.mkdir(parents=True)
        for f in range(500):
            (sub / f"f{f}.txt").write_bytes(b"")
    app_ = build_operator_app(tmp_path / "data")
    async with serve_in_loop(app_) as url:
        op = Operator(url, app_, tmp_path / "data", tmp_path)
        async with op.client() as client:
            ids = []
            for i in range(4):
                r = await client.post("/admin/jobs", json={"path": str(big), "project": f"big{i}"})
                assert r.status_code == 202, r.text
                ids.append(r.json()["id"])
            walking = await _walking_threads_when_busy()
            assert 1 <= len(walking) <= 2, walking  # four jobs, two walks at most
            assert all(name.startswith("fathom-walk") for name in walking), walking
            assert indexer_mod.MAX_WALKS == 2
            # The default executor still answers at once while the walks run.
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 2) == "free"
            for job_id in ids:
                r = await client.post(f"/admin/jobs/{job_id}/cancel")
                assert r.status_code in (200, 409), r.text
            jobs = [await op.wait_job(client, j, timeout=30) for j in ids]
        assert [j["state"] for j in jobs] == ["cancelled"] * 4, jobs
        # No walk finished: each stopped between two entries (files are counted only after).
        assert all(j["files"] == 0 for j in jobs), jobs
        await asyncio.sleep(0)
        for _ in range(100):  # the walk threads come back to the pool promptly
            if not _threads_in_walk():
                break
            await asyncio.sleep(0.05)
        assert not _threads_in_walk()

        # A caller that goes away (an MCP client cancelling its request) stops the walk too.
        task = asyncio.create_task(app_.state.service.index(big, "big-gone"))
        await _walking_threads_when_busy()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for _ in range(100):
            if not _threads_in_walk():
                break
            await asyncio.sleep(0.05)
        assert not _threads_in_walk()


def _threads_in_walk() -> list[str]:
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        while frame is not None:
            if frame.f_code.co_name == "walk_dir" or (frame.f_code.co_name == "_walk_dir"):
                out.append(names.get(ident, "?"))
                break
            frame = frame.f_back
    return out


async def _walking_threads_when_busy() -> list[str]:
    for _ in range(400):
        walking = _threads_in_walk()
        if walking:
            await asyncio.sleep(0.2)  # let every walk that can start, start
            return _threads_in_walk()
        await asyncio.sleep(0.01)
    raise AssertionError("no walk was seen running")


# ---------------------------------------------------------------- a name that is not UTF-8


def test_a_file_name_that_is_not_utf8_is_indexed_under_an_escaped_name(tmp_path, local_encoder):
    root = write_project(tmp_path / "shop")
    with open(os.fsencode(root) + b"/caf\xe9.py", "wb") as fh:
        fh.write(
            b'def brew_coffee(beans):\n    """Grind the beans and brew a cup."""\n    return grind(beans)\n'
        )
    os.mkdir(os.fsencode(root) + b"/d\xff")
    with open(os.fsencode(root) + b"/d\xff/tea.py", "wb") as fh:
        fh.write(b"def steep_tea(leaves):\n    return leaves\n")
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)

    def cli(*args: str):
        return runner.invoke(app, list(args), obj={"fathom": fathom}, env={"COLUMNS": "200"})

    result = cli("index", str(root), "--project", "shop")
    assert result.exit_code == 0, result.output
    assert "escaped-name 2" in result.output
    result = cli("search", "grind beans and brew coffee", "--project", "shop", "-k", "3")
    assert result.exit_code == 0, result.output
    assert " caf\\xe9.py:1" in result.output and " shop " in result.output
    result = cli("projects")
    assert result.exit_code == 0 and "(indexing)" not in result.output, result.output
    assert fathom.projects()[0].tables["code"] >= 4
    # A re-run is incremental: the escaped names are stable ids.
    result = cli("index", str(root), "--project", "shop")
    assert result.exit_code == 0 and re.search(r"embedded\s+0 in", result.output), result.output


# ---------------------------------------------------------------- system folders


async def test_system_folders_are_refused_as_a_root_even_through_a_link(tmp_path, local_encoder):
    secret = tmp_path / "secret"
    write_project(secret)
    settings = Settings(
        data_dir=tmp_path / "data", refused_roots=["/", "/proc", "/sys", "/dev", "/etc", str(secret)]
    )
    fathom = Fathom(settings, encoder=local_encoder)
    link = tmp_path / "innocent"
    link.symlink_to("/etc")
    async with asyncio.timeout(60), Client(build_mcp_server(fathom)) as client:
        # The list is configurable through the settings.
        r = await client.call_tool("index_project", {"path": str(secret)})
        assert r.is_error and f"refusing to index {secret}" in r.content[0].text
        for path in ("/etc", "/etc/ssl", "/proc", "/"):
            r = await client.call_tool("index_project", {"path": path, "project": "sys"})
            assert r.is_error, path
            assert f"refusing to index {path}" in r.content[0].text
            assert "system folder" in r.content[0].text
        r = await client.call_tool("index_project", {"path": str(link), "project": "sys"})
        assert r.is_error and "it leads to /etc" in r.content[0].text
        listed = await client.call_tool("list_projects", {})
        assert listed.structured_content["projects"] == []

    result = await asyncio.to_thread(
        runner.invoke, app, ["index", "/etc", "--project", "etc"], obj={"fathom": fathom}
    )
    assert result.exit_code == 2 and "refusing to index /etc" in result.output

    app_ = build_operator_app(tmp_path / "srv")
    async with serve_in_loop(app_) as url:
        import httpx

        async with httpx.AsyncClient(base_url=url, headers=AUTH) as client:
            r = await client.post("/admin/jobs", json={"path": "/etc", "project": "etc"})
            assert r.status_code == 400 and "refusing to index /etc" in r.text
            r = await client.post("/admin/jobs", json={"path": str(link), "project": "etc"})
            assert r.status_code == 400 and "it leads to /etc" in r.text
            assert (await client.get("/admin/jobs")).json()["jobs"] == []
    with contextlib.suppress(Exception):
        await fathom.aclose()
