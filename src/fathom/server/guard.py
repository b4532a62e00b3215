"""Auth before bodies: the gate every HTTP request of the server passes before any part of the
app reads it.

This module owns two decisions, made on the request line and headers alone, before a byte of
the body is read:

- who may call this path: `Access.refusal`, the one check (the admin token everywhere; an MCP
  token (`server.tokens`) on `/mcp` and nowhere else; the admin or a scrape-only token for
  `/metrics`; this run's local token (`server.local`) on `/local/` and nowhere else; nothing for `/health`, the dashboard's static page and assets, `/.well-known/` and
  OAuth's default endpoints, which carry no data, nor for a forge's push to `/hooks/git/`,
  whose route checks the project's own signature before it acts);
- how much body the route takes: `BodyLimits`, one server-wide default (`FATHOM_MAX_BODY_BYTES`,
  1 MiB) and a tighter limit per route.

A refused request is answered at once (401, 403 or 503; 413 for a declared length over the
limit) and its body is never read: uvicorn discards whatever the client still sends. A body
without a declared length is counted as it streams in and cut off with 413 the moment it passes
the limit, never after it was read whole. So an unauthenticated client cannot make the server
hold its body, and an authenticated one cannot make it hold more than the route allows.

`/mcp` refusals speak to MCP clients (`mcp_unauthorized`): a 401 whose body is a JSON-RPC error
that says how to configure a token. Without OAuth its `WWW-Authenticate` is a plain RFC 6750
Bearer challenge with no `resource_metadata` (static bearer tokens only: no authorization server
is advertised, and the OAuth discovery documents answer 404). With OAuth (`server.oauth`,
`Access.oauth`) the challenge names the protected resource metadata and the scopes, a refused
access token gets `invalid_token` and why, and a valid one the mapping does not cover gets 403.
Who a token is, is decided once per request (`Access.identify`: the static tokens first, unless
`FATHOM_MCP_STATIC_TOKENS=off` takes them off `/mcp`, then an OAuth access token).

The request's principal (who its token is) is left in the ASGI scope (`PRINCIPAL`) for the parts
behind; every authenticated write to the admin API, and every refused attempt of an MCP token on
it, is written to the audit log (`server.audit`) with who, what and the outcome, never a body.
A wrong token (one no one holds) is written there too, as `unknown token` with the peer's
address, and its 401 waits longer with each wrong token the same peer sent lately
(`WrongTokenDelay`: 0.1 s doubling to 5 s). Refusals are written at a bounded rate.

It refuses to know what a route does. The routes keep their own token checks (a router mounted
without this gate still refuses a missing token); this decides only whether a request may be
read at all. WebSocket and lifespan traffic passes untouched (the hub checks its join tokens).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fathom.clock import Clock, SystemClock
from fathom.server.answers import (
    MAX_KEY_BODY,
    MAX_POLICY_BODY,
    bearer_token,
    no_token_configured,
    refusal,
    unauthorized,
)
from fathom.server.audit import AuditLog
from fathom.server.auth import AdminAuth, ScrapeAuth
from fathom.server.git_routes import HOOK_PREFIX
from fathom.server.tokens import McpTokens, Principal

if TYPE_CHECKING:
    from fathom.server.oauth.verifier import OAuthVerifier

log = logging.getLogger("fathom.server.guard")

KIB = 1024
DEFAULT_BODY_LIMIT = 1024 * KIB

# Paths anyone may GET: liveness and the dashboard's static page (it asks for the token), and
# /.well-known/ (404s that tell OAuth-discovering clients this server takes a static token).
PUBLIC_PATHS = frozenset({"/health", "/healthz", "/", "/favicon.ico"})
PUBLIC_PREFIXES = ("/dashboard/", "/.well-known/")
SCRAPE_PATHS = frozenset({"/metrics"})
# OAuth's default endpoints, which clients of an older MCP authorization revision try at the
# server's root when discovery finds nothing: answered 404 by `mcp_http.not_oauth` (no token
# needed) with the same advice, instead of an admin 401 the client would misread.
OAUTH_PATHS = frozenset({"/register", "/authorize", "/token"})
MCP_PATH = "/mcp"
ISSUER_RETRY_S = 30  # what a client is told to wait when the authorization server cannot be reached
LOCAL_PREFIX = "/local/"  # the same user's CLI (`server.local`): this run's local token or the admin's
PRINCIPAL = "fathom.principal"  # the ASGI scope key of a request's `Principal`
AUDIT_NOTE = "fathom.audit"  # a route's own words for what it did, for the audit log
REALM = "fathom"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class StaticToken:
    """One token given at start (`fathom serve` with FATHOM_MCP_TOKEN): the same `check` and
    `configured` as `AdminAuth`, held as a hash, never written anywhere."""

    def __init__(self, token: str):
        from fathom.fleet.auth import hash_token

        self._hash = hash_token(token)

    configured = True

    def check(self, token: str | None) -> bool:
        import hmac

        from fathom.fleet.auth import hash_token

        if not token:
            return False
        return hmac.compare_digest(hash_token(token), self._hash)


class McpRefusal(HTTPException):
    """A refusal on `/mcp`: its body is a JSON-RPC error, which MCP clients show as it is."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(status, message, headers=headers)
        self.content = {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}}


def mcp_unauthorized(
    token_sent: bool,
    url: str = "http://SERVER/mcp",
    *,
    oauth: Any = None,
    reason: str | None = None,
    static: bool = True,
) -> McpRefusal:
    """The 401 MCP clients get without a valid token: how to configure one, and no OAuth.

    RFC 6750: a request with no credentials gets the bare challenge (no error code); a wrong one
    gets `error="invalid_token"` with a description. No `resource_metadata`: this server is not
    an OAuth resource server (MCP authorization is optional; a server using static tokens does
    not advertise an authorization server), so a client has nothing to discover."""
    if oauth is not None:
        return oauth_unauthorized(oauth, token_sent, url, reason, static)
    how = (
        f"Configure your MCP client to send the header `Authorization: Bearer <token>` with a token the "
        f"server's operator gives you (`fathom tokens create --name YOU`), e.g. `claude mcp add --transport http "
        f'fathom {url} --header "Authorization: Bearer fm_..."`. This server uses static bearer tokens, not OAuth.'
    )
    if token_sent:
        message = f"The token sent to Fathom was refused: it is unknown, revoked or mistyped. {how}"
        challenge = (
            f'Bearer realm="{REALM}", error="invalid_token", error_description="the bearer token is '
            f'unknown, revoked or mistyped; ask the operator for an MCP token"'
        )
    else:
        message = f"Fathom needs a token. {how}"
        challenge = f'Bearer realm="{REALM}"'
    return McpRefusal(401, message, headers={"WWW-Authenticate": challenge})


def oauth_unauthorized(
    oauth: Any, token_sent: bool, url: str, reason: str | None, static: bool
) -> McpRefusal:
    """The 401 of a server that is an OAuth resource server (`server.oauth`): the challenge names
    its metadata (`resource_metadata`) and scopes, so an MCP client discovers the authorization
    server and signs the person in; a refused token gets `invalid_token` and why."""
    how = (
        f"Sign in with OAuth: your MCP client finds the authorization server ({oauth.issuer}) in "
        f"{oauth.resource.metadata_url}"
    )
    if static:
        how += " ; or send `Authorization: Bearer <token>` with a static token the operator gives you"
    if token_sent:
        why = reason or "it is unknown, revoked or mistyped"
        return McpRefusal(
            401,
            f"The token sent to Fathom was refused: {why}. {how}.",
            headers={"WWW-Authenticate": oauth.resource.challenge(error="invalid_token", description=why)},
        )
    return McpRefusal(
        401, f"Fathom needs a token. {how}.", headers={"WWW-Authenticate": oauth.resource.challenge()}
    )


def issuer_unreachable(oauth: Any) -> McpRefusal:
    """The token could not be checked: the authorization server's keys or introspection could
    not be read. 503 with Retry-After, not 401: the token may be good, and a 401 would send the
    client through sign-in again for nothing."""
    return McpRefusal(
        503,
        f"Fathom could not check the access token: the authorization server {oauth.issuer} "
        f"cannot be reached from this server. Try again in a minute; the operator finds the "
        f"cause in the server's log.",
        headers={"Retry-After": str(ISSUER_RETRY_S)},
    )


def oauth_forbidden(oauth: Any, exc: Exception) -> McpRefusal:
    """A valid access token that opens nothing: 403, with `insufficient_scope` (and the scopes)
    when scopes are missing, so a client can ask for them."""
    from fathom.server.oauth.errors import InsufficientScope

    headers = {}
    if isinstance(exc, InsufficientScope):
        headers["WWW-Authenticate"] = oauth.resource.challenge(
            error="insufficient_scope", description=str(exc)
        )
    return McpRefusal(403, str(exc), headers=headers)


@dataclass(frozen=True)
class Identified:
    """Who a request's token is (`principal`), or why an OAuth access token was refused (`refused`:
    a `server.oauth` error)."""

    principal: Principal | None = None
    refused: Exception | None = None


def mcp_only(principal: Principal, method: str, path: str) -> HTTPException:
    return refusal(
        403,
        f"{method} {path} needs the admin token; the MCP token {principal.name!r} opens {MCP_PATH} "
        f"and nothing else",
    )


def is_mcp_path(path: str) -> bool:
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


class Access:
    """Who may call which path. One function, `refusal`, decides; `principal` says who a token
    is. `open_mcp`: `/mcp` needs no token (one machine on loopback, nothing configured)."""

    def __init__(
        self,
        admin: AdminAuth | StaticToken | None,
        scrape: ScrapeAuth | None = None,
        mcp: McpTokens | None = None,
        *,
        open_mcp: bool = False,
        local: Any = None,
        oauth: OAuthVerifier | None = None,
        static_mcp: bool = True,
    ):
        self.admin = admin
        self.scrape = scrape
        self.mcp = mcp
        self.open_mcp = open_mcp
        self.local = local  # a `server.local.RunFile` once the server knows its address
        self.oauth = oauth  # people signed in by the operator's issuer
        self.static_mcp = (
            static_mcp  # False: `/mcp` takes OAuth access tokens only (no `fm_`, no admin token)
        )

    def principal(self, token: str | None) -> Principal | None:
        """The admin, an MCP token's principal, or None for a missing or unknown static token."""
        if self.admin is not None and self.admin.check(token):
            return Principal.operator()
        record = self.mcp.find(token) if self.mcp is not None and self.static_mcp else None
        return record.principal() if record is not None else None

    async def identify(self, token: str | None, path: str = MCP_PATH, *, oauth: bool = True) -> Identified:
        """Who `token` is on `path`: a static token's principal, else (OAuth configured, and
        `oauth`) the principal its access token maps to, or why that token was refused."""
        from fathom.server.oauth.errors import InsufficientScope, NotMapped, TokenRefused

        if not token:
            return Identified()
        found = self.principal(token)
        if found is not None and (self.static_mcp or not is_mcp_path(path)):
            return Identified(found)
        if self.oauth is None or not oauth:
            return Identified()
        try:
            return Identified(await self.oauth.authenticate(token))
        except (TokenRefused, InsufficientScope, NotMapped) as exc:
            return Identified(refused=exc)

    def mcp_principal(self, token: str | None, identified: Identified | None = None) -> Principal | None:
        """Who a request to `/mcp` acts as: its token's principal, or the local operator when
        `/mcp` is open; None: refuse it."""
        if identified is not None:
            found = identified.principal
        else:
            found = self.principal(token) if self.static_mcp else None
        if found is None and self.open_mcp:
            return Principal.operator("local")
        return found

    def mcp_refusal(self, token: str | None, url: str, identified: Identified | None = None) -> HTTPException:
        """The answer to a request `/mcp` does not admit."""
        from fathom.server.oauth.errors import IssuerUnreachable, TokenRefused

        refused = identified.refused if identified is not None else None
        if isinstance(refused, IssuerUnreachable):
            return issuer_unreachable(self.oauth)
        if refused is not None and not isinstance(refused, TokenRefused):
            return oauth_forbidden(self.oauth, refused)
        reason = refused.reason if isinstance(refused, TokenRefused) else None
        return mcp_unauthorized(bool(token), url, oauth=self.oauth, reason=reason, static=self.static_mcp)

    @staticmethod
    def open_path(method: str, path: str) -> bool:
        """Whether a request needs no token at all: a public page, OAuth's default endpoints
        (answered 404), a forge's webhook (the route checks the project's signature)."""
        return (
            (method in ("GET", "HEAD") and (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)))
            or (path in OAUTH_PATHS and method in ("GET", "POST"))
            or (method == "POST" and path.startswith(HOOK_PREFIX))
        )

    def refusal(
        self,
        method: str,
        path: str,
        token: str | None,
        *,
        url: str | None = None,
        identified: Identified | None = None,
    ) -> HTTPException | None:
        """None if the request may proceed; else the refusal to answer, unread. `identified`:
        who the token is (`identify`); without it, only static tokens are known."""
        if self.open_path(method, path):
            return None
        if path.startswith(LOCAL_PREFIX) and self.local is not None and self.local.check(token):
            return None
        if is_mcp_path(path):
            if self.mcp_principal(token, identified) is not None:
                return None
            return self.mcp_refusal(token, url or MCP_PATH, identified)
        principal = identified.principal if identified is not None else self.principal(token)
        if principal is not None and principal.admin:
            return None
        if path in SCRAPE_PATHS and self.scrape is not None and self.scrape.check(token):
            return None
        if principal is not None:
            return mcp_only(principal, method, path)
        configured = (self.admin is not None and self.admin.configured) or (
            path in SCRAPE_PATHS and self.scrape is not None and self.scrape.configured
        )
        return unauthorized() if configured else no_token_configured()


@dataclass(frozen=True)
class BodyLimits:
    """The most body bytes each route takes: `routes` by (method, path), then `prefixes` by
    (method, path prefix), then `bodyless` for methods that carry none, then `default`. A route's
    limit never exceeds the server-wide default."""

    default: int = DEFAULT_BODY_LIMIT
    routes: dict[tuple[str, str], int] = field(
        default_factory=lambda: {
            ("POST", "/admin/key"): MAX_KEY_BODY,
            ("PUT", "/admin/policies"): MAX_POLICY_BODY,
            ("PUT", "/admin/budget"): 1 * KIB,
            ("POST", "/admin/jobs"): 16 * KIB,
            ("POST", "/admin/fleet/tokens"): 1 * KIB,
            ("POST", "/admin/tokens"): 8 * KIB,
            **{("POST", path): 16 * KIB for path in OAUTH_PATHS},  # never read: answered 404
            ("POST", "/admin/fleet/probe"): 256 * KIB,
            ("POST", "/admin/gate/verify"): 4 * KIB,
        }
    )
    prefixes: tuple[tuple[str, str, int], ...] = (
        ("POST", "/admin/gate/reembed/", 4 * KIB),
        ("POST", "/admin/jobs/", 1 * KIB),  # pause, resume, cancel: no body
        ("POST", "/admin/fleet/", 1 * KIB),  # approve, revoke: no body
        ("POST", "/admin/tokens/", 1 * KIB),  # revoke: no body
    )
    bodyless: int = 1 * KIB  # GET, HEAD, DELETE: a few bytes of a client's habit, no more

    def of(self, method: str, path: str) -> int:
        limit = self.routes.get((method, path))
        if limit is None:
            limit = next(
                (n for m, prefix, n in self.prefixes if m == method and path.startswith(prefix)), None
            )
        if limit is None and method in ("GET", "HEAD", "DELETE"):
            limit = self.bodyless
        return min(limit if limit is not None else self.default, self.default)


class _BodyTooLarge(Exception):
    """Raised out of `receive` into the app once the 413 is sent; the gate swallows it."""


class RequestGuard:
    """ASGI middleware: `Access` then `BodyLimits`, before the app sees a request; then the
    audit log, once the app has answered an admin write."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        access: Access,
        limits: BodyLimits | None = None,
        audit: AuditLog | None = None,
        wrong_tokens: WrongTokenDelay | None = None,
    ):
        self.app = app
        self.access = access
        self.limits = limits or BodyLimits()
        self.audit = audit
        self.wrong_tokens = wrong_tokens or WrongTokenDelay()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)  # headers only: nothing here reads the body
        method, path = scope["method"], scope["path"]
        token = bearer_token(request)
        # An open path needs no principal: an OAuth token sent there is not validated (no key
        # fetch, no introspection call to the issuer on behalf of anyone who asks).
        identified = await self.access.identify(token, path, oauth=not self.access.open_path(method, path))
        denied = self.access.refusal(method, path, token, url=mcp_url(request), identified=identified)
        principal = identified.principal
        if denied is not None:
            refused_who = getattr(identified.refused, "who", None)  # signed in, but mapped to nothing
            if refused_who is not None:
                await self._audit(
                    f"oauth:{refused_who}",
                    method,
                    path,
                    scope,
                    f"refused 403: {_reason(denied)}",
                    refused="refused 403",
                )
            elif principal is not None and denied.status_code == 403:
                await self._audit(
                    principal.who,
                    method,
                    path,
                    scope,
                    f"refused 403: {_reason(denied)}",
                    refused="refused 403",
                )
            elif token is not None and principal is None and denied.status_code == 401:
                # A wrong token: audited, and answered later each time this peer sends another.
                peer = _peer(scope)
                delay = self.wrong_tokens.penalty(peer)
                why = getattr(identified.refused, "reason", "unknown token")
                await self._audit(
                    UNKNOWN_TOKEN,
                    method,
                    path,
                    scope,
                    f"refused 401: {why}, answered after {delay:g} s",
                    refused="refused 401",
                    peer=peer,
                )
                await self.wrong_tokens.clock.sleep(delay)
            await send_refusal(send, denied)
            return
        if principal is not None:
            scope[PRINCIPAL] = principal
        limit = self.limits.of(method, path)
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                await send_refusal(send, refusal(400, "Content-Length is not a number of bytes"))
                return
            if int(declared) > limit:
                await send_refusal(send, _too_large(method, path, limit))
                return
        status: dict[str, Any] = {}
        try:
            await self._app_within(limit, method, path, scope, receive, send, status)
        finally:
            if principal is not None and method in WRITE_METHODS and path.startswith("/admin/"):
                code = status.get("code")
                outcome = "ok" if code is not None and code < 400 else f"refused {code}" if code else "failed"
                await self._audit(principal.who, method, path, scope, outcome)

    async def _audit(
        self,
        who: str,
        method: str,
        path: str,
        scope: Scope,
        outcome: str,
        *,
        refused: str | None = None,
        peer: str | None = None,
    ) -> None:
        """One entry (`refused`: a refusal of that kind, written at a bounded rate). The query
        string is kept (it says what was asked); the log scrubs its secret-named values."""
        if self.audit is None:
            return
        query = scope.get("query_string", b"").decode("latin-1")
        what = f"{method} {path}" + (f"?{query}" if query else "") + (f" from {peer}" if peer else "")
        note = scope.get(AUDIT_NOTE)
        what += f": {note}" if note else ""
        try:
            if refused is not None:
                await asyncio.to_thread(self.audit.refused, who, what, outcome, refused)
            else:
                await asyncio.to_thread(self.audit.record, who, what, outcome)
        except OSError as exc:
            log.error("could not write the audit log %s: %s", self.audit.path, exc.strerror or exc)

    async def _app_within(
        self,
        limit: int,
        method: str,
        path: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        status: dict[str, Any],
    ) -> None:
        """Run the app, counting the body as it streams in; past `limit`, answer 413 at once."""
        state = {"read": 0, "started": False, "refused": False}

        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body", b""))
                if state["read"] > limit:
                    if not state["started"]:
                        state["refused"] = True
                        status["code"] = 413
                        await send_refusal(send, _too_large(method, path, limit))
                    raise _BodyTooLarge
            return message

        async def guarded(message: Message) -> None:
            if state["refused"]:
                return  # the 413 is the answer; whatever the app says after it is dropped
            if message["type"] == "http.response.start":
                state["started"] = True
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except _BodyTooLarge:
            if not state["refused"]:
                raise  # the app had already answered: end the connection


UNKNOWN_TOKEN = "unknown token"  # the audit log's `who` for a token no one holds


class WrongTokenDelay:
    """How long a wrong token waits for its 401: per presenting peer, `base_s` doubled with each
    wrong token it sent within `forget_s` of the previous one, at most `cap_s`. A right token
    does not reset it (a peer holding one token must not guess others at full speed). At most
    `max_peers` peers are remembered, the least recently wrong forgotten first. Time is the
    injected `clock`'s: its `now` for the window, its `sleep` for the wait."""

    def __init__(
        self,
        *,
        base_s: float = 0.1,
        cap_s: float = 5.0,
        forget_s: float = 300.0,
        max_peers: int = 4096,
        clock: Clock | None = None,
    ):
        self.base_s = base_s
        self.cap_s = cap_s
        self.forget_s = forget_s
        self.max_peers = max_peers
        self.clock = clock or SystemClock()
        self._peers: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def penalty(self, peer: str) -> float:
        """Count one wrong token from `peer`; the seconds its answer waits."""
        now = self.clock.now()
        count, last = self._peers.pop(peer, (0, now))
        count = 1 if now - last > self.forget_s else count + 1
        self._peers[peer] = (count, now)
        while len(self._peers) > self.max_peers:
            self._peers.popitem(last=False)
        return min(self.cap_s, self.base_s * 2.0 ** min(count - 1, 32))


def _peer(scope: Scope) -> str:
    """The client's address: the TCP peer's, or a named proxy's forwarded one (`server.connections`)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def mcp_url(request: Request) -> str:
    """The MCP URL as the client dialled it (for the configure-a-token line)."""
    host = request.headers.get("host") or "SERVER"
    scheme = request.headers.get("x-forwarded-proto") or request.url.scheme
    return f"{scheme}://{host}{MCP_PATH}"


def _reason(exc: HTTPException) -> str:
    detail = exc.detail
    return str(detail.get("message") if isinstance(detail, dict) else detail)


def _too_large(method: str, path: str, limit: int) -> HTTPException:
    return refusal(
        413,
        f"request body over the {_size(limit)} limit of {method} {path}",
        [f"{method} {path} takes at most {_size(limit)} of body; send less"],
    )


def _size(n: int) -> str:
    return (
        f"{n // KIB} KiB"
        if n % KIB == 0 and n < 1024 * KIB
        else (f"{n / (1024 * KIB):g} MiB" if n % KIB == 0 else f"{n} bytes")
    )


async def send_refusal(send: Send, exc: HTTPException) -> None:
    content = getattr(exc, "content", None)
    body = json.dumps(content if content is not None else {"detail": exc.detail}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    for k, v in (exc.headers or {}).items():
        headers.append((k.lower().encode("latin-1"), str(v).encode("latin-1")))
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
