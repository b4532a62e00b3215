"""The gate with fake providers at the Provider cut-off: the check, pins, verdict persistence
and invalidation, reference selection per policy, golden-vector re-probes and quarantine, and
the store's second lock."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest

from fathom.errors import NotCleared, PinRequired
from fathom.inference.gate import (
    MIN_COSINE,
    Coverage,
    Gate,
    GateClearance,
    GateRefused,
    GateUnavailable,
    Status,
    check_pin,
    choose_anchor,
    identity,
    inspect,
    load_probes,
)
from fathom.inference.registry import HealthState, ProviderRegistry
from fathom.policy import Policy, Reference
from fathom.roles import Role
from fathom.space import Provenance, Space
from tests.inference.gate_fixtures import (
    WIDTH,
    FakeEncoder,
    cloud,
    has_cjk,
    rotated_all,
    rotated_cjk,
)


class WallClock:
    """Injected wall time for verdicts (seconds since the epoch)."""

    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def wall():
    return WallClock()


@pytest.fixture
def gate(tmp_path, wall):
    return Gate(tmp_path, now=wall)


def local_space(ref_id: str = "local:ref") -> Space:
    return Space(table="code", model="fake/encoder", width=WIDTH, reference=ref_id)


# ------------------------------------------------------------------------------ probe set


def test_probe_set_is_package_data_and_spans_languages_and_lengths():
    probes = load_probes()
    assert len(probes) >= 16
    langs = {p.language for p in probes.probes}
    assert {"python", "go", "rust", "java"} <= langs and langs & {"javascript", "typescript"}
    assert {"english", "chinese", "turkish", "french"} <= langs
    # Inputs longer than 256 and than 512 tokens: words+symbols are a lower bound on tokens.
    sizes = sorted(len(p.text.split()) for p in probes.probes)
    assert sizes[-1] > 512 / 2 and len(max(probes.texts, key=len)) > 2500
    assert len(set(probes.ids)) == len(probes)
    assert load_probes().digest == probes.digest


# ------------------------------------------------------------------------------ the check


async def test_identical_stack_is_cleared_with_full_evidence(gate, wall):
    ref, cand = FakeEncoder("local:ref"), FakeEncoder("sidecar:gpu1")
    space = local_space()
    gate.attach(ref)
    v = await gate.verify(space, cand, Policy.AGGREGATE)
    assert v.cleared and v.status is Status.CLEARED
    assert v.regime is Reference.LOCAL and v.coverage is Coverage.FULL
    assert set(v.cosines) == set(load_probes().ids)
    assert v.min_cosine > 0.999
    assert v.widths_seen == (WIDTH,) and v.count_ok and v.finite_ok
    assert v.key.reference == identity(ref) and v.key.width == WIDTH
    assert v.decided_at == wall.t and v.last_good_check == wall.t
    assert gate.is_cleared(space, cand)
    assert gate.verdict_for(space, cand).verdict_id == v.verdict_id


async def test_slightly_rotated_stack_is_refused_with_per_probe_cosines(gate):
    gate.attach(FakeEncoder("local:ref"))
    cand = FakeEncoder("sidecar:int8", stack=rotated_all(0.976))
    v = await gate.verify(local_space(), cand, Policy.AGGREGATE)
    assert not v.passed and v.status is Status.REFUSED
    assert v.min_cosine == pytest.approx(0.976, abs=1e-4)
    assert all(c == pytest.approx(0.976, abs=1e-4) for c in v.cosines.values())
    assert len(v.cosines) == len(load_probes())
    assert "0.976" in v.reason and str(MIN_COSINE) in v.reason
    with pytest.raises(GateRefused) as err:
        await gate.admit(local_space(), cand, Policy.AGGREGATE)
    assert err.value.min_cosine == pytest.approx(0.976, abs=1e-4)
    assert set(err.value.cosines) == set(load_probes().ids)
    assert not gate.is_cleared(local_space(), cand)


async def test_refusal_names_the_probes_that_fail(gate):
    gate.attach(FakeEncoder("local:ref"))
    cand = FakeEncoder("sidecar:enpt", stack=rotated_cjk(0.89))
    v = await gate.verify(local_space(), cand, Policy.LOCAL)
    zh = {p.id for p in load_probes().probes if has_cjk(p.text)}
    assert set(v.evidence.failing) == zh and len(zh) >= 2
    assert all(c > 0.999 for pid, c in v.cosines.items() if pid not in zh)
    assert not v.passed and "zh-" in v.reason


def test_the_floor_is_strict_a_cosine_of_exactly_0_99_is_refused():
    """The gate's threshold: strictly above 0.99 on every probe. The pair below has a cosine
    of exactly 0.99 in floating point; a cosine just above it passes."""
    ref = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    at_floor = [0.99, math.sqrt(1 - 0.99**2)]
    above = [0.9905, math.sqrt(1 - 0.9905**2)]
    evidence = inspect(["at", "above", "same"], np.array([at_floor, above, [1.0, 0.0]]), 2, reference=ref)
    assert evidence.cosines["at"] == MIN_COSINE == 0.99
    assert list(evidence.failing) == ["at"] and not evidence.passed
    assert inspect(["above"], np.array([above]), 2, reference=ref[:1]).passed


async def test_a_stack_a_little_above_the_floor_is_cleared(gate):
    """The floor is not stricter than the design: an interchangeable stack at 0.995 (a
    different build of the same weights) is cleared."""
    gate.attach(FakeEncoder("local:ref"))
    cand = FakeEncoder("sidecar:close", stack=rotated_all(0.995))
    v = await gate.verify(local_space(), cand, Policy.AGGREGATE)
    assert v.cleared and 0.99 < v.min_cosine < 0.996


@pytest.mark.parametrize(
    "stack,expect",
    [
        (lambda texts, m: m[:, : WIDTH - 4], "width 12"),
        (lambda texts, m: np.where(np.arange(m.size).reshape(m.shape) == 5, np.nan, m), "non-finite"),
        (lambda texts, m: m[:-1], "vectors for"),
        (lambda texts, m: np.vstack([m, m[:1]]), "vectors for"),
    ],
)
async def test_wrong_width_nan_or_count_is_refused(gate, stack, expect):
    gate.attach(FakeEncoder("local:ref"))
    v = await gate.verify(local_space(), FakeEncoder("sidecar:bad", stack=stack), Policy.AGGREGATE)
    assert not v.passed and expect in v.reason
    assert not v.cosines  # nothing is compared with a malformed answer


async def test_width_check_alone_would_pass_a_foreign_space(gate):
    """Equal width, other encoder: the cosine floor is what refuses it."""
    gate.attach(FakeEncoder("local:ref"))
    foreign = FakeEncoder(
        "sidecar:e5", stack=lambda texts, m: np.stack([np.roll(v, 3) for v in m]).astype(np.float32)
    )
    v = await gate.verify(local_space(), foreign, Policy.AGGREGATE)
    assert v.widths_seen == (WIDTH,) and v.finite_ok and v.count_ok
    assert not v.passed and v.min_cosine < 0.9


# ------------------------------------------------------------------------------ pins


async def test_unpinned_cloud_embedding_route_is_refused_before_any_probe(gate):
    ref = FakeEncoder("local:ref")
    gate.attach(ref)
    unpinned = cloud("openrouter:fake/encoder", upstream=None)
    with pytest.raises(PinRequired) as err:
        await gate.verify(local_space(), unpinned, Policy.AGGREGATE)
    assert unpinned.calls == 0 and ref.calls == 0
    assert err.value.role == Role.CODE_EMBEDDING.value
    assert "upstream" in str(err.value) and "fathom policy set" in str(err.value)
    assert gate.verdicts.all() == []  # not even a refused verdict: nothing was probed


def test_rerank_routes_need_no_pin():
    check_pin(Role.RERANKER, cloud("openrouter:qwen/qwen3-reranker-8b", upstream=None))
    check_pin(Role.CODE_ASSISTANT, cloud("openrouter:poolside/laguna", upstream=None))
    with pytest.raises(PinRequired):
        check_pin(Role.EMBEDDING, cloud("openrouter:x", upstream=None))
    check_pin(Role.EMBEDDING, FakeEncoder("local:x"))  # local routes have no upstream


# ------------------------------------------------------------------------------ persistence


async def test_verdicts_survive_a_restart_and_cleared_providers_are_reprobed_first(tmp_path, wall):
    ref, cand = FakeEncoder("local:ref"), cloud("openrouter:fake@a", upstream="a")
    space = local_space()
    g1 = Gate(tmp_path, now=wall)
    g1.attach(ref)
    v1 = await g1.verify(space, cand, Policy.AGGREGATE)
    calls = cand.calls

    g2 = Gate(tmp_path, now=wall)  # a restart: new process, same data dir
    v2 = g2.verdict_for(space, cand)
    assert v2 is not None and v2.verdict_id == v1.verdict_id and v2.cleared
    assert v2.cosines == v1.cosines and v2.key == v1.key
    # Cleared before the restart, so watched again, and not cleared until re-probed: the stack
    # behind the same id may have changed while the server was down.
    assert [(w.space, w.provider_id) for w in g2.verdicts.watched()] == [(space, cand.id)]
    assert g2.awaiting_reprobe(cand) and not g2.is_cleared(space, cand)
    wall.t += 60
    again = await g2.verify(space, cand, Policy.AGGREGATE)
    assert again.verdict_id == v1.verdict_id and cand.calls == calls + 1  # one re-probe
    assert again.last_good_check > v1.last_good_check
    assert g2.is_cleared(space, cand)
    [watched] = Gate(tmp_path, now=wall).verdicts.watched()
    assert watched.last_checked == again.last_good_check
    GateClearance(g2).check(space, Provenance(cand.id, v1.verdict_id))

    text = (tmp_path / "gate" / "verdicts.json").read_text()
    saved = json.loads(text)["verdicts"][0]
    assert saved["verdict_id"] == v1.verdict_id and saved["status"] == "cleared"
    assert set(saved["evidence"]["cosines"]) == set(load_probes().ids)
    assert set(saved["key"]) == {
        "space",
        "table",
        "provider_id",
        "model",
        "upstream",
        "regime",
        "reference",
        "width",
    }  # no field could hold a secret


async def test_changed_pin_or_model_invalidates(tmp_path, wall):
    gate = Gate(tmp_path, now=wall)
    gate.attach(FakeEncoder("local:ref"))
    space = local_space()
    pinned_a = cloud("openrouter:fake", upstream="a")
    v_a = await gate.verify(space, pinned_a, Policy.AGGREGATE)
    assert v_a.cleared

    pinned_b = cloud("openrouter:fake", upstream="b")  # same route id, another upstream
    assert gate.verdict_for(space, pinned_b) is None and not gate.is_cleared(space, pinned_b)
    other_model = cloud("openrouter:fake", upstream="a", model="fake/encoder-v2")
    assert gate.verdict_for(space, other_model) is None

    wall.t += 10
    v_b = await gate.verify(space, pinned_b, Policy.AGGREGATE)
    assert v_b.verdict_id != v_a.verdict_id and v_b.key.upstream == "b"
    # The old verdict no longer clears rows: it is superseded by the provider's newer one.
    with pytest.raises(NotCleared, match="superseded"):
        GateClearance(gate).check(space, Provenance(pinned_a.id, v_a.verdict_id))
    GateClearance(gate).check(space, Provenance(pinned_b.id, v_b.verdict_id))


# ------------------------------------------------------------------------------ references


async def test_local_reference_must_be_connected(gate):
    cand = FakeEncoder("sidecar:gpu1")
    with pytest.raises(GateUnavailable, match="local:ref"):
        await gate.verify(local_space(), cand, Policy.BACKUP)
    assert gate.verdicts.all() == [] and cand.calls == 0


async def test_local_reference_itself_records_golden_vectors(gate):
    ref = FakeEncoder("local:ref")
    space = local_space()
    assert gate.golden_for(space) is None
    v = await gate.verify(space, ref, Policy.AGGREGATE)
    assert v.cleared and v.coverage is Coverage.SELF
    golden = gate.golden_for(space)
    assert golden is not None and golden.vectors.shape == (len(load_probes()), WIDTH)
    assert golden.reference == identity(ref)
    assert "reference encoder" in v.status_line()


def cloud_space(anchor: str) -> Space:
    return Space(table="code", model="fake/encoder", width=WIDTH, reference=anchor)


async def test_cloud_reference_is_the_anchor_peer(gate):
    anchor = cloud("or:gamma", upstream="gamma")
    good = cloud("or:alpha", upstream="alpha")
    drifted = cloud("or:delta", upstream="delta", stack=rotated_cjk(0.89))
    local = FakeEncoder("local:ref")
    for p in (anchor, good, drifted, local):
        gate.attach(p)
    assert choose_anchor(gate.providers, "fake/encoder", Role.CODE_EMBEDDING) == "or:alpha"
    space = cloud_space("or:gamma")
    v_good = await gate.verify(space, good, Policy.CLOUD)
    v_bad = await gate.verify(space, drifted, Policy.CLOUD)
    assert v_good.cleared and v_good.regime is Reference.CLOUD
    assert v_good.key.reference == identity(anchor) and v_good.coverage is Coverage.FULL
    assert not v_bad.passed and v_bad.key.reference == identity(anchor)
    assert local.calls == 0  # under cloud, no local vector is involved


async def test_cloud_anchor_down_fails_over_to_a_cleared_peer(gate):
    anchor = cloud("or:gamma", upstream="gamma")
    peer = cloud("or:alpha", upstream="alpha")
    newcomer = cloud("or:beta", upstream="beta")
    space = cloud_space("or:gamma")
    for p in (anchor, peer, newcomer):
        gate.attach(p)
    assert (await gate.verify(space, peer, Policy.CLOUD)).cleared
    anchor.down = True
    v = await gate.verify(space, newcomer, Policy.CLOUD)
    assert v.cleared and v.key.reference == identity(peer)

    # With the anchor down and no cleared peer, nothing is cleared (never a silent pass).
    lonely = Gate(gate.verdicts.path.parent.parent / "other", now=lambda: 1.0)
    for p in (anchor, cloud("or:zeta", upstream="zeta")):
        lonely.attach(p)
    with pytest.raises(GateUnavailable) as err:
        await lonely.verify(space, cloud("or:eta", upstream="eta"), Policy.CLOUD)
    assert "or:gamma" in err.value.attempts


async def test_sole_cloud_provider_gets_reduced_coverage_stated_plainly(gate):
    sole = cloud("or:gamma", upstream="gamma")
    space = cloud_space("or:gamma")
    v = await gate.verify(space, sole, Policy.CLOUD)
    assert v.cleared and v.coverage is Coverage.REDUCED and v.regime is Reference.CLOUD
    assert not v.cosines and v.widths_seen == (WIDTH,)
    line = v.status_line()
    assert "REDUCED COVERAGE" in line and "only the vector width" in line
    assert "upstream pin (gamma)" in line and "serving stack" in line and "golden" in line
    assert gate.golden_for(space) is not None  # the table's first build records them
    assert line in gate.status_lines(space)


# ------------------------------------------------------------------------------ drift


class Sleeps:
    """An injected clock for the re-probe loop: each sleep advances the wall clock."""

    def __init__(self, wall: WallClock):
        self.wall, self.slept = wall, []

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.wall.t += s
        await asyncio.sleep(0)


async def test_golden_drift_quarantines_at_once_and_notifies(tmp_path, wall):
    sleeps = Sleeps(wall)
    gate = Gate(tmp_path, now=wall, clock=sleeps, recheck_interval_s=600)
    sole = cloud("or:gamma", upstream="gamma")
    space = cloud_space("or:gamma")
    events = []
    gate.add_listener(events.append)
    v = await gate.verify(space, sole, Policy.CLOUD)
    decided = v.decided_at

    await gate.run_rechecks(rounds=2)  # two clean rounds: last good check moves forward
    assert sleeps.slept == [600, 600]
    good = gate.verdict_for(space, sole)
    assert good.cleared and good.last_good_check == decided + 1200

    sole.stack = rotated_cjk(0.89)  # the upstream redeploys another quantization, same pin
    await gate.run_rechecks(rounds=1)
    q = gate.verdict_for(space, sole)
    assert q.status is Status.QUARANTINED and not gate.is_cleared(space, sole)
    assert q.last_good_check == decided + 1200 and q.revoked_at == decided + 1800
    assert "golden" in q.revoked_reason and q.revocation.min_cosine == pytest.approx(0.89, abs=1e-3)
    assert [e.kind for e in events] == ["cleared", "quarantined"]
    assert events[-1].provider_id == sole.id and events[-1].verdict.verdict_id == v.verdict_id
    with pytest.raises(NotCleared, match="quarantined"):
        GateClearance(gate).check(space, Provenance(sole.id, v.verdict_id))
    # A restart keeps the quarantine.
    assert Gate(tmp_path, now=wall).verdict_for(space, sole).status is Status.QUARANTINED


async def test_a_forced_refusal_revokes_the_earlier_clearance_of_the_same_stack_only(gate):
    gate.attach(FakeEncoder("local:ref"))
    cand = cloud("openrouter:fake@a", upstream="a")
    first = await gate.verify(local_space(), cand, Policy.AGGREGATE)
    cand.stack = rotated_all(0.95)  # the upstream drifted behind the same pin
    refused = await gate.verify(local_space(), cand, Policy.AGGREGATE, force=True)
    assert not refused.passed
    old = gate.verdict_by_id(first.verdict_id)
    assert old.status is Status.QUARANTINED and refused.verdict_id in old.revoked_reason
    assert old.last_good_check == first.last_good_check  # the audit's window starts there
    # The same id re-pinned is another provider: its refusal leaves the old pin's rows alone.
    kept = await gate.verify(local_space(), cloud("openrouter:x", upstream="a"), Policy.AGGREGATE)
    repinned = cloud("openrouter:x", upstream="b", stack=rotated_all(0.95))
    assert not (await gate.verify(local_space(), repinned, Policy.AGGREGATE)).passed
    assert gate.verdict_by_id(kept.verdict_id).revoked_at is None


async def test_reprobe_after_reconnect_catches_a_changed_stack(gate):
    ref = FakeEncoder("local:ref")
    await gate.verify(local_space(), ref, Policy.AGGREGATE)  # records golden vectors
    cand = FakeEncoder("sidecar:gpu1")
    assert (await gate.verify(local_space(), cand, Policy.AGGREGATE)).cleared
    heard = []

    async def listener(event):
        heard.append(event)

    gate.add_listener(listener)

    back = FakeEncoder("sidecar:gpu1", stack=rotated_all(0.95))  # reconnects, other stack
    [after] = await gate.on_reconnect(back)
    assert after.status is Status.QUARANTINED and heard[0].kind == "quarantined"
    assert not gate.is_cleared(local_space(), back)


async def test_an_unreachable_providers_recheck_is_deferred_until_it_answers(gate):
    gate.attach(FakeEncoder("local:ref"))
    cand = FakeEncoder("sidecar:gpu1")
    v = await gate.verify(local_space(), cand, Policy.AGGREGATE)
    cand.down = True
    assert await gate.recheck_all() == []  # deferred, not dropped: it stays uncleared meanwhile
    same = gate.verdict_for(local_space(), cand)
    assert same.cleared and same.last_good_check == v.last_good_check
    assert gate.awaiting_reprobe(cand) and not gate.is_cleared(local_space(), cand)
    cand.down = False
    [back] = await gate.recheck_all()
    assert back.cleared and gate.is_cleared(local_space(), cand)


async def test_recheck_compares_with_the_live_reference_too(gate):
    """No golden vectors exist (the reference itself was never verified), yet a drifted
    candidate is caught against the live reference it was judged against."""
    ref = FakeEncoder("local:ref")
    gate.attach(ref)
    cand = FakeEncoder("sidecar:gpu1")
    space = local_space()
    assert (await gate.verify(space, cand, Policy.AGGREGATE)).cleared
    gate.golden.folder.joinpath(f"{space.key}.json").unlink()
    cand.stack = rotated_all(0.97)
    [after] = await gate.recheck_all()
    assert after.status is Status.QUARANTINED and "local:ref" in after.revoked_reason


async def test_a_drifted_reference_judges_nobody(gate):
    ref = FakeEncoder("local:ref")
    space = local_space()
    await gate.verify(space, ref, Policy.AGGREGATE)  # golden recorded from the true stack
    ref.stack = rotated_all(0.9)
    with pytest.raises(GateUnavailable, match="golden"):
        await gate.verify(space, FakeEncoder("sidecar:gpu1", stack=rotated_all(0.9)), Policy.AGGREGATE)
    assert gate.verdict_for(space, ref).status is Status.QUARANTINED


# ------------------------------------------------------------------------------ second lock


async def test_clearance_refuses_every_provenance_but_a_cleared_verdict(gate):
    ref = FakeEncoder("local:ref")
    gate.attach(ref)
    space = local_space()
    ok = await gate.verify(space, FakeEncoder("sidecar:ok"), Policy.AGGREGATE)
    bad = await gate.verify(space, FakeEncoder("sidecar:bad", stack=rotated_all(0.9)), Policy.AGGREGATE)
    clearance = GateClearance(gate)
    clearance.check(space, Provenance("sidecar:ok", ok.verdict_id))
    other_space = Space(table="docs", model="fake/encoder", width=WIDTH, reference="local:ref")
    cases = {
        "no gate verdict": Provenance("sidecar:ok", None),
        "unknown": Provenance("sidecar:ok", "v-nope"),
        "issued to": Provenance("sidecar:bad", ok.verdict_id),
        "refused": Provenance("sidecar:bad", bad.verdict_id),
    }
    for reason, prov in cases.items():
        with pytest.raises(NotCleared, match=reason):
            clearance.check(space, prov)
    with pytest.raises(NotCleared, match="not this table's space"):
        clearance.check(other_space, Provenance("sidecar:ok", ok.verdict_id))


async def test_gate_events_for_pool_listeners(gate):
    gate.attach(FakeEncoder("local:ref"))
    events = []
    remove = gate.add_listener(lambda e: events.append((e.kind, e.provider_id)))
    await gate.verify(local_space(), FakeEncoder("a"), Policy.AGGREGATE)
    await gate.verify(local_space(), FakeEncoder("b", stack=rotated_all(0.5)), Policy.AGGREGATE)
    remove()
    await gate.verify(local_space(), FakeEncoder("c"), Policy.AGGREGATE)
    assert events == [("cleared", "a"), ("refused", "b")]


# ------------------------------------------------------------------------------ wiring


async def test_router_predicate_gates_embedding_roles_only(gate):
    gate.attach(FakeEncoder("local:ref"))
    space = local_space()
    ok, bad = FakeEncoder("sidecar:ok"), FakeEncoder("sidecar:bad", stack=rotated_all(0.9))
    await gate.verify(space, ok, Policy.AGGREGATE)
    await gate.verify(space, bad, Policy.AGGREGATE)
    is_cleared = gate.for_router(lambda role: space if role is Role.CODE_EMBEDDING else None)
    assert is_cleared(Role.CODE_EMBEDDING, ok) and not is_cleared(Role.CODE_EMBEDDING, bad)
    assert not is_cleared(Role.EMBEDDING, ok)  # the docs table has no space yet
    assert is_cleared(Role.RERANKER, bad)  # stateless: writes nothing


async def test_bound_registry_hears_quarantines_and_reconnects_are_reprobed(gate):
    registry = ProviderRegistry()
    ref, gpu = FakeEncoder("local:ref"), FakeEncoder("sidecar:gpu1")
    registry.add(ref)
    unbind = gate.bind(registry)
    space = local_space()
    await gate.verify(space, ref, Policy.AGGREGATE)
    registry.add(gpu)
    assert (await gate.verify(space, gpu, Policy.AGGREGATE)).cleared

    registry.remove(gpu.id)
    back = FakeEncoder("sidecar:gpu1", stack=rotated_all(0.95))  # reconnects on another stack
    registry.add(back)
    assert not gate.is_cleared(space, back)  # not before its re-probe has run
    await gate.drain()
    assert gate.verdict_for(space, back).status is Status.QUARANTINED
    assert registry.health(back.id).state == HealthState.QUARANTINED
    assert not registry.available(back.id)

    fixed = FakeEncoder("sidecar:gpu1")
    registry.remove(back.id)
    registry.add(fixed)
    assert (await gate.verify(space, fixed, Policy.AGGREGATE, force=True)).cleared
    assert registry.available(fixed.id)
    unbind()
