"""Routing per role: the behaviour table over live providers, failover, query encoders."""

import asyncio

import numpy as np
import pytest

from fathom.config import PushRecord, RoleRoute, RoutingState
from fathom.errors import NoProviderAvailable, ProviderUnavailable
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.inference.registry import ChangeKind, HealthState, ProviderRegistry
from fathom.inference.router import NoRoute, Router
from fathom.policy import BEHAVIOUR, Policy
from fathom.roles import EMBEDDING_ROLES, FallbackMode, Role
from tests.fake_clock import FakeClock
from tests.inference.pool_fixtures import ClearedFlags, Collector, FakeEmbedder, Throttled, texts_for

ALL_ROLES = tuple(Role)


class FakeServer(Provider):
    """Serves every role; a call takes `delay` virtual seconds or fails as told."""

    def __init__(
        self,
        pid: str,
        clock: FakeClock,
        kind: Kind = Kind.LOCAL,
        *,
        host: str | None = None,
        delay: float = 1.0,
        fail: Exception | None = None,
        roles=ALL_ROLES,
    ):
        self.info = ProviderInfo(
            id=pid,
            kind=kind,
            roles=frozenset(roles),
            model="m",
            width=4,
            upstream="up" if kind is Kind.CLOUD else None,
            host=host,
        )
        self.clock, self.delay, self.fail = clock, delay, fail
        self.served: list[str] = []

    async def _serve(self, what: str):
        await self.clock.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        self.served.append(what)

    async def rerank(self, query, documents):
        await self._serve("rerank")
        return [1.0] * len(documents)

    async def chat(self, messages, tools=None, **options):
        await self._serve("chat")
        return self.id

    async def embed(self, texts):
        await self._serve("embed")
        return np.full((len(texts), 4), 1.0, dtype=np.float32)


def state(
    policy: Policy,
    role: Role = Role.CODE_EMBEDDING,
    *,
    fallback=FallbackMode.ANY,
    pushed: bool = True,
    upstream: str | None = "up",
) -> RoutingState:
    s = RoutingState()
    s.roles[role] = RoleRoute(
        policy=policy,
        model="m",
        upstream=upstream,
        fallback=fallback,
        width=4 if role in EMBEDDING_ROLES else None,
    )
    if pushed:
        s.last_push = PushRecord(at="2026-01-01T00:00:00Z", acked=["host-1"])
    return s


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def registry(clock):
    return ProviderRegistry(clock=clock)


def ids(ps):
    return [p.id for p in ps]


# -- the behaviour table, embedding roles ----------------------------------------------------


@pytest.mark.parametrize("policy", list(Policy))
def test_embedding_serving_set_follows_the_behaviour_table(policy, clock, registry):
    role = Role.CODE_EMBEDDING
    for p in (
        FakeServer("local", clock),
        FakeServer("sidecar", clock, host="gpu-1"),
        FakeServer("cloud-a", clock, Kind.CLOUD),
        FakeServer("cloud-b", clock, Kind.CLOUD),
    ):
        registry.add(p)
    cleared = ClearedFlags([(role, "local"), (role, "sidecar"), (role, "cloud-a")])  # not cloud-b
    router = Router(state(policy), registry, is_cleared=cleared)
    b = BEHAVIOUR[policy]
    expected = (["local", "sidecar"] if b.local else []) + (["cloud-a"] if b.cloud else [])
    assert ids(router.candidates(role)) == expected
    serving = ids(router.serving(role))
    if b.cloud_reserve_only:
        assert serving == ["local", "sidecar"]
        registry.remove("local")
        registry.remove("sidecar")
        assert ids(router.serving(role)) == ["cloud-a"]  # reserve engages with no local left
    else:
        assert serving == expected
    assert "cloud-b" not in serving  # never cleared: never serves a text


def test_a_provider_not_serving_the_role_or_out_of_service_is_not_a_candidate(clock, registry):
    registry.add(FakeServer("docs-only", clock, roles=(Role.EMBEDDING,)))
    registry.add(FakeServer("local", clock))
    registry.quarantine("local", "golden vectors drifted")
    router = Router(
        state(Policy.LOCAL),
        registry,
        is_cleared=ClearedFlags([(Role.CODE_EMBEDDING, "docs-only"), (Role.CODE_EMBEDDING, "local")]),
    )
    with pytest.raises(NoRoute) as err:
        router.candidates(Role.CODE_EMBEDDING) or router.pool(Role.CODE_EMBEDDING)
    assert "local quarantined (golden vectors drifted) until restored" in str(err.value)
    registry.restore("local")
    assert ids(router.candidates(Role.CODE_EMBEDDING)) == ["local"]


def test_cloud_with_no_cleared_provider_names_the_reason(clock, registry):
    role = Role.EMBEDDING
    registry.add(FakeServer("local", clock))
    router = Router(
        state(Policy.CLOUD, role, pushed=False), registry, is_cleared=ClearedFlags([(role, "local")])
    )
    with pytest.raises(NoProviderAvailable) as err:
        router.pool(role)
    msg = str(err.value)
    assert "no cloud route is registered" in msg and "no OpenRouter key has been pushed" in msg
    assert err.value.policy is Policy.CLOUD and err.value.role is role

    registry.add(FakeServer("openrouter:m@up", clock, Kind.CLOUD))
    router = Router(state(Policy.CLOUD, role), registry, is_cleared=ClearedFlags([(role, "local")]))
    with pytest.raises(NoRoute) as err:
        router.pool(role)
    assert "none of the registered cloud routes (openrouter:m@up) is cleared by the gate" in str(err.value)
    assert "fathom gate verify" in str(err.value)


# -- stateless roles -------------------------------------------------------------------------


async def test_aggregate_spreads_stateless_requests_least_loaded(clock, registry):
    local, cloud = FakeServer("local", clock, delay=5), FakeServer("cloud", clock, Kind.CLOUD, delay=5)
    registry.add(local)
    registry.add(cloud)
    router = Router(state(Policy.AGGREGATE, Role.RERANKER), registry, is_cleared=ClearedFlags())
    await asyncio.gather(*(router.rerank("q", ["a", "b"]) for _ in range(4)))
    assert len(local.served) == 2 and len(cloud.served) == 2
    await router.rerank("q", ["a"])  # idle: a tie goes to the hardware already paid for
    assert len(local.served) == 3


async def test_backup_stateless_uses_cloud_only_on_local_failure(clock, registry):
    local = FakeServer("local", clock)
    cloud = FakeServer("cloud", clock, Kind.CLOUD)
    registry.add(local)
    registry.add(cloud)
    router = Router(state(Policy.BACKUP, Role.CODE_ASSISTANT), registry, is_cleared=ClearedFlags())
    for _ in range(3):
        assert await router.chat(Role.CODE_ASSISTANT, [{"role": "user", "content": "hi"}]) == "local"
    assert cloud.served == []
    local.fail = ProviderUnavailable("sidecar disconnected")
    assert await router.chat(Role.CODE_ASSISTANT, []) == "cloud"
    registry.remove("local")  # unavailable altogether: cloud again
    assert await router.chat(Role.CODE_ASSISTANT, []) == "cloud"


async def test_strict_policies_never_cross_over(clock, registry):
    local = FakeServer("local", clock, fail=ProviderUnavailable("oom"))
    cloud = FakeServer("cloud", clock, Kind.CLOUD)
    registry.add(local)
    registry.add(cloud)
    router = Router(state(Policy.LOCAL, Role.RERANKER), registry, is_cleared=ClearedFlags())
    with pytest.raises(NoRoute) as err:
        await router.rerank("q", ["a"])
    assert err.value.attempts == [("local", "ProviderUnavailable: oom")]
    assert cloud.served == []

    local.fail, cloud.fail = None, ProviderUnavailable("upstream 503")
    router = Router(state(Policy.CLOUD, Role.RERANKER), registry, is_cleared=ClearedFlags())
    with pytest.raises(NoRoute):
        await router.rerank("q", ["a"])
    assert local.served == []


async def test_rlm_local_only_never_calls_the_cloud_whatever_the_policy(clock, registry):
    local = FakeServer("local", clock, fail=ProviderUnavailable("busy"))
    cloud = FakeServer("cloud", clock, Kind.CLOUD)
    registry.add(local)
    registry.add(cloud)
    defaults = RoutingState()  # rlm: aggregate, fallback local-only by default
    assert defaults.roles[Role.RLM].fallback is FallbackMode.LOCAL_ONLY
    router = Router(defaults, registry, is_cleared=ClearedFlags())
    assert ids(router.candidates(Role.RLM)) == ["local"]
    with pytest.raises(NoRoute):
        await router.chat(Role.RLM, [])
    assert cloud.served == []

    cloud_policy = state(Policy.CLOUD, Role.RLM, fallback=FallbackMode.LOCAL_ONLY)
    router = Router(cloud_policy, registry, is_cleared=ClearedFlags())
    with pytest.raises(NoRoute) as err:
        await router.chat(Role.RLM, [])
    assert "local-only" in str(err.value) and "--fallback any" in str(err.value)

    opted_in = state(Policy.AGGREGATE, Role.RLM, fallback=FallbackMode.ANY)
    router = Router(lambda: opted_in, registry, is_cleared=ClearedFlags())
    assert await router.chat(Role.RLM, []) == "cloud"  # the operator switched it


async def test_throttles_fail_over_without_ejecting_but_failures_eject(clock, registry):
    a = FakeServer("cloud-a", clock, Kind.CLOUD, fail=Throttled(3.0))
    b = FakeServer("cloud-b", clock, Kind.CLOUD)
    registry.add(a)
    registry.add(b)
    router = Router(
        state(Policy.CLOUD, Role.RERANKER), registry, is_cleared=ClearedFlags(), eject_after=2, eject_for=30
    )
    for _ in range(3):
        await router.rerank("q", ["x"])
    assert registry.available("cloud-a")  # a rate limit is not a fault
    a.fail = ProviderUnavailable("502")
    for _ in range(2):
        await router.rerank("q", ["x"])
    h = registry.health("cloud-a")
    assert h.state is HealthState.EJECTED and not registry.available("cloud-a")
    assert ids(router.candidates(Role.RERANKER)) == ["cloud-b"]
    clock.advance(31)
    assert registry.available("cloud-a")


# -- query encoding --------------------------------------------------------------------------


# -- the router's pool: the real path from policy to written rows ----------------------------


async def test_router_pool_under_aggregate_uses_cleared_providers_only(clock, registry):
    role = Role.CODE_EMBEDDING
    local = FakeEmbedder("local", clock, rate=4)
    cloud = FakeEmbedder("openrouter:m@up", clock, rate=2, kind=Kind.CLOUD)
    stranger = FakeEmbedder("openrouter:m@other", clock, rate=50, kind=Kind.CLOUD)
    for p in (local, cloud, stranger):
        registry.add(p)
    cleared = ClearedFlags([(role, "local"), (role, cloud.id)])
    router = Router(state(Policy.AGGREGATE, role), registry, is_cleared=cleared, clock=clock)
    sink = Collector(clock)
    await router.pool(role).run(texts_for(300), sink)
    sink.assert_exactly_once(300)
    assert sink.count("local") > 0 and sink.count(cloud.id) > 0  # both in one table
    assert stranger.calls == []


async def test_router_pool_withdrawn_clearance_stops_pulling_mid_job(clock, registry):
    role = Role.CODE_EMBEDDING
    local = FakeEmbedder("local", clock, rate=2)
    cloud = FakeEmbedder("cloud", clock, rate=2, kind=Kind.CLOUD)
    registry.add(local)
    registry.add(cloud)
    cleared = ClearedFlags([(role, "local"), (role, "cloud")])
    router = Router(state(Policy.AGGREGATE, role), registry, is_cleared=cleared, clock=clock)

    async def revoke():
        await clock.sleep(10)
        cleared.revoke(role, "cloud")

    t = asyncio.ensure_future(revoke())
    sink = Collector(clock)
    await router.pool(role).run(texts_for(200), sink)
    await t
    sink.assert_exactly_once(200)
    assert cloud.calls and max(c.start for c in cloud.calls) < 10


async def test_router_pool_under_backup_engages_cloud_when_the_sidecar_drops(clock, registry):
    role = Role.EMBEDDING
    sidecar = FakeEmbedder("sidecar", clock, rate=4)
    cloud = FakeEmbedder("cloud", clock, rate=4, kind=Kind.CLOUD)
    registry.add(sidecar)
    registry.add(cloud)
    router = Router(
        state(Policy.BACKUP, role),
        registry,
        clock=clock,
        is_cleared=ClearedFlags([(role, "sidecar"), (role, "cloud")]),
    )

    async def drop_and_return():
        await clock.sleep(10.1)
        registry.remove("sidecar")
        await clock.sleep(10)
        registry.add(sidecar)

    t = asyncio.ensure_future(drop_and_return())
    sink = Collector(clock)
    await router.pool(role).run(texts_for(200), sink)
    await t
    sink.assert_exactly_once(200)
    cloud_starts = [c.start for c in cloud.calls]
    assert cloud_starts and min(cloud_starts) >= 10.1 and max(cloud_starts) <= 20.1


def test_registry_listeners_hear_every_change(clock, registry):
    heard = []
    unsubscribe = registry.subscribe(lambda c: heard.append((c.kind, c.provider.id)))
    p = FakeServer("x", clock)
    registry.add(p)
    registry.eject("x", until=5, reason="flaky")
    registry.touch("x")
    registry.remove("x")
    unsubscribe()
    registry.add(p)
    assert heard == [
        (ChangeKind.ADDED, "x"),
        (ChangeKind.HEALTH, "x"),
        (ChangeKind.HEALTH, "x"),
        (ChangeKind.REMOVED, "x"),
    ]
