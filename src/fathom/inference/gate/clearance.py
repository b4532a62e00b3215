"""The store's second lock: a row lands only under a cleared, current gate verdict.

`GateClearance` is the `fathom.space.Clearance` the store asks before every write and every
re-embedding. It refuses a provenance whose verdict is missing, belongs to another provider or
another vector space, was refused, was revoked by a quarantine, or has been superseded by a
newer verdict for the same provider (its model or pin changed). It refuses to probe or decide
anything itself: it only reads what the gate has decided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fathom.errors import NotCleared
from fathom.space import Provenance, Space

if TYPE_CHECKING:  # pragma: no cover
    from fathom.inference.gate.core import Gate


class GateClearance:
    def __init__(self, gate: Gate):
        self.gate = gate

    def check(self, space: Space, provenance: Provenance) -> None:
        pid, vid = provenance.provider_id, provenance.verdict_id

        def refuse(reason: str) -> NotCleared:
            return NotCleared(space.table, pid, vid, reason=reason)

        if not vid:
            raise refuse("the rows carry no gate verdict")
        verdict = self.gate.verdict_by_id(vid)
        if verdict is None:
            raise refuse(f"verdict {vid} is unknown to the gate")
        k = verdict.key
        if k.provider_id != pid:
            raise refuse(f"verdict {vid} was issued to {k.provider_id}, not to {pid}")
        if k.space != space.key or k.width != space.width:
            raise refuse(
                f"verdict {vid} clears {k.table} space {k.space} (width {k.width}), "
                f"not this table's space {space.key} (width {space.width})"
            )
        if not verdict.passed:
            raise refuse(f"the gate refused it: {verdict.reason}")
        if verdict.revoked_at is not None:
            raise refuse(f"quarantined: {verdict.revoked_reason}")
        latest = self.gate.latest_verdict(space.key, pid)
        if latest is not None and latest.verdict_id != vid:
            raise refuse(
                f"verdict {vid} is superseded by {latest.verdict_id} "
                f"({latest.status.value}); the provider's model or pin changed"
            )
