"""The embedded local encoder: offline load by path, width check, normalized float32, off-loop."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from fathom.inference.local import EncoderWidthMismatch, LocalEncoder, ModelLoadError
from fathom.inference.provider import Kind


async def test_embed_returns_normalized_float32_rows(local_encoder):
    texts = ["def add(a, b): return a + b", "class Invoice: pass", "how to install"]
    vecs = await local_encoder.embed(texts)
    assert vecs.dtype == np.float32
    assert vecs.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


async def test_embed_empty_batch(local_encoder):
    vecs = await local_encoder.embed([])
    assert vecs.shape == (0, 384)


async def test_same_text_same_vector_and_similar_texts_closer(local_encoder):
    v = await local_encoder.embed(
        [
            "retry a network call with backoff",
            "retry a network call with backoff",
            "exponential backoff for failed HTTP requests",
            "bake a chocolate cake",
        ]
    )
    assert float(v[0] @ v[1]) == pytest.approx(1.0, abs=1e-5)
    assert float(v[0] @ v[2]) > float(v[0] @ v[3])


def test_provider_info_is_stable_and_local(local_encoder):
    assert local_encoder.info.kind is Kind.LOCAL
    assert local_encoder.id == "local:sentence-transformers/all-minilm-l6-v2"
    assert local_encoder.info.width == 384


def test_width_mismatch_is_a_typed_error_at_load(minilm_path):
    enc = LocalEncoder(minilm_path, model_name="minilm", width=2560)
    with pytest.raises(EncoderWidthMismatch) as err:
        enc.load()
    assert err.value.expected == 2560 and err.value.got == 384
    assert "FATHOM_LOCAL_WIDTH=384" in str(err.value)


def test_missing_model_folder_is_a_typed_error(tmp_path):
    enc = LocalEncoder(str(tmp_path / "nope"), model_name="ghost", width=384)
    with pytest.raises(ModelLoadError) as err:
        enc.load()
    assert "ghost" in str(err.value)


async def test_inference_runs_off_the_event_loop_one_batch_at_a_time(local_encoder):
    loop_thread = threading.get_ident()
    seen: list[int] = []
    original = local_encoder.encode_sync

    def spy(texts):
        seen.append(threading.get_ident())
        return original(texts)

    local_encoder.encode_sync = spy  # instance attribute shadows the method for this test
    try:
        a, b = await asyncio.gather(local_encoder.embed(["one"]), local_encoder.embed(["two"]))
    finally:
        del local_encoder.encode_sync
    assert loop_thread not in seen and len(seen) == 2
    assert a.shape == b.shape == (1, 384)


def test_inputs_larger_than_batch_size_are_all_encoded(local_encoder, monkeypatch):
    monkeypatch.setattr(local_encoder, "batch_size", 2)
    before = local_encoder.texts_encoded
    vecs = local_encoder.encode_sync([f"text number {i}" for i in range(5)])
    assert vecs.shape == (5, 384)
    assert local_encoder.texts_encoded - before == 5
