"""`fathom server` and `fathom sidecar` on the command line, and the MCP tools the server serves
at `/mcp` (streamable HTTP, behind the admin token or an MCP token)."""

from __future__ import annotations

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from fathom.cli import app
from tests.fleet.fleet_fixtures import ADMIN, Fleet

runner = CliRunner()


def test_sidecar_help_lists_the_agent_options():
    result = runner.invoke(app, ["sidecar", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--server", "--token", "--serve", "--no-cloud", "--heartbeat"):
        assert option in result.output


def test_server_help_lists_the_server_options():
    result = runner.invoke(app, ["server", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--host", "--port", "--data-dir", "--log-level"):
        assert option in result.output


def test_sidecar_without_server_is_a_usage_error():
    result = runner.invoke(app, ["sidecar", "--token", "x"])
    assert result.exit_code == 2
    assert "--server" in result.output


def test_both_are_listed_in_the_top_level_help():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    assert "server" in result.output and "sidecar" in result.output


async def test_server_serves_the_mcp_tools_at_mcp_behind_the_admin_token(fleet: Fleet):
    url = f"{fleet.url}/mcp"
    async with httpx.AsyncClient(timeout=30) as plain:
        r = await plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert r.status_code == 401 and "Fathom needs a token" in r.text
        r = await plain.post(url, json={}, headers={"Authorization": "Bearer fa_wrong"})
        assert r.status_code == 401
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"search_code", "search_docs", "index_project", "list_projects", "index_status"} <= tools
        listed = await client.call_tool("list_projects", {})
        assert not listed.is_error and listed.structured_content == {"projects": []}
        unknown = await client.call_tool("index_status", {"project": "ghost"})
        assert unknown.is_error and "ghost" in unknown.content[0].text


def test_server_and_sidecar_options_all_have_help_and_name_their_variable():
    import typer.main

    group = typer.main.get_command(app)
    for name in ("server", "sidecar"):
        command = group.commands[name]
        for param in command.params:
            assert getattr(param, "help", None), f"fathom {name} {param.opts}: no help"
            if param.envvar:
                assert param.show_envvar and param.envvar.startswith("FATHOM_"), (name, param.opts)
        read = {p.envvar for p in command.params if p.envvar}
        wanted = {
            "server": {"FATHOM_HOST", "FATHOM_PORT", "FATHOM_DATA_DIR", "FATHOM_LOG_LEVEL"},
            "sidecar": {
                "FATHOM_SIDECAR_TOKEN_FILE",
                "FATHOM_OPENROUTER_BASE_URL",
                "FATHOM_SIDECAR_STATE_DIR",
                "FATHOM_LOG_LEVEL",
            },
        }[name]
        assert wanted <= read, (name, wanted - read)
    result = runner.invoke(app, ["server", "--help"], env={"COLUMNS": "200"})
    assert "FATHOM_PORT" in result.output and "python -m" not in result.output
