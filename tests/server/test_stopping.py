"""Ctrl-C and SIGTERM stop every long-running command cleanly, whatever it is doing.

Real processes: `fathom watch` signalled while it starts (imports, model load, first index),
mid-sync and idle; `fathom mcp` over a stdio pipe the host keeps open, signalled while its
encoder loads, idle, and mid-index; `fathom serve` with a client's stream held open. Each must
exit by itself with its clean-stop code and say so. The stop's watchdog is set far beyond
what a clean stop takes (`GRACE`): a stop that had to be forced exits 1 with every thread's
stack, and the test fails showing them. After a stop mid-sync the project is indexed again at
once: the lock was released and the index is whole.

The watchdog itself is tested on a coroutine whose exit waits on a thread that never ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import PY, ProcessGroup, free_port, wait_until

GRACE = "60"  # seconds: a clean stop takes one or two; past this the watchdog forces it
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("FATHOM_")},
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "FATHOM_STOP_GRACE_S": GRACE,
}
FORCED = "forcing it"
EDIT = "\n\ndef jitter(delay):\n    return delay * 1.1\n"


def ended(popen: subprocess.Popen, log: Path | None = None, timeout: float = 90.0) -> int:
    """The process's exit code; it must exit by itself, unforced (bounded wait)."""
    try:
        code = popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=30)
        raise AssertionError(
            f"did not exit within {timeout} s of the signal:\n" + (log.read_text() if log else "")
        ) from None
    text = log.read_text() if log else ""
    assert FORCED not in text, text
    return code


def _watch(group: ProcessGroup, tmp: Path, project: Path):
    return group.spawn(
        "watch",
        [PY, "-m", "fathom.cli", "--data-dir", str(tmp / "data"), "watch", str(project), "--project", "shop"],
        env=ENV,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "moment,sig", [("starting", "SIGINT"), ("syncing", "SIGINT"), ("idle", "SIGINT"), ("idle", "SIGTERM")]
)
def test_watch_stops_cleanly_at_any_moment(
    tmp_path: Path,
    sample_project: Path,
    moment: str,
    sig: str,
):
    group = ProcessGroup(tmp_path / "logs")
    try:
        proc = _watch(group, tmp_path, sample_project)
        if moment == "starting":
            time.sleep(2.0)  # importing, loading the model or indexing for the first time
        else:
            wait_until(lambda: "Ctrl-C stops" in proc.output(), "watch to start", procs=[proc])
            (sample_project / "net" / "retry.py").open("a").write(EDIT)
            if moment == "syncing":
                time.sleep(0.5)  # the change is seen; its sync is under way
            else:
                wait_until(lambda: "shop: 1 embedded" in proc.output(), "the sync", procs=[proc])
        proc.popen.send_signal(getattr(signal, sig))
        code = ended(proc.popen, proc.log_path)
        out = proc.output()
        if "watching" in out:
            assert code == 0 and "stopped watching shop" in out, out
        else:  # stopped before its first index ended: said as an interrupted index
            assert code == 130 and "interrupted: the active index is unchanged" in out, out
        # Nothing left held or half-written: the same project indexes again at once.
        again = subprocess.run(
            [
                PY,
                "-m",
                "fathom.cli",
                "--data-dir",
                str(tmp_path / "data"),
                "index",
                str(sample_project),
                "--project",
                "shop",
            ],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        group.stop()


class StdioHost:
    """An MCP host on `fathom mcp`'s pipes: it keeps stdin open, as a host does, and reads
    the answers from a file."""

    def __init__(self, tmp: Path, *, bridged: bool = False):
        self.out, self.err = tmp / "mcp.out", tmp / "mcp.err"
        mode = [] if bridged else ["--in-process", "--no-watch"]  # bridged: the default
        with self.out.open("w") as out, self.err.open("w") as err:
            self.popen = subprocess.Popen(
                [PY, "-m", "fathom.cli", "--data-dir", str(tmp / "data"), "mcp", *mode],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=ENV,
                start_new_session=True,
            )

    def send(self, message: dict) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write((json.dumps(message) + "\n").encode())
        self.popen.stdin.flush()

    def answered(self, msg_id: int) -> bool:
        return any(
            json.loads(line).get("id") == msg_id for line in self.out.read_text().splitlines() if line.strip()
        )

    def initialize(self) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
        )
        wait_until(lambda: self.answered(1) or self.popen.poll() is not None, "initialize")
        assert self.answered(1), self.err.read_text()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize(
    "moment,sig", [("loading", "SIGINT"), ("idle", "SIGINT"), ("idle", "SIGTERM"), ("indexing", "SIGTERM")]
)
def test_mcp_stops_cleanly_while_the_host_keeps_stdin_open(
    tmp_path: Path,
    sample_project: Path,
    moment: str,
    sig: str,
):
    host = StdioHost(tmp_path)
    try:
        if moment == "loading":
            wait_until(lambda: "loading the encoder" in host.err.read_text(), "the model load")
        else:
            host.initialize()
            if moment == "indexing":
                host.send(
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/call",
                        "params": {
                            "name": "index_project",
                            "arguments": {"path": str(sample_project), "project": "shop", "wait": True},
                        },
                    }
                )
                time.sleep(1.0)
        host.popen.send_signal(getattr(signal, sig))
        assert ended(host.popen, host.err) == 0
        said = host.err.read_text()
        assert f"fathom mcp: stopped by {sig}" in said, said
    finally:
        host.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_the_bridge_and_the_background_fathom_each_stop_cleanly(tmp_path: Path, sig: str):
    """`fathom mcp` as hosts start it (a bridge to the background Fathom): the bridge stops on
    the signal while the host keeps stdin open, the background Fathom serves on; then the
    background Fathom itself stops on the same signal and removes its run file."""
    host = StdioHost(tmp_path, bridged=True)
    run_file = tmp_path / "data" / "local_daemon.json"
    daemon = None
    try:
        host.initialize()  # the first session starts the background Fathom
        daemon = json.loads(run_file.read_text())["pid"]
        host.popen.send_signal(getattr(signal, sig))
        assert ended(host.popen, host.err) == 0
        assert f"fathom mcp: stopped by {sig}" in host.err.read_text()
        os.kill(daemon, 0)  # still serving: it outlives the session that started it
        os.kill(daemon, getattr(signal, sig))
        wait_until(lambda: not run_file.exists(), "the background Fathom to remove its run file", timeout=90)
        wait_until(lambda: not _alive(daemon), "the background Fathom to exit", timeout=30)
        log = (tmp_path / "data" / "daemon.log").read_text()
        assert FORCED not in log, log
    finally:
        host.close()
        if daemon is not None and _alive(daemon):
            os.kill(daemon, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a process that exited but is not reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_serve_stops_within_its_grace_while_a_client_holds_a_stream(tmp_path: Path):
    """A client's open MCP stream does not hold the stop up past FATHOM_STOP_GRACE_S."""
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    try:
        proc = group.spawn(
            "serve",
            [
                PY,
                "-m",
                "fathom.cli",
                "--data-dir",
                str(tmp_path / "data"),
                "serve",
                "--port",
                str(port),
                "--no-auth",
                "--no-watch",
            ],
            env={**ENV, "FATHOM_STOP_GRACE_S": "2"},
        )
        wait_until(lambda: "fathom MCP (streamable HTTP) on" in proc.output(), "serve to start", procs=[proc])
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx.Client(timeout=30) as client:
            init = client.post(
                url,
                headers=headers,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "test", "version": "1"},
                    },
                },
            )
            assert init.status_code == 200, init.text
            session = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
            with client.stream("GET", url, headers={"Accept": "text/event-stream", **session}):
                proc.popen.send_signal(signal.SIGINT)
                code = ended(proc.popen, proc.log_path, timeout=60)
        assert code in (0, 130), proc.output()
    finally:
        group.stop()


def test_a_stop_that_cannot_finish_is_forced_and_shows_what_it_waited_on(tmp_path: Path):
    """The watchdog: a command whose exit waits on a thread that never ends is ended after the
    grace, exit 1, with the stuck thread's stack on stderr."""
    script = tmp_path / "stuck.py"
    script.write_text(
        "import asyncio, os, signal, sys, threading\n"
        "from fathom.stopping import Stopped, run_stoppable\n"
        "def stuck_forever():\n"
        "    threading.Event().wait()\n"
        "async def main():\n"
        "    threading.Thread(target=stuck_forever, name='stuck').start()  # not a daemon\n"
        "    print('ready', flush=True)\n"
        "    await asyncio.Event().wait()\n"
        "try:\n"
        "    run_stoppable(main(), grace_s=1.0)\n"
        "except Stopped as exc:\n"
        "    print(f'clean: {exc}', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert "clean: stopped by SIGTERM" in out  # the loop's part stopped cleanly...
    assert proc.returncode == 1  # ...but the exit waited on the thread: forced
    assert "did not finish within 1 s" in err and "stuck_forever" in err, err


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_serve_removes_its_local_file_and_says_it_stopped(tmp_path: Path, sig: str):
    """`local_server.json` is gone after `fathom serve` stops, by SIGTERM as by Ctrl-C: uvicorn
    raises SIGTERM again once it has shut down, which used to end the process before the file
    was removed. The stop is said as a stop, not as an interrupted index."""
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    door = tmp_path / "data" / "local_server.json"
    try:
        proc = group.spawn(
            "serve",
            [
                PY,
                "-m",
                "fathom.cli",
                "--data-dir",
                str(tmp_path / "data"),
                "serve",
                "--port",
                str(port),
                "--no-auth",
                "--no-watch",
            ],
            env=ENV,
        )
        wait_until(door.exists, "serve to open its local door", procs=[proc])
        proc.popen.send_signal(getattr(signal, sig))
        ended(proc.popen, proc.log_path)
        out = proc.output()
        assert not door.exists(), out
        assert f"fathom serve: stopped by {sig}" in out, out
        assert "interrupted" not in out and "active index is unchanged" not in out, out
    finally:
        group.stop()


def test_a_ctrl_c_just_after_the_local_file_is_written_still_removes_it(tmp_path: Path):
    """The window a loaded run hit: Ctrl-C lands after `local_server.json` is written and before
    uvicorn takes the signals over. The file still goes, and the stop is said."""
    import uvicorn

    from fathom.server.local import LOCAL_FILE, RunFile, serve_with_run_file

    class InterruptedDoor(RunFile):
        def open(self, *, strict: bool = False) -> None:
            super().open(strict=strict)
            assert self.path.exists()
            raise KeyboardInterrupt  # the signal, delivered as the file is in place

    said: list[str] = []
    door = InterruptedDoor(tmp_path, "http://127.0.0.1:1", kind="serve")
    config = uvicorn.Config(lambda scope, receive, send: None, log_level="warning")
    with pytest.raises(KeyboardInterrupt):
        serve_with_run_file(config, None, door, said.append)
    assert not (tmp_path / LOCAL_FILE).exists()
    assert said == ["SIGINT"]


def _serve_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`script` run in a child Python with `tmp_path` as its argument, which must end by itself
    within 60 s (a server that serves on fails the test)."""
    try:
        return subprocess.run(
            [PY, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(
            f"the child served on, deaf to its signal: {hung.stdout!r} {hung.stderr!r}"
        ) from None


def test_a_sigterm_just_after_the_local_file_is_written_still_removes_it(tmp_path: Path):
    """SIGTERM in the same window: its default action would end the process before any
    `finally`. The file goes, the stop is said, and the process still ends by SIGTERM."""
    script = (
        "import os, signal, sys, uvicorn\n"
        "from fathom.server.local import RunFile, serve_with_run_file\n"
        "class Door(RunFile):\n"
        "    def open(self, *, strict=False):\n"
        "        super().open(strict=strict)\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "config = uvicorn.Config(lambda scope, receive, send: None, log_level='warning')\n"
        "serve_with_run_file(config, None, Door(sys.argv[1], 'http://127.0.0.1:1', kind='serve'),\n"
        "                lambda name: print('stopped by', name, flush=True))\n"
        "print('not reached', flush=True)\n"
    )
    done = _serve_script(script, tmp_path)
    assert done.returncode == -signal.SIGTERM, done.stdout + done.stderr
    assert "stopped by SIGTERM" in done.stdout and "not reached" not in done.stdout
    assert not (tmp_path / "local_server.json").exists()


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stop_whose_exception_was_lost_before_uvicorn_started_still_stops_it(tmp_path: Path, sig: str):
    """The same window, when the signal's exception is raised inside code that discards it: a
    loaded run showed `Exception ignored in: <function _get_module_lock.<locals>.cb>` /
    `KeyboardInterrupt` (a weakref callback of the import system), and then a server serving
    on, deaf to the Ctrl-C it was sent. The server stops as soon as it has started, says so,
    removes its file, and ends as that signal ends it."""
    script = (
        "import os, signal, sys, time, uvicorn\n"
        "from fathom.server.connections import listen\n"
        "from fathom.server.local import RunFile, serve_with_run_file\n"
        "class Door(RunFile):\n"
        "    def open(self, *, strict=False):\n"
        "        super().open(strict=strict)\n"
        "        try:  # what a weakref callback does with the signal's exception: drops it\n"
        f"            os.kill(os.getpid(), signal.{sig})\n"
        "            time.sleep(5)\n"
        "        except BaseException as lost:\n"
        "            print('lost', type(lost).__name__, flush=True)\n"
        "async def app(scope, receive, send):\n"
        "    if scope['type'] == 'lifespan':\n"
        "        while (await receive())['type'] != 'lifespan.shutdown':\n"
        "            await send({'type': 'lifespan.startup.complete'})\n"
        "        await send({'type': 'lifespan.shutdown.complete'})\n"
        "config = uvicorn.Config(app, log_level='warning')\n"
        "try:\n"
        "    serve_with_run_file(config, listen('127.0.0.1', 0), Door(sys.argv[1], 'http://127.0.0.1:1',\n"
        "                        kind='serve'), lambda name: print('stopped by', name, flush=True))\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    done = _serve_script(script, tmp_path)
    out = done.stdout + done.stderr
    assert done.stdout.startswith("lost "), out
    assert f"stopped by {sig}" in done.stdout, out
    if sig == "SIGINT":
        assert done.returncode == 0 and "interrupted" in done.stdout, out
    else:
        assert done.returncode == -signal.SIGTERM, out
    assert not (tmp_path / "local_server.json").exists()


@pytest.mark.slow
def test_a_serve_ctrl_c_before_uvicorn_listens_ends_in_bounded_time_whatever_it_waits_on(tmp_path: Path):
    """Ctrl-C that reaches `fathom serve` before uvicorn has taken the signals over is heard by
    no stop watchdog of a loop; the exit then waits for every thread that is not a daemon (the
    encoder's warm-up is not one). Here that load never ends: the process still ends within the
    grace, saying the stop was forced and what it waited on."""
    script = (
        "import sys, threading\n"
        "from fathom.service import warmup\n"
        "warmup.Warmup._load = lambda self: threading.Event().wait()  # a load that never ends\n"
        "from fathom.server import local\n"
        "opened = local.RunFile.open\n"
        "def interrupted(self, *, strict=False):\n"
        "    opened(self, strict=strict)\n"
        "    raise KeyboardInterrupt  # Ctrl-C, as the run file is in place\n"
        "local.RunFile.open = interrupted\n"
        "from fathom.cli import app\n"
        "app(['--data-dir', sys.argv[1], 'serve', '--port', sys.argv[2], '--no-auth', '--no-watch'])\n"
    )
    try:
        done = subprocess.run(
            [PY, "-c", script, str(tmp_path / "data"), str(free_port())],
            capture_output=True,
            text=True,
            timeout=120,
            env={**ENV, "FATHOM_STOP_GRACE_S": "2"},
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"did not end within 120 s of the Ctrl-C: {exc.stderr!r}") from None
    said = done.stdout + done.stderr
    assert "fathom serve: stopped by SIGINT" in said, said
    assert done.returncode == 1 and "the stop did not finish within 2 s" in said, said
    assert "threading.py" in said  # the stacks it waited on are on record
    assert not (tmp_path / "data" / "local_server.json").exists()
