"""The server end of the fleet (R6, R7): the `/sidecar` WebSocket, admission, the registry of
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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from fastapi import APIRouter, FastAPI, WebSocket

from fathom.config import PushRecord, RoutingState, RoutingStore
from fathom.errors import ConfigError, FathomError
from fathom.fleet import protocol as p
from fathom.fleet.auth import Admission, FailedJoins, FleetAuth, JoinRefused, hash_credential
from fathom.fleet.keycheck import KeyCheckRecord
from fathom.fleet.transport import widen_messages
from fathom.fleet.remote import CommandTimeout, SidecarProvider, SidecarUnavailable, error_from_info
from fathom.inference.cloud_health import CloudHealth, Outcome
from fathom.inference.provider import Provider
from fathom.roles import Role

log = logging.getLogger("fathom.fleet.hub")

# Close codes (4000-4999 are application codes).
CLOSE_UNAUTHORIZED = 4401
CLOSE_REVOKED = 4403
CLOSE_STALE = 4408
CLOSE_NAME_IN_USE = 4409
CLOSE_TOO_MANY_FAILURES = 4429  # an address that keeps failing to join: the sidecar retries later
CLOSE_POLICY = 1008
CLOSE_TRY_LATER = 1013  # too many sidecars already wait for approval: the sidecar retries later
CLOSE_TOO_BIG = 1009  # the transport's close code for a message over its bound

# How many refused frames in a row a connection may send before it is closed (cleanly):
# one bad frame is a bug worth an error frame; a stream of them is noise worth cutting.
MAX_BAD_FRAMES = 64
# How long a refused claim on a connected sidecar's name stays among the fleet's problems.
CLAIM_MEMORY_S = 600.0
# How many sidecars may wait for approval at once. Anyone holding the join token can connect
# under fresh names; past this bound a newcomer is refused (and retries), never one already
# waiting, so an operator's real sidecar is not pushed out of the list by a flood.
MAX_PENDING = 64


class NameClaimed(FathomError):
    """An approval that would hand a sidecar name to another host without the operator saying
    so (or a rebind with no other host to hand it to)."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(message)


def claim_problem(name: str) -> str:
    return f"{name}: a different host claims this name"


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class PushOutcome:
    """What a push did. `pushed` holds only if at least one sidecar acknowledged."""

    at: datetime
    key_sent: bool
    acked: list[str] = field(default_factory=list)
    offline: list[str] = field(default_factory=list)  # approved, not connected
    failed: dict[str, str] = field(default_factory=dict)  # connected, no ack: why
    pending: list[str] = field(default_factory=list)  # connected, not approved: sent nothing

    @property
    def pushed(self) -> bool:
        return bool(self.acked)

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(), "key_sent": self.key_sent, "pushed": self.pushed,
            "acked": self.acked, "offline": self.offline, "failed": self.failed, "pending": self.pending,
        }


class _Link:
    """One live connection of one sidecar."""

    def __init__(self, ws: WebSocket, reg: p.Register, admission: Admission, now: float, credential_hash: str):
        self.ws = ws
        self.name = reg.name
        self.credential_hash = credential_hash  # what the sidecar's approval is bound to; never the credential
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
        self.pending: dict[str, asyncio.Future] = {}  # command id -> result future
        self.acks: dict[str, asyncio.Future] = {}  # config id -> ack future
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
        except Exception:  # noqa: BLE001 - any transport failure means the same thing here
            raise SidecarUnavailable(self.name, "connection lost while sending") from None

    def fail_all(self, reason: str) -> None:
        """Fail every pending command and ack at once (drop, revoke)."""
        for fut in [*self.pending.values(), *self.acks.values()]:
            if not fut.done():
                fut.set_exception(SidecarUnavailable(self.name, reason))
                fut.exception()  # mark retrieved: a caller may already have given up waiting
        self.pending.clear()
        self.acks.clear()


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


def role_configs(state: RoutingState) -> dict[Role, p.RoleConfig]:
    return {
        role: p.RoleConfig(policy=r.policy, model=r.model, upstream=r.upstream, fallback=r.fallback, width=r.width,
                           max_tokens=r.max_tokens)
        for role, r in state.roles.items()
    }


def cloud_routes(state: RoutingState) -> dict[Role, Any]:
    """Roles whose stored routing lets a cloud route serve them (`RoleConfig.cloud_allowed`,
    the same rule the sidecar applies)."""
    configs = role_configs(state)
    return {role: state.roles[role] for role, cfg in configs.items() if cfg.cloud_allowed(role)}


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
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
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
        self._pending_full_logged_at: float | None = None
        self.path = path
        self._links: dict[str, _Link] = {}
        self._claims: dict[str, float] = {}  # name -> when another host last claimed it (clock)
        self.failed_joins = FailedJoins(clock=clock, log=log)
        self._tasks: set[asyncio.Task] = set()
        self._reaper: asyncio.Task | None = None
        self._listeners: list[Callable[[], None]] = []
        self._key_checks: dict[str, KeyCheckRecord] = {}
        self._key_listeners: list[Callable[[KeyCheckRecord], None]] = []
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
        header_token = _bearer(ws.headers.get("authorization"))
        if header_token is not None and not self.auth.recognizes(header_token):
            if await self._refuse_blocked(ws, host, header_token):
                return
            self.failed_joins.failed(host, header_token, "wrong join token")
            await ws.close(code=CLOSE_UNAUTHORIZED)  # before accept: the handshake gets HTTP 403
            return
        await ws.accept()
        link = await self._admit(ws, header_token, peer, host)
        if link is None:
            return
        try:
            await self._receive_loop(link)
        finally:
            await self._drop(link, "disconnected")

    async def _refuse_blocked(self, ws: WebSocket, host: str, token: str | None) -> bool:
        """Close a join from a blocked address or with a blocked token; False if neither is.
        Only ever asked about a token this server does not recognize (or none)."""
        wait = self.failed_joins.blocked(host, token)
        if wait is None:
            return False
        # Accepted (if not yet) only to be closed with a code the sidecar retries on (a refused
        # handshake reads as a wrong token to it, which it does not retry); nothing is logged.
        with contextlib.suppress(Exception):
            if ws.client_state.name == "CONNECTING":
                await ws.accept()
            await ws.close(code=CLOSE_TOO_MANY_FAILURES, reason=f"too many failed joins; retry in {wait:.0f}s")
        return True

    async def _admit(self, ws: WebSocket, header_token: str | None, peer: str, host: str) -> _Link | None:
        try:
            message = await asyncio.wait_for(ws.receive(), self.register_timeout)
        except (TimeoutError, asyncio.TimeoutError):
            await self._refuse(ws, "register_timeout", f"no register frame within {self.register_timeout:g}s",
                               CLOSE_POLICY)
            return None
        except Exception:  # noqa: BLE001 - the peer went away before saying anything
            return None
        frame = self._parse(message, self.pending_frame_bytes)
        if not isinstance(frame, p.Register):
            code, msg = (frame.code, str(frame)) if isinstance(frame, p.FrameError) else (
                "expected_register", "the first frame must be a register frame")
            if message.get("code") == CLOSE_TOO_BIG:
                code, msg = "oversized", f"the first frame exceeds {self.pending_frame_bytes} bytes"
            elif code == "disconnected":  # gone before saying anything: nothing to answer or count
                log.debug("sidecar connection from %s closed before registering", peer)
                return None
            if header_token is None:
                # No valid token yet: a stranger's junk counts against its address like a wrong
                # token (and from a blocked address is not even logged).
                if await self._refuse_blocked(ws, host, None):
                    return None
                self.failed_joins.failed(host, None, msg)
            else:
                log.warning("sidecar connection from %s refused: %s", peer, msg)
            await self._refuse(ws, code, msg, CLOSE_POLICY)
            return None
        token = header_token or (frame.token.get_secret_value() if frame.token else None)
        credential = hash_credential(frame.credential.get_secret_value()) if frame.credential else None
        try:
            if (token is None or not self.auth.recognizes(token)) and await self._refuse_blocked(ws, host, token):
                return None
            admission = self.auth.admit(frame.name, token, credential)
        except JoinRefused as exc:
            self.failed_joins.failed(host, token, f"sidecar {frame.name}: {exc.reason}")
            await self._refuse(ws, "join_refused", str(exc), CLOSE_UNAUTHORIZED)
            return None
        finally:
            token = None  # noqa: F841 - the join token is a secret too; do not keep it in this frame
            frame = frame.model_copy(update={"token": None, "credential": None})  # nor the credential
        roles = [r.role for r in frame.routes]
        if len(set(roles)) != len(roles):
            await self._refuse(ws, "duplicate_role", "each role may be declared once per sidecar", CLOSE_POLICY)
            return None
        if admission is Admission.CLAIMED:
            self._note_claim(frame.name, peer)
        held = self._links.get(frame.name)
        if held is not None and held.claimed and admission is Admission.APPROVED:
            # The name's own host is back: the claimant holding its name gives way.
            log.warning("sidecar %s connected from %s with its own credential: disconnecting the host "
                        "that claimed its name", frame.name, peer)
            await self._drop(held, "disconnected: the host this name belongs to connected")
            await self._close(held, CLOSE_NAME_IN_USE, "name taken by its own host")
        elif held is not None:
            log.log(logging.DEBUG if admission is Admission.CLAIMED else logging.WARNING,
                    "sidecar %s from %s refused: that name is already connected", frame.name, peer)
            await self._refuse(ws, "name_in_use", f"a sidecar named {frame.name} is already connected", CLOSE_NAME_IN_USE)
            return None
        if admission is not Admission.APPROVED and self._pending_count() >= self.max_pending:
            self._log_pending_full(frame.name, peer)
            await self._refuse(ws, "too_many_pending",
                               f"{self.max_pending} sidecars already wait for approval; retrying later "
                               f"(an operator approves or revokes them with `fathom fleet`)", CLOSE_TRY_LATER)
            return None
        link = _Link(ws, frame, admission, self.clock(), credential or "")
        self._links[link.name] = link
        self._ensure_reaper()
        log.info("sidecar %s connected from %s (%s; routes: %s)", link.name, peer,
                 "claims an approved name" if link.claimed else link.state,
                 ", ".join(f"{r.role}={r.backend}" for r in link.routes) or "none")
        try:
            if link.state == "approved":
                await link.send(p.encode(p.Status(state="approved")))
                self._activate(link)
            elif link.claimed:
                await link.send(p.encode(p.Status(
                    state="pending", message=f"the name {link.name} belongs to another host (another "
                                             f"credential); an operator must hand it to this host "
                                             f"(`fathom fleet approve {link.name} --rebind`)")))
            else:
                await link.send(p.encode(p.Status(
                    state="pending", message=f"waiting for an operator to approve {link.name} "
                                             f"(`fathom fleet approve {link.name}`)")))
        except SidecarUnavailable:
            await self._drop(link, "disconnected")
            return None
        return link

    def _pending_count(self) -> int:
        return sum(1 for link in self._links.values() if link.state == "pending" and not link.closed)

    def _log_pending_full(self, name: str, peer: str) -> None:
        """One WARNING a minute while the pending list is full; the refusals in between at DEBUG."""
        now = self.clock()
        if self._pending_full_logged_at is None or now - self._pending_full_logged_at >= 60.0:
            self._pending_full_logged_at = now
            log.warning("sidecar %s from %s refused: %d sidecars already wait for approval (approve or "
                        "revoke them, or rotate the join token if you did not start them)", name, peer,
                        self.max_pending)
        else:
            log.debug("sidecar %s from %s refused: the pending list is full", name, peer)

    async def _refuse(self, ws: WebSocket, code: str, message: str, close_code: int) -> None:
        with contextlib.suppress(Exception):
            await ws.send_text(p.encode(p.Error(code=code, message=message[:2000])))
        with contextlib.suppress(Exception):
            await ws.close(code=close_code)

    def _parse(self, message: dict[str, Any], max_bytes: int) -> p.Frame | p.FrameError:
        """The frame in `message`; its size is checked before any of it is parsed."""
        if message.get("type") == "websocket.disconnect":
            return p.FrameError("disconnected", "the peer disconnected")
        data = message.get("text")
        if data is None:
            data = message.get("bytes")
        if data is None:
            return p.FrameError("malformed", "empty WebSocket message")
        return p.parse_frame(data, max_bytes=max_bytes)

    async def _receive_loop(self, link: _Link) -> None:
        while not link.closed:
            try:
                message = await link.ws.receive()
            except Exception:  # noqa: BLE001 - receive after close, transport errors: all mean gone
                return
            if message.get("type") == "websocket.disconnect":
                return
            frame = self._parse(message, self.max_frame_bytes if link.approved else self.pending_frame_bytes)
            link.last_seen = self.clock()
            if isinstance(frame, p.FrameError):
                link.bad_frames += 1
                log.warning("sidecar %s sent a refused frame (%s): %s", link.name, frame.code, frame)
                with contextlib.suppress(SidecarUnavailable):
                    await link.send(p.encode(frame.to_frame()))
                if link.bad_frames >= MAX_BAD_FRAMES:
                    log.warning("closing sidecar %s after %d refused frames in a row", link.name, link.bad_frames)
                    await self._close(link, CLOSE_POLICY)
                    return
                continue
            link.bad_frames = 0
            try:
                await self._dispatch(link, frame)
            except Exception:  # noqa: BLE001 - one bad frame must never take the hub down
                log.exception("sidecar %s: failed to handle a %s frame", link.name, frame.type)

    def on_key_check(self, listener: Callable[[KeyCheckRecord], None]) -> None:
        """Call `listener(record)` for every key check a sidecar reports."""
        self._key_listeners.append(listener)

    def key_check(self, name: str) -> KeyCheckRecord | None:
        """The last key check sidecar `name` reported (kept after it disconnects), or None."""
        return self._key_checks.get(name)

    def _key_checked(self, link: _Link, frame: p.KeyCheck) -> None:
        record = KeyCheckRecord(sidecar=link.name, outcome=frame.outcome, reason=frame.reason,
                                at=self.now(), facts=frame.facts)
        self._key_checks[link.name] = record
        # The check speaks for every cloud route of this sidecar: "serving" on ok, else the
        # refusal (a bad key shows as rejected within one check of the push).
        self.cloud_health.note(link.name, frame.outcome, f"key check ({frame.reason})")
        log.info("key check on %s (%s): %s", link.name, frame.reason, frame.outcome)
        for listener in list(self._key_listeners):
            try:
                listener(record)
            except Exception:  # noqa: BLE001
                log.exception("key check listener failed")

    async def _dispatch(self, link: _Link, frame: p.Frame) -> None:
        if isinstance(frame, p.Heartbeat):
            link.load, link.in_flight, link.versions = frame.load, frame.in_flight, dict(frame.versions)
            self._set_key_present(link, frame.key_present)
        elif isinstance(frame, p.Result):
            fut = link.pending.get(frame.id)
            if fut is None or fut.done():
                log.debug("sidecar %s answered unknown or expired command %s", link.name, frame.id)
            else:
                fut.set_result(frame)
        elif isinstance(frame, p.Ack):
            fut = link.acks.get(frame.config_id)
            self._set_key_present(link, frame.key_present)
            if fut is not None and not fut.done():
                fut.set_result(frame)
        elif isinstance(frame, p.KeyCheck):
            if link.approved:  # only a sidecar the server gave the key speaks for the key
                self._key_checked(link, frame)
        elif isinstance(frame, p.Error):
            log.warning("sidecar %s reported error %s%s: %s", link.name, frame.code,
                        f" (re {frame.ref})" if frame.ref else "", frame.message)
            fut = link.acks.get(frame.ref or "") or link.pending.get(frame.ref or "")
            if fut is not None and not fut.done():
                fut.set_exception(SidecarUnavailable(link.name, f"refused frame {frame.ref}: {frame.code}"))
        else:
            await link.send(p.encode(p.Error(code="unexpected_frame",
                                             message=f"a sidecar does not send {frame.type} frames here")))

    def _set_key_present(self, link: _Link, present: bool) -> None:
        if link.key_present != present:
            link.key_present = present
            if not present and link.approved and link.cloud_capable:
                log.warning("key missing on %s: its cloud routes are unavailable until the key is pushed", link.name)
            self._mark_key_health(link)
            self._notify()

    def _mark_key_health(self, link: _Link) -> None:
        """Mirror "key missing" into the registry's health flags, so whoever lists available
        providers (router, pool, status) skips these cloud routes and shows the reason. Only a
        flag this hub set is lifted: a gate quarantine stays."""
        reg = self.registry
        if reg is None or not hasattr(reg, "quarantine"):
            return
        reason = f"key missing on {link.name}"
        for pid, prov in link.providers.items():
            if prov.route != "cloud" or pid not in reg:
                continue
            health = reg.health(pid)
            if not link.key_present and health.state == "ok":
                reg.quarantine(pid, reason)
            elif link.key_present and health.reason == reason:
                reg.restore(pid)

    # ---- lifecycle: activate, drop, approve, revoke ---------------------------------------

    def _activate(self, link: _Link) -> None:
        """An approved sidecar joins: its providers enter the registry, and the stored config
        (never a key) is pushed to it in the background (its ack arrives on the receive loop)."""
        link.state = "approved"
        # Only now may its messages be big (embed results); until approval the transport held
        # this connection to the small bound every stranger gets.
        widen_messages(link.ws, self.max_frame_bytes)
        self._sync_providers(link)
        self._spawn(self._push_stored_config(link))

    async def _push_stored_config(self, link: _Link) -> None:
        try:
            configs = role_configs(self.routing.load())
        except ConfigError as exc:
            log.error("cannot push config to %s: %s", link.name, exc)
            return
        cid = _new_id()
        fut = link.acks[cid] = asyncio.get_running_loop().create_future()
        try:
            await link.send(p.encode_config(cid, configs))
            await asyncio.wait_for(fut, self.ack_timeout)
        except Exception as exc:  # noqa: BLE001 - best effort; status shows the sidecar's key state
            log.info("sidecar %s did not acknowledge the stored config (%s)", link.name, type(exc).__name__)
        finally:
            link.acks.pop(cid, None)

    def _desired_providers(self, link: _Link, state: RoutingState | None = None) -> dict[str, SidecarProvider]:
        out: dict[str, SidecarProvider] = {}
        for r in link.routes:
            prov = SidecarProvider(self, link.name, r.role, "local", model=r.model, width=r.width, backend=r.backend,
                                   max_tokens=r.max_tokens)
            out[prov.id] = prov
        if link.cloud_capable:
            if state is None:
                try:
                    state = self.routing.load()
                except ConfigError as exc:
                    log.error("routing state unreadable, no cloud routes for %s: %s", link.name, exc)
                    state = None
            for role, route in (cloud_routes(state) if state else {}).items():
                prov = SidecarProvider(self, link.name, role, "cloud", model=route.model, width=route.width,
                                       upstream=route.upstream, max_tokens=route.max_tokens)
                out[prov.id] = prov
        return out

    def _sync_providers(self, link: _Link, state: RoutingState | None = None) -> None:
        desired = self._desired_providers(link, state) if link.approved else {}
        changed = False
        for pid in list(link.providers):
            if pid not in desired:
                self._registry_remove(link.providers.pop(pid))
                changed = True
        for pid, prov in desired.items():
            current = link.providers.get(pid)
            if current is None or _identity(current) != _identity(prov):
                # New, or the same route now serving another model, pin or width: another
                # provider, which replaces the old one and has no verdict until it is probed.
                link.providers[pid] = prov
                self._registry_add(prov)
                changed = True
        if changed:
            self._mark_key_health(link)
            self._notify()

    async def _drop(self, link: _Link, reason: str) -> None:
        if self._links.get(link.name) is link:
            del self._links[link.name]
        if not link.closed:
            log.info("sidecar %s %s", link.name, reason)
        link.closed = True
        link.fail_all(reason)
        for pid in list(link.providers):
            self._registry_remove(link.providers.pop(pid))
        self._notify()

    async def _close(self, link: _Link, code: int, reason: str = "") -> None:
        with contextlib.suppress(Exception):
            await link.ws.close(code=code, reason=reason)

    def _note_claim(self, name: str, peer: str) -> None:
        """Remember (and log, once per `CLAIM_MEMORY_S`) that another host claimed `name`."""
        now = self.clock()
        last = self._claims.get(name)
        self._claims[name] = now
        if last is None or now - last > CLAIM_MEMORY_S:
            log.warning("sidecar %s from %s presents another credential than the host %s is bound to: "
                        "held pending (a different host claims this name)", name, peer, name)

    def _claimed(self, name: str) -> bool:
        link = self._links.get(name)
        if link is not None and link.claimed and not link.closed:
            return True
        at = self._claims.get(name)
        return at is not None and self.clock() - at <= CLAIM_MEMORY_S

    async def approve(self, name: str, *, rebind: bool = False) -> SidecarStatus:
        """Approve `name`, bound to the host connected under it now (or to its binding). A host
        claiming a name bound to another is approved only with `rebind` (it replaces that host);
        `NameClaimed` otherwise."""
        link = self._links.get(name)
        if link is not None and link.closed:
            link = None
        if link is not None and link.claimed and not rebind:
            raise NameClaimed(name, f"{claim_problem(name)}: the name is bound to another host's credential. "
                                    f"If this host replaced it, approve it with rebind (`fathom fleet approve "
                                    f"{name} --rebind`); if not, leave it pending, or revoke the name "
                                    f"(`fathom fleet revoke {name}`) and approve its own host again")
        if rebind and (link is None or link.state == "approved"):
            raise NameClaimed(name, f"{name}: no other host is connected under this name, so there is nothing "
                                    f"to rebind; a rebind hands the name to the host connected under it now")
        self.auth.approve(name, link.credential_hash if link is not None and link.state != "approved" else None)
        if rebind:
            log.warning("sidecar name %s handed to the host connected from %s by the operator", name,
                        f"{link.ws.client.host}" if link is not None and link.ws.client else "?")
            self._claims.pop(name, None)
        if link is not None and link.state != "approved":
            link.claimed = False
            log.info("sidecar %s approved by the operator", name)
            with contextlib.suppress(SidecarUnavailable):
                await link.send(p.encode(p.Status(state="approved")))
            self._activate(link)
        return self.status_of(name)

    async def revoke(self, name: str) -> SidecarStatus:
        """Withdraw approval; a connected sidecar loses its providers and pending work at once
        and is disconnected."""
        self.auth.revoke(name)
        self._claims.pop(name, None)
        link = self._links.get(name)
        if link is not None:
            log.info("sidecar %s revoked by the operator", name)
            link.state = "revoked"
            await self._drop(link, "was revoked")
            await self._close(link, CLOSE_REVOKED, "revoked")
        return self.status_of(name)

    # ---- commands -------------------------------------------------------------------------

    def key_present(self, name: str) -> bool:
        link = self._links.get(name)
        return bool(link and link.key_present)

    def route_unavailable_reason(self, provider: SidecarProvider) -> str | None:
        link = self._links.get(provider.sidecar)
        if link is None or link.closed:
            return f"sidecar {provider.sidecar} is offline"
        if not link.approved:
            return f"sidecar {provider.sidecar} is not approved"
        if provider.route == "cloud" and not link.key_present:
            return f"key missing on {provider.sidecar}"
        return None

    async def command(self, name: str, op: str, role: Role, route: str, payload: dict[str, Any],
                      *, timeout: float | None = None) -> dict[str, Any]:
        """Send one command to an approved sidecar and await its result payload."""
        link = self._links.get(name)
        if link is None or link.closed:
            raise SidecarUnavailable(name, "is not connected")
        if not link.approved:
            raise SidecarUnavailable(name, "is not approved")
        cid = _new_id()
        fut = link.pending[cid] = asyncio.get_running_loop().create_future()
        timeout = self.command_timeout if timeout is None else timeout
        try:
            await link.send(p.encode(p.Command(id=cid, op=op, role=role, route=route, payload=payload)))
            try:
                result: p.Result = await asyncio.wait_for(fut, timeout)
            except (TimeoutError, asyncio.TimeoutError):
                raise CommandTimeout(name, op, timeout) from None
        finally:
            link.pending.pop(cid, None)
        if result.ok:
            return result.payload or {}
        assert result.error is not None
        raise error_from_info(name, result.error)

    # ---- config and key push --------------------------------------------------------------

    async def push_config(self, roles: dict[Role, dict[str, Any]] | None = None, key: str | None = None,
                          *, forget_key: bool = False, timeout: float | None = None) -> PushOutcome:
        """Store `roles` changes (validated; a refusal sends nothing), then send the full role
        config — with `key` if given — to every approved, connected sidecar and await each ack.

        Without a key the sidecars merge and keep the key they hold. With one, the fact of the
        push (when, who acked, who was offline) is persisted; the key is not, anywhere.
        """
        key_sent = key is not None
        state = self.routing.update(roles) if roles else self.routing.load()
        configs = role_configs(state)
        targets = [link for link in self._links.values() if link.approved]
        outcome = PushOutcome(at=self.now(), key_sent=key_sent)
        outcome.pending = sorted(link.name for link in self._links.values() if link.state == "pending")
        connected = {link.name for link in targets}
        outcome.offline = [n for n in self.auth.approved_names() if n not in connected]
        for link in targets:
            self._sync_providers(link, state)  # a role change can add or remove cloud routes
        waiting: dict[str, asyncio.Future] = {}
        names: dict[str, str] = {}  # config id -> sidecar
        loop = asyncio.get_running_loop()
        for link in targets:
            cid = _new_id()
            fut = link.acks[cid] = loop.create_future()
            try:
                # Build, send, drop: the text holding the key lives only for this statement.
                await link.send(p.encode_config(cid, configs, key, forget_key=forget_key))
            except SidecarUnavailable:
                link.acks.pop(cid, None)
                outcome.failed[link.name] = "connection lost while sending"
            else:
                waiting[cid] = fut
                names[cid] = link.name
                if key_sent or forget_key:
                    # A new key (or none): what was known of the old one is void. Noted as it is
                    # sent, so the key check the sidecar makes on receiving it comes after.
                    self.cloud_health.note(link.name, Outcome.RESET, "key forgotten" if forget_key else "key pushed")
        key = None  # noqa: F841 - nothing below needs the key: drop this frame's reference now
        if waiting:
            await asyncio.wait(waiting.values(), timeout=self.ack_timeout if timeout is None else timeout)
        for cid, fut in waiting.items():
            name = names[cid]
            link = self._links.get(name)
            if link is not None:
                link.acks.pop(cid, None)
            if not fut.done():
                fut.cancel()
                outcome.failed[name] = "no acknowledgement in time"
            elif fut.exception() is not None:
                outcome.failed[name] = str(fut.exception())
            else:
                outcome.acked.append(name)
        outcome.acked.sort()
        if key_sent:
            self._record_push(outcome)
        log.info("config push (%s): acked by %s; offline: %s; failed: %s",
                 "with key" if key_sent else "without key", outcome.acked or "none",
                 outcome.offline or "none", sorted(outcome.failed) or "none")
        self._notify()
        return outcome

    def _record_push(self, outcome: PushOutcome) -> None:
        try:
            self.routing.record_push(PushRecord(at=outcome.at, acked=list(outcome.acked),
                                                offline=sorted([*outcome.offline, *outcome.failed])))
        except ConfigError as exc:
            log.error("could not record the key push: %s", exc)

    def last_push(self) -> PushRecord | None:
        try:
            return self.routing.load().last_push
        except ConfigError:
            return None

    # ---- status ---------------------------------------------------------------------------

    def providers(self) -> list[Provider]:
        return [prov for link in self._links.values() for prov in link.providers.values()]

    def connected(self) -> list[str]:
        return sorted(self._links)

    def problems(self) -> list[str]:
        """One line per fleet problem an operator must see, e.g. "key missing on gpu1"."""
        out = []
        try:
            cloud_wanted = bool(cloud_routes(self.routing.load()))
        except ConfigError as exc:  # said once, and the fleet's other problems still listed
            out.append(str(exc))
            cloud_wanted = False
        for link in sorted(self._links.values(), key=lambda x: x.name):
            if link.approved and link.cloud_capable and cloud_wanted and not link.key_present:
                out.append(f"key missing on {link.name}")
            if link.state == "pending" and not link.claimed:
                out.append(f"sidecar {link.name} is waiting for approval")
        for name in sorted(n for n in self._claims if self._claimed(n)):
            out.append(claim_problem(name))
        for name in self.auth.approved_names():
            link = self._links.get(name)
            if link is None or link.claimed:
                out.append(f"sidecar {name} is offline")
        return out

    def status_of(self, name: str) -> SidecarStatus:
        link = self._links.get(name)
        approval = self.auth.approval(name)
        checked = self._key_checks.get(name)
        key_check = checked.to_dict() if checked is not None else None
        if link is None:
            state = "approved" if approval else ("revoked" if self.auth.is_revoked(name) else "pending")
            return SidecarStatus(name=name, state=state, connected=False,
                                 approved_via=approval.via if approval else None,
                                 problems=[f"sidecar {name} is offline"] if approval else [],
                                 key_check=key_check)
        problems = [x for x in self.problems()
                    if x.endswith(f" {name}") or f" {name} " in x or x.startswith(f"{name}: ")]
        return SidecarStatus(
            name=name, state=link.state, connected=not link.closed,
            approved_via=approval.via if approval else None,
            routes=[r.model_dump(mode="json") for r in link.routes],
            cloud_capable=link.cloud_capable, key_present=link.key_present,
            last_seen_s=round(max(0.0, self.clock() - link.last_seen), 3),
            load=link.load, in_flight=len(link.pending), versions=dict(link.versions),
            providers=sorted(link.providers), problems=problems, claimed=link.claimed,
            key_check=key_check,
            cloud=[{"provider": pid} | self.cloud_health.of(pid, name).to_dict()
                   for pid, prov in sorted(link.providers.items()) if prov.route == "cloud"],
        )

    def sidecars(self) -> list[SidecarStatus]:
        names = set(self._links) | set(self.auth.approved_names())
        return [self.status_of(n) for n in sorted(names)]

    # ---- health ---------------------------------------------------------------------------

    async def reap(self) -> list[str]:
        """Disconnect sidecars silent for longer than `heartbeat_timeout`; returns their names."""
        now = self.clock()
        stale = [link for link in self._links.values() if now - link.last_seen > self.heartbeat_timeout]
        for link in stale:
            log.warning("sidecar %s silent for %.0fs: disconnecting it", link.name, now - link.last_seen)
            await self._drop(link, "stopped heartbeating")
            await self._close(link, CLOSE_STALE, "no heartbeat")
        return [link.name for link in stale]

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while self._links:
            await asyncio.sleep(max(1.0, self.heartbeat_timeout / 3))
            try:
                await self.reap()
            except Exception:  # noqa: BLE001
                log.exception("heartbeat reaper failed")

    async def aclose(self) -> None:
        for link in list(self._links.values()):
            await self._drop(link, "disconnected: server shutting down")
            await self._close(link, 1001, "server shutting down")
        for task in [*self._tasks, *([self._reaper] if self._reaper else [])]:
            task.cancel()
        self._tasks.clear()

    # ---- plumbing -------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # noqa: BLE001
                log.exception("fleet change listener failed")

    def _registry_add(self, provider: SidecarProvider) -> None:
        if self.registry is not None:
            self.registry.add(self.wrap(provider) if self.wrap is not None else provider)

    def _registry_remove(self, provider: SidecarProvider) -> None:
        if self.registry is not None:
            self.registry.remove(provider.id)


def _identity(provider: Provider) -> tuple[str, str, str | None, int | None]:
    """What a route is, for the gate: id, model, pin and width. A change to any of them makes
    another provider (a verdict is about one stack, and provenance names its model)."""
    i = provider.info
    return (i.id, i.model, i.upstream, i.width)


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None
