"""What an agent connected to a one-machine install sees, through a real MCP session (the SDK's
own client over the server `build_mcp_server` builds, as `fathom mcp` serves it):

- the tool list fits an agent's context: with a project indexed (every tool a solo install
  lists), what a model is shown of each tool (name, description, input schema) is at most
  14,000 characters, the whole list as sent at most 25,000, and a tool the configuration makes useless (`add_git_project` with no git remote
  allowed) is not listed;
- a search's answer says nothing of sidecars or OpenRouter keys unless a fleet is configured.
"""

from __future__ import annotations

import json
import shutil

import pytest
from mcp import Client

from fathom.config import Settings
from fathom.fleet.auth import FleetAuth
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.index.retrieval_fixtures import index_sample

MODEL_SEES_MAX = 14_000  # name + description + input schema, summed over the tools
WHOLE_LIST_MAX = 25_000  # the tools/list answer's tools as JSON, output schemas included


def wire(tool) -> dict:
    """A listed tool as the server sends it (JSON, aliases, no nulls)."""
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def model_sees(tool) -> int:
    return len(tool.name) + len(tool.description or "") + len(compact(wire(tool)["inputSchema"]))


@pytest.fixture
def solo(monkeypatch):
    """The configuration of one developer on one laptop: nothing of a fleet or git remotes."""
    for name in ("FATHOM_GIT_REMOTES", "FATHOM_JOIN_TOKEN", "FATHOM_STORE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, local_encoder):
    data, _ = index_sample(tmp_path_factory.mktemp("first-minutes"), local_encoder)
    return data, local_encoder


async def test_the_tool_list_fits_an_agents_context(solo, indexed):
    data, encoder = indexed  # a project indexed: every tool a solo install lists (find_calls)
    fathom = Fathom(Settings(data_dir=data), encoder=encoder)
    async with Client(build_mcp_server(fathom)) as client:
        tools = (await client.list_tools()).tools
    names = {t.name for t in tools}
    assert {"search_code", "find_calls"} <= names
    assert "add_git_project" not in names  # no remote is allowed
    sees = sum(model_sees(t) for t in tools)
    whole = len(compact([wire(t) for t in tools]))
    assert sees <= MODEL_SEES_MAX, f"the model is shown {sees} characters of tools"
    assert whole <= WHOLE_LIST_MAX, f"tools/list carries {whole} characters"
    for tool in tools:  # compact, yet every parameter still described
        schema = compact(wire(tool))
        assert '"title":"' not in schema.replace(f'"title":"{tool.title}"', ""), tool.name
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name}"


async def test_add_git_project_is_listed_where_a_remote_is_allowed(solo, tmp_path):
    settings = Settings(data_dir=tmp_path / "data", git_remotes="https://git.example.com/team/")
    async with Client(build_mcp_server(Fathom(settings))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert "add_git_project" in tools
    assert "url" in tools["add_git_project"].input_schema["required"]


async def search(data, encoder) -> tuple[str, dict]:
    async with Client(build_mcp_server(Fathom(Settings(data_dir=data), encoder=encoder))) as client:
        found = await client.call_tool("search_code", {"query": "hash a password", "k": 3})
    assert not found.is_error
    assert found.structured_content["results"][0]["path"] == "auth/password.py"
    return found.content[0].text, found.structured_content


async def test_a_solo_search_says_nothing_of_the_fleet(solo, indexed):
    data, encoder = indexed
    text, structured = await search(data, encoder)
    assert structured["reranked"] is False and "no reranker is configured" in structured["reason"]
    said = (text + compact(structured)).lower()
    assert "sidecar" not in said and "openrouter" not in said and "key push" not in said


async def test_where_a_fleet_is_configured_the_search_names_its_fixes(solo, indexed, tmp_path):
    data, encoder = indexed
    # The server was started with a join token (`fathom server` with FATHOM_JOIN_TOKEN writes
    # its fleet record so), though no sidecar has joined yet.
    fleet_data = tmp_path / "fleet-data"
    shutil.copytree(data, fleet_data)
    FleetAuth(fleet_data, join_tokens=["fj-a-join-token-for-this-test-only-0123456789"])
    _, structured = await search(fleet_data, encoder)
    assert structured["reranked"] is False
    assert "start a sidecar" in structured["reason"] and "OpenRouter key" in structured["reason"]
