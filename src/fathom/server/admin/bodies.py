"""The bodies the admin API reads: one model per request, validated before any handler runs,
and the schema of a policy change (read by hand, see `admin.policies`).

It owns the shapes and their bounds (a sidecar name, 1-16 probe texts, a key of 8-512 characters
that `repr` hides, a path the server's file system could hold); it refuses to judge what a body
asks for: the routes and the parts behind them do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fathom.fleet.protocol import NAME_PATTERN
from fathom.index.request import Group, K, Kind, Language, PathGlob, Query, Ref, SearchRequest
from fathom.policy import Policy
from fathom.roles import FallbackMode, Role

MAX_WIDTH = 16384


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=NAME_PATTERN)


class ProbeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str
    texts: list[str] = Field(min_length=1, max_length=16)


class KeyPush(BaseModel):
    """The body of `POST /admin/key`. `repr` hides the key."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    key: str | None = Field(default=None, min_length=8, max_length=512, pattern=r"^\S+$", repr=False)
    roles: dict[str, dict[str, Any]] | None = None
    forget_key: bool = False


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str = Field(
        min_length=1, max_length=300, description="a live provider id (see GET /admin/policies)"
    )
    table: Literal["code", "docs"] | None = Field(
        default=None, description="the table to verify it for; default: every table its roles write"
    )
    force: bool = Field(default=False, description="probe again even when a verdict for it exists")


class ReembedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    encoder: str | None = Field(
        default=None,
        max_length=300,
        description="a cleared provider id; default: the table's reference encoder",
    )


class BudgetChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    override: int | None = Field(description="permits in flight, 1-256; null removes the override")


MAX_PATH_COMPONENT_BYTES = 255  # NAME_MAX of the file systems a server runs on


def check_server_path(path: str) -> str:
    """A path as the server's file system could hold it, or a ValueError saying why not: no NUL
    or other control character (the OS refuses them, and they hide in logs), and no component
    over 255 bytes (the OS answers ENAMETOOLONG)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ValueError(
            "the path holds a NUL or another control character; give the folder's path as plain text"
        )
    for part in path.split("/"):
        if len(part.encode("utf-8", errors="surrogatepass")) > MAX_PATH_COMPONENT_BYTES:
            raise ValueError(
                f"a component of the path is over {MAX_PATH_COMPONENT_BYTES} bytes, longer than any "
                f"file name can be; check the path"
            )
    return path


class JobStart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    path: str = Field(
        min_length=1, max_length=4096, description="absolute path of the project folder, on the server"
    )
    project: str = Field(min_length=1, max_length=200)
    full: bool = Field(default=False, description="rebuild in a shadow table instead of an incremental run")

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        return check_server_path(path)


class WatchChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(description="whether the project's index follows its files (live sync)")


class SearchBody(BaseModel):
    """The dashboard's search box: the same search as the MCP tools `search_code` /
    `search_docs`, its fields bounded as theirs are (`fathom.index.request`)."""

    model_config = ConfigDict(extra="forbid")

    query: Query
    project: str | None = Field(None, max_length=200, description="one project (default: every project)")
    table: Literal["code", "docs"] = Field("code", description="code (search_code) or docs (search_docs)")
    k: K = 10
    language: Language = None
    path: PathGlob = None
    kind: Kind = None
    ref: Ref = None
    group: Group = "file"

    def request(self) -> SearchRequest:
        return SearchRequest.of(
            self.query,
            self.project,
            self.table,
            self.k,
            language=self.language,
            path=self.path,
            kind=self.kind,
            group=self.group,
            ref=self.ref,
        )


ROUTE_FIELDS = ("policy", "model", "upstream", "width", "fallback")
_ROLE_CHANGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "policy": {"type": "string", "enum": [p.value for p in Policy]},
        "model": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 200}, {"type": "null"}]},
        "upstream": {
            "anyOf": [{"type": "string", "minLength": 1, "maxLength": 100}, {"type": "null"}],
            "description": "the OpenRouter upstream pin (required for a cloud embedding route)",
        },
        "width": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_WIDTH}, {"type": "null"}]},
        "fallback": {"type": "string", "enum": [f.value for f in FallbackMode]},
    },
}
POLICY_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {r.value: _ROLE_CHANGE_SCHEMA for r in Role},
    "example": {"code-embedding": {"policy": "aggregate", "upstream": "alpha"}, "rlm": {"policy": "local"}},
}
