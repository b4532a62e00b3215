"""The operator's side of the confinement tests: an MCP client with a token (`mcp`), a project
indexed through the admin API (`index`), and a scoped token made through it (`token`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.server.admin_fixtures import Operator


def mcp(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


async def index(op: Operator, root: Path, project: str) -> dict[str, Any]:
    async with op.client() as admin:
        r = await admin.post("/admin/jobs", json={"path": str(root), "project": project})
        assert r.status_code == 202, r.text
        return await op.wait_job(admin, r.json()["id"])


async def token(op: Operator, name: str, projects: list[str], can_index: bool = False) -> str:
    async with op.client() as admin:
        r = await admin.post(
            "/admin/tokens", json={"name": name, "projects": projects, "can_index": can_index}
        )
        assert r.status_code == 201, r.text
        return r.json()["token"]
