"""A local reranker: a sentence-transformers `CrossEncoder` running in this process.

This module owns loading one cross-encoder model folder by path (offline), checking that it
is a cross-encoder (a sequence-classification model with one output, not a bi-encoder folder
that would load with a freshly initialised, meaningless head), and scoring (query, document)
pairs off the event loop. A sidecar on a GPU host serves the reranker role with it
(`--serve reranker=in-process,model=PATH`), so the best ranking needs no cloud.

It refuses to fetch a model (`HF_HUB_OFFLINE=1` is set before sentence-transformers is
imported), to embed (a cross-encoder scores pairs; it has no vector space), and to return a
score list of another length than the documents it was given.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.errors import ConfigError, ProviderUnavailable
from fathom.inference.local import ModelLoadError
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.roles import Role

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import CrossEncoder


class NotACrossEncoder(ConfigError):
    """The folder holds a model that is not a one-output sequence classifier."""

    def __init__(self, path: str, found: str):
        self.path, self.found = path, found
        super().__init__(
            f"{path} is not a cross-encoder (its config names {found}); point model= at a "
            f"cross-encoder folder, a *ForSequenceClassification model with one label such as "
            f"cross-encoder/ms-marco-MiniLM-L6-v2 saved locally"
        )


class CrossEncoderReranker(Provider):
    """A cross-encoder model folder as a local `Provider` of the reranker role.

    The model loads lazily on first use (or eagerly via `load()`), once. Scoring runs in a
    worker thread under a lock, like the local encoder: torch already uses every core for one
    batch, so concurrent batches would only thrash."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        model_name: str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        provider_id: str | None = None,
    ):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.model_path = str(model_path)
        self.model_name = model_name or Path(self.model_path).name or self.model_path
        self.device = device
        self.batch_size = int(batch_size)
        self.info = ProviderInfo(
            id=provider_id or f"cross-encoder:{self.model_name}",
            kind=Kind.LOCAL,
            roles=frozenset({Role.RERANKER}),
            model=self.model_name,
            width=None,
        )
        self._model: CrossEncoder | None = None
        self._load_lock = threading.Lock()
        self._score_lock = threading.Lock()
        self.pairs_scored = 0  # read by tests and benchmarks, never a control input

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> CrossEncoder:
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._model is not None:
                return self._model
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            check_cross_encoder(self.model_path)
            try:
                from sentence_transformers import CrossEncoder
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                model: CrossEncoder = CrossEncoder(self.model_path, device=self.device, local_files_only=True)
            except Exception as exc:  # noqa: BLE001 - any loader failure becomes one typed error
                raise ModelLoadError(
                    self.model_name, self.model_path, f"{type(exc).__name__}: {exc}"
                ) from exc
            if getattr(model, "num_labels", 1) != 1:
                raise NotACrossEncoder(self.model_path, f"{model.num_labels} labels")
            self._model = model
            return model

    def score_sync(self, query: str, documents: Sequence[str]) -> list[float]:
        """Score in the calling thread: one relevance score per document, in their order."""
        docs = list(documents)
        if not docs:
            return []
        model = self.load()
        with self._score_lock:
            try:
                scores = model.predict(
                    [(query, d) for d in docs],
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except Exception as exc:  # noqa: BLE001
                raise ProviderUnavailable(
                    f"cross-encoder {self.id} failed: {type(exc).__name__}: {exc}"
                ) from exc
            self.pairs_scored += len(docs)
        out = [float(s) for s in list(scores)]
        if len(out) != len(docs):
            raise ProviderUnavailable(
                f"cross-encoder {self.id} returned {len(out)} scores for {len(docs)} documents"
            )
        return out

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        # CPU- or GPU-bound: never on the event loop.
        return await asyncio.to_thread(self.score_sync, query, list(documents))


def check_cross_encoder(path: str) -> None:
    """Refuse a folder whose config is not a sequence classifier, before torch loads it."""
    import json

    config = Path(path) / "config.json"
    try:
        data: Any = json.loads(config.read_text())
    except FileNotFoundError:
        raise ModelLoadError(Path(path).name, path, "no config.json in the folder") from None
    except (OSError, ValueError) as exc:
        raise ModelLoadError(Path(path).name, path, f"unreadable config.json: {exc}") from None
    archs = data.get("architectures") or [] if isinstance(data, dict) else []
    if not any(str(a).endswith("ForSequenceClassification") for a in archs):
        raise NotACrossEncoder(path, ", ".join(map(str, archs)) or "no architecture")
