"""Shared set-up for the end-to-end acceptance tests (routing, gate, budget) through the real
path: the `Fathom` service, its gate, budget, router and pull pool, the LanceDB store, the
in-process MiniLM encoder, and cloud routes to the OpenRouter emulator over HTTP.

The test plays the sidecar: it holds the key and adds the cloud routes to the service's
registry (`cloud_route`), each wrapped in the service's `BudgetedProvider`, as the hub does.

Real encoders are deterministic, and the gate's probe set (18 texts, some past 512 tokens) is
by far the most expensive thing these tests send. So, as `tests/inference/gate_fixtures.py` does for
in-process encoders, both sides remember what they already computed for a text: `MemoLocal`
wraps the session's local encoder at the Provider cut-off, and `memo_emulator_encoders`
puts remembering wrappers around the emulator's encoder variants. Every vector is still the
one the real model produced for that text, every request still goes over HTTP and through the
emulator's routing, limits and counters; a re-probe simply costs nothing after the first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from fathom.config import Settings
from fathom.inference.budget import BudgetedProvider, CloudBudget
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider
from fathom.inference.provider import Provider
from fathom.roles import EMBEDDING_ROLES
from fathom.service import Fathom

MINILM = "sentence-transformers/all-minilm-l6-v2"
E5 = "intfloat/multilingual-e5-small"
KEY = "sk-or-v1-e2e-acceptance-test"


class MemoLocal(Provider):
    """The in-process encoder, remembering its vectors per text (same id, model, width)."""

    def __init__(self, inner: Provider):
        self.inner = inner
        self.info = inner.info
        self.batch_size = getattr(inner, "batch_size", 32)
        self.memo: dict[str, np.ndarray] = {}
        self.texts_embedded = 0  # texts this provider was asked for (memoized or not)
        self._lock = threading.Lock()

    def load(self) -> None:
        load = getattr(self.inner, "load", None)
        if callable(load):
            load()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        self.texts_embedded += len(texts)
        todo = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if todo:
            vectors = await self.inner.embed(todo)
            with self._lock:
                for t, v in zip(todo, vectors):
                    self.memo[t] = np.asarray(v, dtype=np.float32)
        return np.stack([self.memo[t] for t in texts])


@pytest.fixture(scope="session")
def memo_local(local_encoder) -> MemoLocal:
    return MemoLocal(local_encoder)


@pytest.fixture(scope="session")
def memo_emulator_encoders() -> Iterator[None]:
    """Remembering wrappers around the emulator's encoder variants for this session's tests;
    the real encoders go back into the emulator's cache afterwards."""
    from fathom.devtools.emulator import encoders as emu

    saved = {v: emu._cache.get(v) for v in emu.VARIANTS}
    real: dict[str, emu.Encoder] = {}

    def remembering(variant: str):
        memo: dict[str, np.ndarray] = {}

        def encode(texts: list[str]) -> np.ndarray:
            todo = [t for t in dict.fromkeys(texts) if t not in memo]
            if todo:
                if variant not in real:
                    real[variant] = saved[variant] or emu._build(variant)
                for t, v in zip(todo, real[variant].encode(todo)):
                    memo[t] = v
            return np.stack([memo[t] for t in texts]) if texts else np.zeros((0, emu.WIDTH), np.float32)

        return emu.Encoder(variant, encode)

    with emu._cache_lock:
        for v in emu.VARIANTS:
            emu._cache[v] = remembering(v)
    try:
        yield
    finally:
        with emu._cache_lock:
            for v in emu.VARIANTS:
                back = real.get(v) or saved[v]
                if back is not None:
                    emu._cache[v] = back
                else:
                    emu._cache.pop(v, None)


def make_fathom(data_dir: Path, encoder: Provider, *, budget: CloudBudget | None = None) -> Fathom:
    return Fathom(Settings(data_dir=data_dir), encoder=encoder, budget=budget)


def cloud_route(
    fathom: Fathom,
    client: OpenRouterClient,
    upstream: str | None,
    *,
    model: str = MINILM,
    provider_id: str | None = None,
    register: bool = True,
    roles=EMBEDDING_ROLES,
) -> BudgetedProvider:
    """A cloud embedding route to the emulator, under the service's budget; registered in the
    service's registry (what the hub does when a sidecar reports it) unless `register=False`."""
    inner = OpenRouterProvider(
        client, model=model, roles=roles, upstream=upstream, width=384, provider_id=provider_id
    )
    route = BudgetedProvider(inner, fathom.budget)
    if register:
        fathom.registry.add(route)
    return route


def write_functions(root: Path, files: int, per_file: int, *, tag: str = "", docstrings: bool = True) -> Path:
    """A Python project of `files` x `per_file` small, distinct functions (each one a code
    chunk, and with `docstrings` its docstring a docs chunk)."""
    for f in range(files):
        lines = [f'"""Module {tag}{f}: helpers for area {f}."""', ""] if docstrings else []
        for i in range(per_file):
            lines += [f"def task_{tag}{f}_{i}(value, factor={i + 1}):"]
            if docstrings:
                doc = f"Scale value by factor {i} for stage {f}{tag} and add offset {f * 100 + i}."
                lines += [f'    """{doc}"""']
            lines += [
                f"    total = value * factor + {f * 100 + i}",
                "    return total",
                "",
                "",
            ]
        path = root / "pkg" / f"mod_{tag}{f}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines))
    return root


def all_rows(fathom: Fathom, project: str, table: str) -> list[str]:
    """Every chunk id in the table's active slot, one per row (duplicates kept)."""
    from fathom.index.store import Slot

    return [e.chunk_id for e in fathom.store.manifest(project, table, Slot.ACTIVE)]
