"""`/admin/budget`: the cloud budget's state, and the operator's override (1-256, or none),
saved (`BudgetRecord`) before it is applied. The budget sizes itself; this only sets the
ceiling the operator chose.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from fathom.errors import ConfigError
from fathom.server.admin.bodies import BudgetChange
from fathom.server.admin.views import budget_view
from fathom.server.answers import refusal

if TYPE_CHECKING:
    from fathom.server.admin.operator import OperatorParts

log = logging.getLogger("fathom.server.admin")


def budget_router(parts: OperatorParts) -> APIRouter:
    """`/budget`: read the budget's state, set or remove the override."""
    router = APIRouter()

    @router.get("/budget", tags=["budget"])
    async def get_budget() -> dict[str, Any]:
        """Where the ceiling comes from, the ceiling, effective limit, in flight, RPM window
        count, cooldown left and the last 429."""
        return budget_view(parts.need("budget"))

    @router.put("/budget", tags=["budget"])
    async def put_budget(body: BudgetChange) -> dict[str, Any]:
        """Set the manual ceiling override (1-256 permits), or remove it with null. Out of range
        is refused (400) and changes nothing."""
        from fathom.inference.budget.ceiling import validate_override

        budget = parts.need("budget")
        try:
            override = validate_override(body.override)
        except ConfigError as exc:
            raise refusal(400, str(exc)) from None
        # Persist first, then apply: a failed save leaves the live budget as it was.
        if parts.budget_record is not None:
            await asyncio.to_thread(parts.budget_record.save, override)
        budget.set_override(override)
        log.info(
            "cloud budget override %s by the operator",
            "removed" if body.override is None else f"set to {body.override}",
        )
        return budget_view(budget)

    return router
