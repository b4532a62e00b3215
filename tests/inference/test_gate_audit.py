"""Provenance through the real LanceDB store: the gate as the store's second lock, the audit
of rows per verdict and of the rows a quarantined provider wrote since its last good check,
and re-embedding exactly those with a cleared encoder."""

from __future__ import annotations

import numpy as np
import pytest

from fathom.errors import NotCleared
from fathom.index.chunk import Chunk
from fathom.index.store import LanceStore
from fathom.inference.gate import Gate, GateClearance, Status, audit, reembed
from fathom.policy import Policy
from fathom.space import Provenance, Space
from tests.inference.gate_fixtures import WIDTH, FakeEncoder, base_vector, rotated_all


class WallClock:
    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def chunks(prefix: str, n: int) -> list[Chunk]:
    return [
        Chunk(
            path=f"{prefix}.py",
            language="python",
            table="code",
            start_line=i * 10 + 1,
            end_line=i * 10 + 5,
            symbol=f"{prefix}_{i}",
            text=f"def {prefix}_{i}(): return {i}",
        )
        for i in range(n)
    ]


async def write(store, provider, verdict, rows):
    vectors = await provider.embed([c.text for c in rows])
    store.write("proj", "code", rows, vectors, Provenance(provider.id, verdict.verdict_id))


async def test_audit_lists_rows_since_last_good_check_and_reembed_repairs_them(tmp_path):
    wall = WallClock()
    gate = Gate(tmp_path / "data", now=wall)
    store = LanceStore(tmp_path / "lance", GateClearance(gate), clock=wall)
    space = Space(table="code", model="fake/encoder", width=WIDTH, reference="local:ref")
    ref, gpu = FakeEncoder("local:ref"), FakeEncoder("sidecar:gpu1")
    v_ref = await gate.verify(space, ref, Policy.AGGREGATE)
    v_gpu = await gate.verify(space, gpu, Policy.AGGREGATE)
    store.open_table("proj", "code", space)

    early, before, after = chunks("early", 3), chunks("before", 2), chunks("after", 4)
    await write(store, ref, v_ref, early)
    wall.t += 10
    await write(store, gpu, v_gpu, before)
    wall.t += 100
    await gate.recheck_all()  # a good check: rows before it are vouched for
    last_good = wall.t
    wall.t += 50
    await write(store, gpu, v_gpu, after)
    gpu.stack = rotated_all(0.95)  # its stack changes behind the same id
    wall.t += 50
    await gate.recheck_all()
    assert gate.verdict_for(space, gpu).status is Status.QUARANTINED

    # The second lock: the quarantined verdict writes nothing more.
    with pytest.raises(NotCleared, match="quarantined"):
        await write(store, gpu, v_gpu, chunks("late", 1))

    report = audit(gate, store, "proj")
    counts = {(c.provider_id, c.status): c.rows for c in report.counts}
    assert counts == {("local:ref", "cleared"): 3, ("sidecar:gpu1", "quarantined"): 6}
    [suspect] = report.suspects
    assert suspect.provider_id == "sidecar:gpu1" and suspect.last_good_check == last_good
    assert set(suspect.chunk_ids) == {c.chunk_id for c in after}
    assert suspect.paths == ("after.py",)
    assert any("since its last good check" in line for line in report.lines())

    # Re-embedding needs a cleared encoder...
    with pytest.raises(NotCleared):
        await reembed(gate, store, "proj", gpu)
    # ...and repairs exactly the suspect rows.
    done = await reembed(gate, store, "proj", ref)
    assert done.rows == {"code": 4} and done.skipped == {"code": 0}
    again = audit(gate, store, "proj")
    assert again.suspect_count == 0
    counts = {(c.provider_id, c.status): c.rows for c in again.counts}
    assert counts == {("local:ref", "cleared"): 7, ("sidecar:gpu1", "quarantined"): 2}
    for c in after:
        hit = store.vector_search("proj", "code", base_vector(c.text), k=1)[0]
        assert hit.chunk_id == c.chunk_id and hit.provider_id == "local:ref"
        assert hit.score == pytest.approx(1.0, abs=1e-5)


async def test_store_with_gate_clearance_refuses_unverified_writers(tmp_path):
    wall = WallClock()
    gate = Gate(tmp_path / "data", now=wall)
    store = LanceStore(tmp_path / "lance", GateClearance(gate), clock=wall)
    space = Space(table="code", model="fake/encoder", width=WIDTH, reference="local:ref")
    store.open_table("proj", "code", space)
    rows = chunks("x", 2)
    vectors = np.stack([base_vector(c.text) for c in rows]).astype(np.float32)
    with pytest.raises(NotCleared):
        store.write("proj", "code", rows, vectors, Provenance("local:ref", None))
    gate.attach(FakeEncoder("local:ref"))
    refused = await gate.verify(space, FakeEncoder("sidecar:int8", stack=rotated_all(0.92)), Policy.AGGREGATE)
    with pytest.raises(NotCleared, match="refused"):
        store.write("proj", "code", rows, vectors, Provenance("sidecar:int8", refused.verdict_id))
    assert store.provenance_counts("proj", "code") == {}
