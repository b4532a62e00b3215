"""The dashboard's OAuth card, in a real browser against a running server with OAuth on: it names
the issuer, the resource and the scopes, lists the mapping's rules in order with their projects
and rights, and says whether `/mcp` still takes the static tokens."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import ADMIN, ThreadedServer
from tests.server.admin_fixtures import build_operator_app
from tests.server.dashboard_fixtures import ARTIFACTS, signed_in

ISSUER = "https://id.example.com/realms/dev"  # never dialled: the card shows the set-up only


@pytest.mark.slow
def test_a_browser_sees_the_issuer_and_the_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from playwright.sync_api import expect

    monkeypatch.setenv("FATHOM_OAUTH_ISSUER", ISSUER)
    monkeypatch.setenv("FATHOM_OAUTH_RESOURCE", "https://fathom.example.com/mcp")
    monkeypatch.setenv("FATHOM_OAUTH_SCOPES", "fathom")
    running = ThreadedServer(build_operator_app(tmp_path / "data"))
    url = running.start()
    try:
        r = httpx.put(
            f"{url}/admin/oauth/mapping",
            headers={"Authorization": f"Bearer {ADMIN}"},
            json={
                "rules": [
                    {"match": {"group": "search-admins"}, "can_index": True},
                    {"match": {"email_domain": "example.com", "scope": "fathom"}, "projects": ["web", "api"]},
                ]
            },
        )
        assert r.status_code == 200, r.text
        with signed_in(url) as page:
            state = page.locator("#oauth-state")
            expect(state).to_contain_text(f"Issuer {ISSUER}", timeout=30_000)
            expect(state).to_contain_text("resource https://fathom.example.com/mcp")
            expect(state).to_contain_text("scopes: fathom")
            expect(state).to_contain_text("static MCP tokens on")
            rows = page.locator("#oauth-mapping tbody tr")
            expect(rows).to_have_count(2)
            expect(rows.nth(0)).to_contain_text("group search-admins")
            expect(rows.nth(0)).to_contain_text("every project")
            expect(rows.nth(1)).to_contain_text("email_domain example.com and scope fathom")
            expect(rows.nth(1)).to_contain_text("api, web")
            page.locator("#oauth-card").screenshot(path=str(ARTIFACTS / "dashboard-oauth.png"))
    finally:
        running.stop()
