"""Vectors keyed by content: a chunk whose text is unchanged keeps its vector when its lines
shift, its file is renamed, or the project is rebuilt in the same space; only text new to the
table is embedded, and a reused vector keeps the provenance it was written under."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.errors import NotCleared
from fathom.index.chunking import chunk_file, fit_tokens
from fathom.index.indexer import Indexer
from fathom.index.store import LanceStore, Slot
from fathom.service import Fathom
from fathom.space import Provenance, Space
from tests.index.retrieval_fixtures import CountingEncoder

HTTPX_CLIENT = Path(httpx.__file__).parent / "_client.py"


def rows(store, project="shop", table="code", slot=Slot.ACTIVE):
    """Every row's chunk id -> (content hash, path, provider, verdict, written_at, vector)."""
    data = store.slot_table(project, table, slot).search().limit(None).to_arrow().to_pylist()
    return {
        r["chunk_id"]: (
            r["content_hash"],
            r["path"],
            r["provider_id"],
            r["verdict_id"],
            r["written_at"],
            tuple(r["vector"]),
        )
        for r in data
    }


def test_a_line_inserted_at_the_top_of_a_real_file_embeds_only_the_changed_chunk(tmp_path, local_encoder):
    root = tmp_path / "httpx"
    (root / "httpx").mkdir(parents=True)
    source = HTTPX_CLIENT.read_text()
    (root / "httpx" / "_client.py").write_text(source)
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    first = asyncio.run(fathom.index(root, "httpx"))
    assert first.embedded == first.chunks > 100  # a real file: ~140 chunks

    edited = "# a comment line inserted at the top\n" + source
    (root / "httpx" / "_client.py").write_text(edited)
    tokens = local_encoder.token_counter()  # chunks as the indexer cuts them
    before = {c.content_hash for c in fit_tokens(chunk_file("httpx/_client.py", source), tokens)[0]}
    after = fit_tokens(chunk_file("httpx/_client.py", edited), tokens)[0]
    new_text = [c.text for c in after if c.content_hash not in before]
    moved = [c for c in after if c.content_hash in before]
    assert len(new_text) <= 2 and len(moved) > 100  # every chunk's lines shifted

    counting = CountingEncoder(local_encoder)
    obj = {"fathom": Fathom(Settings(data_dir=tmp_path / "data"), encoder=counting)}
    result = CliRunner().invoke(
        app, ["index", str(root), "--project", "httpx"], obj=obj, env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    # A new process re-probes the encoder it cleared before writing again; beyond that, only
    # the chunks whose text changed were embedded.
    assert counting.probes >= 1
    assert sorted(counting.texts) == sorted(new_text)
    summary = re.sub(r"\s+", " ", result.output)
    assert f"embedded {len(new_text)} in" in summary
    assert "only chunks whose text is new" in summary
    assert f"reused {len(moved)} vectors of unchanged text at new lines or paths" in summary, summary
    print(
        f"one line inserted at the top of httpx/_client.py: {len(after)} chunks, "
        f"{len(counting.texts)} embedded, {len(moved)} vectors reused"
    )

    # The index now holds exactly the new chunks, at their new lines.
    store = obj["fathom"].store
    assert {e.chunk_id for e in store.manifest("httpx", "code")} | {
        e.chunk_id for e in store.manifest("httpx", "docs")
    } == {c.chunk_id for c in after}
    hits = asyncio.run(obj["fathom"].search("send a request and follow redirects", "httpx", k=3))
    assert all(h.path == "httpx/_client.py" for h in hits)


class TwoProviderClearance:
    """The gate's role in this test: a fixed set of (provider, verdict) pairs cleared for the
    space; `revoke` takes one back (a quarantine)."""

    def __init__(self, cleared):
        self.cleared = set(cleared)

    def check(self, space, provenance):
        if (provenance.provider_id, provenance.verdict_id) not in self.cleared:
            raise NotCleared(
                space.table, provenance.provider_id, provenance.verdict_id, reason="not cleared in this test"
            )

    def revoke(self, provider_id, verdict_id):
        self.cleared.discard((provider_id, verdict_id))


def _indexer(store, encoder, verdict):
    return Indexer(
        store,
        encoder,
        batch_size=4,
        provenance=lambda p, space: Provenance(p.id, verdict),
        space_of=lambda table: Space(table, encoder.info.model, 384, "ref"),
    )


async def test_reused_vectors_keep_the_provenance_they_were_written_under(
    tmp_path, local_encoder, sample_project
):
    clearance = TwoProviderClearance({("alpha", "v-alpha"), ("beta", "v-beta")})
    store = LanceStore(tmp_path / "lance", clearance)
    alpha = CountingEncoder(local_encoder, provider_id="alpha")
    await _indexer(store, alpha, "v-alpha").run(Indexer(store, alpha).job("shop", sample_project))
    before = rows(store)
    assert {(p, v) for _, _, p, v, _, _ in before.values()} == {("alpha", "v-alpha")}

    # Lines shift in one file and another file is renamed; a second provider embeds now.
    invoice = sample_project / "billing" / "invoice.py"
    invoice.write_text("# billing\n" + invoice.read_text())
    (sample_project / "net" / "retry.py").rename(sample_project / "net" / "backoff.py")
    beta = CountingEncoder(local_encoder, provider_id="beta")
    report = await _indexer(store, beta, "v-beta").run(Indexer(store, beta).job("shop", sample_project))
    after = rows(store)
    assert report.carried > 0 and report.embedded == len(beta.texts)
    by_text = {h: (p, v, at, vec) for h, _, p, v, at, vec in before.values()}
    for _cid, (h, path, p, v, at, vec) in after.items():
        if h in by_text:
            # Same text: alpha's vector, alpha's verdict and alpha's write time, at the new place.
            assert (p, v, at, vec) == by_text[h], path
        else:
            assert (p, v) == ("beta", "v-beta"), path
    assert any(path == "net/backoff.py" for _, path, *_ in after.values())
    assert not any(path == "net/retry.py" for _, path, *_ in after.values())
    renamed = [r for r in after.values() if r[1] == "net/backoff.py"]
    assert renamed and all(r[2] == "alpha" for r in renamed)  # the rename embedded nothing

    # alpha is quarantined: its vectors are no longer carried; moved text is embedded again.
    clearance.revoke("alpha", "v-alpha")
    invoice.write_text("# more billing\n" + invoice.read_text())
    beta2 = CountingEncoder(local_encoder, provider_id="beta")
    report = await _indexer(store, beta2, "v-beta").run(Indexer(store, beta2).job("shop", sample_project))
    moved_alpha = [
        c
        for c in chunk_file("billing/invoice.py", invoice.read_text())
        if c.table == "code" and c.content_hash in by_text
    ]
    assert moved_alpha and {c.text for c in moved_alpha} <= set(beta2.texts)
    invoice_rows = [r for r in rows(store).values() if r[1] == "billing/invoice.py"]
    assert invoice_rows and all(r[2] == "beta" for r in invoice_rows)  # nothing of alpha's left
    assert report.embedded == len(beta2.texts)


async def test_a_full_rebuild_reuses_vectors_only_within_the_same_space(
    tmp_path, local_encoder, sample_project
):
    store = LanceStore(tmp_path / "lance")
    await Indexer(store, local_encoder).run(Indexer(store, local_encoder).job("shop", sample_project))
    before = rows(store)

    counting = CountingEncoder(local_encoder)
    indexer = Indexer(store, counting)
    report = await indexer.run(indexer.job("shop", sample_project, full=True))
    assert counting.texts == [] and report.embedded == 0 and report.carried == report.chunks
    assert {h: v for h, _, _, _, _, v in rows(store).values()} == {
        h: v for h, _, _, _, _, v in before.values()
    }

    # Another reference encoder defines another space: nothing can be carried into it.
    other = CountingEncoder(local_encoder, provider_id="local:another-encoder")
    rebuilt = Indexer(store, other, space_of=lambda t: Space(t, "another", 384, "local:another-encoder"))
    report = await rebuilt.run(rebuilt.job("shop", sample_project, full=True))
    assert report.carried == 0 and report.embedded == report.chunks == len(other.texts)
