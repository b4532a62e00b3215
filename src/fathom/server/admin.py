"""The admin HTTP API: the fleet (list, approve, revoke, tokens, probe) and the key push.

This module owns the `/admin` router and its bearer-token check. Every endpoint needs the admin
token; the token is kept only as a hash (`admin.json` under the data dir, or from
`FATHOM_ADMIN_TOKEN` at start).

It refuses to let the OpenRouter key out: `POST /admin/key` parses its body by hand (so a
validation error can never echo the key back the way a framework's 422 echoes input), hands the
key to `Hub.push_config` and returns only who acknowledged. No response of this router carries
a key, and nothing here stores one.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from pathlib import Path
from typing import Any, Callable

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fathom.config import atomic_write_text
from fathom.errors import ConfigError, FathomError
from fathom.fleet.auth import hash_token
from fathom.fleet.hub import Hub
from fathom.fleet.protocol import NAME_PATTERN, describe
from fathom.roles import Role

log = logging.getLogger("fathom.server.admin")

MAX_KEY_BODY = 64 * 1024


class AdminAuth:
    """Admin bearer tokens, as hashes in `admin.json`."""

    FILENAME = "admin.json"

    def __init__(self, data_dir: Path, *, tokens: tuple[str, ...] = ()):
        self.path = Path(data_dir) / self.FILENAME
        self._hashes: list[str] = []
        if self.path.exists():
            try:
                self._hashes = list(json.loads(self.path.read_text()).get("token_hashes", []))
            except (ValueError, OSError, AttributeError) as exc:
                raise ConfigError(f"{self.path} is not a valid admin record; fix or remove it") from exc
        added = [hash_token(t) for t in tokens if hash_token(t) not in self._hashes]
        if added:
            self._hashes += added
            self._save()

    def _save(self) -> None:
        atomic_write_text(self.path, json.dumps({"token_hashes": self._hashes}, indent=2))

    @property
    def configured(self) -> bool:
        return bool(self._hashes)

    def issue(self) -> str:
        token = f"fa_{secrets.token_urlsafe(32)}"
        self._hashes.append(hash_token(token))
        self._save()
        return token

    def check(self, token: str | None) -> bool:
        if not token:
            return False
        h = hash_token(token)
        return any(hmac.compare_digest(h, x) for x in self._hashes)


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=NAME_PATTERN)


class ProbeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str
    texts: list[str] = Field(min_length=1, max_length=16)


class KeyPush(BaseModel):
    """The body of `POST /admin/key`. `repr` hides the key."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    key: str | None = Field(default=None, min_length=8, max_length=512, pattern=r"^\S+$", repr=False)
    roles: dict[str, dict[str, Any]] | None = None
    forget_key: bool = False


def admin_router(hub: Hub, auth: AdminAuth, *, registry: Any = None,
                 clock: Callable[[], float] = time.perf_counter) -> APIRouter:
    def require_admin(request: Request) -> None:
        if not auth.configured:
            raise HTTPException(503, "no admin token is configured: set FATHOM_ADMIN_TOKEN, or start "
                                     "`python -m fathom.server` once to have one issued")
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not auth.check(token.strip()):
            raise HTTPException(401, "admin token missing or wrong: send `Authorization: Bearer <admin token>`",
                                headers={"WWW-Authenticate": "Bearer"})

    router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

    @router.get("/fleet")
    async def fleet() -> dict[str, Any]:
        last = hub.last_push()
        return {
            "sidecars": [s.to_dict() for s in hub.sidecars()],
            "problems": hub.problems(),
            "last_push": None if last is None else {**last.model_dump(mode="json"), "pushed": last.pushed},
        }

    @router.post("/fleet/{name}/approve")
    async def approve(name: str) -> dict[str, Any]:
        return (await hub.approve(_name(name))).to_dict()

    @router.post("/fleet/{name}/revoke")
    async def revoke(name: str) -> dict[str, Any]:
        return (await hub.revoke(_name(name))).to_dict()

    @router.post("/fleet/tokens")
    async def issue_token(body: TokenRequest | None = None) -> dict[str, Any]:
        """A new join token (no name) or a host token that pre-approves `name`; shown once."""
        name = body.name if body else None
        issued = hub.auth.issue_host_token(name) if name else hub.auth.issue_join_token()
        return {"token": issued.token, "name": issued.name,
                "kind": "host" if name else "join", "note": "shown once; only its hash is kept"}

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
        return {"provider": provider.id, "model": provider.info.model, "width": int(vectors.shape[1]),
                "ms": round((clock() - started) * 1000, 1), "vectors": vectors.tolist()}

    def _find_provider(pid: str) -> Any:
        candidates = list(registry) if registry is not None else []
        candidates += hub.providers()
        for prov in candidates:
            if prov.id == pid:
                return prov
        raise HTTPException(404, f"no live provider {pid!r}; see GET /admin/fleet for the routes")

    @router.post("/key")
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
        except ConfigError as exc:
            raise HTTPException(400, {"message": str(exc), "problems": exc.problems}) from None
        finally:
            del body  # the last reference this handler holds to the key
        return outcome.to_dict()

    return router


def _name(name: str) -> str:
    import re

    if not re.fullmatch(NAME_PATTERN, name):
        raise HTTPException(400, "a sidecar name is 1-64 letters, digits, '.', '_' or '-'")
    return name


def describe_body(exc: ValidationError) -> str:
    """Field paths and messages without input values (the key must never be echoed)."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False, include_context=False)[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or describe(exc)
