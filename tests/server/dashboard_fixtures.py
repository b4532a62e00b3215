"""A real browser on the dashboard: headless chromium signed in with the admin token
(`signed_in`), and the folder its screenshots are kept in (`ARTIFACTS`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.fleet.fleet_fixtures import ADMIN

ARTIFACTS = Path(__file__).parents[1] / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.contextmanager
def signed_in(url: str, *, height: int = 1400, accept_dialogs: bool = False) -> Iterator[Any]:
    """A headless chromium page on the dashboard at `url`, signed in with the admin token (its
    confirmations accepted when `accept_dialogs`); the browser is closed after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": height})
            if accept_dialogs:
                page.on("dialog", lambda dialog: dialog.accept())
            page.goto(url + "/")
            page.fill("#token", ADMIN)
            page.click("#login-form button")
            yield page
        finally:
            browser.close()
