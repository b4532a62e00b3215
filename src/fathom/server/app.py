"""Assembling the fathom server's ASGI app.

This module owns one function, `create_app`, that wires a server's parts onto an app: the
parts (`server.parts`: the settings, the routing store, the provider registry, the fleet hub
with its `/sidecar` WebSocket, the gate, the cloud budget, the `Fathom` service, the router, the
metrics, the MCP tokens and the audit log, the MCP tools at `/mcp` (streamable HTTP: the admin
token, or an MCP token scoped to its projects)) are built once by `build_parts`; here they get
the admin API, the dashboard, the error answers and the lifespan. Each part works without it
(tests construct them directly, and any of them can be injected, `ServerOptions`); this is only
where they meet, in the spirit of Starlette: explicit objects, no magic. `app.state` holds every part by name
(`settings`, `routing`, `registry`, `hub`, `gate`, `budget`, `service`, `router`, `metrics`,
`jobs`, `admin_auth`, `scrape_auth`, `operator`, `mcp`, `mcp_tokens`, `audit`, and all of them as
`parts`). Unless
`settings.watch` is off (`--no-watch`, FATHOM_WATCH=0), the lifespan starts the service's live
sync, so the indexes of the projects the server holds follow their folders; it also starts
loading the in-process encoder in the background, so the first search does not wait for it.

Auth: every route needs the admin bearer token except `GET /health` (and its older spelling
`/healthz`), the dashboard's static page and assets (they carry no data: the page asks for the
token and sends it on each of its API calls), `/.well-known/` (404s: no OAuth here), `/mcp`
(the admin or an MCP token) and the `/sidecar` WebSocket (a join token, see `fleet.hub`). `/openapi.json` needs the admin token too. `/metrics` takes the admin token or a
scrape-only token (`FATHOM_METRICS_TOKEN`), so a Prometheus server never holds a token that
could push a key or change a policy. The token is checked, and the route's body-size limit
applied, before any body is read (`server.guard`, the outermost part of the app).

It refuses to run without the secret scrubber: `logsafe.install()` is the first thing it does,
so no log record of the server process can carry a key-shaped string or a frame's content. A
request that fails validation answers 400 listing each field's problem, never the input itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.routing import Route

from fathom import __version__, logsafe
from fathom.config import RoutingStateDamaged, Settings
from fathom.errors import FathomError, failure_of
from fathom.server.admin.routers import admin_router, operator_router
from fathom.server.answers import body_problems, damaged, failure_response
from fathom.server.assembly import ServerOptions, ServerParts, build_parts
from fathom.server.auth import admin_dependency, scrape_dependency
from fathom.server.guard import BodyLimits, RequestGuard
from fathom.server.tokens import tokens_router

log = logging.getLogger(__name__)

STATE_NAMES = (
    "settings",
    "routing",
    "registry",
    "hub",
    "gate",
    "budget",
    "service",
    "router",
    "metrics",
    "jobs",
    "admin_auth",
    "scrape_auth",
    "operator",
    "mcp",
    "mcp_tokens",
    "audit",
)


def create_app(
    settings: Settings | None = None, *, parts: ServerParts | None = None, **options: Any
) -> FastAPI:
    """The server app over `parts` (built by `build_parts`). Without them, they are built from
    `settings` and `options`, the fields of `ServerOptions` as keywords (`admin_token=...`,
    `service=...`, `hub=...`): parts handed in instead of built."""
    logsafe.install()
    if parts is None:
        parts = build_parts(settings or Settings(), ServerOptions(**options))
    elif settings is not None or options:
        raise TypeError("create_app: give either built parts, or settings and options to build them from")
    app = FastAPI(
        title="fathom",
        version=__version__,
        lifespan=_lifespan(parts),
        description="Fathom's admin API. Every route needs `Authorization: Bearer <admin token>` "
        "except GET /health.",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    for name in STATE_NAMES:
        setattr(app.state, name, getattr(parts, name))
    app.state.parts = parts
    _answer_failures(app)
    # Auth before bodies: no route, and no framework layer, reads a request body before the
    # token is checked and the route's size limit applied.
    app.add_middleware(
        RequestGuard,
        access=parts.access,
        limits=BodyLimits(default=parts.settings.max_body_bytes),
        audit=parts.audit,
        wrong_tokens=parts.wrong_tokens,
    )
    _mount_routes(app, parts)
    _serve_openapi(app, admin_dependency(parts.admin_auth))
    from fathom.server.dashboard import mount as mount_dashboard

    mount_dashboard(app)
    return app


def _lifespan(parts: ServerParts) -> Callable[[FastAPI], Any]:
    settings, service, gate, jobs = parts.settings, parts.service, parts.gate, parts.jobs

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        service.warm_up()  # the encoder loads while the server already answers (`service.warmup`)
        gate.resume()  # whoever was cleared before this start is re-probed before it writes again
        rechecks = gate.start_rechecks(
            settings.recheck_interval_s, stop=stop
        )  # periodic re-probes against the golden vectors
        await jobs.restore()  # jobs a crash or a stop interrupted: listed, and resumed where they may be
        if settings.watch:
            # Live sync: the indexes of the projects this server holds follow their folders.
            # Failures only delay a project's sync (retried); they never stop the server.
            try:
                await service.start_watching()
            except Exception:
                log.exception("live sync could not start; indexes change only when re-indexed")
        git = getattr(service, "git", None)  # git projects with a poll interval are polled
        polls = asyncio.create_task(git.poll_forever()) if git is not None else None
        try:
            async with parts.mcp.running():
                yield
        finally:
            stop.set()
            if polls is not None:
                polls.cancel()
            rechecks.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await rechecks
            await jobs.aclose()
            await parts.hub.aclose()
            for part in parts.owned:
                with contextlib.suppress(Exception):
                    await part.aclose()

    return lifespan


def _answer_failures(app: FastAPI) -> None:
    """Every failure a route meets answers in the one refusal shape, never a bare 500."""

    @app.exception_handler(RoutingStateDamaged)
    async def state_damaged(request: Request, exc: RoutingStateDamaged) -> JSONResponse:
        # Whichever route met it: the server's own state file is damaged, which no request fixes.
        return JSONResponse(status_code=503, content={"detail": damaged(exc).detail})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = body_problems(exc)
        return JSONResponse(
            status_code=400,
            content={
                "detail": {"message": f"invalid request: {'; '.join(problems[:3])}", "problems": problems}
            },
        )

    # An anticipated failure a route did not turn into a refusal itself (a damaged project, a
    # full disk, a lost database) is still a typed answer naming the fix, never a bare 500.
    @app.exception_handler(FathomError)
    async def fathom_failure(request: Request, exc: FathomError) -> JSONResponse:
        return failure_response(exc)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        failure = failure_of(exc)
        if failure is None:
            raise exc
        return failure_response(failure)


def _mount_routes(app: FastAPI, parts: ServerParts) -> None:
    from fathom.server.guard import MCP_PATH
    from fathom.server.mcp_http import not_oauth_routes

    hub, metrics = parts.hub, parts.metrics
    parts.hub.mount(app)
    # A Route around the ASGI app itself (add_route's type wants a request handler; Route
    # takes either, and serves a non-function endpoint as the ASGI app it is).
    app.router.routes.append(
        Route(MCP_PATH, parts.mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    )
    for route in not_oauth_routes(parts.access.oauth):
        app.router.routes.append(route)
    app.include_router(admin_router(hub, parts.admin_auth, registry=parts.registry))
    app.include_router(operator_router(parts.operator, parts.admin_auth))
    app.include_router(
        tokens_router(
            parts.mcp_tokens,
            parts.audit,
            admin_dependency(parts.admin_auth),
            lambda: [str(r) for r in parts.index_roots],
        )
    )
    from fathom.server.oauth.admin import oauth_router

    app.include_router(oauth_router(parts.access, admin_dependency(parts.admin_auth)))

    from fathom.server.git_routes import git_admin_router, hooks_router

    app.include_router(hooks_router(parts.service))  # signed by the forge, not by a token
    app.include_router(git_admin_router(parts.service, admin_dependency(parts.admin_auth)))

    @app.get("/health", tags=["health"], openapi_extra={"security": []})
    async def health() -> dict[str, Any]:
        """Liveness, without auth: the version, how many sidecars are connected and whether the
        in-process encoder has loaded (searches before that wait for it)."""
        warmup = getattr(parts.service, "warmup", None)
        return {
            "ok": True,
            "version": __version__,
            "sidecars": len(hub.connected()),
            "encoder": warmup.state if warmup is not None else "not started",
        }

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        return await health()

    @app.get(
        "/metrics",
        tags=["metrics"],
        response_class=Response,
        dependencies=[Depends(scrape_dependency(parts.admin_auth, parts.scrape_auth))],
    )
    async def prometheus() -> Response:
        """Prometheus exposition: throughput, latency and errors per role and provider, throttles,
        the budget's state, verdict counts, the fleet and the jobs. Admin or scrape token."""
        body, content_type = await asyncio.to_thread(metrics.render)
        return Response(body, media_type=content_type)


def _serve_openapi(app: FastAPI, require_admin: Callable[[Request], None]) -> None:
    """`/openapi.json`, behind the admin token, with the bearer scheme declared."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_admin)])
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            doc.setdefault("components", {})["securitySchemes"] = {
                "admin": {"type": "http", "scheme": "bearer", "description": "the admin token"}
            }
            doc["security"] = [{"admin": []}]
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]  # FastAPI's documented override
