"""The dashboard: the static page and its guards, and (slow) a real browser driving it against a
running server with the OpenRouter emulator and a real sidecar process."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fathom.config import Settings
from fathom.server.dashboard import asset
from tests.admin_fixtures import build_operator_app
from tests.emulator_fixtures import emulator_server  # noqa: F401
from tests.fleet_fixtures import ADMIN, JOIN, ProcessGroup, ThreadedServer, spawn_sidecar

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
MINILM = "sentence-transformers/all-minilm-l6-v2"


async def test_the_page_is_served_without_auth_behind_a_strict_policy(tmp_path: Path):
    app = build_operator_app(tmp_path / "data")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as anon:
        page = await anon.get("/")
        script = await anon.get("/dashboard/app.js")
        style = await anon.get("/dashboard/style.css")
    assert page.status_code == script.status_code == style.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["cache-control"] == "no-store"
    # The page carries no data: no token, no state, nothing from the server's parts.
    assert page.content == asset("index.html") and ADMIN not in page.text  # static, whatever the state
    for ref in re.findall(r'(?:src|href)="(/[^"]+)"', page.text):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as anon:
            assert (await anon.get(ref)).status_code == 200, ref


def test_the_script_never_interprets_server_text_as_markup():
    js = asset("app.js").decode()
    for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert forbidden not in js, forbidden
    assert "sessionStorage" in js and "localStorage" not in js and "document.cookie" not in js


# ---------------------------------------------------------------------------- the browser


def _wait(cond: Any, *, timeout: float = 120.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
def test_a_browser_sees_verdicts_and_budget_and_changes_a_policy(tmp_path: Path, emulator_server):  # noqa: F811
    from playwright.sync_api import expect, sync_playwright

    from fathom.server.app import create_app

    data = tmp_path / "data"
    running = ThreadedServer(create_app(Settings(data_dir=data), admin_token=ADMIN, join_token=JOIN))
    url = running.start()
    port = int(url.rsplit(":", 1)[1])
    group = ProcessGroup(tmp_path / "logs")
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120)
    try:
        # A real sidecar process: MiniLM in-process for the code table, and OpenRouter (the
        # emulator) for cloud routes once a key is pushed.
        sidecar = spawn_sidecar(group, "gpu-1", port, ["code-embedding=in-process"],
                                extra=["--openrouter-url", emulator_server.base_url])
        _wait(lambda: any(s["name"] == "gpu-1" and s["connected"] for s in admin.get("/admin/fleet").json()["sidecars"])
              or sidecar.popen.poll() is not None, what="the sidecar to connect")
        assert sidecar.popen.poll() is None, sidecar.output()
        assert admin.post("/admin/fleet/gpu-1/approve").json()["state"] == "approved"
        # The docs table goes to the cloud, pinned; the key goes to the sidecar.
        r = admin.put("/admin/policies", json={"embedding": {"policy": "cloud", "model": MINILM, "upstream": "alpha"}})
        assert r.status_code == 200, r.text
        push = admin.post("/admin/key", json={"key": "sk-or-v1-" + "d00d" * 16}).json()
        assert push["acked"] == ["gpu-1"]
        cloud = "sidecar:gpu-1:embedding:cloud:alpha"
        _wait(lambda: any(p["id"] == cloud and p["available"]
                          for p in admin.get("/admin/policies").json()["roles"]["embedding"]["providers"]),
              what="the cloud route")
        # Two verdicts: the sidecar's MiniLM against the server's (full), the sole cloud route (reduced).
        local = admin.post("/admin/gate/verify", json={"provider": "sidecar:gpu-1:code-embedding:local"})
        assert local.status_code == 200 and local.json()["verdicts"][0]["cleared"], local.text
        reduced = admin.post("/admin/gate/verify", json={"provider": cloud, "table": "docs"})
        assert reduced.status_code == 200 and reduced.json()["verdicts"][0]["reduced_coverage"], reduced.text

        ARTIFACTS.mkdir(exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1200})
                page.goto(url + "/")
                page.fill("#token", ADMIN)
                page.click("#login-form button")
                expect(page.locator("#status")).to_contain_text("connected", timeout=30_000)

                # Gate verdicts with the minimum cosine and regime, reduced coverage flagged.
                local_row = page.locator('#verdicts tr[data-provider="sidecar:gpu-1:code-embedding:local"]')
                expect(local_row).to_contain_text("cleared")
                expect(local_row).to_contain_text("local-ref")
                assert float(local_row.locator(".min-cosine").inner_text()) > 0.999
                cloud_row = page.locator(f'#verdicts tr[data-provider="{cloud}"]')
                expect(cloud_row).to_contain_text("REDUCED COVERAGE")
                expect(cloud_row).to_contain_text("cloud-ref")
                expect(cloud_row).to_have_class(re.compile(r"\breduced\b"))
                # The budget and the fleet.
                expect(page.locator('#budget dd[data-fact="Ceiling"]')).to_have_text("4 (default)")
                expect(page.locator('#budget dd[data-fact="Effective limit"]')).to_have_text("4")
                expect(page.locator('#budget dd[data-fact="In flight"]')).to_have_text("0")
                expect(page.locator('#budget dd[data-fact="Cooldown left"]')).to_have_text("none")
                fleet_row = page.locator('#fleet tr[data-sidecar="gpu-1"]')
                expect(fleet_row).to_contain_text("approved")
                expect(fleet_row).to_contain_text("present")  # the key

                # A valid change: the reranker goes local-only. Applied, and the table shows it.
                page.select_option("#pf-role", "reranker")
                page.select_option("#pf-policy", "local")
                page.click("#pf-apply")
                expect(page.locator("#policy-result")).to_contain_text("Applied to reranker: policy = local")
                expect(page.locator('#roles tr[data-role="reranker"] td.policy')).to_have_text("local")
                assert admin.get("/admin/policies").json()["roles"]["reranker"]["policy"] == "local"

                # An invalid change: the code table to the cloud with no pin and a wrong width.
                routing_before = (data / "routing.json").read_bytes()
                page.select_option("#pf-role", "code-embedding")
                page.select_option("#pf-policy", "cloud")
                page.fill("#pf-width", "768")
                page.click("#pf-apply")
                result = page.locator("#policy-result")
                expect(result).to_contain_text("Refused: policy change refused (2 problems); nothing was written")
                problems = result.locator("li")
                expect(problems).to_have_count(2)
                expect(problems.nth(0)).to_contain_text("width 768 does not match")
                expect(problems.nth(1)).to_contain_text("no upstream is pinned")
                assert (data / "routing.json").read_bytes() == routing_before
                expect(page.locator('#roles tr[data-role="code-embedding"] td.policy')).to_have_text("aggregate")

                page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            finally:
                browser.close()
    finally:
        admin.close()
        group.stop()
        running.stop()


@pytest.mark.slow
def test_a_browser_drops_a_project_after_confirming(tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright

    from tests.admin_fixtures import make_project

    running = ThreadedServer(build_operator_app(tmp_path / "data"))
    url = running.start()
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    try:
        project = make_project(tmp_path / "demo")
        job = admin.post("/admin/jobs", json={"path": str(project), "project": "demo"}).json()
        _wait(lambda: admin.get(f"/admin/jobs/{job['id']}").json()["finished"], what="the job")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                page.goto(url + "/")
                page.fill("#token", ADMIN)
                page.click("#login-form button")
                row = page.locator('#projects tr[data-project="demo"]')
                expect(row).to_contain_text("not watched")  # this server runs without live sync
                expect(row).to_contain_text(str(project))

                # Dismissing the confirmation drops nothing.
                page.once("dialog", lambda d: d.dismiss())
                row.get_by_role("button", name="Drop").click()
                page.wait_for_timeout(500)
                assert [p["name"] for p in admin.get("/admin/projects").json()["projects"]] == ["demo"]

                messages = []

                def accept(dialog):
                    messages.append(dialog.message)
                    dialog.accept()

                page.once("dialog", accept)
                row.get_by_role("button", name="Drop").click()
                expect(page.locator("#project-result")).to_contain_text("Dropped demo.")
                expect(page.locator('#projects tr[data-project="demo"]')).to_have_count(0)
                assert "Remove project demo" in messages[0]
                assert admin.get("/admin/projects").json()["projects"] == []
                page.screenshot(path=str(ARTIFACTS / "dashboard-projects.png"), full_page=True)
            finally:
                browser.close()
    finally:
        admin.close()
        running.stop()
