"""A corrupt `routing.json` never makes the admin API answer a bare 500.

The server on a real socket, its routing state file garbled on disk: the overview (and so the
dashboard) still answers, with the problem named and the fix; the policy endpoints answer a
typed 503 naming the file and the fix; every part that does not need the routing state keeps
working; nothing reads the garbled file as "no settings" and nothing overwrites it. Once the
operator fixes the file, everything is back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.fleet.fleet_fixtures import ADMIN
from tests.server.admin_fixtures import AUTH, Operator

GARBAGE = b'{"roles": {"code-embedding": {"policy": "aggreg\x00\xff'


def operator_cli(url: str, *args: str):
    from fathom.cli.operator import register

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """fathom (operator commands only)."""

    register(app)
    return CliRunner().invoke(
        app,
        list(args),
        catch_exceptions=False,
        env={"FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "200"},
    )


async def test_a_corrupt_routing_file_is_named_with_its_fix_and_the_rest_keeps_working(operator: Operator):
    routing = operator.data_dir / "routing.json"
    async with operator.client() as admin:
        assert (await admin.put("/admin/policies", json={"rlm": {"policy": "local"}})).status_code == 200
        routing.write_bytes(GARBAGE)

        overview = await admin.get("/admin/overview")
        assert overview.status_code == 200, overview.text
        body = overview.json()
        assert body["policies"]["error"]["message"].startswith(f"{routing} is not a valid routing state")
        assert any(str(routing) in p and "fix" in p for p in body["problems"]), body["problems"]
        assert body["fleet"] is not None and body["budget"] is not None and body["jobs"] == []

        for method, path, kwargs in (
            ("GET", "/admin/policies", {}),
            ("PUT", "/admin/policies", {"json": {"rlm": {"policy": "cloud"}}}),
            ("POST", "/admin/key", {"json": {"roles": {"rlm": {"policy": "local"}}}}),
        ):
            r = await admin.request(method, path, **kwargs)
            assert r.status_code == 503, (path, r.status_code, r.text)
            detail = r.json()["detail"]
            assert str(routing) in detail["message"] and "routing.json.bak" not in detail["message"]
            assert "fix it" in detail["message"] or "move it aside" in detail["message"], detail

        for path in (
            "/admin/fleet",
            "/admin/budget",
            "/admin/jobs",
            "/admin/gate/verdicts",
            "/metrics",
            "/health",
        ):
            r = await admin.get(path)
            assert r.status_code == 200, (path, r.status_code, r.text)
        assert routing.read_bytes() == GARBAGE  # never read as empty, never overwritten

        shown = await asyncio.to_thread(operator_cli, operator.url, "policy", "show")
        assert shown.exit_code == 1, shown.output
        assert "routing.json" in " ".join(shown.output.split()) and "Traceback" not in shown.output

        routing.unlink()  # the operator's fix: back to the defaults
        r = await admin.get("/admin/policies")
        assert r.status_code == 200 and r.json()["roles"]["rlm"]["policy"] == "aggregate"
        assert "error" not in (await admin.get("/admin/overview")).json()["policies"]


@pytest.mark.slow
def test_the_dashboard_shows_a_corrupt_routing_file_and_the_rest_of_the_page(tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright

    from tests.fleet.fleet_fixtures import ThreadedServer
    from tests.server.admin_fixtures import build_operator_app
    from tests.server.dashboard_fixtures import CHROMIUM, CHROMIUM_ARGS

    data = tmp_path / "data"
    running = ThreadedServer(build_operator_app(data))
    url = running.start()
    try:
        data.mkdir(parents=True, exist_ok=True)
        (data / "routing.json").write_bytes(GARBAGE)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(url + "/")
                page.fill("#token", AUTH["Authorization"].split(" ", 1)[1])
                page.click("#login-form button")
                expect(page.locator("#status")).to_contain_text("connected", timeout=30_000)
                expect(page.locator("#problems")).to_contain_text("routing.json")
                expect(page.locator("#roles-card")).to_contain_text("is not a valid routing state")
                expect(page.locator('#budget dd[data-fact="Ceiling"]')).to_have_text("4 (default)")
                assert errors == [], errors
            finally:
                browser.close()
    finally:
        running.stop()
