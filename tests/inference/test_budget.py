"""CloudBudget end to end on fake time: permits, waiting, fairness, throttles, discovery.

Every test drives the real budget with a FakeTime clock and sleep; providers are fakes only at
the Provider cut-off. Nothing here waits on the wall clock.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from fathom.errors import ProviderError
from fathom.inference.budget import (
    BudgetClosed,
    BudgetedProvider,
    CloudBudget,
    KeyReport,
    OverrideOutOfRange,
    RateLimit,
    current_project,
    throttle_of,
)
from fathom.inference.provider import Kind
from tests.inference.budget_fixtures import FakeCloud, FakeTime, FixedRng, InFlight, settle


def make_budget(ft: FakeTime, **kw) -> CloudBudget:
    kw.setdefault("rng", FixedRng(0.5))
    return CloudBudget(clock=ft.clock, sleep=ft.sleep, **kw)


class RateLimited(ProviderError):
    """Shaped like the OpenRouter client's error (it carries throttle_kind and retry_after)."""

    throttle_kind = "429"

    def __init__(self, retry_after=None):
        super().__init__("rate limited")
        self.retry_after = retry_after


class InFlightBudgetExhausted(ProviderError):
    """No throttle_kind attribute: recognised by its class name."""

    def __init__(self, retry_after=None):
        super().__init__("in-flight budget exhausted")
        self.retry_after = retry_after


async def in_this_task(ft: FakeTime, coro, dt: float):
    """Await `coro` in the calling task (gather would wrap it in a child) while time moves."""
    clock = asyncio.create_task(ft.advance(dt))
    try:
        return await coro
    finally:
        await clock


async def drain(tasks):
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# -- the cap above every provider ------------------------------------------------------------


@pytest.mark.parametrize("override", [None, 10])
async def test_three_providers_each_wanting_eight_never_exceed_the_budget(override):
    ft = FakeTime()
    budget = make_budget(ft, override=override)
    tracker = InFlight()
    providers = [BudgetedProvider(FakeCloud(ft, n, service_s=1.0, tracker=tracker), budget) for n in "abc"]

    async def worker(p: BudgetedProvider, cap: asyncio.Semaphore):
        for _ in range(3):
            async with cap:  # the provider's own cap of eight
                await p.embed(["x"])

    caps = [asyncio.Semaphore(8) for _ in providers]
    tasks = [asyncio.create_task(worker(p, c)) for p, c in zip(providers, caps) for _ in range(8)]
    await settle()
    limit = budget.effective_limit
    assert limit == (override or 4)
    assert tracker.now == limit and budget.in_flight == limit
    await ft.advance(200)
    await asyncio.gather(*tasks)
    assert tracker.done == 3 * 8 * 3
    assert tracker.peak == limit
    assert budget.state().peak_in_flight == limit


async def test_four_permits_when_nothing_was_discovered():
    ft = FakeTime()
    budget = make_budget(ft)
    permits = [asyncio.create_task(budget.acquire("p")) for _ in range(10)]
    await settle()
    st = budget.state()
    assert (st.ceiling_source, st.ceiling, st.in_flight) == ("default", 4, 4)
    assert st.waiting == {"p": 6} and not st.window_armed
    granted = [t for t in permits if t.done()]
    for t in granted:
        t.result().release()
    await settle()
    assert sum(t.done() for t in permits) == 8
    await drain(permits)


def test_override_out_of_range_is_refused():
    for bad in (300, 0):
        with pytest.raises(OverrideOutOfRange, match="1 to 256"):
            CloudBudget(override=bad)
    budget = CloudBudget(override=8)
    with pytest.raises(OverrideOutOfRange):
        budget.set_override(300)
    assert budget.ceiling.value == 8  # a refused change changes nothing


# -- discovery -------------------------------------------------------------------------------


async def test_degenerate_one_per_minute_on_a_funded_account_does_not_throttle_to_one_a_minute():
    ft = FakeTime()
    budget = make_budget(ft)
    budget.discover(KeyReport(limit=100.0, limit_remaining=24.0, rate_limit=RateLimit(1, "1m")))
    st = budget.state()
    assert (st.ceiling_source, st.ceiling) == ("credits", 24)
    assert not st.window_armed and st.trusted_rpm is None
    provider = BudgetedProvider(FakeCloud(ft, service_s=0.5), budget)

    async def one():
        await provider.embed(["x"])

    tasks = [asyncio.create_task(one()) for _ in range(100)]
    await ft.advance(10)
    # 24 at a time, half a second each: all hundred are done within seconds, not 100 minutes.
    assert all(t.done() for t in tasks)
    assert budget.state().window_count == 100


async def test_a_rediscovery_does_not_undo_a_halving():
    ft = FakeTime()
    budget = make_budget(ft, clean_window_s=10.0)
    budget.discover(KeyReport(limit_remaining=32.0))
    assert budget.effective_limit == 32
    permit = await budget.acquire("p")
    permit.throttled(retry_after=2.0)
    permit.release()
    assert budget.effective_limit == 16
    budget.discover(KeyReport(limit_remaining=60.0))
    st = budget.state()
    assert (st.ceiling, st.effective_limit) == (60, 16)
    budget.discover(KeyReport(limit_remaining=9.0))
    assert budget.effective_limit == 9  # a lower ceiling clamps at once


async def test_free_tier_key_arms_the_window_with_the_documented_limit():
    ft = FakeTime()
    budget = make_budget(ft)
    budget.discover(
        {"data": {"label": "sk-or-v1-x", "limit": 0, "limit_remaining": 0, "usage": 0, "is_free_tier": True}}
    )
    st = budget.state()
    assert st.trusted_rpm == 20.0 and st.rpm_trust == "free-tier-documented"
    assert st.window_armed and st.window_allowance == 20 and st.ceiling_source == "littles-law"
    assert "sk-or" not in json.dumps(st.to_dict())


# -- Little's law, re-derived as latency drifts ----------------------------------------------


async def test_littles_law_follows_the_measured_round_trip():
    ft = FakeTime()
    budget = make_budget(ft, rpm=600, rtt_alpha=0.5, assumed_rtt_s=1.0)
    assert (budget.ceiling.value, budget.ceiling.source.value) == (10, "littles-law")

    async def requests(n, service_s):
        p = BudgetedProvider(FakeCloud(ft, service_s=service_s), budget)
        for _ in range(n):
            await p.embed(["x"])

    task = asyncio.create_task(requests(8, 0.5))
    await ft.advance(10)
    await task
    # 10 requests/s at half a second each: 5 in flight sustain the rate.
    assert budget.state().rtt_s == pytest.approx(0.5, abs=0.01)
    assert budget.ceiling.value == 5
    task = asyncio.create_task(requests(12, 3.0))
    await ft.advance(60)
    await task
    assert budget.state().rtt_s == pytest.approx(3.0, abs=0.01)
    assert budget.ceiling.value == 30 and budget.effective_limit == 30


async def test_round_trip_excludes_time_waiting_for_a_permit():
    ft = FakeTime()
    budget = make_budget(ft, override=1, rtt_alpha=1.0)
    p = BudgetedProvider(FakeCloud(ft, service_s=2.0), budget)
    tasks = [asyncio.create_task(p.embed(["x"])) for _ in range(5)]
    await ft.advance(20)
    await asyncio.gather(*tasks)
    # The last one waited 8 s in line; its round trip is still the 2 s of service.
    assert budget.state().rtt_s == pytest.approx(2.0)


# -- the RPM window --------------------------------------------------------------------------


async def test_trusted_rpm_window_blocks_the_rpm_plus_first_start_within_sixty_seconds():
    ft = FakeTime()
    budget = make_budget(ft, rpm=10, override=50)
    starts: list[float] = []

    async def one():
        async with budget.permit("p"):
            starts.append(ft.now)
            await ft.sleep(0.1)

    tasks = [asyncio.create_task(one()) for _ in range(11)]
    await ft.advance(30)
    st = budget.state()
    assert len(starts) == 10 and st.window_count == 10 and st.window_allowance == 10
    assert st.in_flight == 0 and st.waiting == {"p": 1}
    # The (RPM+1)th start waits for the first to leave the window, plus the one-second margin
    # (the account counts arrivals, which trail our starts).
    await ft.advance(30.99)
    assert len(starts) == 10
    await ft.advance(0.02)
    assert len(starts) == 11 and starts[-1] == pytest.approx(starts[0] + 61.0)
    await ft.advance(1)
    await asyncio.gather(*tasks)


async def test_window_gate_holds_even_when_latency_estimate_is_too_high():
    ft = FakeTime()
    # The assumed 10 s round trip makes Little's law grant 100 at once; the window still holds.
    budget = make_budget(ft, rpm=600, assumed_rtt_s=10.0, window_s=6.0)
    assert budget.state().window_s == 6.0
    assert budget.ceiling.value == 100
    tasks = [asyncio.create_task(budget.acquire("p")) for _ in range(100)]
    await settle()
    assert budget.in_flight == 60  # 600/min = 60 per 6 s window
    await drain(tasks)


# -- AIMD through the budget -----------------------------------------------------------------


async def test_throttle_halves_and_cooldown_honors_retry_after_with_jitter():
    ft = FakeTime()
    budget = make_budget(ft, override=8, rng=FixedRng(0.5), jitter=0.5, base_backoff_s=1.0)
    error = RateLimited(retry_after=4.0)
    provider = BudgetedProvider(FakeCloud(ft, service_s=1.0, fail=[error]), budget)
    with pytest.raises(RateLimited) as info:
        await asyncio.gather(provider.embed(["x"]), ft.advance(1.0))
    assert info.value is error  # re-raised unchanged, never retried
    assert provider.inner.calls == 1
    st = budget.state()
    assert st.effective_limit == 4 and st.halvings == 1
    assert st.cooldown_remaining_s == pytest.approx(4.0 * 1.25)
    assert st.last_throttle is not None and st.last_throttle.kind == "429"
    assert st.last_throttle.retry_after_s == 4.0 and st.throttled_total["429"] == 1
    # Never an immediate retry: nothing is granted until the jittered cooldown is over.
    waiter = asyncio.create_task(budget.acquire("p"))
    await ft.advance(4.99)
    assert not waiter.done()
    await ft.advance(0.02)
    assert waiter.done()
    waiter.result().release()


async def test_many_throttles_from_one_burst_halve_once():
    ft = FakeTime()
    budget = make_budget(ft, override=16)
    permits = [await budget.acquire("p") for _ in range(16)]
    for p in permits:
        p.throttled(None)
        p.release()
    assert budget.effective_limit == 8 and budget.state().throttled_total["429"] == 16


async def test_402_in_flight_exhausted_is_recognised_by_class_name():
    ft = FakeTime()
    budget = make_budget(ft, override=8)
    provider = BudgetedProvider(
        FakeCloud(ft, service_s=0.5, fail=[InFlightBudgetExhausted(retry_after="3")]), budget
    )
    with pytest.raises(InFlightBudgetExhausted):
        await asyncio.gather(provider.embed(["x"]), ft.advance(1))
    st = budget.state()
    assert st.effective_limit == 4 and st.throttled_total == {"429": 0, "402": 1}
    assert st.last_throttle.retry_after_s == 3.0


async def test_other_provider_errors_do_not_throttle():
    ft = FakeTime()
    budget = make_budget(ft, override=8)
    provider = BudgetedProvider(FakeCloud(ft, service_s=0.5, fail=[ProviderError("boom")]), budget)
    with pytest.raises(ProviderError, match="boom"):
        await asyncio.gather(provider.embed(["x"]), ft.advance(1))
    st = budget.state()
    assert st.effective_limit == 8 and st.in_flight == 0 and st.last_throttle is None


def test_throttle_classification():
    assert throttle_of(RateLimited(2)) == ("429", 2.0)
    assert throttle_of(InFlightBudgetExhausted(None)) == ("402", None)
    assert throttle_of(RateLimited(-3)) == ("429", None)
    assert throttle_of(ProviderError("x")) is None
    assert throttle_of(RuntimeError("RateLimited")) is None
    other = ProviderError("x")
    other.throttle_kind = "500"
    assert throttle_of(other) is None


async def test_clean_windows_raise_one_permit_at_a_time_to_the_ceiling():
    ft = FakeTime()
    budget = make_budget(ft, override=8, clean_window_s=10.0, base_backoff_s=1.0, rng=FixedRng(0.0))
    provider = BudgetedProvider(FakeCloud(ft, service_s=1.0), budget)
    permit = await budget.acquire("p")
    permit.throttled(None)
    permit.release()
    assert budget.effective_limit == 4

    async def busy():
        while True:
            await provider.embed(["x"])

    workers = [asyncio.create_task(busy()) for _ in range(20)]
    seen = []
    for _ in range(50):
        await ft.advance(1.0)
        seen.append(budget.effective_limit)
        assert budget.in_flight <= budget.effective_limit
    await drain(workers)
    # Up by exactly one per 10 s window after the 1 s cooldown, then held at the ceiling.
    assert seen[:10] == [4] * 10
    assert seen[10] == 5 and seen[20] == 6 and seen[30] == 7 and seen[40] == 8 and seen[49] == 8
    assert all(b - a in (0, 1) for a, b in zip(seen, seen[1:]))


# -- fairness and the waiting line -----------------------------------------------------------


async def test_round_robin_gives_two_projects_a_fair_share():
    ft = FakeTime()
    budget = make_budget(ft, override=4)
    done = {"big": 0, "small": 0}

    async def worker(project):
        token = current_project.set(project)
        provider = BudgetedProvider(FakeCloud(ft, service_s=1.0), budget)
        try:
            while True:
                await provider.embed(["x"])
                done[project] += 1
        finally:
            current_project.reset(token)

    # One project queues five times as many workers; it still gets only its turn.
    workers = [asyncio.create_task(worker("big")) for _ in range(20)]
    workers += [asyncio.create_task(worker("small")) for _ in range(4)]
    await settle()
    assert set(budget.state().waiting) <= {"big", "small"}
    await ft.advance(100)
    await drain(workers)
    total = done["big"] + done["small"]
    assert total >= 4 * 99
    for n in done.values():
        assert abs(n - total / 2) <= 0.2 * total / 2


async def test_project_defaults_to_the_context_variable():
    ft = FakeTime()
    budget = make_budget(ft, override=1)
    held = await budget.acquire()
    token = current_project.set("alpha")
    try:
        waiter = asyncio.create_task(budget.acquire())
        await settle()
    finally:
        current_project.reset(token)
    assert budget.state().waiting == {"alpha": 1}
    assert held.project == "default"
    held.release()
    await settle()
    assert waiter.result().project == "alpha"
    waiter.result().release()


# -- cancellation ----------------------------------------------------------------------------


async def test_a_cancelled_waiter_leaves_the_line():
    ft = FakeTime()
    budget = make_budget(ft, override=1)
    held = await budget.acquire("p")
    waiter = asyncio.create_task(budget.acquire("q"))
    later = asyncio.create_task(budget.acquire("p"))
    await settle()
    assert budget.state().waiting == {"q": 1, "p": 1}
    waiter.cancel()
    await settle()
    assert waiter.cancelled() and budget.state().waiting == {"p": 1}
    held.release()
    await settle()
    assert later.done() and budget.in_flight == 1
    later.result().release()
    assert budget.in_flight == 0


async def test_wait_for_timeout_while_waiting_leaks_nothing():
    ft = FakeTime()
    budget = make_budget(ft, override=2)
    held = [await budget.acquire("p") for _ in range(2)]
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(budget.acquire("p"), timeout=0.01)
    assert budget.state().waiting == {} and budget.in_flight == 2
    for p in held:
        p.release()
    assert budget.in_flight == 0


async def test_a_permit_granted_as_its_waiter_is_cancelled_is_given_back():
    ft = FakeTime()
    budget = make_budget(ft, override=1)
    held = await budget.acquire("p")
    waiter = asyncio.create_task(budget.acquire("p"))
    await settle()
    held.release()  # grants to the waiter synchronously...
    waiter.cancel()  # ...which is cancelled before it could run
    await settle()
    assert waiter.cancelled()
    assert budget.in_flight == 0 and budget.state().waiting == {}


async def test_cancelling_a_request_in_flight_releases_its_permit():
    ft = FakeTime()
    budget = make_budget(ft, override=2)
    provider = BudgetedProvider(FakeCloud(ft, service_s=5.0), budget)
    task = asyncio.create_task(provider.embed(["x"]))
    await settle()
    assert budget.in_flight == 1
    task.cancel()
    await settle()
    assert task.cancelled() and budget.in_flight == 0
    assert not budget.state().rtt_measured  # an abandoned request is no round trip


async def test_release_is_idempotent():
    ft = FakeTime()
    budget = make_budget(ft, override=2)
    p = await budget.acquire("p")
    p.release()
    p.release()
    assert budget.in_flight == 0


# -- the pool's way: a permit first, then pull -----------------------------------------------


async def test_a_bound_permit_is_used_instead_of_a_second_one():
    ft = FakeTime()
    budget = make_budget(ft, override=1)
    tracker = InFlight()
    provider = BudgetedProvider(FakeCloud(ft, service_s=1.0, tracker=tracker), budget)
    permit = await budget.acquire("p")  # taken before the batch is pulled
    try:
        with permit.bound():
            # With override=1 a second permit would never come. wait_for runs the call in a
            # child task (Python 3.11): the binding must still be found there.
            clock = asyncio.create_task(ft.advance(1.0))
            await asyncio.wait_for(provider.embed(["x"]), timeout=5)
            await clock
    finally:
        permit.release()
    assert tracker.done == 1 and budget.in_flight == 0


async def test_admission_binds_the_permit_for_the_pools_embed_call():
    ft = FakeTime()
    budget = make_budget(ft, override=1)
    tracker = InFlight()
    provider = BudgetedProvider(FakeCloud(ft, service_s=1.0, tracker=tracker), budget)

    async def lane():
        token = current_project.set("proj")
        try:
            permit = await budget.admission(provider)  # before the pull
            assert permit.project == "proj"
            try:
                # The pool runs the call as its own task (ensure_future): it must find the
                # permit, not deadlock waiting for a second one under override=1.
                await asyncio.ensure_future(provider.embed(["x"]))
            finally:
                permit.release()
            # Released: the next call takes a fresh permit of its own.
            await provider.embed(["y"])
        finally:
            current_project.reset(token)

    task = asyncio.create_task(lane())
    await ft.advance(5)
    await task
    assert tracker.done == 2 and budget.state().granted_total == 2 and budget.in_flight == 0


async def test_pool_style_throttle_report_without_a_kind():
    ft = FakeTime()
    budget = make_budget(ft, override=8)
    permit = await budget.acquire("p")
    permit.throttled(2.0, None)  # the pool passes getattr(exc, "throttle_kind", None)
    permit.release()
    assert budget.effective_limit == 4 and budget.state().throttled_total["429"] == 1


async def test_a_bound_permit_carries_one_request_at_a_time():
    ft = FakeTime()
    budget = make_budget(ft, override=2)
    tracker = InFlight()
    provider = BudgetedProvider(FakeCloud(ft, service_s=1.0, tracker=tracker), budget)
    async with budget.permit("p"):
        children = [asyncio.create_task(provider.embed(["x"])) for _ in range(3)]
        await settle()
        # The first child uses the bound permit, the second takes the last one, the third
        # waits: never more requests in flight than permits held.
        assert tracker.now == 2 and budget.in_flight == 2
        await ft.advance(5)
        await asyncio.gather(*children)
    assert tracker.peak == 2 and tracker.done == 3 and budget.in_flight == 0


async def test_a_throttle_under_a_bound_permit_is_reported_to_it():
    ft = FakeTime()
    budget = make_budget(ft, override=8)
    provider = BudgetedProvider(FakeCloud(ft, service_s=0.5, fail=[RateLimited(1.0)]), budget)
    permit = await budget.acquire("p")
    with permit.bound():
        with pytest.raises(RateLimited):
            await in_this_task(ft, provider.embed(["x"]), 1.0)
    permit.release()
    assert budget.effective_limit == 4 and permit.throttles == 1


# -- locals are exempt -----------------------------------------------------------------------


async def test_local_provider_never_takes_a_permit_even_in_a_cooldown():
    ft = FakeTime()
    budget = make_budget(ft, override=1)
    p = await budget.acquire("p")
    p.throttled(retry_after=600)
    tracker = InFlight()
    local = BudgetedProvider(FakeCloud(ft, "gpu", service_s=0.1, kind=Kind.LOCAL, tracker=tracker), budget)
    tasks = [asyncio.create_task(local.rerank("q", ["a", "b"])) for _ in range(10)]
    await ft.advance(0.2)
    assert all(t.done() for t in tasks) and tracker.peak == 10
    assert budget.state().granted_total == 1
    p.release()


async def test_every_cloud_call_kind_takes_a_permit():
    ft = FakeTime()
    budget = make_budget(ft, override=4)
    provider = BudgetedProvider(FakeCloud(ft, service_s=0.1), budget)
    assert provider.info is provider.inner.info and provider.id == "fake:a"
    calls = [
        provider.embed(["a"]),
        provider.rerank("q", ["d"]),
        provider.chat([{"role": "user", "content": "hi"}]),
    ]
    results = await asyncio.gather(*calls, ft.advance(1))
    assert results[2].content == "ok"
    assert budget.state().granted_total == 3


# -- state and closing -----------------------------------------------------------------------


async def test_state_is_json_serialisable_and_complete():
    ft = FakeTime()
    budget = make_budget(ft, rpm=120)
    p = await budget.acquire("p")
    p.throttled(retry_after=2.0, kind="402")
    p.release()
    data = json.loads(json.dumps(budget.state().to_dict()))
    for key in (
        "ceiling_source",
        "ceiling",
        "effective_limit",
        "in_flight",
        "window_count",
        "window_armed",
        "trusted_rpm",
        "cooldown_remaining_s",
        "last_throttle",
        "rtt_s",
        "waiting",
    ):
        assert key in data
    assert data["last_throttle"]["kind"] == "402" and data["window_count"] == 1


async def test_closing_fails_waiters_and_refuses_new_permits():
    ft = FakeTime()
    budget = make_budget(ft, override=1)
    held = await budget.acquire("p")
    waiter = asyncio.create_task(budget.acquire("p"))
    await settle()
    await budget.aclose()
    with pytest.raises(BudgetClosed):
        await waiter
    with pytest.raises(BudgetClosed):
        await budget.acquire("p")
    held.release()
    assert budget.in_flight == 0


def test_a_refused_rpm_changes_nothing():
    from fathom.inference.budget import InvalidRpm

    budget = CloudBudget(rpm=120)
    with pytest.raises(InvalidRpm):
        budget.set_rpm(0)
    assert budget.state().trusted_rpm == 120.0
    budget.set_rpm(None)
    assert budget.state().trusted_rpm is None and not budget.state().window_armed
