"""Fixtures for the vector store: a real LanceDB store in tmp_path, a space, and chunks with
clustered vectors (the store does not embed, so vectors can be synthetic here)."""

from __future__ import annotations

import numpy as np
import pytest

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
