"""What one fathom server is made of, built once from the settings: `build_parts` returns the
`ServerParts` that `create_app` wires onto an app.

One registry, gate, budget and router for the whole server: the service's. The hub adds
sidecars to that registry, the router routes over it, the gate judges it, and the pools of
index jobs pull from it. Two of any of them would be two truths, so a part handed in
(`ServerOptions`, what tests inject) must be the service's own. Parts not given are built from
the settings: `Gate(data_dir)`, `CloudBudget(override=<the stored override>)`,
`Fathom(settings)` (its model loads on first use), a `Router` over the registry with the gate's
clearance. Tokens the operator chose in the environment must be strong enough not to be guessed
(`server.token_strength`), all of them checked before anything is written; each is kept only as
a hash under the data dir.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom import logsafe
from fathom.config import RoutingStore, Settings
from fathom.fleet.hub import Hub
from fathom.server.admin.budget_record import BudgetRecord
from fathom.server.admin.operator import OperatorParts
from fathom.server.audit import AuditLog
from fathom.server.auth import AdminAuth, ScrapeAuth
from fathom.server.guard import Access, WrongTokenDelay
from fathom.server.mcp_http import MCPEndpoint
from fathom.server.metrics import Metrics
from fathom.server.token_strength import check_chosen_token
from fathom.server.tokens import McpTokens
from fathom.service.jobs import IndexJobs

if TYPE_CHECKING:
    from fathom.service import Fathom


@dataclass
class ServerOptions:
    """Parts a caller hands in instead of having them built. `admin_token` / `join_token` /
    `metrics_token` default to `FATHOM_ADMIN_TOKEN` / `FATHOM_JOIN_TOKEN` / `FATHOM_METRICS_TOKEN`."""

    registry: Any = None
    hub: Hub | None = None
    admin_token: str | None = None
    join_token: str | None = None
    metrics_token: str | None = None
    routing: RoutingStore | None = None
    gate: Any = None
    budget: Any = None
    service: Fathom | None = None
    router: Any = None
    metrics: Metrics | None = None
    audit: AuditLog | None = None
    wrong_tokens: WrongTokenDelay | None = None
    oauth: Any = None  # a `server.oauth.door.OAuthVerifier` (else built from FATHOM_OAUTH_*)


@dataclass
class ServerParts:
    """Every live part of one server; `app.state` holds each by the same name."""

    settings: Settings
    service: Fathom
    hub: Hub
    metrics: Metrics
    jobs: IndexJobs
    admin_auth: AdminAuth
    scrape_auth: ScrapeAuth
    mcp_tokens: McpTokens
    audit: AuditLog
    access: Access
    mcp: MCPEndpoint
    operator: OperatorParts
    index_roots: list[Path]
    wrong_tokens: WrongTokenDelay | None = None
    owned: list[Any] = field(default_factory=list)  # parts built here, closed at shutdown

    @property
    def registry(self) -> Any:
        return self.service.registry

    @property
    def gate(self) -> Any:
        return self.service.gate

    @property
    def budget(self) -> Any:
        return self.service.budget

    @property
    def router(self) -> Any:
        return self.service.router

    @property
    def routing(self) -> RoutingStore:
        return self.service.routing


def build_parts(settings: Settings, options: ServerOptions | None = None) -> ServerParts:
    """The server's parts, from `settings` and whatever `options` hands in."""
    logsafe.install()
    options = _chosen_tokens(settings, options or ServerOptions())
    from fathom.datadir import open_data_dir

    open_data_dir(settings.data_dir)  # 0700, and tightened if an older one was not
    admin_auth, scrape_auth = _admin_tokens(settings, options)
    metrics = options.metrics or Metrics()
    budget_record = BudgetRecord(settings.data_dir)
    service, owned = _service(settings, options, budget_record)
    hub = _hub(settings, options, service, metrics)
    metrics.watch(
        budget=service.budget,
        gate=service.gate,
        hub=hub,
        registry=service.registry,
        jobs=lambda: list(service.jobs.values()),
    )
    from fathom.service.jobs import JobLedger

    jobs = IndexJobs(service, ledger=JobLedger(settings.data_dir), resume_on_start=settings.resume_jobs)
    # The MCP tools over streamable HTTP at /mcp, on the same service (one registry, gate,
    # budget and router for MCP clients, the admin API and the sidecars): the admin token, or an
    # MCP token scoped to its projects. Every admin action goes to the audit log.
    from fathom.index.walker import resolve_roots
    from fathom.server.mcp_tools import build_mcp_server

    mcp_tokens = McpTokens(settings.data_dir)
    audit = options.audit or AuditLog(settings.data_dir, max_bytes=settings.audit_max_bytes)
    from fathom.server.oauth.verifier import OAuthVerifier

    oauth = options.oauth if options.oauth is not None else OAuthVerifier.from_settings(settings)
    access = Access(admin_auth, scrape_auth, mcp_tokens, oauth=oauth, static_mcp=settings.mcp_static_tokens)
    index_roots = resolve_roots(settings.index_root_list())
    from fathom.server.warm import wait_for_encoder

    tools = build_mcp_server(service, router=service.router)
    wait_for_encoder(tools, service)  # a call that comes while the encoder loads at start waits, and says so
    mcp = MCPEndpoint(
        tools,
        access,
        host=settings.host,
        allowed_hosts=settings.allowed_host_list(),
        index_roots=lambda: index_roots,
        audit=audit,
        branches=service.git.branches_within,
    )
    operator = OperatorParts(
        settings=settings,
        routing=service.routing,
        hub=hub,
        registry=service.registry,
        gate=service.gate,
        budget=service.budget,
        service=service,
        router=service.router,
        jobs=jobs,
        budget_record=budget_record,
        metrics=metrics,
    )
    return ServerParts(
        settings=settings,
        service=service,
        hub=hub,
        metrics=metrics,
        jobs=jobs,
        admin_auth=admin_auth,
        scrape_auth=scrape_auth,
        mcp_tokens=mcp_tokens,
        audit=audit,
        access=access,
        mcp=mcp,
        operator=operator,
        index_roots=index_roots,
        wrong_tokens=options.wrong_tokens,
        owned=owned + ([oauth] if oauth is not None else []),
    )


def _chosen_tokens(settings: Settings, options: ServerOptions) -> ServerOptions:
    """`options` with the tokens the operator chose in the environment, each refused if it could
    be guessed (`WeakToken`), all before anything is written; tokens handed in are the caller's."""

    def chosen(name: str, given: str | None) -> str | None:
        return given or check_chosen_token(Settings.env_name(name), settings.secret(getattr(settings, name)))

    return replace(
        options,
        admin_token=chosen("admin_token", options.admin_token),
        join_token=chosen("join_token", options.join_token),
        metrics_token=chosen("metrics_token", options.metrics_token),
    )


def _admin_tokens(settings: Settings, options: ServerOptions) -> tuple[AdminAuth, ScrapeAuth]:
    admin, scrape = options.admin_token, options.metrics_token
    return (
        AdminAuth(settings.data_dir, tokens=(admin,) if admin else ()),
        ScrapeAuth(settings.data_dir, tokens=(scrape,) if scrape else ()),
    )


def _service(
    settings: Settings, options: ServerOptions, budget_record: BudgetRecord
) -> tuple[Any, list[Any]]:
    """The service given, or one built over the parts given; and the parts to close here."""
    owned: list[Any] = []
    service, hub = options.service, options.hub
    registry, gate, budget, router = options.registry, options.gate, options.budget, options.router
    if service is None:
        from fathom.inference.budget import CloudBudget
        from fathom.inference.registry import ProviderRegistry
        from fathom.service import Fathom

        if registry is None:
            registry = hub.registry if hub is not None and hub.registry is not None else ProviderRegistry()
        routing = options.routing or (hub.routing if hub is not None else None)
        service = Fathom(
            settings,
            registry=registry,
            gate=gate,
            router=router,
            routing=routing,
            budget=budget or CloudBudget(override=budget_record.load()),
        )
        owned.append(service)
    for name, given, own in (
        ("registry", registry, service.registry),
        ("gate", gate, service.gate),
        ("budget", budget, service.budget),
        ("router", router, service.router),
    ):
        if given is not None and given is not own:
            raise ValueError(
                f"create_app: the {name} given is not the service's own; build the "
                f"service with it (Fathom(..., {name}=...)) or pass only the service"
            )
    if budget_record.load() is not None and service.budget.state().ceiling_source != "override":
        service.budget.set_override(budget_record.load())
    return service, owned


def _hub(settings: Settings, options: ServerOptions, service: Fathom, metrics: Metrics) -> Hub:
    """The hub given (on the service's registry), or one built; sidecar routes are budgeted and
    measured, and the key checks of the sidecars feed the budget."""
    budget = service.budget

    def wrap(provider: Any) -> Any:
        from fathom.inference.budget import BudgetedProvider

        budgeted = BudgetedProvider(provider, budget) if provider.info.is_cloud else provider
        return metrics.instrument(budgeted)

    hub = options.hub
    join = options.join_token
    if hub is None:
        hub = Hub(
            settings.data_dir,
            registry=service.registry,
            routing=service.routing,
            join_tokens=(join,) if join else (),
            wrap=wrap,
        )
    elif hub.registry is not service.registry:
        raise ValueError(
            "create_app: the hub's registry is not the service's; build the hub "
            "with registry=service.registry"
        )
    elif hub.wrap is None:
        hub.wrap = wrap
    # Key discovery: the sidecars holding the key read its limits; the budget learns them.
    from fathom.fleet.keycheck import feed_budget

    hub.on_key_check(feed_budget(budget))
    return hub
