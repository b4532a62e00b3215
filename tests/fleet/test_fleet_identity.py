"""A sidecar's identity is its own secret, not its name; failed joins are rate-limited.

Over the real `/sidecar` WebSocket on 127.0.0.1: a real sidecar process whose credential lives
in its state dir is approved; an impostor holding only the shared join token connects under the
same name while it is offline and stays pending (no config, no key), and the operator sees the
claim in the admin API and `fathom fleet`; the real sidecar reconnects and takes its name back.
The credential is found nowhere it should not be. A flood of wrong-token joins is cut off per
address and logged as a summary, not one WARNING each.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import stat
from pathlib import Path

import pytest
import websockets
from typer.testing import CliRunner

from fathom.fleet import protocol as p
from fathom.fleet.agent import Sidecar
from fathom.fleet.hub import CLOSE_TOO_MANY_FAILURES
from fathom.fleet.identity import CREDENTIAL_FILE, new_credential
from tests.fleet.fleet_fixtures import (
    ADMIN,
    JOIN,
    Fleet,
    ProcessGroup,
    build_app,
    heartbeats_pass,
    serve_in_loop,
    spawn_sidecar,
    wait_for,
)

KEY = "sk-or-v1-" + "5a" * 32
CLAIM = "gpu-1: a different host claims this name"


def fleet_cli(url: str, *args: str):
    import typer

    from fathom.cli.operator import register

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """fathom (operator commands only)."""

    register(app)
    return CliRunner().invoke(
        app,
        ["fleet", *args],
        catch_exceptions=False,
        env={"FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "250"},
    )


@pytest.mark.slow
async def test_an_impostor_under_an_approved_name_stays_pending_gets_no_key_and_the_real_sidecar_gets_back_in(
    tmp_path: Path,
):
    data = tmp_path / "data"
    state = tmp_path / "real-state"
    group = ProcessGroup(tmp_path / "logs")
    capture = io.StringIO()
    handler = logging.StreamHandler(capture)
    handler.setLevel(logging.DEBUG)
    fathom_log = logging.getLogger("fathom")
    old_level = fathom_log.level
    fathom_log.addHandler(handler)
    fathom_log.setLevel(logging.DEBUG)
    app, hub, registry = build_app(data)
    impostor_stop = asyncio.Event()
    impostor_task = None
    try:
        async with serve_in_loop(app) as url:
            port = int(url.rsplit(":", 1)[1])
            fleet = Fleet(url, hub, registry, data)
            env = {"FATHOM_SIDECAR_STATE_DIR": str(state)}
            real = spawn_sidecar(group, "gpu-1", port, [], env=env)
            await wait_for(
                lambda: "gpu-1" in hub.connected() or real.popen.poll() is not None,
                timeout=60,
                what="the real sidecar to connect",
            )
            assert real.popen.poll() is None, real.output()
            async with fleet.admin() as admin:
                assert (await admin.post("/admin/fleet/gpu-1/approve")).json()["state"] == "approved"
                push = (await admin.post("/admin/key", json={"key": KEY})).json()
                assert push["acked"] == ["gpu-1"], push

            # The real sidecar goes away; its approval stays, bound to its credential.
            group.kill(real)
            await wait_for(lambda: "gpu-1" not in hub.connected(), what="gpu-1 offline")

            # The impostor: the shared join token, the same name, its own (other) credential.
            impostor = Sidecar("gpu-1", {}, heartbeat_interval=0.2)
            impostor_task = asyncio.create_task(impostor.run(url, JOIN, stop=impostor_stop))
            await wait_for(lambda: impostor.connected.is_set() or impostor_task.done(), what="the impostor")
            assert impostor.state == "pending"
            assert hub.status_of("gpu-1").state == "pending"
            async with fleet.admin() as admin:
                listed = (await admin.get("/admin/fleet")).json()
                row = next(s for s in listed["sidecars"] if s["name"] == "gpu-1")
                assert row["state"] == "pending" and row["connected"]
                assert CLAIM in listed["problems"] and CLAIM in row["problems"]
                assert CLAIM in (await admin.get("/admin/overview")).json()["problems"]
                push = (await admin.post("/admin/key", json={"key": KEY})).json()
                assert push["acked"] == [] and push["pending"] == ["gpu-1"], push
                # Approving it by mistake does not hand it the name: that takes an explicit rebind.
                refused = await admin.post("/admin/fleet/gpu-1/approve")
                assert refused.status_code == 409 and "rebind" in refused.text, refused.text
            shown = await asyncio.to_thread(fleet_cli, url)
            assert shown.exit_code == 0 and CLAIM in " ".join(shown.output.split()), shown.output
            await heartbeats_pass(hub, "gpu-1")  # heartbeats go by: still nothing for the impostor
            assert impostor.received.get("config", 0) == 0 and impostor.received.get("command", 0) == 0
            assert not impostor.key_present and impostor.state == "pending"

            # The real sidecar restarts: it takes its name back, and the impostor is cut off.
            real = spawn_sidecar(group, "gpu-1", port, [], env=env)
            await wait_for(
                lambda: hub.status_of("gpu-1").state == "approved" and hub.status_of("gpu-1").connected,
                timeout=60,
                what="the real sidecar back",
            )
            impostor_stop.set()
            await asyncio.wait_for(impostor_task, 20)
            assert impostor.received.get("config", 0) == 0 and not impostor.key_present
            async with fleet.admin() as admin:
                push = (await admin.post("/admin/key", json={"key": KEY})).json()
                assert push["acked"] == ["gpu-1"], push
                listed = (await admin.get("/admin/fleet")).json()
                fleet_json = (await admin.get("/admin/fleet")).text + (
                    await admin.get("/admin/overview")
                ).text
            assert next(s for s in listed["sidecars"] if s["name"] == "gpu-1")["state"] == "approved"
            assert real.popen.poll() is None

        # The real sidecar's credential: a private file in its state dir, and nowhere else.
        cred_file = state / CREDENTIAL_FILE
        assert stat.S_IMODE(cred_file.stat().st_mode) == 0o600
        credential = cred_file.read_text().strip()
        assert len(credential) >= 40
        group.stop()
        for path in data.rglob("*"):
            if path.is_file():
                assert credential not in path.read_text(errors="replace"), path
        assert credential not in fleet_json
        assert "credential" in (data / "fleet.json").read_text()  # its hash is kept
        assert credential not in capture.getvalue()
        for proc in group.procs:
            assert credential not in proc.output(), proc.name
    finally:
        impostor_stop.set()
        if impostor_task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(impostor_task, 10)
        fathom_log.removeHandler(handler)
        fathom_log.setLevel(old_level)
        group.stop()


async def test_a_host_that_joined_first_keeps_its_name_while_connected(tmp_path: Path):
    app, hub, registry = build_app(tmp_path / "data")
    async with serve_in_loop(app) as url:
        fleet = Fleet(url, hub, registry, tmp_path / "data")
        try:
            hub.auth.approve("gpu-2")  # approved before it ever connected: the first host binds it
            real, _ = await fleet.start_sidecar("gpu-2")
            assert real.state == "approved"
            # A second host under the same name, while the first is connected: refused, and shown.
            async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
                await ws.send(p.encode(p.Register(name="gpu-2", token=JOIN, credential="fsc_" + "x" * 43)))
                reply = p.parse_frame(await ws.recv())
                assert isinstance(reply, p.Error) and reply.code == "name_in_use"
            assert "gpu-2: a different host claims this name" in hub.problems()
            assert real.state == "approved" and hub.status_of("gpu-2").state == "approved"
            # Without any credential a connection is refused outright, whatever its token.
            async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
                await ws.send(p.encode(p.Register(name="gpu-9", token=JOIN)))
                reply = p.parse_frame(await ws.recv())
                assert (
                    isinstance(reply, p.Error)
                    and reply.code == "join_refused"
                    and "credential" in reply.message
                )
            # The operator may hand the name to a replacement host explicitly.
            await fleet.stop_sidecar(real)
            await wait_for(lambda: "gpu-2" not in hub.connected(), what="gpu-2 offline")
            newcomer, _ = await fleet.start_sidecar("gpu-2", credential=new_credential())  # another host
            assert newcomer.state == "pending"
            async with fleet.admin() as admin:
                r = await admin.post("/admin/fleet/gpu-2/approve", params={"rebind": "true"})
                assert r.status_code == 200 and r.json()["state"] == "approved", r.text
            await wait_for(lambda: newcomer.state == "approved", what="the rebound host approved")
            assert "gpu-2: a different host claims this name" not in hub.problems()
        finally:
            await fleet.close()


async def test_failed_joins_are_rate_limited_per_address_and_logged_as_a_summary_and_a_valid_token_still_joins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    now = [1000.0]
    app, hub, registry = build_app(tmp_path / "data", clock=lambda: now[0])
    statuses: list[int] = []
    caplog.set_level(logging.INFO, logger="fathom.fleet.hub")
    async with serve_in_loop(app) as url:
        ws_url = url.replace("http://", "ws://") + "/sidecar"

        async def attempt(token: str) -> int:
            """The HTTP status of a refused handshake, the close code of a connection closed at
            once, or 101 for one the hub keeps open (waiting for the register frame)."""
            try:
                async with websockets.connect(
                    ws_url,
                    compression=None,
                    proxy=None,
                    open_timeout=10,
                    additional_headers={"Authorization": f"Bearer {token}"},
                ) as ws:
                    try:
                        await asyncio.wait_for(ws.recv(), 0.3)
                    except websockets.ConnectionClosed:
                        return ws.close_code
                    except TimeoutError:
                        return 101
                    return 101
            except websockets.InvalidStatus as exc:
                return exc.response.status_code

        async with asyncio.timeout(60):
            for _ in range(60):
                statuses.append(await attempt("fj_wrong"))
            # A right token from the blocked address is admitted: others' failures never keep
            # out a valid token (every sidecar behind one TLS proxy shares its address).
            admitted_while_blocked = await attempt(JOIN)
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
            # The block ends with time; the next failure reports how many were cut off meanwhile.
            now[0] += 3600
            after = await attempt("fj_wrong")
            ok = await attempt(JOIN)
    assert statuses[:3] == [403, 403, 403]
    assert statuses.count(CLOSE_TOO_MANY_FAILURES) >= 45, statuses
    assert admitted_while_blocked == 101
    # The first failure and the block, once for the address and once for the wrong token.
    assert len(warnings) <= 4, [r.getMessage() for r in warnings]
    assert any("refusing sidecar joins from 127.0.0.1" in r.getMessage() for r in warnings)
    assert after == 403 and ok == 101
    summary = [r.getMessage() for r in caplog.records if "while blocked" in r.getMessage()]
    assert summary and str(statuses.count(CLOSE_TOO_MANY_FAILURES)) in summary[0], summary
    assert all("fj_wrong" not in r.getMessage() for r in caplog.records)
    assert json.dumps(hub.problems())  # the hub still answers


async def test_the_agent_keeps_its_credential_in_its_state_dir(tmp_path: Path):
    from fathom.errors import ConfigError
    from fathom.fleet.identity import load_or_create_credential

    state = tmp_path / "state"
    first = load_or_create_credential(state)
    assert load_or_create_credential(state) == first
    assert stat.S_IMODE((state / CREDENTIAL_FILE).stat().st_mode) == 0o600
    sidecar = Sidecar("gpu-3", {}, credential=first)
    assert first not in repr(sidecar) and first not in repr(sidecar.register_frame())
    # A garbled credential file is an error naming the fix, never a silent new identity.
    (state / CREDENTIAL_FILE).write_text("garbage\x00\n")
    with pytest.raises(ConfigError, match="credential"):
        load_or_create_credential(state)
