"""Key discovery (issue 14): the key's limits read from OpenRouter's key-info and credits
endpoints, reported without a secret, trusted only as the budget's rules say, and followed by
the cloud lanes.

The reads and the rate run against the emulator's real app in virtual time
(`tests.devtools.virtual_emulator`); `test_key_discovery_fleet.py` drives the same loop through a real
server, a sidecar over WebSocket and the emulator over HTTP.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import numpy as np
import pytest

from fathom.devtools.emulator import MINILM
from fathom.fleet import protocol as p
from fathom.fleet.keycheck import KeyCheckRecord, ThrottleStorm, feed_budget, read_key
from fathom.inference.budget import BudgetedProvider, CloudBudget
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider
from fathom.inference.pool import Pool
from fathom.roles import Role
from tests.devtools.virtual_emulator import BASE_URL, VirtualEmulator, virtual_emulator
from tests.fake_clock import FakeClock

KEY = "sk-or-v1-" + "d1sc0" * 12


def record(check: p.KeyCheck, name: str = "gpu-1") -> KeyCheckRecord:
    return KeyCheckRecord(
        sidecar=name, outcome=check.outcome, reason=check.reason, at=datetime.now(UTC), facts=check.facts
    )


async def check_with(emu: VirtualEmulator, **key_fields) -> p.KeyCheck:
    if key_fields:
        await emu.control("PUT", "/key", key_fields)
    client = OpenRouterClient(KEY, base_url=BASE_URL, http=emu.http)
    return await read_key(client, "push")


async def test_each_answer_of_the_key_endpoints_becomes_an_outcome_and_only_ok_moves_the_budget():
    clock = FakeClock()
    async with virtual_emulator(clock) as emu:
        budget = CloudBudget(clock=clock.now, sleep=clock.sleep)
        feed = feed_budget(budget)
        assert budget.state().ceiling_origin == "default"

        # A key that reports a plausible limit: discovered and trusted; the window arms.
        ok = await check_with(
            emu, rate_limit={"requests": 120, "interval": "1m"}, limit=50.0, limit_remaining=30.0
        )
        assert ok.outcome == "ok" and ok.facts.rate_limit_requests == 120
        wire = p.encode(ok)
        assert KEY not in wire and "label" not in wire and "emu...lator" not in wire
        assert isinstance(p.parse_frame(wire), p.KeyCheck)  # the frame survives the wire
        feed(record(ok))
        st = budget.state()
        assert (st.ceiling_source, st.ceiling_origin) == ("littles-law", "discovered: 120 req/min")
        assert st.window_armed and st.window_allowance == 120

        # Each refusal of the key read is an outcome, and leaves the budget as it was.
        for status, outcome in (
            (401, "rejected"),
            (402, "no_credits"),
            (429, "throttled"),
            (500, "unreachable"),
        ):
            await emu.control("POST", "/key-fail", {"status": status, "count": 1})
            failed = await check_with(emu)
            assert (failed.outcome, failed.facts) == (outcome, None), status
            feed(record(failed))
            assert budget.state().ceiling_origin == "discovered: 120 req/min"
        # A key the emulator does not accept at all is rejected too (no failure injected).
        await emu.control("PUT", "/keys", {"accepted": ["sk-or-v1-another"]})
        assert (await check_with(emu)).outcome == "rejected"
        await emu.control("PUT", "/keys", {"accepted": None})

        # Degenerate limits are not trusted: a balance sizes the ceiling, no window arms.
        for degenerate in (
            {"requests": -1, "interval": "1m"},
            {"requests": 0, "interval": "10s"},
            {"requests": 1, "interval": "1m"},
            "absent",
            None,
        ):
            check = await check_with(emu, rate_limit=degenerate, limit=50.0, limit_remaining=12.0)
            assert check.outcome == "ok"
            feed(record(check))
            st = budget.state()
            assert (st.ceiling_source, st.ceiling, st.window_armed) == ("credits", 12, False), degenerate
            assert st.ceiling_origin == "credits: $12.00 balance"
        # ...and with no balance readable either, the timid default of 4.
        check = await check_with(emu, rate_limit="absent", limit=None, limit_remaining=None)
        feed(record(check))
        st = budget.state()
        assert (st.ceiling_source, st.ceiling, st.ceiling_origin, st.window_armed) == (
            "default",
            4,
            "default",
            False,
        )
        # A management key reads the account's credits as well: its balance sizes the ceiling.
        await emu.control("PUT", "/keys", {"management": [KEY]})
        await emu.control("PUT", "/credits", {"total_credits": 40.0, "total_usage": 15.0})
        check = await check_with(emu)
        assert (check.facts.total_credits, check.facts.total_usage) == (40.0, 15.0)
        feed(record(check))
        assert budget.state().ceiling_origin == "credits: $25.00 balance"
        await budget.aclose()


async def test_emulator_control_refuses_a_key_answer_openrouter_never_sends():
    clock = FakeClock()
    async with virtual_emulator(clock) as emu:
        for body in (
            {"rate_limit": {"requests": "many", "interval": "1m"}},
            {"rate_limit": {"requests": 10}},
            {"limit": "lots"},
            {"is_free_tier": "no"},
        ):
            r = await emu.http.put("/control/key", json=body)
            assert r.status_code == 400, body
        r = await emu.http.post("/control/key-fail", json={"status": 404})
        assert r.status_code == 400
        assert emu.state.key_report["rate_limit"]["requests"] == 1000  # nothing changed


async def test_a_rediscovery_never_undoes_what_aimd_learned_from_live_429s():
    clock = FakeClock()
    async with virtual_emulator(clock) as emu:
        budget = CloudBudget(clock=clock.now, sleep=clock.sleep, rng=random.Random(1))
        feed = feed_budget(budget)
        check = await check_with(emu, rate_limit="absent", limit=100.0, limit_remaining=16.0)
        feed(record(check))
        assert (budget.ceiling.value, budget.effective_limit) == (16, 16)
        permit = await budget.acquire()
        permit.throttled(1.0)  # a live 429
        permit.release()
        assert budget.effective_limit == 8
        feed(record(check))  # the periodic re-check reports the same key
        feed(record(await check_with(emu, limit_remaining=40.0)))  # or a richer one
        assert budget.ceiling.value == 40 and budget.effective_limit == 8
        await budget.aclose()


def test_a_storm_of_throttles_asks_for_one_recheck():
    storm = ThrottleStorm(count=3, window_s=10.0)
    assert [storm.note(t) for t in (0.0, 1.0)] == [False, False]
    assert storm.note(2.0) is True
    assert storm.note(3.0) is False  # the same storm does not ask again at once
    assert [storm.note(t) for t in (30.0, 45.0, 60.0)] == [False, False, False]  # spread out


async def test_a_discovered_limit_is_held_by_a_cloud_only_job_of_over_a_minute():
    """Acceptance 1, in virtual time: the emulator enforces 120 requests/min at 500 ms and its
    key reports that limit; the key check feeds the budget; a cloud-only pull pool (lanes
    following the effective limit, as the service builds it) embeds for over a minute."""
    clock = FakeClock()
    async with virtual_emulator(clock) as emu:
        await emu.control("PUT", "/limits", {"rpm": 120, "window": 60.0, "retry_after": True})
        await emu.control("PUT", "/latency", {"base_ms": 500})
        client = OpenRouterClient(KEY, base_url=BASE_URL, http=emu.http)
        budget = CloudBudget(clock=clock.now, sleep=clock.sleep, rng=random.Random(3))
        feed_budget(budget)(record(await check_with(emu, rate_limit={"requests": 120, "interval": "1m"})))
        assert budget.state().ceiling_origin == "discovered: 120 req/min"
        cloud = BudgetedProvider(
            OpenRouterProvider(
                client, model=MINILM, roles=[Role.CODE_EMBEDDING], upstream="alpha", width=384
            ),
            budget,
        )
        pool = Pool(
            [cloud],
            role=Role.CODE_EMBEDDING,
            clock=clock,
            admission=budget.admission,
            lanes=lambda prov: budget.effective_limit,
            initial_batch=8,
            max_batch=8,
        )
        texts = [f"def f{i}(x):\n    return x + {i}" for i in range(8 * 160)]
        written: list[int] = []

        async def sink(indices, vectors, provider) -> None:
            assert vectors.shape == (len(indices), 384) and np.isfinite(vectors).all()
            written.extend(indices)

        t0 = clock.now()
        report = await pool.run(texts, sink)
        elapsed = clock.now() - t0
        counters = await emu.counters()
        accepted = sorted(counters["accepted_at"])
        requests = counters["requests"]["embeddings"]
        per_minute = len(accepted) / (elapsed / 60.0)
        gaps = np.diff([t0, *accepted, clock.now()])
        st = budget.state()
        print(
            f"\n{len(accepted)} requests in {elapsed:.1f}s virtual: {per_minute:.1f}/min "
            f"({per_minute / 120:.3f} of the limit); 429s {counters['rate_limited']}/{requests}; "
            f"longest stall {gaps.max():.2f}s; ceiling {st.ceiling} ({st.ceiling_origin}), "
            f"rtt {st.rtt_s:.3f}s, halvings {st.halvings}"
        )
        assert sorted(written) == list(range(len(texts)))
        assert elapsed >= 60.0
        assert per_minute >= 0.9 * 120
        assert counters["rate_limited"] <= 0.02 * requests
        assert gaps.max() <= 60.0
        assert report.throttles.get(cloud.id, 0) == counters["rate_limited"]
        await budget.aclose()
        await client.aclose()


def test_a_key_check_frame_has_no_room_for_a_secret():
    """The frame admits only the named figures: a label, a key or free text in the interval
    is refused, and the refusal does not echo it."""
    for facts in (
        {"label": KEY},
        {"key": KEY},
        {"rate_limit_interval": KEY[:16]},
        {"rate_limit_interval": "1 minute, sk-or"},
    ):
        wire = json.dumps({"v": 1, "type": "key_check", "outcome": "ok", "reason": "push", "facts": facts})
        refused = p.parse_frame(wire)
        assert isinstance(refused, p.FrameError) and refused.code == "invalid", facts
        assert KEY[:16] not in str(refused) and "sk-or" not in str(refused)
    assert isinstance(
        p.parse_frame(json.dumps({"v": 1, "type": "key_check", "outcome": "maybe", "reason": "push"})),
        p.FrameError,
    )


def test_a_key_check_interval_of_zero_or_less_is_refused_before_anything_starts():
    from fathom.errors import ConfigError
    from fathom.fleet.agent import Sidecar
    from fathom.fleet.command import main

    for bad in (0, -5, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="key-check-interval must be a positive"):
            Sidecar("gpu-1", {}, key_check_interval=bad)
    assert main(["--server", "ws://127.0.0.1:9", "--token", "fj_x", "--key-check-interval", "0"]) == 2
