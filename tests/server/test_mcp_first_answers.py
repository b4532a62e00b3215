"""A first index answers keyword questions long before it is embedded, as a real MCP session
sees it: once its walk has begun, `search_code` on the project (and a search of every
project) answers from the walked chunks alone, every answer saying it is keyword-only and how
far the embedding is; once the index is promoted the answers are hybrid and say nothing of it.
A cancelled or failed first index leaves nothing answering, and a restarted server does not
serve the walked chunks (they never reach the store: no row of them has a vector).

The run is held mid-embedding as in tests/server/test_mcp_first_index.py: its encoder lets one batch
of code through and holds the next ones at a gate the test opens.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from fathom.config import Settings
from fathom.inference.registry import ProviderRegistry
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import wait_for
from tests.server.index_job_fixtures import HeldAfterFirst, bounded, ended, write_shop
from tests.server.mcp_fixtures import text

NOTE = re.compile(
    r"'ledger' is being indexed \(embedding: [1-9][\d,]* of [1-9][\d,]* chunks embedded, "
    r"[1-9][\d,]* files walked\): answers from it are keyword-only until that first index is done"
)


def write_ledger(root: Path) -> Path:
    """A project of many handler modules and one class the questions name (more chunks than
    the pool's largest batch: it takes two, the second held)."""
    write_shop(root, files=36)
    (root / "ledger.py").write_text(
        "class LedgerReconciler:\n"
        '    """Match bank statement entries against the ledger."""\n\n'
        "    def reconcile(self, statement, ledger):\n"
        "        return [e for e in statement if e not in ledger]\n"
    )
    return root


async def start_held(client: Client, encoder: HeldAfterFirst, root: Path) -> tuple[str, asyncio.Event]:
    """Start the first index of `ledger` and hold it after its first batch: its job's id and
    the gate that lets it go on."""
    gate = encoder.hold = asyncio.Event()
    started = (
        await client.call_tool("index_project", {"path": str(root), "project": "ledger"})
    ).structured_content
    assert started["background"] is True, started
    await asyncio.wait_for(encoder.reached.wait(), 30)  # one batch through, the next held
    return started["job"]["id"], gate


async def ask(client: Client, **args: Any) -> dict[str, Any]:
    r = await client.call_tool("search_code", {"query": "LedgerReconciler", "k": 5, **args})
    assert not r.is_error, text(r)
    return dict(r.structured_content)


async def nothing_of_ledger(client: Client) -> None:
    """`ledger` answers nothing: a search of it is refused or finds nothing (its unpromoted
    shadow is kept for a later run to resume, and never searched), and a search of every
    project has no hit of it and no note on it."""
    r = await client.call_tool("search_code", {"query": "LedgerReconciler", "project": "ledger"})
    if not r.is_error:
        found = r.structured_content
        assert not found["results"] and not found["notes"], (
            f"a first index that never ended answered: {found}"
        )
    every = await ask(client)
    assert "ledger" not in {h["project"] for h in every["results"]}, every
    assert not any("ledger" in n for n in every["notes"] or []), every["notes"]


@bounded
async def test_a_first_index_answers_keyword_only_until_it_is_promoted(
    served: tuple[Fathom, HeldAfterFirst], tmp_path: Path
):
    fathom, encoder = served
    async with Client(build_mcp_server(fathom)) as client:
        job, gate = await start_held(client, encoder, write_ledger(tmp_path / "ledger"))
        await wait_for(lambda: fathom.jobs[job].progress.chunks_done, what="the first batch written")

        early = await ask(client, project="ledger")
        assert "ledger.py" in [h["path"] for h in early["results"]][:3], early["results"]
        assert len(early["notes"]) == 1 and NOTE.fullmatch(early["notes"][0]), early["notes"]
        # Keyword-only: no hit has a vector half.
        assert all(h["cosine"] is None and h["vector_rank"] is None for h in early["results"]), early

        every = await ask(client)
        assert ("ledger", "ledger.py") in [(h["project"], h["path"]) for h in every["results"]][:3], every
        assert any(NOTE.fullmatch(n) for n in every["notes"]), every["notes"]

        gate.set()
        assert (await ended(client, "ledger", job))["state"] == "done"
        after = await ask(client, project="ledger")
        assert not after["notes"], after["notes"]
        top = after["results"][0]
        assert top["path"] == "ledger.py" and top["cosine"] is not None, after["results"]
        every = await ask(client)
        assert not any("ledger" in n for n in every["notes"] or []), every["notes"]


@bounded
async def test_a_cancelled_first_index_leaves_nothing_answering(
    served: tuple[Fathom, HeldAfterFirst], tmp_path: Path
):
    fathom, encoder = served
    async with Client(build_mcp_server(fathom)) as client:
        job, gate = await start_held(client, encoder, write_ledger(tmp_path / "ledger"))
        assert (await ask(client, project="ledger"))["notes"], "not answering keyword-only before the cancel"
        cancelled = await client.call_tool("cancel_index", {"project": "ledger", "job": job})
        assert not cancelled.is_error, text(cancelled)
        gate.set()
        assert (await ended(client, "ledger", job))["state"] == "cancelled"
        await nothing_of_ledger(client)


@bounded
async def test_a_failed_first_index_leaves_nothing_answering(
    served: tuple[Fathom, HeldAfterFirst], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    fathom, encoder = served
    async with Client(build_mcp_server(fathom)) as client:
        job, gate = await start_held(client, encoder, write_ledger(tmp_path / "ledger"))
        assert (await ask(client, project="ledger"))["notes"], "not answering keyword-only before it failed"

        def full_disk(*args: Any, **kwargs: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(fathom.store, "write", full_disk)  # the held batches' writes fail
        gate.set()
        assert (await ended(client, "ledger", job))["state"] == "failed"
        await nothing_of_ledger(client)


@bounded
async def test_a_restarted_server_does_not_serve_the_walked_chunks(
    served: tuple[Fathom, HeldAfterFirst], tmp_path: Path
):
    """The server dies mid-run (the held run's process is left as a crash leaves it): a server
    started again over the same data has no keyword-only answer of the project."""
    fathom, encoder = served
    async with Client(build_mcp_server(fathom)) as client:
        job, gate = await start_held(client, encoder, write_ledger(tmp_path / "ledger"))
        assert (await ask(client, project="ledger"))["notes"], "not answering keyword-only before the restart"
        again = Fathom(
            Settings(data_dir=fathom.settings.data_dir), encoder=encoder, registry=ProviderRegistry()
        )
        try:
            async with Client(build_mcp_server(again)) as restarted:
                await nothing_of_ledger(restarted)
        finally:
            await again.aclose()
        gate.set()
        await ended(client, "ledger", job)


def test_the_walked_chunks_held_are_bounded_by_their_text_and_say_so():
    """A first index holds at most its bound of walked text (not the walk's chunks): past it the
    walk goes on, the index answers over what it holds, and its note says over how much."""
    from fathom.index.chunk import Chunk
    from fathom.index.interim import InterimIndex

    def chunk(i: int) -> Chunk:
        body = f"def handler_{i}(order):\n    return order.total_{i}\n"
        return Chunk(f"m{i}.py", "python", "code", 1, 2, f"handler_{i}", body, "function")

    held = InterimIndex("big", max_text_bytes=10 * len(chunk(0).text))
    held.add([chunk(i) for i in range(6)])
    held.add([chunk(i) for i in range(6, 20)])
    assert held.chunks == 10 and held.full
    assert held.text_bytes <= held.max_text_bytes
    assert [h.symbol for h in held.search("code", "handler_3", 3)][:1] == ["handler_3"]
    walked_past = {h.symbol for h in held.search("code", "handler_15 total_15", 20)}
    assert walked_past and "handler_15" not in walked_past  # past the bound: not held
    assert held.text("code", chunk(3).chunk_id) == chunk(3).text
