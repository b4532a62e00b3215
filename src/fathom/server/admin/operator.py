"""The live parts the operator API reads and steers (`OperatorParts`), and the views built of
several of them at once: the policies with the providers serving each role, the gate's
verdicts, the overview the dashboard polls. A part that is not configured answers 503.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fathom import __version__
from fathom.config import PIN_NOTICE, RoutingStateDamaged, RoutingStore, Settings, default_routes
from fathom.errors import ConfigError, FathomError, did_you_mean
from fathom.fleet.hub import Hub
from fathom.policy import BEHAVIOUR, Policy
from fathom.roles import EMBEDDING_ROLES, FallbackMode, Role
from fathom.server.admin.budget_record import BudgetRecord
from fathom.server.admin.views import budget_view, fleet_view, job_view, verdict_view
from fathom.server.answers import refusal
from fathom.server.metrics import provider_health
from fathom.service.jobs import IndexJobs

if TYPE_CHECKING:
    from fathom.service.ports import OperatorService, StoreReader


@dataclass
class OperatorParts:
    """The live parts the operator API reads and steers; `build_parts` assembles them. A part
    that is None answers 503 "not configured" on its endpoints instead of failing."""

    settings: Settings
    routing: RoutingStore
    hub: Hub
    registry: Any = None
    gate: Any = None
    budget: Any = None
    service: OperatorService | None = None
    router: Any = None
    jobs: IndexJobs | None = None
    budget_record: BudgetRecord | None = None
    metrics: Any = None
    started_at: float = field(default_factory=time.time)

    def need(self, name: str) -> Any:
        part = getattr(self, name)
        if part is None:
            raise refusal(
                503,
                f"the {name} is not configured on this server; start it with "
                f"`fathom server` (which builds every part)",
            )
        return part

    # -- policies ----------------------------------------------------------------------

    def cleared_for(self, role: Role, provider: Any) -> bool | None:
        if role not in EMBEDDING_ROLES or role.table is None or self.gate is None or self.service is None:
            return None
        try:
            return bool(self.gate.is_cleared(self.service.space(role.table), provider))
        except FathomError:
            return False

    def policies(self) -> dict[str, Any]:
        from fathom.inference.router import NoRoute

        state = self.routing.load()
        roles: dict[str, Any] = {}
        for role in Role:
            route = state.roles[role]
            behaviour = BEHAVIOUR[route.policy]
            serving: list[str] = []
            unavailable: list[str] = []
            if self.router is not None:
                serving = [p.id for p in self.router.serving(role)]
                if not serving:
                    try:
                        self.router.order(role)
                    except NoRoute as exc:
                        unavailable = list(exc.reasons)
            providers = []
            cloud = getattr(self.hub, "cloud_health", None)
            for p in self.registry.list(role) if self.registry is not None else []:
                health = self.registry.health(p.id)
                word, up = provider_health(self.registry, p, cloud)
                record = cloud.of(p.id, p.info.host) if cloud is not None and p.info.is_cloud else None
                providers.append(
                    {
                        "id": p.id,
                        "kind": p.info.kind.value,
                        "host": p.info.host,
                        "model": p.info.model,
                        "upstream": p.info.upstream,
                        "width": p.info.width,
                        "health": word,
                        "reason": health.reason or (record.advice if record else None),
                        "cloud_health": record.to_dict() if record else None,
                        "up": up,
                        "available": self.registry.available(p.id),
                        "cleared": self.cleared_for(role, p),
                        "permitted": self.router.permits(role, p) if self.router is not None else None,
                        # Eligible by the router, and (a cloud route) seen serving by a real call.
                        "serving": p.id in serving and up,
                    }
                )
            reference = self._reference_encoder(role)
            if reference is not None and all(p["id"] != reference.id for p in providers):
                # The service's in-process encoder indexes and encodes queries for the tables
                # directly (it is their reference), whether or not it also joins the registry.
                local_ok = behaviour.local
                providers.insert(
                    0,
                    {
                        "id": reference.id,
                        "kind": reference.info.kind.value,
                        "host": None,
                        "model": reference.info.model,
                        "upstream": None,
                        "width": reference.info.width,
                        "health": "ok",
                        "reason": "the table's reference encoder (in-process)"
                        + ("" if local_ok else f"; policy {route.policy} lets no local provider serve"),
                        "available": True,
                        "cleared": True,
                        "permitted": local_ok,
                        "serving": local_ok,
                    },
                )
                if local_ok:
                    serving = [reference.id, *serving]
                    unavailable = []
            elif reference is not None and behaviour.local and self._clears_itself(role, reference):
                # The table's in-process reference encoder, not yet probed: the next index job
                # clears it against itself and writes with it, so it is what will serve.
                for entry in providers:
                    if entry["id"] == reference.id and not entry["serving"]:
                        entry.update(
                            serving=True,
                            reason="the table's reference encoder (in-process); the "
                            "first index checks it against the probes",
                        )
                        serving = [reference.id, *serving]
                        unavailable = []
            configured = bool(providers) or role.stateful or route != default_routes()[role]
            warnings = state.problems([role])
            if state.last_push is None:  # no key pushed: no cloud route can exist to pin
                warnings = [w for w in warnings if PIN_NOTICE not in w]
            roles[role.value] = {
                **route.model_dump(mode="json"),
                "table": role.table,
                "stateful": role.stateful,
                "behaviour": behaviour.summary,
                "reference": behaviour.reference.value if role.stateful else None,
                "cloud_allowed": behaviour.cloud and route.fallback is not FallbackMode.LOCAL_ONLY,
                "serving": serving,
                "unavailable": unavailable if configured else [],
                "providers": providers,
                "warnings": warnings,
                # An optional role nobody set up (no provider, the default route): neutral, no problem.
                "configured": configured,
            }
        return {
            "roles": roles,
            "policies": {p.value: BEHAVIOUR[p].summary for p in Policy},
            "fallbacks": [f.value for f in FallbackMode],
        }

    def _clears_itself(self, role: Role, reference: Any) -> bool:
        """Whether `reference` has no verdict yet for its table (a refused or quarantined one
        does not serve): the first index run then clears it against itself."""
        if role.table is None or self.gate is None or self.service is None:
            return False
        try:
            return self.gate.verdict_for(self.service.space(role.table), reference) is None
        except FathomError:
            return False

    def _reference_encoder(self, role: Role) -> Any:
        if role not in EMBEDDING_ROLES or role.table is None or self.service is None:
            return None
        try:
            return self.service.encoder_for(role.table)
        except FathomError:
            return None

    def table_widths(self) -> tuple[dict[str, dict[int, list[str]]], dict[str, int]]:
        """Blocking (the store): per table, existing widths and their projects; and each
        table's reference encoder width."""
        widths: dict[str, dict[int, list[str]]] = {}
        refs: dict[str, int] = {}
        if self.service is None:
            return widths, refs
        for p in self.service.store.list_projects():
            for table, info in p.tables.items():
                if info.space is not None:
                    widths.setdefault(table, {}).setdefault(int(info.space.width), []).append(p.name)
        for role in EMBEDDING_ROLES:
            if role.table is None:
                continue
            try:
                refs[role.table] = int(self.service.space(role.table).width)
            except FathomError:
                pass
        return widths, refs

    # -- gate --------------------------------------------------------------------------

    def verdicts(self, history: bool = False) -> dict[str, Any]:
        from fathom.server.metrics import latest_verdicts

        gate = self.need("gate")
        chosen = gate.verdicts.all() if history else latest_verdicts(gate)
        views = [verdict_view(v) for v in chosen]
        counts = {"cleared": 0, "refused": 0, "quarantined": 0}
        for v in latest_verdicts(gate):
            counts[v.status.value] = counts.get(v.status.value, 0) + 1
        return {
            "verdicts": views,
            "counts": counts,
            "reduced_coverage": [v["provider"] for v in views if v["reduced_coverage"] and v["cleared"]],
        }

    def find_provider(self, pid: str) -> Any:
        seen: list[Any] = list(self.registry) if self.registry is not None else []
        seen += self.hub.providers()
        if self.gate is not None:
            seen += list(self.gate.providers)
        for prov in seen:
            if prov.id == pid:
                return prov
        raise refusal(
            404, f"no live provider {pid!r}; GET /admin/policies lists the providers serving each role"
        )

    # -- overview ----------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        """Every section the dashboard shows; a section whose state cannot be read says why
        (`{"error": {message, problems}}`) and the others are still there."""
        fleet = fleet_view(self.hub)
        try:
            policies: dict[str, Any] = self.policies()
        except RoutingStateDamaged as exc:
            policies = {"error": {"message": str(exc), "problems": exc.problems}}
        out: dict[str, Any] = {
            "version": __version__,
            "uptime_s": round(time.time() - self.started_at, 1),
            "policies": policies,
            "fleet": fleet,
            "gate": self.verdicts() if self.gate is not None else None,
            "budget": budget_view(self.budget) if self.budget is not None else None,
            "jobs": [job_view(j) for j in self.jobs.all()] if self.jobs is not None else [],
        }
        problems = list(fleet["problems"])
        if self.jobs is not None and self.jobs.problem:
            problems.append(self.jobs.problem)
        if "error" in policies and policies["error"]["message"] not in problems:
            problems.append(policies["error"]["message"])
        for role, r in policies.get("roles", {}).items():
            if not r["serving"] and r.get("configured", True):
                problems.append(
                    f"role {role} has no provider serving it"
                    + (f": {'; '.join(r['unavailable'])}" if r["unavailable"] else "")
                )
        if out["gate"]:
            problems += [
                f"gate quarantined {v['provider']} for the {v['table']} table: {v['revoked_reason']}"
                for v in out["gate"]["verdicts"]
                if v["status"] == "quarantined"
            ]
        out["problems"] = problems
        return out


async def require_project(service: StoreReader, project: str) -> None:
    from fathom.index.store import check_project_name

    try:
        check_project_name(project)
    except ConfigError as exc:
        raise refusal(400, str(exc)) from None
    if not await asyncio.to_thread(service.store.has_project, project):
        known = [p.name for p in await asyncio.to_thread(service.store.list_projects)]
        raise refusal(
            404,
            f"no project {project!r}.{did_you_mean(project, known)} Index it first "
            f"(`fathom jobs start PATH --project {project}`)"
            + (f". Known projects: {', '.join(known[:20])}" if known else ""),
        )
