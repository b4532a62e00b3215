"""`fathom mcp` sessions share one background Fathom per user and data dir, end to end.

Real processes: `fathom mcp` bridges spawned as an MCP host spawns them (the SDK's own client,
and a raw host on the pipes that the test can SIGKILL), the daemon the first one starts, and
`fathom status`. Two sessions use one daemon and see each other's edits through its watcher;
a killed client leaves it serving the other; a killed daemon is started again once for the
session that finds it gone; it stops by itself once idle; it refuses a request without its
token; and `fathom mcp` serves in-process, saying why, when it cannot start one. The idle rule
itself runs on a fake clock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from fathom.local_server import DAEMON_FILE
from fathom.server.bridge import DAEMON_LOG, find_daemon
from fathom.server.daemon import FIRST_WAIT_S, Attendance, stop_when_idle
from tests.fake_clock import FakeClock
from tests.fleet.fleet_fixtures import wait_for
from tests.index.retrieval_fixtures import write_project
from tests.server.daemon_fixtures import ENV, INIT, RawHost, pid_gone, status

HEAVY = ("numpy", "lancedb", "onnxruntime", "fastapi", "starlette", "torch", "pyarrow")


def bridge_params(
    data: Path, env: dict[str, str] | None = None, log: Path | None = None
) -> StdioServerParameters:
    argv = [sys.executable, "-m", "fathom.cli", "--data-dir", str(data), "mcp"]
    if log is None:
        return StdioServerParameters(command=argv[0], args=argv[1:], env={**ENV, **(env or {})})
    # stderr to a file (the host's log), so the test reads what the bridge said
    return StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'exec "$@" 2>"$LOG"', "sh", *argv],
        env={**ENV, **(env or {}), "LOG": str(log)},
    )


def refuses_another_user(data: Path, daemon) -> None:
    """Only the data dir's owner reaches the daemon: its token is in a 0600 file (and nowhere
    in its log), a request without it is refused, and a file others could read is not trusted."""
    run_file = data / DAEMON_FILE
    assert run_file.stat().st_mode & 0o777 == 0o600 and (data / DAEMON_LOG).stat().st_mode & 0o777 == 0o600
    for headers in ({}, {"Authorization": "Bearer fl_not-this-runs-token"}):
        refused = httpx.post(
            daemon.url + "/mcp", json=INIT, headers={**headers, "Accept": "application/json"}
        )
        assert refused.status_code == 401
    assert daemon.token not in (data / DAEMON_LOG).read_text()
    run_file.chmod(0o644)
    try:
        assert find_daemon(data) is None
    finally:
        run_file.chmod(0o600)


async def search(client: Client, query: str) -> list[dict]:
    result = await client.call_tool("search_code", {"query": query, "project": "shop", "k": 5})
    assert not result.is_error, result.content[0].text
    return result.structured_content["results"]


@pytest.mark.slow
async def test_sessions_share_one_daemon_that_outlives_them_and_stops_once_idle(shop, tmp_path):
    data, root, seen = shop
    # 3 s idle: never while a session is attached (this test holds one for far longer), and
    # soon after the last one leaves.
    idle = {"FATHOM_DAEMON_IDLE_MINUTES": "0.05"}
    async with asyncio.timeout(300):
        async with Client(bridge_params(data, idle), read_timeout_seconds=180) as first:
            await in_two_sessions(first, data, root, seen, tmp_path)
            again = find_daemon(data)
            assert again is not None
        # The session ended: the daemon outlives it, then stops by itself and removes its file.
        await wait_for(lambda: pid_gone(again.pid), timeout=90, interval=0.1, what="the idle daemon to stop")
        assert not (data / DAEMON_FILE).exists()


async def in_two_sessions(first: Client, data: Path, root: Path, seen: list[int], tmp_path: Path) -> None:
    """The first session's part of the test above, the daemon running."""
    assert (await search(first, "hash a password"))[0]["path"] == "auth/password.py"
    # A request's progress notifications come through the bridge as they are sent.
    events = []

    async def on_progress(progress, total, message):
        events.append(message)

    other = write_project(tmp_path / "other", {"clock.py": "def tick():\n    return 1\n"})
    done = await first.call_tool(
        "index_project", {"path": str(other), "project": "other", "wait": True}, progress_callback=on_progress
    )
    assert not done.is_error and events and events[0] == "opening store", events
    daemon = find_daemon(data)
    assert daemon is not None and daemon.kind == "daemon"
    seen.append(daemon.pid)
    refuses_another_user(data, daemon)
    raw = RawHost(data, tmp_path, python_flags=("-X", "importtime"))
    try:
        await asyncio.to_thread(raw.start)
        assert (await asyncio.to_thread(raw.search, 2, "hash a password"))[0]["path"] == "auth/password.py"
        # One daemon for both: the second session started none, and loaded nothing heavy itself.
        assert find_daemon(data).pid == daemon.pid
        imported = {
            line.rsplit("|", 1)[-1].strip()
            for line in raw.err.read_text().splitlines()
            if line.startswith("import time:")
        }
        assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
        said = await asyncio.to_thread(status, data)
        assert f"pid           {daemon.pid}" in said and "sessions      2" in said, said

        # One session's edit, synced by the daemon's one watcher, is found by the other.
        with (root / "net/retry.py").open("a") as fh:
            fh.write(
                '\n\ndef jitter_delay(value):\n    """Random jitter added to a retry delay."""\n'
                "    return value\n"
            )

        ids = iter(range(100, 10_000))

        def found_by_raw():
            hits = raw.search(next(ids), "Random jitter added to a retry delay.")
            return any(h.get("symbol") == "jitter_delay" for h in hits)

        await wait_for(
            lambda: asyncio.to_thread(found_by_raw),
            timeout=90,
            interval=0.2,
            what="the first session's edit in the second session's search",
        )

        # A crashed client: the daemon serves the other session on, and counts it gone.
        raw.popen.kill()
        raw.popen.wait(timeout=30)
        assert (await search(first, "Random jitter added to a retry delay."))[0]["symbol"] == "jitter_delay"
        await wait_for(
            lambda: "sessions      1" in status(data),
            timeout=60,
            interval=0.2,
            what="the killed client's session to be counted gone",
        )
        assert not pid_gone(daemon.pid)

        # Ctrl-C or SIGTERM on a bridge: it stops promptly by itself; the daemon serves on.
        stopped = RawHost(data, tmp_path / "stopped")
        await asyncio.to_thread(stopped.start)
        stopped.popen.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(stopped.popen.wait, 30) == 0
        assert "fathom mcp: stopped by SIGTERM" in stopped.err.read_text()
        assert not pid_gone(daemon.pid) and find_daemon(data) == daemon

        # The daemon itself killed: the session finds it gone and starts one again, once.
        os.kill(daemon.pid, signal.SIGKILL)
        assert (await search(first, "hash a password"))[0]["path"] == "auth/password.py"
        again = find_daemon(data)
        assert again is not None and again.pid != daemon.pid
        seen.append(again.pid)
    finally:
        raw.close()


@pytest.mark.slow
async def test_mcp_serves_in_process_saying_why_when_no_daemon_can_start(shop, tmp_path):
    data, _, _ = shop
    (data / DAEMON_FILE).mkdir()  # the run file cannot be written: the daemon refuses to start
    log = tmp_path / "host.log"
    async with asyncio.timeout(300), Client(bridge_params(data, log=log), read_timeout_seconds=180) as client:
        assert (await search(client, "hash a password"))[0]["path"] == "auth/password.py"
    said = log.read_text()
    assert "serving in-process: the background Fathom exited (code 1)" in said, said
    assert str(data / DAEMON_LOG) in said


async def test_idle_rule_on_a_fake_clock():
    clock = FakeClock()
    attendance = Attendance(600.0, clock=clock.now)
    stopped: list[float] = []
    attendance.begin(stream=True)  # a session attached
    watcher = asyncio.create_task(
        stop_when_idle(attendance, lambda: stopped.append(clock.now()), clock.sleep)
    )
    await clock.sleep(3600.0)  # an hour attached (virtual): the rule looked many times
    assert not stopped and not watcher.done() and attendance.idle_for() == 0.0
    attendance.end(stream=True)  # the session left
    left = clock.now()
    await asyncio.wait_for(watcher, timeout=5)
    assert left + 600.0 <= stopped[0] <= left + 605.0
    assert attendance.sessions == 0 and attendance.requests == 1


async def test_a_daemon_no_session_reached_yet_waits_for_the_first():
    clock = FakeClock()
    attendance = Attendance(6.0, clock=clock.now)
    stopped: list[float] = []
    await stop_when_idle(attendance, lambda: stopped.append(clock.now()), clock.sleep)
    assert FIRST_WAIT_S <= stopped[0] <= FIRST_WAIT_S + 5.0
