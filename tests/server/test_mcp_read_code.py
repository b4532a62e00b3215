"""`read_code` and the `fathom://` resources, through the MCP SDK's own client: a hit's id and
its resource link read the hit's exact lines, as indexed; the answer says when the file on disk
changed since; nothing a walk leaves out is read; a scoped token reads no other project by path,
by id or by URI (stdio and streamable HTTP alike).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from fathom.config import Settings
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import ADMIN
from tests.index.retrieval_fixtures import write_project
from tests.server.admin_fixtures import Operator
from tests.server.mcp_fixtures import create, mcp


def lines_of(path: Path, start: int, end: int) -> list[str]:
    return path.read_text().splitlines()[start - 1 : end]


def numbered(result: Any) -> tuple[str, list[str]]:
    """The text block of a read_code answer: its head line, and the lines without numbers."""
    head, *rest = result.content[0].text.split("\n")
    return head, [line.split("\t", 1)[1] for line in rest if "\t" in line]


async def read_link(client: Client, result: Any) -> tuple[str, str]:
    """The first resource link of a search answer, and the text resources/read gives for it."""
    link = next(c for c in result.content if c.type == "resource_link")
    read = await client.read_resource(link.uri)
    return link.uri, read.contents[0].text


@pytest.fixture
def shop(tmp_path: Path, local_encoder) -> tuple[Fathom, Path]:
    root = write_project(tmp_path / "shop")
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    asyncio.run(fathom.index(root, "shop"))
    return fathom, root


async def test_a_hits_id_and_resource_link_read_its_exact_lines(shop):
    fathom, root = shop
    async with Client(build_mcp_server(fathom)) as client:
        found = await client.call_tool("search_code", {"query": "hash a password", "k": 3})
        hit = found.structured_content["results"][0]
        assert hit["path"] == "auth/password.py" and hit["id"].startswith("shop:code:")
        expected = lines_of(root / hit["path"], hit["start_line"], hit["end_line"])

        by_id = await client.call_tool("read_code", {"id": hit["id"]})
        assert not by_id.is_error, by_id.content[0].text
        head, got = numbered(by_id)
        assert got == expected
        assert f"shop:auth/password.py:{hit['start_line']}-{hit['end_line']}" in head
        meta = by_id.structured_content
        assert (meta["start_line"], meta["end_line"], meta["on_disk"]) == (
            hit["start_line"],
            hit["end_line"],
            "unchanged",
        )

        # Every hit links its lines as a resource; reading the link gives the same text.
        links = [c for c in found.content if c.type == "resource_link"]
        assert [c.uri for c in links] == [r["uri"] for r in found.structured_content["results"]]
        uri, text = await read_link(client, found)
        assert uri == hit["uri"] and text.split("\n") == expected

        # By path and range; a range past the end is held to the file.
        whole = (root / "auth/password.py").read_text().splitlines()
        ranged = await client.call_tool(
            "read_code", {"project": "shop", "path": "auth/password.py", "start_line": 2, "end_line": 10_000}
        )
        assert numbered(ranged)[1] == whole[1:]
        assert ranged.structured_content["last_line"] == len(whole)

        # The resource template is listed, with its line range.
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["fathom://{project}/{+path}{?lines}"]


async def test_read_code_says_when_the_file_changed_and_never_reads_what_a_walk_leaves_out(shop):
    fathom, root = shop
    path = root / "auth/password.py"
    indexed = path.read_text().splitlines()
    async with Client(build_mcp_server(fathom)) as client:
        args = {"project": "shop", "path": "auth/password.py"}
        path.write_text(path.read_text().replace("def hash_password", "def hashed_password"))
        changed = await client.call_tool("read_code", args)
        assert changed.structured_content["on_disk"] == "changed"
        assert numbered(changed)[1] == indexed  # the indexed version, not the file now

        path.unlink()
        gone = await client.call_tool("read_code", args)
        assert gone.structured_content["on_disk"] == "deleted" and numbered(gone)[1] == indexed

        # Now left out by the project's own rules: refused, although the index still holds it.
        path.write_text("\n".join(indexed) + "\n")
        (root / ".fathomignore").write_text("auth/\n")
        for refused in (
            await client.call_tool("read_code", args),
            await client.call_tool("read_code", args | {"start_line": 1}),
        ):
            assert refused.is_error and "(fathomignored)" in refused.content[0].text
            assert "hash_password" not in refused.content[0].text
        with pytest.raises(MCPError, match="fathomignored"):
            await client.read_resource("fathom://shop/auth/password.py?lines=1-3")

        # Only what the index holds: a path it never indexed, a bad id, a climbing URI.
        for bad, needle in (
            ({"project": "shop", "path": "nowhere.py"}, "no indexed file"),
            ({"id": "shop:code:xyz"}, "is not a hit id"),
            ({"id": "shop:code:" + "0" * 32}, "search again"),
            ({"project": "shop"}, "needs `project` and `path`"),
        ):
            res = await client.call_tool("read_code", bad)
            assert res.is_error and needle in res.content[0].text, res.content[0].text
        with pytest.raises(MCPError):
            await client.read_resource("fathom://shop/../data/secret.py")


async def test_read_code_holds_to_max_tokens_and_says_where_to_read_on(tmp_path, local_encoder):
    body = "\n".join(f"def function_number_{i}(argument):\n    return argument * {i}\n" for i in range(400))
    root = write_project(tmp_path / "big", {"many.py": body})
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    await fathom.index(root, "big")
    every = (root / "many.py").read_text().splitlines()
    async with Client(build_mcp_server(fathom)) as client:
        first = await client.call_tool("read_code", {"project": "big", "path": "many.py", "max_tokens": 1000})
        meta, got = first.structured_content, numbered(first)[1]
        assert meta["next_start_line"] == meta["end_line"] + 1 < len(every)
        assert got == every[: meta["end_line"]] and meta["tokens"] <= 1000
        rest = await client.call_tool(
            "read_code",
            {
                "project": "big",
                "path": "many.py",
                "start_line": meta["next_start_line"],
                "end_line": meta["next_start_line"] + 3,
            },
        )
        assert numbered(rest)[1] == every[meta["end_line"] : meta["end_line"] + 4]
        with pytest.raises(MCPError, match=r"read it in parts, e.g. \?lines=1-"):
            await client.read_resource("fathom://big/many.py")


@pytest.mark.slow
async def test_over_stdio_a_hits_id_and_link_read_its_lines(indexed):
    data, root, _ = indexed
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fathom.cli", "--data-dir", str(data), "mcp", "--in-process"],
        env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            # the fathom under test, where a worktree's src is put ahead of the installed one
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
    )
    async with asyncio.timeout(240):
        async with Client(params, read_timeout_seconds=180) as client:
            assert "read_code" in {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("search_code", {"query": "retry with backoff", "k": 3})
            hit = found.structured_content["results"][0]
            expected = lines_of(root / hit["path"], hit["start_line"], hit["end_line"])
            assert numbered(await client.call_tool("read_code", {"id": hit["id"]}))[1] == expected
            uri, text = await read_link(client, found)
            assert uri == hit["uri"] and text.split("\n") == expected


async def test_a_scoped_token_reads_no_other_project_by_path_id_or_uri(team: Operator):
    async with team.client() as admin:
        alice = await create(admin, "alice", ["alpha"])
    async with mcp(team.url, ADMIN) as operator:
        found = await operator.call_tool("search_code", {"query": "secret_beta_function", "project": "beta"})
        beta = found.structured_content["results"][0]
        assert beta["path"] == "vault.py"
        assert "secret_beta_function" in (await operator.read_resource(beta["uri"])).contents[0].text
    async with mcp(team.url, alice) as client:
        own = await client.call_tool("search_code", {"query": "add two numbers", "project": "alpha"})
        hit = own.structured_content["results"][0]
        expected = lines_of(team.tmp / "src" / "alpha" / hit["path"], hit["start_line"], hit["end_line"])
        assert numbered(await client.call_tool("read_code", {"id": hit["id"]}))[1] == expected
        assert (await read_link(client, own))[1].split("\n") == expected

        for args in (
            {"project": "beta", "path": "vault.py"},
            {"id": beta["id"]},
            {"project": "beta", "id": beta["id"]},
        ):
            refused = await client.call_tool("read_code", args)
            assert refused.is_error, args
            assert "beta" in refused.content[0].text  # named as asked, and nothing of it shown
            assert "secret_beta_function" not in json.dumps(refused.model_dump(mode="json"))
        for uri in (beta["uri"], "fathom://beta/vault.py", "fathom://beta/vault.py?lines=1-2"):
            with pytest.raises(MCPError) as refused_read:
                await client.read_resource(uri)
            assert "secret_beta_function" not in str(refused_read.value)
            assert "no project 'beta'" in str(refused_read.value)
