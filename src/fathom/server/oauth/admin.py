"""The operator's view of OAuth on the admin API: `GET /admin/oauth` (the issuer, the resource,
how tokens are checked, the keys held, the mapping; never a secret) and
`PUT /admin/oauth/mapping` (replace the claims-to-access mapping whole, validated first: a
refused document changes nothing). `fathom oauth show|set-mapping` and the dashboard read the
same answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request

from fathom.errors import ConfigError
from fathom.server.answers import refusal
from fathom.server.guard import Access

OFF = (
    "OAuth is off on this server: set FATHOM_OAUTH_ISSUER and FATHOM_OAUTH_RESOURCE (docs/operator.md, "
    '"Signing people in with OAuth") and restart it'
)


def oauth_router(access: Access, require_admin: Callable[[Request], None]) -> APIRouter:
    router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

    @router.get("/oauth", tags=["oauth"])
    async def show() -> dict[str, Any]:
        """Whether OAuth is on, its issuer, resource, scopes and mapping, and whether `/mcp`
        still takes the static tokens."""
        door = access.oauth
        state: dict[str, Any] = {"enabled": door is not None, "static_mcp_tokens": access.static_mcp}
        return {**state, **door.view()} if door is not None else {**state, "note": OFF}

    @router.put("/oauth/mapping", tags=["oauth"])
    async def set_mapping(request: Request, document: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        """Replace the mapping from claims to projects and rights; answers the mapping now."""
        door = access.oauth
        if door is None:
            raise refusal(409, OFF)
        try:
            replaced = await asyncio.to_thread(door.mapping.replace, document)
        except ConfigError as exc:
            raise refusal(400, str(exc), exc.problems) from None
        request.scope["fathom.audit"] = f"set the OAuth mapping ({len(replaced.rules)} rules)"
        return door.mapping.view()

    return router
