"""The local cross-encoder reranker: a sentence-transformers `CrossEncoder` folder served by a
sidecar (`--serve reranker=in-process,model=PATH`).

The model is built here, in the test, from a random BERT with a one-output classification
head and a small word-piece vocabulary (nothing is downloaded). Its scores mean nothing about
relevance, which is the point: the expected order is whatever this model says, so a search
ordered by it proves the sidecar's cross-encoder decided the order.

End to end: a real `fathom server` process, a real `fathom sidecar` process serving the
reranker from that folder, an index job over the admin API, and `search_code` over MCP at
/mcp; the results come back reranked by the sidecar, in the order of the scores this process
computes with the same folder, and not in retrieval order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fathom.errors import ConfigError
from fathom.fleet.agent import open_backends
from fathom.inference.cross_encoder import CrossEncoderReranker, NotACrossEncoder
from fathom.inference.local import ModelLoadError
from tests.fleet.fleet_fixtures import (
    ADMIN,
    JOIN,
    PY,
    ProcessGroup,
    free_port,
    spawn_sidecar,
    wait_http,
    wait_until,
)
from tests.inference.cross_encoder_fixtures import build_cross_encoder


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny-cross-encoder")


def reference_scores(folder: Path, query: str, docs: list[str]) -> list[float]:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), device="cpu", local_files_only=True)
    return [float(s) for s in model.predict([(query, d) for d in docs], show_progress_bar=False)]


DOCS = [
    "def parse_date(value):\n    return datetime.strptime(value, '%Y-%m-%d')",
    "class Cart:\n    def total(self):\n        return sum(i.price for i in self.items)",
    "def read_json(path):\n    with open(path) as f:\n        return json.load(f)",
    "def retry_after(response):\n    return int(response.headers['Retry-After'])",
]


async def test_scores_are_the_cross_encoders_and_keep_document_order(cross_encoder_dir):
    reranker = CrossEncoderReranker(cross_encoder_dir)
    assert reranker.info.roles == {"reranker"} and reranker.info.model == "tiny-cross-encoder"
    scores = await reranker.rerank("parse a date", DOCS)
    expected = reference_scores(cross_encoder_dir, "parse a date", DOCS)
    assert scores == pytest.approx(expected, abs=1e-6)
    assert len(set(round(s, 4) for s in scores)) == len(DOCS)  # the model really discriminates
    assert await reranker.rerank("anything", []) == []
    assert reranker.pairs_scored == len(DOCS)


async def test_the_sidecar_spec_opens_a_cross_encoder(cross_encoder_dir):
    backends, kinds = await open_backends([f"reranker=in-process,model={cross_encoder_dir}"])
    ((role, backend),) = backends.items()
    assert role == "reranker" and kinds[role] == "in-process"
    assert isinstance(backend, CrossEncoderReranker) and backend.loaded  # loaded at start
    with pytest.raises(ConfigError, match="model=PATH"):
        await open_backends(["reranker=in-process"])


async def test_a_folder_that_is_not_a_cross_encoder_is_refused(minilm_path, tmp_path):
    # A bi-encoder would load with a fresh random head and rank by noise: refused at load.
    with pytest.raises(NotACrossEncoder, match="BertModel"):
        CrossEncoderReranker(minilm_path).load()
    with pytest.raises(ModelLoadError, match="config.json"):
        CrossEncoderReranker(tmp_path / "missing").load()


# ---- end to end: a real server and a real sidecar process ---------------------------------

FILES = {
    "shop/cart.py": "def cart_total(items):\n    # the total price of the cart\n"
    "    return sum(i.price * i.qty for i in items)\n",
    "shop/tax.py": "def sales_tax(total, rate):\n    # tax owed on an order total\n"
    "    return round(total * rate, 2)\n",
    "shop/invoice.py": "def invoice_lines(order):\n    # one invoice line per item of an order\n"
    "    return [f'{i.name}: {i.price}' for i in order.items]\n",
    "shop/customer.py": "def customer_email(customer):\n    # the address to send an invoice to\n"
    "    return customer.email.strip().lower()\n",
    "shop/dates.py": "def parse_order_date(text):\n    # when the order was placed\n"
    "    return datetime.strptime(text, '%Y-%m-%d')\n",
    "shop/cookies.py": "def read_cart_cookie(request):\n    # the cart id kept in a cookie\n"
    "    return request.cookies.get('cart')\n",
}


@pytest.mark.slow
def test_a_sidecar_cross_encoder_reorders_search_code_results(tmp_path, cross_encoder_dir):
    root = tmp_path / "shop"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    try:
        server = group.spawn(
            "server",
            [PY, "-m", "fathom.server", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            env={"FATHOM_JOIN_TOKEN": JOIN, "FATHOM_ADMIN_TOKEN": ADMIN},
        )
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=server)
        sidecar = spawn_sidecar(
            group, "ce", port, [f"reranker=in-process,model={cross_encoder_dir}"], extra=["--no-cloud"]
        )
        procs = [server, sidecar]
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=120, headers={"Authorization": f"Bearer {ADMIN}"}
        ) as admin:

            def state() -> str | None:
                for s in admin.get("/admin/fleet").json()["sidecars"]:
                    if s["name"] == "ce" and s["connected"]:
                        return s["state"]
                return None

            wait_until(lambda: state() == "pending", "sidecar ce pending", procs=procs)
            assert admin.post("/admin/fleet/ce/approve").json()["state"] == "approved"
            routes = {s["name"]: s["routes"] for s in admin.get("/admin/fleet").json()["sidecars"]}
            assert routes["ce"] == [
                {
                    "role": "reranker",
                    "backend": "in-process",
                    "model": "tiny-cross-encoder",
                    "width": None,
                    "max_tokens": None,
                }
            ]
            job = admin.post("/admin/jobs", json={"path": str(root), "project": "shop"})
            assert job.status_code == 202, job.text
            job_id = job.json()["id"]
            done = wait_until(
                lambda: (v := admin.get(f"/admin/jobs/{job_id}").json())["state"] in ("done", "failed") and v,
                "index job",
                procs=procs,
            )
            assert done["state"] == "done", done

        query = "the total price of an order"

        async def search() -> dict:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120)
            async with (
                asyncio.timeout(180),
                http,
                Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
            ):
                result = await client.call_tool(
                    "search_code", {"query": query, "project": "shop", "k": len(FILES)}
                )
                assert not result.is_error, result.content[0].text
                return result.structured_content

        found = asyncio.run(search())
        assert found["reranked"] is True, found["reason"]
        assert found["reranker"] == "sidecar:ce:reranker:local"
        hits = found["results"]
        assert len(hits) == len(FILES)
        # The sidecar's model scored them: the scores this process computes with the same
        # folder, on the same chunk texts, in the order of the results.
        texts = [(root / h["path"]).read_text().splitlines() for h in hits]
        docs = ["\n".join(lines[h["start_line"] - 1 : h["end_line"]]) for h, lines in zip(hits, texts)]
        expected = reference_scores(cross_encoder_dir, query, docs)
        assert [h["rerank_score"] for h in hits] == pytest.approx(expected, abs=1e-5)
        assert expected == sorted(expected, reverse=True)
        # ...and the order is the cross-encoder's, not retrieval's.
        assert [h["retrieval_rank"] for h in hits] != sorted(h["retrieval_rank"] for h in hits)
    finally:
        group.stop()
