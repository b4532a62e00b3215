"""The server's HTTP connections: how long a client may take to send a request's head, how many
connections the server holds at once, and whose forwarded address it believes.

uvicorn bounds an idle keep-alive connection (`timeout_keep_alive`) but not a connection that
opened and then sends its request head slowly, or never: each such connection is held until the
client goes away. No ASGI layer can help, since the app is only called once the head is parsed.
So the bound lives in the HTTP protocol itself (`BoundedH11Protocol`, uvicorn's h11 protocol with
two additions):

- a header timeout: from the moment the server waits for a request's head (the connection is
  made, or the previous response is complete), the whole head must arrive within
  `header_timeout_s` (FATHOM_HEADER_TIMEOUT_S); otherwise the connection is answered 408 and
  closed. Bytes trickling in do not extend it;
- a connection cap: a connection beyond `max_connections` (FATHOM_MAX_CONNECTIONS) open at once
  is answered 503 and closed as soon as it is accepted, before anything is read from it;
- a cap per peer: a connection from an address that already holds `max_per_peer`
  (FATHOM_MAX_CONNECTIONS_PER_PEER) is answered 503 and closed the same way, so one client's
  slow sockets cannot take every slot and lock the others out until the header timeout. The
  count is taken from uvicorn's own set of open connections (WebSockets included) at each
  accept, not kept beside it: a connection upgraded to a WebSocket leaves through another
  protocol object, which a counter of ours would miss. An IPv6 peer counts by its /64 (one host
  usually holds the whole of it); each loopback address counts on its own, as any other; a proxy
  named in `forwarded_allow_ips` counts only against the total, since every client behind it
  shares its address.

Forwarded addresses: uvicorn believes `X-Forwarded-For` from 127.0.0.1 unless told otherwise,
so any local process (or a same-host proxy passing the header through) could choose the client
address the server sees. Here no forwarded header is believed unless the operator names the
proxy (`--forwarded-allow-ips`, FATHOM_FORWARDED_ALLOW_IPS): the address a request comes from is
its TCP peer's.

The listening socket is bound here too (`listen`), before anything else of a start runs: by
`fathom server`, `fathom serve` and the background Fathom, which takes it without loading the
command line.

It refuses to know what a request is for; `server.guard` decides that once the head is in.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr

log = logging.getLogger(__name__)

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 1000
# Generous for one machine's own use (a local MCP host's several sessions, a dashboard, the
# CLI, all from 127.0.0.1), an eighth of the total: no one address takes every slot.
DEFAULT_MAX_CONNECTIONS_PER_PEER = 128
PEER_WARNING_INTERVAL_S = 60.0  # a refused peer is logged at most this often, not per socket


def _plain(status: str, text: str, *extra: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written before h11 has a request."""
    body = (text + "\n").encode()
    head = [
        f"HTTP/1.1 {status}",
        "content-type: text/plain; charset=utf-8",
        f"content-length: {len(body)}",
        "connection: close",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


_TIMED_OUT = _plain("408 Request Timeout", "the request head was not received in time")
_FULL = _plain(
    "503 Service Unavailable", "the server holds too many connections now; retry shortly", "retry-after: 1"
)
_PEER_FULL = _plain(
    "503 Service Unavailable",
    "this address holds too many connections to the server; close some and retry",
    "retry-after: 1",
)


def peer_of(host: str | None) -> str | None:
    """The peer a connection from `host` counts against: the address itself, an IPv6 one's /64
    (an IPv4-mapped one as the IPv4 address it is); None for no address (a Unix socket)."""
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        if not address.is_loopback:
            return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def trusted(host: str, proxies: Iterable[str]) -> bool:
    """Whether `host` is one of `proxies` (addresses, networks, or `*`)."""
    for proxy in proxies:
        if proxy in ("*", host):
            return True
        try:
            if ipaddress.ip_address(host) in ipaddress.ip_network(proxy, strict=False):
                return True
        except ValueError:
            continue
    return False


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a request head may take, how many connections may be open at once, and how many
    of them one peer may hold (`proxies`: the addresses held only to the total)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER
    proxies: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Any) -> ConnectionLimits:
        return cls(
            header_timeout_s=settings.header_timeout_s,
            max_connections=settings.max_connections,
            max_per_peer=settings.max_connections_per_peer,
        )


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout, a connection cap and a cap per peer
    (`limits`, set on a subclass by `bounded_protocol`)."""

    limits = ConnectionLimits()
    warned: dict[str, float] = {}  # peer -> when its refusal was last logged (`bounded_protocol`: per server)
    peer: str | None = None  # what this connection counts against, once taken in

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn passes a Transport
        self._head_timer: asyncio.TimerHandle | None = None
        refusal = self._refusal(transport)
        if refusal is not None:
            self.transport = transport
            transport.write(refusal)
            transport.close()
            return
        super().connection_made(transport)
        self._await_head()

    def _refusal(self, transport: asyncio.Transport) -> bytes | None:
        """The answer that refuses this connection, or None to take it in. Counted before this
        one joins: WebSocket connections are in the same set."""
        connections = self.server_state.connections
        if len(connections) >= self.limits.max_connections:
            return _FULL
        address = get_remote_addr(transport)
        peer = peer_of(address[0]) if address else None
        if address is None or peer is None or trusted(address[0], self.limits.proxies):
            return None
        held = sum(1 for other in connections if _peer_of_connection(other) == peer)
        if held < self.limits.max_per_peer:
            self.peer = peer
            return None
        now = self.loop.time()
        if now - self.warned.get(peer, -PEER_WARNING_INTERVAL_S) >= PEER_WARNING_INTERVAL_S:
            self.warned[peer] = now
            if len(self.warned) > 1024:  # bounded, whatever the number of peers refused
                self.warned.pop(next(iter(self.warned)))
            log.warning(
                "refusing connections from %s: it holds %d already (FATHOM_MAX_CONNECTIONS_PER_PEER); "
                "a reverse proxy in front of the server belongs in FATHOM_FORWARDED_ALLOW_IPS",
                peer,
                held,
            )
        return _PEER_FULL

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()  # the next request's head is held to the same bound

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        if self.flow is None:  # refused at the cap: uvicorn never took it in
            return
        super().connection_lost(exc)

    def _await_head(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _head_arrived(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(_TIMED_OUT)
        self.transport.close()


def _peer_of_connection(connection: Any) -> str | None:
    """The peer an open connection counts against: kept on ours when taken in (an accept reads
    every open one), worked out for the others (a WebSocket, once upgraded)."""
    if isinstance(connection, BoundedH11Protocol) and connection.peer is not None:
        return connection.peer
    client = getattr(connection, "client", None)
    return peer_of(client[0]) if client else None


def bounded_protocol(limits: ConnectionLimits) -> type[BoundedH11Protocol]:
    """The protocol class uvicorn builds each connection with, bound to `limits`."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"limits": limits, "warned": {}})


def forwarded_ips(raw: str | None) -> list[str]:
    """The proxies whose forwarded headers are believed, from a comma-separated list."""
    return [p.strip() for p in (raw or "").split(",") if p.strip()]


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    limits: ConnectionLimits | None = None,
    forwarded_allow_ips: str | None = None,
    **options: Any,
) -> Any:
    """A `uvicorn.Config` for `app` with the bounds above: the header timeout and connection caps
    of `limits`, and forwarded headers believed only from `forwarded_allow_ips` (held, too, only
    to the total cap)."""
    import uvicorn

    proxies = forwarded_ips(forwarded_allow_ips)
    bounds = replace(limits or ConnectionLimits(), proxies=tuple(proxies))
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=bounded_protocol(bounds),
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or [],
        **options,
    )


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) and listening, as uvicorn would make it; OSError if the
    address is taken or not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
