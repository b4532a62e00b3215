"""The config (and key) push: the stored role config — with the OpenRouter key when one is
given — sent to every approved, connected sidecar, each acknowledgement awaited.

It refuses to hold the key. The key is a local of `ConfigPush.push` on its way into the JSON text
of each config frame; the text is dropped once written, the key reference cleared before the
acknowledgements are awaited. No attribute, log line, exception or persisted record holds it.
What is persisted is the push fact (`RoutingState.last_push`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from fathom.config import PushRecord, RoutingStore
from fathom.errors import ConfigError
from fathom.fleet import protocol as p
from fathom.fleet.auth import FleetAuth
from fathom.fleet.link import Link, new_id
from fathom.fleet.remote import SidecarUnavailable
from fathom.fleet.routes import SidecarRoutes, role_configs
from fathom.inference.cloud_health import CloudHealth, Outcome
from fathom.roles import Role

log = logging.getLogger("fathom.fleet.hub")


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
            "at": self.at.isoformat(),
            "key_sent": self.key_sent,
            "pushed": self.pushed,
            "acked": self.acked,
            "offline": self.offline,
            "failed": self.failed,
            "pending": self.pending,
        }


class Sender(Protocol):
    """What the push needs of the hub (`fathom.fleet.hub.Hub`), named here so that this module
    does not import the hub that imports it."""

    auth: FleetAuth
    routing: RoutingStore
    links: dict[str, Link]
    routes: SidecarRoutes
    cloud_health: CloudHealth
    now: Callable[[], datetime]
    ack_timeout: float

    def notify(self) -> None: ...


class ConfigPush:
    """Sends the role config (and a key) to the fleet and records the fact of a key push."""

    def __init__(self, hub: Sender):
        self.hub = hub

    async def push(
        self,
        roles: dict[Role, dict[str, Any]] | None = None,
        key: str | None = None,
        *,
        forget_key: bool = False,
        timeout: float | None = None,
    ) -> PushOutcome:
        hub = self.hub
        key_sent = key is not None
        state = hub.routing.update(roles) if roles else hub.routing.load()
        configs = role_configs(state)
        targets = [link for link in hub.links.values() if link.approved]
        outcome = PushOutcome(at=hub.now(), key_sent=key_sent)
        outcome.pending = sorted(link.name for link in hub.links.values() if link.state == "pending")
        connected = {link.name for link in targets}
        outcome.offline = [n for n in hub.auth.approved_names() if n not in connected]
        for link in targets:
            hub.routes.sync(link, state)  # a role change can add or remove cloud routes
        waiting: dict[str, asyncio.Future[p.Ack]] = {}
        names: dict[str, str] = {}  # config id -> sidecar
        loop = asyncio.get_running_loop()
        for link in targets:
            cid = new_id()
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
                    hub.cloud_health.note(
                        link.name, Outcome.RESET, "key forgotten" if forget_key else "key pushed"
                    )
        key = None  # nothing below needs the key: drop this frame's reference now
        if waiting:
            await asyncio.wait(waiting.values(), timeout=hub.ack_timeout if timeout is None else timeout)
        self._collect(waiting, names, outcome)
        if key_sent:
            self.record(outcome)
        log.info(
            "config push (%s): acked by %s; offline: %s; failed: %s",
            "with key" if key_sent else "without key",
            outcome.acked or "none",
            outcome.offline or "none",
            sorted(outcome.failed) or "none",
        )
        hub.notify()
        return outcome

    def _collect(
        self, waiting: dict[str, asyncio.Future[p.Ack]], names: dict[str, str], outcome: PushOutcome
    ) -> None:
        """Sort the awaited acks into `outcome`: acked, or failed with the reason."""
        for cid, fut in waiting.items():
            name = names[cid]
            link = self.hub.links.get(name)
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

    def record(self, outcome: PushOutcome) -> None:
        try:
            self.hub.routing.record_push(
                PushRecord(
                    at=outcome.at,
                    acked=list(outcome.acked),
                    offline=sorted([*outcome.offline, *outcome.failed]),
                )
            )
        except ConfigError as exc:
            log.error("could not record the key push: %s", exc)

    def last(self) -> PushRecord | None:
        try:
            return self.hub.routing.load().last_push
        except ConfigError:
            return None

    async def push_stored(self, link: Link) -> None:
        """The stored config (never a key) to one newly approved link; its ack arrives on the
        receive loop."""
        try:
            configs = role_configs(self.hub.routing.load())
        except ConfigError as exc:
            log.error("cannot push config to %s: %s", link.name, exc)
            return
        cid = new_id()
        fut = link.acks[cid] = asyncio.get_running_loop().create_future()
        try:
            await link.send(p.encode_config(cid, configs))
            await asyncio.wait_for(fut, self.hub.ack_timeout)
        except Exception as exc:  # best effort; status shows the sidecar's key state
            log.info("sidecar %s did not acknowledge the stored config (%s)", link.name, type(exc).__name__)
        finally:
            link.acks.pop(cid, None)
