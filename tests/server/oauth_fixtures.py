"""A stand-in authorization server for the OAuth unit tests: real signing keys (made with
`cryptography`), a real JWKS and metadata served over HTTP on 127.0.0.1, an RFC 7662
introspection endpoint, and access tokens minted with PyJWT. The end-to-end test uses a real
OpenID Connect server instead (tests/oidc/provider.mjs).

`team_server` is the full app with projects alpha and beta indexed and, given an issuer, OAuth
on with `MAPPING` set through the admin API."""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fleet.fleet_fixtures import free_port, serve_in_loop
from tests.server.admin_fixtures import Operator, build_operator_app, make_project

RESOURCE = "http://127.0.0.1:9/mcp"  # the audience the tokens are minted for (never dialled)
INTROSPECTION_CLIENT = ("fathom-rs", "introspection-secret-0123456789")


class ManualClock:
    """Time that moves only when a test says so (`fathom.clock.Clock`)."""

    def __init__(self, start: float | None = None):
        self.t = time.time() if start is None else start

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class SigningKey:
    kid: str
    private: Any
    algorithm: str

    def jwk(self) -> dict[str, Any]:
        algo = (
            jwt.algorithms.RSAAlgorithm
            if self.algorithm.startswith(("RS", "PS"))
            else jwt.algorithms.ECAlgorithm
        )
        public = json.loads(algo.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "use": "sig", "alg": self.algorithm}


def rsa_key(kid: str | None = None) -> SigningKey:
    return SigningKey(
        kid or uuid.uuid4().hex[:12], rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"
    )


def ec_key(kid: str | None = None) -> SigningKey:
    return SigningKey(kid or uuid.uuid4().hex[:12], ec.generate_private_key(ec.SECP256R1()), "ES256")


@dataclass
class Issuer:
    """The authorization server as the resource server sees it: its URL, its published keys."""

    url: str = ""
    published: list[SigningKey] = field(default_factory=list)
    jwks_reads: int = 0
    active: dict[str, dict[str, Any]] = field(default_factory=dict)  # introspection: token -> answer
    down: bool = False  # every endpoint answers 503, as an issuer in an outage does

    def mint(
        self, key: SigningKey | None = None, *, now: float | None = None, lifetime: float = 600, **claims: Any
    ) -> str:
        key = key or self.published[0]
        now = time.time() if now is None else now
        body = {
            "iss": self.url,
            "aud": RESOURCE,
            "sub": "user-1",
            "email": "alice@example.com",
            "email_verified": True,
            "iat": int(now),
            "exp": int(now + lifetime),
            "scope": "fathom",
            **claims,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(
            body, key.private, algorithm=key.algorithm, headers={"kid": key.kid, "typ": "at+jwt"}
        )

    def app(self) -> Starlette:
        async def metadata(request: Request) -> JSONResponse:
            if self.down:
                return JSONResponse({"error": "temporarily_unavailable"}, status_code=503)
            return JSONResponse(
                {
                    "issuer": self.url,
                    "jwks_uri": f"{self.url}/jwks",
                    "introspection_endpoint": f"{self.url}/introspect",
                }
            )

        async def jwks(request: Request) -> JSONResponse:
            self.jwks_reads += 1
            if self.down:
                return JSONResponse({"error": "temporarily_unavailable"}, status_code=503)
            return JSONResponse({"keys": [k.jwk() for k in self.published]})

        async def introspect(request: Request) -> JSONResponse:
            expected = "Basic " + base64.b64encode(":".join(INTROSPECTION_CLIENT).encode()).decode()
            if request.headers.get("authorization") != expected:
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            form = await request.form()
            return JSONResponse(self.active.get(str(form.get("token")), {"active": False}))

        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", metadata),
                Route("/jwks", jwks),
                Route("/introspect", introspect, methods=["POST"]),
            ]
        )


def unsigned(claims: dict[str, Any], kid: str) -> str:
    """An `alg: none` token: a header and claims, no signature."""

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT', 'kid': kid})}.{part(claims)}."


@contextlib.asynccontextmanager
async def running_issuer(*keys: SigningKey) -> AsyncIterator[Issuer]:
    issuer = Issuer(published=list(keys) or [rsa_key()])
    async with serve_in_loop(issuer.app()) as url:
        issuer.url = url
        yield issuer


MAPPING = {
    "rules": [
        {"match": {"email": "alice@example.com"}, "projects": ["alpha"]},
        {"match": {"group": "indexers"}, "can_index": True},
    ]
}


@contextlib.asynccontextmanager
async def team_server(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    issuer: Issuer | str | None,
    *,
    static: bool = True,
    port: int | None = None,
) -> AsyncIterator[Operator]:
    """The full app with projects alpha and beta indexed; with `issuer` (its URL), OAuth on and
    `MAPPING` set through the admin API."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    (tmp / "allowed").mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("FATHOM_INDEX_ROOTS", str(tmp / "allowed"))
    monkeypatch.setenv("FATHOM_MCP_STATIC_TOKENS", "on" if static else "off")
    if issuer is not None:
        monkeypatch.setenv("FATHOM_OAUTH_ISSUER", issuer if isinstance(issuer, str) else issuer.url)
        monkeypatch.setenv("FATHOM_OAUTH_RESOURCE", f"{url}/mcp")
        monkeypatch.setenv("FATHOM_OAUTH_SCOPES", "fathom")
    else:
        monkeypatch.delenv("FATHOM_OAUTH_ISSUER", raising=False)
    app = build_operator_app(tmp / "data")
    async with serve_in_loop(app, port=port) as served:
        op = Operator(served, app, tmp / "data", tmp)
        async with op.client() as admin:
            for name in ("alpha", "beta"):
                root = make_project(tmp / "src" / name)
                job = (await admin.post("/admin/jobs", json={"path": str(root), "project": name})).json()
                assert (await op.wait_job(admin, job["id"]))["state"] == "done"
            if issuer is not None:
                r = await admin.put("/admin/oauth/mapping", json=MAPPING)
                assert r.status_code == 200, r.text
        yield op
