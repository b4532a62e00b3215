"""What an MCP client without a valid token is told, by the clients themselves.

The server answers `/mcp` without a valid token with a 401 that follows the MCP authorization
specification for a server using static bearer tokens: an RFC 6750 `Bearer` challenge with no
`resource_metadata` (no authorization server is advertised), 404 on every OAuth discovery
document and on OAuth's default endpoints, and a JSON-RPC error body saying how to configure a
token. Checked with the Python SDK's own client, and with the MCP Inspector CLI from npm (a
Node.js client; `make mcp-inspector` installs it, with the Node.js it needs, into the venv).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fleet.fleet_fixtures import ADMIN
from tests.server.admin_fixtures import Operator

CONFIGURE = "Configure your MCP client to send the header `Authorization: Bearer <token>`"
NOT_OAUTH = "This server uses static bearer tokens, not OAuth."
INSPECTOR = Path(sys.executable).parent.parent / "mcp-inspector" / "node_modules" / ".bin" / "mcp-inspector"
DISCOVERY = (
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
)


async def sdk_session(url: str, token: str | None, seen: list[str]) -> None:
    async def record(request: httpx2.Request) -> None:
        seen.append(f"{request.method} {request.url.path}")

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"request": [record]})
    async with (
        asyncio.timeout(60),
        http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        await client.list_tools()


def what_the_client_says(exc: BaseException) -> str:
    """The error the SDK raised, out of the task groups it came through."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


async def test_the_python_sdk_client_is_told_how_to_configure_a_token(operator: Operator):
    for token, opening in (
        (None, "Fathom needs a token. "),
        ("fm_not-a-token-of-this-server", "The token sent to Fathom was refused"),
    ):
        seen: list[str] = []
        with pytest.raises(Exception) as refused:
            await sdk_session(operator.url, token, seen)
        message = what_the_client_says(refused.value)
        print(f"Python SDK client, token={token!r}: {message}")
        assert opening in message and CONFIGURE in message and NOT_OAUTH in message
        assert f"claude mcp add --transport http fathom {operator.url}/mcp" in message
        # It went nowhere near OAuth: every request it made was to /mcp.
        assert seen and all(s.endswith(" /mcp") for s in seen), seen
    seen = []
    await sdk_session(operator.url, ADMIN, seen)  # and with the token it is served


async def test_the_401_and_the_discovery_documents_say_there_is_no_oauth(operator: Operator):
    async with httpx.AsyncClient(base_url=operator.url) as anon:
        bare = await anon.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        wrong = await anon.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer fm_wrong"},
        )
        documents = [await anon.get(path) for path in DISCOVERY]
        defaults = [
            await anon.post("/register", json={"redirect_uris": ["http://127.0.0.1/cb"]}),
            await anon.get("/authorize"),
            await anon.post("/token", data={"grant_type": "x"}),
        ]
    assert bare.status_code == wrong.status_code == 401
    # RFC 6750: no credentials, no error code; a wrong one, invalid_token. No resource_metadata.
    assert bare.headers["www-authenticate"] == 'Bearer realm="fathom"'
    assert wrong.headers["www-authenticate"].startswith('Bearer realm="fathom", error="invalid_token"')
    for r in (bare, wrong):
        assert "resource_metadata" not in r.headers["www-authenticate"]
        body = r.json()
        assert body["jsonrpc"] == "2.0" and CONFIGURE in body["error"]["message"]
    for r in (*documents, *defaults):
        assert r.status_code == 404, (r.request.url, r.status_code)
        assert "static bearer tokens, not OAuth" in r.json()["error_description"]


def inspector(
    args: list[str], home: Path, *, tty: bool = False, timeout: float = 120
) -> tuple[int, str, str]:
    """Run the MCP Inspector CLI; with `tty`, as a person at a terminal would (stdin a pty).
    Returns its exit code, its stdout and its stdout and stderr together."""
    if not INSPECTOR.exists():
        pytest.fail(f"the MCP Inspector CLI is not installed at {INSPECTOR}: run `make mcp-inspector`")
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "BROWSER": "/bin/true",
        "MCP_AUTO_OPEN_ENABLED": "false",
        "NO_COLOR": "1",
    }
    master = slave = None
    if tty:
        master, slave = pty.openpty()
    try:
        done = subprocess.run(
            [str(INSPECTOR), "--cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=slave if tty else subprocess.DEVNULL,
        )
    finally:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
    return done.returncode, done.stdout, done.stdout + done.stderr


@pytest.mark.slow
async def test_the_mcp_inspector_cli_is_told_how_to_configure_a_token(operator: Operator, tmp_path: Path):
    url = f"{operator.url}/mcp"
    listing = [url, "--transport", "http", "--method", "tools/list"]

    # Unattended (CI), as the Inspector is meant to run there: the 401's message, as it is.
    code, _, out = await asyncio.to_thread(inspector, [*listing, "--stored-auth-only"], tmp_path)
    print(f"MCP Inspector CLI, no token, --stored-auth-only (exit {code}):\n{out}")
    assert code != 0 and "Fathom needs a token" in out and CONFIGURE in out and NOT_OAUTH in out
    code, _, out = await asyncio.to_thread(
        inspector, [*listing, "--stored-auth-only", "--header", "Authorization: Bearer fm_wrong"], tmp_path
    )
    print(f"MCP Inspector CLI, wrong token (exit {code}):\n{out}")
    assert code != 0 and "The token sent to Fathom was refused" in out and CONFIGURE in out

    # At a terminal the Inspector tries OAuth on any 401 by itself; it finds no authorization
    # server and ends on the same advice (what /register answers), never at a login page.
    code, _, out = await asyncio.to_thread(inspector, listing, tmp_path, tty=True)
    print(f"MCP Inspector CLI at a terminal, no token (exit {code}):\n{out}")
    assert code != 0 and "static bearer tokens, not OAuth" in out and "Authorization: Bearer <token>" in out

    # With a token it is served.
    async with operator.client() as admin:
        token = (await admin.post("/admin/tokens", json={"name": "inspector"})).json()["token"]
    code, listed, out = await asyncio.to_thread(
        inspector, [*listing, "--header", f"Authorization: Bearer {token}"], tmp_path
    )
    assert code == 0, out
    names = {t["name"] for t in json.loads(listed)["tools"]}
    assert {"search_code", "list_projects"} <= names and "index_project" not in names
