"""`notifications/tools/list_changed`: a client connected while no route serves `ask` and
`explore` is told when one comes up (and when it goes), so it can list them. Real MCP client
sessions of the SDK: a handshake-era client hears it on its connection; a 2026-07-28 client
on its `subscriptions/listen` stream, over streamable HTTP to the full server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client

from fathom.config import Settings
from fathom.policy import Policy
from fathom.roles import FallbackMode
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.agents.agents_fixtures import LocalChat, make_router, routing
from tests.fleet.fleet_fixtures import ADMIN, HashEmbedder, serve_in_loop
from tests.server.admin_fixtures import build_operator_app
from tests.server.mcp_fixtures import mcp

AGENT_TOOLS = {"ask", "explore"}


async def listed(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def test_a_handshake_client_hears_when_ask_and_explore_appear_and_go(tmp_path: Path):
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=HashEmbedder(width=8))
    local = (Policy.LOCAL, FallbackMode.LOCAL_ONLY)
    router = make_router(routing(code_assistant=local, rlm=local), [])  # no provider yet
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.put_nowait(message.method)

    async with asyncio.timeout(60):
        server = build_mcp_server(fathom, router=router)
        async with Client(server, mode="legacy", message_handler=on_message) as client:
            assert client.server_capabilities.tools.list_changed is True
            assert not await listed(client) & AGENT_TOOLS
            router.registry.add(LocalChat([]))  # a local LLM comes up: both tools are servable
            assert await heard.get() == "notifications/tools/list_changed"
            assert await listed(client) >= AGENT_TOOLS
            router.registry.remove("local:chat")
            assert await heard.get() == "notifications/tools/list_changed"
            assert not await listed(client) & AGENT_TOOLS
            # Nothing changed since: nothing more is sent, whatever the requests.
            await listed(client)
            assert heard.empty()


async def test_a_client_listening_over_http_hears_when_ask_appears(tmp_path: Path):
    app = build_operator_app(tmp_path / "data")
    async with asyncio.timeout(60), serve_in_loop(app) as url, mcp(url, ADMIN) as client:
        assert client.server_capabilities.tools.list_changed is True
        assert not await listed(client) & AGENT_TOOLS
        async with client.listen(tools_list_changed=True) as changes:
            app.state.service.registry.add(LocalChat([]))
            async for event in changes:
                assert type(event).__name__ == "ToolsListChanged"
                break
        assert await listed(client) >= AGENT_TOOLS
