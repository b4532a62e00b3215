"""MCP tokens: what a developer's MCP client holds instead of the admin token.

This module owns the tokens (`mcp_tokens.json` under the data dir), who a request is once its
token is known (`Principal`), and the admin API over them (`tokens_router`: create, list,
revoke, and the audit log's read side).

An MCP token has a name (who the audit log says acted), the projects it sees (left out: every
project; an empty list is refused, never read as every project) and whether it may index (`can_index`, and then only under the folders the operator
listed in `FATHOM_INDEX_ROOTS`). It opens `/mcp` and nothing under `/admin`; the admin token
opens everything, `/mcp` included. Which tool may do what with a principal is the MCP
endpoint's (`server.mcp_http`); which projects a scope sees, `fathom.scope`.

It refuses to keep a token: each is shown once, when created, as `fm_…`, and only its SHA-256
is kept (a random 256-bit string: a plain hash is enough), compared in constant time. Revoking
removes it from memory and the file at once, so its next request is refused.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fathom.config import atomic_write_text
from fathom.errors import ConfigError, FathomError
from fathom.fleet.auth import hash_token, new_token
from fathom.fleet.protocol import NAME_PATTERN
from fathom.server.audit import AuditLog

MCP_TOKEN_PREFIX = "fm"
MAX_TOKENS = 1000
EMPTY_PROJECTS = (
    "the token's project list is empty; name at least one project (`--project NAME`), or leave the "
    "list out for a token that sees every project"
)


@dataclass(frozen=True)
class Principal:
    """Who a request is: the admin (everything), or an MCP token with its scope."""

    name: str
    admin: bool = False
    projects: frozenset[str] | None = None  # None: every project
    can_index: bool = True
    via: str = "mcp"  # how it signed in: `mcp` (an `fm_` token) or `oauth` (a person, `server.oauth`)

    @classmethod
    def operator(cls, name: str = "admin") -> Principal:
        return cls(name=name, admin=True)

    @property
    def who(self) -> str:
        """The audit log's name for it."""
        return self.name if self.admin else f"{self.via}:{self.name}"

    def sees(self, project: str) -> bool:
        return self.projects is None or project in self.projects

    def describe_projects(self) -> str:
        return (
            "every project" if self.projects is None else (", ".join(sorted(self.projects)) or "no project")
        )


class TokenRecord(BaseModel):
    """One MCP token as `mcp_tokens.json` keeps it: its hash, never the token."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    token_hash: str
    projects: list[str] | None = None
    can_index: bool = False
    created_at: datetime

    def principal(self) -> Principal:
        return Principal(
            name=self.name,
            projects=None if self.projects is None else frozenset(self.projects),
            can_index=self.can_index,
        )

    def view(self) -> dict[str, Any]:
        """What the API and the CLI show: everything but the hash."""
        return {
            "name": self.name,
            "projects": self.projects,
            "can_index": self.can_index,
            "created_at": self.created_at.isoformat(timespec="seconds"),
        }


class TokenFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[TokenRecord] = Field(default_factory=list)


class UnknownToken(FathomError):
    def __init__(self, name: str, known: Iterable[str]):
        known = sorted(known)
        super().__init__(
            f"no MCP token named {name!r}"
            + (
                f"; the tokens are {', '.join(known)}"
                if known
                else "; none has been created (`fathom tokens create`)"
            )
        )


class TokenExists(FathomError):
    def __init__(self, name: str):
        super().__init__(
            f"an MCP token named {name!r} exists already; revoke it first (`fathom tokens revoke "
            f"{name}`) or choose another name"
        )


class McpTokens:
    """The MCP tokens of one server, as hashes in `mcp_tokens.json`."""

    FILENAME = "mcp_tokens.json"

    def __init__(self, data_dir: Path, *, now: Callable[[], datetime] = lambda: datetime.now(tz=UTC)):
        self.path = Path(data_dir) / self.FILENAME
        self._now = now
        self._lock = threading.Lock()
        self._file = self._load()

    def _load(self) -> TokenFile:
        try:
            return TokenFile.model_validate(json.loads(self.path.read_text()))
        except FileNotFoundError:
            return TokenFile()
        except (ValueError, OSError, ValidationError) as exc:
            raise ConfigError(
                f"{self.path} is not a valid MCP token record ({type(exc).__name__}); fix it, or "
                f"remove it and create the tokens again"
            ) from exc

    def _save(self, file: TokenFile) -> None:
        atomic_write_text(self.path, file.model_dump_json(indent=2))

    def create(
        self, name: str, projects: Iterable[str] | None = None, can_index: bool = False
    ) -> tuple[TokenRecord, str]:
        """A new token; returns its record and the token itself, to be shown once."""
        from fathom.index.store import check_project_name

        listed = None if projects is None else sorted({check_project_name(p) for p in projects})
        if listed is not None and not listed:
            # Fail closed: an empty list is a mistake (a script's empty variable), never "all".
            raise ConfigError(EMPTY_PROJECTS, [EMPTY_PROJECTS])
        token = new_token(MCP_TOKEN_PREFIX)
        record = TokenRecord(
            name=name,
            token_hash=hash_token(token),
            projects=listed,
            can_index=can_index,
            created_at=self._now(),
        )
        with self._lock:
            if any(r.name == name for r in self._file.tokens):
                raise TokenExists(name)
            if len(self._file.tokens) >= MAX_TOKENS:
                raise ConfigError(
                    f"this server holds {MAX_TOKENS} MCP tokens already; revoke unused ones first"
                )
            updated = TokenFile(tokens=[*self._file.tokens, record])
            self._save(updated)  # on disk first: a failed write leaves the tokens as they were
            self._file = updated
        return record, token

    def revoke(self, name: str) -> TokenRecord:
        with self._lock:
            found = next((r for r in self._file.tokens if r.name == name), None)
            if found is None:
                raise UnknownToken(name, (r.name for r in self._file.tokens))
            updated = TokenFile(tokens=[r for r in self._file.tokens if r.name != name])
            self._save(updated)
            self._file = updated
        return found

    def all(self) -> list[TokenRecord]:
        return list(self._file.tokens)

    def find(self, token: str | None) -> TokenRecord | None:
        """The record of `token`, or None (compared with every hash, in constant time each)."""
        if not token:
            return None
        h = hash_token(token)
        found = None
        for record in self._file.tokens:
            if hmac.compare_digest(h, record.token_hash):
                found = record
        return found


# ---------------------------------------------------------------------------- the admin API


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="who the token is for; the audit log names it")
    projects: list[str] | None = Field(
        default=None, max_length=200, description="the projects it sees; none: every project"
    )
    can_index: bool = Field(
        default=False, description="may call index_project, under FATHOM_INDEX_ROOTS only"
    )


def tokens_router(
    tokens: McpTokens,
    audit: AuditLog,
    require_admin: Callable[[Request], None],
    index_roots: Callable[[], list[str]],
) -> APIRouter:
    """`/admin/tokens` (create, list, revoke) and `/admin/audit` (read the audit log)."""
    import asyncio

    from fathom.server.answers import refusal

    router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

    @router.get("/tokens", tags=["tokens"])
    async def list_tokens() -> dict[str, Any]:
        """Every MCP token: name, projects, whether it may index, when created. Never a token."""
        return {"tokens": [r.view() for r in tokens.all()], "index_roots": index_roots()}

    @router.post("/tokens", tags=["tokens"], status_code=201)
    async def create_token(body: TokenCreate, request: Request) -> dict[str, Any]:
        """Create an MCP token; the answer carries it, once. Only its hash is kept."""
        try:
            record, token = await asyncio.to_thread(tokens.create, body.name, body.projects, body.can_index)
        except TokenExists as exc:
            raise refusal(409, str(exc)) from None
        except ConfigError as exc:
            raise refusal(400, str(exc), exc.problems) from None
        request.scope["fathom.audit"] = (
            f"created MCP token {record.name} (projects: "
            f"{record.principal().describe_projects()}; "
            f"{'may index' if record.can_index else 'read-only'})"
        )
        return {**record.view(), "token": token, "note": "shown once; only its hash is kept"}

    @router.post("/tokens/{name}/revoke", tags=["tokens"])
    async def revoke_token(name: str, request: Request) -> dict[str, Any]:
        """Revoke an MCP token: its next request is refused."""
        try:
            record = await asyncio.to_thread(tokens.revoke, name)
        except UnknownToken as exc:
            raise refusal(404, str(exc)) from None
        request.scope["fathom.audit"] = f"revoked MCP token {record.name}"
        return {**record.view(), "revoked": True}

    @router.get("/audit", tags=["audit"])
    async def read_audit(limit: int = Query(default=100, ge=1, le=10_000)) -> dict[str, Any]:
        """The latest entries of the audit log, oldest first: when, who, what, outcome."""
        return {"entries": await asyncio.to_thread(audit.read, limit), "path": str(audit.path)}

    return router
