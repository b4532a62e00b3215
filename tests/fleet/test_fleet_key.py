"""The write-only key through the fleet, against the OpenRouter emulator on 127.0.0.1:
push and acknowledgement, keyless merges, restart = "key missing", reconnect = key kept,
throttles reaching the budget, and the persisted push fact."""

from __future__ import annotations

import secrets

import pytest

from fathom.config import RoutingStore
from fathom.devtools.emulator import MINILM, key_hash
from fathom.fleet.remote import KeyMissing, SidecarThrottled
from fathom.inference.budget.limiter import throttle_of
from fathom.roles import Role
from tests.fleet.fleet_fixtures import Fleet, HashEmbedder, wait_for

CA = Role.CODE_ASSISTANT
HELLO = [{"role": "user", "content": "hello"}]


def cloud_id(name: str, role: Role = CA, upstream: str = "auto") -> str:
    return f"sidecar:{name}:{role}:cloud:{upstream}"


async def two_cloud_sidecars(fleet: Fleet, emulator, names=("gpu-1", "gpu-2")):
    out = []
    for name in names:
        fleet.hub.auth.approve(name)
        sidecar, _ = await fleet.start_sidecar(
            name, {Role.CODE_EMBEDDING: HashEmbedder()}, openrouter_base_url=emulator.base_url
        )
        out.append(sidecar)
    await wait_for(lambda: all(cloud_id(n) in fleet.registry for n in names), what="cloud routes")
    await wait_for(lambda: all(s.received.get("config", 0) >= 1 for s in out), what="stored config pushed")
    return out


def new_key() -> str:
    return "sk-or-v1-" + secrets.token_hex(32)


async def test_push_reaches_both_and_both_use_it(fleet: Fleet, emulator):
    a, b = await two_cloud_sidecars(fleet, emulator)
    # No key was ever pushed: a fresh install's state, not a problem; the routes still say why
    # they cannot serve.
    assert not any(line.startswith("key missing") for line in fleet.hub.problems())
    assert not fleet.registry.available(cloud_id("gpu-1"))
    assert fleet.registry.health(cloud_id("gpu-1")).reason == "key missing on gpu-1"
    with pytest.raises(KeyMissing, match="key missing on gpu-1"):
        await fleet.registry.get(cloud_id("gpu-1")).chat(HELLO)
    key = new_key()
    async with fleet.admin() as admin:
        r = await admin.post("/admin/key", json={"key": key})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["acked"] == ["gpu-1", "gpu-2"] and body["pushed"] and body["offline"] == []
        assert key not in r.text
        listing = (await admin.get("/admin/fleet")).json()
    assert a.key_present and b.key_present
    assert fleet.registry.available(cloud_id("gpu-1")) and fleet.registry.available(cloud_id("gpu-2"))
    assert listing["last_push"]["acked"] == ["gpu-1", "gpu-2"] and listing["last_push"]["pushed"]
    assert not [x for x in listing["problems"] if x.startswith("key missing")]
    for name in ("gpu-1", "gpu-2"):
        result = await fleet.registry.get(cloud_id(name)).chat(HELLO)
        assert result.content
    counters = emulator.control.counters()
    assert counters["key_hashes"] == [key_hash(key)]
    assert counters["served"].get("chat") == 2 or counters["requests"].get("chat") == 2


async def test_keyless_push_merges_and_keeps_the_key(fleet: Fleet, emulator):
    a, b = await two_cloud_sidecars(fleet, emulator)
    key = new_key()
    pushed = await fleet.hub.push_config(key=key)
    assert pushed.acked == ["gpu-1", "gpu-2"]
    # A mode/model change without a key: the sidecars merge it and keep their key.
    outcome = await fleet.hub.push_config({CA: {"model": "other/coder"}, Role.RERANKER: {"policy": "local"}})
    assert outcome.acked == ["gpu-1", "gpu-2"] and not outcome.key_sent
    assert a.key_present and b.key_present
    assert a.config[CA].model == "other/coder" and a.config[Role.RERANKER].policy == "local"
    assert cloud_id("gpu-1", Role.RERANKER) not in fleet.registry  # local policy: no cloud route
    result = await fleet.registry.get(cloud_id("gpu-2")).chat(HELLO)
    assert result.model in (None, "other/coder")
    counters = emulator.control.counters()
    assert counters["by_model"].get("other/coder") == 1 and counters["key_hashes"] == [key_hash(key)]
    # Only the key push is recorded as a push: a keyless one while gpu-2 is away changes
    # nothing in the record (it would say gpu-2 is offline, and a later time).
    await fleet.stop_sidecar(b)
    await wait_for(lambda: "gpu-2" not in fleet.hub.connected(), what="gpu-2 gone")
    keyless = await fleet.hub.push_config({CA: {"model": "third/coder"}})
    assert keyless.offline == ["gpu-2"] and not keyless.key_sent
    record = RoutingStore(fleet.data_dir).load().last_push
    assert record is not None and record.acked == ["gpu-1", "gpu-2"] and record.offline == []
    assert record.at == pushed.at


async def test_forgetting_the_key_drops_it_on_every_sidecar_until_the_next_push(fleet: Fleet, emulator):
    """`fathom key forget` (POST /admin/key with forget_key) through the hub: each sidecar
    drops the key at once, its cloud routes say "key missing"; only a new push restores them."""
    a, b = await two_cloud_sidecars(fleet, emulator)
    await fleet.hub.push_config(key=new_key())
    assert a.key_present and b.key_present
    async with fleet.admin() as admin:
        r = await admin.post("/admin/key", json={"forget_key": True})
        assert r.status_code == 200, r.text
    assert not a.key_present and not b.key_present
    for name in ("gpu-1", "gpu-2"):
        assert not fleet.registry.available(cloud_id(name))
        with pytest.raises(KeyMissing):
            await fleet.registry.get(cloud_id(name)).chat(HELLO)
    # A keyless config push (a mode change) does not bring it back...
    await fleet.hub.push_config({CA: {"model": "other/coder"}})
    assert not a.key_present and not b.key_present
    # ...a key push does.
    await fleet.hub.push_config(key=new_key())
    assert a.key_present and b.key_present and fleet.registry.available(cloud_id("gpu-1"))


async def test_restart_reports_key_missing_and_reconnect_keeps_key(fleet: Fleet, emulator):
    a, b = await two_cloud_sidecars(fleet, emulator)
    await fleet.hub.push_config(key=new_key())
    # A dropped connection (same process) keeps the key: the register frame says so, and the
    # server re-pushes the stored config without a key on reconnect.
    configs = b.received["config"]
    link = fleet.hub._links["gpu-2"]
    await fleet.hub._close(link, 1012, "test: restart the connection")
    await wait_for(
        lambda: b.received["config"] > configs and "gpu-2" in fleet.hub.connected(), what="reconnect"
    )
    assert b.key_present and "key missing on gpu-2" not in fleet.hub.problems()
    assert (await fleet.registry.get(cloud_id("gpu-2")).chat(HELLO)).content
    # A restarted process has no key: status says so, and the cloud route fails loudly.
    await fleet.stop_sidecar(a)
    fresh, _ = await fleet.start_sidecar(
        "gpu-1", {Role.CODE_EMBEDDING: HashEmbedder()}, openrouter_base_url=emulator.base_url
    )
    await wait_for(lambda: cloud_id("gpu-1") in fleet.registry, what="gpu-1 back")
    assert not fresh.key_present
    assert "key missing on gpu-1" in fleet.hub.problems()
    provider = fleet.registry.get(cloud_id("gpu-1"))
    assert fleet.hub.route_unavailable_reason(provider) == "key missing on gpu-1"
    assert not fleet.registry.available(cloud_id("gpu-1")) and fleet.registry.available(cloud_id("gpu-2"))
    with pytest.raises(KeyMissing, match="key missing on gpu-1"):
        await provider.chat(HELLO)
    async with fleet.admin() as admin:
        listing = (await admin.get("/admin/fleet")).json()
    gpu1 = next(s for s in listing["sidecars"] if s["name"] == "gpu-1")
    assert gpu1["key_present"] is False and "key missing on gpu-1" in gpu1["problems"]


async def test_offline_sidecars_are_listed_and_nothing_acked_is_not_pushed(fleet: Fleet):
    fleet.hub.auth.approve("gpu-gone")
    outcome = await fleet.hub.push_config(key=new_key())
    assert outcome.offline == ["gpu-gone"] and outcome.acked == [] and not outcome.pushed
    record = RoutingStore(fleet.data_dir).load().last_push
    assert record is not None and not record.pushed and record.offline == ["gpu-gone"]


async def test_bad_key_push_is_refused_without_echo(fleet: Fleet):
    async with fleet.admin() as admin:
        r = await admin.post("/admin/key", json={"key": "sk-or-v1-has space", "extra": 1})
        assert r.status_code == 400 and "has space" not in r.text
        r = await admin.post("/admin/key", json={"roles": {"embedding": {"policy": "cloud"}}})
        assert r.status_code == 400 and "upstream" in r.text  # unpinned cloud embedding: refused
        # A valid key beside a key pasted into a route field: refused, and neither echoed.
        key = new_key()
        r = await admin.post("/admin/key", json={"key": key, "roles": {"rlm": {"key": key, "model": 3}}})
        assert r.status_code == 400 and "rlm" in r.text
        assert key not in r.text and key[8:] not in r.text


async def test_cloud_embedding_and_throttles_reach_the_budget(fleet: Fleet, emulator):
    await two_cloud_sidecars(fleet, emulator, names=("gpu-e",))
    await fleet.hub.push_config(
        {Role.EMBEDDING: {"policy": "aggregate", "model": MINILM, "upstream": "alpha"}}, key=new_key()
    )
    pid = cloud_id("gpu-e", Role.EMBEDDING, "alpha")
    await wait_for(lambda: pid in fleet.registry, what="pinned cloud embedding route")
    provider = fleet.registry.get(pid)
    assert provider.info.kind == "cloud" and provider.info.upstream == "alpha" and provider.info.width == 384
    vectors = await provider.embed(["def main(): pass"])
    assert vectors.shape == (1, 384)
    assert emulator.control.counters()["by_upstream"].get("alpha") == 1
    emulator.control.in_flight_402(count=1, retry_after=2.0)
    with pytest.raises(SidecarThrottled) as info:
        await provider.embed(["again"])
    assert throttle_of(info.value) == ("402", 2.0)
