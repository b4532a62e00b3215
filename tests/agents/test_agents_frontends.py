"""`ask` and `explore` as MCP tools (a real in-process MCP client session) and CLI commands."""

from __future__ import annotations

from mcp import Client
from typer.testing import CliRunner

from fathom.cli import app
from fathom.inference.budget import CloudBudget
from fathom.policy import Policy
from fathom.roles import FallbackMode, Role
from fathom.server.mcp_tools import build_mcp_server
from tests.agents.agents_fixtures import cloud, make_router, routing


async def test_mcp_ask_and_explore(indexed_shop, emulator):
    budget = CloudBudget()
    router = make_router(
        routing(code_assistant=(Policy.CLOUD, FallbackMode.ANY), rlm=(Policy.CLOUD, FallbackMode.ANY)),
        [cloud(emulator, Role.CODE_ASSISTANT, budget), cloud(emulator, Role.RLM, budget)],
    )
    emulator.control.script(
        [
            {"content": "Salted PBKDF2 [1]."},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "/etc/passwd"}}]},
            {"tool_calls": [{"name": "grep", "arguments": {"pattern": "pbkdf2_hmac"}}]},
            {"content": "PBKDF2 in auth/password.py:10."},
        ]
    )
    async with Client(build_mcp_server(indexed_shop.fathom, router=router)) as client:
        # A route serves both roles here: both tools are listed, every parameter described.
        listed = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("ask", "explore"):
            assert listed[name].title and listed[name].annotations.read_only_hint
            props = listed[name].input_schema["properties"]
            assert props and all(p.get("description") for p in props.values()), name
        asked = await client.call_tool("ask", {"question": "how are passwords hashed?", "project": "shop"})
        assert not asked.is_error
        out = asked.structured_content
        assert out["answer"] == "Salted PBKDF2 [1]." and out["citations"][0].startswith("auth/password.py:")
        assert out["reranked"] is False  # no reranker registered: said, not hidden

        explored = await client.call_tool(
            "explore", {"question": "where is pbkdf2 used?", "project": "shop", "max_steps": 4}
        )
        assert not explored.is_error
        e = explored.structured_content
        assert e["complete"] and e["citations"] == ["auth/password.py:10"]
        assert [t["tool"] for t in e["trace"]] == ["read_file", "grep"]
        assert not e["trace"][0]["ok"] and "absolute" in e["trace"][0]["summary"]

        bad = await client.call_tool("explore", {"question": "x", "project": "shop", "max_steps": 0})
        assert bad.is_error and "max_steps must be a whole number from 1 to" in bad.content[0].text
    assert budget.state().granted_total == 4


async def test_mcp_explore_default_route_is_local_only(indexed_shop, emulator):
    async with Client(build_mcp_server(indexed_shop.fathom)) as client:  # the standalone router
        # No route can serve either role on this machine: neither tool is listed...
        names = {t.name for t in (await client.list_tools()).tools}
        assert not names & {"ask", "explore"} and "search_code" in names
        # ...and one called anyway says why, and what to configure here.
        result = await client.call_tool("explore", {"question": "x", "project": "shop"})
        assert result.is_error
        assert "local-only" in result.content[0].text
        assert "never calls the cloud whatever its policy" in result.content[0].text
        assert "FATHOM_LOCAL_CHAT_URL" in result.content[0].text
    assert emulator.control.counters()["requests"] == {}


def test_cli_ask_and_explore_refuse_in_one_line(indexed_shop):
    runner = CliRunner()
    obj = {"fathom": indexed_shop.fathom}
    result = runner.invoke(
        app, ["explore", "how are passwords hashed?", "-p", "shop"], obj=obj, env={"COLUMNS": "200"}
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "error: explore cannot run: role rlm is in fallback mode local-only" in result.output
    assert "set FATHOM_LOCAL_CHAT_URL and FATHOM_LOCAL_CHAT_MODEL (or FATHOM_LOCAL_RLM_URL" in result.output

    result = runner.invoke(
        app, ["ask", "how are passwords hashed?", "-p", "shop"], obj=obj, env={"COLUMNS": "200"}
    )
    assert result.exit_code == 1, result.output
    assert "no provider can serve role code-assistant" in result.output
    assert "FATHOM_LOCAL_CODE_ASSISTANT_URL" in result.output
