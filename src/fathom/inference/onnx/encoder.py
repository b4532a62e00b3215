"""The in-process encoder on ONNX Runtime: the default model with no torch in the process.

It owns running one model folder's built graph (`cache.model_file`) with onnxruntime and
tokenising with the `tokenizers` package from the folder's `tokenizer.json`, the way
sentence-transformers does (special tokens, truncation to the model's `max_seq_length`,
padding to the longest text of a batch), so its fp32 vectors are the torch encoder's
(minimum cosine 1.0000 over hundreds of code chunks; `tests/inference/test_onnx_encoder.py`).

Identity: the fp32 graph serves under the same provider id as the torch encoder of the same
model (`local:<model>`): the runtime, like the device, is not part of what a vector means.
That is not taken on trust: a table's golden vectors were recorded by whichever runtime built
it, and the gate re-probes the in-process encoder against them in every new process before it
writes. A quantized variant is another encoder (`local:<model>+int8`), judged against the
table's reference like any other provider.

It refuses, like the torch encoder, a width other than the configured one
(`EncoderWidthMismatch`), a token limit past the model's positions, and anything the graph
builder cannot translate (`UnsupportedModel`). It reaches the network only through
`weights`, for the default model named by its Hub name and on no disk yet.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from fathom.errors import ConfigError, ProviderUnavailable
from fathom.inference.local import (
    EncoderWidthMismatch,
    ModelLoadError,
    TokenizerCounter,
    configured_max_tokens,
    local_provider_id,
)
from fathom.inference.onnx.cache import VARIANTS, model_file
from fathom.inference.onnx.graph import UnsupportedModel, read_shape
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.inference.weights import model_folder
from fathom.roles import EMBEDDING_ROLES, Role

log = logging.getLogger(__name__)

# Padded tokens in one forward pass. A batch's activations grow with rows x tokens (the
# attention scores with rows x tokens^2); past about a thousand tokens they spill out of the
# CPU's caches and each token costs more: on 2 cores the same 200 code chunks took 1.8x the
# CPU 64 at a time that they took 4 at a time (docs/benchmarks.md, "Index cost").
BATCH_TOKENS = 1024


def variant_provider_id(model_name: str, variant: str) -> str:
    """The provider id of one variant: fp32 is the model's own in-process id (the torch
    encoder's); a quantized one names its variant, so the gate judges it apart."""
    base = local_provider_id(model_name)
    return base if variant == "fp32" else f"{base}+{variant}"


class OnnxEncoder(Provider):
    """A sentence-transformers BERT folder run by onnxruntime, as a LOCAL `Provider`.

    Loads lazily (or via `load()`), once; builds the graph file on first use of a folder.
    Encoding runs in a worker thread, one batch at a time (onnxruntime already spreads one
    batch over every core)."""

    def __init__(
        self,
        model_path: str,
        *,
        model_name: str,
        width: int,
        cache_dir: Path,
        variant: str = "fp32",
        batch_size: int = 64,
        roles: Iterable[Role] = EMBEDDING_ROLES,
        max_tokens: int | None = None,
        threads: int | None = None,
    ):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if variant not in VARIANTS:
            raise ConfigError(f"unknown ONNX variant {variant!r}: use one of {', '.join(VARIANTS)}")
        self.model_path, self.model_name = str(model_path), model_name
        self.width, self.batch_size, self.variant = int(width), int(batch_size), variant
        self.cache_dir = Path(cache_dir)
        self.threads = threads  # intra-op threads; None: onnxruntime's own (one per core)
        self.max_tokens = max_tokens or configured_max_tokens(self.model_path)
        self.info = ProviderInfo(
            id=variant_provider_id(model_name, variant),
            kind=Kind.LOCAL,
            roles=frozenset(roles),
            model=model_name,
            width=self.width,
            max_tokens=self.max_tokens,
        )
        self._session: Any = None
        self._tokenizer: Any = None
        self._tokens: TokenizerCounter | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self.texts_encoded = 0  # counters a test or a benchmark reads, never a control input
        self.calls = 0

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> Any:
        """Build (first time) and open the graph, and check its width and token limit."""
        if self._session is not None:
            return self._session
        with self._load_lock:
            if self._session is not None:
                return self._session
            # The default model by its Hub name: the package's folder, the cache, or a download.
            folder = model_folder(self.model_path, self.cache_dir)
            if not folder.is_dir():
                raise ModelLoadError(self.model_name, self.model_path, "no such folder")
            shape = read_shape(folder)
            if shape.hidden != self.width:
                raise EncoderWidthMismatch(self.model_name, self.model_path, self.width, shape.hidden)
            limit = self.max_tokens or configured_max_tokens(str(folder)) or shape.max_positions
            if limit > shape.max_positions:
                raise ConfigError(
                    f"FATHOM_LOCAL_MAX_TOKENS={limit} is more than {self.model_name} can "
                    f"read ({shape.max_positions} positions); set it to "
                    f"{shape.max_positions} or less, or unset it for the model's own"
                )
            try:
                self._tokenizer = _tokenizer(folder, limit)
                self._session = _session(model_file(folder, self.cache_dir, self.variant), self.threads)
            except (UnsupportedModel, ConfigError):
                raise
            except Exception as exc:  # noqa: BLE001 - any loader failure becomes one typed error
                raise ModelLoadError(
                    self.model_name, self.model_path, f"{type(exc).__name__}: {exc}"
                ) from exc
            self.max_tokens = limit
            if self.info.max_tokens is None:  # a download's folder was read only now
                self.info = replace(self.info, max_tokens=limit)
            return self._session

    def token_counter(self) -> TokenizerCounter:
        """This encoder's tokenizer and token limit, for chunking (the same counter, and the
        same key, as the torch encoder's: both cut a file into the same chunks)."""
        if self._tokens is None:
            self.load()
            assert self.max_tokens is not None
            self._tokens = TokenizerCounter(
                self._tokenizer,
                self.max_tokens,
                key=f"{local_provider_id(self.model_name)}@{self.max_tokens}",
            )
        return self._tokens

    def encode_sync(self, texts: Sequence[str]) -> np.ndarray:
        """Encode in the calling thread: batches of similar length (less padding to compute),
        each padded to its longest text and held to `BATCH_TOKENS`, rows returned in the
        callers' order."""
        if not texts:
            return np.zeros((0, self.width), dtype=np.float32)
        session = self.load()
        out = np.empty((len(texts), self.width), dtype=np.float32)
        with self._encode_lock:
            try:
                encodings = self._tokenizer.encode_batch([str(t) for t in texts])
                order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
                for rows in _batches(order, [len(encodings[i].ids) for i in order], self.batch_size):
                    width = len(encodings[rows[0]].ids)  # the longest: sorted longest first
                    ids = np.zeros((len(rows), width), dtype=np.int64)
                    mask = np.zeros((len(rows), width), dtype=np.int64)
                    for r, i in enumerate(rows):
                        n = len(encodings[i].ids)
                        ids[r, :n] = encodings[i].ids
                        mask[r, :n] = 1
                    out[rows] = session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})[0]
            except Exception as exc:  # noqa: BLE001
                raise ProviderUnavailable(
                    f"local encoder {self.id} failed: {type(exc).__name__}: {exc}"
                ) from exc
            self.calls += 1
            self.texts_encoded += len(texts)
        return out

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await asyncio.to_thread(self.encode_sync, list(texts))  # CPU-bound: off the loop

    async def embed_query(self, query: str) -> np.ndarray:
        row: np.ndarray = (await self.embed([query]))[0]  # the one text's vector
        return row


def _batches(order: list[int], lengths: list[int], most: int) -> Iterator[list[int]]:
    """`order` (longest first, `lengths` its token counts) cut into batches of at most `most`
    texts and `BATCH_TOKENS` padded tokens: long texts go fewer at a time, short ones more."""
    start = 0
    while start < len(order):
        n = max(1, min(most, BATCH_TOKENS // max(1, lengths[start])))
        yield order[start : start + n]
        start += n


def _tokenizer(folder: Path, limit: int) -> Any:
    """The folder's fast tokenizer, truncating to `limit` tokens (special ones included) with
    no padding (the encoder pads each batch itself), as sentence-transformers calls it."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=limit, strategy="longest_first")
    return tok


def _session(path: Path, threads: int | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: shape-merge notices are not the user's concern
    if threads is not None:
        options.intra_op_num_threads = threads
    # Idle pool threads sleep instead of spinning for the next op: spinning burns a core the
    # walk, the store's writes and other processes want, for no more vectors (on 2 cores,
    # about a sixth of the encoder's CPU per chunk; docs/benchmarks.md, "Index cost").
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
