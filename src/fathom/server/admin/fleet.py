"""`/admin/fleet` and `/admin/key`: the sidecars (list, approve, revoke, join and host tokens,
probe a route) and the key push.

It refuses to let the OpenRouter key out: `POST /admin/key` parses its body by hand (so a
validation error can never echo the key back the way a framework's 422 echoes input), hands the
key to `Hub.push_config` and returns only who acknowledged. No response carries a key, and
nothing here stores one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import ValidationError

from fathom.config import RoutingStateDamaged
from fathom.errors import ConfigError, FathomError
from fathom.fleet.hub import Hub
from fathom.fleet.protocol import NAME_PATTERN
from fathom.roles import Role
from fathom.server.admin.bodies import KeyPush, ProbeRequest, TokenRequest
from fathom.server.admin.views import fleet_view
from fathom.server.answers import MAX_KEY_BODY, damaged, describe_body, refusal


def fleet_router(
    hub: Hub, *, registry: Any = None, clock: Callable[[], float] = time.perf_counter
) -> APIRouter:
    """The sidecars: list, approve, revoke, issue tokens, probe a route."""
    router = APIRouter()

    @router.get("/fleet")
    async def fleet() -> dict[str, Any]:
        """Every sidecar (approved, pending, offline) with its health, and the fleet's problems."""
        return fleet_view(hub)

    @router.post("/fleet/{name}/approve")
    async def approve(name: str, rebind: bool = False, pre_approve: bool = False) -> dict[str, Any]:
        """Approve a sidecar, bound to the credential of the host connected under the name now.
        A host claiming a name bound to another host is approved only with `rebind=true` (it
        replaces that host); 409 otherwise. A name no sidecar has connected under is approved
        only with `pre_approve=true` (the first host to connect under it is bound to it), so a
        typo is refused (409) instead of waiting for whoever takes the name."""
        from fathom.fleet.hub import NameClaimed

        known = {s.name for s in hub.sidecars()}
        if not pre_approve and _name(name) not in known and not hub.auth.is_revoked(name):
            raise refusal(
                409,
                f"no sidecar named {name!r} has connected to this server",
                [
                    f"no sidecar named {name!r} has connected to this server"
                    + (f" (the sidecars: {', '.join(sorted(known))})" if known else "")
                    + f"; check the name, or approve it before its first connection with `fathom fleet approve "
                    f"{name} --pre-approve` (the first host to connect under it is bound to it)"
                ],
            )
        try:
            return (await hub.approve(_name(name), rebind=rebind)).to_dict()
        except NameClaimed as exc:
            raise refusal(409, str(exc)) from None

    @router.post("/fleet/{name}/revoke")
    async def revoke(name: str) -> dict[str, Any]:
        return (await hub.revoke(_name(name))).to_dict()

    @router.post("/fleet/tokens")
    async def issue_token(body: TokenRequest | None = None) -> dict[str, Any]:
        """A new join token (no name) or a host token that pre-approves `name`; shown once."""
        name = body.name if body else None
        issued = hub.auth.issue_host_token(name) if name else hub.auth.issue_join_token()
        return {
            "token": issued.token,
            "name": issued.name,
            "kind": "host" if name else "join",
            "note": "shown once; only its hash is kept",
        }

    @router.post("/fleet/probe")
    async def probe(body: ProbeRequest) -> dict[str, Any]:
        """Embed a few texts through one live provider (a sidecar route, by id): the operator's
        check that a route serves what it claims. Returns the vectors of those texts only."""
        provider = _find_provider(body.provider)
        started = clock()
        try:
            vectors = await provider.embed(body.texts)
        except FathomError as exc:
            raise HTTPException(502, f"{body.provider} failed: {exc}") from None
        return {
            "provider": provider.id,
            "model": provider.info.model,
            "width": int(vectors.shape[1]),
            "ms": round((clock() - started) * 1000, 1),
            "vectors": vectors.tolist(),
        }

    def _find_provider(pid: str) -> Any:
        candidates = list(registry) if registry is not None else []
        candidates += hub.providers()
        for prov in candidates:
            if prov.id == pid:
                return prov
        raise HTTPException(404, f"no live provider {pid!r}; see GET /admin/fleet for the routes")

    return router


def key_router(hub: Hub) -> APIRouter:
    """The key push: routing, and optionally the OpenRouter key, to every approved sidecar."""
    router = APIRouter()

    @router.post(
        "/key",
        openapi_extra={
            "requestBody": {
                "required": False,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "key": {
                                    "type": "string",
                                    "minLength": 8,
                                    "maxLength": 512,
                                    "writeOnly": True,
                                },
                                "roles": {"type": "object"},
                                "forget_key": {"type": "boolean"},
                            },
                        }
                    }
                },
            }
        },
    )
    async def push_key(request: Request) -> dict[str, Any]:
        """Push routing (and optionally the OpenRouter key) to every approved, connected sidecar.
        Returns who acknowledged and who was offline; never the key."""
        raw = await request.body()
        if len(raw) > MAX_KEY_BODY:
            raise HTTPException(413, "body too large")
        try:
            body = KeyPush.model_validate_json(raw or b"{}")
        except ValidationError as exc:
            raise HTTPException(400, f"invalid key push: {describe_body(exc)}") from None
        finally:
            del raw
        try:
            roles = {Role.parse(r): fields for r, fields in (body.roles or {}).items()}
            outcome = await hub.push_config(roles or None, body.key, forget_key=body.forget_key)
        except RoutingStateDamaged as exc:
            raise damaged(exc) from None
        except ConfigError as exc:
            raise HTTPException(400, {"message": str(exc), "problems": exc.problems}) from None
        finally:
            del body  # the last reference this handler holds to the key
        return outcome.to_dict()

    return router


def _name(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name):
        raise HTTPException(400, "a sidecar name is 1-64 letters, digits, '.', '_' or '-'")
    return name
