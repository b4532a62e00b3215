"""The pull pool over fake providers at the Provider cut-off, in FakeClock virtual time."""

import asyncio
import math

import pytest

from fathom.errors import NoProviderAvailable
from fathom.inference.pool import Pool, PoolStalled, Progress
from fathom.inference.provider import Kind
from fathom.inference.registry import ProviderRegistry
from fathom.roles import Role
from tests.fake_clock import FakeClock
from tests.inference.pool_fixtures import Collector, FakeEmbedder, nth, texts_for, window


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# -- acceptance 1: throughput, exactly once, no loss ----------------------------------------


async def test_aggregate_over_rates_4_2_1_finishes_near_ideal_exactly_once(clock):
    n = 700
    ps = [
        FakeEmbedder("local-a", clock, rate=4),
        FakeEmbedder("sidecar-b", clock, rate=2),
        FakeEmbedder("cloud-c", clock, rate=1, kind=Kind.CLOUD),
    ]
    sink = Collector(clock)
    seen: list[Progress] = []
    report = await Pool(ps, clock=clock, on_progress=seen.append).run(texts_for(n), sink)

    ideal = n / (4 + 2 + 1)
    assert report.elapsed <= 1.1 * ideal, (report.elapsed, ideal)
    sink.assert_exactly_once(n)
    # Each provider carried about its share: pull-based, nobody was handed more than it can do.
    for p, rate in zip(ps, (4, 2, 1)):
        assert sink.count(p.id) == report.per_provider[p.id]
        assert abs(sink.count(p.id) / n - rate / 7) < 0.05
    # Steady providers and no straggler: nothing is sent twice, so nothing is thrown away.
    assert (report.duplicates, report.discarded) == (0, 0)
    assert seen[-1].done == n and seen[-1].total == n and seen[-1].rate > 0
    assert [s.done for s in seen] == sorted(s.done for s in seen)


async def test_batch_size_adapts_to_the_target_latency(clock):
    fast, slow = FakeEmbedder("fast", clock, rate=64), FakeEmbedder("slow", clock, rate=2)
    pool = Pool([fast, slow], clock=clock, target_latency=1.0, initial_batch=4, max_batch=32)
    await pool.run(texts_for(800), Collector(clock))
    fast_sizes = [len(c.texts) for c in fast.calls]
    slow_sizes = [len(c.texts) for c in slow.calls]
    assert fast_sizes[0] == 4 and max(fast_sizes) == 32  # grew, bounded by max_batch
    assert fast_sizes[:4] == [4, 8, 16, 32]  # at most doubling per batch
    assert max(slow_sizes[2:]) <= 2  # 2 items/s at a 1 s target


async def test_the_next_job_starts_each_provider_at_its_measured_batch_size(clock):
    fast, slow = FakeEmbedder("fast", clock, rate=64), FakeEmbedder("slow", clock, rate=2)
    history = {}
    await Pool([fast, slow], clock=clock, initial_batch=4, max_batch=32, history=history).run(
        texts_for(800), Collector(clock)
    )
    assert history["fast"].batch_size == 32 and history["slow"].batch_size <= 2
    fast.calls.clear()
    slow.calls.clear()
    # A new pool (the next job) over the same history: no ramp from 4 again.
    sink = Collector(clock)
    await Pool([fast, slow], clock=clock, initial_batch=4, max_batch=32, history=history).run(
        texts_for(400), sink
    )
    sink.assert_exactly_once(400)
    assert len(fast.calls[0].texts) == 32 and len(slow.calls[0].texts) <= 2
    # Within a pool's own bounds, whatever another pool learned.
    fast.calls.clear()
    await Pool([fast], clock=clock, initial_batch=4, max_batch=16, history=history).run(
        texts_for(64), Collector(clock)
    )
    assert len(fast.calls[0].texts) == 16


async def test_a_provider_dying_mid_batch_loses_no_chunk(clock):
    n = 200
    steady = FakeEmbedder("steady", clock, rate=4)
    # Every call that starts in [5, 15) fails at the end of its service time, items in hand.
    flaky = FakeEmbedder("flaky", clock, rate=4, script=window(5, 15, "fail"))
    sink = Collector(clock)
    report = await Pool([steady, flaky], clock=clock).run(texts_for(n), sink)
    sink.assert_exactly_once(n)
    assert report.failures["flaky"] >= 1
    failed = [c for c in flaky.calls if c.outcome == "failed"]
    assert failed and all(i in sink.writes for c in failed for i in map(_idx, c.texts))


async def test_a_failed_batch_returns_to_the_front_of_the_queue(clock):
    a = FakeEmbedder("a", clock, rate=1, script=nth({1}, "fail-now"))
    pool = Pool([a], clock=clock, initial_batch=2, max_failures=5)
    sink = Collector(clock)
    await pool.run(texts_for(6), sink)
    assert [c.texts for c in a.calls][:2] == [["chunk 0", "chunk 1"], ["chunk 0"]]
    assert [i for _, _, b in sink.batches for i in b] == list(range(6))  # order kept


async def test_a_malformed_batch_is_never_written(clock):
    class Short(FakeEmbedder):
        async def embed(self, texts):
            out = await super().embed(texts)
            return out[:-1] if len(self.calls) == 1 else out

    bad, good = Short("bad", clock, rate=4), FakeEmbedder("good", clock, rate=1)
    sink = Collector(clock)
    report = await Pool([bad, good], clock=clock).run(texts_for(40), sink)
    sink.assert_exactly_once(40)
    assert report.ejections["bad"] == 1  # wrong count: not retryable, ejected at once


async def test_a_failing_sink_fails_the_job_with_its_own_error(clock):
    class Boom(RuntimeError):
        pass

    async def sink(indices, vectors, provider):
        raise Boom("disk full")

    with pytest.raises(Boom):
        await Pool([FakeEmbedder("a", clock, rate=4)], clock=clock).run(texts_for(10), sink)


async def test_empty_job_and_no_provider(clock):
    report = await Pool([FakeEmbedder("a", clock)], clock=clock).run([], Collector(clock))
    assert report.total == 0
    with pytest.raises(NoProviderAvailable):
        await Pool([], clock=clock).run(texts_for(3), Collector(clock))


# -- acceptance 2: a throttled cloud never idles the locals ---------------------------------


async def test_cloud_with_zero_permits_holds_no_work_and_locals_run_at_full_rate(clock):
    n = 600
    a, b = FakeEmbedder("local-a", clock, rate=4), FakeEmbedder("local-b", clock, rate=2)
    cloud = FakeEmbedder("cloud", clock, rate=100, kind=Kind.CLOUD)
    asked: list[str] = []

    async def admission(provider):  # the budget never grants a permit during this job
        asked.append(provider.id)
        await asyncio.get_running_loop().create_future()

    sink = Collector(clock)
    report = await Pool([a, b, cloud], clock=clock, admission=admission).run(texts_for(n), sink)
    sink.assert_exactly_once(n)
    assert cloud.calls == []  # it waited for a permit holding nothing
    assert asked == ["cloud"]  # locals never ask the budget
    assert report.elapsed <= 1.1 * n / (4 + 2)


async def test_permit_is_taken_before_pulling_and_settled_after(clock):
    events: list[tuple] = []

    class Permit:
        def __init__(self, n):
            self.n = n

        def release(self):
            events.append(("release", self.n))

        def throttled(self, retry_after, kind):
            events.append(("throttled", self.n, retry_after, kind))

    # First cloud call is answered 429 (retry after 5 s); the rest succeed.
    cloud = FakeEmbedder(
        "cloud", clock, rate=4, kind=Kind.CLOUD, script=nth({1}, "throttle"), retry_after=5.0
    )
    local = FakeEmbedder("local", clock, rate=1)
    queued_at_grant: list[int] = []
    pool: Pool

    async def admission(provider):
        await clock.sleep(2.0)  # a slow grant: the locals must go on meanwhile
        events.append(("grant", len(events)))
        queued_at_grant.append(pool.progress.queued)
        return Permit(len(events))

    pool = Pool([local, cloud], clock=clock, admission=admission)
    sink = Collector(clock)
    report = await pool.run(texts_for(100), sink)
    sink.assert_exactly_once(100)
    # The first cloud call started only after its permit was granted, at t=2.
    assert cloud.calls[0].start == 2.0 and local.calls[0].start == 0.0
    throttled = [e for e in events if e[0] == "throttled"]
    assert throttled and throttled[0][2:] == (5.0, "429")
    # Not ejected; paused 5 s with nothing in hand, then served the rest of the job.
    assert report.ejections.get("cloud", 0) == 0 and report.throttles["cloud"] == 1
    assert cloud.calls[1].start >= cloud.calls[0].end + 5.0
    assert sink.count("cloud") > 0
    grants = sum(1 for e in events if e[0] == "grant")
    releases = sum(1 for e in events if e[0] == "release")
    assert grants == releases  # every permit went back


async def test_a_budget_refusal_pauses_the_cloud_not_the_job(clock):
    cloud = FakeEmbedder("cloud", clock, rate=4, kind=Kind.CLOUD)
    local = FakeEmbedder("local", clock, rate=1)
    refusals = []

    async def admission(provider):
        if not refusals:
            refusals.append(clock.now())
            raise RuntimeError("budget closed")
        return None

    sink = Collector(clock)
    await Pool([local, cloud], clock=clock, admission=admission, throttle_wait=3.0).run(texts_for(60), sink)
    sink.assert_exactly_once(60)
    assert refusals == [0.0] and cloud.calls[0].start == 3.0


async def test_backup_cloud_idle_while_locals_healthy(clock):
    local = FakeEmbedder("local", clock, rate=4)
    cloud = FakeEmbedder("cloud", clock, rate=100, kind=Kind.CLOUD)
    sink = Collector(clock)
    await Pool([local, cloud], clock=clock, cloud_reserve_only=True).run(texts_for(300), sink)
    sink.assert_exactly_once(300)
    assert cloud.calls == []


async def test_backup_cloud_takes_over_when_locals_fail_and_disengages_when_one_returns(clock):
    n = 400
    # Both locals fail every call that starts in [10, 30); re-probes find them back after 30.
    locals_ = [
        FakeEmbedder("local-a", clock, rate=4, script=window(10, 30, "fail")),
        FakeEmbedder("local-b", clock, rate=2, script=window(10, 30, "fail-now")),
    ]
    cloud = FakeEmbedder("cloud", clock, rate=3, kind=Kind.CLOUD)
    sink = Collector(clock)
    report = await Pool([*locals_, cloud], clock=clock, cloud_reserve_only=True, eject_base=4.0).run(
        texts_for(n), sink
    )
    sink.assert_exactly_once(n)
    assert report.ejections["local-a"] >= 1 and report.ejections["local-b"] >= 1
    assert cloud.calls, "the cloud never stepped in"
    # The cloud started nothing before both locals were ejected...
    # (each local is ejected at the end of its third consecutive failure)
    both_ejected = max(sorted(c.end for c in p.calls if c.outcome == "failed")[2] for p in locals_)
    assert min(c.start for c in cloud.calls) >= both_ejected >= 10
    # ...and nothing after the first local passed its re-probe.
    back = min(c.end for p in locals_ for c in p.calls if c.outcome == "ok" and c.start >= 30)
    assert max(c.start for c in cloud.calls) <= back
    assert any(c.start > back for p in locals_ for c in p.calls)  # locals finished the job


# -- acceptance 3 (pool part): ejection, re-probe, stragglers, joins and leaves -------------


async def test_ejection_then_reprobe_with_one_small_batch(clock):
    good = FakeEmbedder("good", clock, rate=2)
    bad = FakeEmbedder("bad", clock, rate=2, script=window(0, 12, "fail-now"))
    sink = Collector(clock)
    report = await Pool([good, bad], clock=clock, max_failures=3, eject_base=5.0, min_batch=1).run(
        texts_for(100), sink
    )
    sink.assert_exactly_once(100)
    starts = [c.start for c in bad.calls]
    # Three quick failures, ejected 5 s, a one-item probe fails (still down), ejected 10 s,
    # a one-item probe passes at t=15, then it pulls normal batches again.
    assert starts[:3] == [0.0, 0.0, 0.0]
    assert starts[3:5] == [5.0, 15.0]
    assert [len(bad.calls[i].texts) for i in (3, 4)] == [1, 1]
    assert bad.calls[4].outcome == "ok" and len(bad.calls) > 5
    assert report.ejections["bad"] == 2
    assert sink.count("bad") > 1


async def test_one_bad_burst_on_many_lanes_is_one_ejection_episode(clock):
    """Four lanes of one provider fail together: one episode, one 5 s back-off (not 5, 10, 20,
    40 s from the four failing batches); the next episode, a failed probe, doubles it."""
    good = FakeEmbedder("good", clock, rate=2)
    bad = FakeEmbedder("bad", clock, rate=2, latency=1.0, script=window(0, 9, "fail"))
    sink = Collector(clock)
    report = await Pool([good, bad], clock=clock, max_failures=1, eject_base=5.0, min_batch=1, lanes=4).run(
        texts_for(200), sink
    )
    sink.assert_exactly_once(200)
    failed = [c for c in bad.calls if c.outcome == "failed"]
    assert [c.start for c in failed[:4]] == [0.0] * 4  # one burst on four lanes
    probes = [c.start for c in bad.calls if c.start > 0]
    # The burst ends at 3 s: ejected once, for 5 s. The one-item probe at 8 s fails at 9.5 s
    # (a second episode: 10 s); the probe at 19.5 s passes.
    assert failed[0].end == 3.0 and probes[:2] == [8.0, 19.5]
    assert bad.calls[5].outcome == "ok"
    assert report.ejections["bad"] == 2


async def test_a_hung_provider_does_not_block_completion(clock):
    fast = FakeEmbedder("fast", clock, rate=8)
    hung = FakeEmbedder("hung", clock, rate=8, script=nth({4}, "hang"))
    sink = Collector(clock)
    report = await Pool([fast, hung], clock=clock, straggler_factor=3.0).run(texts_for(200), sink)
    sink.assert_exactly_once(200)
    assert report.duplicates == 1
    assert hung.calls[3].outcome == "cancelled"  # the losing copy was stopped, not awaited
    assert report.elapsed < 200 / 8 + 5


async def test_a_straggler_result_that_arrives_anyway_is_discarded_not_written(clock):
    fast = FakeEmbedder("fast", clock, rate=8)
    late = FakeEmbedder("late", clock, rate=8, script=nth({3}, "late"), late_s=60)
    sink = Collector(clock)
    report = await Pool([fast, late], clock=clock).run(texts_for(120), sink)
    sink.assert_exactly_once(120)
    assert report.duplicates == 1
    assert report.discarded == len(late.calls[2].texts)
    assert late.calls[2].outcome == "ok"  # it did return vectors; they were thrown away


async def test_providers_joining_and_leaving_mid_job(clock):
    registry = ProviderRegistry(clock=clock)
    first = FakeEmbedder("first", clock, rate=2)
    joiner = FakeEmbedder("joiner", clock, rate=4)
    other_role = FakeEmbedder("reranker-only", clock, rate=100, roles=(Role.RERANKER,))
    registry.add(first)
    registry.add(other_role)
    sink = Collector(clock)
    pool = Pool(registry, role=Role.CODE_EMBEDDING, clock=clock, initial_batch=4)

    async def churn():
        await clock.sleep(5.5)
        registry.add(joiner)
        await clock.sleep(5.0)  # t=10.5: `first` is mid-batch (4 items take 2 s)
        assert first.in_flight == 1
        registry.remove("first")

    churner = asyncio.ensure_future(churn())
    report = await pool.run(texts_for(200), sink)
    await churner
    sink.assert_exactly_once(200)
    assert first.calls[-1].outcome == "cancelled"
    assert min(c.start for c in joiner.calls) == 5.5
    assert all(c.start < 10.5 for c in first.calls)
    assert other_role.calls == []
    assert report.per_provider["joiner"] > report.per_provider["first"]


async def test_a_sidecar_reconnecting_under_the_same_id_replaces_the_old_one(clock):
    registry = ProviderRegistry(clock=clock)
    old = FakeEmbedder("sidecar", clock, rate=2)
    new = FakeEmbedder("sidecar", clock, rate=2)
    registry.add(old)
    sink = Collector(clock)

    async def reconnect():
        await clock.sleep(3.3)
        registry.add(new)

    t = asyncio.ensure_future(reconnect())
    await Pool(registry, role=Role.EMBEDDING, clock=clock).run(texts_for(60), sink)
    await t
    sink.assert_exactly_once(60)
    assert all(c.start < 3.3 for c in old.calls) and new.calls


async def test_no_provider_for_too_long_stalls_with_an_explanation(clock):
    registry = ProviderRegistry(clock=clock)
    down = FakeEmbedder("down", clock, rate=1, script=lambda n, now: "fail-now")
    registry.add(down)
    pool = Pool(registry, role=Role.EMBEDDING, clock=clock, stall_timeout=100, eject_max=20)
    with pytest.raises(PoolStalled) as err:
        await pool.run(texts_for(5), Collector(clock))
    assert err.value.done == 0 and "down" in str(err.value) and "ejected" in str(err.value)
    assert isinstance(err.value, NoProviderAvailable)


async def test_lanes_let_one_provider_hold_several_batches(clock):
    cloud = FakeEmbedder("cloud", clock, rate=2, latency=1.0, kind=Kind.CLOUD)
    sink = Collector(clock)
    await Pool([cloud], clock=clock, lanes=lambda p: 4).run(texts_for(100), sink)
    sink.assert_exactly_once(100)
    assert cloud.peak_in_flight == 4


def _idx(text: str) -> int:
    return int(text.split()[-1])


def test_progress_eta():
    p = Progress(done=10, total=30, elapsed=5.0, rate=2.0, per_provider={}, in_flight=0, queued=20)
    assert p.eta == 10.0
    assert Progress(0, 3, 0.0, 0.0, {}, 0, 3).eta is None
    assert math.isfinite(p.rate)
