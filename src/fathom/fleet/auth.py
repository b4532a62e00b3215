"""Who may join the fleet: join tokens, per-host tokens, and the operator's approvals.

This module owns one decision — what a sidecar presenting (name, token) becomes: refused,
pending, or approved — and the file that remembers approvals (`fleet.json` under the data dir).

- A join token lets a sidecar connect; it then waits, pending, until an operator approves its
  name. Approval is per name and persists across reconnects and server restarts.
- A per-host token is bound to one sidecar name and pre-approves it.
- Revoking a name withdraws its approval and deletes its host tokens; a revoked sidecar that
  reconnects with the join token is pending again until an operator re-approves it.

It refuses to store a secret: tokens are kept only as SHA-256 hashes (tokens are random 256-bit
strings, so a plain hash is enough) and compared in constant time. A token is shown once, when
issued, and never again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field

from fathom.config import atomic_write_text
from fathom.errors import ConfigError, FathomError


class Admission(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"


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

    def __init__(self, data_dir: Path, *, join_tokens: Iterable[str] = (),
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
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
            raise ConfigError(f"{self.path} is not a valid fleet record ({type(exc).__name__}); fix or remove it") from exc

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

    def admit(self, name: str, token: str | None) -> Admission:
        """What a sidecar presenting `token` under `name` becomes; `JoinRefused` if neither a
        join token nor a host token bound to `name`."""
        if not token:
            raise JoinRefused(name, "no join token presented")
        h = hash_token(token)
        with self._lock:
            rec = self._record
            if any(hmac.compare_digest(h, x) for x in rec.host_token_hashes.get(name, [])):
                if name not in rec.approved:
                    rec.approved[name] = Approval(at=self._now(), via="host-token")
                    rec.revoked.pop(name, None)
                    self._save()
                return Admission.APPROVED
            if any(hmac.compare_digest(h, x) for hashes in rec.host_token_hashes.values() for x in hashes):
                raise JoinRefused(name, "this host token is bound to another sidecar name")
            if not any(hmac.compare_digest(h, x) for x in rec.join_token_hashes):
                raise JoinRefused(name, "wrong join token")
            return Admission.APPROVED if name in rec.approved else Admission.PENDING

    # ---- approvals ------------------------------------------------------------------------

    def is_approved(self, name: str) -> bool:
        return name in self._record.approved

    def is_revoked(self, name: str) -> bool:
        return name in self._record.revoked

    def approved_names(self) -> list[str]:
        return sorted(self._record.approved)

    def approval(self, name: str) -> Approval | None:
        return self._record.approved.get(name)

    def approve(self, name: str) -> None:
        with self._lock:
            self._record.approved[name] = Approval(at=self._now(), via="operator")
            self._record.revoked.pop(name, None)
            self._save()

    def revoke(self, name: str) -> None:
        with self._lock:
            self._record.approved.pop(name, None)
            self._record.host_token_hashes.pop(name, None)
            self._record.revoked[name] = self._now()
            self._save()
