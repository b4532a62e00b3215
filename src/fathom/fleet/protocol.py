"""The wire protocol between the fathom server and its sidecars: versioned frames.

This module owns the frame models, their size limit, and the one function that turns bytes off
the wire into a frame or a typed rejection (`parse_frame`). Every frame carries `v` (the
protocol version) and `type` (the discriminator):

    sidecar → server   register · heartbeat · result · ack · key_check · error
    server → sidecar   status · command · config · error

It refuses three things. It never raises on hostile input: malformed JSON, an unknown type, a
future version and an oversized frame all come back as a `FrameError` value whose message names
what was wrong without echoing any of the input (a frame may carry code, or the key). It never
puts the OpenRouter key in a model the server builds: the server writes the `key` field straight
into the JSON text of one config frame (`encode_config`), so no pydantic object on the server
ever holds it; on the sidecar the parsed key is a `SecretStr`, hidden from every repr. And it
knows nothing of sockets, auth or routing.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Final, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_serializer,
    model_validator,
)

from fathom.errors import FathomError
from fathom.policy import BEHAVIOUR, Policy
from fathom.roles import EMBEDDING_ROLES, FallbackMode, Role

PROTOCOL_VERSION: Final = 1  # Final: its type is Literal[1], the one a frame's `v` accepts
# An embed result of 64 texts × 2560-d is ~0.9 MB as base64 float32; 8 MiB leaves room for
# bigger batches and chat transcripts while refusing a frame that would only be an attack.
MAX_FRAME_BYTES = 8 * 1024 * 1024
# What a connection may send before an operator approved its sidecar (the register frame, then
# heartbeats while pending): a register frame with every role declared is a few KiB. Anyone can
# open a connection, and a pending one only needs the join token: neither gets to make the
# server hold megabytes per message.
MAX_PENDING_FRAME_BYTES = 64 * 1024
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

RouteKind = Literal["local", "cloud"]
BackendKind = Literal["in-process", "openai-compatible", "tei", "openrouter"]
Op = Literal["embed", "rerank", "chat"]
FRAME_TYPES = ("register", "heartbeat", "status", "command", "result", "config", "ack", "key_check", "error")
KeyOutcome = Literal["ok", "rejected", "no_credits", "throttled", "unreachable"]
KeyCheckReason = Literal["push", "connect", "periodic", "storm"]


# A sidecar's software versions ("fathom": "0.9.1", "python": "3.11.9"): shown on the dashboard
# and in every fleet listing, so bounded small (a listing holds every pending sidecar's).
VersionName = Annotated[str, StringConstraints(min_length=1, max_length=32)]
VersionValue = Annotated[str, StringConstraints(max_length=64)]
Versions = Annotated[dict[VersionName, VersionValue], Field(max_length=16)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Frame(_Model):
    v: Literal[1] = PROTOCOL_VERSION


# ---- sidecar → server ---------------------------------------------------------------------


class RouteDecl(_Model):
    """One role a sidecar serves from a local backend, and how."""

    role: Role
    backend: BackendKind
    model: str = Field(min_length=1, max_length=256)
    width: int | None = Field(default=None, ge=1, le=16384)
    # The longest input the backend reads, in its tokens: chunks are sized to it.
    max_tokens: int | None = Field(default=None, ge=16, le=1_000_000)


class Register(_Frame):
    """First frame of a connection. `token` is the join token for clients that cannot set an
    Authorization header; `credential` is the sidecar's own secret (`fleet.identity`), which
    the server binds an approval to. Both are excluded from every repr."""

    type: Literal["register"] = "register"
    name: str = Field(pattern=NAME_PATTERN)
    routes: list[RouteDecl] = Field(default_factory=list, max_length=64)
    cloud: bool = False  # can serve OpenRouter routes once a key is pushed
    key_present: bool = False  # a reconnecting (not restarted) sidecar still holds its key
    versions: Versions = Field(default_factory=dict)
    token: SecretStr | None = Field(default=None, max_length=256)
    credential: SecretStr | None = Field(default=None, max_length=128)

    @field_serializer("token", "credential", when_used="json")
    def _reveal_secret(self, secret: SecretStr | None) -> str | None:
        # Both must reach the server in the JSON text; repr and str still hide them.
        return secret.get_secret_value() if secret is not None else None


class Heartbeat(_Frame):
    type: Literal["heartbeat"] = "heartbeat"
    load: float = Field(ge=0, le=1e6)
    in_flight: int = Field(ge=0, le=1_000_000)
    key_present: bool = False
    versions: Versions = Field(default_factory=dict)


class ErrorInfo(_Model):
    """Why a command failed. `code` is the error class; the message never carries payload
    content. `throttle_kind`/`retry_after` let the server's budget react to a rate limit."""

    code: str = Field(max_length=64)
    message: str = Field(max_length=2000)
    retryable: bool = True
    throttle_kind: Literal["429", "402"] | None = None  # what the budget's throttle_of reads
    retry_after: float | None = Field(default=None, ge=0)


class Result(_Frame):
    type: Literal["result"] = "result"
    id: str = Field(min_length=1, max_length=64)
    ok: bool
    payload: dict[str, Any] | None = None
    error: ErrorInfo | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Result:
        if self.ok and self.payload is None:
            raise ValueError("an ok result needs a payload")
        if not self.ok and self.error is None:
            raise ValueError("a failed result needs an error")
        return self


class Ack(_Frame):
    """The sidecar applied a config frame. `cloud_roles`: roles whose cloud route it can now serve."""

    type: Literal["ack"] = "ack"
    config_id: str = Field(min_length=1, max_length=64)
    key_present: bool
    cloud_roles: list[Role] = Field(default_factory=list)


INTERVAL_PATTERN = r"^[0-9A-Za-z. ]{0,16}$"  # "10s", "1m", "1h": never free text


class KeyFacts(_Model):
    """What OpenRouter's `GET /api/v1/key` and `GET /api/v1/credits` said about the key, minus
    everything secret: no key, no label (OpenRouter's masked rendering of it), no account id.
    Every figure is optional; an absent one was not reported (or not readable: only management
    keys may read the credits)."""

    rate_limit_requests: float | None = Field(default=None, ge=-1e12, le=1e12)
    rate_limit_interval: str | None = Field(default=None, max_length=16, pattern=INTERVAL_PATTERN)
    limit: float | None = Field(default=None, ge=-1e12, le=1e12)  # the key's credit cap
    limit_remaining: float | None = Field(default=None, ge=-1e12, le=1e12)
    usage: float | None = Field(default=None, ge=-1e12, le=1e12)
    is_free_tier: bool | None = None
    total_credits: float | None = Field(default=None, ge=-1e12, le=1e12)
    total_usage: float | None = Field(default=None, ge=-1e12, le=1e12)


class KeyCheck(_Frame):
    """The sidecar read its key's limits (on a key push, on connect, periodically, and after a
    storm of 429s or 402s). `outcome`: ok, rejected (401), no_credits (402), throttled (429)
    or unreachable; `facts` only when ok. The server feeds the facts to the key's budget."""

    type: Literal["key_check"] = "key_check"
    outcome: KeyOutcome
    reason: KeyCheckReason
    facts: KeyFacts | None = None


# ---- server → sidecar ---------------------------------------------------------------------


class Status(_Frame):
    """Where the sidecar stands: `pending` (waiting for an operator) or `approved`."""

    type: Literal["status"] = "status"
    state: Literal["pending", "approved"]
    message: str = ""


class Command(_Frame):
    type: Literal["command"] = "command"
    id: str = Field(min_length=1, max_length=64)
    op: Op
    role: Role
    route: RouteKind
    payload: dict[str, Any]


class RoleConfig(_Model):
    """One role's routing as the sidecar needs it. Every field is optional: a push merges
    field by field into what the sidecar holds."""

    policy: Policy | None = None
    model: str | None = None
    upstream: str | None = None
    fallback: FallbackMode | None = None
    width: int | None = Field(default=None, ge=1, le=16384)
    max_tokens: int | None = Field(default=None, ge=16, le=1_000_000)

    def cloud_allowed(self, role: Role) -> bool:
        """Whether this routing lets an OpenRouter route serve `role`: the policy's behaviour
        allows cloud, the fallback is not local-only, a model is set, and an embedding route is
        pinned to one upstream (unpinned is refused: fail closed)."""
        if self.policy is None or not BEHAVIOUR[self.policy].cloud or not self.model:
            return False
        if self.fallback is FallbackMode.LOCAL_ONLY:
            return False
        return not (role in EMBEDDING_ROLES and not self.upstream)


class Config(_Frame):
    """Routing per role, and optionally the OpenRouter key. A config without `key` keeps the key
    the sidecar holds (the normal way to change a mode or a model); `forget_key` drops it."""

    type: Literal["config"] = "config"
    id: str = Field(min_length=1, max_length=64)
    roles: dict[Role, RoleConfig] = Field(default_factory=dict)
    key: SecretStr | None = None
    forget_key: bool = False


# ---- both ways ----------------------------------------------------------------------------


class Error(_Frame):
    """A frame was refused. `ref` names the frame it answers (a command or config id)."""

    type: Literal["error"] = "error"
    code: str = Field(max_length=64)
    message: str = Field(max_length=2000)
    ref: str | None = None


Frame = Annotated[
    Register | Heartbeat | Status | Command | Result | Config | Ack | KeyCheck | Error,
    Field(discriminator="type"),
]
_FRAME = TypeAdapter(Frame)


class FrameError(FathomError):
    """A frame was refused before it was understood. `code` is one of: oversized, malformed,
    unsupported_version, unknown_type, invalid. The message describes the defect (field paths,
    sizes), never the content."""

    def __init__(self, code: str, message: str, *, ref: str | None = None):
        self.code, self.ref = code, ref
        super().__init__(message)

    def to_frame(self) -> Error:
        return Error(code=self.code, message=str(self)[:2000], ref=self.ref)


def _size(data: str | bytes) -> int:
    if isinstance(data, bytes):
        return len(data)
    return len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass"))


def parse_frame(data: str | bytes, *, max_bytes: int = MAX_FRAME_BYTES) -> Frame | FrameError:
    """The frame in `data`, or a `FrameError` saying why not. Never raises."""
    try:
        size = _size(data)
        if size > max_bytes:
            return FrameError("oversized", f"frame of {size} bytes exceeds the limit of {max_bytes} bytes")
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return FrameError("malformed", "frame is not valid UTF-8 JSON")
        if not isinstance(obj, dict):
            return FrameError("malformed", f"frame must be a JSON object, got {type(obj).__name__}")
        # The id is echoed back so the peer can match the error to its frame: only a plain
        # short token, never arbitrary text.
        rid = obj.get("id") if obj.get("id") is not None else obj.get("config_id")
        ref = (
            rid
            if isinstance(rid, str) and rid.isascii() and rid.replace("-", "").isalnum() and len(rid) <= 64
            else None
        )
        version = obj.get("v")
        if version != PROTOCOL_VERSION:
            shown = (
                version
                if isinstance(version, int) and not isinstance(version, bool)
                else "missing or not an integer"
            )
            return FrameError(
                "unsupported_version",
                f"protocol version {shown} is not supported; this side speaks v{PROTOCOL_VERSION}: "
                f"upgrade the older side",
                ref=ref,
            )
        kind = obj.get("type")
        if kind not in FRAME_TYPES:
            # The unknown value itself is not echoed: a type field is input like any other.
            shown = f"of {len(kind)} characters" if isinstance(kind, str) else "missing or not a string"
            return FrameError(
                "unknown_type", f"unknown frame type ({shown}); known: {', '.join(FRAME_TYPES)}", ref=ref
            )
        try:
            return _FRAME.validate_python(obj)
        except ValidationError as exc:
            return FrameError("invalid", f"invalid {kind} frame: {describe(exc)}", ref=ref)
    except Exception as exc:  # the contract is "never raises"
        return FrameError("malformed", f"frame could not be parsed ({type(exc).__name__})")


def describe(exc: ValidationError, limit: int = 5) -> str:
    """Field paths and messages of a validation error, without the offending input values."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False)[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ())[1:]) or "frame"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def encode(frame: BaseModel) -> str:
    """JSON text of a frame. Never used for a config frame carrying a key: see `encode_config`."""
    return frame.model_dump_json(exclude_none=True)


def encode_config(
    config_id: str, roles: dict[Role, RoleConfig], key: str | None = None, *, forget_key: bool = False
) -> str:
    """The JSON text of a config frame. The key goes straight into the text: no model, dict or
    cache outside this call's frame ever holds it, and the caller drops the text once sent."""
    # exclude_unset, not exclude_none: a field the server sets to null (a pin removed) must
    # reach the sidecar as null, while a field a partial push leaves out keeps its value there.
    frame = Config(v=PROTOCOL_VERSION, type="config", id=config_id, roles=roles, forget_key=forget_key)
    body = frame.model_dump(mode="json", exclude_unset=True)
    if key is not None:
        body["key"] = key
    try:
        return json.dumps(body, separators=(",", ":"))
    finally:
        body.clear()


# ---- payloads -----------------------------------------------------------------------------


class EmbedPayload(_Model):
    texts: list[str] = Field(max_length=4096)


class RerankPayload(_Model):
    query: str
    documents: list[str] = Field(max_length=4096)


class ChatPayload(_Model):
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    options: dict[str, Any] = Field(default_factory=dict)


def encode_vectors(vectors: np.ndarray) -> dict[str, Any]:
    """An (n, width) float32 array as a compact payload (base64 little-endian float32)."""
    arr = np.ascontiguousarray(vectors, dtype="<f4")
    if arr.ndim != 2:
        raise ValueError(f"vectors must be 2-d, got shape {arr.shape}")
    return {
        "shape": [int(arr.shape[0]), int(arr.shape[1])],
        "vectors": base64.b64encode(arr.tobytes()).decode("ascii"),
    }


def decode_vectors(payload: dict[str, Any]) -> np.ndarray:
    """The array in an embed result payload; ValueError if its shape and bytes disagree."""
    shape = payload.get("shape")
    data = payload.get("vectors")
    if not (
        isinstance(shape, list) and len(shape) == 2 and all(isinstance(d, int) and d >= 0 for d in shape)
    ):
        raise ValueError("embed result has no valid shape [n, width]")
    if not isinstance(data, str):
        raise ValueError("embed result has no vectors")
    raw = base64.b64decode(data, validate=True)
    n, width = shape
    if len(raw) != 4 * n * width:
        raise ValueError(f"embed result holds {len(raw)} bytes, shape {shape} needs {4 * n * width}")
    return np.frombuffer(raw, dtype="<f4").reshape(n, width).astype(np.float32)
