"""MCP sessions on the operator's server: the SDK's own client over streamable HTTP with a
token (`mcp`), a token made through the admin API (`create`), an answer's text (`text`), and
the server with two indexed projects, alpha and beta, and one allowed index root (`team`); a
data dir holding the sample project, indexed once per module with the local encoder
(`indexed`); and, for a raw HTTP client, an `initialize` request (`INIT`) and the headers a
streamable HTTP request carries (`MCP_HEADERS`).

A test names them as parameters: `tests/conftest.py` provides every fixtures module's fixtures.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fathom.config import Settings
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import serve_in_loop
from tests.index.retrieval_fixtures import write_project
from tests.server.admin_fixtures import Operator, build_operator_app, make_project

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
async def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Operator]:
    """The server with two indexed projects, alpha and beta, and one allowed index root."""
    (tmp_path / "allowed").mkdir()
    monkeypatch.setenv("FATHOM_INDEX_ROOTS", str(tmp_path / "allowed"))
    app = build_operator_app(tmp_path / "data")
    async with serve_in_loop(app) as url:
        op = Operator(url, app, tmp_path / "data", tmp_path)
        alpha = make_project(tmp_path / "src" / "alpha")
        beta = tmp_path / "src" / "beta"
        beta.mkdir(parents=True)
        (beta / "vault.py").write_text("def secret_beta_function(code):\n    return 'beta only ' + code\n")
        async with op.client() as admin:
            for root, name in ((alpha, "alpha"), (beta, "beta")):
                job = (await admin.post("/admin/jobs", json={"path": str(root), "project": name})).json()
                assert (await op.wait_job(admin, job["id"]))["state"] == "done"
        yield op


def mcp(url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


async def create(
    admin: httpx.AsyncClient, name: str, projects: list[str] | None = None, can_index: bool = False
) -> str:
    r = await admin.post("/admin/tokens", json={"name": name, "projects": projects, "can_index": can_index})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["token"].startswith("fm_") and body["name"] == name
    return body["token"]


def text(result: Any) -> str:
    return result.content[0].text


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, local_encoder):
    """A data dir holding the small sample project, indexed once for the module."""
    base = tmp_path_factory.mktemp("mcp")
    root = write_project(base / "shop")
    data = base / "data"
    fathom = Fathom(Settings(data_dir=data), encoder=local_encoder)
    asyncio.run(fathom.index(root, "shop"))
    return data, root, local_encoder
