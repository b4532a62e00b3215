"""The background Fathom's faults, through real `fathom mcp` bridges and the daemon they start.

- A daemon that runs and does not answer (SIGSTOPped: alive, silent) is left alone: a new
  session serves in-process and says why, instead of hanging on it.
- A daemon of another release (its run file says so) is stopped by the next session, which
  starts this release's; a `fathom serve`'s run file beside it hides neither from the other.
- A session whose daemon is killed holds the requests it is sent meanwhile until its new
  session is open: none is refused for want of a session id.
- The data dir is made 0700, `daemon.log` is moved aside past its bound and never written
  through a link, and requests without the run's token do not count as activity.
- A daemon that drops a connection unanswered (killed a moment ago, its pid not torn down yet)
  is replaced once its pid is gone; one that drops it and lives on is left alone.
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

from fathom import __version__
from fathom.config import atomic_write_text
from fathom.local_server import DAEMON_FILE, LOCAL_FILE, LocalServer, read_local_server
from fathom.server import bridge
from fathom.server.bridge import DAEMON_LOG, LOG_KEEP_BYTES, find_daemon
from fathom.server.local import RunFile
from tests.server.daemon_fixtures import RawHost, pid_gone
from tests.server.mcp_fixtures import INIT

PINGS = 400  # at most, 50 ms apart: longer than a daemon's cold start here


def daemon_requests(daemon) -> int:
    answer = httpx.get(
        daemon.url + "/local/status", headers={"Authorization": f"Bearer {daemon.token}"}, trust_env=False
    )
    return int(answer.json()["requests"])


def started(host: RawHost) -> RawHost:
    host.start()
    return host


@pytest.mark.slow
def test_a_hung_daemon_is_left_alone_and_the_session_serves_in_process(shop, tmp_path):
    data, _, seen = shop
    first = started(RawHost(data, tmp_path / "first"))
    daemon = find_daemon(data)
    assert daemon is not None
    seen.append(daemon.pid)
    os.kill(daemon.pid, signal.SIGSTOP)  # alive, and answering nothing
    try:
        second = started(RawHost(data, tmp_path / "second", env={"FATHOM_DAEMON_ANSWER_S": "1"}))
        assert second.search(2, "hash a password")[0]["path"] == "auth/password.py"
        said = second.err.read_text()
        assert f"serving in-process: the background Fathom (pid {daemon.pid}) runs but did not answer" in said
        assert find_daemon(data) == daemon  # left alone: it may only be busy
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
        for host in (first, locals().get("second")):
            if host is not None:
                host.close()


@pytest.mark.slow
def test_a_daemon_of_another_release_is_replaced_and_a_lost_one_holds_requests(shop, tmp_path):
    data, _, seen = shop
    data.chmod(0o755)  # made by an older release, or by hand
    old_log = b"an old line\n" * (LOG_KEEP_BYTES // 12 + 1)
    (data / DAEMON_LOG).write_bytes(old_log)
    hosts: list[RawHost] = []
    try:
        hosts.append(started(RawHost(data, tmp_path / "first")))
        daemon = find_daemon(data)
        assert daemon is not None and daemon.version == __version__
        seen.append(daemon.pid)
        assert data.stat().st_mode & 0o777 == 0o700
        assert (data / (DAEMON_LOG + ".1")).read_bytes() == old_log
        assert (data / DAEMON_LOG).stat().st_size < len(old_log)

        # Knocking without the token keeps nothing alive.
        counted = daemon_requests(daemon)
        for _ in range(3):
            refused = httpx.post(daemon.url + "/mcp", json=INIT, trust_env=False)
            assert refused.status_code == 401
        assert daemon_requests(daemon) == counted

        # A `fathom serve` on the same data dir writes its own run file: the daemon's stays.
        serve = RunFile(data, "http://127.0.0.1:9", kind="serve")
        serve.open()
        assert find_daemon(data) == daemon and read_local_server(data, LOCAL_FILE).kind == "serve"
        serve.close()

        # The daemon as an older release would have written it: the next session replaces it.
        run_file = data / DAEMON_FILE
        atomic_write_text(run_file, json.dumps({**json.loads(run_file.read_text()), "version": "0.0.1"}))
        hosts.append(started(RawHost(data, tmp_path / "second")))
        newer = find_daemon(data)
        assert newer is not None and newer.pid != daemon.pid and newer.version == __version__
        seen.append(newer.pid)
        assert pid_gone(daemon.pid)
        said = hosts[1].err.read_text()
        assert f"(pid {daemon.pid}) is release 0.0.1, this is {__version__}: stopping it" in said, said
        assert hosts[1].search(2, "hash a password")[0]["path"] == "auth/password.py"
        hosts[0].close()  # its session had its one restart (the replaced daemon)

        lost_meanwhile(data, hosts[1], newer, seen)
    finally:
        for host in hosts:
            host.close()


def lost_meanwhile(data: Path, host: RawHost, daemon, seen: list[int]) -> None:
    """The session's daemon killed while the host keeps sending: every request is answered."""
    os.kill(daemon.pid, signal.SIGKILL)
    sent = []
    for n in range(PINGS):
        host.send({"jsonrpc": "2.0", "id": 10_000 + n, "method": "ping"})
        sent.append(10_000 + n)
        if n % 5 == 0 and any(
            json.loads(line).get("id") in sent for line in host.out.read_text().splitlines()
        ):
            break  # the new session answers: the reconnect is over
        time.sleep(0.05)  # a host typing; bounded by PINGS
    answers = {m["id"]: m for m in map(json.loads, host.out.read_text().splitlines()) if "id" in m}
    for msg_id in sent:
        answer = answers.get(msg_id) or host.answer(msg_id)
        assert "result" in answer, answer
    again = find_daemon(data)
    assert again is not None and again.pid != daemon.pid
    seen.append(again.pid)


# A process that takes one connection and drops it unanswered, then ends or lives on.
DROPPER = """
import os, socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
conn.recv(65536)
conn.close()
if sys.argv[1] == "ends":
    os._exit(0)
time.sleep(60)
"""


@pytest.mark.parametrize("fate", ["ends", "lives on"])
def test_a_daemon_that_drops_the_connection_is_replaced_only_once_it_is_gone(fate, tmp_path, monkeypatch):
    # A daemon killed a moment ago (its pid not torn down yet) drops the status request: the
    # session starts another once the pid is gone. One that drops it and lives on is left alone.
    monkeypatch.setattr(bridge, "GONE_WAIT_S", 1.0)
    proc = subprocess.Popen([sys.executable, "-c", DROPPER, fate], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        found = LocalServer(f"http://127.0.0.1:{port}", proc.pid, "daemon", token="t", version=__version__)
        said: list[str] = []
        if fate == "ends":
            assert bridge.usable(found, tmp_path, 5.0, said.append) is False
            assert said == [
                f"fathom mcp: the background Fathom (pid {proc.pid}) dropped the connection and has ended: starting one"
            ]
        else:
            with pytest.raises(bridge.DaemonUnavailable, match=f"pid {proc.pid}"):
                bridge.usable(found, tmp_path, 5.0, said.append)
            assert proc.poll() is None and said == []
    finally:
        proc.kill()
        proc.wait(timeout=30)
