"""The ONNX graph of a sentence-transformers BERT encoder, built from its own weights.

It owns one translation: a model folder (`config.json`, `model.safetensors`, `modules.json`,
the pooling config) into an `onnx.ModelProto` that computes what the sentence-transformers
pipeline computes: BERT (absolute positions, token type 0, post-layer-norm, erf GELU), the
folder's pooling (mean or CLS over the attention mask), then L2 normalisation when the folder
has a Normalize module. The weights are read with `safetensors.numpy`: no torch, no network.

It refuses anything else, by name, before building: another architecture, another pooling
mode, another activation or position scheme (`UnsupportedModel`; the torch runtime still
serves those). It does not tokenise, cache or run the graph (`encoder`, `cache` do).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fathom.errors import ConfigError

# Bump when the graph below changes what it computes: the cache keys on it, so a stale file
# built by an older builder is never loaded.
BUILDER_VERSION = "2"
OPSET = 17  # LayerNormalization is a single op from opset 17


class UnsupportedModel(ConfigError):
    """The model folder is not one this builder can translate (the torch runtime can)."""

    def __init__(self, path: str, why: str):
        self.path, self.why = path, why
        super().__init__(
            f"the ONNX runtime cannot build {path}: {why}. Set FATHOM_LOCAL_RUNTIME=torch "
            f"(needs the torch extra: pip install 'fathom-code-search[torch]') for this model."
        )


@dataclass(frozen=True)
class BertShape:
    """What the builder reads of `config.json` and the sentence-transformers modules."""

    hidden: int
    heads: int
    layers: int
    max_positions: int
    eps: float
    pooling: str  # "mean" | "cls"
    normalize: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def read_shape(folder: Path) -> BertShape:
    """The folder's BERT shape and pipeline, or `UnsupportedModel` saying what differs."""
    where = str(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModel(where, f"no readable config.json ({type(exc).__name__})") from exc
    if config.get("model_type") != "bert":
        raise UnsupportedModel(where, f"model_type is {config.get('model_type')!r}, not 'bert'")
    if config.get("hidden_act", "gelu") != "gelu":
        raise UnsupportedModel(where, f"activation {config.get('hidden_act')!r} (only 'gelu')")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModel(where, "positions are not absolute")
    if not (folder / "model.safetensors").is_file():
        raise UnsupportedModel(where, "no model.safetensors")
    pooling, normalize = _pipeline(folder)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    if hidden % heads:
        raise UnsupportedModel(where, f"hidden size {hidden} is not a multiple of {heads} heads")
    return BertShape(
        hidden=hidden,
        heads=heads,
        layers=int(config["num_hidden_layers"]),
        max_positions=int(config["max_position_embeddings"]),
        eps=float(config.get("layer_norm_eps", 1e-12)),
        pooling=pooling,
        normalize=normalize,
    )


def _pipeline(folder: Path) -> tuple[str, bool]:
    """(pooling mode, whether a Normalize module follows) from `modules.json`."""
    where = str(folder)
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModel(
            where, "no readable modules.json (not a sentence-transformers folder)"
        ) from exc
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        raise UnsupportedModel(where, f"modules {kinds} (only Transformer, Pooling[, Normalize])")
    pool_dir = next(m.get("path", "") for m in modules if str(m.get("type", "")).endswith("Pooling"))
    try:
        pool = json.loads((folder / pool_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModel(where, "no readable pooling config") from exc
    modes = [
        k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
        for k, v in pool.items()
        if k.startswith("pooling_mode_") and v
    ]
    if modes not in (["mean"], ["cls"]):
        raise UnsupportedModel(where, f"pooling {modes or 'none'} (only mean or cls)")
    return modes[0], "Normalize" in kinds


class _Graph:
    """Collects nodes and initializers with unique names (onnx.helper underneath)."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        # np.array, not np.ascontiguousarray: that one turns a scalar into shape (1,), and a
        # Gather by a (1,) index keeps the axis it should drop.
        self.inits.append(self.numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        self._n += 1
        out = f"{op_type.lower()}_{self._n}"
        # Named nodes: quantization picks or skips nodes by name.
        self.nodes.append(self.helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def dense(self, x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        # torch's Linear stores (out, in); MatMul wants (in, out). A constant weight on the
        # right is what dynamic quantization recognises.
        return self.op(
            "Add", self.op("MatMul", x, self.const(f"{name}.wT", w.T.copy())), self.const(f"{name}.b", b)
        )

    def layer_norm(self, x: str, w: np.ndarray, b: np.ndarray, name: str, eps: float) -> str:
        return self.op(
            "LayerNormalization",
            x,
            self.const(f"{name}.w", w),
            self.const(f"{name}.b", b),
            axis=-1,
            epsilon=eps,
        )


def build(folder: Path) -> Any:
    """The folder's encoder as an `onnx.ModelProto`: inputs `input_ids` and `attention_mask`
    (int64, batch x sequence), output `embeddings` (float32, batch x hidden)."""
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    shape = read_shape(folder)
    w = {k.removeprefix("bert."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    g = _Graph()
    x = _embeddings(g, w, shape.eps)
    # The additive attention mask, (B, 1, 1, S): 0 where a token is real, float32's minimum
    # where it is padding (as transformers does), so padding never changes a real token.
    maskf = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    neg = g.op(
        "Mul",
        g.op("Sub", g.const("one_f", np.array(1.0, dtype=F32)), maskf),
        g.const("min_f", np.array(np.finfo(F32).min, dtype=F32)),
    )
    bias = g.op("Unsqueeze", neg, g.const("axes_12", _i64(1, 2)))
    for i in range(shape.layers):
        x = _layer(g, w, shape, i, x, bias)
    pooled = _pool(g, shape, x, maskf)
    g.nodes.append(helper.make_node("Identity", [pooled], ["embeddings"]))

    graph = helper.make_graph(
        g.nodes,
        "sentence_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", shape.hidden])],
        initializer=g.inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="fathom",
        producer_version=BUILDER_VERSION,
    )
    model.ir_version = 8  # what onnxruntime of the last few years reads
    return model


F32 = np.float32


def _i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _embeddings(g: _Graph, w: dict[str, np.ndarray], eps: float) -> str:
    """Word + position + token type 0 embeddings, then layer norm. Positions 0..S-1 are the
    first S rows of the position table (S: a 1-D slice of the input's shape): no Range."""
    seq = g.op("Shape", "input_ids", start=1, end=2)
    positions = g.op(
        "Slice",
        g.const("pos_emb", w["embeddings.position_embeddings.weight"]),
        g.const("zero_1d", _i64(0)),
        seq,
        g.const("axis_0", _i64(0)),
    )
    x = g.op(
        "Add",
        g.op("Gather", g.const("word_emb", w["embeddings.word_embeddings.weight"]), "input_ids"),
        positions,
    )
    x = g.op("Add", x, g.const("type0_emb", w["embeddings.token_type_embeddings.weight"][0].copy()))
    return g.layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], "emb_ln", eps)


def _layer(g: _Graph, w: dict[str, np.ndarray], shape: BertShape, i: int, x: str, bias: str) -> str:
    """One post-layer-norm BERT layer: self-attention, then the erf-GELU feed-forward."""
    p = f"encoder.layer.{i}."
    split = _i64(0, 0, shape.heads, shape.head_dim)

    def heads(name: str) -> str:
        t = g.dense(
            x, w[f"{p}attention.self.{name}.weight"], w[f"{p}attention.self.{name}.bias"], f"l{name}{i}"
        )
        return g.op("Transpose", g.op("Reshape", t, g.const(f"split_{name}{i}", split)), perm=[0, 2, 1, 3])

    q, k, v = heads("query"), heads("key"), heads("value")
    scale = g.const(f"scale{i}", np.array(1.0 / math.sqrt(shape.head_dim), dtype=F32))
    scores = g.op("Add", g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), scale), bias)
    ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    ctx = g.op(
        "Reshape", g.op("Transpose", ctx, perm=[0, 2, 1, 3]), g.const(f"merge{i}", _i64(0, 0, shape.hidden))
    )
    att = g.dense(ctx, w[f"{p}attention.output.dense.weight"], w[f"{p}attention.output.dense.bias"], f"lo{i}")
    x = g.layer_norm(
        g.op("Add", att, x),
        w[f"{p}attention.output.LayerNorm.weight"],
        w[f"{p}attention.output.LayerNorm.bias"],
        f"lan{i}",
        shape.eps,
    )
    h = g.dense(x, w[f"{p}intermediate.dense.weight"], w[f"{p}intermediate.dense.bias"], f"li{i}")
    # transformers' "gelu": the exact, erf form.
    h = g.op(
        "Mul",
        g.op("Mul", h, g.const(f"half{i}", np.array(0.5, dtype=F32))),
        g.op(
            "Add",
            g.const(f"one{i}", np.array(1.0, dtype=F32)),
            g.op("Erf", g.op("Div", h, g.const(f"sqrt2_{i}", np.array(math.sqrt(2.0), dtype=F32)))),
        ),
    )
    # "lout": the feed-forward output projection, which the `int8` variant keeps in fp32.
    out = g.dense(h, w[f"{p}output.dense.weight"], w[f"{p}output.dense.bias"], f"lout{i}")
    return g.layer_norm(
        g.op("Add", out, x),
        w[f"{p}output.LayerNorm.weight"],
        w[f"{p}output.LayerNorm.bias"],
        f"loln{i}",
        shape.eps,
    )


def _pool(g: _Graph, shape: BertShape, x: str, maskf: str) -> str:
    """The folder's pooling, then L2 normalisation when it has a Normalize module."""
    if shape.pooling == "mean":
        # sum(x * mask) / max(sum(mask), 1e-9), as sentence-transformers' Pooling does.
        m3 = g.op("Unsqueeze", maskf, g.const("axis_2", _i64(2)))
        total = g.op("ReduceSum", g.op("Mul", x, m3), g.const("axis_1", _i64(1)), keepdims=0)
        count = g.op(
            "Max",
            g.op("ReduceSum", m3, g.const("axis_1b", _i64(1)), keepdims=0),
            g.const("tiny", np.array(1e-9, dtype=F32)),
        )
        pooled = g.op("Div", total, count)
    else:
        pooled = g.op("Gather", x, g.const("zero_i", np.array(0, dtype=np.int64)), axis=1)  # (B, H)
    if shape.normalize:
        # torch.nn.functional.normalize: x / max(||x||, 1e-12). (ReduceL2 takes its axes as an
        # attribute until opset 18, ReduceSum as an input from 13.)
        norm = g.op(
            "Max",
            g.op("ReduceL2", pooled, axes=[-1], keepdims=1),
            g.const("eps_n", np.array(1e-12, dtype=F32)),
        )
        pooled = g.op("Div", pooled, norm)
    return pooled
