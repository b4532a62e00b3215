"""Bounded search answers, through the MCP SDK's own client: a page holds what `max_tokens`
allows, in rank order, its snippets grown to whole chunks where the budget leaves room; a
cursor brings the next page, with no hit lost or repeated; a cursor is refused for another
search or a ranking that changed. The big one runs over streamable HTTP on a real socket and
counts the bytes the client receives.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from fathom.config import Settings
from fathom.index.request import SearchRequest
from fathom.server.answer_tokens import DEFAULT_MAX_TOKENS, AnswerTokens
from fathom.server.mcp_tools import build_mcp_server
from fathom.server.search_answer import answer_of
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import ADMIN, serve_in_loop
from tests.index.retrieval_fixtures import write_project
from tests.server.admin_fixtures import build_operator_app
from tests.server.mcp_fixtures import mcp


class WireBytes:
    """ASGI middleware: the bytes of every response body to a `tools/call`, as sent."""

    def __init__(self, app: Any):
        self.app = app
        self.calls: list[int] = []
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != "/mcp":
            return await self.app(scope, receive, send)
        request = bytearray()

        async def receiving() -> Any:
            message = await receive()
            request.extend(message.get("body", b""))
            return message

        body = bytearray()

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.body":
                body.extend(message.get("body", b""))
                if not message.get("more_body") and b'"tools/call"' in request:
                    self.calls.append(len(body))
                    self.bodies.append(bytes(body))
            await send(message)

        await self.app(scope, receiving, sending)


async def pages(client: Client, args: dict[str, Any]) -> AsyncIterator[Any]:
    cursor = None
    while True:
        answer = await client.call_tool("search_code", args | ({"cursor": cursor} if cursor else {}))
        assert not answer.is_error, answer.content[0].text
        yield answer
        cursor = answer.structured_content["next_cursor"]
        if cursor is None:
            return


@pytest.mark.slow
async def test_k100_over_2000_chunks_stays_under_the_budget_and_pages_lose_nothing(
    tmp_path: Path, local_encoder
):
    import rich

    root = Path(shutil.copytree(Path(rich.__file__).parent, tmp_path / "rich"))
    wired = WireBytes(build_operator_app(tmp_path / "data", encoder=local_encoder))
    service = wired.app.state.service
    indexed = await service.index(root, "rich")
    assert indexed.tables["code"] >= 2000, indexed.tables
    query = "render a table with borders and column widths"
    # What the client received, counted whole (the server counts by pieces, each once).
    tokens = AnswerTokens.from_folder(service.settings.local_model_path)
    tokens.by_pieces = False

    seen: list[str] = []
    async with serve_in_loop(wired) as url, mcp(url, ADMIN) as client:
        # A result per chunk: 100 of them (rich has fewer than 100 files that match).
        async for answer in pages(client, {"query": query, "project": "rich", "k": 100, "group": "chunk"}):
            body = wired.bodies[-1].decode()
            # What the client received, counted as the budget counts: under the default.
            assert tokens.total(body) <= DEFAULT_MAX_TOKENS, (tokens.total(body), len(body))
            structured = json.dumps(answer.structured_content)
            # The text block is a summary: the answer is not sent twice.
            assert len(body) < 1.5 * len(structured), (len(body), len(structured))
            got = answer.structured_content["results"]
            assert got and [r["rank"] for r in got] == list(range(len(seen) + 1, len(seen) + len(got) + 1))
            seen += [r["id"] for r in got]
            print(
                f"page {len(wired.calls)}: {len(got)} hits, {len(body)} bytes received, "
                f"{tokens.total(body)} tokens ({answer.structured_content['tokens']} counted), "
                f"structured alone {len(structured)} bytes; the JSON text block the SDK adds "
                f"by default would make it {len(body) + len(structured)} bytes"
            )
    assert len(wired.calls) > 1  # 100 hits do not fit one default answer
    # Every hit of the ranking once, in rank order (ranks 1..100 held page after page above).
    assert len(set(seen)) == len(seen) == 100
    # A search run again ranks the same hits, near enough: the pages came from one ranking
    # (kept by the server), which a re-run does not promise at the tail.
    request = SearchRequest(query, "rich", "code", 100, group="chunk")
    again = [r.id for r in answer_of(await service.searches.ranking(request), request).results]
    assert len(set(again) & set(seen)) >= 90
    same = next((i for i, (a, b) in enumerate(zip(seen, again)) if a != b), 100)
    print(f"a search run again: the same first {same} of 100, {len(set(again) & set(seen))} of 100 in common")


async def test_a_page_grows_snippets_and_a_cursor_refuses_another_search_or_a_new_ranking(
    tmp_path: Path, local_encoder
):
    root = write_project(tmp_path / "shop")
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    await fathom.index(root, "shop")
    async with Client(build_mcp_server(fathom)) as client:
        # Room to spare: every hit, each snippet the whole chunk.
        roomy = (await client.call_tool("search_code", {"query": "password", "k": 5})).structured_content
        assert roomy["next_cursor"] is None and roomy["found"] == len(roomy["results"])
        for hit in roomy["results"]:
            lines = (root / hit["path"]).read_text().splitlines()[hit["start_line"] - 1 : hit["end_line"]]
            assert hit["whole"] and hit["snippet"] == "\n".join(lines)
        # The least budget: fewer hits a page, the rest behind the cursor.
        args = {"query": "password", "k": 5, "max_tokens": 1000}
        first = await client.call_tool("search_code", args)
        tight = first.structured_content
        assert tight["tokens"] <= 1000 and tight["next_cursor"]
        assert 1 <= len(tight["results"]) < len(roomy["results"])
        assert [r["id"] for r in tight["results"]] == [r["id"] for r in roomy["results"]][
            : len(tight["results"])
        ]
        assert first.content[0].type == "text" and tight["next_cursor"] in first.content[0].text

        cursor = tight["next_cursor"]
        other = await client.call_tool("search_code", args | {"query": "retry", "cursor": cursor})
        assert other.is_error and "continues another search" in other.content[0].text
        garbled = await client.call_tool("search_code", args | {"cursor": "not-a-cursor"})
        assert garbled.is_error and "is not a cursor" in garbled.content[0].text

        # The index changes between pages: the next page still comes from the ranking the
        # cursor cut (kept), so nothing is lost or repeated.
        (root / "auth" / "tokens.py").write_text(
            'def rotate_password(user):\n    """Give the user a new password."""\n'
            "    return reset_password(user)\n"
        )
        await fathom.index(root, "shop")
        kept = await client.call_tool("search_code", args | {"cursor": cursor})
        assert not kept.is_error, kept.content[0].text
        shown = len(tight["results"])
        assert [r["id"] for r in kept.structured_content["results"]] == [r["id"] for r in roomy["results"]][
            shown : shown + len(kept.structured_content["results"])
        ]
    # A server that no longer holds the ranking (restarted) searches again: the ranking came
    # out different, and the cursor says so rather than serve a page of another ranking.
    async with Client(build_mcp_server(fathom)) as client:
        moved = await client.call_tool("search_code", args | {"cursor": cursor})
        assert moved.is_error and "changed since the cursor" in moved.content[0].text


async def test_find_similar_pages_too(tmp_path: Path, local_encoder):
    root = write_project(tmp_path / "shop")
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    await fathom.index(root, "shop")
    async with Client(build_mcp_server(fathom)) as client:
        args = {"project": "shop", "snippet": "check a password", "k": 8, "max_tokens": 1000}
        ids: list[str] = []
        cursor = None
        for _ in range(10):
            answer = await client.call_tool("find_similar", args | ({"cursor": cursor} if cursor else {}))
            assert not answer.is_error, answer.content[0].text
            ids += [r["id"] for r in answer.structured_content["results"]]
            cursor = answer.structured_content["next_cursor"]
            if cursor is None:
                break
        whole = await client.call_tool("find_similar", args | {"max_tokens": 20000})
        assert ids == [r["id"] for r in whole.structured_content["results"]] and len(ids) > 1
