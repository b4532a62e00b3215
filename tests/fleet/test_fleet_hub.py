"""The hub over a real WebSocket on 127.0.0.1, with real sidecar agents in this event loop:
admission (join token, pending, approval, host tokens, revoke), command correlation, a sidecar
dropping mid-command, and health."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import websockets

from fathom.fleet import protocol as p
from fathom.fleet.agent import Backoff, Sidecar, SidecarRefused
from fathom.fleet.identity import new_credential
from fathom.fleet.remote import SidecarUnavailable
from fathom.inference.pool import Pool
from fathom.roles import Role
from tests.fleet.fleet_fixtures import JOIN, Fleet, HashEmbedder, heartbeats_pass, wait_for

CE = Role.CODE_EMBEDDING


def local_id(name: str, role: Role = CE) -> str:
    return f"sidecar:{name}:{role}:local"


async def test_pending_sidecar_gets_no_command_and_no_key(fleet: Fleet):
    backend = HashEmbedder()
    sidecar, _ = await fleet.start_sidecar("gpu-a", {CE: backend})
    assert sidecar.state == "pending"
    assert local_id("gpu-a") not in fleet.registry
    with pytest.raises(SidecarUnavailable, match="not approved"):
        await fleet.hub.command("gpu-a", "embed", CE, "local", {"texts": ["x"]})
    outcome = await fleet.hub.push_config(key="sk-or-v1-" + "0" * 64)
    assert outcome.acked == [] and outcome.pending == ["gpu-a"] and not outcome.pushed
    await heartbeats_pass(fleet.hub, "gpu-a")  # a few heartbeats: nothing else may arrive meanwhile
    assert sidecar.received.get("config", 0) == 0 and sidecar.received.get("command", 0) == 0
    assert not sidecar.key_present and backend.calls == []
    async with fleet.admin() as admin:
        listed = (await admin.get("/admin/fleet")).json()
        assert [s["state"] for s in listed["sidecars"]] == ["pending"]
        assert "sidecar gpu-a is waiting for approval" in listed["problems"]
        # Approval takes effect on the live connection: providers appear, config (no key) arrives.
        r = await admin.post("/admin/fleet/gpu-a/approve")
        assert r.status_code == 200 and r.json()["state"] == "approved"
    await wait_for(
        lambda: sidecar.state == "approved" and sidecar.received.get("config", 0) == 1, what="approval"
    )
    assert local_id("gpu-a") in fleet.registry and not sidecar.key_present
    vec = await fleet.registry.get(local_id("gpu-a")).embed(["hello"])
    assert np.allclose(vec[0], HashEmbedder.vector("hello", 8))


async def test_wrong_token_refused_at_connect(fleet: Fleet):
    with pytest.raises(SidecarRefused, match="wrong join token"):
        await asyncio.wait_for(
            Sidecar("intruder", {}).run(fleet.url, "fj_wrong", backoff=Backoff(0.01, 0.02)), 20
        )
    # The same through the register frame (a client that cannot set headers): refused, closed 4401.
    async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
        await ws.send(json.dumps({"v": 1, "type": "register", "name": "intruder", "token": "fj_wrong"}))
        reply = p.parse_frame(await ws.recv())
        assert isinstance(reply, p.Error) and reply.code == "join_refused" and "fj_wrong" not in reply.message
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 4401
    # No token at all is refused too; a right token in the register frame is admitted (pending).
    async with websockets.connect(fleet.ws_url, compression=None, proxy=None) as ws:
        await ws.send(p.encode(p.Register(name="headerless", token=JOIN, credential=new_credential())))
        status = p.parse_frame(await ws.recv())
        assert isinstance(status, p.Status) and status.state == "pending"
        assert fleet.hub.status_of("headerless").state == "pending"
    assert "intruder" not in fleet.hub.connected()


async def test_host_token_pre_approves_exactly_its_name(fleet: Fleet):
    async with fleet.admin() as admin:
        issued = (await admin.post("/admin/fleet/tokens", json={"name": "gpu-h"})).json()
    assert issued["kind"] == "host"
    sidecar, _ = await fleet.start_sidecar("gpu-h", {CE: HashEmbedder()}, token=issued["token"])
    assert sidecar.state == "approved"
    await wait_for(lambda: local_id("gpu-h") in fleet.registry, what="provider")
    with pytest.raises(SidecarRefused):
        await asyncio.wait_for(
            Sidecar("other", {}).run(fleet.url, issued["token"], backoff=Backoff(0.01, 0.02)), 20
        )
    # Only hashes are on disk.
    fleet_file = (fleet.data_dir / "fleet.json").read_text()
    assert issued["token"] not in fleet_file and JOIN not in fleet_file


async def test_admin_api_requires_the_admin_token(fleet: Fleet):
    import httpx

    async with httpx.AsyncClient(base_url=fleet.url) as anon:
        assert (await anon.get("/admin/fleet")).status_code == 401
        assert (await anon.post("/admin/key", json={"key": "sk-or-v1-x" * 2})).status_code == 401
        r = await anon.get("/admin/fleet", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401


async def test_revoke_drops_work_at_once(fleet: Fleet):
    gate = asyncio.Event()
    backend = HashEmbedder(gate=gate)
    fleet.hub.auth.approve("gpu-r")
    sidecar, _ = await fleet.start_sidecar("gpu-r", {CE: backend})
    await wait_for(lambda: local_id("gpu-r") in fleet.registry, what="provider")
    provider = fleet.registry.get(local_id("gpu-r"))
    work = asyncio.create_task(provider.embed(["a", "b"]))
    await asyncio.wait_for(backend.started.wait(), 10)
    async with fleet.admin() as admin:
        r = await admin.post("/admin/fleet/gpu-r/revoke")
    assert r.json()["state"] == "revoked"
    # The in-flight command fails at once (the backend is still blocked), providers are gone.
    with pytest.raises(SidecarUnavailable, match="revoked"):
        await asyncio.wait_for(work, 10)
    assert local_id("gpu-r") not in fleet.registry
    # The sidecar reconnects on its own and is held pending: no command, no config.
    await wait_for(lambda: "gpu-r" in fleet.hub.connected() and sidecar.state == "pending", what="reconnect")
    configs = sidecar.received.get("config", 0)
    with pytest.raises(SidecarUnavailable):
        await fleet.hub.command("gpu-r", "embed", CE, "local", {"texts": ["x"]})
    await fleet.hub.push_config(key="sk-or-v1-" + "1" * 64)
    assert sidecar.received.get("config", 0) == configs and not sidecar.key_present
    gate.set()


async def test_commands_are_correlated_by_id(fleet: Fleet):
    class Staggered(HashEmbedder):
        """Answers in the reverse order of arrival: each text waits for its own event."""

        def __init__(self):
            super().__init__()
            self.events = {t: asyncio.Event() for t in ("one", "two", "three")}

        async def embed(self, texts):
            await self.events[texts[0]].wait()
            return await super().embed(texts)

    backend = Staggered()
    fleet.hub.auth.approve("gpu-c")
    await fleet.start_sidecar("gpu-c", {CE: backend})
    await wait_for(lambda: local_id("gpu-c") in fleet.registry, what="provider")
    provider = fleet.registry.get(local_id("gpu-c"))
    tasks = {t: asyncio.create_task(provider.embed([t])) for t in ("one", "two", "three")}
    await wait_for(lambda: fleet.hub.status_of("gpu-c").in_flight == 3, what="three in flight")
    for t in ("three", "two", "one"):
        backend.events[t].set()
        vec = await asyncio.wait_for(tasks[t], 10)
        assert np.allclose(vec[0], HashEmbedder.vector(t, 8)), t


async def test_drop_mid_command_fails_fast_and_pool_loses_nothing(fleet: Fleet):
    slow_gate, fast_gate = asyncio.Event(), asyncio.Event()
    doomed, healthy = HashEmbedder(gate=slow_gate), HashEmbedder(gate=fast_gate)
    for name in ("gpu-x", "gpu-y"):
        fleet.hub.auth.approve(name)
    x, _ = await fleet.start_sidecar("gpu-x", {CE: doomed})
    await fleet.start_sidecar("gpu-y", {CE: healthy})
    await wait_for(
        lambda: {local_id("gpu-x"), local_id("gpu-y")} <= set(p.id for p in fleet.registry), what="providers"
    )
    # Direct: a command held by a sidecar that drops fails at once with SidecarUnavailable.
    held = asyncio.create_task(fleet.registry.get(local_id("gpu-x")).embed(["held"]))
    await asyncio.wait_for(doomed.started.wait(), 10)
    doomed.started.clear()
    await fleet.stop_sidecar(x)
    with pytest.raises(SidecarUnavailable):
        await asyncio.wait_for(held, 10)
    assert local_id("gpu-x") not in fleet.registry

    # Through the pool: x holds a batch when it dies; the batch returns to the queue, y writes it.
    x2, _ = await fleet.start_sidecar("gpu-x", {CE: doomed})
    await wait_for(lambda: local_id("gpu-x") in fleet.registry, what="x back")
    texts = [f"chunk {i}" for i in range(12)]
    written: dict[int, str] = {}

    async def sink(indices, vectors, provider):
        for i, v in zip(indices, vectors):
            assert i not in written, f"chunk {i} written twice"
            assert np.allclose(v, HashEmbedder.vector(texts[i], 8))
            written[i] = provider.id

    # The sidecars only: the server's own in-process encoder is in the registry too.
    pool = Pool(
        fleet.registry,
        role=CE,
        initial_batch=3,
        max_batch=3,
        stall_timeout=60,
        eligible=lambda p: p.id.startswith("sidecar:"),
    )
    job = asyncio.create_task(pool.run(texts, sink))
    await asyncio.wait_for(doomed.started.wait(), 10)
    await asyncio.wait_for(healthy.started.wait(), 10)
    await fleet.stop_sidecar(x2)  # dies holding its batch
    fast_gate.set()
    await asyncio.wait_for(job, 30)
    assert sorted(written) == list(range(12))
    assert set(written.values()) == {local_id("gpu-y")}
    slow_gate.set()


async def test_health_is_listed_and_silent_sidecars_are_reaped(fleet: Fleet):
    fleet.hub.auth.approve("gpu-h1")
    sidecar, _ = await fleet.start_sidecar("gpu-h1", {CE: HashEmbedder()}, load=lambda: 0.25)
    await wait_for(lambda: fleet.hub.status_of("gpu-h1").load == 0.25, what="a heartbeat")
    status = fleet.hub.status_of("gpu-h1")
    assert status.connected and status.versions["protocol"] == "1" and status.routes[0]["role"] == CE
    # A fake clock jumps past the heartbeat timeout: the reaper disconnects the silent sidecar.
    now = [fleet.hub.clock() + 10 * fleet.hub.heartbeat_timeout]
    real_clock, fleet.hub.clock = fleet.hub.clock, lambda: now[0]
    removed = []
    fleet.registry.subscribe(
        lambda change: removed.append(change.provider.id) if change.kind == "removed" else None
    )
    try:
        assert await fleet.hub.reap() == ["gpu-h1"]
    finally:
        fleet.hub.clock = real_clock
    assert local_id("gpu-h1") in removed and all(pid.startswith("sidecar:gpu-h1:") for pid in removed)
    # The sidecar itself is alive: it reconnects and is served again.
    await wait_for(
        lambda: sidecar.received["status"] >= 2 and local_id("gpu-h1") in fleet.registry, what="rejoin"
    )
