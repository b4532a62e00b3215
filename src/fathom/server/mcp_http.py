"""The MCP tools at `/mcp` over streamable HTTP: the SDK's transport behind a bearer token, with
each request's tools scoped to who sent it.

It owns:

- the ASGI endpoint and its lifecycle (`MCPEndpoint`): a fresh session manager each time the
  lifespan starts (the SDK's manager runs once per instance), 503 while none runs, the
  configure-a-token 401 (`guard.mcp_unauthorized`) without a valid token, and DNS-rebinding
  protection on whatever address it listens on (`transport_security`);
- where a request's identity meets the tools (`ToolAccess`, the SDK's server middleware): an
  MCP token sees only its projects — an explicit `project` argument outside them is refused, and
  the tool runs inside `scope.within(its projects)`, so "every project" means every project of
  the token and `list_projects` lists those (a project from git brings its branches' indexes,
  `NAME@BRANCH`, so a hit on a branch reads as any other); a tool that writes (not marked read-only) needs a
  token that may index, and `index_project` then only under the operator's `FATHOM_INDEX_ROOTS`;
  tools a token may not call are left out of its `tools/list`. The admin token is unrestricted.
  Writes by MCP tokens, done or refused, go to the audit log (refusals at a bounded rate). A
  session is bound to the token that opened it (`session_owner`): another token's request on it
  is answered as for an unknown session;
- `/.well-known/…` answers (`not_oauth`): 404 with the same advice, so an OAuth-discovering
  client finds no authorization server instead of a 401 it cannot use; with OAuth on, the
  protected resource metadata (`oauth_routes`) instead, and 404s that name the issuer;
- `standalone_app`: the same endpoint for `fathom serve` (one machine, no fleet server).

It refuses to hold any tool logic (that is `mcp_tools.build_mcp_server`, over the server's own
`Fathom`) and to edit tools one by one: scoping wraps every tool, present and future, by the
names of their arguments (`project`, `path`) and their read-only annotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from fathom import scope as project_scope
from fathom.config import is_loopback
from fathom.index.walker import under_roots
from fathom.server.answers import bearer_token
from fathom.server.auth import AdminAuth
from fathom.server.guard import MCP_PATH, PRINCIPAL, Access, mcp_url, send_refusal
from fathom.server.tokens import Principal

log = logging.getLogger("fathom.server.mcp")

# The tools that only read, for a tool without a read-only annotation. Any other tool is taken
# to write: a token needs `can_index` to call it (fail closed for tools added later).
READ_ONLY_TOOLS = frozenset(
    {"search_code", "search_docs", "find_similar", "list_projects", "index_status", "ask", "explore"}
)
INDEX_TOOL = "index_project"
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def transport_security(host: str, allowed_hosts: Sequence[str] = ()) -> Any:
    """DNS-rebinding protection for a server listening on `host`: the Host (and any Origin) header
    must name loopback, the listening address, this machine (its names and addresses, when it
    listens beyond loopback) or a name in `allowed_hosts` (FATHOM_ALLOWED_HOSTS: the name a
    reverse proxy passes on). Never off, whatever the address."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = ["127.0.0.1", "localhost", "[::1]"]
    if host not in WILDCARD_HOSTS:
        names.append(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    if not is_loopback(host):
        with contextlib.suppress(OSError):
            names += [socket.gethostname(), socket.getfqdn()]
            names += socket.gethostbyname_ex(socket.gethostname())[2]
    names += [h.strip() for h in allowed_hosts if h.strip()]
    unique = list(dict.fromkeys(names))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[x for n in unique for x in (n, f"{n}:*")],
        allowed_origins=[f"{s}://{n}{p}" for n in unique for s in ("http", "https") for p in ("", ":*")],
    )


def principal_of(ctx: Any) -> Principal | None:
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None)
    return scope.get(PRINCIPAL) if isinstance(scope, dict) else None


class ToolRefused(Exception):
    """Why a principal may not make this call; the message goes to the client as a tool error."""


class ToolAccess:
    """Every tool call and tool list of `server`, scoped to the request's principal. `install`
    puts it where the SDK resolves a call: around `server.call_tool`, which gets the request's
    context (a refusal raised there is the SDK's own tool error, shaped for the client's protocol
    version), and in the server's middleware for `tools/list`."""

    def __init__(
        self,
        server: Any,
        *,
        index_roots: Callable[[], list[Path]] = list,
        audit: Any = None,
        branches: Callable[[frozenset[str]], frozenset[str]] | None = None,
    ):
        self.server = server
        self.index_roots = index_roots
        self.audit = audit
        self.branches = branches

    def install(self) -> None:
        self.server.middleware.append(self)
        inner = self.server.call_tool

        async def call_tool(name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            return await self.call(inner, name, arguments, context)

        self.server.call_tool = call_tool

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        """Middleware: a token that may not write is not offered the tools that write, and a
        resource is read within the token's projects, as a tool call is."""
        if ctx.method == "resources/read":
            return await self.read(ctx, call_next)
        if ctx.method != "tools/list":
            return await call_next(ctx)
        result = await call_next(ctx)
        principal = principal_of(ctx)
        if principal is not None and (principal.admin or principal.can_index):
            return result
        return _without(result, await self._writers())

    async def read(self, ctx: Any, call_next: Any) -> Any:
        """`resources/read` (a `fathom://` file), within the principal's projects: the scoped
        store answers "no such project" for any other, whatever the URI names."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import INVALID_REQUEST

        principal = principal_of(ctx)
        if principal is None:  # no request identity: never read blind
            raise MCPError(
                code=INVALID_REQUEST,
                message="this request carries no identity; send it to /mcp with a bearer token",
            )
        if principal.admin:
            return await call_next(ctx)
        principal = await self.seen(principal)
        with project_scope.within(principal.projects):
            return await call_next(ctx)

    async def call(self, inner: Any, name: str, arguments: dict[str, Any], context: Any) -> Any:
        from mcp.server.mcpserver.exceptions import ToolError

        principal = principal_of(getattr(context, "request_context", None))
        if principal is None:  # no request identity: never serve a tool blind
            raise ToolError("this call carries no identity; send it to /mcp with a bearer token")
        if principal.admin:
            return await inner(name, arguments, context)
        arguments = arguments if isinstance(arguments, dict) else {}
        principal = await self.seen(principal)
        writes = name in await self._writers()
        try:
            self.check(principal, name, arguments, writes)
        except ToolRefused as exc:
            if writes:
                await self._audit(principal, name, arguments, f"refused: {exc}")
            raise ToolError(str(exc)) from None
        outcome = "failed"
        try:
            with project_scope.within(principal.projects):
                result = await inner(name, arguments, context)
            outcome = "failed" if getattr(result, "is_error", False) else "ok"
            return result
        finally:
            if writes:
                await self._audit(principal, name, arguments, outcome)

    async def seen(self, principal: Principal) -> Principal:
        """`principal` with the branch indexes of its projects from git (`NAME@BRANCH`, read at
        each request: a branch tracked later is seen at once, an untracked one no more)."""
        if principal.projects is None or self.branches is None:
            return principal
        more = await asyncio.to_thread(self.branches, principal.projects)
        return dataclasses.replace(principal, projects=principal.projects | more) if more else principal

    async def _writers(self) -> set[str]:
        tools = await self.server.list_tools()
        return {t.name for t in tools if not _reads_only(t)}

    def check(self, principal: Principal, tool: str, arguments: dict[str, Any], writes: bool) -> None:
        """Raise `ToolRefused` unless `principal` may call `tool` with `arguments`."""
        project = arguments.get("project")
        if project is not None and not principal.sees(str(project)):
            raise ToolRefused(
                f"project {project!r} is not one this token may see; its projects: "
                f"{principal.describe_projects()}. The operator can create a token that sees it "
                f"(`fathom tokens create --name NAME --project {project}`)"
            )
        if not writes:
            return
        if not principal.can_index:
            raise ToolRefused(
                f"{tool} changes the index, and the token {principal.name!r} is read-only; the "
                f"operator can create one that may index (`fathom tokens create --name NAME "
                f"--can-index`)"
            )
        if tool == INDEX_TOOL:
            self._check_root(principal, arguments)

    def _check_root(self, principal: Principal, arguments: dict[str, Any]) -> None:
        roots = self.index_roots()
        path = arguments.get("path")
        if not roots:
            raise ToolRefused(
                "this server allows no folder to be indexed over MCP: the operator lists the allowed "
                "folders in FATHOM_INDEX_ROOTS (e.g. FATHOM_INDEX_ROOTS=/srv/src)"
            )
        named = ", ".join(str(r) for r in roots)
        if not isinstance(path, str) or not path.strip():
            raise ToolRefused(f"index_project needs the path of a folder under the allowed roots ({named})")
        try:
            resolved = Path(os.path.realpath(Path(path).expanduser()))
        except (OSError, RuntimeError, ValueError):
            resolved = None
        if resolved is None or not under_roots(resolved, roots):
            raise ToolRefused(
                f"{path} is outside the folders this server allows to be indexed over MCP; the "
                f"allowed roots are {named}"
            )
        if arguments.get("project") is None and not principal.sees(resolved.name):
            raise ToolRefused(
                f"index_project would name the project {resolved.name!r} after the folder, which is not "
                f"one this token may see ({principal.describe_projects()}); pass project=NAME"
            )

    async def _audit(self, principal: Principal, tool: str, arguments: dict[str, Any], outcome: str) -> None:
        if self.audit is None:
            return
        shown = ", ".join(
            f"{k}={arguments[k]!r}" for k in ("path", "project", "full", "job") if k in arguments
        )
        what = f"MCP {tool}({shown})"
        try:
            if outcome.startswith("refused"):
                await asyncio.to_thread(self.audit.refused, principal.who, what, outcome, f"refused {tool}")
            else:
                await asyncio.to_thread(self.audit.record, principal.who, what, outcome)
        except OSError as exc:
            log.error("could not write the audit log: %s", exc.strerror or exc)


def _reads_only(tool: Any) -> bool:
    annotations = getattr(tool, "annotations", None)
    hint = getattr(annotations, "read_only_hint", None) if annotations is not None else None
    return bool(hint) if hint is not None else tool.name in READ_ONLY_TOOLS


def _without(listed: Any, names: set[str]) -> Any:
    """A `tools/list` result (the wire dict, or the model) without the tools `names`."""
    if isinstance(listed, dict):
        return {**listed, "tools": [t for t in listed.get("tools", []) if t.get("name") not in names]}
    if hasattr(listed, "tools"):
        return listed.model_copy(update={"tools": [t for t in listed.tools if t.name not in names]})
    return listed


class MCPEndpoint:
    """An ASGI app serving `server` (an `MCPServer`) at `MCP_PATH` to whoever `access` admits;
    `running()` is the lifespan part."""

    def __init__(
        self,
        server: Any,
        access: Access,
        *,
        host: str = "127.0.0.1",
        allowed_hosts: Sequence[str] = (),
        index_roots: Callable[[], list[Path]] = list,
        audit: Any = None,
        branches: Callable[[frozenset[str]], frozenset[str]] | None = None,
    ):
        self.server = server
        self.access = access
        self.security = transport_security(host, allowed_hosts)
        self._manager: Any = None
        if not any(isinstance(m, ToolAccess) for m in server.middleware):
            ToolAccess(server, index_roots=index_roots, audit=audit, branches=branches).install()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self.server.streamable_http_app(streamable_http_path=MCP_PATH, transport_security=self.security)
        manager = self.server.session_manager
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        token = bearer_token(request)
        principal = scope.get(PRINCIPAL)  # the request guard's finding, when it stands in front
        if principal is None:
            identified = await self.access.identify(token, MCP_PATH)
            principal = self.access.mcp_principal(token, identified)
            if principal is None:
                await send_refusal(send, self.access.mcp_refusal(token, mcp_url(request), identified))
                return
        scope[PRINCIPAL] = principal
        scope["user"] = session_owner(principal, token)
        if self._manager is None:
            await JSONResponse(
                {
                    "detail": "the MCP endpoint is not running (server starting or "
                    "stopping); retry in a moment"
                },
                status_code=503,
            )(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)


def session_owner(principal: Principal, token: str | None) -> Any:
    """Who owns the MCP sessions a request opens, as the SDK's session manager compares it: the
    token itself (by its hash), so a session answers only the token that opened it, and any
    other token, read-only or admin, gets the SDK's 404 "Session not found" as for an unknown
    session (it can neither use nor DELETE it)."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    from fathom.fleet.auth import hash_token

    owner = f"{principal.who}#{hash_token(token)}" if token else principal.who
    return AuthenticatedUser(AccessToken(token=owner, client_id=owner, scopes=[]))


def oauth_routes(oauth: Any) -> list[Any]:
    """With OAuth (`server.oauth`): the protected resource metadata (RFC 9728) at its
    well-known paths, before the 404s of `not_oauth_routes`."""
    from starlette.routing import Route

    if oauth is None:
        return []

    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(oauth.resource.metadata(), headers={"Cache-Control": "max-age=300"})

    return [Route(path, metadata, methods=["GET"]) for path in oauth.resource.metadata_paths()]


async def not_oauth(request: Request) -> JSONResponse:
    """`/.well-known/*` and OAuth's default endpoints (`/register`, `/authorize`, `/token`):
    nothing here. OAuth discovery finds no authorization server, and a client that falls back
    to registering anyway is told, in OAuth's own error shape, what to configure instead."""
    return JSONResponse(
        status_code=404,
        content={
            "error": "not_found",
            "error_description": "This Fathom server uses static bearer tokens, not OAuth: there is no authorization "
            "server to discover. Send `Authorization: Bearer <token>` with a token the operator "
            "gives you (`fathom tokens create --name YOU`).",
        },
    )


def not_oauth_routes(oauth: Any = None) -> list[Any]:
    """The 404s of `/.well-known/*` and OAuth's default endpoints; with OAuth, the metadata
    routes first, and the 404s name the authorization server instead."""
    from starlette.routing import Route

    from fathom.server.guard import OAUTH_PATHS

    answer = not_oauth
    if oauth is not None:

        async def elsewhere(request: Request) -> JSONResponse:
            return JSONResponse(
                status_code=404,
                content={
                    "error": "not_found",
                    "error_description": f"This Fathom server is an OAuth protected resource, not an authorization "
                    f"server: its authorization server is {oauth.issuer}, as "
                    f"{oauth.resource.metadata_url} says.",
                },
            )

        answer = elsewhere
    return [
        *oauth_routes(oauth),
        Route("/.well-known/{rest:path}", answer, methods=["GET"]),
        *(Route(path, answer, methods=["GET", "POST"]) for path in sorted(OAUTH_PATHS)),
    ]


class ServeToken(AdminAuth):
    """`fathom serve`'s own token when none is given at start: issued at its first start in a
    data dir and shown once, kept only as a hash in `serve_token.json` (the admin token's
    record, with an MCP token's `fm_` prefix)."""

    FILENAME = "serve_token.json"
    PREFIX = "fm"


def standalone_app(
    server: Any,
    *,
    token: str | None = None,
    auth: Any = None,
    host: str,
    allowed_hosts: Sequence[str] = (),
    on_start: Callable[[], Awaitable[Any]] | None = None,
    local: Any = None,
    routes: Sequence[Any] = (),
) -> ASGIApp:
    """`fathom serve`: the MCP tools at `/mcp` on their own, behind `token` (or `auth`: a record
    of tokens' hashes, `ServeToken`); neither: open, which the command allows on
    loopback only, under `--no-auth`. The same 401, DNS-rebinding protection and body limits as
    the fleet server. `on_start` runs once the app starts (the live sync). `local` (a
    `server.local.RunFile`) opens `routes` (its `/local/` routes) to the same user's CLI."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    from fathom.server.guard import BodyLimits, RequestGuard, StaticToken

    if auth is None and token:
        auth = StaticToken(token)
    access = Access(auth, open_mcp=auth is None, local=local)
    endpoint = MCPEndpoint(server, access, host=host, allowed_hosts=allowed_hosts)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        if on_start is not None:
            await on_start()
        async with endpoint.running():
            yield

    app = Starlette(
        routes=[Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"]), *not_oauth_routes(), *routes],
        lifespan=lifespan,
    )
    return RequestGuard(app, access=access, limits=BodyLimits())
