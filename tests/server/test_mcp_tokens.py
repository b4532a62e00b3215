"""MCP tokens over the real server: a developer's token sees its own projects and nothing else,
reaches `/mcp` and nothing under `/admin`, indexes only when allowed and only under the
operator's roots, and is refused at once when revoked; the admin token keeps working on `/mcp`.

The server is the full app on a 127.0.0.1 socket; the clients are the MCP SDK's own client over
streamable HTTP and plain HTTP for the admin API, in the order an operator and two developers
would act.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import ADMIN
from tests.server.admin_fixtures import Operator, make_project
from tests.server.mcp_fixtures import create, mcp, text


async def test_an_mcp_token_sees_its_projects_only_and_no_admin_route(team: Operator):
    async with team.client() as admin:
        alice = await create(admin, "alice", ["alpha"])
        listed = (await admin.get("/admin/tokens")).json()
    assert listed["tokens"] == [
        {
            "name": "alice",
            "projects": ["alpha"],
            "can_index": False,
            "created_at": listed["tokens"][0]["created_at"],
        }
    ]
    assert alice not in json.dumps(listed)
    # Only the hash is on disk.
    stored = (team.data_dir / "mcp_tokens.json").read_text()
    assert alice not in stored and "sha256:" in stored

    async with mcp(team.url, alice) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"search_code", "search_docs", "find_similar", "list_projects", "index_status"} <= names
        assert "index_project" not in names  # a read-only token is not offered the tool that writes
        assert "add_git_project" not in names

        # Its own project: found.
        own = await client.call_tool("search_code", {"query": "add two numbers", "project": "alpha"})
        assert not own.is_error, text(own)
        assert own.structured_content["results"] and {
            r["project"] for r in own.structured_content["results"]
        } == {"alpha"}

        # "Every project" means every project of the token: beta's best match never comes back.
        every = await client.call_tool("search_code", {"query": "secret_beta_function", "k": 20})
        assert not every.is_error, text(every)
        assert {r["project"] for r in every.structured_content["results"]} == {"alpha"}
        assert "secret_beta_function" not in json.dumps(every.structured_content["results"])
        docs = await client.call_tool("search_docs", {"query": "usage"})
        assert {r["project"] for r in docs.structured_content["results"]} <= {"alpha"}

        listed = await client.call_tool("list_projects", {})
        assert [p["name"] for p in listed.structured_content["projects"]] == ["alpha"]

        # Another project's results, status, neighbours and exploration: refused, naming its own.
        for tool, args in (
            ("search_code", {"query": "secret", "project": "beta"}),
            ("search_docs", {"query": "x", "project": "beta"}),
            ("index_status", {"project": "beta"}),
            ("find_similar", {"project": "beta", "snippet": "return code"}),
            ("explore", {"question": "what is in vault.py?", "project": "beta"}),
            ("ask", {"question": "what does secret_beta_function do?", "project": "beta"}),
        ):
            refused = await client.call_tool(tool, args)
            assert refused.is_error, (tool, text(refused))
            assert "'beta' is not one this token may see; its projects: alpha" in text(refused), (
                tool,
                text(refused),
            )
            assert "secret_beta_function" not in text(refused)
        # A project that does not exist gets the same words: nothing is learnt from a refusal.
        ghost = await client.call_tool("index_status", {"project": "ghost"})
        assert ghost.is_error and "'ghost' is not one this token may see" in text(ghost)

        # The tool that writes is refused to a read-only token, even when called by name.
        root = team.tmp / "allowed" / "alpha"
        root.mkdir()
        denied = await client.call_tool("index_project", {"path": str(root), "project": "alpha"})
        assert denied.is_error and "read-only" in text(denied) and "--can-index" in text(denied)

    # Nothing under /admin, whatever the method; /metrics neither.
    async with httpx.AsyncClient(base_url=team.url, headers={"Authorization": f"Bearer {alice}"}) as dev:
        for method, path in (
            ("GET", "/admin/overview"),
            ("GET", "/admin/tokens"),
            ("POST", "/admin/key"),
            ("PUT", "/admin/policies"),
            ("POST", "/admin/jobs"),
            ("GET", "/metrics"),
            ("GET", "/openapi.json"),
            ("POST", "/admin/tokens"),
        ):
            r = await dev.request(method, path, json={"name": "mallory", "key": "sk-or-v1-x" * 4})
            assert r.status_code == 403, (method, path, r.status_code, r.text)
            assert "needs the admin token" in r.text and "alice" in r.text
    async with team.client() as admin:
        assert [t["name"] for t in (await admin.get("/admin/tokens")).json()["tokens"]] == ["alice"]
        audit = (await admin.get("/admin/audit")).json()["entries"]
    # Each attempt is in the audit log, under the token's name; so is the refused index_project.
    refused = [e for e in audit if e["who"] == "mcp:alice" and not e["what"].startswith("MCP ")]
    assert {e["what"] for e in refused} >= {"POST /admin/key", "PUT /admin/policies", "POST /admin/tokens"}
    assert all(e["outcome"].startswith("refused 403") for e in refused), refused
    tool = [e for e in audit if e["who"] == "mcp:alice" and e["what"].startswith("MCP index_project(")]
    assert len(tool) == 1 and tool[0]["outcome"].startswith("refused: index_project changes the index")
    assert alice not in (team.data_dir / "audit.log").read_text()


async def test_indexing_needs_can_index_and_an_allowed_root(team: Operator):
    allowed = team.tmp / "allowed"
    inside = make_project(allowed / "alpha")
    other = make_project(allowed / "gamma")
    outside = make_project(team.tmp / "elsewhere" / "alpha")
    (allowed / "escape").symlink_to(team.tmp / "elsewhere" / "alpha")
    async with team.client() as admin:
        bob = await create(admin, "bob", ["alpha"], can_index=True)
    async with mcp(team.url, bob) as client:
        assert "index_project" in {t.name for t in (await client.list_tools()).tools}
        for path in (outside, allowed / "escape", Path("/etc")):
            refused = await client.call_tool("index_project", {"path": str(path), "project": "alpha"})
            assert refused.is_error, path
            assert (
                f"outside the folders this server allows to be indexed over MCP; the allowed roots are "
                f"{os.path.realpath(allowed)}" in text(refused)
            ), text(refused)
        # Under the root but into a project it does not see (by name, or by the folder's name).
        for args in ({"path": str(other), "project": "gamma"}, {"path": str(other)}):
            refused = await client.call_tool("index_project", args)
            assert refused.is_error and "'gamma'" in text(refused) and "alpha" in text(refused), text(refused)
        done = await client.call_tool(
            "index_project", {"path": str(inside), "project": "alpha", "full": True, "wait": True}
        )
        assert not done.is_error, text(done)
        assert done.structured_content["project"] == "alpha" and done.structured_content["chunks"] > 0
    async with team.client() as admin:
        audit = (await admin.get("/admin/audit")).json()["entries"]
    bob_entries = [e for e in audit if e["who"] == "mcp:bob"]
    assert [e["outcome"] for e in bob_entries if "full=True" in e["what"]] == ["ok"]
    assert (
        sum(
            e["outcome"].startswith("refused: ") and "outside the folders" in e["outcome"]
            for e in bob_entries
        )
        == 3
    )
    assert bob not in json.dumps(audit) and bob not in (team.data_dir / "audit.log").read_text()
    assert not (team.data_dir / "lance").joinpath("gamma").exists()


async def test_a_revoked_token_is_refused_at_once_and_the_admin_token_still_works(team: Operator):
    async with team.client() as admin:
        carol = await create(admin, "carol", ["alpha"])
        async with mcp(team.url, carol) as client:
            assert not (await client.call_tool("list_projects", {})).is_error
            r = await admin.post("/admin/tokens/carol/revoke")
            assert r.status_code == 200 and r.json()["revoked"] is True
            # The same open session: its very next request is refused.
            with pytest.raises(Exception) as refused:
                await client.call_tool("list_projects", {})
            assert "The token sent to Fathom was refused" in str(refused.value), refused.value
        async with httpx.AsyncClient(base_url=team.url) as anon:
            r = await anon.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Authorization": f"Bearer {carol}", "Accept": "application/json, text/event-stream"},
            )
        assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]
        assert (await admin.post("/admin/tokens/carol/revoke")).status_code == 404
        assert (
            await admin.post("/admin/tokens", json={"name": "carol"})
        ).status_code == 201  # the name is free
        assert (await admin.post("/admin/tokens", json={"name": "carol"})).status_code == 409
        audit = [
            (e["who"], e["what"], e["outcome"]) for e in (await admin.get("/admin/audit")).json()["entries"]
        ]
    assert ("admin", "POST /admin/tokens/carol/revoke: revoked MCP token carol", "ok") in audit
    assert ("admin", "POST /admin/tokens/carol/revoke", "refused 404") in audit

    # The admin token on /mcp: every project, and index_project anywhere the server can read.
    async with mcp(team.url, ADMIN) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "index_project" in names
        listed = await client.call_tool("list_projects", {})
        assert {p["name"] for p in listed.structured_content["projects"]} == {"alpha", "beta"}
        beta = await client.call_tool("search_code", {"query": "secret_beta_function", "project": "beta"})
        assert not beta.is_error and beta.structured_content["results"][0]["project"] == "beta"
        anywhere = make_project(team.tmp / "operator-only")
        done = await client.call_tool(
            "index_project", {"path": str(anywhere), "project": "ops", "wait": True}
        )
        assert not done.is_error, text(done)


async def test_token_requests_are_validated_before_anything_is_written(team: Operator):
    async with team.client() as admin:
        for body, words in (
            ({"name": "bad name"}, "name"),
            ({"name": "x", "projects": ["bad\nname"]}, "invalid project"),
            ({"name": "x", "token": "fm_mine"}, "token"),
            ({}, "name"),
        ):
            r = await admin.post("/admin/tokens", json=body)
            assert r.status_code == 400 and words in r.text, (body, r.text)
        assert (await admin.get("/admin/tokens")).json()["tokens"] == []
    assert not (team.data_dir / "mcp_tokens.json").exists()


async def test_a_token_without_projects_sees_every_project(team: Operator):
    async with team.client() as admin:
        dana = await create(admin, "dana")
    async with mcp(team.url, dana) as client:
        listed = await client.call_tool("list_projects", {})
        assert {p["name"] for p in listed.structured_content["projects"]} == {"alpha", "beta"}
        denied = await client.call_tool("index_project", {"path": str(team.tmp / "allowed")})
        assert denied.is_error and "read-only" in text(denied)


def test_revocation_and_creation_survive_a_restart(tmp_path: Path):
    from fathom.server.tokens import McpTokens

    tokens = McpTokens(tmp_path)
    _, kept = tokens.create("erin", ["alpha"])
    _, gone = tokens.create("frank")
    tokens.revoke("frank")
    again = McpTokens(tmp_path)
    assert again.find(kept).name == "erin" and again.find(kept).projects == ["alpha"]
    assert again.find(gone) is None and again.find(None) is None and again.find("fm_guess") is None
