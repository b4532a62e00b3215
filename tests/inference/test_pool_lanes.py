"""A cloud provider's lanes in the pull pool follow the key budget's effective limit mid-job
(issue 14): an override raised from 4 to 16 puts 16 requests in flight, a 429's halving puts
half as many. Virtual time; the provider is a fake at the `Provider` cut-off.
"""

from __future__ import annotations

import asyncio
import random

from fathom.inference.budget import BudgetedProvider, CloudBudget
from fathom.inference.pool import Pool
from fathom.roles import Role
from tests.fake_clock import FakeClock
from tests.inference.budget_fixtures import FakeCloud, InFlight
from tests.inference.pool_fixtures import Throttled


async def test_cloud_lanes_follow_the_budgets_effective_limit_mid_job():
    clock = FakeClock()
    budget = CloudBudget(
        override=4, clock=clock.now, sleep=clock.sleep, rng=random.Random(0), clean_window_s=100.0
    )
    tracker = InFlight()
    fake = FakeCloud(clock, service_s=1.0, tracker=tracker)
    cloud = BudgetedProvider(fake, budget)
    pool = Pool(
        [cloud],
        role=Role.EMBEDDING,
        clock=clock,
        admission=budget.admission,
        lanes=lambda p: budget.effective_limit,
        initial_batch=1,
        max_batch=1,
    )
    peaks: list[int] = []

    async def sink(indices, vectors, provider) -> None:
        pass

    async def operator() -> None:
        await clock.sleep(5.5)
        peaks.append(tracker.peak)
        tracker.peak = 0
        budget.set_override(16)  # `fathom budget --override 16`, mid-job
        await clock.sleep(5.0)
        peaks.append(tracker.peak)
        fake.fail.append(Throttled(retry_after=2.0))  # the next answer is a 429: halve
        await clock.sleep(5.0)
        tracker.peak = 0
        await clock.sleep(5.0)
        peaks.append(tracker.peak)

    op = asyncio.create_task(operator())
    report = await pool.run([f"t{i}" for i in range(400)], sink)
    await op
    assert report.per_provider == {cloud.id: 400}
    assert budget.effective_limit == 8 and budget.state().halvings == 1
    assert peaks == [4, 16, 8]
    await budget.aclose()
