"""The server end of the fleet: the `/sidecar` WebSocket, admission, the registry of
connected sidecars, command/result correlation, and the config (and key) push.

This module owns:
- admission: a join token is required (Authorization header, or the register frame); a wrong
  one is refused at connect, and an address (or a token) that keeps failing is refused for a
  while without being looked at (`FailedJoins`, logged as a summary) — except a connection
  presenting a valid token, which no one else's failures keep out. A sidecar stays pending until an
  operator approves its name or a host token pre-approves it, and an approval holds only for
  the credential it is bound to (`fleet.auth`): another host under an approved name is a
  claimant, held pending and shown to the operator ("gpu-1: a different host claims this
  name"), and the name's own host, when it connects, takes the name back from it. Only approved
  sidecars get commands or config.
- the live set of sidecars with their health (last frame, load, in flight, key present), and
  the `SidecarProvider`s each approved sidecar contributes to the `ProviderRegistry`; they are
  removed the moment the sidecar drops or is revoked, and its pending commands fail at once
  with `SidecarUnavailable`, so the pool puts their texts back in its queue.
- the push: a config frame to every approved, connected sidecar, each acknowledgement awaited.
- key checks: the non-secret limits a sidecar read for its key (`fleet.keycheck`), kept per
  sidecar (`key_check(name)`) and handed to whoever listens (`on_key_check`: the server's budget).

What it refuses:
- to hold the OpenRouter key. The key is a local of `push_config` on its way into the JSON text
  of each config frame; the text is dropped once written, the key reference cleared before the
  acknowledgements are awaited. No attribute, log line, exception or persisted record of the
  hub ever holds it. What is persisted is the push fact (`RoutingState.last_push`).
- to crash on input: a malformed, unknown or oversized frame gets an error frame and a log
  line that names the defect, never the content; the connection survives (until
  `MAX_BAD_FRAMES` in a row).
- to hold much for strangers: until its sidecar is approved a connection's messages are bounded
  by `MAX_PENDING_FRAME_BYTES` (by the WebSocket transport, `fleet.transport`, before a message
  is buffered whole; and here before it is parsed), a silent connection is closed after
  `register_timeout`, and at most `max_pending` sidecars wait for approval at once (a newcomer
  beyond that is told to retry later; the ones waiting keep their place). Their fields are
  bounded by the protocol.

The `Hub` is the facade; the work is in its parts, one mechanism each: `fleet.link` (one
connection, frame parsing, close codes), `fleet.admission` (the door: tokens, claims, the
pending bound), `fleet.frames` (what each frame a sidecar sends does), `fleet.routes` (the
providers a sidecar lends the registry), `fleet.push` (the config and key push) and
`fleet.key_reports` (the key checks sidecars report).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, WebSocket

from fathom.config import PushRecord, RoutingStore
from fathom.errors import ConfigError
from fathom.fleet import protocol as p
from fathom.fleet.admission import (
    CLAIM_MEMORY_S,
    MAX_PENDING,
    Admissions,
    NameClaimed,
    claim_problem,
)
from fathom.fleet.auth import FailedJoins, FleetAuth
from fathom.fleet.frames import MAX_BAD_FRAMES, FrameReader
from fathom.fleet.key_reports import KeyReports
from fathom.fleet.keycheck import KeyCheckRecord
from fathom.fleet.link import (
    CLOSE_NAME_IN_USE,
    CLOSE_POLICY,
    CLOSE_REVOKED,
    CLOSE_STALE,
    CLOSE_TOO_BIG,
    CLOSE_TOO_MANY_FAILURES,
    CLOSE_TRY_LATER,
    CLOSE_UNAUTHORIZED,
    Link,
    bearer,
    new_id,
)
from fathom.fleet.push import ConfigPush, PushOutcome
from fathom.fleet.remote import (
    CommandTimeout,
    SidecarProvider,
    SidecarUnavailable,
    error_from_info,
)
from fathom.fleet.routes import SidecarRoutes, cloud_routes, role_configs
from fathom.fleet.transport import widen_messages
from fathom.inference.cloud_health import CloudHealth
from fathom.inference.provider import Provider
from fathom.roles import Role

log = logging.getLogger("fathom.fleet.hub")

_Link = Link  # the name this class had before it moved to `fleet.link`

__all__ = [
    "CLAIM_MEMORY_S",
    "CLOSE_NAME_IN_USE",
    "CLOSE_POLICY",
    "CLOSE_REVOKED",
    "CLOSE_STALE",
    "CLOSE_TOO_BIG",
    "CLOSE_TOO_MANY_FAILURES",
    "CLOSE_TRY_LATER",
    "CLOSE_UNAUTHORIZED",
    "MAX_BAD_FRAMES",
    "MAX_PENDING",
    "Hub",
    "NameClaimed",
    "PushOutcome",
    "SidecarStatus",
    "claim_problem",
    "cloud_routes",
    "role_configs",
]


@dataclass
class SidecarStatus:
    """One sidecar as the admin API and status output show it. No secret in any field."""

    name: str
    state: str  # approved | pending | revoked
    connected: bool
    approved_via: str | None = None
    routes: list[dict[str, Any]] = field(default_factory=list)
    cloud_capable: bool = False
    key_present: bool | None = None
    last_seen_s: float | None = None  # seconds since the last frame
    load: float | None = None
    in_flight: int = 0
    versions: dict[str, str] = field(default_factory=dict)
    providers: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    claimed: bool = False  # the host connected under this name is not the one it is bound to
    key_check: dict[str, Any] | None = None  # the last key check it reported (outcome, when, why)
    cloud: list[dict[str, Any]] = field(default_factory=list)  # each cloud route's real health

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Hub:
    """The fleet, server side. Construct one per server; `mount(app)` adds `/sidecar`."""

    def __init__(
        self,
        data_dir: Path,
        *,
        registry: Any = None,
        auth: FleetAuth | None = None,
        routing: RoutingStore | None = None,
        join_tokens: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        command_timeout: float = 120.0,
        ack_timeout: float = 10.0,
        register_timeout: float = 10.0,
        heartbeat_timeout: float = 45.0,
        max_frame_bytes: int = p.MAX_FRAME_BYTES,
        pending_frame_bytes: int = p.MAX_PENDING_FRAME_BYTES,
        max_pending: int = MAX_PENDING,
        path: str = "/sidecar",
        wrap: Callable[[Any], Any] | None = None,
    ):
        self.data_dir = Path(data_dir)
        self.registry = registry
        # How a sidecar's provider enters the registry: the server wraps cloud routes in the
        # key's budget (every cloud call takes a permit) and every route in its metrics.
        self.wrap = wrap
        self.auth = auth or FleetAuth(self.data_dir, join_tokens=join_tokens)
        self.routing = routing or RoutingStore(self.data_dir)
        self.clock = clock
        self.now = now
        # What calls through each cloud route (and key checks, once a sidecar reports them)
        # found: a route is "serving" only after one succeeded.
        self.cloud_health = CloudHealth(now=now)
        self.command_timeout = command_timeout
        self.ack_timeout = ack_timeout
        self.register_timeout = register_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.max_frame_bytes = max_frame_bytes
        self.pending_frame_bytes = min(pending_frame_bytes, max_frame_bytes)
        self.max_pending = max_pending
        self.path = path
        self.links: dict[str, Link] = {}
        self._links = self.links  # the same dict, under the name tests and older callers use
        self.failed_joins = FailedJoins(clock=clock, log=log)
        self.admissions = Admissions(self)
        self.frames = FrameReader(self)
        self.routes = SidecarRoutes(self)
        self.pushes = ConfigPush(self)
        self.key_reports = KeyReports(self.cloud_health, now)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[], None]] = []
        self.router = APIRouter()
        self.router.add_api_websocket_route(path, self.serve)

    def mount(self, app: FastAPI) -> None:
        app.include_router(self.router)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever the set of sidecar providers or their key state changes."""
        self._listeners.append(listener)

    # ---- the WebSocket endpoint -----------------------------------------------------------

    async def serve(self, ws: WebSocket) -> None:
        # The ASGI client address: the TCP peer, or what a proxy the server trusts (uvicorn's
        # --forwarded-allow-ips) says. No forwarded header is read here.
        host = ws.client.host if ws.client else "?"
        peer = f"{host}:{ws.client.port}" if ws.client else "?"
        header_token = bearer(ws.headers.get("authorization"))
        if header_token is not None and not self.auth.recognizes(header_token):
            if await self.admissions.refuse_blocked(ws, host, header_token):
                return
            self.failed_joins.failed(host, header_token, "wrong join token")
            await ws.close(code=CLOSE_UNAUTHORIZED)  # before accept: the handshake gets HTTP 403
            return
        await ws.accept()
        link = await self.admissions.admit(ws, header_token, peer, host)
        if link is None:
            return
        try:
            await self.frames.receive_loop(link)
        finally:
            await self.drop(link, "disconnected")

    # ---- key checks -----------------------------------------------------------------------

    def on_key_check(self, listener: Callable[[KeyCheckRecord], None]) -> None:
        """Call `listener(record)` for every key check a sidecar reports."""
        self.key_reports.listen(listener)

    def key_check(self, name: str) -> KeyCheckRecord | None:
        """The last key check sidecar `name` reported (kept after it disconnects), or None."""
        return self.key_reports.last(name)

    # ---- lifecycle: activate, drop, approve, revoke ---------------------------------------

    def activate(self, link: Link) -> None:
        """An approved sidecar joins: its providers enter the registry, and the stored config
        (never a key) is pushed to it in the background (its ack arrives on the receive loop)."""
        link.state = "approved"
        # Only now may its messages be big (embed results); until approval the transport held
        # this connection to the small bound every stranger gets.
        widen_messages(link.ws, self.max_frame_bytes)
        self.routes.sync(link)
        self._spawn(self.pushes.push_stored(link))

    async def drop(self, link: Link, reason: str) -> None:
        if self.links.get(link.name) is link:
            del self.links[link.name]
        if not link.closed:
            log.info("sidecar %s %s", link.name, reason)
        link.closed = True
        link.fail_all(reason)
        self.routes.withdraw(link)
        self.notify()

    async def _close(self, link: Link, code: int, reason: str = "") -> None:
        # Kept for the tests that restart a connection through the hub; the parts call
        # `Link.close` themselves.
        await link.close(code, reason)

    async def approve(self, name: str, *, rebind: bool = False) -> SidecarStatus:
        """Approve `name`, bound to the host connected under it now (or to its binding). A host
        claiming a name bound to another is approved only with `rebind` (it replaces that host);
        `NameClaimed` otherwise."""
        link = self.links.get(name)
        if link is not None and link.closed:
            link = None
        if link is not None and link.claimed and not rebind:
            raise NameClaimed(
                name,
                f"{claim_problem(name)}: the name is bound to another host's credential. "
                f"If this host replaced it, approve it with rebind (`fathom fleet approve "
                f"{name} --rebind`); if not, leave it pending, or revoke the name "
                f"(`fathom fleet revoke {name}`) and approve its own host again",
            )
        if rebind and (link is None or link.state == "approved"):
            raise NameClaimed(
                name,
                f"{name}: no other host is connected under this name, so there is nothing "
                f"to rebind; a rebind hands the name to the host connected under it now",
            )
        self.auth.approve(
            name, link.credential_hash if link is not None and link.state != "approved" else None
        )
        if rebind:
            log.warning(
                "sidecar name %s handed to the host connected from %s by the operator",
                name,
                f"{link.ws.client.host}" if link is not None and link.ws.client else "?",
            )
            self.admissions.claims.pop(name, None)
        if link is not None and link.state != "approved":
            link.claimed = False
            log.info("sidecar %s approved by the operator", name)
            with contextlib.suppress(SidecarUnavailable):
                await link.send(p.encode(p.Status(state="approved")))
            self.activate(link)
        return self.status_of(name)

    async def revoke(self, name: str) -> SidecarStatus:
        """Withdraw approval; a connected sidecar loses its providers and pending work at once
        and is disconnected."""
        self.auth.revoke(name)
        self.admissions.claims.pop(name, None)
        link = self.links.get(name)
        if link is not None:
            log.info("sidecar %s revoked by the operator", name)
            link.state = "revoked"
            await self.drop(link, "was revoked")
            await self._close(link, CLOSE_REVOKED, "revoked")
        return self.status_of(name)

    # ---- commands -------------------------------------------------------------------------

    def key_present(self, name: str) -> bool:
        link = self.links.get(name)
        return bool(link and link.key_present)

    def route_unavailable_reason(self, provider: SidecarProvider) -> str | None:
        link = self.links.get(provider.sidecar)
        if link is None or link.closed:
            return f"sidecar {provider.sidecar} is offline"
        if not link.approved:
            return f"sidecar {provider.sidecar} is not approved"
        if provider.route == "cloud" and not link.key_present:
            return f"key missing on {provider.sidecar}"
        return None

    async def command(
        self,
        name: str,
        op: p.Op,
        role: Role,
        route: p.RouteKind,
        payload: dict[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one command to an approved sidecar and await its result payload."""
        link = self.links.get(name)
        if link is None or link.closed:
            raise SidecarUnavailable(name, "is not connected")
        if not link.approved:
            raise SidecarUnavailable(name, "is not approved")
        cid = new_id()
        fut = link.pending[cid] = asyncio.get_running_loop().create_future()
        timeout = self.command_timeout if timeout is None else timeout
        try:
            await link.send(p.encode(p.Command(id=cid, op=op, role=role, route=route, payload=payload)))
            try:
                result: p.Result = await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                raise CommandTimeout(name, op, timeout) from None
        finally:
            link.pending.pop(cid, None)
        if result.ok:
            return result.payload or {}
        assert result.error is not None
        raise error_from_info(name, result.error)

    # ---- config and key push --------------------------------------------------------------

    async def push_config(
        self,
        roles: dict[Role, dict[str, Any]] | None = None,
        key: str | None = None,
        *,
        forget_key: bool = False,
        timeout: float | None = None,
    ) -> PushOutcome:
        """Store `roles` changes (validated; a refusal sends nothing), then send the full role
        config — with `key` if given — to every approved, connected sidecar and await each ack.

        Without a key the sidecars merge and keep the key they hold. With one, the fact of the
        push (when, who acked, who was offline) is persisted; the key is not, anywhere.
        """
        return await self.pushes.push(roles, key, forget_key=forget_key, timeout=timeout)

    def _record_push(self, outcome: PushOutcome) -> None:
        self.pushes.record(outcome)

    def last_push(self) -> PushRecord | None:
        return self.pushes.last()

    # ---- status ---------------------------------------------------------------------------

    def providers(self) -> list[Provider]:
        return [prov for link in self.links.values() for prov in link.providers.values()]

    def connected(self) -> list[str]:
        return sorted(self.links)

    def problems(self) -> list[str]:
        """One line per fleet problem an operator must see, e.g. "key missing on gpu1"."""
        out = []
        try:
            state = self.routing.load()
            # Before the operator's first key push no sidecar holds a key, and that is the
            # install's starting point, not a fault: one is missing only once one was pushed.
            key_expected = bool(cloud_routes(state)) and state.last_push is not None
        except ConfigError as exc:  # said once, and the fleet's other problems still listed
            out.append(str(exc))
            key_expected = False
        for link in sorted(self.links.values(), key=lambda x: x.name):
            if link.approved and link.cloud_capable and key_expected and not link.key_present:
                out.append(f"key missing on {link.name}")
            if link.state == "pending" and not link.claimed:
                out.append(f"sidecar {link.name} is waiting for approval")
        for name in sorted(n for n in self.admissions.claims if self.admissions.claimed(n)):
            out.append(claim_problem(name))
        for name in self.auth.approved_names():
            online = self.links.get(name)
            if online is None or online.claimed:
                out.append(f"sidecar {name} is offline")
        return out

    def status_of(self, name: str) -> SidecarStatus:
        link = self.links.get(name)
        approval = self.auth.approval(name)
        checked = self.key_reports.last(name)
        key_check = checked.to_dict() if checked is not None else None
        if link is None:
            state = "approved" if approval else ("revoked" if self.auth.is_revoked(name) else "pending")
            return SidecarStatus(
                name=name,
                state=state,
                connected=False,
                approved_via=approval.via if approval else None,
                problems=[f"sidecar {name} is offline"] if approval else [],
                key_check=key_check,
            )
        problems = [
            x
            for x in self.problems()
            if x.endswith(f" {name}") or f" {name} " in x or x.startswith(f"{name}: ")
        ]
        return SidecarStatus(
            name=name,
            state=link.state,
            connected=not link.closed,
            approved_via=approval.via if approval else None,
            routes=[r.model_dump(mode="json") for r in link.routes],
            cloud_capable=link.cloud_capable,
            key_present=link.key_present,
            last_seen_s=round(max(0.0, self.clock() - link.last_seen), 3),
            load=link.load,
            in_flight=len(link.pending),
            versions=dict(link.versions),
            providers=sorted(link.providers),
            problems=problems,
            claimed=link.claimed,
            key_check=key_check,
            cloud=[
                {"provider": pid} | self.cloud_health.of(pid, name).to_dict()
                for pid, prov in sorted(link.providers.items())
                if prov.route == "cloud"
            ],
        )

    def sidecars(self) -> list[SidecarStatus]:
        names = set(self.links) | set(self.auth.approved_names())
        return [self.status_of(n) for n in sorted(names)]

    # ---- health ---------------------------------------------------------------------------

    async def reap(self) -> list[str]:
        """Disconnect sidecars silent for longer than `heartbeat_timeout`; returns their names."""
        now = self.clock()
        stale = [link for link in self.links.values() if now - link.last_seen > self.heartbeat_timeout]
        for link in stale:
            log.warning("sidecar %s silent for %.0fs: disconnecting it", link.name, now - link.last_seen)
            await self.drop(link, "stopped heartbeating")
            await self._close(link, CLOSE_STALE, "no heartbeat")
        return [link.name for link in stale]

    def ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while self.links:
            await asyncio.sleep(max(1.0, self.heartbeat_timeout / 3))
            try:
                await self.reap()
            except Exception:  # a failed sweep is logged; the next runs on time
                log.exception("heartbeat reaper failed")

    async def aclose(self) -> None:
        for link in list(self.links.values()):
            await self.drop(link, "disconnected: server shutting down")
            await self._close(link, 1001, "server shutting down")
        for task in [*self._tasks, *([self._reaper] if self._reaper else [])]:
            task.cancel()
        self._tasks.clear()

    # ---- plumbing -------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # one broken listener must not stop the others
                log.exception("fleet change listener failed")
