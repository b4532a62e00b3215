"""A vector space: the identity of one embedding table, and who may write into it.

A table is one vector space of one fixed width, defined by its reference encoder. `Space` is
that identity; `Clearance` is the store's question to the gate ("is this provenance a cleared
verdict for this space?"). The store asks it before every write, so a row from an unverified
encoder cannot land even if a caller forgot to ask the gate (the store is the second lock).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

from fathom.errors import NotCleared


@dataclass(frozen=True)
class Space:
    table: str  # "code" or "docs"
    model: str  # the reference encoder's model id
    width: int
    reference: str  # the reference encoder's provider id

    @property
    def key(self) -> str:
        """A short stable id for the space, used to key verdicts and golden vectors."""
        raw = f"{self.table}|{self.model}|{self.width}|{self.reference}"
        return f"{self.table}-{self.width}-{hashlib.sha256(raw.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Provenance:
    """Who wrote a row: the provider, the gate verdict that cleared it, and when."""

    provider_id: str
    verdict_id: str | None


class Clearance(Protocol):
    def check(self, space: Space, provenance: Provenance) -> None:
        """Return if `provenance` is a cleared verdict for `space`; raise `NotCleared`."""
        ...


class ReferenceOnlyClearance:
    """Before any other verdict exists, only the space's own reference encoder may write."""

    def check(self, space: Space, provenance: Provenance) -> None:
        if provenance.provider_id != space.reference:
            raise NotCleared(
                space.table,
                provenance.provider_id,
                provenance.verdict_id,
                reason=f"only the reference encoder {space.reference!r} is cleared",
            )
