"""The ONNX runtime of the embedded encoder: the torch encoder's vectors without torch.

Real parts: the packaged MiniLM folder, its graph built from its own weights, onnxruntime,
and the torch encoder beside it (sentence-transformers) on real code chunks of this repository.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.index.indexer import discover
from fathom.inference.encoders import local_encoder, quantized_writer, runtime_of
from fathom.inference.local import EncoderWidthMismatch, LocalEncoder
from fathom.inference.onnx import OnnxEncoder, UnsupportedModel
from fathom.inference.onnx.cache import model_file

SRC = Path(__file__).resolve().parents[2] / "src" / "fathom"
MODEL = Settings().local_model_name

# Texts where tokenisation could differ: blanks, accents and CJK, an empty string, a text far
# past the 256-token limit (truncation), and repeated whitespace.
EDGES = [
    "",
    "   ",
    "  leading and trailing  ",
    "héllo wörld, naïve café",
    "中文的代码搜索",
    "x = 1\n" * 400,
    "def f():\n\n\n\treturn\t\t42",
    "🙂 emoji 🙂",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def onnx_fp32(minilm_path: str, cache: Path) -> OnnxEncoder:
    enc = OnnxEncoder(minilm_path, model_name=MODEL, width=384, cache_dir=cache, batch_size=32)
    enc.load()
    return enc


@pytest.fixture(scope="module")
def code_chunks(onnx_fp32: OnnxEncoder) -> list[str]:
    """300 chunks of this repository's own source, cut as the indexer cuts them."""
    texts = [c.text for c in discover(SRC / "index", tokens=onnx_fp32.token_counter()).chunks]
    assert len(texts) >= 300
    return texts[:300]


def test_fp32_vectors_are_the_torch_encoders_on_code_chunks(onnx_fp32, torch_encoder, code_chunks):
    texts = code_chunks + EDGES
    mine, theirs = onnx_fp32.encode_sync(texts), torch_encoder.encode_sync(texts)
    assert mine.dtype == np.float32 and mine.shape == (len(texts), 384)
    cosines = np.sum(mine * theirs, axis=1)
    assert cosines.min() >= 0.9999, [texts[i][:40] for i in np.argsort(cosines)[:3]]
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)


def test_rows_come_back_in_the_callers_order_whatever_the_batching(onnx_fp32, monkeypatch):
    texts = ["short", "a much longer text " * 20, "mid length text here", ""]
    whole = onnx_fp32.encode_sync(texts)
    monkeypatch.setattr(onnx_fp32, "batch_size", 1)
    one_by_one = onnx_fp32.encode_sync(texts)
    np.testing.assert_allclose(whole, one_by_one, atol=1e-5)
    assert float(whole[0] @ onnx_fp32.encode_sync(["short"])[0]) > 0.9999


def test_token_counter_counts_as_the_torch_encoders_so_chunks_are_the_same(
    onnx_fp32,
    torch_encoder,
    code_chunks,
):
    mine, theirs = onnx_fp32.token_counter(), torch_encoder.token_counter()
    assert mine.key == theirs.key and mine.limit == theirs.limit == 256
    sample = code_chunks[:50] + EDGES
    assert mine.count(sample) == theirs.count(sample)


def test_fp32_serves_under_the_torch_encoders_provider_id(onnx_fp32, torch_encoder):
    assert onnx_fp32.info == torch_encoder.info


def test_the_graph_is_built_once_and_rebuilt_when_the_model_changes(minilm_path, tmp_path):
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_path, folder)
    first = model_file(folder, tmp_path / "cache")
    stamp = first.stat().st_mtime_ns
    assert model_file(folder, tmp_path / "cache") == first and first.stat().st_mtime_ns == stamp
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(
        json.dumps(config | {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
    )
    second = model_file(folder, tmp_path / "cache")
    assert second != first and first.exists()
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".building-")]


def test_another_width_is_a_typed_error_at_load(minilm_path, cache):
    enc = OnnxEncoder(minilm_path, model_name="minilm", width=768, cache_dir=cache)
    with pytest.raises(EncoderWidthMismatch) as err:
        enc.load()
    assert err.value.got == 384 and "FATHOM_LOCAL_WIDTH=384" in str(err.value)


def test_a_model_the_builder_cannot_translate_is_refused_by_name(minilm_path, tmp_path):
    folder = tmp_path / "roberta"
    shutil.copytree(minilm_path, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"model_type": "xlm-roberta"}))
    enc = OnnxEncoder(str(folder), model_name="r", width=384, cache_dir=tmp_path / "cache")
    with pytest.raises(UnsupportedModel) as err:
        enc.load()
    assert "xlm-roberta" in str(err.value) and "FATHOM_LOCAL_RUNTIME=torch" in str(err.value)
    assert not (tmp_path / "cache").exists()  # refused before anything is written
    # Under auto, that folder goes to torch instead.
    assert runtime_of(Settings(local_model_path=str(folder))) == "torch"


def test_runtime_choice(tmp_path):
    assert isinstance(local_encoder(Settings(model_cache=tmp_path)), OnnxEncoder)
    assert isinstance(local_encoder(Settings(local_runtime="torch")), LocalEncoder)
    assert runtime_of(Settings(local_device="cuda")) == "torch"
    with pytest.raises(ConfigError, match="CPU only"):
        runtime_of(Settings(local_runtime="onnx", local_device="cuda"))
    with pytest.raises(ConfigError, match="needs the ONNX runtime"):
        quantized_writer(Settings(local_runtime="torch", local_quantized="int8"))
    assert quantized_writer(Settings()) is None
    writer = quantized_writer(Settings(local_quantized="int8", model_cache=tmp_path))
    assert writer is not None and writer.id == f"local:{MODEL}+int8" and writer.info.model == MODEL
