"""Acceptance 4 of the OpenRouter issue: the emulator's RPM limit is exact. Under sustained
overload with random arrival times (fake clock), no closed 60 s window ever holds more than
RPM accepted requests, and no request is refused while its window has room."""

from __future__ import annotations

import bisect

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from fathom.devtools.emulator import EmulatorConfig, create_app
from fathom.devtools.emulator.limits import ConcurrencyGate, RpmWindow


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _max_in_any_window(times: list[float], window: float) -> int:
    # Every maximal closed window can start at an accepted time.
    return max((bisect.bisect_right(times, t + window) - i for i, t in enumerate(times)), default=0)


@settings(max_examples=300, deadline=None)
@given(
    rpm=st.integers(min_value=1, max_value=30),
    gaps=st.lists(st.floats(min_value=0.0, max_value=6.0, allow_nan=False), min_size=1, max_size=400),
)
def test_accepted_requests_in_any_window_never_exceed_rpm_and_none_is_refused_needlessly(rpm, gaps):
    clock = FakeClock()
    limiter = RpmWindow(rpm, window=60.0, clock=clock)
    accepted: list[float] = []
    for gap in gaps:
        clock.now += gap
        ok, wait = limiter.try_acquire()
        in_window = [t for t in accepted if t >= clock.now - 60.0]
        if ok:
            accepted.append(clock.now)
            assert wait == 0.0
        else:
            # Exact, not conservative: refused only with a full window, and told when it opens.
            assert len(in_window) == rpm
            assert wait == min(in_window) + 60.0 - clock.now
    assert _max_in_any_window(accepted, 60.0) <= rpm


def test_concurrency_gate_counts_peak_and_refuses_above_limit():
    gate = ConcurrencyGate(2)
    assert gate.try_enter() and gate.try_enter() and not gate.try_enter()
    gate.leave()
    assert gate.try_enter() and gate.peak == 2


async def test_the_emulator_app_enforces_rpm_over_http_with_a_fake_clock():
    """The same limiter wired into the app: 429 for the (RPM+1)th request inside a minute,
    admitted again once the fake clock moves past the window."""
    clock = FakeClock()
    app = create_app(EmulatorConfig(clock=clock))
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": "Bearer sk-or-v1-rpm"}
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as http:
        (await http.put("/control/limits", json={"rpm": 3})).raise_for_status()
        body = {"model": "m/chat", "messages": [{"role": "user", "content": "hi"}]}
        statuses = []
        for step in range(8):
            clock.now = step * 5.0
            statuses.append(
                (await http.post("/api/v1/chat/completions", json=body, headers=headers)).status_code
            )
        assert statuses == [200, 200, 200, 429, 429, 429, 429, 429]
        clock.now = 60.0  # t=0 is still inside [0, 60]
        limited = await http.post("/api/v1/chat/completions", json=body, headers=headers)
        assert limited.status_code == 429 and limited.headers["Retry-After"] == "1"
        assert limited.json()["error"]["metadata"]["error_type"] == "rate_limit_exceeded"
        clock.now = 60.5
        assert (await http.post("/api/v1/chat/completions", json=body, headers=headers)).status_code == 200
        counters = (await http.get("/control/counters")).json()
    assert counters["rate_limited"] == 6
    assert counters["accepted_at"] == [0.0, 5.0, 10.0, 60.5]
