"""The two admin routers `create_app` mounts, each put together from the routers of one concern
apiece, under `/admin` and behind the admin token.

`admin_router`: the fleet and the key push (it needs only the hub). `operator_router`: policies,
gate, budget, jobs, projects and the overview (they need the `OperatorParts`). The order the
parts are included in is the order the routes are matched in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends

from fathom.fleet.hub import Hub
from fathom.server.admin.budget import budget_router
from fathom.server.admin.fleet import fleet_router, key_router
from fathom.server.admin.gate import gate_router
from fathom.server.admin.jobs import jobs_router
from fathom.server.admin.operator import OperatorParts
from fathom.server.admin.policies import policies_router
from fathom.server.admin.projects import projects_router
from fathom.server.auth import AdminAuth, admin_dependency


def admin_router(
    hub: Hub, auth: AdminAuth, *, registry: Any = None, clock: Callable[[], float] = time.perf_counter
) -> APIRouter:
    """The fleet endpoints and the key push."""
    router = APIRouter(prefix="/admin", dependencies=[Depends(admin_dependency(auth))], tags=["fleet"])
    router.include_router(fleet_router(hub, registry=registry, clock=clock))
    router.include_router(key_router(hub))
    return router


def operator_router(parts: OperatorParts, auth: AdminAuth) -> APIRouter:
    """Policies, gate, budget, jobs, projects and the overview."""
    router = APIRouter(prefix="/admin", dependencies=[Depends(admin_dependency(auth))])
    for part in (policies_router, gate_router, budget_router, jobs_router, projects_router):
        router.include_router(part(parts))

    @router.get("/overview", tags=["overview"])
    async def overview() -> dict[str, Any]:
        """Everything the dashboard shows, in one answer: policies, fleet, gate, budget, jobs."""
        return parts.overview()

    return router
