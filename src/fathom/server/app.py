"""Assembling the fathom server's ASGI app.

This module owns one function, `create_app`, that puts the parts together: the provider
registry, the fleet hub with its `/sidecar` WebSocket, and the admin router. Each part works
without it (tests construct them directly); this is only where they meet, in the spirit of
Starlette: explicit objects, no magic.

It refuses to run without the secret scrubber: `logsafe.install()` is the first thing it does,
so no log record of the server process can carry a key-shaped string or a frame's content.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI

from fathom import __version__, logsafe
from fathom.config import Settings
from fathom.fleet.hub import Hub
from fathom.server.admin import AdminAuth, admin_router


def create_app(
    settings: Settings | None = None,
    *,
    registry: Any = None,
    hub: Hub | None = None,
    admin_token: str | None = None,
    join_token: str | None = None,
) -> FastAPI:
    """The server app. `admin_token`/`join_token` default to `FATHOM_ADMIN_TOKEN` /
    `FATHOM_JOIN_TOKEN`; either is kept only as a hash under the data dir. `app.state` exposes
    `settings`, `registry`, `hub` and `admin_auth` for the parts added later (MCP, dashboard)."""
    logsafe.install()
    settings = settings or Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if registry is None:
        from fathom.inference.registry import ProviderRegistry

        registry = ProviderRegistry()
    join = join_token or os.environ.get("FATHOM_JOIN_TOKEN")
    hub = hub or Hub(settings.data_dir, registry=registry, join_tokens=(join,) if join else ())
    admin = admin_token or os.environ.get("FATHOM_ADMIN_TOKEN")
    admin_auth = AdminAuth(settings.data_dir, tokens=(admin,) if admin else ())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await hub.aclose()

    app = FastAPI(title="fathom", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.registry = registry
    app.state.hub = hub
    app.state.admin_auth = admin_auth
    hub.mount(app)
    app.include_router(admin_router(hub, admin_auth, registry=registry))

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "version": __version__, "sidecars": len(hub.connected())}

    return app
