"""The pool with the real CloudBudget and BudgetedProvider: the permit is taken before a
batch is pulled, the wrapped provider uses that permit (not a second one), a throttle is
reported once, and a budget with no permit to give never idles the locals."""

import asyncio
import random

from fathom.inference.budget import BudgetedProvider, CloudBudget, current_project
from fathom.inference.pool import Pool
from fathom.inference.provider import Kind
from fathom.inference.registry import ProviderRegistry
from fathom.roles import Role
from tests.fake_clock import FakeClock
from tests.inference.pool_fixtures import Collector, FakeEmbedder, nth, texts_for


def budget_for(clock: FakeClock, permits: int) -> CloudBudget:
    return CloudBudget(override=permits, clock=clock.now, sleep=clock.sleep, rng=random.Random(7))


async def test_budgeted_cloud_uses_the_pools_permit_and_reports_a_throttle_once():
    clock = FakeClock()
    budget = budget_for(clock, 2)
    inner = FakeEmbedder(
        "openrouter:m@up", clock, rate=4, kind=Kind.CLOUD, script=nth({2}, "throttle"), retry_after=5.0
    )
    cloud = BudgetedProvider(inner, budget)
    local = FakeEmbedder("local", clock, rate=2)
    registry = ProviderRegistry(clock=clock)
    registry.add(local)
    projects: list[str] = []

    async def admission(provider):
        projects.append(current_project.get())
        return await budget.admission(provider)

    async def cloud_joins_from_elsewhere():
        current_project.set("some-other-project")  # the hub's task, not the index job's
        await clock.sleep(1.0)
        registry.add(cloud)

    current_project.set("billing")
    joiner = asyncio.ensure_future(cloud_joins_from_elsewhere())
    pool = Pool(
        registry,
        role=Role.CODE_EMBEDDING,
        clock=clock,
        admission=admission,
        lanes=lambda p: 2 if p.info.is_cloud else 1,
    )
    sink = Collector(clock)
    report = await pool.run(texts_for(300), sink)
    await joiner

    sink.assert_exactly_once(300)
    state = budget.state()
    assert state.throttled_total["429"] == 1  # once, though both the wrapper and pool saw it
    assert report.throttles == {inner.id: 1} and not report.ejections
    assert state.in_flight == 0  # every permit went back
    assert state.peak_in_flight <= 2
    assert state.granted_total == len(inner.calls)  # one permit per request, never two
    assert sink.count(inner.id) > 0 and sink.count("local") > 0
    assert set(projects) == {"billing"}  # fairness is charged to the job's project


async def test_a_budget_with_no_permit_to_give_never_idles_the_locals():
    clock = FakeClock()
    budget = budget_for(clock, 1)
    hog = await budget.acquire("another-project")  # holds the only permit all job long
    inner = FakeEmbedder("openrouter:m@up", clock, rate=50, kind=Kind.CLOUD)
    a, b = FakeEmbedder("gpu-a", clock, rate=4), FakeEmbedder("gpu-b", clock, rate=2)
    sink = Collector(clock)
    report = await Pool([a, b, BudgetedProvider(inner, budget)], clock=clock, admission=budget.admission).run(
        texts_for(600), sink
    )
    sink.assert_exactly_once(600)
    assert inner.calls == []
    assert report.elapsed <= 1.1 * 600 / (4 + 2)
    assert budget.state().waiting == {}  # the cloud's waiting lane left the line at the end
    hog.release()
