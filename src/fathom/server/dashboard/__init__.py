"""The operator dashboard: one static page, its script and its stylesheet, served at `/`.

This package owns the page only. Everything it shows comes from the admin API
(`GET /admin/overview`, polled every two seconds) and every change it makes goes through the
same endpoints the CLI uses (`PUT /admin/policies`, `PUT /admin/budget`, `POST /admin/jobs`...),
so the page can never show or do more than the API allows.

The page itself carries no data and loads without auth. The operator pastes the admin token
once; it is kept in the tab's `sessionStorage` (gone when the tab closes, never in a cookie, so
no other site can make the browser send it) and sent as a bearer header on each API call.

It refuses any front-end build and any third-party asset, and it refuses to interpret server
text as markup: the script builds the page with `textContent` only, and a strict
Content-Security-Policy (scripts and styles from this origin only, no inline code, no framing)
backs that up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


@cache
def asset(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


def _headers() -> dict[str, str]:
    return {
        "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def mount(app: FastAPI) -> None:
    """Add `/` and `/dashboard/{asset}` to `app` (not in the API schema)."""

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return Response(asset("index.html"), media_type="text/html; charset=utf-8", headers=_headers())

    for name, media_type in ASSETS.items():
        app.add_api_route(
            f"/dashboard/{name}", _serving(name, media_type), methods=["GET"], include_in_schema=False
        )
    # Browsers ask for /favicon.ico whatever the page links: the same icon, not a 404.
    app.add_api_route(
        "/favicon.ico",
        _serving("favicon.svg", ASSETS["favicon.svg"]),
        methods=["GET"],
        include_in_schema=False,
    )


def _serving(name: str, media_type: str) -> Callable[[], Awaitable[Response]]:
    async def serve() -> Response:
        return Response(asset(name), media_type=media_type, headers=_headers())

    return serve
