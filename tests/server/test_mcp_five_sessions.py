"""Five `fathom mcp` sessions on one data dir: one watcher per project, each edit embedded once.

Real processes, as an MCP host runs them: five `fathom mcp` bridges spawned on one data dir
with two indexed projects (the first bridge starts the background Fathom, the others attach).
What the test reads is what the product shows: each session's `index_status` (its live sync's
finished syncs and the sync jobs), `fathom status`'s session count, and, from /proc, which of
the six processes holds an inotify instance (a `watchfiles` watcher is one): only the daemon,
one per project. An edit is then synced by one job that embeds its new chunk once, and every
session sees that same job.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from fathom.config import Settings
from fathom.local_server import DAEMON_FILE
from fathom.server.bridge import find_daemon
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import wait_for
from tests.index.retrieval_fixtures import write_project
from tests.server.daemon_fixtures import RawHost, status

SESSIONS = 5
PROJECTS = {
    "tiny": {"clock.py": 'def tick():\n    """Advance the clock by one."""\n    return 1\n'},
    "other": {"words.py": 'def shout(text):\n    """Upper-case a text."""\n    return text.upper()\n'},
}
EDIT = '\n\ndef rewind(ticks):\n    """Turn the clock back by some ticks."""\n    return -ticks\n'


def inotify_fds(pid: int) -> int:
    """Inotify instances the process holds: one per `watchfiles` watcher."""
    count = 0
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            count += os.readlink(fd) == "anon_inode:inotify"
        except OSError:  # closed meanwhile
            continue
    return count


class Session(RawHost):
    """A raw host whose requests number themselves."""

    ids = itertools.count(1000)

    def index_status(self, project: str) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.send(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "tools/call",
                "params": {"name": "index_status", "arguments": {"project": project}},
            }
        )
        answer = self.answer(msg_id)
        assert "result" in answer and not answer["result"].get("isError"), answer
        return dict(answer["result"]["structuredContent"])


def sync_jobs(seen: dict[str, Any]) -> list[dict[str, Any]]:
    return [j for j in seen["jobs"] if j.get("reason") == "sync"]


@pytest.fixture
def two_projects(tmp_path, local_encoder):
    data = tmp_path / "data"
    roots = {name: write_project(tmp_path / name, files) for name, files in PROJECTS.items()}

    async def index_all() -> None:
        fathom = Fathom(Settings(data_dir=data), encoder=local_encoder)
        for name, root in roots.items():
            await fathom.index(root, name)

    asyncio.run(index_all())
    yield data, roots
    if (daemon := find_daemon(data)) is not None:
        os.kill(daemon.pid, signal.SIGKILL)
    (data / DAEMON_FILE).unlink(missing_ok=True)


@pytest.mark.slow
async def test_five_sessions_one_watcher_per_project_each_edit_embedded_once(two_projects, tmp_path):
    data, roots = two_projects
    sessions: list[Session] = []
    try:
        async with asyncio.timeout(300):
            for n in range(SESSIONS):
                session = Session(data, tmp_path / f"s{n}")
                sessions.append(session)
                await asyncio.to_thread(session.start)
            daemon = find_daemon(data)
            assert daemon is not None
            said = await asyncio.to_thread(status, data)
            assert f"pid           {daemon.pid}" in said and f"sessions      {SESSIONS}" in said, said

            first = sessions[0]

            def settled() -> dict[str, Any] | None:
                seen = first.index_status("tiny")
                watch = seen["watch"]
                return seen if watch["state"] == "watching" and not watch["pending"] else None

            before = await wait_for(
                lambda: asyncio.to_thread(settled), timeout=120, interval=0.2, what="the watcher's catch-up"
            )
            # One watcher per project, all in the daemon: no session's own process watches.
            assert inotify_fds(daemon.pid) == len(PROJECTS)
            assert [inotify_fds(s.popen.pid) for s in sessions] == [0] * SESSIONS

            with (roots["tiny"] / "clock.py").open("a") as fh:
                fh.write(EDIT)

            def synced() -> dict[str, Any] | None:
                seen = first.index_status("tiny")
                watch = seen["watch"]
                done = watch["syncs"] > before["watch"]["syncs"] and not watch["pending"]
                return seen if done and watch["state"] == "watching" else None

            after = await wait_for(
                lambda: asyncio.to_thread(synced), timeout=120, interval=0.2, what="the edit's sync"
            )
            new = [j for j in sync_jobs(after) if j["id"] not in {k["id"] for k in sync_jobs(before)}]
            assert after["watch"]["syncs"] == before["watch"]["syncs"] + 1, after["watch"]
            assert len(new) == 1 and new[0]["state"] == "done", new
            assert after["last_run"]["embedded"] == 1, after["last_run"]  # the new function's chunk
            # Every session sees that one sync, from the one daemon.
            for session in sessions[1:]:
                seen = await asyncio.to_thread(session.index_status, "tiny")
                assert seen["watch"]["syncs"] == after["watch"]["syncs"]
                assert [j["id"] for j in sync_jobs(seen)] == [j["id"] for j in sync_jobs(after)]
            assert find_daemon(data) == daemon
            assert inotify_fds(daemon.pid) == len(PROJECTS)
            assert [inotify_fds(s.popen.pid) for s in sessions] == [0] * SESSIONS
    finally:
        for session in sessions:
            session.close()
