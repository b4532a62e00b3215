"""What the hub does with the frames an admitted sidecar sends: heartbeats, results, acks, key
checks and error reports, each routed to what waits for it.

It refuses to crash on input: a malformed, unknown or oversized frame gets an error frame and a
log line that names the defect, never the content; the connection survives until
`MAX_BAD_FRAMES` in a row. Until its sidecar is approved a connection's messages are held to
the hub's `pending_frame_bytes`, checked before a message is parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from fathom.fleet import protocol as p
from fathom.fleet.key_reports import KeyReports
from fathom.fleet.link import CLOSE_POLICY, Link, parse_message
from fathom.fleet.remote import SidecarUnavailable
from fathom.fleet.routes import SidecarRoutes

log = logging.getLogger("fathom.fleet.hub")

# How many refused frames in a row a connection may send before it is closed (cleanly):
# one bad frame is a bug worth an error frame; a stream of them is noise worth cutting.
MAX_BAD_FRAMES = 64


class Receiver(Protocol):
    """What the frame reader needs of the hub (`fathom.fleet.hub.Hub`), named here so that this
    module does not import the hub that imports it."""

    clock: Callable[[], float]
    max_frame_bytes: int
    pending_frame_bytes: int
    key_reports: KeyReports
    routes: SidecarRoutes

    def notify(self) -> None: ...


class FrameReader:
    """Reads one link's frames until it closes, and hands each to what waits for it."""

    def __init__(self, hub: Receiver):
        self.hub = hub

    async def receive_loop(self, link: Link) -> None:
        hub = self.hub
        while not link.closed:
            try:
                message = await link.ws.receive()
            except Exception:  # receive after close, transport errors: all mean gone
                return
            if message.get("type") == "websocket.disconnect":
                return
            frame = parse_message(message, hub.max_frame_bytes if link.approved else hub.pending_frame_bytes)
            link.last_seen = hub.clock()
            if isinstance(frame, p.FrameError):
                link.bad_frames += 1
                log.warning("sidecar %s sent a refused frame (%s): %s", link.name, frame.code, frame)
                with contextlib.suppress(SidecarUnavailable):
                    await link.send(p.encode(frame.to_frame()))
                if link.bad_frames >= MAX_BAD_FRAMES:
                    log.warning(
                        "closing sidecar %s after %d refused frames in a row", link.name, link.bad_frames
                    )
                    await link.close(CLOSE_POLICY)
                    return
                continue
            link.bad_frames = 0
            try:
                await self.dispatch(link, frame)
            except Exception:  # one bad frame must never take the hub down
                log.exception("sidecar %s: failed to handle a %s frame", link.name, frame.type)

    async def dispatch(self, link: Link, frame: p.Frame) -> None:
        if isinstance(frame, p.Heartbeat):
            link.load, link.in_flight, link.versions = frame.load, frame.in_flight, dict(frame.versions)
            self.set_key_present(link, frame.key_present)
        elif isinstance(frame, p.Result):
            fut = link.pending.get(frame.id)
            if fut is None or fut.done():
                log.debug("sidecar %s answered unknown or expired command %s", link.name, frame.id)
            else:
                fut.set_result(frame)
        elif isinstance(frame, p.Ack):
            ack = link.acks.get(frame.config_id)
            self.set_key_present(link, frame.key_present)
            if ack is not None and not ack.done():
                ack.set_result(frame)
        elif isinstance(frame, p.KeyCheck):
            if link.approved:  # only a sidecar the server gave the key speaks for the key
                self.hub.key_reports.record(link.name, frame)
        elif isinstance(frame, p.Error):
            log.warning(
                "sidecar %s reported error %s%s: %s",
                link.name,
                frame.code,
                f" (re {frame.ref})" if frame.ref else "",
                frame.message,
            )
            waiter: asyncio.Future[p.Ack] | asyncio.Future[p.Result] | None = link.acks.get(
                frame.ref or ""
            ) or link.pending.get(frame.ref or "")
            if waiter is not None and not waiter.done():
                waiter.set_exception(
                    SidecarUnavailable(link.name, f"refused frame {frame.ref}: {frame.code}")
                )
        else:
            await link.send(
                p.encode(
                    p.Error(
                        code="unexpected_frame", message=f"a sidecar does not send {frame.type} frames here"
                    )
                )
            )

    def set_key_present(self, link: Link, present: bool) -> None:
        if link.key_present != present:
            link.key_present = present
            if not present and link.approved and link.cloud_capable:
                log.warning(
                    "key missing on %s: its cloud routes are unavailable until the key is pushed", link.name
                )
            self.hub.routes.mark_key_health(link)
            self.hub.notify()
