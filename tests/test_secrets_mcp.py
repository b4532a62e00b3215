"""Nothing secret reaches an agent: a project holding every kind of credential file and code
with embedded keys is indexed by the real server, and `search_code` / `search_docs` over a real
MCP session (streamable HTTP on 127.0.0.1), with the admin token and with a read-only scoped
token, given each secret's own text as the query, serve none of it. The job's report counts
the files as `secret` and names them; a `!path` line in `.fathomignore` takes one back, and
then it is served.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.admin_fixtures import Operator, build_operator_app
from tests.fleet_fixtures import ADMIN, serve_in_loop
from tests.secret_fixtures import write_secret_project


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Operator]:
    app = build_operator_app(tmp_path / "data")
    async with serve_in_loop(app) as url:
        yield Operator(url, app, tmp_path / "data", tmp_path)


def mcp(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


async def index(op: Operator, root: Path) -> dict[str, Any]:
    async with op.client() as admin:
        r = await admin.post("/admin/jobs", json={"path": str(root), "project": "vault"})
        assert r.status_code in (200, 201, 202), r.text
        job = await op.wait_job(admin, r.json()["id"])
    assert job["state"] == "done", job
    return job


def queries(needle: str) -> list[str]:
    """The secret's text as a query: whole, and its longest line (a key block's body line)."""
    lines = [ln for ln in needle.splitlines() if ln.strip()]
    return list(dict.fromkeys([needle[:500], max(lines, key=len)[:500]]))


async def served(client: Client, query: str) -> str:
    """Everything two searches over the project answer, as text (less the query they echo)."""
    out = []
    for tool in ("search_code", "search_docs"):
        result = await client.call_tool(tool, {"query": query, "project": "vault", "k": 50})
        assert not result.is_error, result.content[0].text
        answer = dict(result.structured_content or {})
        assert answer.pop("query", query) == query
        out.append(json.dumps(answer))
    return "\n".join(out)


async def test_no_secret_is_served_through_mcp_and_a_fathomignore_line_takes_one_back(
        server: Operator):
    root = server.tmp / "vault"
    secret, plain = write_secret_project(root)
    job = await index(server, root)
    assert job["report"]["skipped"]["secret"] == len(secret)
    assert job["report"]["secrets"] == sorted(secret)
    async with server.client() as admin:
        r = await admin.post("/admin/tokens", json={"name": "reader", "projects": ["vault"]})
        assert r.status_code == 201, r.text
        reader = r.json()["token"]

    for token in (ADMIN, reader):
        async with mcp(server.url, token) as client:
            for rel, word in plain.items():  # the index answers: what is not secret is found
                assert rel in await served(client, word), rel
            for rel, needle in secret.items():
                for query in queries(needle):
                    answer = await served(client, query)
                    assert needle not in answer, (token == ADMIN, rel)
                    assert f'"path": "{rel}"' not in answer, (token == ADMIN, rel)

    # The operator takes two back, by name: they are read, indexed and served.
    (root / ".fathomignore").write_text("!config/database.yml\n!src/keys_openrouter_key.py\n")
    job = await index(server, root)
    assert job["report"]["skipped"]["secret"] == len(secret) - 2
    async with mcp(server.url, reader) as client:
        for rel in ("config/database.yml", "src/keys_openrouter_key.py"):
            assert secret[rel] in await served(client, secret[rel]), rel
        # The rest stay out.
        answer = await served(client, secret[".env"])
        assert secret[".env"] not in answer
