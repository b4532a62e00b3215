"""The built ONNX files: where they live, when they are stale, and the int8 variants.

A model folder's graph is built once (`graph.build`, about a second) and kept as a file under
the model cache (`FATHOM_MODEL_CACHE`, default `~/.cache/fathom/models`), named by a key over
the builder's version, the folder's configs and its weights file's path, size and
modification time (not its content hash: hashing 90 MB on every start would cost more than
loading the file). A stale file can therefore only come from weights rewritten in place with
the same size and time; the gate's golden vectors catch that too, since a re-probe compares
the encoder's answers with the ones its table was built from.

Writes are atomic (a temporary file renamed into place) under a file lock, so two processes
starting at once build once and never read half a file.

The quantized variants (`VARIANTS`) are dynamic int8 quantizations of the fp32 file
(onnxruntime's `quantize_dynamic`, per channel, signed weights). Whether a variant's vectors
may be written into a table is not decided here: the gate judges it like any other provider.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path

from fathom.errors import ConfigError
from fathom.inference.onnx.graph import BUILDER_VERSION, build, read_shape

log = logging.getLogger(__name__)

# What each variant quantizes. "int8" keeps each layer's feed-forward output projection in
# fp32: on code chunks that one matrix holds most of the error (min cosine against fp32 0.994
# with it kept, 0.987 without; docs/benchmarks.md). "int8-all" quantizes every weight matrix.
VARIANTS: dict[str, str | None] = {"fp32": None, "int8": "keep-ffn-out", "int8-all": "all"}


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fathom" / "models"


def model_key(folder: Path) -> str:
    """A short key that changes whenever the folder's weights or configs, or the builder, do."""
    h = hashlib.sha256(f"builder {BUILDER_VERSION}\n".encode())
    weights = folder / "model.safetensors"
    st = weights.stat()
    h.update(f"{weights.resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    for name in ("config.json", "modules.json", "1_Pooling/config.json", "sentence_bert_config.json"):
        path = folder / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-") + b"\0")
    return h.hexdigest()[:16]


def model_file(folder: Path, cache: Path, variant: str = "fp32") -> Path:
    """The ONNX file of `folder` in `variant`, built (and quantized) first if it is missing."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown ONNX variant {variant!r}: use one of {', '.join(VARIANTS)}")
    read_shape(folder)  # an unsupported folder is refused before anything is written
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.resolve().name)[:40] or "model"
    target = cache / f"{slug}-{model_key(folder)}-{variant}.onnx"
    if target.is_file():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the model cache {cache}: {exc}. Set FATHOM_MODEL_CACHE to a writable folder"
        ) from exc
    from filelock import FileLock

    with FileLock(str(target) + ".lock"):
        if target.is_file():  # another process built it while this one waited
            return target
        if variant == "fp32":
            _write_fp32(folder, target)
        else:
            _write_quantized(model_file(folder, cache, "fp32"), target, VARIANTS[variant])
    return target


def _write_fp32(folder: Path, target: Path) -> None:
    import onnx

    log.info("building the ONNX graph of %s into %s", folder, target)
    model = build(folder)
    with _atomic(target) as tmp:
        onnx.save_model(model, str(tmp))


def _write_quantized(source: Path, target: Path, mode: str | None) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    log.info("quantizing %s to int8 (%s) into %s", source, mode, target)
    graph = onnx.load(str(source), load_external_data=False).graph
    # Only weight matrices (constant right-hand sides, named `*.wT`): the attention products
    # multiply two activations and would lose most of their precision.
    exclude = [
        n.name for n in graph.node if n.op_type == "MatMul" and not any(i.endswith(".wT") for i in n.input)
    ]
    if mode == "keep-ffn-out":
        exclude += [
            n.name
            for n in graph.node
            if n.op_type == "MatMul" and any(i.startswith("lout") and i.endswith(".wT") for i in n.input)
        ]
    # onnxruntime advises "pre-processing" on the root logger at every call: advice for its
    # static quantization of vision models, noise on a CLI's stderr here.
    root = logging.getLogger()
    hush = _Hush()
    root.addFilter(hush)
    try:
        with _atomic(target) as tmp:
            quantize_dynamic(
                str(source),
                str(tmp),
                op_types_to_quantize=["MatMul"],
                nodes_to_exclude=exclude,
                per_channel=True,
                weight_type=QuantType.QInt8,
            )
    finally:
        root.removeFilter(hush)


class _Hush(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


class _atomic:
    """A temporary path beside `target`, renamed onto it when the block succeeds."""

    def __init__(self, target: Path):
        self.target = target

    def __enter__(self) -> Path:
        fd, name = tempfile.mkstemp(dir=self.target.parent, prefix=".building-", suffix=".onnx")
        os.close(fd)
        self.tmp = Path(name)
        return self.tmp

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            os.replace(self.tmp, self.target)
        else:
            self.tmp.unlink(missing_ok=True)
