"""One sidecar's live connection to the hub, and the words spoken on any connection.

This module owns the `Link` (what the hub knows of one connected sidecar: its routes, health,
pending commands and acks), the close codes, how a WebSocket message becomes a frame (its size
checked before any of it is parsed), and the polite refusal (an error frame, then a close).

It refuses to decide anything: who is admitted, approved or dropped is the hub's.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import WebSocket

from fathom.fleet import protocol as p
from fathom.fleet.auth import Admission
from fathom.fleet.remote import SidecarProvider, SidecarUnavailable

# Close codes (4000-4999 are application codes).
CLOSE_UNAUTHORIZED = 4401
CLOSE_REVOKED = 4403
CLOSE_STALE = 4408
CLOSE_NAME_IN_USE = 4409
CLOSE_TOO_MANY_FAILURES = 4429  # an address that keeps failing to join: the sidecar retries later
CLOSE_POLICY = 1008
CLOSE_TRY_LATER = 1013  # too many sidecars already wait for approval: the sidecar retries later
CLOSE_TOO_BIG = 1009  # the transport's close code for a message over its bound


def new_id() -> str:
    return uuid.uuid4().hex


class Link:
    """One live connection of one sidecar."""

    def __init__(
        self, ws: WebSocket, reg: p.Register, admission: Admission, now: float, credential_hash: str
    ):
        self.ws = ws
        self.name = reg.name
        self.credential_hash = (
            credential_hash  # what the sidecar's approval is bound to; never the credential
        )
        self.claimed = admission is Admission.CLAIMED  # an approved name, another host's credential
        self.routes = list(reg.routes)
        self.cloud_capable = reg.cloud
        self.key_present = reg.key_present
        self.versions = dict(reg.versions)
        self.state = "approved" if admission is Admission.APPROVED else "pending"
        self.connected_at = now
        self.last_seen = now
        self.load = 0.0
        self.in_flight = 0
        self.pending: dict[str, asyncio.Future[p.Result]] = {}  # command id -> result future
        self.acks: dict[str, asyncio.Future[p.Ack]] = {}  # config id -> ack future
        self.providers: dict[str, SidecarProvider] = {}
        self.closed = False
        self.bad_frames = 0
        self._send_lock = asyncio.Lock()

    @property
    def approved(self) -> bool:
        return self.state == "approved" and not self.closed

    async def send(self, text: str) -> None:
        if self.closed:
            raise SidecarUnavailable(self.name, "is not connected")
        try:
            async with self._send_lock:
                await self.ws.send_text(text)
        except Exception:  # any transport failure means the same thing here
            raise SidecarUnavailable(self.name, "connection lost while sending") from None

    def fail_all(self, reason: str) -> None:
        """Fail every pending command and ack at once (drop, revoke)."""
        waiting: list[asyncio.Future[p.Result] | asyncio.Future[p.Ack]] = [
            *self.pending.values(),
            *self.acks.values(),
        ]
        for fut in waiting:
            if not fut.done():
                fut.set_exception(SidecarUnavailable(self.name, reason))
                fut.exception()  # mark retrieved: a caller may already have given up waiting
        self.pending.clear()
        self.acks.clear()

    async def close(self, code: int, reason: str = "") -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, reason=reason)


async def refuse(ws: WebSocket, code: str, message: str, close_code: int) -> None:
    with contextlib.suppress(Exception):
        await ws.send_text(p.encode(p.Error(code=code, message=message[:2000])))
    with contextlib.suppress(Exception):
        await ws.close(code=close_code)


def parse_message(message: Mapping[str, Any], max_bytes: int) -> p.Frame | p.FrameError:
    """The frame in `message`; its size is checked before any of it is parsed."""
    if message.get("type") == "websocket.disconnect":
        return p.FrameError("disconnected", "the peer disconnected")
    data = message.get("text")
    if data is None:
        data = message.get("bytes")
    if data is None:
        return p.FrameError("malformed", "empty WebSocket message")
    return p.parse_frame(data, max_bytes=max_bytes)


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None
