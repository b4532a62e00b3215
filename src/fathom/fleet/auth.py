"""Who may join the fleet: join tokens, per-host tokens, the operator's approvals, and the
sidecar credentials approvals are bound to.

This module owns one decision — what a sidecar presenting (name, token, credential) becomes:
refused, pending, approved, or a claimant of a name bound to another host — and the file that
remembers approvals (`fleet.json` under the data dir). It also owns the limit on failed joins
per address and per presented token (`FailedJoins`).

- A join token lets a sidecar connect; it then waits, pending, until an operator approves its
  name. Approval persists across reconnects and server restarts.
- An approval is bound to the sidecar's own credential (`fleet.identity`): the one connected
  when the operator approved it, or, for a name approved before any sidecar connected under it
  (or by a host token), the first one that connects. A connection under an approved name with
  another credential is a claim: it stays pending, never approved, until an operator hands the
  name to that host explicitly (`approve(..., rebind)`).
- A per-host token is bound to one sidecar name and pre-approves it.
- Revoking a name withdraws its approval, its credential binding and its host tokens; a revoked
  sidecar that reconnects with the join token is pending again until an operator re-approves it.

It refuses to store a secret: tokens and credentials are kept only as SHA-256 hashes (both are
random 256-bit strings, so a plain hash is enough) and compared in constant time. A token is
shown once, when issued, and never again; a credential never leaves its sidecar but as its
register frame.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fathom.config import atomic_write_text
from fathom.errors import ConfigError, FathomError


class Admission(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    CLAIMED = "claimed"  # an approved name, presented with a credential it is not bound to


class JoinRefused(FathomError):
    """A sidecar's token is missing, wrong, or bound to another name."""

    def __init__(self, name: str | None, reason: str):
        self.name, self.reason = name, reason
        super().__init__(
            f"sidecar {name or '<unnamed>'} refused: {reason}. Use the join token printed by "
            f"`fathom server` (or a host token from `POST /admin/fleet/tokens`)."
        )


def hash_token(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: datetime
    via: str  # "operator" or "host-token"
    # The hash of the credential of the host this name belongs to; None until one binds it.
    credential_hash: str | None = None


class FleetRecord(BaseModel):
    """What `fleet.json` holds. Hashes only; `extra="forbid"` keeps anything else out."""

    model_config = ConfigDict(extra="forbid")

    join_token_hashes: list[str] = Field(default_factory=list)
    host_token_hashes: dict[str, list[str]] = Field(default_factory=dict)  # name -> hashes
    approved: dict[str, Approval] = Field(default_factory=dict)
    revoked: dict[str, datetime] = Field(default_factory=dict)


@dataclass(frozen=True)
class IssuedToken:
    """A freshly issued token: the caller shows `token` once and must not persist it."""

    token: str
    name: str | None  # bound sidecar name for a host token; None for a join token

    def __repr__(self) -> str:
        return f"IssuedToken(name={self.name!r}, token=<hidden>)"


class FleetAuth:
    FILENAME = "fleet.json"

    def __init__(
        self,
        data_dir: Path,
        *,
        join_tokens: Iterable[str] = (),
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.path = Path(data_dir) / self.FILENAME
        self._now = now
        self._lock = threading.Lock()
        self._record = self._load()
        # Tokens configured at start (env, arguments) join the persisted ones, as hashes only.
        changed = False
        for token in join_tokens:
            h = hash_token(token)
            if h not in self._record.join_token_hashes:
                self._record.join_token_hashes.append(h)
                changed = True
        if changed:
            self._save()

    # ---- persistence ----------------------------------------------------------------------

    def _load(self) -> FleetRecord:
        if not self.path.exists():
            return FleetRecord()
        try:
            return FleetRecord.model_validate(json.loads(self.path.read_text()))
        except (ValueError, OSError) as exc:
            raise ConfigError(
                f"{self.path} is not a valid fleet record ({type(exc).__name__}); fix or remove it"
            ) from exc

    def _save(self) -> None:
        atomic_write_text(self.path, self._record.model_dump_json(indent=2))

    # ---- tokens ---------------------------------------------------------------------------

    @property
    def has_join_token(self) -> bool:
        return bool(self._record.join_token_hashes)

    def issue_join_token(self) -> IssuedToken:
        token = new_token("fj")
        with self._lock:
            self._record.join_token_hashes.append(hash_token(token))
            self._save()
        return IssuedToken(token=token, name=None)

    def replace_join_tokens(self, token: str | None = None) -> IssuedToken | None:
        """Rotation: every join token known so far stops working (host tokens and approvals
        stay). `token` (one set in the environment) becomes the only one; without it a fresh one
        is issued and returned, to be shown once."""
        if token is None:
            fresh = IssuedToken(token=new_token("fj"), name=None)
        with self._lock:
            self._record.join_token_hashes = [hash_token(token if token is not None else fresh.token)]
            self._save()
        return None if token is not None else fresh

    def issue_host_token(self, name: str) -> IssuedToken:
        """A token that pre-approves exactly `name`."""
        token = new_token("fh")
        with self._lock:
            self._record.host_token_hashes.setdefault(name, []).append(hash_token(token))
            self._save()
        return IssuedToken(token=token, name=name)

    def recognizes(self, token: str) -> bool:
        """Whether `token` is any join or host token (checked at connect, before a name is known)."""
        h = hash_token(token)
        rec = self._record
        hashes = [*rec.join_token_hashes, *(x for xs in rec.host_token_hashes.values() for x in xs)]
        return any(hmac.compare_digest(h, x) for x in hashes)

    def admit(self, name: str, token: str | None, credential_hash: str | None) -> Admission:
        """What a sidecar presenting `token` under `name` with the credential hashed as
        `credential_hash` becomes; `JoinRefused` if neither a join token nor a host token bound
        to `name`, or no credential."""
        if not token:
            raise JoinRefused(name, "no join token presented")
        if not credential_hash:
            raise JoinRefused(
                name,
                "no sidecar credential presented (a sidecar older than this server?); upgrade the sidecar",
            )
        h = hash_token(token)
        with self._lock:
            rec = self._record
            if any(hmac.compare_digest(h, x) for x in rec.host_token_hashes.get(name, [])):
                if name not in rec.approved:
                    rec.approved[name] = Approval(at=self._now(), via="host-token")
                    rec.revoked.pop(name, None)
                    self._save()
                return self._bind(name, credential_hash)
            if any(hmac.compare_digest(h, x) for hashes in rec.host_token_hashes.values() for x in hashes):
                raise JoinRefused(name, "this host token is bound to another sidecar name")
            if not any(hmac.compare_digest(h, x) for x in rec.join_token_hashes):
                raise JoinRefused(name, "wrong join token")
            return self._bind(name, credential_hash) if name in rec.approved else Admission.PENDING

    def _bind(self, name: str, credential_hash: str) -> Admission:
        """An approved name meets a credential: the first one binds it (the approval was given
        before any host connected under it); afterwards only that one is approved."""
        approval = self._record.approved[name]
        if approval.credential_hash is None:
            approval.credential_hash = credential_hash
            self._save()
            return Admission.APPROVED
        if hmac.compare_digest(approval.credential_hash, credential_hash):
            return Admission.APPROVED
        return Admission.CLAIMED

    # ---- approvals ------------------------------------------------------------------------

    def is_revoked(self, name: str) -> bool:
        return name in self._record.revoked

    def approved_names(self) -> list[str]:
        return sorted(self._record.approved)

    def approval(self, name: str) -> Approval | None:
        return self._record.approved.get(name)

    def approve(self, name: str, credential_hash: str | None = None) -> None:
        """Approve `name`, bound to `credential_hash` (the host connected under it now), or, with
        none, to the binding it already has (the first host to connect, if it has none yet)."""
        with self._lock:
            held = self._record.approved.get(name)
            bound = credential_hash or (held.credential_hash if held else None)
            self._record.approved[name] = Approval(at=self._now(), via="operator", credential_hash=bound)
            self._record.revoked.pop(name, None)
            self._save()

    def revoke(self, name: str) -> None:
        with self._lock:
            self._record.approved.pop(name, None)
            self._record.host_token_hashes.pop(name, None)
            self._record.revoked[name] = self._now()
            self._save()


def hash_credential(credential: str) -> str:
    """What the server keeps of a sidecar credential (random 256 bits: a plain hash is enough)."""
    return hash_token(credential)


class FailedJoins:
    """Failed joins, counted twice: per peer address and per presented token (by a digest of its
    hash, never the token). A burst is allowed, then joins from that address, or presenting that
    token, are refused for `block_s` without being looked at further.

    What it refuses to do is lock out a valid token: the hub consults it only for a token that is
    no join or host token of this server (or for none), so ten wrong tokens from an address —
    a same-host TLS proxy every sidecar shares, or an attacker who can only forge headers — never
    keep out a sidecar presenting the right one. Counting per token as well catches one wrong
    token tried from many addresses.

    The address is the ASGI client address: the TCP peer, or what a proxy the server was told
    to trust (`--forwarded-allow-ips`) says; this module never reads a forwarded header itself.

    What the log gets is collapsed: the first failure of a window, one line when a source is
    blocked, and one count of what was refused while it was — never a line per attempt (a
    flood of wrong tokens would otherwise be a flood of WARNINGs). Memory is bounded: at most
    `max_sources` addresses and tokens are remembered, oldest dropped first.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        log: logging.Logger,
        burst: int = 10,
        window_s: float = 60.0,
        block_s: float = 300.0,
        max_sources: int = 4096,
    ):
        self.clock, self.log = clock, log
        self.burst, self.window_s, self.block_s, self.max_sources = burst, window_s, block_s, max_sources
        self._seen: OrderedDict[str, _Failures] = OrderedDict()

    @staticmethod
    def sources(address: str, token: str | None) -> list[str]:
        """What one join attempt is counted under: its address, and the token it presented."""
        out = [f"from {address}"]
        if token:
            # 48 bits of the token's hash: tells wrong tokens apart in a log line, reveals nothing.
            out.append(f"presenting token #{hash_token(token).removeprefix('sha256:')[:12]}")
        return out

    def blocked(self, address: str, token: str | None = None) -> float | None:
        """Seconds left on the longest block of `address` or `token` (the attempt is counted as
        refused while blocked), or None if it may try. Call it only for a token this server does
        not recognize: a valid token is never refused here."""
        now = self.clock()
        left: float | None = None
        for source in self.sources(address, token):
            f = self._seen.get(source)
            if f is None or f.blocked_until is None:
                continue
            if f.blocked_until > now:
                f.refused_while_blocked += 1
                left = max(left or 0.0, f.blocked_until - now)
            else:
                self._unblock(source, f)
        return left

    def failed(self, address: str, token: str | None, reason: str) -> None:
        """Record a failed join from `address` presenting `token` (None: none) for `reason`
        (which names no secret)."""
        for source in self.sources(address, token):
            self._count(source, reason)

    def _count(self, source: str, reason: str) -> None:
        now = self.clock()
        f = self._seen.get(source)
        if f is not None and f.blocked_until is not None and now >= f.blocked_until:
            self._unblock(source, f)
            f = None
        if f is None or now - f.window_start > self.window_s:
            f = self._seen[source] = _Failures(window_start=now)
            self._seen.move_to_end(source)
            while len(self._seen) > self.max_sources:
                self._seen.popitem(last=False)
        f.count += 1
        if f.count == 1:
            self.log.warning("sidecar join %s refused: %s", source, reason)
        elif f.count == self.burst:
            f.blocked_until = now + self.block_s
            self.log.warning(
                "refusing sidecar joins %s without a valid token for %.0fs: %d failed joins "
                "within %.0fs (last: %s)",
                source,
                self.block_s,
                f.count,
                now - f.window_start,
                reason,
            )
        else:
            self.log.debug("sidecar join %s refused: %s", source, reason)

    def _unblock(self, source: str, f: _Failures) -> None:
        if f.refused_while_blocked:
            self.log.warning(
                "sidecar joins %s: %d refused while blocked; the block has ended",
                source,
                f.refused_while_blocked,
            )
        self._seen.pop(source, None)


@dataclass
class _Failures:
    window_start: float
    count: int = 0
    blocked_until: float | None = None
    refused_while_blocked: int = 0
