"""Sidecar-backed providers: one `Provider` per (sidecar, role, route), served over the hub.

This module owns how a sidecar route looks to the rest of the server: a `SidecarProvider` of
kind LOCAL (the sidecar's GPU or on-host server) or CLOUD (its OpenRouter route), with a stable
id the gate keys verdicts on:

    sidecar:<name>:<role>:local
    sidecar:<name>:<role>:cloud:<upstream pin or "auto">

and the typed errors a sidecar's failure becomes on this side. Routing code never learns that a
command crossed a WebSocket.

It refuses to fail silently: a cloud route on a sidecar that holds no key raises `KeyMissing`
("key missing on <sidecar>") at once, without sending anything, and a vector batch of the wrong
shape is an error, never a padded or truncated array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from fathom.errors import ProviderError, ProviderUnavailable
from fathom.fleet.protocol import ErrorInfo, Op, RouteKind, decode_vectors
from fathom.inference.cloud_health import CloudHealth, Outcome
from fathom.inference.openrouter import ContextLengthExceeded, ModelNotFound
from fathom.inference.provider import ChatResult, Kind, Provider, ProviderInfo, ToolCall
from fathom.roles import Role


class SidecarChannel(Protocol):
    """What a `SidecarProvider` needs of the hub (`fathom.fleet.hub.Hub`), named here so that
    this module does not import the hub that imports it."""

    cloud_health: CloudHealth

    def key_present(self, name: str) -> bool: ...

    def route_unavailable_reason(self, provider: SidecarProvider) -> str | None: ...

    async def command(
        self,
        name: str,
        op: Op,
        role: Role,
        route: RouteKind,
        payload: dict[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]: ...


# ---- errors -------------------------------------------------------------------------------


class SidecarUnavailable(ProviderUnavailable):
    """The sidecar is not connected, not approved, was revoked, or dropped mid-command. The
    command was not (or will never be) answered: its texts can go back to the queue."""

    def __init__(self, sidecar: str, reason: str):
        self.sidecar, self.reason = sidecar, reason
        super().__init__(f"sidecar {sidecar} {reason}")


class KeyMissing(ProviderUnavailable):
    """A cloud route on a sidecar that holds no OpenRouter key (it restarted, or no key was
    ever pushed). Waiting does not help; pushing the key does."""

    retryable = False

    def __init__(self, sidecar: str):
        self.sidecar = sidecar
        super().__init__(
            f"key missing on {sidecar}: its cloud routes are unavailable until the OpenRouter "
            f"key is pushed again (`POST /admin/key` with the key)"
        )


class CommandTimeout(ProviderError):
    def __init__(self, sidecar: str, op: str, timeout: float):
        self.sidecar, self.op, self.timeout = sidecar, op, timeout
        super().__init__(f"sidecar {sidecar} did not answer a {op} command within {timeout:g}s")


class SidecarError(ProviderError):
    """A command the sidecar answered with an error. `code` is the sidecar-side error class."""

    def __init__(self, sidecar: str, code: str, message: str, retryable: bool = True):
        self.sidecar, self.code = sidecar, code
        self.retryable = retryable
        super().__init__(f"sidecar {sidecar}: {code}: {message}")


class SidecarThrottled(SidecarError):
    """The sidecar's upstream (OpenRouter) throttled the request: the budget above every cloud
    provider must see it like a direct 429/402. `throttle_kind` is rate_limited,
    in_flight_budget or credits; `retry_after` is in seconds when the upstream said."""

    def __init__(
        self,
        sidecar: str,
        code: str,
        message: str,
        throttle_kind: str,
        retry_after: float | None,
        retryable: bool = True,
    ):
        self.throttle_kind, self.retry_after = throttle_kind, retry_after
        super().__init__(sidecar, code, message, retryable)


class BadResult(ProviderError):
    def __init__(self, sidecar: str, reason: str):
        self.sidecar = sidecar
        super().__init__(f"sidecar {sidecar} returned an unusable result: {reason}")


def error_from_info(sidecar: str, info: ErrorInfo) -> ProviderError:
    """The typed error a failed result becomes on the server."""
    if info.code == "KeyMissing":
        return KeyMissing(sidecar)
    if info.code in _MODEL_REFUSALS:
        # The model's refusal, from a local server or the sidecar's cloud route: the same type
        # on this side as the cloud client raises, so the agents can tell it from a failure.
        return _MODEL_REFUSALS[info.code](f"sidecar {sidecar}: {info.message}")
    if info.throttle_kind:
        return SidecarThrottled(
            sidecar, info.code, info.message, info.throttle_kind, info.retry_after, info.retryable
        )
    if info.code in ("SidecarUnavailable", "ProviderUnavailable", "BackendUnavailable"):
        return SidecarUnavailable(sidecar, f"cannot serve: {info.message}")
    return SidecarError(sidecar, info.code, info.message, info.retryable)


_MODEL_REFUSALS: dict[str, type[ProviderError]] = {
    "ModelNotFound": ModelNotFound,
    "ContextLengthExceeded": ContextLengthExceeded,
}


# ---- the provider -------------------------------------------------------------------------


def provider_id(sidecar: str, role: Role, route: RouteKind, upstream: str | None = None) -> str:
    if route == "local":
        return f"sidecar:{sidecar}:{role}:local"
    return f"sidecar:{sidecar}:{role}:cloud:{upstream or 'auto'}"


class SidecarProvider(Provider):
    """One route on one sidecar. Holds no socket: every call is a command through the hub."""

    def __init__(
        self,
        hub: SidecarChannel,
        sidecar: str,
        role: Role,
        route: RouteKind,
        *,
        model: str,
        width: int | None = None,
        upstream: str | None = None,
        backend: str | None = None,
        max_tokens: int | None = None,
    ):
        self.hub = hub
        self.sidecar = sidecar
        self.role = role
        self.route = route
        self.backend = backend or ("openrouter" if route == "cloud" else None)
        self.info = ProviderInfo(
            id=provider_id(sidecar, role, route, upstream),
            kind=Kind.CLOUD if route == "cloud" else Kind.LOCAL,
            roles=frozenset({role}),
            model=model,
            width=width,
            upstream=upstream,
            host=sidecar,
            max_tokens=max_tokens,
        )

    async def _call(self, op: Op, payload: dict[str, Any]) -> dict[str, Any]:
        if self.route == "cloud" and not self.hub.key_present(self.sidecar):
            raise KeyMissing(self.sidecar)
        if self.route != "cloud":
            return await self.hub.command(self.sidecar, op, self.role, self.route, payload)
        # A cloud route's health is what its calls find: serving only after one succeeded.
        try:
            result = await self.hub.command(self.sidecar, op, self.role, self.route, payload)
        except ProviderError as exc:
            self.hub.cloud_health.note_failure(self.id, exc)
            raise
        self.hub.cloud_health.note(self.id, Outcome.OK)
        return result

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        payload = await self._call("embed", {"texts": texts})
        try:
            vectors = decode_vectors(payload)
        except ValueError as exc:
            raise BadResult(self.sidecar, str(exc)) from None
        if vectors.shape[0] != len(texts):
            raise BadResult(self.sidecar, f"{vectors.shape[0]} vectors for {len(texts)} texts")
        if self.info.width is not None and vectors.shape[1] != self.info.width:
            raise BadResult(
                self.sidecar, f"vectors of width {vectors.shape[1]}, route declared {self.info.width}"
            )
        return vectors

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        documents = list(documents)
        payload = await self._call("rerank", {"query": query, "documents": documents})
        scores = payload.get("scores")
        if (
            not isinstance(scores, list)
            or len(scores) != len(documents)
            or not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores)
        ):
            raise BadResult(self.sidecar, f"expected {len(documents)} numeric scores")
        return [float(s) for s in scores]

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResult:
        payload = await self._call(
            "chat", {"messages": list(messages), "tools": list(tools) if tools else None, "options": options}
        )
        try:
            calls = tuple(
                ToolCall(
                    id=str(c["id"]),
                    name=str(c["name"]),
                    arguments=dict(c.get("arguments") or {}),
                    problem=str(c["problem"]) if c.get("problem") else None,
                )
                for c in payload.get("tool_calls") or ()
            )
            return ChatResult(
                content=payload.get("content"),
                tool_calls=calls,
                finish_reason=payload.get("finish_reason"),
                usage={str(k): int(v) for k, v in (payload.get("usage") or {}).items()},
                model=payload.get("model"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadResult(self.sidecar, f"malformed chat result ({type(exc).__name__})") from None


def chat_payload(result: ChatResult) -> dict[str, Any]:
    """The sidecar's encoding of a ChatResult (the inverse of `SidecarProvider.chat`)."""
    return {
        "content": result.content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments}
            | ({"problem": c.problem} if c.problem else {})
            for c in result.tool_calls
        ],
        "finish_reason": result.finish_reason,
        "usage": dict(result.usage),
        "model": result.model,
    }
