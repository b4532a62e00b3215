"""`/admin/gate`: the verdicts with their evidence, verifying a provider now, auditing a
project's rows per verdict, and re-embedding the suspect ones. The gate judges; this asks it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from fathom.config import RoutingStateDamaged
from fathom.errors import ConfigError, FathomError, PinRequired
from fathom.inference.gate.audit import audit as audit_rows
from fathom.inference.gate.audit import reembed as reembed_rows
from fathom.roles import EMBEDDING_ROLES
from fathom.server.admin.bodies import ReembedRequest, VerifyRequest
from fathom.server.admin.operator import require_project
from fathom.server.admin.views import iso, verdict_view
from fathom.server.answers import failure_status, refusal

if TYPE_CHECKING:
    from fathom.server.admin.operator import OperatorParts


def gate_router(parts: OperatorParts) -> APIRouter:
    """Verdicts, verify, audit and re-embed."""
    router = APIRouter()

    @router.get("/gate/verdicts", tags=["gate"])
    async def get_verdicts(history: bool = False) -> dict[str, Any]:
        """The latest verdict per provider and space (every verdict ever with `history=true`),
        with evidence: per-probe cosines, minimum, regime, coverage."""
        return parts.verdicts(history)

    @router.post("/gate/verify", tags=["gate"])
    async def verify(body: VerifyRequest) -> dict[str, Any]:
        """Probe a live provider now for a table (or every table its roles write), under the
        role's current policy. Answers the verdicts, cleared or refused, with their evidence."""
        return await verify_now(parts, body)

    @router.get("/gate/audit/{project}", tags=["gate"])
    async def audit(project: str) -> dict[str, Any]:
        """Rows per verdict in the project's tables, and the rows a quarantined provider wrote
        since its last good check."""
        gate, service = parts.need("gate"), parts.need("service")
        await require_project(service, project)
        report = await asyncio.to_thread(audit_rows, gate, service.store, project)
        return {
            "project": project,
            "lines": report.lines(),
            "suspect_count": report.suspect_count,
            "counts": [
                {
                    "table": c.table,
                    "provider": c.provider_id,
                    "verdict_id": c.verdict_id,
                    "rows": c.rows,
                    "status": c.status,
                }
                for c in report.counts
            ],
            "suspects": [
                {
                    "table": s.table,
                    "provider": s.provider_id,
                    "verdict_id": s.verdict_id,
                    "last_good_check": iso(s.last_good_check),
                    "quarantined_at": iso(s.quarantined_at),
                    "reason": s.reason,
                    "rows": len(s.chunk_ids),
                    "paths": sorted(set(s.paths))[:200],
                }
                for s in report.suspects
            ],
        }

    @router.post("/gate/reembed/{project}", tags=["gate"])
    async def reembed(project: str, body: ReembedRequest | None = None) -> dict[str, Any]:
        """Re-embed exactly the suspect rows the audit lists, with an encoder the gate cleared."""
        gate, service = parts.need("gate"), parts.need("service")
        await require_project(service, project)
        encoder = parts.find_provider(body.encoder) if body and body.encoder else service.encoder
        try:
            report = await reembed_rows(gate, service.store, project, encoder)
        except FathomError as exc:
            raise refusal(400, str(exc)) from None
        return {
            "project": project,
            "encoder": report.encoder_id,
            "rows": dict(report.rows),
            "skipped": dict(report.skipped),
            "total": report.total,
        }

    return router


async def verify_now(parts: OperatorParts, body: VerifyRequest) -> dict[str, Any]:
    """Probe a live provider now for a table (or every table its roles write), under the
    role's current policy. Answers the verdicts, cleared or refused, with their evidence."""
    from fathom.inference.gate import GateUnavailable

    gate, service = parts.need("gate"), parts.need("service")
    provider = parts.find_provider(body.provider)
    roles = [r for r in EMBEDDING_ROLES if r in provider.info.roles]
    if body.table is not None:
        roles = [r for r in roles if r.table == body.table]
    if not roles:
        what = f"the {body.table} table" if body.table else "any table"
        raise refusal(
            400,
            f"{provider.id} serves no embedding role for {what}; the gate judges "
            f"embedding routes only (rerank and chat write nothing)",
        )
    state = parts.routing.load()
    out = []
    for role in sorted(roles, key=lambda r: r.table or ""):
        try:
            space = service.space(role.table)
            verdict = await gate.verify(space, provider, state.roles[role].policy, force=body.force)
        except RoutingStateDamaged:
            raise
        except PinRequired as exc:
            raise refusal(400, str(exc)) from None
        except GateUnavailable as exc:
            raise refusal(
                409, str(exc), [str(exc)] + [f"{k}: {v}" for k, v in exc.attempts.items()]
            ) from None
        except FathomError as exc:  # e.g. no provider serves the role's model: say so
            raise refusal(failure_status(exc), str(exc)) from None
        except ConfigError as exc:
            raise refusal(400, str(exc), exc.problems) from None
        out.append(verdict_view(verdict))
    return {"verdicts": out}
