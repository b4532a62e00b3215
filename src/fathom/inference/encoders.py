"""Which in-process encoder a process gets from its settings.

It owns one choice: the runtime of the embedded encoder (`FATHOM_LOCAL_RUNTIME`: ONNX
Runtime where it can serve the model, else sentence-transformers on torch) and the optional
quantized writer beside it (`FATHOM_LOCAL_QUANTIZED`). Choosing imports neither runtime: a
process that never encodes (`fathom projects`) stays quick, and one on the ONNX runtime never
imports torch at all.

It refuses a combination that cannot work, by name, before any model loads: the ONNX runtime
on a GPU device, the ONNX runtime without onnxruntime installed, a quantized writer without
the ONNX runtime.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from fathom.errors import ConfigError
from fathom.inference.local import LocalEncoder
from fathom.inference.onnx import OnnxEncoder, UnsupportedModel
from fathom.inference.onnx.graph import read_shape
from fathom.inference.provider import Provider
from fathom.inference.weights import is_default_ref, model_cache_dir, on_disk

if TYPE_CHECKING:  # pragma: no cover
    from fathom.config import Settings


def onnx_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


def runtime_of(settings: Settings) -> str:
    """`onnx` or `torch`: the setting, or under `auto` what can serve the model folder."""
    chosen = settings.local_runtime
    if chosen == "onnx":
        if settings.local_device != "cpu":
            raise ConfigError(
                f"FATHOM_LOCAL_RUNTIME=onnx runs on the CPU only, but "
                f"FATHOM_LOCAL_DEVICE={settings.local_device}: set the runtime to "
                f"torch (or auto) for a GPU, or the device to cpu"
            )
        if not onnx_installed():
            raise ConfigError(
                "FATHOM_LOCAL_RUNTIME=onnx but onnxruntime (or onnx) is not "
                "installed: pip install onnxruntime onnx, or set the runtime to torch"
            )
        return "onnx"
    if chosen == "torch":
        return "torch"
    if settings.local_device != "cpu" or not onnx_installed():
        return "torch"
    path = settings.local_model_path
    if is_default_ref(path):
        folder = on_disk(cache_dir(settings))
        if folder is None:
            return "onnx"  # not downloaded yet: the pinned default is a BERT folder, ONNX's own
        path = str(folder)
    try:
        read_shape(Path(path))
    except UnsupportedModel:
        return "torch"  # another architecture: sentence-transformers serves it
    return "onnx"


def cache_dir(settings: Settings) -> Path:
    return model_cache_dir(settings)


def local_encoder(settings: Settings) -> Provider:
    """The embedded reference encoder of the settings' model (not loaded yet)."""
    if runtime_of(settings) == "onnx":
        return OnnxEncoder(
            settings.local_model_path,
            model_name=settings.local_model_name,
            width=settings.local_width,
            cache_dir=cache_dir(settings),
            batch_size=settings.local_batch_size,
            max_tokens=settings.local_max_tokens,
            threads=settings.local_threads,
        )
    return LocalEncoder.from_settings(settings)


def quantized_writer(settings: Settings) -> OnnxEncoder | None:
    """The quantized encoder `FATHOM_LOCAL_QUANTIZED` asks for, or None. It is a provider of
    its own: it writes a table only once the gate cleared it against the table's reference."""
    variant = settings.local_quantized
    if variant == "none":
        return None
    if runtime_of(settings) != "onnx":
        raise ConfigError(
            f"FATHOM_LOCAL_QUANTIZED={variant} needs the ONNX runtime, but the "
            f"embedded encoder runs on torch here: set FATHOM_LOCAL_RUNTIME=onnx "
            f"(CPU, a BERT model folder, onnxruntime installed), or unset it"
        )
    return OnnxEncoder(
        settings.local_model_path,
        model_name=settings.local_model_name,
        width=settings.local_width,
        cache_dir=cache_dir(settings),
        variant=variant,
        batch_size=settings.local_batch_size,
        max_tokens=settings.local_max_tokens,
        threads=settings.local_threads,
    )
