"""Admission to the fleet: who may hold a connection, under which name, and who must wait.

This module owns the door of `/sidecar`: the join token (Authorization header, or the register
frame), the addresses and tokens refused for a while after failing (`FailedJoins`), a host
claiming a name bound to another host's credential (held pending, remembered for
`CLAIM_MEMORY_S`, shown as a problem), the name already connected, and the bound on how many
sidecars wait for approval at once (`max_pending`: a newcomer past it is told to retry later,
the ones waiting keep their place).

It refuses to keep a secret: the join token and the credential are dropped from the frame as
soon as the auth has looked at them; only the credential's hash travels on, in the `Link`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from fastapi import WebSocket

from fathom.errors import FathomError
from fathom.fleet import protocol as p
from fathom.fleet.auth import (
    Admission,
    FailedJoins,
    FleetAuth,
    JoinRefused,
    hash_credential,
)
from fathom.fleet.link import (
    CLOSE_NAME_IN_USE,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    CLOSE_TOO_MANY_FAILURES,
    CLOSE_TRY_LATER,
    CLOSE_UNAUTHORIZED,
    Link,
    parse_message,
    refuse,
)
from fathom.fleet.remote import SidecarUnavailable

log = logging.getLogger("fathom.fleet.hub")

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


class Door(Protocol):
    """What admission needs of the hub (`fathom.fleet.hub.Hub`), named here so that this module
    does not import the hub that imports it."""

    auth: FleetAuth
    failed_joins: FailedJoins
    links: dict[str, Link]
    clock: Callable[[], float]
    register_timeout: float
    pending_frame_bytes: int
    max_pending: int

    def ensure_reaper(self) -> None: ...

    def activate(self, link: Link) -> None: ...

    async def drop(self, link: Link, reason: str) -> None: ...


class Admissions:
    """The hub's door: turns a fresh WebSocket into a `Link` (or a refusal) and remembers the
    claims on names bound to other hosts."""

    def __init__(self, hub: Door):
        self.hub = hub
        self.claims: dict[str, float] = {}  # name -> when another host last claimed it (clock)
        self._pending_full_logged_at: float | None = None

    async def refuse_blocked(self, ws: WebSocket, host: str, token: str | None) -> bool:
        """Close a join from a blocked address or with a blocked token; False if neither is.
        Only ever asked about a token this server does not recognize (or none)."""
        wait = self.hub.failed_joins.blocked(host, token)
        if wait is None:
            return False
        # Accepted (if not yet) only to be closed with a code the sidecar retries on (a refused
        # handshake reads as a wrong token to it, which it does not retry); nothing is logged.
        with contextlib.suppress(Exception):
            if ws.client_state.name == "CONNECTING":
                await ws.accept()
            await ws.close(
                code=CLOSE_TOO_MANY_FAILURES, reason=f"too many failed joins; retry in {wait:.0f}s"
            )
        return True

    async def admit(self, ws: WebSocket, header_token: str | None, peer: str, host: str) -> Link | None:
        frame = await self._register_frame(ws, header_token, peer, host)
        if frame is None:
            return None
        token = header_token or (frame.token.get_secret_value() if frame.token else None)
        credential = hash_credential(frame.credential.get_secret_value()) if frame.credential else None
        try:
            if (token is None or not self.hub.auth.recognizes(token)) and await self.refuse_blocked(
                ws, host, token
            ):
                return None
            admission = self.hub.auth.admit(frame.name, token, credential)
        except JoinRefused as exc:
            self.hub.failed_joins.failed(host, token, f"sidecar {frame.name}: {exc.reason}")
            await refuse(ws, "join_refused", str(exc), CLOSE_UNAUTHORIZED)
            return None
        finally:
            token = None  # the join token is a secret too; do not keep it in this frame
            frame = frame.model_copy(update={"token": None, "credential": None})  # nor the credential
        roles = [r.role for r in frame.routes]
        if len(set(roles)) != len(roles):
            await refuse(ws, "duplicate_role", "each role may be declared once per sidecar", CLOSE_POLICY)
            return None
        if not await self._make_room(ws, frame.name, admission, peer):
            return None
        link = Link(ws, frame, admission, self.hub.clock(), credential or "")
        self.hub.links[link.name] = link
        self.hub.ensure_reaper()
        log.info(
            "sidecar %s connected from %s (%s; routes: %s)",
            link.name,
            peer,
            "claims an approved name" if link.claimed else link.state,
            ", ".join(f"{r.role}={r.backend}" for r in link.routes) or "none",
        )
        if not await self._greet(link):
            return None
        return link

    async def _register_frame(
        self, ws: WebSocket, header_token: str | None, peer: str, host: str
    ) -> p.Register | None:
        """The first frame, if it is a register frame in time; else the peer is answered (or
        counted against its address) and None."""
        timeout = self.hub.register_timeout
        try:
            message = await asyncio.wait_for(ws.receive(), timeout)
        except TimeoutError:
            await refuse(ws, "register_timeout", f"no register frame within {timeout:g}s", CLOSE_POLICY)
            return None
        except Exception:  # the peer went away before saying anything
            return None
        frame = parse_message(message, self.hub.pending_frame_bytes)
        if isinstance(frame, p.Register):
            return frame
        code, msg = (
            (frame.code, str(frame))
            if isinstance(frame, p.FrameError)
            else ("expected_register", "the first frame must be a register frame")
        )
        if message.get("code") == CLOSE_TOO_BIG:
            code, msg = "oversized", f"the first frame exceeds {self.hub.pending_frame_bytes} bytes"
        elif code == "disconnected":  # gone before saying anything: nothing to answer or count
            log.debug("sidecar connection from %s closed before registering", peer)
            return None
        if header_token is None:
            # No valid token yet: a stranger's junk counts against its address like a wrong
            # token (and from a blocked address is not even logged).
            if await self.refuse_blocked(ws, host, None):
                return None
            self.hub.failed_joins.failed(host, None, msg)
        else:
            log.warning("sidecar connection from %s refused: %s", peer, msg)
        await refuse(ws, code, msg, CLOSE_POLICY)
        return None

    async def _make_room(self, ws: WebSocket, name: str, admission: Admission, peer: str) -> bool:
        """Whether a sidecar admitted as `admission` may take `name` now: its own host takes it
        back from a claimant; anyone else waits for the name, or for room on the pending list."""
        if admission is Admission.CLAIMED:
            self.note_claim(name, peer)
        held = self.hub.links.get(name)
        if held is not None and held.claimed and admission is Admission.APPROVED:
            # The name's own host is back: the claimant holding its name gives way.
            log.warning(
                "sidecar %s connected from %s with its own credential: disconnecting the host "
                "that claimed its name",
                name,
                peer,
            )
            await self.hub.drop(held, "disconnected: the host this name belongs to connected")
            await held.close(CLOSE_NAME_IN_USE, "name taken by its own host")
        elif held is not None:
            log.log(
                logging.DEBUG if admission is Admission.CLAIMED else logging.WARNING,
                "sidecar %s from %s refused: that name is already connected",
                name,
                peer,
            )
            await refuse(ws, "name_in_use", f"a sidecar named {name} is already connected", CLOSE_NAME_IN_USE)
            return False
        if admission is not Admission.APPROVED and self.pending_count() >= self.hub.max_pending:
            self._log_pending_full(name, peer)
            await refuse(
                ws,
                "too_many_pending",
                f"{self.hub.max_pending} sidecars already wait for approval; retrying later "
                f"(an operator approves or revokes them with `fathom fleet`)",
                CLOSE_TRY_LATER,
            )
            return False
        return True

    async def _greet(self, link: Link) -> bool:
        """Tell a new link where it stands (approved, or what it waits for); False if it is gone."""
        try:
            if link.state == "approved":
                await link.send(p.encode(p.Status(state="approved")))
                self.hub.activate(link)
            elif link.claimed:
                await link.send(
                    p.encode(
                        p.Status(
                            state="pending",
                            message=f"the name {link.name} belongs to another host (another "
                            f"credential); an operator must hand it to this host "
                            f"(`fathom fleet approve {link.name} --rebind`)",
                        )
                    )
                )
            else:
                await link.send(
                    p.encode(
                        p.Status(
                            state="pending",
                            message=f"waiting for an operator to approve {link.name} "
                            f"(`fathom fleet approve {link.name}`)",
                        )
                    )
                )
        except SidecarUnavailable:
            await self.hub.drop(link, "disconnected")
            return False
        return True

    def pending_count(self) -> int:
        return sum(1 for link in self.hub.links.values() if link.state == "pending" and not link.closed)

    def _log_pending_full(self, name: str, peer: str) -> None:
        """One WARNING a minute while the pending list is full; the refusals in between at DEBUG."""
        now = self.hub.clock()
        if self._pending_full_logged_at is None or now - self._pending_full_logged_at >= 60.0:
            self._pending_full_logged_at = now
            log.warning(
                "sidecar %s from %s refused: %d sidecars already wait for approval (approve or "
                "revoke them, or rotate the join token if you did not start them)",
                name,
                peer,
                self.hub.max_pending,
            )
        else:
            log.debug("sidecar %s from %s refused: the pending list is full", name, peer)

    def note_claim(self, name: str, peer: str) -> None:
        """Remember (and log, once per `CLAIM_MEMORY_S`) that another host claimed `name`."""
        now = self.hub.clock()
        last = self.claims.get(name)
        self.claims[name] = now
        if last is None or now - last > CLAIM_MEMORY_S:
            log.warning(
                "sidecar %s from %s presents another credential than the host %s is bound to: "
                "held pending (a different host claims this name)",
                name,
                peer,
                name,
            )

    def claimed(self, name: str) -> bool:
        link = self.hub.links.get(name)
        if link is not None and link.claimed and not link.closed:
            return True
        at = self.claims.get(name)
        return at is not None and self.hub.clock() - at <= CLAIM_MEMORY_S


__all__ = ["Admissions", "CLAIM_MEMORY_S", "MAX_PENDING", "NameClaimed", "claim_problem"]
