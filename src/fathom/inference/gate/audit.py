"""Provenance audit and repair: which rows each verdict wrote, and re-embedding the suspect ones.

After a quarantine, the rows a provider wrote since its last good check are suspect: the
drift happened somewhere in that window. `audit` counts rows per verdict in a project's
tables and lists those suspect rows; `reembed` gives exactly them new vectors from an encoder
the gate has cleared for the table, through the store's clearance check like any write.

It refuses to delete rows, to re-embed with an uncleared encoder, or to touch rows outside
the suspect window. It needs only the store primitives named in `AuditableStore`
(`fathom.index.store.Store` provides them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from fathom.errors import NotCleared
from fathom.inference.provider import Provider
from fathom.space import Provenance, Space

if TYPE_CHECKING:  # pragma: no cover
    from fathom.inference.gate.core import Gate

TABLES = ("code", "docs")


class AuditableStore(Protocol):
    """What the audit needs from a store (all blocking calls)."""

    def space_of(self, project: str, table: str) -> Space | None: ...

    def provenance_counts(self, project: str, table: str) -> dict[tuple[str, str | None], int]: ...

    def written_since(
        self, project: str, table: str, since: datetime, provider_id: str | None = None
    ) -> Sequence[Any]:
        """Rows (with `.chunk_id` and `.path`) written at or after `since`."""
        ...

    def chunk_texts(self, project: str, table: str, chunk_ids: Sequence[str]) -> dict[str, str]: ...

    def replace_vectors(
        self, project: str, table: str, chunk_ids: Sequence[str], vectors: Any, provenance: Provenance
    ) -> int: ...


@dataclass(frozen=True)
class VerdictRows:
    table: str
    provider_id: str
    verdict_id: str | None
    rows: int
    status: str  # cleared | refused | quarantined | unknown verdict | no verdict


@dataclass(frozen=True)
class SuspectRows:
    """Rows a quarantined provider wrote since its last good check."""

    table: str
    provider_id: str
    verdict_id: str
    last_good_check: float | None
    quarantined_at: float | None
    reason: str | None
    chunk_ids: tuple[str, ...]
    paths: tuple[str, ...]


@dataclass(frozen=True)
class AuditReport:
    project: str
    counts: list[VerdictRows] = field(default_factory=list)
    suspects: list[SuspectRows] = field(default_factory=list)

    @property
    def suspect_count(self) -> int:
        return sum(len(s.chunk_ids) for s in self.suspects)

    def lines(self) -> list[str]:
        out = [
            f"{c.table}: {c.rows} rows by {c.provider_id} under verdict {c.verdict_id or '-'} ({c.status})"
            for c in self.counts
        ]
        for s in self.suspects:
            since = _iso(s.last_good_check) if s.last_good_check is not None else "its first write"
            out.append(
                f"{s.table}: {len(s.chunk_ids)} rows written by quarantined {s.provider_id} "
                f"since its last good check ({since}): {s.reason}"
            )
        return out


@dataclass(frozen=True)
class ReembedReport:
    project: str
    encoder_id: str
    rows: dict[str, int]  # table -> rows re-embedded
    skipped: dict[str, int]  # table -> suspect rows no longer in the table

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds")


def audit(gate: Gate, store: AuditableStore, project: str) -> AuditReport:
    counts: list[VerdictRows] = []
    suspects: list[SuspectRows] = []
    for table in TABLES:
        space = store.space_of(project, table)
        if space is None:
            continue
        for (pid, vid), n in sorted(
            store.provenance_counts(project, table).items(), key=lambda kv: (kv[0][0], kv[0][1] or "")
        ):
            v = gate.verdict_by_id(vid)
            status = v.status.value if v else ("unknown verdict" if vid else "no verdict")
            counts.append(VerdictRows(table, pid, vid, n, status))
        seen: set[tuple[str, str]] = set()
        for v in gate.verdicts.all():
            if v.key.space != space.key or v.revoked_at is None:
                continue
            since = v.last_good_check if v.last_good_check is not None else v.decided_at
            rows = store.written_since(
                project, table, datetime.fromtimestamp(since, tz=UTC), v.key.provider_id
            )
            # The window closes at the provider's next verdict in this space: the lock refused
            # this one from its revocation on, so rows it wrote since that decision (a sole
            # provider re-cleared and re-embedding its own suspect rows) are not suspect.
            until = min(
                (
                    w.decided_at
                    for w in gate.verdicts.all()
                    if w.key.space == space.key
                    and w.key.provider_id == v.key.provider_id
                    and w.decided_at > v.decided_at
                ),
                default=None,
            )
            if until is not None:
                newer = {
                    r.chunk_id
                    for r in store.written_since(
                        project, table, datetime.fromtimestamp(until, tz=UTC), v.key.provider_id
                    )
                }
                rows = [r for r in rows if r.chunk_id not in newer]
            fresh = [r for r in rows if (v.key.provider_id, r.chunk_id) not in seen]
            seen.update((v.key.provider_id, r.chunk_id) for r in fresh)
            suspects.append(
                SuspectRows(
                    table=table,
                    provider_id=v.key.provider_id,
                    verdict_id=v.verdict_id,
                    last_good_check=v.last_good_check,
                    quarantined_at=v.revoked_at,
                    reason=v.revoked_reason,
                    chunk_ids=tuple(r.chunk_id for r in fresh),
                    paths=tuple(sorted({r.path for r in fresh})),
                )
            )
    return AuditReport(project, counts, suspects)


async def reembed(
    gate: Gate, store: AuditableStore, project: str, encoder: Provider, *, batch_size: int = 64
) -> ReembedReport:
    report = await asyncio.to_thread(audit, gate, store, project)
    done: dict[str, int] = {}
    skipped: dict[str, int] = {}
    for table in TABLES:
        ids = [c for s in report.suspects if s.table == table for c in s.chunk_ids]
        if not ids:
            continue
        space = await asyncio.to_thread(store.space_of, project, table)
        assert space is not None  # audit found suspects in it
        verdict = gate.verdict_for(space, encoder)
        if verdict is None or not verdict.cleared:
            raise NotCleared(
                table,
                encoder.id,
                verdict.verdict_id if verdict else None,
                reason="re-embedding needs an encoder the gate has cleared for this table",
            )
        provenance = Provenance(encoder.id, verdict.verdict_id)
        texts = await asyncio.to_thread(store.chunk_texts, project, table, ids)
        present = [c for c in dict.fromkeys(ids) if c in texts]
        skipped[table] = len(set(ids)) - len(present)
        n = 0
        for i in range(0, len(present), batch_size):
            batch = present[i : i + batch_size]
            vectors = await encoder.embed([texts[c] for c in batch])
            n += await asyncio.to_thread(store.replace_vectors, project, table, batch, vectors, provenance)
        done[table] = n
    return ReembedReport(project, encoder.id, done, skipped)
