"""Index cost: a first index through the product (`fathom index`, the real ONNX encoder) embeds
each distinct text once, across files and across the code and docs tables, and every chunk
still gets its row with its text's own vector."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.inference.encoders import local_encoder
from fathom.service import Fathom
from tests.index.retrieval_fixtures import CountingEncoder

# A module that is only its docstring (a code-table chunk of exactly this text), and the same
# docstring heading another module (a docs-table chunk of exactly this text).
DOC = '''"""Invoices and receipts.

How the shop totals an order, adds the sales tax of the customer's region,
applies the discounts a coupon grants, and renders the result as a printable page.
"""'''

HELPER = '''def backoff(attempt, base=0.5, cap=30.0):
    """Seconds to wait before the next try: doubling from `base`, never over `cap`."""
    return min(cap, base * (2 ** attempt))
'''


@pytest.fixture(scope="module")
def onnx(tmp_path_factory: pytest.TempPathFactory):
    enc = local_encoder(Settings(data_dir=tmp_path_factory.mktemp("data")))
    enc.load()  # type: ignore[attr-defined]
    return enc


def project(root: Path) -> Path:
    files = {
        "shop/notes.py": DOC + "\n",
        # Its imports join the docstring's code chunk, so its docs chunk is the docstring alone.
        "shop/orders.py": DOC
        + "\nimport math\n\n\ndef total(lines):\n    return math.fsum(q * p for q, p in lines)\n",
        "shop/net/retry.py": HELPER,  # the same helper in two places
        "shop/jobs/retry.py": HELPER,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def vectors(fathom: Fathom, table: str) -> dict[tuple[str, str], np.ndarray]:
    """(path, content hash) -> the row's vector, for one table of project `shop`."""
    store = fathom.store
    data = store.slot_table("shop", table).search().limit(None).to_arrow().to_pylist()  # type: ignore[attr-defined]
    return {(r["path"], r["content_hash"]): np.asarray(r["vector"], dtype=np.float32) for r in data}


def test_a_text_in_two_files_and_in_both_tables_is_encoded_once(tmp_path, onnx):
    root = project(tmp_path / "shop")
    counting = CountingEncoder(onnx)
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=counting)
    result = CliRunner().invoke(app, ["index", str(root), "--project", "shop"], obj={"fathom": fathom})
    assert result.exit_code == 0, result.output

    # Every text reached the encoder once, the shared ones included.
    seen = Counter(counting.texts)
    assert seen[DOC] == 1 and seen[HELPER.rstrip("\n")] == 1, seen
    assert max(seen.values()) == 1, seen

    code, docs = vectors(fathom, "code"), vectors(fathom, "docs")
    by_path_code = {path for path, _ in code}
    assert {"shop/notes.py", "shop/orders.py", "shop/net/retry.py", "shop/jobs/retry.py"} <= by_path_code
    # The docstring's rows, one per table, hold the vector of that text (the encoder's own).
    doc_rows = [v for (path, _), v in code.items() if path == "shop/notes.py"]
    doc_rows += [v for (path, _), v in docs.items() if path == "shop/orders.py"]
    assert len(doc_rows) == 2
    own = onnx.encode_sync([DOC])[0]
    for v in doc_rows:
        assert float(np.dot(v, own)) > 0.9999
    helper = [v for (path, _), v in code.items() if path.endswith("retry.py")]
    assert len(helper) == 2 and float(np.dot(helper[0], helper[1])) > 0.9999
    fathom.store.close()


def test_the_encoder_computes_with_the_threads_set_and_idle_threads_do_not_spin(tmp_path, monkeypatch, onnx):
    monkeypatch.setenv("FATHOM_LOCAL_THREADS", "1")
    enc = local_encoder(Settings(data_dir=tmp_path / "data"))
    session = enc.load()  # type: ignore[attr-defined]
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    # The same vectors as with a thread per core.
    texts = [DOC, HELPER, "retry with exponential backoff"]
    assert np.allclose(enc.encode_sync(texts), onnx.encode_sync(texts), atol=1e-5)  # type: ignore[attr-defined]
    assert (
        onnx.load().get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    )


def test_a_thread_count_below_one_is_refused_naming_the_setting(monkeypatch):
    from fathom.errors import ConfigError

    monkeypatch.setenv("FATHOM_LOCAL_THREADS", "0")
    with pytest.raises(ConfigError, match="FATHOM_LOCAL_THREADS"):
        Settings()


def test_long_texts_go_through_the_model_in_passes_held_to_the_token_budget(onnx, monkeypatch):
    from fathom.inference.onnx import encoder as module

    real = onnx.load()
    shapes: list[tuple[int, int]] = []

    class Spy:  # the runtime's session, recording each pass's padded shape
        def run(self, names, feeds):
            shapes.append(feeds["input_ids"].shape)
            return real.run(names, feeds)

    monkeypatch.setattr(onnx, "_session", Spy())
    long = [f"{i}: " + HELPER * 12 for i in range(40)]  # each past the 256-token limit
    short = [f"retry attempt {i}" for i in range(40)]
    got = onnx.encode_sync(long + short)
    assert all(rows * width <= module.BATCH_TOKENS for rows, width in shapes), shapes
    assert shapes[0] == (module.BATCH_TOKENS // 256, 256)
    assert max(rows for rows, _ in shapes) > module.BATCH_TOKENS // 256  # short ones more at a time
    # Each text's vector is the one it gets alone, in the callers' order.
    monkeypatch.setattr(onnx, "_session", real)
    alone = np.stack([onnx.encode_sync([t])[0] for t in (long[0], long[-1], short[0], short[-1])])
    assert np.allclose(got[[0, 39, 40, 79]], alone, atol=1e-5)
