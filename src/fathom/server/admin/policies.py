"""`/admin/policies`: the route of every role with the providers serving it, and validated
changes (every problem listed, nothing written on a refusal; an accepted change is stored and
pushed to the sidecars without a key).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from fathom.errors import ConfigError
from fathom.server.admin.bodies import POLICY_BODY_SCHEMA
from fathom.server.admin.policy_rules import check_policy_changes, reference_problems
from fathom.server.answers import MAX_POLICY_BODY, refusal

if TYPE_CHECKING:
    from fathom.server.admin.operator import OperatorParts

log = logging.getLogger("fathom.server.admin")


def policies_router(parts: OperatorParts) -> APIRouter:
    """Read and change the roles' routes."""
    router = APIRouter()

    @router.get("/policies", tags=["policies"])
    async def get_policies() -> dict[str, Any]:
        """Per role: policy, model, upstream pin, width, fallback, and the providers serving it."""
        return parts.policies()

    @router.put(
        "/policies",
        tags=["policies"],
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": POLICY_BODY_SCHEMA}}}
        },
    )
    async def put_policies(request: Request) -> dict[str, Any]:
        """Change roles' routes: `{role: {policy?, model?, upstream?, width?, fallback?}}`.

        Validated before any write: unknown role or policy, an embedding role without a pin
        under a cloud-capable policy, a width that does not match the table. A refusal (400)
        lists every problem and writes nothing. An accepted change is stored, then pushed to
        every approved sidecar (without a key: they keep the key they hold)."""
        raw = await request.body()
        if len(raw) > MAX_POLICY_BODY:
            raise refusal(413, "body too large")
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            raise refusal(400, "the body is not JSON: send {role: {field: value}}") from None
        try:
            state = parts.routing.load()
            widths, refs = await asyncio.to_thread(parts.table_widths)
        except ConfigError as exc:
            raise refusal(503, str(exc), exc.problems) from None
        changes, problems = check_policy_changes(body, state, table_widths=widths, reference_widths=refs)
        if parts.service is not None:
            problems += reference_problems(parts.service, state, changes)
        if problems:
            raise refusal(
                400,
                f"policy change refused ({len(problems)} problem"
                f"{'s' if len(problems) != 1 else ''}); nothing was written",
                problems,
            )
        try:
            outcome = await parts.hub.push_config(changes)
        except ConfigError as exc:
            raise refusal(400, "policy change refused; nothing was written", exc.problems) from None
        log.info(
            "policies changed by the operator: %s",
            ", ".join(f"{r}: {', '.join(f'{k}={v}' for k, v in f.items())}" for r, f in changes.items()),
        )
        view = parts.policies()
        return {
            "applied": {r.value: view["roles"][r.value] for r in changes},
            "push": outcome.to_dict(),
            "roles": view["roles"],
        }

    return router
