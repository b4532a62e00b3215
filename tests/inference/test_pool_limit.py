"""The pool at its limit (issue 20): batch history kept in the routing state, cloud batches
sized from the key's trusted rate limit, no straggler copy of a batch whose provider is simply
slow, and an end game that lets every lane finish together.

Routing logic in FakeClock virtual time at the Provider cut-off; the rate limit and the
stragglers also through the emulator's real HTTP app (virtual time), the rate limit over a
socket too (`emulator` fixture). The restart of a real server on its data dir is
`test_pool_history_restart.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from datetime import UTC, datetime

import pytest

from fathom.config import BatchRecord, RoutingStateDamaged, RoutingStore
from fathom.fleet.hub import Hub, PushOutcome
from fathom.inference.budget import CloudBudget, KeyRate
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider
from fathom.inference.pool import LatencyLine, Pool, Sizing
from fathom.inference.provider import Kind
from fathom.policy import Policy
from fathom.roles import Role
from tests.devtools.virtual_emulator import BASE_URL as VIRTUAL_BASE_URL
from tests.devtools.virtual_emulator import virtual_emulator
from tests.fake_clock import FakeClock
from tests.inference.pool_fixtures import Collector, FakeEmbedder, nth, texts_for

MODEL = "sentence-transformers/all-minilm-l6-v2"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# -- 1. history in the routing state -------------------------------------------------------


def test_batch_history_is_kept_beside_the_routes_and_read_back(tmp_path):
    store = RoutingStore(tmp_path)
    store.update({Role.CODE_EMBEDDING: {"policy": Policy.LOCAL}})
    store.record_batches(
        "code", {"local:minilm": BatchRecord(batch_size=96, spi=0.01, base=0.02, per_item=0.009)}
    )
    store.record_batches("code", {"sidecar:gpu": BatchRecord(batch_size=256, spi=0.001)})
    store.update({Role.CODE_EMBEDDING: {"policy": Policy.AGGREGATE, "upstream": "alpha"}})

    again = RoutingStore(tmp_path).load()  # a restarted server reads the same file
    assert again.roles[Role.CODE_EMBEDDING].policy is Policy.AGGREGATE  # the routes, untouched
    code = again.batches["code"]
    assert code["local:minilm"] == BatchRecord(batch_size=96, spi=0.01, base=0.02, per_item=0.009)
    assert code["sidecar:gpu"].batch_size == 256  # merged, not replaced


def test_every_writer_of_the_routing_state_takes_its_turn(tmp_path):
    """A key push's record, a policy change and a job's batch history (written from a worker
    thread) each read, change and write the whole state: one outside the lock could write
    back a state read before another's change and lose it."""

    class InTurnOnly(RoutingStore):
        def save(self, state):
            assert self._changing._is_owned(), "the routing state written outside its turn"
            super().save(state)

    store = InTurnOnly(tmp_path)
    hub = Hub(tmp_path, routing=store)
    store.record_batches("code", {"local:minilm": BatchRecord(batch_size=96)})
    hub._record_push(PushOutcome(at=datetime.now(UTC), key_sent=True, acked=["gpu1"]))
    store.update({Role.CODE_EMBEDDING: {"policy": Policy.LOCAL}})

    state = RoutingStore(tmp_path).load()
    assert state.last_push.acked == ["gpu1"]
    assert state.batches["code"]["local:minilm"].batch_size == 96
    assert state.roles[Role.CODE_EMBEDDING].policy is Policy.LOCAL


def test_a_damaged_batch_entry_is_dropped_and_the_routes_still_served(tmp_path, caplog):
    store = RoutingStore(tmp_path)
    store.update({Role.CODE_EMBEDDING: {"policy": Policy.LOCAL}})
    raw = json.loads(store.path.read_text())
    raw["batches"] = {
        "code": {
            "good": {"batch_size": 64, "spi": 0.005},
            "negative": {"batch_size": -3},
            "smuggled": {"batch_size": 8, "api_key": "sk-or-v1-do-not-echo"},
            "not-a-number": {"batch_size": 8, "spi": "NaN"},
            "not-a-record": [1, 2, 3],
        },
        "docs": "garbage",
    }
    store.path.write_text(json.dumps(raw))

    with caplog.at_level(logging.WARNING, logger="fathom.config"):
        state = store.load()
        store.load()  # said once per process, not at every routing decision
    assert state.roles[Role.CODE_EMBEDDING].policy is Policy.LOCAL
    assert state.batches == {"code": {"good": BatchRecord(batch_size=64, spi=0.005)}}
    said = [r.getMessage() for r in caplog.records]
    for where in (
        "negative for the code table",
        "smuggled for the code table",
        "not-a-number for the code table",
        "not-a-record for the code table",
        "the docs table",
    ):
        assert sum(where in m for m in said) == 1, (where, said)
    assert not any("sk-or-v1-do-not-echo" in m for m in said)

    # The next write keeps what was sound and leaves the damage behind.
    store.record_batches("code", {"other": BatchRecord(batch_size=16)})
    assert set(json.loads(store.path.read_text())["batches"]["code"]) == {"good", "other"}


def test_history_is_not_written_over_a_state_that_cannot_be_read(tmp_path):
    store = RoutingStore(tmp_path)
    store.path.write_text("{ not json")
    with pytest.raises(RoutingStateDamaged):
        store.record_batches("code", {"a": BatchRecord(batch_size=8)})
    assert store.path.read_text() == "{ not json"


# -- 2. cloud batches from the key's rate limit --------------------------------------------


async def test_a_low_rpm_key_sends_its_largest_batch_from_the_first_request(clock):
    """Requests are the scarce resource under a trusted rate: the first request carries
    max_batch, not initial_batch, whether the budget's lanes follow the rate (Little's law)
    or are held by an override short of it; a high rate with few lanes keeps learned sizes."""
    for rate, want in (
        (KeyRate(per_s=0.5, lanes_follow=True), 64),
        (KeyRate(per_s=0.5, lanes_follow=False), 64),  # 2 lanes: 4 s a request
        (KeyRate(per_s=1000.0, lanes_follow=False), 8),  # the rate binds nothing
        (None, 8),
    ):
        cloud = FakeEmbedder("cloud", clock, rate=100, latency=0.1, kind=Kind.CLOUD)
        history = {"cloud": Sizing(8, 0.011, LatencyLine(0.1, 0.01))}
        await Pool(
            [cloud], clock=clock, lanes=2, max_batch=64, history=history, rate_limit=lambda p: rate
        ).run(texts_for(200), Collector(clock))
        assert len(cloud.calls[0].texts) == want, rate


async def test_a_discovered_low_rpm_sizes_every_request_through_the_emulator(clock):
    """Through the emulator's HTTP app in virtual time: the budget reads the key's rate limit
    from GET /key as key discovery does, and every request of the job carries max_batch (the
    last one what is left); the same job on a key whose limit is not trusted ramps from 4."""
    sizes = {}
    for reported in ({"requests": 30, "interval": "1m"}, {"requests": 1000, "interval": "1h"}):
        async with virtual_emulator(clock) as emu:
            await emu.control("PUT", "/latency", {"base_ms": 200, "per_item_ms": 2})
            await emu.control("PUT", "/limits", {"rpm": 30, "window": 60})
            await emu.control("PUT", "/key", {"rate_limit": reported})
            client = OpenRouterClient("sk-or-v1-pool-rate-test", base_url=VIRTUAL_BASE_URL, http=emu.http)
            budget = CloudBudget(clock=clock.now, sleep=clock.sleep, rng=random.Random(3))
            budget.discover(await client.key_info())
            provider = _Recording(
                client,
                model=MODEL,
                roles=[Role.CODE_EMBEDDING],
                upstream="alpha",
                provider_id="openrouter:alpha",
            )
            try:
                report = await Pool(
                    [provider],
                    clock=clock,
                    admission=budget.admission,
                    lanes=lambda p: budget.effective_limit,
                    max_batch=64,
                    rate_limit=lambda p: budget.key_rate(),
                ).run(texts_for(300), _count)
            finally:
                await budget.aclose()
                await client.aclose()
            assert report.total == 300
            sizes[reported["requests"]] = provider.sizes
            counters = await emu.counters()
            assert counters["rate_limited"] == 0
    assert sizes[30] == [64, 64, 64, 64, 44]  # 5 of the key's 30 requests a minute
    assert sizes[1000][0] == 4 and len(sizes[1000]) > 5


async def test_a_discovered_low_rpm_sizes_requests_over_a_socket(emulator):
    """The same over a real HTTP server on 127.0.0.1 (real clock)."""
    emulator.control.latency(base_ms=20, per_item_ms=0.1)
    emulator.control.set_limits(rpm=30, window=60)
    emulator.control.set_key(rate_limit={"requests": 30, "interval": "1m"})
    client = OpenRouterClient("sk-or-v1-pool-rate-test", base_url=emulator.base_url)
    budget = CloudBudget()
    provider = OpenRouterProvider(
        client, model=MODEL, roles=[Role.CODE_EMBEDDING], upstream="alpha", provider_id="openrouter:alpha"
    )
    try:
        budget.discover(await client.key_info())
        report = await Pool(
            [provider],
            admission=budget.admission,
            max_batch=64,
            lanes=lambda p: budget.effective_limit,
            rate_limit=lambda p: budget.key_rate(),
        ).run(texts_for(200), _count)
    finally:
        await budget.aclose()
        await client.aclose()
    counters = emulator.control.counters()
    assert report.batches == {"openrouter:alpha": 4}  # 64 + 64 + 64 + 8, not 4 + 8 + 16 + ...
    assert counters["requests"]["embeddings"] == 4 and counters["rate_limited"] == 0


class _Recording(OpenRouterProvider):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sizes: list[int] = []

    async def embed(self, texts):
        self.sizes.append(len(texts))
        return await super().embed(texts)


async def _count(indices, vectors, provider) -> None:
    return None


# -- 3. stragglers: simply slow is not overdue ---------------------------------------------


async def _joining_at(t: float, pool: Pool, joiner: FakeEmbedder, clock: FakeClock, sink: Collector):
    async def join() -> None:
        await clock.sleep(t)
        pool.add(joiner)

    joining = asyncio.ensure_future(join())
    report = await pool.run(texts_for(5), sink)
    await joining
    return report


def _slow_history() -> dict[str, Sizing]:
    # Measured in an earlier job: 3 s a request plus 0.1 s an item, usually 32 at a time.
    return {"slow": Sizing(32, (3.0 + 3.2) / 32, LatencyLine(3.0, 0.1))}


async def test_a_small_batch_of_a_slow_provider_is_not_duplicated(clock):
    """The slow provider holds the job's last 5 items: 3.5 s by its history. A fast provider
    joining idle must not copy it (by seconds per item it would be due in 1 s, overdue at 3)."""
    slow = FakeEmbedder("slow", clock, rate=10, latency=3.0)
    fast = FakeEmbedder("fast", clock, rate=100)
    pool = Pool([slow], clock=clock, straggler_factor=3.0, history=_slow_history())
    sink = Collector(clock)
    report = await _joining_at(0.5, pool, fast, clock, sink)
    sink.assert_exactly_once(5)
    assert report.duplicates == 0 and fast.calls == []
    assert report.elapsed == pytest.approx(3.5)


async def test_a_batch_overdue_against_its_own_providers_history_is_still_duplicated(clock):
    slow = FakeEmbedder("slow", clock, rate=10, latency=3.0, script=nth({1}, "late"), late_s=60)
    fast = FakeEmbedder("fast", clock, rate=100)
    pool = Pool([slow], clock=clock, straggler_factor=3.0, history=_slow_history())
    sink = Collector(clock)
    report = await _joining_at(0.5, pool, fast, clock, sink)
    sink.assert_exactly_once(5)
    assert report.duplicates == 1 and sink.count("fast") == 5
    assert report.elapsed == pytest.approx(3 * 3.5 + 5 / 100)  # due at 3 × its expected 3.5 s


async def test_an_end_game_sliver_does_not_shrink_the_size_the_next_job_starts_at(clock):
    """98 items take 1 s (the target); the job's last 3 take 0.05 s, mostly the request's fixed
    cost. That sliver informs the latency line, not the batch size kept for the next job."""
    p = FakeEmbedder("p", clock, rate=100, latency=0.02)
    history = {"p": Sizing(98, 0.0102, LatencyLine(0.02, 0.01))}
    await Pool([p], clock=clock, max_batch=256, history=history).run(texts_for(101), Collector(clock))
    assert [len(c.texts) for c in p.calls] == [98, 3]
    assert history["p"].batch_size == 98
    assert history["p"].line.base == pytest.approx(0.02)


async def test_a_slow_upstreams_batch_is_not_copied_through_the_emulator(clock):
    """The same through two emulators' HTTP apps in virtual time: `slow` (3 s a request plus
    100 ms an item) holds the job's last 5 items, as its history says it takes; `fast`, idle,
    sends nothing. Then `slow` stalls far past that: `fast` copies the batch and wins."""
    async with virtual_emulator(clock) as slow_emu, virtual_emulator(clock) as fast_emu:
        await slow_emu.control("PUT", "/latency", {"base_ms": 3000, "per_item_ms": 100})
        clients = [
            OpenRouterClient("sk-or-v1-pool-straggler", base_url=VIRTUAL_BASE_URL, http=emu.http)
            for emu in (slow_emu, fast_emu)
        ]
        slow, fast = (
            OpenRouterProvider(
                client,
                model=MODEL,
                roles=[Role.CODE_EMBEDDING],
                upstream="alpha",
                provider_id=f"openrouter:{name}",
            )
            for client, name in zip(clients, ("slow", "fast"))
        )
        history = {"openrouter:slow": _slow_history()["slow"]}
        try:
            for stall, copies in ((0.0, 0), (60.0, 1)):
                await slow_emu.control(
                    "PUT", "/latency", {"base_ms": 3000 + stall * 1000, "per_item_ms": 100}
                )
                pool = Pool([slow], clock=clock, straggler_factor=3.0, history=history)

                async def join() -> None:
                    await clock.sleep(0.5)
                    pool.add(fast)

                joining = asyncio.ensure_future(join())
                report = await pool.run(texts_for(5), _count)
                await joining
                served = (await fast_emu.counters())["requests"].get("embeddings", 0)
                assert (report.duplicates, served) == (copies, copies), stall
                assert report.per_provider == {"openrouter:fast" if copies else "openrouter:slow": 5}
                history["openrouter:slow"] = _slow_history()["slow"]  # the stall is not history
        finally:
            for client in clients:
                await client.aclose()


def test_the_latency_line_separates_a_requests_fixed_cost_from_its_items():
    line = LatencyLine()
    for n in (4, 8, 16, 32, 64, 64, 64):
        line.observe(n, 0.3 + 0.012 * n)
    assert line.base == pytest.approx(0.3) and line.per_item == pytest.approx(0.012)
    line.observe(64, 0.3 + 0.024 * 64)  # the provider slows down; one size only since
    assert line.at(64) > 0.3 + 0.012 * 64
    assert LatencyLine(0.3, 0.012).known and not LatencyLine().known


# -- the end game ---------------------------------------------------------------------------


async def test_the_end_game_lets_every_lane_finish_together_without_slivers(clock):
    """Two providers with a fixed cost per request, history known. Splitting the tail by speed
    alone cut it into ever smaller batches that each paid the fixed cost again (1.35 × the
    ideal here); planning it so every lane finishes as early as it can, together, keeps the
    job within 8 % of every lane busy to the end at 64 a batch."""
    fast = FakeEmbedder("fast", clock, rate=100, latency=0.3, kind=Kind.CLOUD)
    slow = FakeEmbedder("slow", clock, rate=50, latency=0.5, kind=Kind.CLOUD)
    history = {
        "fast": Sizing(64, (0.3 + 0.64) / 64, LatencyLine(0.3, 0.01)),
        "slow": Sizing(64, (0.5 + 1.28) / 64, LatencyLine(0.5, 0.02)),
    }
    n = 2000
    sink = Collector(clock)
    report = await Pool([fast, slow], clock=clock, lanes=4, max_batch=64, history=history).run(
        texts_for(n), sink
    )
    sink.assert_exactly_once(n)
    ideal = n / (4 * 64 / 0.94 + 4 * 64 / 1.78)
    assert report.elapsed <= 1.08 * ideal, (report.elapsed, ideal)
    assert report.duplicates == 0
    # The last second: at most one batch per lane, not a cascade of ever smaller ones.
    tail = [len(c.texts) for p in (fast, slow) for c in p.calls if c.start > report.elapsed - 1.0]
    assert len(tail) <= 8, tail


async def test_the_end_game_spreads_a_fixed_cost_provider_over_every_lane(clock):
    """All fixed cost, no measurable cost per item (a 400 ms round trip): any split of the tail
    ends at the same moment, so it is spread evenly over the lanes the budget allows, as
    before the plan existed, rather than piled on the first lanes to pull."""
    cloud = FakeEmbedder("cloud", clock, rate=1e9, latency=0.4, kind=Kind.CLOUD)
    history = {"cloud": Sizing(60, 0.4 / 60, LatencyLine(0.4, 0.0))}
    report = await Pool([cloud], clock=clock, lanes=16, history=history).run(texts_for(160), Collector(clock))
    assert [len(c.texts) for c in cloud.calls] == [10] * 16 and cloud.peak_in_flight == 16
    assert report.elapsed == pytest.approx(0.4)
