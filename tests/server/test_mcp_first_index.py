"""A project whose first index is still running, as a real MCP session sees it: right after
`index_project` answers with its background job, `list_projects` lists the project as
`indexing` with the job's progress, `index_status` reports it, `search_code` and
`search_docs` on it answer keyword-only from its walked chunks, saying so and how far the
embedding is (tests/server/test_mcp_first_answers.py covers those answers), and `find_symbol` on it
says that it is being indexed, how far, and how to follow it, never "no project … index it
first"; `fathom projects` answered by a running `fathom serve` says the same; a scoped token
learns nothing of a first index outside its scope. Once the job is done the project is
`indexed` and answers in full.

The run is held mid-embedding deterministically: the encoder at the Provider cut-off lets the
first batch of code through and holds the next ones at a gate the test opens.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from mcp import Client

from fathom.server.local import RunFile, local_routes
from fathom.server.mcp_http import ServeToken, standalone_app
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.cli.cli_fixtures import invoke, rows
from tests.fleet.fleet_fixtures import free_port, serve_in_loop, wait_for
from tests.server.index_job_fixtures import HeldAfterFirst, bounded, ended, held_admin_job, write_shop
from tests.server.mcp_fixtures import create, mcp, text

PROGRESS = re.compile(r"^embedding: [1-9][\d,]* of [1-9][\d,]* chunks embedded, [1-9][\d,]* files walked$")


async def start_held(client: Client, encoder: HeldAfterFirst, tmp: Path) -> tuple[Path, str, asyncio.Event]:
    """Start the first index of a project `other` and hold it after its first batch: its
    folder, its job's id, and the gate that lets it end. It has more chunks than the pool's
    largest batch (256): whatever size the shop's run left the batches at, it takes two."""
    other = write_shop(tmp / "other", files=36)
    gate = encoder.hold = asyncio.Event()
    started = (await client.call_tool("index_project", {"path": str(other)})).structured_content
    assert started["background"] is True
    await asyncio.wait_for(encoder.reached.wait(), 30)  # one batch through, the next held
    return other, started["job"]["id"], gate


def entry(listed: Any, name: str) -> dict[str, Any]:
    found = [p for p in listed.structured_content["projects"] if p["name"] == name]
    assert len(found) == 1, listed.structured_content
    return found[0]


async def refusal(client: Client, tool: str, args: dict[str, Any]) -> str:
    r = await client.call_tool(tool, args)
    assert r.is_error, f"{tool} answered on a project still being indexed"
    return text(r)


@bounded
async def test_a_first_index_is_shown_as_indexing_everywhere_until_it_answers(
    served: tuple[Fathom, HeldAfterFirst], tmp_path: Path
):
    fathom, encoder = served
    async with Client(build_mcp_server(fathom)) as client:
        other, job, gate = await start_held(client, encoder, tmp_path)
        # The batch let through counts once its write lands (a thread), a moment after.
        await wait_for(lambda: fathom.jobs[job].progress.chunks_done, what="the first batch written")

        listed = await client.call_tool("list_projects", {})
        mid = entry(listed, "other")
        assert mid["state"] == "indexing" and mid["indexing"] is True and mid["code_chunks"] == 0
        assert PROGRESS.match(mid["progress"]), mid["progress"]
        assert mid["root"] == str(other)
        assert entry(listed, "shop")["state"] == "indexed" and entry(listed, "shop")["progress"] is None

        status = await client.call_tool("index_status", {"project": "other"})
        assert not status.is_error, text(status)
        s = status.structured_content
        assert s["state"] == "indexing" and PROGRESS.match(s["progress"]), s
        assert all(t["rows"] == 0 for t in s["tables"].values()), s["tables"]  # nothing promoted yet
        assert [j["id"] for j in s["jobs"]] == [job] and s["jobs"][0]["chunks_done"] > 0

        early = await client.call_tool("search_code", {"query": "invoice_total", "project": "other"})
        assert not early.is_error, text(early)
        assert [h["path"] for h in early.structured_content["results"]][:1] == ["billing.py"], text(early)
        assert re.fullmatch(
            r"'other' is being indexed \(embedding: [1-9][\d,]* of [1-9][\d,]* chunks embedded, "
            r"[1-9][\d,]* files walked\): answers from it are keyword-only until that first index is done",
            early.structured_content["notes"][0],
        ), early.structured_content["notes"]
        for tool, args in (("find_symbol", {"name": "invoice_total", "project": "other"}),):
            said = await refusal(client, tool, args)
            assert "'other' is being indexed" in said and f"job {job}" in said, said
            assert re.search(r"embedding: [1-9][\d,]* of [1-9][\d,]* chunks embedded", said), said
            assert f"index_status(project='other', job='{job}')" in said, said
            assert "index it first" not in said.lower(), said

        # A search of every project answers from the indexed one, and keyword-only from the
        # one being indexed, meanwhile.
        every = await client.call_tool("search_code", {"query": "invoice_total", "k": 5})
        assert not every.is_error, text(every)
        assert {h["project"] for h in every.structured_content["results"]} == {"shop", "other"}
        assert any(
            n.startswith("'other' is being indexed (embedding: ") and "keyword-only" in n
            for n in every.structured_content["notes"]
        ), every.structured_content["notes"]

        gate.set()
        assert (await ended(client, "other", job))["state"] == "done"
        after = entry(await client.call_tool("list_projects", {}), "other")
        assert after["state"] == "indexed" and after["progress"] is None and after["code_chunks"] > 0
        done = (await client.call_tool("index_status", {"project": "other"})).structured_content
        assert done["state"] == "indexed" and done["progress"] is None
        found = await client.call_tool("search_code", {"query": "invoice_total", "project": "other"})
        assert not found.is_error, text(found)
        assert "billing.py" in [h["path"] for h in found.structured_content["results"]]


@bounded
async def test_a_scoped_token_learns_nothing_of_a_first_index_outside_its_scope(tmp_path: Path):
    async with held_admin_job(tmp_path) as (url, op, admin, job, gate):
        outsider = await create(admin, "outsider", ["alpha"])
        insider = await create(admin, "insider", ["shop"])
        async with mcp(url, outsider) as client:
            listed = await client.call_tool("list_projects", {})
            assert listed.structured_content == {"projects": []}
            said = await refusal(client, "search_code", {"query": "invoice", "project": "shop"})
            assert "being indexed" not in said and job["id"] not in said, said
            said = await refusal(client, "index_status", {"project": "shop"})
            assert "being indexed" not in said and job["id"] not in said, said
        async with mcp(url, insider) as client:
            assert entry(await client.call_tool("list_projects", {}), "shop")["state"] == "indexing"
            said = await refusal(client, "find_symbol", {"name": "invoice_total", "project": "shop"})
            assert f"'shop' is being indexed (job {job['id']}" in said, said
            early = await client.call_tool("search_code", {"query": "invoice", "project": "shop"})
            # Refused while its encoders are checked, keyword-only once its walk has begun.
            assert "'shop' is being indexed" in text(early), text(early)
        gate.set()
        assert (await op.wait_job(admin, job["id"]))["state"] == "done"


@bounded
async def test_fathom_projects_through_a_running_serve_shows_the_first_index(
    served: tuple[Fathom, HeldAfterFirst], tmp_path: Path
):
    fathom, encoder = served
    port = free_port()
    door = RunFile(fathom.settings.data_dir, f"http://127.0.0.1:{port}", kind="serve")
    app = standalone_app(
        build_mcp_server(fathom),
        auth=ServeToken(fathom.settings.data_dir),
        host="127.0.0.1",
        local=door,
        routes=local_routes(lambda: fathom, door),
    )
    async with serve_in_loop(app, port=port), Client(build_mcp_server(fathom)) as client:
        door.open()
        try:
            _, job, gate = await start_held(client, encoder, tmp_path)
            # The batch let through counts once its write lands (a thread), a moment after.
            await wait_for(lambda: fathom.jobs[job].progress.chunks_done, what="the first batch written")
            # The CLI is a client of this loop's server: it runs in a thread.
            listed = await asyncio.to_thread(invoke, "--data-dir", str(fathom.settings.data_dir), "projects")
        finally:
            door.close()
        assert listed.exit_code == 0, listed.output
        names = " ".join(cells[0] for cells in rows(listed.output))  # a long name cell folds
        assert re.search(
            r"other \(indexing: embedding: [1-9][\d,]* of [1-9][\d,]* chunks embedded, "
            r"[1-9][\d,]* files walked\)",
            names,
        ), listed.output
        gate.set()
        assert (await ended(client, "other", job))["state"] == "done"
