"""MCP over stdio, end to end: a real client session (the SDK's own client) to a spawned
`fathom mcp` process serving a pre-indexed project."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from fathom.config import Settings
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom

TOOLS = {
    "search_code",
    "search_docs",
    "find_similar",
    "read_code",
    "find_symbol",
    "find_references",
    "outline",
    "index_project",
    "list_projects",
    "index_status",
    "drop_project",
    "cancel_index",
    "find_calls",
}
# find_calls: listed once a project has symbols (here: indexed); add_git_project: only where a
# remote is allowed
AGENT_TOOLS = {"ask", "explore"}  # listed only where a route can serve their roles


@pytest.mark.slow
async def test_stdio_session_lists_tools_searches_and_survives_bad_calls(indexed):
    data, _, _ = indexed
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fathom.cli", "--data-dir", str(data), "mcp", "--in-process"],
        env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
    )
    async with asyncio.timeout(240):
        async with Client(params, read_timeout_seconds=180) as client:
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == TOOLS  # no LLM route here: no ask/explore
            schema = next(t for t in tools.tools if t.name == "search_code").input_schema
            assert "query" in schema["required"]

            result = await client.call_tool("search_code", {"query": "hash a password", "k": 3})
            assert not result.is_error
            hits = result.structured_content["results"]
            assert hits and hits[0]["path"] == "auth/password.py"
            assert all(1 <= h["start_line"] <= h["end_line"] for h in hits)
            # No reranker is configured here: the results say so instead of failing.
            assert result.structured_content["reranked"] is False
            assert "reranker" in result.structured_content["reason"]

            # A bad argument and an unknown project are tool errors with a clear message.
            bad = await client.call_tool("search_code", {"query": "x", "k": "many"})
            assert bad.is_error and "k" in bad.content[0].text
            unknown = await client.call_tool("search_code", {"query": "x", "project": "ghost"})
            assert unknown.is_error
            assert "no project 'ghost'" in unknown.content[0].text
            assert "Traceback" not in unknown.content[0].text

            # The server keeps serving.
            again = await client.call_tool("search_docs", {"query": "installation", "project": "shop"})
            assert not again.is_error
            assert again.structured_content["results"][0]["path"] == "README.md"


async def test_tools_in_process(indexed, tmp_path):
    data, root, encoder = indexed
    fathom = Fathom(Settings(data_dir=data), encoder=encoder)
    async with Client(build_mcp_server(fathom)) as client:
        listed = await client.call_tool("list_projects", {})
        assert [p["name"] for p in listed.structured_content["projects"]] == ["shop"]

        status = await client.call_tool("index_status", {"project": "shop"})
        assert not status.is_error
        tables = status.structured_content["tables"]
        assert tables["code"]["rows"] > 0 and tables["code"]["width"] == 384
        # Every row names the encoder and the gate verdict that cleared it for this table.
        verdict = fathom.gate.verdict_for(fathom.space("code"), encoder)
        assert verdict is not None and verdict.cleared
        assert tables["code"]["provenance"] == {f"{encoder.id}|{verdict.verdict_id}": tables["code"]["rows"]}

        similar = await client.call_tool(
            "find_similar", {"project": "shop", "path": "auth/password.py", "line": 9}
        )
        assert not similar.is_error
        results = similar.structured_content["results"]
        assert results[0]["symbol"] == "verify_password"  # its sibling, not itself
        assert all(
            not (r["path"] == "auth/password.py" and r["start_line"] <= 9 <= r["end_line"]) for r in results
        )

        snippet = await client.call_tool(
            "find_similar", {"project": "shop", "snippet": "sleep longer after every failed attempt"}
        )
        assert snippet.structured_content["results"][0]["path"] == "net/retry.py"

        for args, needle in [
            ({"project": "shop"}, "either path and line, or a snippet"),
            ({"project": "shop", "path": "nowhere.py", "line": 3}, "no indexed code chunk"),
            ({"project": "ghost", "snippet": "x"}, "no project 'ghost'"),
        ]:
            res = await client.call_tool("find_similar", args)
            assert res.is_error and needle in res.content[0].text, res.content[0].text

        missing = await client.call_tool("index_project", {"path": str(tmp_path / "absent")})
        assert missing.is_error and "no such folder" in missing.content[0].text

        # index_project through MCP: an incremental run of an unchanged project embeds nothing.
        again = await client.call_tool("index_project", {"path": str(root), "project": "shop"})
        assert not again.is_error
        assert again.structured_content["embedded"] == 0


async def test_search_code_says_why_each_hit_ranked(indexed):
    data, _, encoder = indexed
    fathom = Fathom(Settings(data_dir=data), encoder=encoder)
    async with Client(build_mcp_server(fathom)) as client:
        # A query naming a function: its definition first, flagged as named.
        named = await client.call_tool("search_code", {"query": "verify_password", "k": 5})
        top = named.structured_content["results"][0]
        assert (top["symbol"], top["match"]) == ("verify_password", "symbol")
        assert top["keyword_rank"] is not None and top["keyword_score"] > 0
        assert top["vector_rank"] is not None and -1 <= top["cosine"] <= 1
        # A question in plain words: ranked by meaning, no name matched; every hit carries
        # its places in the two lists (null where a list did not hold it).
        asked = await client.call_tool("search_code", {"query": "sleep longer after each failure", "k": 5})
        hits = asked.structured_content["results"]
        assert hits[0]["path"] == "net/retry.py" and all(h["match"] is None for h in hits)
        assert all({"vector_rank", "keyword_rank", "cosine", "keyword_score"} <= h.keys() for h in hits)
        assert any(h["vector_rank"] == 1 for h in hits)
        # Not reranked here: no reranker score, no place before reranking.
        assert all(h["rerank_score"] is None for h in hits)
        tool = next(t for t in (await client.list_tools()).tools if t.name == "search_code")
        fields = tool.output_schema["$defs"]["Result"]["properties"]
        # Listed without their descriptions (hosts keep output schemas from the model; the
        # dashboard's schema and docs/architecture.md say what each means).
        assert {"vector_rank", "keyword_rank", "match", "cosine"} <= fields.keys()
        assert "description" not in fields["vector_rank"]
