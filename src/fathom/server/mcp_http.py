"""The MCP tools at `/mcp` on the fathom server: the SDK's streamable HTTP transport behind the
admin bearer token, inside the server's own app and event loop.

It owns the ASGI endpoint and its lifecycle: a fresh session manager each time the server's
lifespan starts (the SDK's manager runs once per instance), requests refused with 503 while
none runs, and 401 without the admin token — the tools can index any folder on the server, so
they are an operator's, like every other route but `/health`.

It refuses to hold any tool logic (that is `mcp_tools.build_mcp_server`, over the server's own
`Fathom`, so MCP clients, the admin API and the sidecars share one registry, gate, budget and
router) and to open a second port or process for MCP.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

MCP_PATH = "/mcp"


class MCPEndpoint:
    """An ASGI app serving `server` (an `MCPServer`) at `MCP_PATH`; `running()` is the
    lifespan part, `authorized(request)` the admin check."""

    def __init__(self, server: Any, authorized: Any, *, host: str = "127.0.0.1"):
        self.server = server
        self.authorized = authorized
        self.host = host  # loopback turns on the SDK's DNS-rebinding protection
        self._manager: Any = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self.server.streamable_http_app(streamable_http_path=MCP_PATH, host=self.host)
        manager = self.server.session_manager
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if not self.authorized(request):
            response = JSONResponse(
                {"detail": "admin token missing or wrong: MCP clients send `Authorization: Bearer "
                           "<admin token>` (FATHOM_ADMIN_TOKEN)"},
                status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        if self._manager is None:
            await JSONResponse({"detail": "the MCP endpoint is not running (server starting or "
                                          "stopping); retry in a moment"}, status_code=503)(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)
