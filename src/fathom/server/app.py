"""Assembling the fathom server's ASGI app.

This module owns one function, `create_app`, that puts the parts together: the settings, the
routing store, the provider registry, the fleet hub with its `/sidecar` WebSocket, the gate,
the cloud budget, the `Fathom` service, the router, the metrics, the admin API, the MCP tokens
and the audit log, the MCP tools at `/mcp` (streamable HTTP: the admin token, or an MCP token
scoped to its projects) and the dashboard. Each part works without it (tests
construct them directly, and any of them can be injected here); this is only where they meet,
in the spirit of Starlette: explicit objects, no magic. `app.state` holds every part by name
(`settings`, `routing`, `registry`, `hub`, `gate`, `budget`, `service`, `router`, `metrics`,
`jobs`, `admin_auth`, `scrape_auth`, `operator`, `mcp`, `mcp_tokens`, `audit`). Unless
`settings.watch` is off (`--no-watch`, FATHOM_WATCH=0), the lifespan starts the service's live
sync, so the indexes of the projects the server holds follow their folders.

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
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response

from fathom import __version__, logsafe
from fathom.config import RoutingStateDamaged, RoutingStore, Settings
from fathom.errors import FathomError, failure_of
from fathom.fleet.hub import Hub
from fathom.server.admin import (
    failure_response,
    AdminAuth, BudgetRecord, IndexJobs, OperatorParts, ScrapeAuth, admin_dependency, admin_router,
    body_problems, damaged, operator_router, scrape_dependency,
)
from fathom.server.audit import AuditLog
from fathom.server.guard import Access, BodyLimits, RequestGuard, WrongTokenDelay
from fathom.server.metrics import Metrics
from fathom.server.tokens import McpTokens, check_chosen_token, tokens_router

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    *,
    registry: Any = None,
    hub: Hub | None = None,
    admin_token: str | None = None,
    join_token: str | None = None,
    metrics_token: str | None = None,
    routing: RoutingStore | None = None,
    gate: Any = None,
    budget: Any = None,
    service: Any = None,
    router: Any = None,
    metrics: Metrics | None = None,
    audit: AuditLog | None = None,
    wrong_tokens: WrongTokenDelay | None = None,
) -> FastAPI:
    """The server app. `admin_token` / `join_token` / `metrics_token` default to
    `FATHOM_ADMIN_TOKEN` / `FATHOM_JOIN_TOKEN` / `FATHOM_METRICS_TOKEN`; each is kept only as a
    hash under the data dir. Parts not given are built from `settings`: `Gate(data_dir)`,
    `CloudBudget(override=<the stored override>)`, `Fathom(settings)` (its model loads on first
    use), a `Router` over the registry with the gate's clearance."""
    logsafe.install()
    settings = settings or Settings()
    from fathom.datadir import open_data_dir

    open_data_dir(settings.data_dir)  # 0700, and tightened if an older one was not
    # Tokens the operator chose in the environment must be long enough not to be guessed.
    admin = admin_token or check_chosen_token("FATHOM_ADMIN_TOKEN", settings.secret(settings.admin_token))
    admin_auth = AdminAuth(settings.data_dir, tokens=(admin,) if admin else ())
    scrape = metrics_token or check_chosen_token("FATHOM_METRICS_TOKEN", settings.secret(settings.metrics_token))
    scrape_auth = ScrapeAuth(settings.data_dir, tokens=(scrape,) if scrape else ())
    metrics = metrics or Metrics()

    # One registry, gate, budget and router for the whole server: the service's. The hub adds
    # sidecars to that registry, the router routes over it, the gate judges it, and the pools
    # of index jobs pull from it. Two of any of them would be two truths.
    owned: list[Any] = []  # parts built here, closed here
    budget_record = BudgetRecord(settings.data_dir)
    if service is None:
        from fathom.inference.budget import CloudBudget
        from fathom.inference.registry import ProviderRegistry
        from fathom.service import Fathom

        if registry is None:
            registry = hub.registry if hub is not None and hub.registry is not None else ProviderRegistry()
        routing = routing or (hub.routing if hub is not None else None)
        service = Fathom(settings, registry=registry, gate=gate, router=router, routing=routing,
                         budget=budget or CloudBudget(override=budget_record.load()))
        owned.append(service)
    for name, given, own in (("registry", registry, service.registry), ("gate", gate, service.gate),
                             ("budget", budget, service.budget), ("router", router, service.router)):
        if given is not None and given is not own:
            raise ValueError(f"create_app: the {name} given is not the service's own; build the "
                             f"service with it (Fathom(..., {name}=...)) or pass only the service")
    registry, gate, budget, router, routing = (service.registry, service.gate, service.budget,
                                               service.router, service.routing)
    if budget_record.load() is not None and budget.state().ceiling_source != "override":
        budget.set_override(budget_record.load())

    def wrap(provider: Any) -> Any:
        from fathom.inference.budget import BudgetedProvider

        budgeted = BudgetedProvider(provider, budget) if provider.info.is_cloud else provider
        return metrics.instrument(budgeted)

    join = join_token or check_chosen_token("FATHOM_JOIN_TOKEN", settings.secret(settings.join_token))
    if hub is None:
        hub = Hub(settings.data_dir, registry=registry, routing=routing,
                  join_tokens=(join,) if join else (), wrap=wrap)
    elif hub.registry is not registry:
        raise ValueError("create_app: the hub's registry is not the service's; build the hub "
                         "with registry=service.registry")
    elif hub.wrap is None:
        hub.wrap = wrap
    # Key discovery: the sidecars holding the key read its limits; the budget learns them.
    from fathom.fleet.keycheck import feed_budget

    hub.on_key_check(feed_budget(budget))
    metrics.watch(budget=budget, gate=gate, hub=hub, registry=registry, jobs=lambda: list(service.jobs.values()))
    from fathom.server.job_records import JobLedger

    jobs = IndexJobs(service, ledger=JobLedger(settings.data_dir), resume_on_start=settings.resume_jobs)
    # The MCP tools over streamable HTTP at /mcp, on the same service (one registry, gate,
    # budget and router for MCP clients, the admin API and the sidecars): the admin token, or an
    # MCP token scoped to its projects. Every admin action goes to the audit log.
    from fathom.index.walker import resolve_roots
    from fathom.server.mcp_http import MCP_PATH, MCPEndpoint, not_oauth_routes
    from fathom.server.mcp_tools import build_mcp_server

    mcp_tokens = McpTokens(settings.data_dir)
    audit = audit or AuditLog(settings.data_dir, max_bytes=settings.audit_max_bytes)
    access = Access(admin_auth, scrape_auth, mcp_tokens)
    index_roots = resolve_roots(settings.index_root_list())
    mcp_endpoint = MCPEndpoint(build_mcp_server(service, router=router), access, host=settings.host,
                               allowed_hosts=settings.allowed_host_list(), index_roots=lambda: index_roots,
                               audit=audit)
    parts = OperatorParts(settings=settings, routing=routing, hub=hub, registry=registry, gate=gate,
                          budget=budget, service=service, router=router, jobs=jobs,
                          budget_record=budget_record, metrics=metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        gate.resume()  # whoever was cleared before this start is re-probed before it writes again
        rechecks = gate.start_rechecks(settings.recheck_interval_s, stop=stop)  # periodic re-probes against the golden vectors
        await jobs.restore()  # jobs a crash or a stop interrupted: listed, and resumed where they may be
        if settings.watch:
            # Live sync: the indexes of the projects this server holds follow their folders.
            # Failures only delay a project's sync (retried); they never stop the server.
            try:
                await service.start_watching()
            except Exception:  # noqa: BLE001
                log.exception("live sync could not start; indexes change only when re-indexed")
        try:
            async with mcp_endpoint.running():
                yield
        finally:
            stop.set()
            rechecks.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await rechecks
            await jobs.aclose()
            await hub.aclose()
            for part in owned:
                with contextlib.suppress(Exception):
                    await part.aclose()

    app = FastAPI(title="fathom", version=__version__, lifespan=lifespan,
                  description="Fathom's admin API. Every route needs `Authorization: Bearer <admin token>` "
                              "except GET /health.",
                  openapi_url=None, docs_url=None, redoc_url=None)
    for name, value in (("settings", settings), ("routing", routing), ("registry", registry), ("hub", hub),
                        ("gate", gate), ("budget", budget), ("service", service), ("router", router),
                        ("metrics", metrics), ("jobs", jobs), ("admin_auth", admin_auth),
                        ("scrape_auth", scrape_auth), ("operator", parts), ("mcp", mcp_endpoint),
                        ("mcp_tokens", mcp_tokens), ("audit", audit)):
        setattr(app.state, name, value)

    @app.exception_handler(RoutingStateDamaged)
    async def state_damaged(request: Request, exc: RoutingStateDamaged) -> JSONResponse:
        # Whichever route met it: the server's own state file is damaged, which no request fixes.
        return JSONResponse(status_code=503, content={"detail": damaged(exc).detail})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = body_problems(exc)
        return JSONResponse(status_code=400, content={"detail": {
            "message": f"invalid request: {'; '.join(problems[:3])}", "problems": problems}})

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

    # Auth before bodies: no route, and no framework layer, reads a request body before the
    # token is checked and the route's size limit applied.
    app.add_middleware(RequestGuard, access=access, limits=BodyLimits(default=settings.max_body_bytes), audit=audit,
                       wrong_tokens=wrong_tokens)
    hub.mount(app)
    app.add_route(MCP_PATH, mcp_endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    for route in not_oauth_routes():
        app.router.routes.append(route)
    app.include_router(admin_router(hub, admin_auth, registry=registry))
    app.include_router(operator_router(parts, admin_auth))
    app.include_router(tokens_router(mcp_tokens, audit, admin_dependency(admin_auth),
                                     lambda: [str(r) for r in index_roots]))

    @app.get("/health", tags=["health"], openapi_extra={"security": []})
    async def health() -> dict[str, Any]:
        """Liveness, without auth: the version and how many sidecars are connected."""
        return {"ok": True, "version": __version__, "sidecars": len(hub.connected())}

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        return await health()

    @app.get("/metrics", tags=["metrics"], response_class=Response,
             dependencies=[Depends(scrape_dependency(admin_auth, scrape_auth))])
    async def prometheus() -> Response:
        """Prometheus exposition: throughput, latency and errors per role and provider, throttles,
        the budget's state, verdict counts, the fleet and the jobs. Admin or scrape token."""
        body, content_type = await asyncio.to_thread(metrics.render)
        return Response(body, media_type=content_type)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(admin_dependency(admin_auth))])
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description,
                              routes=app.routes)
            doc.setdefault("components", {})["securitySchemes"] = {
                "admin": {"type": "http", "scheme": "bearer", "description": "the admin token"}}
            doc["security"] = [{"admin": []}]
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]

    from fathom.server.dashboard import mount as mount_dashboard

    mount_dashboard(app)
    return app
