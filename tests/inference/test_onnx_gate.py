"""The ONNX encoders through the real gate, with real vectors.

A table the torch encoder built stays valid: the ONNX fp32 encoder, in a new process on the
same data dir, is re-probed against the golden vectors torch recorded, clears, and writes and
searches the table; an ONNX graph that computes something else under the same id is
quarantined there instead. The int8 writer (`FATHOM_LOCAL_QUANTIZED`) is judged against the
table's reference like any provider, and writes the table only where it was cleared.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from fathom.config import Settings
from fathom.errors import FathomError
from fathom.inference.gate import Coverage, Gate
from fathom.inference.onnx import OnnxEncoder
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


async def _torch_built(tmp_path: Path, torch_encoder, cache: Path) -> tuple[Settings, Path, Fathom]:
    project = write_project(tmp_path / "shop")
    settings = Settings(data_dir=tmp_path / "data", model_cache=cache)
    built = Fathom(settings, encoder=torch_encoder)
    await built.index(project, "shop")
    return settings, project, built


async def test_onnx_fp32_clears_and_extends_a_table_the_torch_encoder_built(tmp_path, torch_encoder, cache):
    settings, project, built = await _torch_built(tmp_path, torch_encoder, cache)
    space = built.space("code")
    golden = built.gate.golden_for(space)
    assert golden is not None and golden.reference.startswith(torch_encoder.id + "|")
    before = built.gate.verdict_for(space, torch_encoder)
    assert before is not None and before.cleared

    fresh = Fathom(settings)  # a new process: the default runtime
    assert isinstance(fresh.encoder, OnnxEncoder) and fresh.encoder.id == torch_encoder.id
    assert fresh.gate.awaiting_reprobe(fresh.encoder)  # cleared before, not trusted until re-probed
    (project / "billing" / "refunds.py").write_text(
        'def refund(invoice, amount):\n    """Give part of an invoice back to the customer."""\n'
        "    invoice.total -= amount\n    return invoice\n"
    )
    report = await fresh.index(project, "shop")

    after = fresh.gate.verdict_for(space, fresh.encoder)
    assert after is not None and after.cleared and after.verdict_id == before.verdict_id
    assert after.last_good_check > before.last_good_check  # the re-probe against golden ran
    assert not fresh.gate.awaiting_reprobe(fresh.encoder)
    assert report.embedded > 0 and set(report.providers) == {fresh.encoder.id}
    # What the re-probe compared, measured here: the probe set through ONNX against the golden
    # vectors torch recorded.
    probes = fresh.gate.probes.texts
    cosines = np.sum(fresh.encoder.encode_sync(probes) * golden.vectors, axis=1)
    assert cosines.min() >= 0.9999
    hits = await fresh.search("refund part of the total to the customer", "shop", k=3)
    assert hits[0].path == "billing/refunds.py"


async def test_an_onnx_graph_that_computes_something_else_is_quarantined_there(
    tmp_path, torch_encoder, cache, minilm_path
):
    settings, project, built = await _torch_built(tmp_path, torch_encoder, cache)
    space = built.space("code")
    # The same model name (so the same provider id) with CLS pooling instead of mean: a stale
    # or wrongly built graph, as the gate sees it.
    folder = tmp_path / "minilm-cls"
    shutil.copytree(minilm_path, folder)
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(
        json.dumps(
            json.loads(pooling.read_text())
            | {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
        )
    )
    wrong = Fathom(settings.model_copy(update={"local_model_path": str(folder)}))
    assert wrong.encoder.id == torch_encoder.id
    (project / "billing" / "refunds.py").write_text("def refund(invoice):\n    return invoice\n")
    with pytest.raises(FathomError):
        await wrong.index(project, "shop")
    latest = wrong.gate.latest_verdict(space.key, wrong.encoder.id)
    assert latest is not None and latest.revoked_at is not None
    assert "golden" in (latest.revoked_reason or "")


def _int8_fathom(tmp_path: Path, cache: Path, threshold: float | None = None) -> Fathom:
    settings = Settings(data_dir=tmp_path / "data", model_cache=cache, local_quantized="int8")
    gate = Gate(settings.data_dir, threshold=threshold) if threshold is not None else None
    return Fathom(settings, gate=gate)


async def test_int8_is_judged_against_the_reference_and_writes_only_if_cleared(tmp_path, cache):
    fathom = _int8_fathom(tmp_path, cache)
    assert fathom.writer is not None and fathom.writer.id == fathom.encoder.id + "+int8"
    report = await fathom.index(write_project(tmp_path / "shop"), "shop")
    for table in ("code", "docs"):
        v = fathom.gate.verdict_for(fathom.space(table), fathom.writer)
        assert v is not None and v.coverage is Coverage.FULL
        assert v.key.reference.startswith(fathom.encoder.id + "|")
        assert v.cleared == (v.min_cosine > 0.99) and v.min_cosine > 0.95
    code = fathom.gate.verdict_for(fathom.space("code"), fathom.writer)
    assert set(report.providers) == {fathom.writer.id if code.cleared else fathom.encoder.id}


async def test_a_refused_int8_writer_leaves_the_table_to_the_reference_and_says_why(tmp_path, cache, caplog):
    # A stricter gate than any int8 copy meets: the refusal path, deterministically.
    fathom = _int8_fathom(tmp_path, cache, threshold=0.99999)
    with caplog.at_level(logging.WARNING, logger="fathom.service"):
        report = await fathom.index(write_project(tmp_path / "shop"), "shop")
    v = fathom.gate.verdict_for(fathom.space("code"), fathom.writer)
    assert v is not None and not v.cleared and "0.99999" in v.reason
    assert set(report.providers) == {fathom.encoder.id} and report.embedded > 0
    said = [r.getMessage() for r in caplog.records if "FATHOM_LOCAL_QUANTIZED" in r.getMessage()]
    assert said and fathom.writer.id in said[0] and "refused" in said[0]


async def test_a_cleared_int8_writer_writes_in_the_references_place(tmp_path, cache):
    # A gate lenient enough that int8 clears on any CPU: the writing path, deterministically.
    fathom = _int8_fathom(tmp_path, cache, threshold=0.9)
    report = await fathom.index(write_project(tmp_path / "shop"), "shop")
    v = fathom.gate.verdict_for(fathom.space("code"), fathom.writer)
    assert v is not None and v.cleared
    # One writer on the shared cores: the reference embedded no chunk, the int8 copy all of them.
    assert report.providers == {fathom.writer.id: report.embedded} and report.embedded > 0
    assert fathom.encoder_for("code", "shop") is fathom.encoder  # queries: the reference
    hits = await fathom.search("apply tax to an invoice", "shop", k=3)
    assert hits[0].path.startswith("billing/")
