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
  is answered 503 and closed as soon as it is accepted, before anything is read from it.

Forwarded addresses: uvicorn believes `X-Forwarded-For` from 127.0.0.1 unless told otherwise,
so any local process (or a same-host proxy passing the header through) could choose the client
address the server sees. Here no forwarded header is believed unless the operator names the
proxy (`--forwarded-allow-ips`, FATHOM_FORWARDED_ALLOW_IPS): the address a request comes from is
its TCP peer's.

It refuses to know what a request is for; `server.guard` decides that once the head is in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 1000


def _plain(status: str, text: str, *extra: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written before h11 has a request."""
    body = (text + "\n").encode()
    head = [f"HTTP/1.1 {status}", "content-type: text/plain; charset=utf-8", f"content-length: {len(body)}",
            "connection: close", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


_TIMED_OUT = _plain("408 Request Timeout", "the request head was not received in time")
_FULL = _plain("503 Service Unavailable", "the server holds too many connections now; retry shortly", "retry-after: 1")


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a request head may take, and how many connections may be open at once."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    @classmethod
    def of(cls, settings: Any) -> ConnectionLimits:
        return cls(header_timeout_s=settings.header_timeout_s, max_connections=settings.max_connections)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout and a connection cap (`limits`, set on a
    subclass by `bounded_protocol`)."""

    limits = ConnectionLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn passes a Transport
        self._head_timer: asyncio.TimerHandle | None = None
        # Counted before this one joins: WebSocket connections are in the same set.
        if len(self.server_state.connections) >= self.limits.max_connections:
            self.transport = transport
            transport.write(_FULL)
            transport.close()
            return
        super().connection_made(transport)
        self._await_head()

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


def bounded_protocol(limits: ConnectionLimits) -> type[BoundedH11Protocol]:
    """The protocol class uvicorn builds each connection with, bound to `limits`."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"limits": limits})


def forwarded_ips(raw: str | None) -> list[str]:
    """The proxies whose forwarded headers are believed, from a comma-separated list."""
    return [p.strip() for p in (raw or "").split(",") if p.strip()]


def uvicorn_config(app: Any, *, host: str, port: int, limits: ConnectionLimits | None = None,
                   forwarded_allow_ips: str | None = None, **options: Any) -> Any:
    """A `uvicorn.Config` for `app` with the bounds above: the header timeout and connection cap
    of `limits`, and forwarded headers believed only from `forwarded_allow_ips`."""
    import uvicorn

    trusted = forwarded_ips(forwarded_allow_ips)
    return uvicorn.Config(app, host=host, port=port, http=bounded_protocol(limits or ConnectionLimits()),
                          proxy_headers=bool(trusted), forwarded_allow_ips=trusted or [], **options)
