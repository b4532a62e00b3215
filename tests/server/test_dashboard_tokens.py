"""The dashboard's MCP tokens card and audit log, driven in a real browser against a running
server: a token is created (shown once), works on /mcp, is revoked from its row and then
refused; the audit log card lists both actions under the admin's name."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import ThreadedServer
from tests.server.admin_fixtures import build_operator_app
from tests.server.dashboard_fixtures import ARTIFACTS, signed_in
from tests.server.mcp_fixtures import INIT


def initialize(url: str, token: str) -> int:
    return httpx.post(
        f"{url}/mcp",
        json=INIT,
        timeout=30,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
    ).status_code


@pytest.mark.slow
def test_a_browser_creates_and_revokes_an_mcp_token(tmp_path: Path):
    from playwright.sync_api import expect

    running = ThreadedServer(build_operator_app(tmp_path / "data"))
    url = running.start()
    try:
        with signed_in(url, accept_dialogs=True) as page:
            expect(page.locator("#tokens")).to_contain_text("no MCP token yet", timeout=30_000)

            page.fill("#tf-name", "alice")
            page.fill("#tf-projects", "alpha, beta")
            page.click("#token-form button")
            result = page.locator("#token-result")
            expect(result).to_contain_text("MCP token for alice (shown once")
            token = result.locator("code.secret").inner_text()
            assert token.startswith("fm_")
            expect(result).to_contain_text(f'--header "Authorization: Bearer {token}"')
            row = page.locator('#tokens tr[data-token="alice"]')
            expect(row).to_contain_text("alpha, beta")
            expect(row).to_contain_text("no")  # read-only
            assert token not in row.inner_text()
            assert initialize(url, token) == 200

            row.locator("button").click()
            expect(page.locator("#token-result")).to_contain_text("Revoked alice.")
            expect(page.locator('#tokens tr[data-token="alice"]')).to_have_count(0)
            assert initialize(url, token) == 401

            audit = page.locator("#audit")
            expect(audit).to_contain_text("created MCP token alice")
            expect(audit).to_contain_text("revoked MCP token alice")
            assert token not in audit.inner_text()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard-tokens.png"), full_page=True)
    finally:
        running.stop()
