"""The admin HTTP API: everything an operator sees and steers, behind a bearer token.

This package owns the `/admin` routers, one module per concern:

- fleet: list, approve, revoke, join/host tokens, probe a route; and the key push;
- policies: the route of every role (policy, model, upstream pin, width, fallback) with the
  providers serving it, and validated changes (every problem listed, nothing written on a
  refusal; an accepted change is pushed to the sidecars without a key);
- gate: verdicts with their evidence, verify a provider now, audit a project, re-embed;
- budget: the cloud budget's state, and the manual override (1-256, or none);
- jobs: start an index job, its live progress, pause, resume, cancel;
- projects: what is indexed, each project's status and live sync (watch) state, turning its
  sync on or off, and dropping a project with everything of it;
- an overview (all of the above at once) for the dashboard's polling.

Every endpoint needs the admin token (`Authorization: Bearer ...`); tokens are kept only as
hashes (`admin.json` under the data dir, or from `FATHOM_ADMIN_TOKEN` at start). `/metrics`
also accepts a scrape-only token (`ScrapeAuth`, `metrics.json`), so a Prometheus server never
holds a token that can push a key or change a policy.

A refusal answers 400 (409 for an action that does not apply to a job's state, 404 for an
unknown name, 503 when a part cannot answer now) with `{"detail": {"message", "problems"}}`:
each problem names what is wrong and the fix.

It refuses to let the OpenRouter key out: `POST /admin/key` parses its body by hand (so a
validation error can never echo the key back the way a framework's 422 echoes input), hands the
key to `Hub.push_config` and returns only who acknowledged. No response of this package carries
a key, and nothing here stores one. It refuses to decide anything itself: the gate judges, the
routing store validates and writes, the budget sizes, the indexer runs; this is their window.

The token checks are `server.auth`, the shapes of every answer `server.answers`; both import
nothing of this package, so the request guard and the MCP endpoint use them without it.
`routers` puts the routers of each concern together (`admin_router`, `operator_router`);
`operator` holds the parts they read and steer (`OperatorParts`), the index jobs among them
(`fathom.service.jobs.IndexJobs`); `bodies` the request models; `policy_rules` the checks of a policy change;
`views` how each part's state is shown.
"""

from __future__ import annotations

from fathom.server.admin.bodies import (
    MAX_PATH_COMPONENT_BYTES,
    MAX_WIDTH,
    POLICY_BODY_SCHEMA,
    ROUTE_FIELDS,
    BudgetChange,
    JobStart,
    KeyPush,
    ProbeRequest,
    ReembedRequest,
    SearchBody,
    TokenRequest,
    VerifyRequest,
    WatchChange,
    check_server_path,
)
from fathom.server.admin.budget_record import BudgetRecord
from fathom.server.admin.operator import OperatorParts, require_project
from fathom.server.admin.policy_rules import check_policy_changes, reference_problems
from fathom.server.admin.projects import ENDED_JOB_STATES, project_view
from fathom.server.admin.routers import admin_router, operator_router
from fathom.server.admin.views import budget_view, fleet_view, iso, job_view, verdict_view
from fathom.server.answers import (
    MAX_KEY_BODY,
    MAX_POLICY_BODY,
    bearer_token,
    body_problems,
    damaged,
    describe_body,
    failure_response,
    failure_status,
    no_token_configured,
    refusal,
    unauthorized,
)
from fathom.server.auth import AdminAuth, ScrapeAuth, admin_dependency, scrape_dependency
from fathom.service.jobs import IndexJobs

__all__ = [
    "ENDED_JOB_STATES",
    "MAX_KEY_BODY",
    "MAX_PATH_COMPONENT_BYTES",
    "MAX_POLICY_BODY",
    "MAX_WIDTH",
    "POLICY_BODY_SCHEMA",
    "ROUTE_FIELDS",
    "AdminAuth",
    "BudgetChange",
    "BudgetRecord",
    "IndexJobs",
    "JobStart",
    "KeyPush",
    "OperatorParts",
    "ProbeRequest",
    "ReembedRequest",
    "ScrapeAuth",
    "SearchBody",
    "TokenRequest",
    "VerifyRequest",
    "WatchChange",
    "admin_dependency",
    "admin_router",
    "bearer_token",
    "body_problems",
    "budget_view",
    "check_policy_changes",
    "check_server_path",
    "damaged",
    "describe_body",
    "failure_response",
    "failure_status",
    "fleet_view",
    "iso",
    "job_view",
    "no_token_configured",
    "operator_router",
    "project_view",
    "reference_problems",
    "refusal",
    "require_project",
    "scrape_dependency",
    "unauthorized",
    "verdict_view",
]
