"""Who may touch what, for people who sign in with OAuth: the operator's rules from a token's
claims (subject, email, groups) and scopes to the access an MCP token gives (its projects,
read-only or allowed to index).

The rules live in one JSON file (`FATHOM_OAUTH_MAPPING_FILE`, by default `oauth_mapping.json`
under the data dir), replaced whole through the admin API (`PUT /admin/oauth/mapping`) or the
CLI (`fathom oauth set-mapping FILE`):

    {"rules": [
      {"match": {"group": "search-admins"}, "can_index": true},
      {"match": {"email_domain": "example.com", "scope": "fathom"}, "projects": ["web", "api"]}
    ]}

A rule matches when every condition it names holds (`subject`, `email`, `email_domain`, `group`,
`scope`; `everyone: true` for all of the issuer's people); the first matching rule wins. An
`email` or `email_domain` condition holds only for a token whose `email_verified` claim is
true. Its grant is an MCP token's: `projects` (left out: every project; an empty list is refused) and
`can_index` (default false). No rule matches: the person is refused.

It validates a whole document before writing it (a refused document changes nothing) and
refuses a rule without a condition (it would be read as everyone by accident).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fathom.config import atomic_write_text
from fathom.errors import ConfigError
from fathom.server.oauth.access_tokens import Identity
from fathom.server.tokens import EMPTY_PROJECTS, Principal

FILENAME = "oauth_mapping.json"
MAX_RULES = 1000


class Match(BaseModel):
    """The conditions of one rule; every one given must hold."""

    model_config = ConfigDict(extra="forbid")

    subject: str | None = Field(default=None, max_length=500)
    email: str | None = Field(default=None, max_length=500)
    email_domain: str | None = Field(default=None, max_length=255)
    group: str | None = Field(default=None, max_length=500)
    scope: str | None = Field(default=None, max_length=200)
    everyone: bool = False

    @model_validator(mode="after")
    def _names_a_condition(self) -> Match:
        if not self.everyone and all(
            v is None for v in (self.subject, self.email, self.email_domain, self.group, self.scope)
        ):
            raise ValueError(
                "a rule must name a condition (subject, email, email_domain, group or scope), or "
                "say everyone: true"
            )
        return self

    def holds(self, who: Identity) -> bool:
        """Every condition holds; one on the email (or its domain) needs an email the issuer
        verified (`email_verified: true`), or anyone could sign up with an address there."""
        email = (who.email or "").lower()
        verified = who.email_verified and bool(email)
        return all(
            (
                self.subject is None or who.subject == self.subject,
                self.email is None or (verified and email == self.email.lower()),
                self.email_domain is None
                or (verified and email.endswith("@" + self.email_domain.lower().lstrip("@"))),
                self.group is None or self.group in who.groups,
                self.scope is None or self.scope in who.scopes,
            )
        )

    def describe(self) -> str:
        if self.everyone and not any((self.subject, self.email, self.email_domain, self.group, self.scope)):
            return "everyone"
        parts = [f"{k} {v}" for k, v in self.model_dump(exclude_none=True).items() if k != "everyone"]
        return " and ".join(parts)


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: Match
    projects: list[str] | None = Field(default=None, max_length=200)
    can_index: bool = False

    @field_validator("projects")
    @classmethod
    def _projects(cls, value: list[str] | None) -> list[str] | None:
        from fathom.index.store import check_project_name

        if value is None:
            return None
        if not value:
            raise ValueError(EMPTY_PROJECTS)
        try:
            return sorted({check_project_name(p) for p in value})
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def principal(self, who: Identity) -> Principal:
        return Principal(
            name=who.name,
            projects=None if self.projects is None else frozenset(self.projects),
            can_index=self.can_index,
            via="oauth",
        )

    def view(self) -> dict[str, Any]:
        return {
            **self.model_dump(exclude_none=False),
            "match": self.match.model_dump(exclude_none=True, exclude_defaults=True),
            "describes": self.match.describe(),
        }


class MappingDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(default_factory=list, max_length=MAX_RULES)


def parse_mapping(data: Any) -> MappingDocument:
    """A whole mapping document, validated; a `ConfigError` naming each problem otherwise."""
    try:
        return MappingDocument.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}"
            for e in exc.errors(include_input=False, include_url=False)
        ]
        raise ConfigError("the OAuth mapping is invalid: " + "; ".join(problems[:5]), problems) from None


class AccessMapping:
    """The mapping of one server, from its file; `grant` applies it to an identity."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._document = self._load()

    def _load(self) -> MappingDocument:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return MappingDocument()
        except OSError as exc:
            raise ConfigError(f"cannot read the OAuth mapping {self.path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except ValueError:
            raise ConfigError(
                f"{self.path} is not JSON; fix it, or set a new mapping (`fathom oauth set-mapping FILE`)"
            ) from None
        try:
            return parse_mapping(data)
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: {exc}", exc.problems) from None

    @property
    def rules(self) -> list[Rule]:
        return list(self._document.rules)

    def grant(self, who: Identity) -> Principal | None:
        """What the first rule that matches `who` grants; None when none does."""
        for rule in self._document.rules:
            if rule.match.holds(who):
                return rule.principal(who)
        return None

    def replace(self, data: Any) -> MappingDocument:
        """Validate `data` whole, then write it and use it; a refused one changes nothing."""
        document = parse_mapping(data)
        with self._lock:
            atomic_write_text(self.path, document.model_dump_json(indent=2, exclude_none=False))
            self._document = document
        return document

    def view(self) -> dict[str, Any]:
        return {"file": str(self.path), "rules": [r.view() for r in self._document.rules]}
