"""Auth before bodies: the gate every HTTP request of the server passes before any part of the
app reads it.

This module owns two decisions, made on the request line and headers alone, before a byte of
the body is read:

- who may call this path: `Access.refusal`, the one check (the admin token everywhere; the
  admin or a scrape-only token for `/metrics`; nothing for `/health` and the dashboard's static
  page and assets, which carry no data);
- how much body the route takes: `BodyLimits`, one server-wide default (`FATHOM_MAX_BODY_BYTES`,
  1 MiB) and a tighter limit per route.

A refused request is answered at once (401 or 503; 413 for a declared length over the limit)
and its body is never read: uvicorn discards whatever the client still sends. A body without a
declared length is counted as it streams in and cut off with 413 the moment it passes the
limit, never after it was read whole. So an unauthenticated client cannot make the server hold
its body, and an authenticated one cannot make it hold more than the route allows.

It refuses to know what a route does. The routes keep their own token checks (a router mounted
without this gate still refuses a missing token); this decides only whether a request may be
read at all. WebSocket and lifespan traffic passes untouched (the hub checks its join tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fastapi import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fathom.server.admin import (
    MAX_KEY_BODY, MAX_POLICY_BODY, AdminAuth, ScrapeAuth, bearer_token, no_token_configured, refusal, unauthorized,
)

KIB = 1024
DEFAULT_BODY_LIMIT = 1024 * KIB

# Paths anyone may GET: liveness and the dashboard's static page (it asks for the token).
PUBLIC_PATHS = frozenset({"/health", "/healthz", "/"})
PUBLIC_PREFIXES = ("/dashboard/",)
SCRAPE_PATHS = frozenset({"/metrics"})


class Access:
    """Who may call which path. One function, `refusal`, so a later kind of token (scoped MCP
    tokens, say) is added in one place."""

    def __init__(self, admin: AdminAuth, scrape: ScrapeAuth | None = None):
        self.admin = admin
        self.scrape = scrape

    def refusal(self, method: str, path: str, token: str | None) -> HTTPException | None:
        """None if the request may proceed; else the refusal to answer, unread."""
        if method in ("GET", "HEAD") and (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)):
            return None
        if self.admin.check(token):
            return None
        if path in SCRAPE_PATHS and self.scrape is not None and self.scrape.check(token):
            return None
        configured = self.admin.configured or (path in SCRAPE_PATHS and self.scrape is not None
                                               and self.scrape.configured)
        return unauthorized() if configured else no_token_configured()


@dataclass(frozen=True)
class BodyLimits:
    """The most body bytes each route takes: `routes` by (method, path), then `prefixes` by
    (method, path prefix), then `bodyless` for methods that carry none, then `default`. A route's
    limit never exceeds the server-wide default."""

    default: int = DEFAULT_BODY_LIMIT
    routes: dict[tuple[str, str], int] = field(default_factory=lambda: {
        ("POST", "/admin/key"): MAX_KEY_BODY,
        ("PUT", "/admin/policies"): MAX_POLICY_BODY,
        ("PUT", "/admin/budget"): 1 * KIB,
        ("POST", "/admin/jobs"): 16 * KIB,
        ("POST", "/admin/fleet/tokens"): 1 * KIB,
        ("POST", "/admin/fleet/probe"): 256 * KIB,
        ("POST", "/admin/gate/verify"): 4 * KIB,
    })
    prefixes: tuple[tuple[str, str, int], ...] = (
        ("POST", "/admin/gate/reembed/", 4 * KIB),
        ("POST", "/admin/jobs/", 1 * KIB),  # pause, resume, cancel: no body
        ("POST", "/admin/fleet/", 1 * KIB),  # approve, revoke: no body
    )
    bodyless: int = 1 * KIB  # GET, HEAD, DELETE: a few bytes of a client's habit, no more

    def of(self, method: str, path: str) -> int:
        limit = self.routes.get((method, path))
        if limit is None:
            limit = next((n for m, prefix, n in self.prefixes if m == method and path.startswith(prefix)), None)
        if limit is None and method in ("GET", "HEAD", "DELETE"):
            limit = self.bodyless
        return min(limit if limit is not None else self.default, self.default)


class _BodyTooLarge(Exception):
    """Raised out of `receive` into the app once the 413 is sent; the gate swallows it."""


class RequestGuard:
    """ASGI middleware: `Access` then `BodyLimits`, before the app sees a request."""

    def __init__(self, app: ASGIApp, *, access: Access, limits: BodyLimits | None = None):
        self.app = app
        self.access = access
        self.limits = limits or BodyLimits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)  # headers only: nothing here reads the body
        method, path = scope["method"], scope["path"]
        denied = self.access.refusal(method, path, bearer_token(request))
        if denied is not None:
            await _answer(send, denied)
            return
        limit = self.limits.of(method, path)
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                await _answer(send, refusal(400, "Content-Length is not a number of bytes"))
                return
            if int(declared) > limit:
                await _answer(send, _too_large(method, path, limit))
                return
        await self._app_within(limit, method, path, scope, receive, send)

    async def _app_within(self, limit: int, method: str, path: str, scope: Scope, receive: Receive,
                          send: Send) -> None:
        """Run the app, counting the body as it streams in; past `limit`, answer 413 at once."""
        state = {"read": 0, "started": False, "refused": False}

        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body", b""))
                if state["read"] > limit:
                    if not state["started"]:
                        state["refused"] = True
                        await _answer(send, _too_large(method, path, limit))
                    raise _BodyTooLarge
            return message

        async def guarded(message: Message) -> None:
            if state["refused"]:
                return  # the 413 is the answer; whatever the app says after it is dropped
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except _BodyTooLarge:
            if not state["refused"]:
                raise  # the app had already answered: end the connection


def _too_large(method: str, path: str, limit: int) -> HTTPException:
    return refusal(413, f"request body over the {_size(limit)} limit of {method} {path}",
                   [f"{method} {path} takes at most {_size(limit)} of body; send less"])


def _size(n: int) -> str:
    return f"{n // KIB} KiB" if n % KIB == 0 and n < 1024 * KIB else (
        f"{n / (1024 * KIB):g} MiB" if n % KIB == 0 else f"{n} bytes")


async def _answer(send: Send, exc: HTTPException) -> None:
    body = json.dumps({"detail": exc.detail}).encode()
    headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode())]
    for k, v in (exc.headers or {}).items():
        headers.append((k.lower().encode("latin-1"), str(v).encode("latin-1")))
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


