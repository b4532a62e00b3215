"""The five inference roles and their defaults.

This module owns the vocabulary only: which roles exist, which of them write a vector table
(stateful), and what each defaults to. It does not route anything; see `policy.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fathom.errors import InvalidRole, one_of


class Role(StrEnum):
    EMBEDDING = "embedding"
    CODE_EMBEDDING = "code-embedding"
    RERANKER = "reranker"
    CODE_ASSISTANT = "code-assistant"
    RLM = "rlm"

    @classmethod
    def parse(cls, value: str | Role) -> Role:
        return one_of(cls, value, InvalidRole, "role")

    @property
    def stateful(self) -> bool:
        """An embedding role writes a table that will be queried for months; the others
        score or generate and write nothing."""
        return self in EMBEDDING_ROLES

    @property
    def table(self) -> str | None:
        """The vector table this role writes and queries, if any."""
        return {Role.EMBEDDING: "docs", Role.CODE_EMBEDDING: "code"}.get(self)


EMBEDDING_ROLES = frozenset({Role.EMBEDDING, Role.CODE_EMBEDDING})


class FallbackMode(StrEnum):
    """How far a stateless role may fall back. `local-only` means the role never calls the
    cloud, whatever its policy says: the rlm loop can make many calls, so its cloud spend is
    opt-in."""

    ANY = "any"
    LOCAL_ONLY = "local-only"


@dataclass(frozen=True)
class RoleDefaults:
    model: str | None
    fallback: FallbackMode = FallbackMode.ANY


# One source of truth for the defaults. Embedding models are chosen per deployment because
# that choice defines what the index is: None means "the server's in-process encoder"
# (`Settings.local_model_name`, MiniLM by default); naming another model makes the local
# sidecar serving it (or, under `cloud`, the cloud anchor serving it) the table's reference.
DEFAULTS: dict[Role, RoleDefaults] = {
    Role.EMBEDDING: RoleDefaults(model=None),
    Role.CODE_EMBEDDING: RoleDefaults(model=None),
    Role.RERANKER: RoleDefaults(model="qwen/qwen3-reranker-8b"),
    Role.CODE_ASSISTANT: RoleDefaults(model="poolside/laguna-s-2.1"),
    Role.RLM: RoleDefaults(model="deepseek/deepseek-v4-flash", fallback=FallbackMode.LOCAL_ONLY),
}
