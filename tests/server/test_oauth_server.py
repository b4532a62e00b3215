"""OAuth on the real server: the full app on 127.0.0.1 with FATHOM_OAUTH_* set, a stand-in
issuer serving its JWKS over HTTP (tests/server/oauth_fixtures.py), and MCP sessions of the SDK's
client. A 401 points at the protected resource metadata (RFC 9728), which names the issuer; a
valid access token opens `/mcp` as the mapping says (its projects, no write tool when
read-only) and the audit log names the person; refused tokens say why; the static tokens keep
working beside it, and each path can be turned off."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.fleet.fleet_fixtures import free_port
from tests.server.admin_fixtures import AUTH, Operator
from tests.server.mcp_fixtures import create, mcp, text
from tests.server.oauth_fixtures import MAPPING, Issuer, rsa_key, running_issuer, team_server


def mint(issuer: Issuer, op: Operator, **claims: Any) -> str:
    return issuer.mint(**{"aud": f"{op.url}/mcp", **claims})


async def test_the_401_points_at_the_metadata_which_names_the_issuer(tmp_path, monkeypatch):
    async with running_issuer(rsa_key()) as issuer, team_server(tmp_path, monkeypatch, issuer) as op:
        async with httpx.AsyncClient(base_url=op.url) as anon:
            r = await anon.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert r.status_code == 401
            challenge = r.headers["www-authenticate"]
            assert challenge == (
                f'Bearer realm="fathom", resource_metadata='
                f'"{op.url}/.well-known/oauth-protected-resource/mcp", scope="fathom"'
            )
            assert issuer.url in r.json()["error"]["message"]
            for path in (
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource",
            ):
                meta = await anon.get(path)
                assert meta.status_code == 200, path
                assert meta.json() == {
                    "resource": f"{op.url}/mcp",
                    "authorization_servers": [issuer.url],
                    "bearer_methods_supported": ["header"],
                    "resource_name": "Fathom",
                    "scopes_supported": ["fathom"],
                }
            # This server is no authorization server: its own AS metadata is a 404 naming the issuer.
            other = await anon.get("/.well-known/oauth-authorization-server")
            assert other.status_code == 404 and issuer.url in other.json()["error_description"]

            # A refused token: invalid_token, and why.
            expired = mint(issuer, op, exp=1_000_000_000, iat=999_999_000)
            r = await anon.post("/mcp", json={}, headers={"Authorization": f"Bearer {expired}"})
            assert r.status_code == 401, r.text
            assert (
                'error="invalid_token", error_description="it has expired; sign in again"'
                in r.headers["www-authenticate"]
            )
            foreign = mint(issuer, op, aud="https://other.example/mcp")
            r = await anon.post("/mcp", json={}, headers={"Authorization": f"Bearer {foreign}"})
            assert r.status_code == 401 and "another audience" in r.headers["www-authenticate"]
            # Valid, but without the required scope: 403 insufficient_scope, naming it.
            r = await anon.post(
                "/mcp", json={}, headers={"Authorization": f"Bearer {mint(issuer, op, scope='x')}"}
            )
            assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["www-authenticate"]
            # Valid, but no rule maps this person: 403, and the audit log names them.
            nobody = mint(issuer, op, sub="u-9", email="eve@example.com")
            r = await anon.post("/mcp", json={}, headers={"Authorization": f"Bearer {nobody}"})
            assert r.status_code == 403 and "no rule" in r.json()["error"]["message"]
        async with op.client() as admin:
            entries = (await admin.get("/admin/audit")).json()["entries"]
        assert any(e["who"] == "oauth:eve@example.com" and "refused 403" in e["outcome"] for e in entries)
        log = (op.data_dir / "audit.log").read_text()
        for token in (expired, foreign, nobody):
            assert token not in log  # never a token in the log


async def test_an_unreachable_issuer_answers_503_not_a_sign_in_challenge(tmp_path, monkeypatch):
    issuer = Issuer(published=[rsa_key()], url=f"http://127.0.0.1:{free_port()}")  # nothing listens there
    async with team_server(tmp_path, monkeypatch, issuer.url) as op:
        token = mint(issuer, op)
        async with httpx.AsyncClient(base_url=op.url) as anon:
            r = await anon.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Authorization": f"Bearer {token}"},
            )
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "30" and "www-authenticate" not in r.headers
        message = r.json()["error"]["message"]
        assert issuer.url in message and "cannot be reached" in message and token not in message
        async with op.client() as admin:  # static tokens do not depend on the issuer
            assert (await admin.get("/admin/oauth")).status_code == 200


async def test_a_mapped_person_sees_their_projects_and_no_write_tool(tmp_path, monkeypatch):
    async with running_issuer(rsa_key()) as issuer, team_server(tmp_path, monkeypatch, issuer) as op:
        alice = mint(issuer, op)
        async with mcp(op.url, alice) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "search_code" in names and "index_project" not in names
            own = await client.call_tool("search_code", {"query": "add two numbers", "project": "alpha"})
            assert not own.is_error and {r["project"] for r in own.structured_content["results"]} == {"alpha"}
            other = await client.call_tool("search_code", {"query": "add", "project": "beta"})
            assert other.is_error and "'beta' is not one this token may see" in text(other)
            denied = await client.call_tool(
                "index_project", {"path": str(op.tmp / "allowed"), "project": "alpha"}
            )
            assert denied.is_error and "read-only" in text(denied)
        # A group that may index, every project.
        indexer = mint(issuer, op, sub="u-2", email="bob@example.com", groups=["indexers"])
        async with mcp(op.url, indexer) as client:
            assert "index_project" in {t.name for t in (await client.list_tools()).tools}
            both = await client.call_tool("list_projects", {})
            assert [p["name"] for p in both.structured_content["projects"]] == ["alpha", "beta"]
        async with op.client() as admin:
            entries = (await admin.get("/admin/audit")).json()["entries"]
            shown = (await admin.get("/admin/oauth")).json()
            # Nothing under /admin for a person's access token.
            r = await admin.get("/admin/oauth", headers={"Authorization": f"Bearer {alice}"})
            assert r.status_code == 403
        assert any(e["who"] == "oauth:alice@example.com" and "index_project" in e["what"] for e in entries)
        assert shown["enabled"] and shown["issuer"] == issuer.url and shown["resource"] == f"{op.url}/mcp"
        assert shown["static_mcp_tokens"] is True and len(shown["mapping"]["rules"]) == 2
        assert alice not in json.dumps(shown)


async def test_static_tokens_keep_working_beside_oauth_and_can_be_turned_off(tmp_path, monkeypatch):
    async with running_issuer(rsa_key()) as issuer:
        async with team_server(tmp_path / "on", monkeypatch, issuer) as op:
            async with op.client() as admin:
                dev = await create(admin, "dev", ["beta"])
            for token in (dev, AUTH["Authorization"].split()[1]):
                async with mcp(op.url, token) as client:
                    listed = await client.call_tool("list_projects", {})
                    assert not listed.is_error
        async with team_server(tmp_path / "off", monkeypatch, issuer, static=False) as op:
            async with op.client() as admin:
                dev = await create(admin, "dev", ["beta"])  # the admin API keeps its admin token
                shown = (await admin.get("/admin/oauth")).json()
            assert shown["static_mcp_tokens"] is False
            async with httpx.AsyncClient(base_url=op.url) as anon:
                for token in (dev, AUTH["Authorization"].split()[1]):
                    r = await anon.post("/mcp", json={}, headers={"Authorization": f"Bearer {token}"})
                    assert r.status_code == 401, r.text
                    assert "static token" not in r.json()["error"]["message"]
            async with mcp(op.url, mint(issuer, op)) as client:
                assert not (await client.call_tool("list_projects", {})).is_error


async def test_oauth_off_refuses_access_tokens_and_advertises_no_issuer(tmp_path, monkeypatch):
    async with running_issuer(rsa_key()) as issuer, team_server(tmp_path, monkeypatch, None) as op:
        token = issuer.mint(aud=f"{op.url}/mcp")
        async with httpx.AsyncClient(base_url=op.url) as anon:
            r = await anon.post("/mcp", json={}, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 401 and "resource_metadata" not in r.headers["www-authenticate"]
            assert (await anon.get("/.well-known/oauth-protected-resource/mcp")).status_code == 404
        async with op.client() as admin:
            shown = (await admin.get("/admin/oauth")).json()
            r = await admin.put("/admin/oauth/mapping", json=MAPPING)
        assert shown["enabled"] is False and "FATHOM_OAUTH_ISSUER" in shown["note"]
        assert r.status_code == 409
        assert issuer.jwks_reads == 0


def test_a_half_configured_oauth_is_refused_at_start_naming_the_setting(tmp_path):
    from fathom.config import Settings
    from fathom.errors import ConfigError
    from fathom.server.oauth.verifier import OAuthVerifier

    assert OAuthVerifier.from_settings(Settings(data_dir=tmp_path)) is None  # no issuer: no OAuth
    base = {"data_dir": tmp_path, "oauth_issuer": "https://id.example.com"}
    for extra, words in (
        ({}, "FATHOM_OAUTH_RESOURCE is not"),
        ({"oauth_resource": "fathom.example.com/mcp"}, "FATHOM_OAUTH_RESOURCE must be"),
        (
            {"oauth_resource": "https://f.example/mcp", "oauth_algorithms": "RS256,HS256"},
            "FATHOM_OAUTH_ALGORITHMS names HS256",
        ),
        (
            {"oauth_resource": "https://f.example/mcp", "oauth_introspection_url": "https://id/i"},
            "FATHOM_OAUTH_CLIENT_SECRET",
        ),
    ):
        with pytest.raises(ConfigError, match=words):
            OAuthVerifier.from_settings(Settings(**base, **extra))


async def test_introspection_configured_by_settings_opens_mcp_as_mapped(tmp_path):
    from fathom.config import Settings
    from fathom.server.oauth.errors import NotMapped, TokenRefused
    from fathom.server.oauth.verifier import OAuthVerifier
    from tests.server.oauth_fixtures import INTROSPECTION_CLIENT, RESOURCE

    async with running_issuer(rsa_key()) as issuer:
        door = OAuthVerifier.from_settings(
            Settings(
                data_dir=tmp_path,
                oauth_issuer=issuer.url,
                oauth_resource=RESOURCE,
                oauth_introspection_url=f"{issuer.url}/introspect",
                oauth_client_id=INTROSPECTION_CLIENT[0],
                oauth_client_secret=INTROSPECTION_CLIENT[1],
            )
        )
        assert door is not None and door.view()["validation"] == "introspection"
        door.mapping.replace(MAPPING)
        answer = {
            "active": True,
            "iss": issuer.url,
            "aud": RESOURCE,
            "sub": "u-1",
            "email": "alice@example.com",
            "email_verified": True,
        }
        issuer.active = {
            "opaque-alice": answer,
            "opaque-eve": {**answer, "sub": "u-9", "email": "eve@example.com"},
        }
        alice = await door.authenticate("opaque-alice")
        assert alice.who == "oauth:alice@example.com" and alice.projects == {"alpha"} and not alice.can_index
        with pytest.raises(NotMapped):
            await door.authenticate("opaque-eve")
        with pytest.raises(TokenRefused, match="not active"):
            await door.authenticate("opaque-unknown")
        await door.aclose()


async def test_an_open_path_never_validates_an_oauth_token(tmp_path):
    """`/health` and a forge's webhook need no principal: a bearer token sent there never
    reaches the OAuth door (no key fetch, no introspection call); `/mcp` still does."""
    from starlette.responses import PlainTextResponse

    from fathom.server.guard import Access, RequestGuard
    from fathom.server.tokens import Principal

    calls: list[str] = []

    class CountingDoor:
        async def authenticate(self, token: str) -> Principal:
            calls.append(token)
            return Principal(name="alice@example.com", projects=None, can_index=False, via="oauth")

    async def app(scope, receive, send):
        await PlainTextResponse("ok")(scope, receive, send)

    guard = RequestGuard(app, access=Access(None, oauth=CountingDoor()))
    headers = {"Authorization": "Bearer some-access-token"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://t") as client:
        assert (await client.get("/health", headers=headers)).status_code == 200
        assert (await client.post("/hooks/git/shop", headers=headers, content=b"{}")).status_code == 200
        assert (
            await client.get("/.well-known/oauth-protected-resource/mcp", headers=headers)
        ).status_code == 200
        assert calls == []
        assert (await client.post("/mcp", headers=headers, json={})).status_code == 200
        assert calls == ["some-access-token"]
