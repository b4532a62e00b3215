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
from tests.fleet.fleet_fixtures import ADMIN, JOIN, ProcessGroup, ThreadedServer, spawn_sidecar
from tests.server.admin_fixtures import build_operator_app
from tests.server.dashboard_fixtures import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

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
    for ref in [*re.findall(r'(?:src|href)="(/[^"]+)"', page.text), "/favicon.ico"]:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as anon:
            assert (await anon.get(ref)).status_code == 200, ref


def test_the_script_never_interprets_server_text_as_markup():
    js = asset("app.js").decode()
    for forbidden in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
    ):
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
def test_a_browser_sees_verdicts_and_budget_and_changes_a_policy(tmp_path: Path, emulator_server):
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
        sidecar = spawn_sidecar(
            group,
            "gpu-1",
            port,
            ["code-embedding=in-process"],
            extra=["--openrouter-url", emulator_server.base_url],
        )
        _wait(
            lambda: (
                any(
                    s["name"] == "gpu-1" and s["connected"]
                    for s in admin.get("/admin/fleet").json()["sidecars"]
                )
                or sidecar.popen.poll() is not None
            ),
            what="the sidecar to connect",
        )
        assert sidecar.popen.poll() is None, sidecar.output()
        assert admin.post("/admin/fleet/gpu-1/approve").json()["state"] == "approved"
        # The docs table goes to the cloud, pinned; the key goes to the sidecar.
        r = admin.put(
            "/admin/policies", json={"embedding": {"policy": "cloud", "model": MINILM, "upstream": "alpha"}}
        )
        assert r.status_code == 200, r.text
        push = admin.post("/admin/key", json={"key": "sk-or-v1-" + "d00d" * 16}).json()
        assert push["acked"] == ["gpu-1"]
        cloud = "sidecar:gpu-1:embedding:cloud:alpha"
        _wait(
            lambda: any(
                p["id"] == cloud and p["available"]
                for p in admin.get("/admin/policies").json()["roles"]["embedding"]["providers"]
            ),
            what="the cloud route",
        )
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
                expect(page.locator("#status")).to_have_text(
                    re.compile(r"^connected"), timeout=30_000
                )  # not "not connected"

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
                expect(result).to_contain_text(
                    "Refused: policy change refused (2 problems); nothing was written"
                )
                problems = result.locator("li")
                expect(problems).to_have_count(2)
                expect(problems.nth(0)).to_contain_text("width 768 does not match")
                expect(problems.nth(1)).to_contain_text("no upstream is pinned")
                assert (data / "routing.json").read_bytes() == routing_before
                expect(page.locator('#roles tr[data-role="code-embedding"] td.policy')).to_have_text(
                    "aggregate"
                )

                # The cloud route served the gate's probes: serving, seen, not assumed.
                chip = page.locator(
                    f'#roles tr[data-role="embedding"] span.provider[data-provider="{cloud}"] .health'
                )
                expect(chip).to_have_text("serving")
                page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

                # A key OpenRouter (the stand-in) answers 401: the sidecar's key check on the
                # push finds it, and every view says "key rejected", never "serving"; a call
                # through the route is refused the same way and says so too.
                emulator_server.control.set_keys(accepted=["sk-or-v1-" + "beef" * 16])
                bad = "sk-or-v1-" + "dead" * 16
                assert admin.post("/admin/key", json={"key": bad}).json()["acked"] == ["gpu-1"]
                expect(chip).to_have_text("key rejected", timeout=30_000)
                assert admin.get("/admin/fleet").json()["sidecars"][0]["key_check"]["outcome"] == "rejected"
                r = admin.post("/admin/fleet/probe", json={"provider": cloud, "texts": ["def add(a, b)"]})
                assert r.status_code == 502 and "401" in r.text, r.text
                expect(chip).to_have_text("key rejected")
                expect(page.locator('#fleet tr[data-sidecar="gpu-1"] td.cloud-health')).to_contain_text(
                    "key rejected"
                )
                page.screenshot(path=str(ARTIFACTS / "dashboard-key-rejected.png"), full_page=True)
            finally:
                browser.close()
        up = re.search(
            r'fathom_provider_up\{health="([a-z_]+)",kind="cloud",provider="'
            + re.escape(cloud)
            + r'"\} (\S+)',
            admin.get("/metrics").text,
        )
        assert up is not None and up.groups() == ("key_rejected", "0.0"), up
        route = next(
            p
            for p in admin.get("/admin/policies").json()["roles"]["embedding"]["providers"]
            if p["id"] == cloud
        )
        assert route["health"] == "key_rejected" and not route["serving"] and not route["up"]
        fleet = admin.get("/admin/fleet").json()["sidecars"][0]["cloud"]
        states = {c["provider"]: c["state"] for c in fleet}
        assert set(states.values()) == {"key_rejected"}, states  # the key check speaks for every cloud route
        from typer.testing import CliRunner

        from fathom.cli import app as cli

        shown = CliRunner().invoke(
            cli, ["fleet"], env={"FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "200"}
        )
        assert shown.exit_code == 0 and "key rejected" in shown.stdout, shown.output
        for said in (admin.get("/metrics").text, shown.stdout, str(fleet), str(route)):
            assert bad not in said
    finally:
        emulator_server.control.set_keys(accepted=None)
        admin.close()
        group.stop()
        running.stop()


@pytest.mark.slow
def test_a_browser_sees_what_is_indexed_searches_it_and_drops_a_project(tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright

    from tests.server.admin_fixtures import make_project

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
                # Before login: the login card only, none of the app's empty skeleton.
                expect(page.locator("#login")).to_be_visible()
                expect(page.locator("#app")).to_be_hidden()
                assert page.locator("#app").bounding_box() is None
                page.screenshot(path=str(ARTIFACTS / "dashboard-login.png"), full_page=True)
                page.fill("#token", ADMIN)
                page.click("#login-form button")
                row = page.locator('#projects tr[data-project="demo"]')
                expect(row).to_contain_text("not watched")  # this server runs without live sync
                expect(row).to_contain_text(str(project))
                # What is indexed: rows, model and width per table, the last run, provenance.
                expect(row.locator("td.last-run")).to_contain_text("done, 2 files")
                details = page.locator('#projects tr[data-project-details="demo"]')
                expect(details.locator('dd[data-table="code"]')).to_contain_text(
                    "2 rows, test/hash-embedder, width 8"
                )
                expect(details).to_contain_text("hash:test/hash-embedder")

                # The search box answers as search_code does, with why each hit ranked.
                page.fill("#sf-query", "add two numbers")
                page.select_option("#sf-project", "demo")
                page.click("#search-form button")
                hits = page.locator("#search-results tr.hit")
                add = hits.filter(has_text="demo/app.py:")  # one row per file
                expect(add).to_have_count(1)
                expect(add.locator("td.why")).to_contain_text("fused")  # why it ranked
                expect(page.locator("#search-result")).to_contain_text("for \u201cadd two numbers\u201d")
                page.screenshot(path=str(ARTIFACTS / "dashboard-search.png"), full_page=True)

                # A refusal says its message once: never again as its only bullet.
                page.fill("#jf-path", str(tmp_path / "missing"))
                page.fill("#jf-project", "ghost")
                page.click("#job-form button")
                expect(page.locator("#job-result")).to_contain_text("Refused:")
                expect(page.locator("#job-result li")).to_have_count(0)

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


@pytest.mark.slow
def test_a_fresh_server_with_the_default_encoder_shows_no_problem(tmp_path: Path):
    """A default install looks healthy: no problem banner, the optional roles "not configured"
    (neutral), the embedding roles served by the in-process encoder, no pin notice."""
    from playwright.sync_api import expect, sync_playwright

    from fathom.server.app import create_app

    running = ThreadedServer(
        create_app(Settings(data_dir=tmp_path / "data"), admin_token=ADMIN, join_token=JOIN)
    )
    url = running.start()
    try:
        ARTIFACTS.mkdir(exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                page.goto(url + "/")
                page.fill("#token", ADMIN)
                page.click("#login-form button")
                expect(page.locator("#status")).to_have_text(re.compile(r"^connected"), timeout=30_000)
                expect(page.locator('#roles tr[data-role="rlm"]')).to_contain_text("not configured")
                expect(page.locator("#problems")).to_be_hidden()
                for role in ("reranker", "code-assistant", "rlm"):
                    row = page.locator(f'#roles tr[data-role="{role}"]')
                    expect(row.locator(".not-configured")).to_have_text("not configured")
                    expect(row.locator(".bad")).to_have_count(0)
                for role in ("embedding", "code-embedding"):
                    row = page.locator(f'#roles tr[data-role="{role}"]')
                    expect(
                        row.locator(f'span.provider.serving[data-provider="local:{MINILM}"]')
                    ).to_have_count(1)
                    expect(row).not_to_contain_text("no upstream is pinned")
                expect(page.locator("body")).not_to_contain_text(re.compile(r"\bR[0-9]+\b"))
                page.screenshot(path=str(ARTIFACTS / "dashboard-fresh.png"), full_page=True)
            finally:
                browser.close()
    finally:
        running.stop()
