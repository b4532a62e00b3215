"""`index_project` as a background job, through real MCP client sessions over the real server:
a first or full index answers at once with its job, which `index_status(project, job=ID)`
follows to the end; `cancel_index` (or `notifications/cancelled` on a blocking call) stops a
full re-index mid-run and the previous active table keeps answering searches with the same
results; a read-only token cannot cancel.

The run is held mid-embedding deterministically: the encoder at the Provider cut-off
(`HeldEncoder`) holds its batches of code at a gate the test opens, and says when one is held.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from fathom.config import Settings
from fathom.index.job import IndexProgress, Job, JobCancelled
from fathom.inference.registry import ProviderRegistry
from fathom.roles import EMBEDDING_ROLES
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import wait_for
from tests.server.index_job_fixtures import HeldEncoder, bounded, ended, held_admin_job, job_of, write_shop
from tests.server.mcp_fixtures import create, mcp, text


class Shop:
    def __init__(self, tmp: Path):
        self.encoder = HeldEncoder()
        self.encoder.info = dataclasses.replace(self.encoder.info, roles=frozenset(EMBEDDING_ROLES))
        self.fathom = Fathom(
            Settings(data_dir=tmp / "data"), encoder=self.encoder, registry=ProviderRegistry()
        )
        self.root = write_shop(tmp / "shop")

    def edit(self) -> None:
        """New text in every module: a full rebuild must embed it (the rest carries its vectors)."""
        for path in sorted(self.root.glob("mod_*.py")):
            with path.open("a") as fh:
                fh.write(f"\n\ndef audit_{path.stem}(event):\n    return event.kind == '{path.stem}'\n")

    def hold(self) -> asyncio.Event:
        """From now on every batch of code waits for the returned gate."""
        self.encoder.hold = asyncio.Event()
        return self.encoder.hold


@pytest.fixture
async def shop(tmp_path: Path) -> Shop:
    s = Shop(tmp_path)
    await s.fathom.index(s.root, "shop")
    return s


async def results(client: Client) -> list[tuple[str, int, float | None]]:
    r = await client.call_tool("search_code", {"query": "invoice_total", "project": "shop", "k": 5})
    assert not r.is_error, r.content[0].text
    return [(h["path"], h["start_line"], h["cosine"]) for h in r.structured_content["results"]]


@bounded
async def test_a_first_index_answers_at_once_and_is_followed_to_done(shop: Shop, tmp_path: Path):
    other = write_shop(tmp_path / "other", files=3)
    gate = shop.hold()
    async with Client(build_mcp_server(shop.fathom)) as client:
        started = await client.call_tool("index_project", {"path": str(other)})
        # It answered while every embed is still held at the gate: the run is in the background.
        assert not started.is_error, started.content[0].text
        out = started.structured_content
        assert out["background"] is True and out["project"] == "other" and out["chunks"] is None
        job = out["job"]
        assert job["state"] in ("pending", "running") and job["project"] == "other"
        await asyncio.wait_for(shop.encoder.reached.wait(), 30)
        # A second run of the project while this one goes is refused, naming the job.
        again = await client.call_tool("index_project", {"path": str(other), "full": True})
        assert again.is_error and job["id"] in again.content[0].text
        gate.set()
        done = await ended(client, "other", job["id"])
        assert done["state"] == "done" and done["chunks_done"] > 0 and done["error"] is None
        listed = (await client.call_tool("index_status", {"project": "other"})).structured_content
        assert listed["tables"]["code"]["rows"] > 0
        # An incremental run of an indexed project blocks and reports, as before.
        incremental = await client.call_tool("index_project", {"path": str(other)})
        assert incremental.structured_content["background"] is False
        assert incremental.structured_content["embedded"] == 0
        # A job of another project, or none at all, is named as unknown.
        unknown = await client.call_tool("index_status", {"project": "shop", "job": job["id"]})
        assert unknown.is_error and "no index job" in unknown.content[0].text


@bounded
async def test_cancel_index_mid_run_leaves_the_active_table_answering(shop: Shop):
    async with Client(build_mcp_server(shop.fathom)) as client:
        before = await results(client)
        rows = (await client.call_tool("index_status", {"project": "shop"})).structured_content
        assert "billing.py" in [path for path, _, _ in before]
        shop.edit()
        gate = shop.hold()
        started = await client.call_tool(
            "index_project", {"path": str(shop.root), "project": "shop", "full": True}
        )
        job = started.structured_content["job"]["id"]
        await asyncio.wait_for(shop.encoder.reached.wait(), 30)  # a batch is being embedded
        assert (await job_of(client, "shop", job))["phase"] == "embedding"
        cancelled = await client.call_tool("cancel_index", {"project": "shop", "job": job})
        assert not cancelled.is_error, cancelled.content[0].text
        assert cancelled.structured_content["cancelling"] is True
        # Searches answer from the active table while the cancelled run winds down...
        assert await results(client) == before
        gate.set()
        view = await ended(client, "shop", job)
        assert view["state"] == "cancelled" and view["cancelling"] is False
        # ...and after it: the same rows, the same hits.
        assert await results(client) == before
        after = (await client.call_tool("index_status", {"project": "shop"})).structured_content
        assert after["tables"]["code"]["rows"] == rows["tables"]["code"]["rows"]
        assert after["last_run"] == rows["last_run"]
        # Cancelling a finished job changes nothing; an unknown job is named.
        assert (await client.call_tool("cancel_index", {"project": "shop", "job": job})).structured_content[
            "state"
        ] == "cancelled"
        missing = await client.call_tool("cancel_index", {"project": "shop", "job": "nope"})
        assert missing.is_error and "no index job 'nope'" in missing.content[0].text


@bounded
async def test_notifications_cancelled_cancels_a_blocking_run(shop: Shop):
    # The handshake protocol over JSON-RPC streams: abandoning a call sends notifications/cancelled.
    async with Client(build_mcp_server(shop.fathom), mode="legacy") as client:
        before = await results(client)
        shop.edit()
        gate = shop.hold()
        call = asyncio.create_task(
            client.call_tool(
                "index_project", {"path": str(shop.root), "project": "shop", "full": True, "wait": True}
            )
        )
        await asyncio.wait_for(shop.encoder.reached.wait(), 30)
        status = (await client.call_tool("index_status", {"project": "shop"})).structured_content
        [job] = [j["id"] for j in status["jobs"] if j["state"] == "running"]
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

        async def cancelling() -> bool:
            view = await job_of(client, "shop", job)
            return view["cancelling"] or view["state"] == "cancelled"

        await wait_for(cancelling, what="the server to see the cancellation", timeout=30.0, interval=0.02)
        gate.set()
        assert (await ended(client, "shop", job))["state"] == "cancelled"
        assert await results(client) == before


@bounded
async def test_a_read_only_token_cannot_cancel(tmp_path: Path):
    async with held_admin_job(tmp_path) as (url, op, admin, job, gate):  # one to cancel
        reader = await create(admin, "reader", ["shop"])
        async with mcp(url, reader) as client:
            assert "cancel_index" not in {t.name for t in (await client.list_tools()).tools}
            refused = await client.call_tool("cancel_index", {"project": "shop", "job": job["id"]})
            assert refused.is_error and "read-only" in text(refused)
            seen = await client.call_tool("index_status", {"project": "shop", "job": job["id"]})
            assert not seen.is_error, text(seen)
            assert seen.structured_content["job"]["cancelling"] is False
        gate.set()
        assert (await op.wait_job(admin, job["id"]))["state"] == "done"
        audit = json.dumps((await admin.get("/admin/audit")).json()["entries"])
        assert "MCP cancel_index(" in audit


async def test_a_cancel_after_the_last_batch_promotes_nothing(shop: Shop):
    """The last checkpoint between batches is behind the run: the check right before promotion
    is what keeps the half-cancelled rebuild out."""
    before = shop.fathom.store.table_info("shop", "code").rows
    shop.edit()
    job = Job("shop", shop.root, full=True, clock=shop.fathom.clock)

    def cancel_when_all_embedded(p: IndexProgress) -> None:
        if p.phase == "embedding" and p.chunks_total and p.chunks_done >= p.chunks_total:
            job.cancel()

    with pytest.raises(JobCancelled):
        await shop.fathom.index(shop.root, "shop", full=True, job=job, progress=cancel_when_all_embedded)
    assert job.state.value == "cancelled" and job.progress.phase != "promoting"
    assert shop.fathom.store.table_info("shop", "code").rows == before


@bounded
async def test_a_server_stop_waits_for_a_run_an_mcp_client_started(tmp_path: Path):
    """`fathom server`'s stop waits for the runs its MCP clients started, as for the admin
    API's: the held run is asked to stop, its batch is let through only then, and the run
    ends at its next checkpoint before the server is gone; a first index stopped mid-run
    leaves nothing indexed."""
    from fathom.index.store import LanceStore
    from tests.fleet.fleet_fixtures import ADMIN, serve_in_loop
    from tests.server.admin_fixtures import build_operator_app

    encoder = HeldEncoder()
    encoder.info = dataclasses.replace(encoder.info, roles=frozenset(EMBEDDING_ROLES))
    gate = encoder.hold = asyncio.Event()
    root = write_shop(tmp_path / "shop")
    data = tmp_path / "data"
    app = build_operator_app(data, encoder=encoder)
    async with serve_in_loop(app) as url:
        async with mcp(url, ADMIN) as client:
            started = await client.call_tool("index_project", {"path": str(root), "project": "shop"})
            assert not started.is_error, text(started)
            job = started.structured_content["job"]
            await asyncio.wait_for(encoder.reached.wait(), 30)
        run = app.state.service.jobs.get(job["id"])

        async def let_through_once_asked_to_stop() -> None:
            await asyncio.to_thread(run.stop.wait, 30)
            gate.set()

        opener = asyncio.create_task(let_through_once_asked_to_stop())
    assert opener.done() and gate.is_set()  # the stop asked the run to stop
    left = [t for t in asyncio.all_tasks() if t.get_name() == f"fathom.index:{job['id']}"]
    assert left == []  # and waited for it: no run of it is left on the loop
    assert run.state.value == "cancelled", run.state
    store = LanceStore(data / "lance")
    assert not store.has_project("shop") or store.table_info("shop", "code").rows == 0


@bounded
async def test_index_project_checks_the_folder_once_a_call(shop: Shop, tmp_path: Path, monkeypatch):
    """The tool checks the folder in the call (a bad one is refused there) and hands the run
    the result: neither the run nor the indexer checks it again."""
    import fathom.index.indexer
    import fathom.service.projects

    checked: list[Path] = []
    check = fathom.index.indexer.check_project_root

    def counted(root: Any, refused: Any = None) -> Path:
        checked.append(Path(root))
        return check(root, refused)

    monkeypatch.setattr(fathom.service.projects, "check_project_root", counted)
    monkeypatch.setattr(fathom.index.indexer, "check_project_root", counted)
    other = write_shop(tmp_path / "other", files=3)
    async with Client(build_mcp_server(shop.fathom)) as client:
        first = await client.call_tool("index_project", {"path": str(other)})  # in the background
        assert first.structured_content["background"] is True, text(first)
        assert (await ended(client, "other", first.structured_content["job"]["id"]))["state"] == "done"
        assert checked == [other]
        again = await client.call_tool("index_project", {"path": str(other)})  # blocking
        assert again.structured_content["background"] is False, text(again)
        assert checked == [other, other]
        missing = await client.call_tool("index_project", {"path": str(tmp_path / "absent")})
        assert missing.is_error and "absent" in text(missing)
