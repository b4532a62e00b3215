"""The budget's small parts, each on its own: ceiling, trust, effective limit (AIMD), RPM window,
waiting line, round trip. No event loop, no sleeps: time is a number passed in."""

from __future__ import annotations

import json
import math

import pytest

from fathom.errors import ConfigError
from fathom.inference.budget import (
    CeilingSource,
    EffectiveLimit,
    InvalidRpm,
    KeyReport,
    OverrideOutOfRange,
    RateLimit,
    RoundTrip,
    RpmTrust,
    RpmWindow,
    WaitingLine,
    derive_ceiling,
    trusted_rpm,
)
from fathom.inference.budget.ceiling import interval_seconds, littles_law, validate_override
from tests.inference.budget_fixtures import FixedRng

FUNDED_DEGENERATE = {
    "data": {
        "label": "sk-or-v1-abc...xyz",
        "limit": None,
        "limit_remaining": None,
        "usage": 12.5,
        "is_free_tier": False,
        "rate_limit": {"requests": 1, "interval": "1m"},
    }
}


# -- ceiling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, 300, 257, -1, 1.5, True, "8"])
def test_override_out_of_range_is_refused_naming_the_range(bad):
    with pytest.raises(OverrideOutOfRange) as info:
        validate_override(bad)
    err = info.value
    assert isinstance(err, ConfigError)
    assert (err.low, err.high, err.value) == (1, 256, bad)
    assert "from 1 to 256" in str(err)


@pytest.mark.parametrize("good", [1, 8, 256, 16.0])
def test_override_in_range_is_the_ceiling(good):
    c = derive_ceiling(override=validate_override(good), rpm=None, rtt_s=1.0, report=None)
    assert c.value == int(good) and c.source is CeilingSource.OVERRIDE


def test_four_when_nothing_was_discovered():
    c = derive_ceiling(override=None, rpm=None, rtt_s=1.0, report=None)
    assert (c.value, c.source) == (4, CeilingSource.DEFAULT)
    # A paid key whose balance cannot be read is still "nothing discovered".
    c = derive_ceiling(override=None, rpm=None, rtt_s=1.0, report=KeyReport(is_free_tier=False))
    assert (c.value, c.source) == (4, CeilingSource.DEFAULT)


def test_littles_law_from_a_trusted_rpm():
    rpm = trusted_rpm(600, None)
    assert rpm is not None and rpm.trust is RpmTrust.CONFIGURED
    c = derive_ceiling(override=None, rpm=rpm, rtt_s=2.0, report=None)
    # 600 RPM = 10 requests/s, each taking 2 s: 20 in flight.
    assert (c.value, c.source) == (20, CeilingSource.LITTLES_LAW)
    assert littles_law(600, 0.05) == 1  # never below one
    assert littles_law(60, 2.5) == 3  # ceil
    assert littles_law(1_000_000, 10) == 256  # hard cap


def test_override_outranks_littles_law():
    c = derive_ceiling(override=3, rpm=trusted_rpm(6000, None), rtt_s=2.0, report=None)
    assert (c.value, c.source) == (3, CeilingSource.OVERRIDE)


@pytest.mark.parametrize("bad", [0, -5, math.inf, math.nan, "60"])
def test_configured_rpm_must_be_positive(bad):
    with pytest.raises(InvalidRpm):
        trusted_rpm(bad, None)


def test_free_tier_key_trusts_the_documented_limit():
    report = KeyReport(is_free_tier=True, rate_limit=RateLimit(1, "1m"))
    rpm = trusted_rpm(None, report)
    assert rpm is not None and (rpm.rpm, rpm.trust) == (20.0, RpmTrust.FREE_TIER)
    c = derive_ceiling(override=None, rpm=rpm, rtt_s=3.0, report=report)
    assert (c.value, c.source) == (1, CeilingSource.LITTLES_LAW)


def test_degenerate_rate_limit_on_a_funded_account_is_not_trusted():
    report = KeyReport.from_json(
        FUNDED_DEGENERATE, credits={"data": {"total_credits": 40.0, "total_usage": 12.5}}
    )
    assert report.rate_limit is not None and report.rate_limit.rpm == 1.0
    assert report.funded and report.balance == pytest.approx(27.5)
    assert trusted_rpm(None, report) is None
    c = derive_ceiling(override=None, rpm=None, rtt_s=1.0, report=report)
    assert (c.value, c.source) == (27, CeilingSource.CREDITS)


@pytest.mark.parametrize(
    "remaining, credits, expected",
    [(0.5, None, 4), (10.0, None, 10), (1000.0, None, 64), (50.0, (30.0, 10.0), 20)],
)
def test_credit_sizing_is_proportional_and_bounded(remaining, credits, expected):
    report = KeyReport(
        limit=remaining + 1,
        limit_remaining=remaining,
        total_credits=credits[0] if credits else None,
        total_usage=credits[1] if credits else None,
    )
    c = derive_ceiling(override=None, rpm=trusted_rpm(None, report), rtt_s=1.0, report=report)
    assert (c.value, c.source) == (expected, CeilingSource.CREDITS)


def test_exhausted_funded_account_falls_back_to_the_default():
    report = KeyReport(limit=10, limit_remaining=0.0)
    assert not report.funded
    assert derive_ceiling(override=None, rpm=None, rtt_s=1, report=report).value == 4


def test_plausible_reported_rate_on_a_funded_account_is_trusted():
    report = KeyReport(limit_remaining=5.0, rate_limit=RateLimit(50, "10s"))
    rpm = trusted_rpm(None, report)
    assert rpm is not None and (rpm.rpm, rpm.trust) == (300.0, RpmTrust.REPORTED)
    # "-1" has meant unlimited: no figure at all, so the account is sized from credits.
    report = KeyReport(limit_remaining=5.0, rate_limit=RateLimit(-1, "10s"))
    assert trusted_rpm(None, report) is None


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("10s", 10.0),
        ("1m", 60.0),
        ("1h", 3600.0),
        ("500ms", 0.5),
        ("30", 30.0),
        (15, 15.0),
        ("soon", None),
        ("0s", None),
    ],
)
def test_interval_parsing(text, seconds):
    assert interval_seconds(text) == seconds


def test_key_report_never_shows_its_label():
    report = KeyReport.from_json(FUNDED_DEGENERATE)
    assert report.label == "sk-or-v1-abc...xyz"
    assert "sk-or" not in repr(report)


def test_key_report_adapts_a_foreign_record():
    class Foreign:
        label = "x"
        limit = None
        limit_remaining = 7.0
        usage = 1.0
        is_free_tier = False
        rate_limit = type("RL", (), {"requests": 2, "interval": "1m"})()

    report = KeyReport.adapt(Foreign())
    assert report.limit_remaining == 7.0 and report.rate_limit == RateLimit(2.0, "1m")
    assert KeyReport.adapt(report) is report


# -- effective limit (AIMD) ------------------------------------------------------------------


def make_limit(ceiling=16, **kw) -> EffectiveLimit:
    kw.setdefault("rng", FixedRng(0.5))
    kw.setdefault("clean_window_s", 10.0)
    kw.setdefault("base_backoff_s", 1.0)
    kw.setdefault("jitter", 0.5)
    return EffectiveLimit(ceiling, **kw)


def test_throttle_halves_with_floor_one():
    lim = make_limit(5)
    expected = [2, 1, 1]
    t = 0.0
    for want in expected:
        t += 100
        assert lim.throttled(t, None, started_at=t - 1)
        assert lim.value == want


def test_one_halving_per_episode():
    lim = make_limit(16)
    assert lim.throttled(10.0, None, started_at=9.0)
    assert lim.value == 8
    # Other requests that were already in flight come back throttled too: no further halving.
    assert not lim.throttled(10.1, None, started_at=9.5)
    assert not lim.throttled(10.2, None, started_at=9.9)
    assert lim.value == 8
    # A request started after the halving that is throttled again starts a new episode.
    assert lim.throttled(30.0, None, started_at=20.0)
    assert lim.value == 4


def test_cooldown_honors_retry_after_with_jitter():
    lim = make_limit(16, rng=FixedRng(0.5), jitter=0.5)
    lim.throttled(100.0, 5.0, started_at=99.0)
    # max(5, base 1) × (1 + 0.5 × 0.5)
    assert lim.cooldown_until == pytest.approx(100.0 + 5.0 * 1.25)
    assert lim.in_cooldown(106.2) and not lim.in_cooldown(106.25)


def test_cooldown_never_shorter_than_retry_after_or_base_backoff():
    for r in (0.0, 0.3, 0.999):
        lim = make_limit(16, rng=FixedRng(r), base_backoff_s=2.0)
        lim.throttled(0.0, 7.0, started_at=0.0)
        assert lim.cooldown_remaining(0.0) >= 7.0
        lim = make_limit(16, rng=FixedRng(r), base_backoff_s=2.0)
        lim.throttled(0.0, None, started_at=0.0)
        assert 2.0 <= lim.cooldown_remaining(0.0) < 3.0


def test_later_throttle_extends_but_never_shortens_the_cooldown():
    lim = make_limit(16, rng=FixedRng(0.0))
    lim.throttled(0.0, 30.0, started_at=0.0)
    lim.throttled(1.0, 2.0, started_at=0.0)
    assert lim.cooldown_until == 30.0
    lim.throttled(2.0, 40.0, started_at=0.0)
    assert lim.cooldown_until == 42.0


def test_clean_window_raises_one_permit_at_a_time_to_the_ceiling():
    lim = make_limit(8, rng=FixedRng(0.0), clean_window_s=10.0, base_backoff_s=1.0)
    lim.throttled(0.0, None, started_at=0.0)  # 8 -> 4, cooldown until 1.0
    assert lim.value == 4
    seen = []
    t = 0.0
    while t < 60:
        t += 1.0
        lim.tick(t, busy=True)
        seen.append(lim.value)
    # Windows end at 11, 21, 31, 41: one permit each, then the ceiling holds.
    assert seen[9] == 4 and seen[10] == 5 and seen[20] == 6 and seen[30] == 7 and seen[40] == 8
    assert max(seen) == 8 and lim.cap is None


def test_no_raise_without_traffic():
    lim = make_limit(8, rng=FixedRng(0.0))
    lim.throttled(0.0, None, started_at=0.0)
    lim.tick(100.0, busy=False)
    assert lim.value == 4
    # Traffic in the current window earns exactly that window's permit.
    lim.note_traffic()
    lim.tick(112.0, busy=False)
    assert lim.value == 5


def test_a_throttle_restarts_the_clean_window():
    lim = make_limit(8, rng=FixedRng(0.0))
    lim.throttled(0.0, None, started_at=0.0)  # 4, cooldown to 1
    lim.tick(9.0, busy=True)
    lim.throttled(9.0, None, started_at=0.0)  # same episode: no halving, cooldown to 10
    lim.tick(15.0, busy=True)
    assert lim.value == 4  # the window now ends at 20, not 11
    lim.tick(20.0, busy=True)
    assert lim.value == 5


def test_rediscovery_never_undoes_a_halving_and_a_lower_ceiling_clamps():
    lim = make_limit(32, rng=FixedRng(0.0))
    lim.throttled(0.0, None, started_at=0.0)
    assert lim.value == 16
    lim.set_ceiling(64)
    assert lim.value == 16
    lim.set_ceiling(6)
    assert lim.value == 6
    lim.set_ceiling(64)
    assert lim.value == 16


def test_before_any_throttle_the_limit_follows_the_ceiling():
    lim = make_limit(4)
    lim.set_ceiling(40)
    assert lim.value == 40
    lim.set_ceiling(12)
    assert lim.value == 12


# -- RPM window ------------------------------------------------------------------------------


def test_window_unarmed_admits_everything_but_still_counts():
    w = RpmWindow(window_s=60)
    for i in range(1000):
        assert w.admits(float(i) / 100)
        w.record(float(i) / 100)
    assert not w.armed and w.count(10.0) == 1000 and w.next_free_at(10.0) is None


def test_window_blocks_the_rpm_plus_first_start_until_the_oldest_expires():
    w = RpmWindow(window_s=60, margin_s=0)
    w.arm(10)
    for i in range(10):
        assert w.admits(float(i))
        w.record(float(i))
    assert not w.admits(30.0)
    assert w.next_free_at(30.0) == 60.0
    assert not w.admits(59.999)
    assert w.admits(60.0) and w.count(60.0) == 9


def test_window_holds_starts_a_margin_longer_than_the_account_does():
    w = RpmWindow(window_s=60)  # one second a minute by default
    w.arm(1)
    w.record(0.0)
    assert w.next_free_at(10.0) == 61.0 and not w.admits(60.5) and w.admits(61.0)
    assert RpmWindow(window_s=6.0).margin_s == pytest.approx(0.1)
    with pytest.raises(ValueError):
        RpmWindow(window_s=60, margin_s=-1)


def test_scaled_window_allowance():
    w = RpmWindow(window_s=6.0)
    w.arm(600)  # 600 per minute is 60 per 6 s
    assert w.allowance == 60
    w.arm(None)
    assert w.allowance is None


# -- waiting line ----------------------------------------------------------------------------


def test_round_robin_across_projects_fifo_within():
    line: WaitingLine[str] = WaitingLine()
    for i in range(5):
        line.join("big", f"b{i}")
    line.join("small", "s0")
    line.join("small", "s1")
    order = []
    while line:
        order.append(line.next()[1])
    assert order == ["b0", "s0", "b1", "s1", "b2", "b3", "b4"]


def test_leaving_the_line():
    line: WaitingLine[str] = WaitingLine()
    line.join("a", "x")
    line.join("a", "y")
    assert line.leave("a", "x") and not line.leave("a", "x") and not line.leave("b", "x")
    assert line.waiting() == {"a": 1}
    assert line.leave("a", "y") and not line and line.next() is None


# -- round trip ------------------------------------------------------------------------------


def test_round_trip_is_an_exponential_moving_average():
    rt = RoundTrip(alpha=0.5, assumed_s=1.0)
    assert rt.estimate == 1.0 and not rt.measured
    rt.record(2.0)
    assert rt.estimate == 2.0
    rt.record(4.0)
    assert rt.estimate == 3.0
    rt.record(-1.0)
    rt.record(math.nan)
    assert rt.estimate == 3.0 and rt.samples == 2
    json.dumps({"rtt": rt.estimate})
