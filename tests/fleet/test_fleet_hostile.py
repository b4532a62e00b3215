"""Hostile clients of the `/sidecar` WebSocket, through the real app on a real 127.0.0.1 socket
(and, for what the server process itself decides — which address a connection comes from, how
much it buffers — through a real `fathom server` process): the failed-join limiter never keeps
out a valid token and trusts no forged address, strangers and pending sidecars are held to small
frames and a bounded list, and the hub's guards (a pending sidecar's key check, the close after
a stream of refused frames, the register timeout) each hold."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from fathom.fleet import protocol as p
from fathom.fleet.hub import (
    CLOSE_POLICY,
    CLOSE_TOO_MANY_FAILURES,
    CLOSE_TRY_LATER,
    MAX_BAD_FRAMES,
    MAX_PENDING,
)
from fathom.fleet.identity import new_credential
from fathom.roles import Role
from tests.fleet.fleet_fixtures import (
    JOIN,
    Fleet,
    HashEmbedder,
    ProcessGroup,
    build_app,
    free_port,
    serve_in_loop,
    spawn_server,
    wait_for,
)

CE = Role.CODE_EMBEDDING

REFUSED_AT_HANDSHAKE = 403  # a wrong token in the Authorization header: the handshake is refused
OPEN = 101  # the hub kept the connection open


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/sidecar"


async def attempt(
    url: str, token: str | None, *, source: str = "127.0.0.1", forwarded_for: str | None = None
) -> int:
    """One join attempt from the local address `source`: the HTTP status of a refused handshake,
    the close code of a connection closed at once, or 101 for one the hub keeps open."""
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    try:
        async with websockets.connect(
            ws_url(url),
            compression=None,
            proxy=None,
            open_timeout=10,
            additional_headers=headers,
            local_addr=(source, 0),
        ) as ws:
            try:
                await asyncio.wait_for(ws.recv(), 0.3)
            except websockets.ConnectionClosed:
                return ws.close_code
            except TimeoutError:
                return OPEN
            return OPEN
    except websockets.InvalidStatus as exc:
        return exc.response.status_code


def wrong_token() -> str:
    return f"fj_wrong-{secrets.token_hex(8)}"


async def register(ws: Any, name: str, token: str = JOIN, **fields: Any) -> p.Frame | p.FrameError:
    await ws.send(p.encode(p.Register(name=name, token=token, credential=new_credential(), **fields)))
    return p.parse_frame(await asyncio.wait_for(ws.recv(), 10))


async def closed_with(ws: Any, timeout: float = 10.0) -> int | None:
    """Read until the server closes `ws` (bounded); its close code."""
    async with asyncio.timeout(timeout):
        try:
            while True:
                await ws.recv()
        except websockets.ConnectionClosed:
            return ws.close_code


# ---- the failed-join limiter ------------------------------------------------------------------


async def test_a_valid_token_joins_from_an_address_blocked_by_others_failures(fleet: Fleet):
    async with asyncio.timeout(60):
        failures = [await attempt(fleet.url, wrong_token()) for _ in range(10)]
        assert failures == [REFUSED_AT_HANDSHAKE] * 10
        # The address is blocked now: a stranger (a wrong token, or none) is turned away unread.
        assert await attempt(fleet.url, wrong_token()) == CLOSE_TOO_MANY_FAILURES
        assert await attempt(fleet.url, None) == OPEN  # no token yet: it may still register...
        async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
            await ws.send(p.encode(p.Register(name="stranger", credential=new_credential())))
            assert await closed_with(ws) == CLOSE_TOO_MANY_FAILURES  # ...but not without a valid one
        # The real sidecar, from the same address, joins (header token)...
        sidecar, _ = await fleet.start_sidecar("gpu-real")
        assert sidecar.state == "pending"
        # ...and so does a client that can only put the token in its register frame.
        async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
            status = await register(ws, "headerless")
            assert isinstance(status, p.Status) and status.state == "pending"
            assert sorted(fleet.hub.connected()) == ["gpu-real", "headerless"]


async def test_one_wrong_token_tried_from_many_addresses_is_blocked(fleet: Fleet):
    token = wrong_token()
    async with asyncio.timeout(60):
        # Ten real peers (127.0.0.2-11 are this host too), one wrong token: the token is blocked.
        firsts = [await attempt(fleet.url, token, source=f"127.0.0.{i}") for i in range(2, 12)]
        assert firsts == [REFUSED_AT_HANDSHAKE] * 10
        assert await attempt(fleet.url, token, source="127.0.0.12") == CLOSE_TOO_MANY_FAILURES
        # The addresses are not: another wrong token from a fresh one is refused, not blocked.
        assert await attempt(fleet.url, wrong_token(), source="127.0.0.13") == REFUSED_AT_HANDSHAKE
        sidecar, _ = await fleet.start_sidecar("gpu-1")
        assert sidecar.state == "pending"


@pytest.fixture
def server_process(tmp_path: Path):
    group = ProcessGroup(tmp_path / "procs")
    port = free_port()
    try:
        spawn_server(group, tmp_path / "data", port, log_level="WARNING", encoder_loaded=True)
        yield f"http://127.0.0.1:{port}", group
    finally:
        group.stop()


@pytest.mark.slow
def test_a_forwarded_address_neither_evades_the_limit_nor_blocks_a_victim(server_process):
    """Through a real `fathom server` started as an operator starts it (no proxy configured):
    X-Forwarded-For from a loopback client is not an address."""
    url, group = server_process

    async def go() -> None:
        async with asyncio.timeout(90):
            # Rotating the header does not make ten failures from 127.0.0.1 look like ten peers.
            rotated = [await attempt(url, wrong_token(), forwarded_for=f"10.0.0.{i}") for i in range(10)]
            assert rotated == [REFUSED_AT_HANDSHAKE] * 10
            assert await attempt(url, wrong_token(), forwarded_for="10.0.0.99") == CLOSE_TOO_MANY_FAILURES
            # Forging a victim's address counts nothing against the victim (127.0.0.2, a real peer).
            for _ in range(10):
                await attempt(url, wrong_token(), forwarded_for="127.0.0.2")
            assert await attempt(url, wrong_token(), source="127.0.0.2") == REFUSED_AT_HANDSHAKE
            # And the real sidecar joins from the attacker's blocked address.
            assert await attempt(url, JOIN) == OPEN

    asyncio.run(go())
    log = group.procs[0].output()
    assert "10.0.0." not in log and "refusing sidecar joins from 127.0.0.1" in log, log[-3000:]


# ---- sizes: frames before parsing, the pending list, its fields --------------------------------


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.slow
def test_strangers_big_frames_are_refused_before_the_server_holds_them(server_process):
    """Twenty parallel connections without a token each send one 8 MiB frame to a real
    `fathom server`: each is closed as too big, the failures count against the address, and the
    server's peak memory barely moves (it used to grow by about 176 MiB)."""
    url, group = server_process
    pid = group.procs[0].popen.pid
    frame = json.dumps({"v": 1, "type": "register", "name": "x", "pad": "a" * (8 * 1024 * 1024 - 100)})

    async def one() -> int | None:
        try:
            async with websockets.connect(
                ws_url(url), compression=None, proxy=None, open_timeout=10, max_size=None, write_limit=2**24
            ) as ws:
                with contextlib.suppress(websockets.ConnectionClosed):  # closed while it still sends
                    await asyncio.wait_for(ws.send(frame), 30)
                return await closed_with(ws, 30)
        except websockets.InvalidStatus as exc:
            return exc.response.status_code

    async def go() -> list[int | None]:
        async with asyncio.timeout(120):
            return await asyncio.gather(*(one() for _ in range(20)))

    before = peak_rss_mib(pid)
    codes = asyncio.run(go())
    grown = peak_rss_mib(pid) - before
    assert all(code in (1009, CLOSE_POLICY, CLOSE_TOO_MANY_FAILURES) for code in codes), codes
    assert grown < 32, f"the server's peak memory grew by {grown:.0f} MiB"
    assert "refusing sidecar joins from 127.0.0.1" in group.procs[0].output()


async def test_a_pending_sidecar_is_held_to_small_frames_until_approved(fleet: Fleet):
    big = p.Heartbeat(load=0, in_flight=0).model_dump(mode="json") | {
        "pad": "a" * (p.MAX_PENDING_FRAME_BYTES + 1)
    }
    async with asyncio.timeout(30):
        # A first frame over the small bound: refused before it is parsed, and counted.
        async with websockets.connect(fleet.ws_url, compression=None, proxy=None, max_size=None) as ws:
            await ws.send(json.dumps(big))
            assert await closed_with(ws) in (1009, CLOSE_POLICY)
        async with websockets.connect(
            fleet.ws_url,
            compression=None,
            proxy=None,
            max_size=None,
            additional_headers={"Authorization": f"Bearer {JOIN}"},
        ) as ws:
            status = await register(ws, "gpu-p")
            assert isinstance(status, p.Status) and status.state == "pending"
            await ws.send(json.dumps(big))  # pending: still the small bound
            assert await closed_with(ws) == 1009
        sidecar, _ = await fleet.start_sidecar("gpu-p", {CE: HashEmbedder(width=256)})
        async with fleet.admin() as admin:
            assert (await admin.post("/admin/fleet/gpu-p/approve")).status_code == 200
        await wait_for(lambda: sidecar.state == "approved", what="approval")
        # Approved: the bound is widened, and an embed result of 1.4 MB comes through.
        result = await fleet.hub.command(
            "gpu-p", "embed", CE, "local", {"texts": [f"t{i}" for i in range(1024)]}
        )
        assert p.decode_vectors(result).shape == (1024, 256)


async def test_pending_sidecars_are_bounded_in_number_and_their_fields_in_size(fleet: Fleet):
    versions = {f"v{i:02d}" + "k" * 28: "x" * 64 for i in range(16)}  # the largest allowed
    async with asyncio.timeout(120):
        held = []
        try:
            for i in range(MAX_PENDING):
                ws = await websockets.connect(fleet.ws_url, compression=None, proxy=None)
                held.append(ws)
                status = await register(ws, f"pending-{i:02d}", versions=versions)
                assert isinstance(status, p.Status) and status.state == "pending", status
            # One more is refused (and told to retry later); the ones waiting keep their place.
            async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
                refused = await register(ws, "one-too-many")
                assert isinstance(refused, p.Error) and refused.code == "too_many_pending"
                assert await closed_with(ws) == CLOSE_TRY_LATER
            assert len(fleet.hub.connected()) == MAX_PENDING and "one-too-many" not in fleet.hub.connected()
            # An operator's pre-approved sidecar still gets in.
            async with fleet.admin() as admin:
                host_token = (await admin.post("/admin/fleet/tokens", json={"name": "gpu-ok"})).json()[
                    "token"
                ]
                sidecar, _ = await fleet.start_sidecar("gpu-ok", token=host_token)
                assert sidecar.state == "approved"
                # A dashboard poll with the list full stays small.
                listing = await admin.get("/admin/fleet")
                assert listing.status_code == 200 and len(listing.content) < 256 * 1024, len(listing.content)
            # Oversized fields are refused, not kept: a long version, too many, a long model.
            for fields in (
                {"versions": {"fathom": "x" * 65}},
                {"versions": {f"k{i}": "1" for i in range(17)}},
                {"versions": {"k" * 33: "1"}},
                {"routes": [{"role": CE.value, "backend": "tei", "model": "m" * 257}]},
            ):
                async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
                    frame = p.Register(name="fat", token=JOIN, credential=new_credential()).model_dump(
                        mode="json"
                    )
                    await ws.send(json.dumps(frame | fields))
                    reply = p.parse_frame(await asyncio.wait_for(ws.recv(), 10))
                    assert isinstance(reply, p.Error) and reply.code == "invalid", reply
            assert "fat" not in fleet.hub.connected()
        finally:
            for ws in held:
                await ws.close()


# ---- the hub's guards -----------------------------------------------------------------------------


@pytest.fixture
async def pending_link(fleet: Fleet) -> AsyncIterator[tuple[Fleet, Any]]:
    """A raw connection registered as a pending sidecar "raw"."""
    async with websockets.connect(
        fleet.ws_url, compression=None, proxy=None, additional_headers={"Authorization": f"Bearer {JOIN}"}
    ) as ws:
        status = await register(ws, "raw")
        assert isinstance(status, p.Status) and status.state == "pending"
        yield fleet, ws


async def roundtrip(ws: Any) -> None:
    """Frames are handled in order: once the answer to a refused frame is back, everything
    sent before it was handled."""
    await ws.send("not json")
    while True:
        reply = p.parse_frame(await asyncio.wait_for(ws.recv(), 10))
        if isinstance(reply, p.Error) and reply.code == "malformed":
            return


async def test_a_pending_sidecars_key_check_moves_nothing(pending_link):
    fleet, ws = pending_link
    check = p.KeyCheck(
        outcome="ok",
        reason="push",
        facts=p.KeyFacts(rate_limit_requests=20, rate_limit_interval="1m", is_free_tier=True),
    )
    async with fleet.admin() as admin, asyncio.timeout(30):
        before = (await admin.get("/admin/budget")).json()
        await ws.send(p.encode(check))
        await roundtrip(ws)
        after = (await admin.get("/admin/budget")).json()
        assert (after["ceiling"], after["ceiling_origin"]) == (before["ceiling"], before["ceiling_origin"])
        assert fleet.hub.key_check("raw") is None
        [raw] = [s for s in (await admin.get("/admin/fleet")).json()["sidecars"] if s["name"] == "raw"]
        assert raw["key_check"] is None
        # The same frame once the operator approved it does move the budget: the test can see it.
        assert (await admin.post("/admin/fleet/raw/approve")).status_code == 200
        await ws.send(p.encode(check))
        await roundtrip(ws)
        moved = (await admin.get("/admin/budget")).json()
        assert moved["ceiling_origin"] != before["ceiling_origin"] and "20 req/min" in moved["ceiling_origin"]


async def test_a_stream_of_refused_frames_is_cut_off(pending_link):
    fleet, ws = pending_link
    async with asyncio.timeout(30):
        for _ in range(MAX_BAD_FRAMES - 1):
            await roundtrip(ws)
        # One short of the limit, the connection lives; a good frame resets the count.
        await ws.send(p.encode(p.Heartbeat(load=0, in_flight=0)))
        for _ in range(MAX_BAD_FRAMES - 1):
            await roundtrip(ws)
        assert "raw" in fleet.hub.connected()
        await ws.send("not json")
        assert await closed_with(ws) == CLOSE_POLICY
    await wait_for(lambda: "raw" not in fleet.hub.connected(), what="the link dropped")


async def test_a_silent_connection_is_closed_after_the_register_timeout(tmp_path: Path):
    app, hub, _ = build_app(tmp_path / "data", register_timeout=0.5)
    async with serve_in_loop(app) as url, asyncio.timeout(20):
        async with websockets.connect(
            ws_url(url), compression=None, proxy=None, additional_headers={"Authorization": f"Bearer {JOIN}"}
        ) as ws:
            reply = p.parse_frame(await asyncio.wait_for(ws.recv(), 10))
            assert isinstance(reply, p.Error) and reply.code == "register_timeout"
            assert await closed_with(ws) == CLOSE_POLICY
    assert hub.connected() == []


async def test_without_the_bounded_transport_the_hub_still_refuses_a_pending_big_frame_unparsed(
    tmp_path: Path,
):
    """Under a plain uvicorn (no per-connection bound) the hub checks a message's size before
    parsing it: a pending sidecar's frame over the small bound is refused (its connection lives)."""
    import uvicorn

    app, hub, _ = build_app(tmp_path / "data")
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=free_port(),
            log_level="warning",
            ws="websockets-sansio",
            ws_max_size=p.MAX_FRAME_BYTES,
            log_config=None,
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        await wait_for(lambda: server.started or task.done(), what="a plain uvicorn")
        url = f"http://127.0.0.1:{server.config.port}"
        async with (
            asyncio.timeout(30),
            websockets.connect(
                ws_url(url),
                compression=None,
                proxy=None,
                max_size=None,
                additional_headers={"Authorization": f"Bearer {JOIN}"},
            ) as ws,
        ):
            status = await register(ws, "gpu-plain")
            assert isinstance(status, p.Status) and status.state == "pending"
            big = p.Heartbeat(load=0, in_flight=0).model_dump(mode="json") | {
                "pad": "a" * p.MAX_PENDING_FRAME_BYTES
            }
            await ws.send(json.dumps(big))
            reply = p.parse_frame(await asyncio.wait_for(ws.recv(), 10))
            assert isinstance(reply, p.Error) and reply.code == "oversized", reply
            assert "gpu-plain" in hub.connected()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
