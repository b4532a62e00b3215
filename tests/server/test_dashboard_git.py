"""The dashboard's projects from git, driven in a real browser against a running server and a
real bare repository: a bad remote is refused and adds nothing; a project is added with two
branches (the webhook's secret shown once, and nowhere else); a push is synced from the
project's row; a branch is untracked from its overlay's row and tracked again from the form."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fathom.config import Settings
from fathom.errors import ConfigError
from tests.fleet.fleet_fixtures import ADMIN, ThreadedServer
from tests.server.admin_fixtures import build_operator_app
from tests.server.dashboard_fixtures import ARTIFACTS, signed_in
from tests.service.git_fixtures import build_remote, module_text


@pytest.mark.slow
def test_a_browser_adds_syncs_untracks_and_tracks_a_git_project(tmp_path: Path):
    from playwright.sync_api import expect

    remote = build_remote(tmp_path)
    data = tmp_path / "data"
    allowed = remote.file_url.rsplit("/", 1)[0] + "/"
    running = ThreadedServer(build_operator_app(data, settings=Settings(data_dir=data, git_remotes=allowed)))
    url = running.start()
    try:
        with signed_in(url, height=1600, accept_dialogs=True) as page:
            expect(page.locator("#projects")).to_contain_text("no project is indexed yet", timeout=30_000)
            expect(page.locator("#branch-form")).to_be_hidden()  # no project from git yet
            result = page.locator("#git-result")

            # A remote outside FATHOM_GIT_REMOTES: refused, naming the setting; nothing added.
            page.fill("#gf-name", "elsewhere")
            page.fill("#gf-url", "https://git.example.com/other/app.git")
            page.click("#git-form button")
            expect(result).to_contain_text(
                "Refused: git remote https://git.example.com/other/app.git is not allowed"
            )
            expect(result).to_contain_text("FATHOM_GIT_REMOTES")
            expect(page.locator("#projects")).to_contain_text("no project is indexed yet")
            assert not (data / "git" / "elsewhere").exists()

            page.fill("#gf-name", "shop")
            page.fill("#gf-url", remote.file_url)
            page.fill("#gf-branches", "main, feature")
            page.click("#git-form button")
            expect(result).to_contain_text("Added shop from " + remote.file_url, timeout=120_000)
            expect(result).to_contain_text("main (default) at")
            secret = result.locator("code.secret").inner_text()
            assert secret == (data / "git" / "shop" / "webhook.secret").read_text().strip()
            expect(result).to_contain_text("POST " + url + "/hooks/git/shop")

            row = page.locator('#projects tr[data-project="shop"]')
            expect(row).to_contain_text("git " + remote.file_url)
            expect(row).to_contain_text("webhook")
            overlay = page.locator('#projects tr[data-project="shop@feature"]')
            expect(overlay).to_contain_text("follows shop")
            expect(overlay.locator("button")).to_have_text(["Untrack"])  # no Drop, no live sync
            details = page.locator('#projects tr[data-project-details="shop"]')
            main_at = remote_head(remote, "main")
            expect(details).to_contain_text(f"main (default) at {main_at[:12]}")
            expect(details).to_contain_text(f"feature at {remote_head(remote, 'feature')[:12]}")
            expect(page.locator("#branch-form")).to_be_visible()

            # A push to main (a file added, one removed), synced from the project's row.
            pushed = remote.commit(
                {"shop/ledger.py": module_text("ledger"), "shop/coupon.py": None}, "ledger"
            )
            row.get_by_role("button", name="Sync now").click()
            expect(result).to_contain_text(f"Synced shop: main indexed {pushed[:12]}", timeout=120_000)
            expect(details).to_contain_text(f"main (default) at {pushed[:12]}")
            expect(details).to_contain_text("last sync (operator")
            expect(details).to_contain_text(f"main indexed {pushed[:12]}")

            # A project from git follows its remote: its live sync cannot be turned on.
            for name in ("shop", "shop@feature"):
                refused = httpx.put(
                    f"{url}/admin/projects/{name}/watch",
                    json={"enabled": True},
                    headers={"Authorization": f"Bearer {ADMIN}"},
                    timeout=30,
                )
                assert refused.status_code == 400, refused.text
                assert "comes from git" in refused.text
            # A tracked branch's overlay goes with its branch only.
            alone = httpx.delete(
                f"{url}/admin/projects/shop@feature", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
            )
            assert alone.status_code == 400 and "untrack it" in alone.text, alone.text

            # Untracked from the overlay's row; tracked again from the form.
            overlay.get_by_role("button", name="Untrack").click()
            expect(result).to_contain_text("Untracked feature of shop.")
            expect(overlay).to_have_count(0)
            page.select_option("#gb-project", "shop")
            page.fill("#gb-branch", "feature")
            page.click("#branch-form button")
            expect(result).to_contain_text("Tracking feature of shop: indexed", timeout=120_000)
            expect(overlay).to_contain_text("follows shop")

            # A track that fails after indexing its branch leaves an untracked branch index:
            # its row offers Drop (the server allows it), not Untrack (the server would refuse).
            service = running.app.state.service
            indexed = service.index

            async def index_then_fail(tree, name, **options):
                await indexed(tree, name, **options)
                raise ConfigError("the encoder went away before the branch was recorded")

            remote.branch("short")
            remote.commit({"shop/short.py": module_text("short")}, "short", branch="short")
            service.index = index_then_fail
            page.select_option("#gb-project", "shop")
            page.fill("#gb-branch", "short")
            page.click("#branch-form button")
            expect(result).to_contain_text("Refused: the encoder went away", timeout=120_000)
            service.index = indexed
            left = page.locator('#projects tr[data-project="shop@short"]')
            expect(left.locator("button")).to_have_text(["Drop"])
            left.get_by_role("button", name="Drop").click()
            expect(page.locator("#project-result")).to_contain_text("Dropped shop@short.")
            expect(left).to_have_count(0)

            audit = page.locator("#audit")
            for action in (
                "POST /admin/projects/git",
                "POST /admin/projects/shop/sync",
                "DELETE /admin/projects/shop/branches/feature",
                "POST /admin/projects/shop/branches",
            ):
                expect(audit).to_contain_text(action)
            # The secret was shown once, in the answer to the add, and nowhere else.
            assert secret not in page.locator("#projects").inner_text()
            assert secret not in audit.inner_text()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard-git.png"), full_page=True)
    finally:
        running.stop()
    assert secret not in (data / "audit.log").read_text()


def remote_head(remote, branch: str) -> str:
    from tests.service.git_fixtures import git

    return git("rev-parse", branch, cwd=remote.bare)
