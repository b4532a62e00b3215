"""`fathom sidecar`: a GPU host's agent in the fleet.

This module owns the sidecar end: it connects out to the server's `/sidecar` WebSocket (wss;
plain ws only to a loopback address), registers the roles it serves and how, heartbeats (load,
in flight, versions, whether it holds a key), executes commands concurrently, each answered by
id, and reconnects with capped, jittered exponential backoff. It serves each role from a local
backend (`fleet.backends`) and, once the server has pushed the OpenRouter key, the cloud route
of every role whose pushed routing allows it (`RoleConfig.cloud_allowed`). Holding the key, it
is also the one that can read what the key may do: it reads OpenRouter's key-info and credits
on every key push, on reconnect, periodically and after a storm of 429s/402s, and reports only
the non-secret figures to the server's budget in a `key_check` frame (`fleet.keycheck`).

It refuses to persist or show the key: it lives in memory only, in one holder whose repr hides
it, and in the OpenRouter client built from it; a config frame without a key merges into the
held config and keeps the key; a restarted sidecar has none and says so (`key_present=False`
in every heartbeat, `KeyMissing` for every cloud command). Frame dumps and key-shaped strings
are scrubbed from its logs (`fathom.logsafe`). Its identity is a credential of its own, kept in
its state dir (`fleet.identity`) and sent in every register frame, never logged. A wrong join token is fatal (no retry loop
hammering the server); a dropped connection is not.

Entry point: `run_sidecar(...)` (async), which `fathom sidecar` (`fathom.fleet.command`) runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import platform
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr, ValidationError

from fathom import __version__, logsafe
from fathom.config import is_loopback
from fathom.errors import ConfigError, FathomError, ProviderUnavailable
from fathom.fleet import protocol as p
from fathom.fleet.backends import BackendSpec, SharedKey, open_backend, parse_serve
from fathom.fleet.defaults import DEFAULT_INTERVAL_S
from fathom.fleet.identity import default_state_dir, load_or_create_credential, new_credential
from fathom.fleet.keycheck import ThrottleStorm, check_interval, read_key
from fathom.fleet.remote import chat_payload
from fathom.inference.provider import Provider
from fathom.roles import Role

log = logging.getLogger("fathom.fleet.agent")
# websockets logs every frame at DEBUG on the logger it is given; logsafe elides their content.
wire_log = logging.getLogger("fathom.fleet.wire")

CLOSE_UNAUTHORIZED = 4401


def tls_hint(url: str, exc: BaseException) -> str:
    """What a failed TLS handshake on a `wss://` URL most often means: the server speaks plain
    HTTP (no TLS proxy in front of it), so the sidecar must dial `ws://`."""
    import ssl

    if isinstance(exc, ssl.SSLError) and url.startswith("wss://"):
        return (
            f": the TLS handshake failed, so the server likely speaks plain HTTP; without a TLS proxy in "
            f"front of it use {'ws://' + url[len('wss://') :]} (on loopback or a trusted network only)"
        )
    return ""


class SidecarRefused(FathomError):
    """The server refused this sidecar's join token: retrying cannot help."""

    def __init__(self, server: str, reason: str):
        self.server, self.reason = server, reason
        super().__init__(
            f"the server at {server} refused this sidecar: {reason}. Check --token "
            f"(the join token printed by `fathom server`, or a host token for this --name)."
        )


class InsecureServerURL(ConfigError):
    def __init__(self, url: str, host: str):
        self.url, self.host = url, host
        super().__init__(
            f"refusing plain ws:// to {host}: the OpenRouter key travels over this connection. "
            f"Use wss:// (or https://) for a remote server; plain ws:// is allowed only to loopback."
        )


class NotServed(FathomError):
    """A command for a role/route this sidecar does not serve."""


class KeyMissing(ProviderUnavailable):
    retryable = False

    def __init__(self, name: str):
        super().__init__(f"key missing on {name}: push the OpenRouter key to serve cloud routes")


def server_url(url: str, path: str = "/sidecar") -> str:
    """The WebSocket URL for `url` (http(s)://, ws(s):// or host:port); `InsecureServerURL` for
    plain ws to anything but loopback."""
    if "://" not in url:
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None:
        raise ConfigError(f"--server {url!r}: use wss://HOST[:PORT] (or https://)")
    host = parts.hostname or ""
    if not host:
        raise ConfigError(f"--server {url!r} names no host")
    if scheme == "ws" and not is_loopback(host):
        raise InsecureServerURL(url, host)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") or path, parts.query, ""))


@dataclass
class Backoff:
    """Capped exponential backoff with equal jitter: attempt k waits in [d/2, d], d = min(cap,
    initial·2^k). Jitter keeps a fleet that lost its server from reconnecting in lockstep."""

    initial: float = 0.5
    cap: float = 30.0
    rng: Callable[[], float] = random.random
    attempt: int = 0

    def next(self) -> float:
        d = min(self.cap, self.initial * (2.0 ** min(self.attempt, 30)))
        self.attempt += 1
        return d / 2 + self.rng() * d / 2

    def reset(self) -> None:
        self.attempt = 0


class _Key:
    """A secret in memory (the OpenRouter key, the sidecar's credential); no repr, str or
    pickle shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret held>"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        raise TypeError("a secret cannot be pickled")


# The throttles the budget tells apart (`ErrorInfo.throttle_kind`); any other is not one.
_THROTTLE_KINDS: dict[str, Literal["429", "402"]] = {"429": "429", "402": "402"}


def error_info(exc: BaseException) -> p.ErrorInfo:
    """A failed command as the server will see it: class name, scrubbed message, and what the
    budget needs to know about a throttle. Never the command's payload."""
    if isinstance(exc, ValidationError):
        return p.ErrorInfo(
            code="InvalidPayload", message=f"invalid command payload: {p.describe(exc)}", retryable=False
        )
    throttle = getattr(exc, "throttle_kind", None)
    if throttle is None:
        names = {"RateLimited": "429", "InFlightBudgetExhausted": "402"}
        throttle = next((names[c.__name__] for c in type(exc).__mro__ if c.__name__ in names), None)
    throttle_kind = _THROTTLE_KINDS.get(str(throttle)) if throttle is not None else None
    retry_after = getattr(exc, "retry_after", None)
    try:
        retry_after = float(retry_after) if retry_after is not None else None
    except (TypeError, ValueError):
        retry_after = None
    if retry_after is not None and not (math.isfinite(retry_after) and retry_after >= 0):
        retry_after = None
    return p.ErrorInfo(
        code=type(exc).__name__[:64],
        message=logsafe.scrub(str(exc))[:1000] or type(exc).__name__,
        retryable=bool(getattr(exc, "retryable", True)),
        throttle_kind=throttle_kind,
        retry_after=retry_after,
    )


def _versions() -> dict[str, str]:
    out = {"fathom": __version__, "protocol": str(p.PROTOCOL_VERSION), "python": platform.python_version()}
    with contextlib.suppress(Exception):
        from websockets.version import version as websockets_version

        out["websockets"] = websockets_version
    return out


class Sidecar:
    """One sidecar: what it serves, the config and key it holds, and its connection loop."""

    def __init__(
        self,
        name: str,
        backends: Mapping[Role, Provider],
        *,
        backend_kinds: Mapping[Role, p.BackendKind] | None = None,
        openrouter_base_url: str | None = None,
        cloud: bool = True,
        heartbeat_interval: float = 5.0,
        max_frame_bytes: int = p.MAX_FRAME_BYTES,
        load: Callable[[], float] | None = None,
        credential: str | None = None,
        key_check_interval: float = DEFAULT_INTERVAL_S,
    ):
        self.name = name
        # Who this sidecar is to the server. Without one from a state dir, an identity that
        # lasts as long as this object (an embedded or test sidecar).
        self._credential = _Key(credential or new_credential())
        self.backends = dict(backends)
        self.backend_kinds = dict(backend_kinds or {})
        self.openrouter_base_url = openrouter_base_url
        self.cloud = cloud and self._openrouter_available()
        self.heartbeat_interval = heartbeat_interval
        self.max_frame_bytes = max_frame_bytes
        self._load = load or _system_load
        self.config: dict[Role, p.RoleConfig] = {}
        self._key: _Key | None = None
        self._client: Any = None  # OpenRouterClient over the held key, built on first use
        self._cloud: dict[Role, Provider] = {}
        self.state: str | None = None  # pending | approved, as the server last said
        self.in_flight = 0
        self.received: Counter[str] = Counter()  # frames received, by type
        self.served: Counter[str] = Counter()  # commands answered ok, by "op:role:route"
        self.connected = asyncio.Event()
        self._send_lock: asyncio.Lock | None = None
        # Key discovery: what the held key may do is read on a push, on connect, every
        # `key_check_interval` seconds and after a storm of throttles, and reported to the server.
        self.key_check_interval = check_interval(key_check_interval)
        self._key_check_due: p.KeyCheckReason | None = None
        self._key_check_wake = asyncio.Event()
        self._storm = ThrottleStorm()

    def __repr__(self) -> str:
        return f"<Sidecar {self.name} key={'held' if self._key else 'missing'}>"

    @staticmethod
    def _openrouter_available() -> bool:
        try:
            import fathom.inference.openrouter  # noqa: F401 - imported only to see that it imports
        except ImportError:  # pragma: no cover - shipped with fathom
            return False
        return True

    @property
    def key_present(self) -> bool:
        return self._key is not None

    # ---- frames -----------------------------------------------------------------------------

    def register_frame(self) -> p.Register:
        routes = []
        for role, backend in sorted(self.backends.items()):
            routes.append(
                p.RouteDecl(
                    role=role,
                    backend=self.backend_kinds.get(role, "in-process"),
                    model=backend.info.model,
                    width=backend.info.width,
                    max_tokens=backend.info.max_tokens,
                )
            )
        return p.Register(
            name=self.name,
            routes=routes,
            cloud=self.cloud,
            key_present=self.key_present,
            versions=_versions(),
            credential=SecretStr(self._credential.reveal()),
        )

    def heartbeat_frame(self) -> p.Heartbeat:
        return p.Heartbeat(
            load=max(0.0, float(self._load())),
            in_flight=self.in_flight,
            key_present=self.key_present,
            versions=_versions(),
        )

    def cloud_roles(self) -> list[Role]:
        if not (self.cloud and self.key_present):
            return []
        return sorted(role for role, cfg in self.config.items() if cfg.cloud_allowed(role))

    async def apply_config(self, frame: p.Config) -> p.Ack:
        """Merge a pushed config field by field; take its key if it carries one, keep the held
        key if not, drop it on `forget_key`."""
        for role, incoming in frame.roles.items():
            held = self.config.get(role, p.RoleConfig())
            self.config[role] = held.model_copy(
                update={f: getattr(incoming, f) for f in incoming.model_fields_set}
            )
        if frame.forget_key:
            self._key = None
        elif frame.key is not None:
            self._key = _Key(frame.key.get_secret_value())
        await self._reset_cloud()
        if frame.key is not None and not frame.forget_key:
            self.request_key_check("push")
        log.info(
            "config applied (%d roles); key %s; cloud routes: %s",
            len(frame.roles),
            "held" if self.key_present else "missing",
            ", ".join(self.cloud_roles()) or "none",
        )
        return p.Ack(config_id=frame.id, key_present=self.key_present, cloud_roles=self.cloud_roles())

    async def _reset_cloud(self) -> None:
        """Drop the cloud providers and the client: the next cloud command rebuilds them from
        the config and key now held."""
        client, self._client, self._cloud = self._client, None, {}
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    def _cloud_provider(self, role: Role) -> Provider:
        if not self.cloud:
            raise NotServed(f"{self.name} does not serve cloud routes")
        cfg = self.config.get(role)
        if cfg is None or not cfg.cloud_allowed(role):
            raise NotServed(
                f"{self.name}: the routing of {role} does not allow a cloud route "
                f"(policy, fallback, model or upstream pin)"
            )
        prov = self._cloud.get(role)
        if prov is None:
            from fathom.inference.openrouter import OpenRouterProvider

            prov = OpenRouterProvider(
                self._openrouter_client(),
                model=cfg.model or "",
                roles=[role],
                upstream=cfg.upstream,
                width=cfg.width,
                max_tokens=cfg.max_tokens,
            )
            self._cloud[role] = prov
        return prov

    def _openrouter_client(self) -> Any:
        """The OpenRouter client over the held key, built on first use; `KeyMissing` without one."""
        if self._key is None:
            raise KeyMissing(self.name)
        if self._client is None:
            from fathom.inference.openrouter import DEFAULT_BASE_URL, OpenRouterClient

            self._client = OpenRouterClient(
                self._key.reveal(), base_url=self.openrouter_base_url or DEFAULT_BASE_URL
            )
        return self._client

    # ---- key discovery ----------------------------------------------------------------------

    def request_key_check(self, reason: p.KeyCheckReason) -> None:
        """Have the connection's key-check loop read the key's limits now."""
        self._key_check_due = self._key_check_due or reason
        self._key_check_wake.set()

    async def check_key(self, reason: p.KeyCheckReason) -> p.KeyCheck | None:
        """Read the held key's limits and credits; None when no key is held or no cloud is served."""
        if not (self.cloud and self.key_present):
            return None
        return await read_key(self._openrouter_client(), reason)

    async def _key_check_loop(self, send: Callable[[str], Any]) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._key_check_wake.wait(), self.key_check_interval)
            self._key_check_wake.clear()
            reason, self._key_check_due = self._key_check_due or "periodic", None
            frame = await self.check_key(reason)
            if frame is not None:
                await send(p.encode(frame))

    def _route(self, role: Role, route: str) -> Provider:
        if route == "cloud":
            return self._cloud_provider(role)
        backend = self.backends.get(role)
        if backend is None:
            raise NotServed(f"{self.name} serves no local route for {role}")
        return backend

    async def execute(self, cmd: p.Command) -> p.Result:
        """Run one command; every failure becomes an error result, never an exception."""
        self.in_flight += 1
        try:
            provider = self._route(cmd.role, cmd.route)
            if cmd.op == "embed":
                body = p.EmbedPayload.model_validate(cmd.payload)
                payload = p.encode_vectors(await provider.embed(body.texts))
            elif cmd.op == "rerank":
                rr = p.RerankPayload.model_validate(cmd.payload)
                payload = {"scores": [float(s) for s in await provider.rerank(rr.query, rr.documents)]}
            else:
                chat = p.ChatPayload.model_validate(cmd.payload)
                payload = chat_payload(await provider.chat(chat.messages, chat.tools, **chat.options))
            self.served[f"{cmd.op}:{cmd.role}:{cmd.route}"] += 1
            return p.Result(id=cmd.id, ok=True, payload=payload)
        except asyncio.CancelledError:
            raise
        except NotServed as exc:
            return p.Result(
                id=cmd.id, ok=False, error=p.ErrorInfo(code="NotServed", message=str(exc), retryable=False)
            )
        except Exception as exc:  # a backend failure is an answer, not a crash
            info = error_info(exc)
            log.warning("%s %s (%s) failed: %s: %s", cmd.op, cmd.role, cmd.route, info.code, info.message)
            if cmd.route == "cloud" and info.throttle_kind and self._storm.note(time.monotonic()):
                self.request_key_check("storm")
            return p.Result(id=cmd.id, ok=False, error=info)
        finally:
            self.in_flight -= 1

    # ---- the connection loop ----------------------------------------------------------------

    async def run(
        self, server: str, token: str, *, stop: asyncio.Event | None = None, backoff: Backoff | None = None
    ) -> None:
        """Connect, serve, reconnect with backoff until `stop` is set. Raises `SidecarRefused`
        if the server refuses the token."""
        import websockets
        from websockets.exceptions import InvalidStatus

        url = server_url(server)
        stop = stop or asyncio.Event()
        backoff = backoff or Backoff()
        host = urlsplit(url).hostname or ""
        while not stop.is_set():
            close_code = None
            try:
                async with websockets.connect(
                    url,
                    additional_headers={"Authorization": f"Bearer {token}"},
                    max_size=self.max_frame_bytes,
                    # No permessage-deflate: a compressor's window would keep the key-carrying
                    # frame in memory on both ends after it was sent.
                    compression=None,
                    proxy=None if is_loopback(host) else True,
                    logger=wire_log,
                    open_timeout=10,
                ) as ws:
                    served = await self._session(ws, stop)
                    close_code = ws.close_code
                    if served:
                        backoff.reset()
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    raise SidecarRefused(url, f"HTTP {status} at connect (wrong join token)") from None
                log.warning("server %s answered HTTP %d at connect; retrying", url, status)
            except (OSError, TimeoutError) as exc:
                log.warning("cannot reach %s (%s)%s; retrying", url, type(exc).__name__, tls_hint(url, exc))
            except Exception as exc:  # any other connection failure: back off and retry
                log.warning("connection to %s failed (%s); retrying", url, type(exc).__name__)
            finally:
                self.connected.clear()
                self.state = None
            if close_code == CLOSE_UNAUTHORIZED:
                raise SidecarRefused(url, "the join token was refused")
            if stop.is_set():
                break
            delay = backoff.next()
            log.info("reconnecting to %s in %.1fs", url, delay)
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def _session(self, ws: Any, stop: asyncio.Event) -> bool:
        """Serve one connection; True once the server accepted the registration."""
        from websockets.exceptions import ConnectionClosed

        self._send_lock = asyncio.Lock()
        tasks: set[asyncio.Task[None]] = set()
        accepted = False

        async def send(text: str) -> None:
            assert self._send_lock is not None
            async with self._send_lock:
                await ws.send(text)

        async def heartbeats() -> None:
            while True:
                await asyncio.sleep(self.heartbeat_interval)
                await send(p.encode(self.heartbeat_frame()))

        async def answer(cmd: p.Command) -> None:
            result = await self.execute(cmd)
            with contextlib.suppress(ConnectionClosed):
                await send(p.encode(result))

        async def stopper() -> None:
            await stop.wait()
            await ws.close(1001, "sidecar stopping")

        await send(p.encode(self.register_frame()))
        if self.key_present:  # a reconnect: the server's budget may have restarted knowing nothing
            self.request_key_check("connect")
        helpers = [
            asyncio.create_task(heartbeats()),
            asyncio.create_task(stopper()),
            asyncio.create_task(self._key_check_loop(send)),
        ]
        try:
            async for message in ws:
                frame = p.parse_frame(message, max_bytes=self.max_frame_bytes)
                if isinstance(frame, p.FrameError):
                    log.warning("refused a frame from the server (%s): %s", frame.code, frame)
                    await send(p.encode(frame.to_frame()))
                    continue
                self.received[frame.type] += 1
                if isinstance(frame, p.Status):
                    accepted = True
                    self.state = frame.state
                    self.connected.set()
                    if frame.state == "pending":
                        log.warning("connected; pending approval: %s", frame.message or "ask an operator")
                    else:
                        log.info("connected and approved as %s", self.name)
                elif isinstance(frame, p.Command):
                    task = asyncio.create_task(answer(frame))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                elif isinstance(frame, p.Config):
                    ack = await self.apply_config(frame)
                    del frame  # the parsed frame holds the key: keep no reference past this point
                    await send(p.encode(ack))
                elif isinstance(frame, p.Error):
                    log.warning("server reported %s: %s", frame.code, frame.message)
                else:
                    await send(
                        p.encode(
                            p.Error(
                                code="unexpected_frame", message=f"a server does not send {frame.type} frames"
                            )
                        )
                    )
                message = None
        except ConnectionClosed:
            pass
        finally:
            for task in [*helpers, *tasks]:
                task.cancel()
            await asyncio.gather(*helpers, *tasks, return_exceptions=True)
            if ws.close_code is not None and ws.close_code not in (1000, 1001):
                log.warning(
                    "connection closed by the server (code %s%s)",
                    ws.close_code,
                    f": {ws.close_reason}" if ws.close_reason else "",
                )
        return accepted

    async def aclose(self) -> None:
        await self._reset_cloud()
        for backend in {id(b): b for b in self.backends.values()}.values():
            with contextlib.suppress(Exception):
                await backend.aclose()


def _system_load() -> float:
    try:
        return os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except (OSError, AttributeError):
        return 0.0


async def open_backends(
    specs: Sequence[str | BackendSpec],
) -> tuple[dict[Role, Provider], dict[Role, p.BackendKind]]:
    """Build (and, for in-process models, load off the event loop) the backends of `specs`."""
    parsed = [s if isinstance(s, BackendSpec) else parse_serve(s) for s in specs]
    roles = [s.role for s in parsed]
    if len(set(roles)) != len(roles):
        raise ConfigError("each role may be served once per sidecar: drop the duplicate --serve")
    shared: dict[SharedKey, Provider] = {}
    backends: dict[Role, Provider] = {}
    kinds: dict[Role, p.BackendKind] = {}
    for spec in parsed:
        backend = await open_backend(spec, shared=shared)
        if spec.kind == "in-process":
            await asyncio.to_thread(backend.load)  # type: ignore[attr-defined]  # in-process: has load
        backends[spec.role] = backend
        kinds[spec.role] = spec.kind
    return backends, kinds


async def run_sidecar(
    server: str,
    token: str,
    name: str,
    serve: Sequence[str | BackendSpec] = (),
    *,
    openrouter_base_url: str | None = None,
    cloud: bool = True,
    heartbeat_interval: float = 5.0,
    stop: asyncio.Event | None = None,
    backoff: Backoff | None = None,
    on_ready: Callable[[Sidecar], None] | None = None,
    state_dir: Path | None = None,
    key_check_interval: float = DEFAULT_INTERVAL_S,
) -> None:
    """Open the backends of `serve`, then connect to `server` and serve until `stop` is set,
    under the credential kept in `state_dir` (default: `default_state_dir()`). Raises
    `SidecarRefused` (wrong token) or `ConfigError` (bad --serve, insecure URL, unusable state dir)."""
    server_url(server)  # refuse a bad or insecure URL before loading any model
    check_interval(key_check_interval)
    credential = load_or_create_credential(state_dir or default_state_dir())
    backends, kinds = await open_backends(serve)
    sidecar = Sidecar(
        name,
        backends,
        backend_kinds=kinds,
        openrouter_base_url=openrouter_base_url,
        cloud=cloud,
        heartbeat_interval=heartbeat_interval,
        credential=credential,
        key_check_interval=key_check_interval,
    )
    del credential  # the sidecar holds it now, hidden from every repr
    if on_ready is not None:
        on_ready(sidecar)
    try:
        await sidecar.run(server, token, stop=stop, backoff=backoff)
    finally:
        await sidecar.aclose()
