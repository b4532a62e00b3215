"""Telling connected MCP clients that the tool list changed (`notifications/tools/list_changed`).

Some tools are listed only while something holds (`ask` and `explore` while a route can serve
their role: a sidecar joins, a provider is ejected, a policy changes). A client lists tools
once and keeps that list; without a notice it would never see `ask` appear.

What it owns: the last set of listed tool names, the check that compares it with the set
now, and the notice sent on a change — to clients on the 2026-07-28 protocol through the
server's subscription bus (they receive it on their `subscriptions/listen` stream), and to
clients of the earlier, handshake protocol on each live connection's own channel. It declares
`tools.listChanged: true` for the latter (the former is declared by the SDK wherever
`subscriptions/listen` is served). The check runs when the provider registry changes and after
every request, so a change that no registry event announces (a policy set on the server) is
told at the next request of any client.

What it refuses to do: decide which tools are listed (`ToolServer.only_when` does), or poll on
a timer of its own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import Any

from mcp.server import NotificationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged

log = logging.getLogger("fathom.server.mcp")

# Connections of handshake-era clients told of changes. A connection that closed drops the
# notice silently; the bound keeps a long-lived server from holding every connection it ever
# had (the oldest are forgotten first).
MAX_CONNECTIONS = 256


class ToolListing:
    """Middleware on a `ToolServer` (`fathom.server.mcp_tools`: its `listed_names` are what is
    compared) that tells clients when its tool list changes. `bus` is the `SubscriptionBus`
    the server was built with (`MCPServer(subscriptions=bus)`)."""

    def __init__(self, server: Any, bus: InMemorySubscriptionBus):
        self.server = server
        self.bus = bus
        self.names: frozenset[str] | None = None  # the set clients were last shown
        self._sessions: collections.deque[Any] = collections.deque(maxlen=MAX_CONNECTIONS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task[bool]] = set()
        self._lock = asyncio.Lock()

    def install(self) -> ToolListing:
        self.server.middleware.append(self)
        _declare_list_changed(self.server)
        return self

    def watch(self, registry: Any) -> ToolListing:
        """Check the list whenever `registry` (providers joining, leaving, ejected) changes;
        None: no registry to watch (checks follow requests only)."""
        if registry is not None:
            registry.subscribe(lambda _change: self.soon())
        return self

    def soon(self) -> None:
        """Schedule a check from any thread (a registry listener must not block)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return  # no client has connected yet: nobody to tell, and the baseline is unset
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._spawn()
        else:
            loop.call_soon_threadsafe(self._spawn)

    def _spawn(self) -> None:
        task = asyncio.get_running_loop().create_task(self.check())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self.names is None:
            self.names = self._listed()  # the list the first client can see
        if ctx.method == "notifications/initialized":  # once per handshake-era connection
            self._sessions.append(ctx.session)
        result = await call_next(ctx)
        if ctx.request_id is not None:
            await self.check()
        return result

    async def check(self) -> bool:
        """Tell every client if the listed tools changed since they were last told; True if so."""
        async with self._lock:
            now = self._listed()
            if self.names is None or now == self.names:
                self.names = now
                return False
            log.info("tool list changed: %s", ", ".join(sorted(now ^ self.names)))
            self.names = now
            await self.bus.publish(ToolsListChanged())
            for session in list(self._sessions):
                with contextlib.suppress(Exception):  # a connection that left is no failure
                    await session.send_tool_list_changed()
            return True

    def _listed(self) -> frozenset[str]:
        try:
            return frozenset(self.server.listed_names())  # the names alone, no schemas
        except Exception:  # a broken listing check must not fail the request it follows
            log.exception("could not list the tools")
            return self.names or frozenset()


def _declare_list_changed(server: Any) -> None:
    """Declare `tools.listChanged` to handshake-era clients. `MCPServer` builds their
    initialize answer with no `NotificationOptions` and offers no public way to pass one, so
    this wraps its low-level server's `create_initialization_options` (the SDK's one private
    attribute this module touches; without it the capability is merely undeclared)."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    build = getattr(lowlevel, "create_initialization_options", None)
    if lowlevel is None or build is None:
        log.warning("cannot declare tools.listChanged: this MCP SDK has no low-level server")
        return

    def with_list_changed(notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        return build(notification_options or NotificationOptions(tools_changed=True), *args, **kwargs)

    lowlevel.create_initialization_options = with_list_changed
