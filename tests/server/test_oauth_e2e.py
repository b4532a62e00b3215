"""OAuth end to end, as an MCP client that speaks only OAuth meets the team server: a real
OpenID Connect authorization server (panva's oidc-provider, `tests/oidc/provider.mjs`, run by the
venv's Node on 127.0.0.1) with one client and one user; the full Fathom app with
FATHOM_OAUTH_* pointing at it; and the MCP SDK's own OAuth client (`OAuthClientProvider`). The
client gets a 401, discovers the protected resource metadata and the issuer's metadata,
completes the authorization code grant with PKCE (the test plays the browser: it follows the
redirects, and the provider's interaction endpoint signs the user in and consents), and calls
`search_code` with the access token. The mapping holds: another project is refused and the
tool that writes is not offered to a read-only person.

Skipped only where Node or oidc-provider is missing (`make oidc-provider`) and CI is not set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.fleet.fleet_fixtures import free_port
from tests.server.oauth_fixtures import team_server

NODE = Path(sys.prefix) / "bin" / "node"
PROVIDER_MODULE = Path(sys.prefix) / "oidc-provider" / "node_modules" / "oidc-provider" / "lib" / "index.js"
PROVIDER_SCRIPT = Path(__file__).parents[1] / "oidc" / "provider.mjs"
CLIENT_ID = "fathom-e2e-client"
USER = {"sub": "alice-0001", "email": "alice@example.com", "groups": ["web"]}


def provider_or_skip() -> None:
    if NODE.exists() and PROVIDER_MODULE.exists():
        return
    why = f"needs {NODE} and {PROVIDER_MODULE} (`make oidc-provider` installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"the OAuth end-to-end test must run in CI: it {why}")
    pytest.skip(why)


class Storage:
    """The client's token storage: the pre-registered client, and whatever tokens it gets."""

    def __init__(self, client: OAuthClientInformationFull):
        self.client = client
        self.tokens: OAuthToken | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The person at the browser: opens the authorization URL, follows the provider's redirects
    (login, consent) with its cookies, and stops at the client's redirect URI."""

    def __init__(self, redirect_uri: str):
        self.redirect_uri = redirect_uri
        self.result: AuthorizationCodeResult | None = None
        self.visited: list[str] = []

    async def open(self, url: str) -> None:
        async with httpx.AsyncClient(follow_redirects=False, timeout=30) as browser:
            for _ in range(20):
                self.visited.append(url.split("?")[0])
                r = await browser.get(url)
                assert r.status_code in (302, 303), (
                    f"{url.split('?')[0]} answered {r.status_code}: {r.text[:500]}"
                )
                url = urljoin(url, r.headers["location"])
                if url.startswith(self.redirect_uri):
                    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
                    assert "code" in query, f"the authorization server refused: {query}"
                    self.result = AuthorizationCodeResult(
                        code=query["code"], state=query.get("state"), iss=query.get("iss")
                    )
                    return
        raise AssertionError(f"no redirect to the client after {self.visited}")

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


@pytest.mark.slow
async def test_an_oauth_only_mcp_client_signs_in_and_searches_within_its_mapping(tmp_path, monkeypatch):
    provider_or_skip()
    fathom_port, oidc_port, redirect_port = free_port(), free_port(), free_port()
    resource = f"http://127.0.0.1:{fathom_port}/mcp"
    redirect_uri = f"http://127.0.0.1:{redirect_port}/callback"  # never dialled: the browser stops there
    config = {
        "port": oidc_port,
        "provider_module": str(PROVIDER_MODULE),
        "client_id": CLIENT_ID,
        "redirect_uri": redirect_uri,
        "resource": resource,
        "scope": "fathom",
        "user": USER,
    }
    log = tmp_path / "oidc-provider.log"
    with log.open("wb") as stderr:
        # Its own process group: the venv's `node` is a Python launcher whose child is the real
        # node, and stopping the launcher alone would leave that child serving after the test.
        node = subprocess.Popen(
            [str(NODE), str(PROVIDER_SCRIPT)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "OIDC_TEST_CONFIG": json.dumps(config)},
            start_new_session=True,
        )
    try:
        assert node.stdout is not None
        line = (await asyncio.wait_for(asyncio.to_thread(node.stdout.readline), 30)).decode()
        if not line.startswith("ready "):
            raise AssertionError(f"oidc-provider did not start: {line}{log.read_text()}")
        issuer = line.split()[1]
        async with team_server(tmp_path, monkeypatch, issuer, port=fathom_port) as op:
            assert f"{op.url}/mcp" == resource
            browser = Browser(redirect_uri)
            storage = Storage(
                OAuthClientInformationFull(
                    client_id=CLIENT_ID,
                    redirect_uris=[redirect_uri],
                    token_endpoint_auth_method="none",
                    grant_types=["authorization_code", "refresh_token"],
                    response_types=["code"],
                )
            )
            auth = OAuthClientProvider(
                server_url=resource,
                client_metadata=OAuthClientMetadata(
                    redirect_uris=[redirect_uri],
                    token_endpoint_auth_method="none",
                    grant_types=["authorization_code", "refresh_token"],
                    client_name="fathom e2e",
                ),
                storage=storage,
                redirect_handler=browser.open,
                callback_handler=browser.callback,
            )
            seen: list[tuple[int, str]] = []

            async def record(response: httpx2.Response) -> None:
                seen.append((response.status_code, str(response.request.url).split("?")[0]))

            http = httpx2.AsyncClient(auth=auth, timeout=60, event_hooks={"response": [record]})
            async with Client(streamable_http_client(resource, http_client=http)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                found = await client.call_tool(
                    "search_code", {"query": "add two numbers", "project": "alpha"}
                )
                other = await client.call_tool("search_code", {"query": "add", "project": "beta"})

            # The client was refused, discovered the server's metadata and the issuer's, signed in
            # at the provider, and got a JWT for this resource.
            assert seen[0] == (401, resource), seen
            assert (200, f"{op.url}/.well-known/oauth-protected-resource/mcp") in seen, seen
            assert any(code == 200 and url.startswith(issuer + "/.well-known/") for code, url in seen), seen
            assert (200, f"{issuer}/token") in seen, seen
            assert any(u.endswith("/auth") for u in browser.visited), browser.visited
            assert any("/interaction/" in u for u in browser.visited), browser.visited
            assert (
                storage.tokens is not None
                and storage.tokens.scope
                and "fathom" in storage.tokens.scope.split()
            )
            import jwt

            claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
            assert claims["aud"] == resource and claims["iss"] == issuer and claims["email"] == USER["email"]

            assert not found.is_error, found.content[0].text
            assert {r["project"] for r in found.structured_content["results"]} == {"alpha"}
            assert other.is_error and "'beta' is not one this token may see" in other.content[0].text
            assert "search_code" in names and "index_project" not in names
            async with op.client() as admin:
                shown = (await admin.get("/admin/oauth")).json()
            assert shown["issuer"] == issuer and shown["keys_held"]  # the provider's JWKS, fetched
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGTERM)
        try:
            node.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)  # whatever of the group is left
        node.wait()
