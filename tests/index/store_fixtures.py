"""Fixtures for the vector store: a real LanceDB store in tmp_path, a space, and chunks with
clustered vectors (the store does not embed, so vectors can be synthetic here); a real
`Clearance` keyed on (provider, verdict) (`AllowList`); the search tests' `haystack`, written
into whichever `store` the test module provides; and a gate verdict (`make_verdict`)."""

from __future__ import annotations

import numpy as np
import pytest

from fathom.errors import NotCleared
from fathom.index.chunk import Chunk
from fathom.index.store import LanceStore
from fathom.space import Provenance, Space

WIDTH = 16
REFERENCE = "local:test-encoder"
SPACE = Space(table="code", model="test-encoder", width=WIDTH, reference=REFERENCE)
DOCS_SPACE = Space(table="docs", model="test-encoder", width=WIDTH, reference=REFERENCE)
CLEARED = Provenance(provider_id=REFERENCE, verdict_id=None)


class FakeClock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self, start: float = 1_800_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def make_chunks(
    n: int, *, prefix: str = "f", table: str = "code", lines: int = 10, files: int | None = None
) -> list[Chunk]:
    """`n` chunks spread over `files` files (one per chunk by default)."""
    out = []
    for i in range(n):
        f = i % files if files else i
        start = 1 + (i // files) * lines if files else 1
        out.append(
            Chunk(
                path=f"pkg/{prefix}_{f}.py",
                language="python",
                table=table,
                start_line=start,
                end_line=start + lines - 1,
                symbol=f"{prefix}_{i}",
                text=f"def {prefix}_{i}(x):\n    return compute value {i} for the widget\n",
            )
        )
    return out


def clustered(
    n: int, *, width: int = WIDTH, clusters: int = 8, seed: int = 0, spread: float = 0.15
) -> np.ndarray:
    """Unit vectors around `clusters` centres: like real embeddings, neighbours exist."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, width))
    v = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, width))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock) -> LanceStore:
    s = LanceStore(tmp_path / "lance", clock=clock)
    yield s
    s.close()


class AllowList:
    """A real `Clearance` keyed on (provider, verdict), as the gate's is."""

    def __init__(self, allowed: set[tuple[str, str | None]]):
        self.allowed = allowed
        self.asked: list[tuple[Space, Provenance]] = []

    def check(self, space: Space, provenance: Provenance) -> None:
        self.asked.append((space, provenance))
        if (provenance.provider_id, provenance.verdict_id) not in self.allowed:
            raise NotCleared(space.table, provenance.provider_id, provenance.verdict_id)


@pytest.fixture
def haystack(store):
    """200 chunks in clusters; one holds a rare identifier but sits in an unrelated cluster."""
    chunks = make_chunks(200, files=20, lines=8)
    vecs = clustered(200, clusters=6, seed=3)
    needle = Chunk(
        "pkg/registry.py",
        "python",
        "code",
        41,
        57,
        "Registry.frobnicate_registry",
        "def frobnicate_registry(self, entries):\n    return merge(entries)\n",
    )
    needle_vec = clustered(1, clusters=1, seed=99)
    store.open_table("p", "code", SPACE)
    store.write("p", "code", [*chunks, needle], np.vstack([vecs, needle_vec]), CLEARED)
    return chunks, vecs, needle, needle_vec[0]


def make_verdict(provider_id: str, space: Space, *, decided_at: float = 1_800_000_000.0):
    from fathom.inference.gate import Coverage, Evidence, Verdict, VerdictKey, verdict_id_for
    from fathom.policy import Reference

    key = VerdictKey(
        space=space.key,
        table=space.table,
        provider_id=provider_id,
        model=space.model,
        upstream=None,
        regime=Reference.LOCAL,
        reference="self",
        width=space.width,
    )
    ev = Evidence(
        count_expected=3,
        count_seen=3,
        width_expected=space.width,
        widths_seen=(space.width,),
        finite_ok=True,
        cosines={"a": 0.999},
    )
    return Verdict(
        key=key,
        verdict_id=verdict_id_for(key, decided_at),
        passed=True,
        coverage=Coverage.FULL,
        reason="matches the reference",
        evidence=ev,
        probe_set="ps1",
        decided_at=decided_at,
        elapsed_s=0.1,
        last_good_check=decided_at,
    )
