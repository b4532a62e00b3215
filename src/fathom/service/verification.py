"""Verification the composition root asks for: the gate's judgement of every provider that
could serve a table, and the check (and repair) of a project's stored tables.

Functions of a `fathom.service.Fathom` (the `fathom` argument, typed by what each needs: `Judging`,
`Checking`), kept apart so the class stays a wiring diagram.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fathom.errors import FathomError
from fathom.index.store import DamagedProject, UnknownProject
from fathom.index.verify import Repairer, check_project, repair_project
from fathom.inference.gate import Verdict
from fathom.inference.provider import Provider
from fathom.roles import Role

if TYPE_CHECKING:
    from fathom.config import RoutingStore
    from fathom.inference.gate import Gate
    from fathom.inference.registry import ProviderRegistry
    from fathom.inference.router import Router
    from fathom.service.projects import ProjectRecords
    from fathom.space import Space

log = logging.getLogger("fathom.service")


class Judging(Protocol):
    """What judging a table's providers needs of the service: the table's space, the routes,
    the providers, the gate, and the in-process encoder with its quantized writer."""

    @property
    def routing(self) -> RoutingStore: ...

    @property
    def registry(self) -> ProviderRegistry: ...

    @property
    def router(self) -> Router: ...

    @property
    def gate(self) -> Gate: ...

    @property
    def encoder(self) -> Provider: ...

    @property
    def writer(self) -> Provider | None: ...

    def space(self, table: str) -> Space: ...


class Checking(Repairer, Protocol):
    """What checking (and repairing) stored tables needs: a repair's parts and the records,
    whose roots say what each project's `.fathomignore` takes back."""

    @property
    def records(self) -> ProjectRecords: ...


async def verify_providers(fathom: Judging, table: str, role: Role) -> list[Verdict]:
    """Judge, for the table's current space, every provider that could serve its role and has
    no verdict yet, or owes a re-probe (the reference first: it records the golden vectors). A
    refusal is recorded, not raised: the router simply never lets that provider pull."""
    space = fathom.space(table)
    policy = fathom.routing.load().roles[role].policy
    reference = fathom.registry.get(space.reference) or fathom.encoder

    def allowed(p: Provider) -> bool:
        return fathom.router.cloud_allowed(role) if p.info.is_cloud else fathom.router.behaviour(role).local

    others = [p for p in fathom.registry.list(role) if p.id != reference.id and allowed(p)]
    verdicts = []
    for p in [reference, *others]:
        if fathom.gate.verdict_for(space, p) is not None and not fathom.gate.awaiting_reprobe(p):
            continue  # judged, and no re-probe owed (after a reconnect or restart)
        try:
            verdicts.append(await fathom.gate.verify(space, p, policy))
        except FathomError as exc:
            # An unpinned embedding route, or its reference could not answer: uncleared.
            log.warning("gate: %s not verified for the %s table: %s", p.id, table, exc)
    writer = fathom.writer
    refused = fathom.gate.verdict_for(space, writer) if writer is not None else None
    if writer is not None and refused is not None and not refused.cleared:
        log.warning(
            "gate: FATHOM_LOCAL_QUANTIZED asks for %s, but the gate refused it for the "
            "%s table (%s); the reference %s writes it instead. Unset "
            "FATHOM_LOCAL_QUANTIZED to stop the check (or try int8 if int8-all was "
            "refused)",
            writer.id,
            table,
            refused.reason,
            reference.id,
        )
    return verdicts


async def verify_store(fathom: Checking, project: str | None = None, *, repair: bool = False) -> list[Any]:
    """Check one project's stored tables (or every project's, damaged ones included) and,
    with `repair`, fix what can be fixed; returns a `verify.ProjectCheck` per project."""
    store = await asyncio.to_thread(getattr, fathom, "store")
    if project is not None:
        try:
            known = await asyncio.to_thread(store.has_project, project)
        except DamagedProject:
            known = True
        if not known:
            raise UnknownProject(project, [p.name for p in store.list_projects()])
        names = [project]
    else:
        names = [p.name for p in await asyncio.to_thread(store.list_projects)]
    checks = []
    for name in names:
        check = await asyncio.to_thread(check_project, store, name, taken_back=_taken_back(fathom, name))
        if repair and check.problems:
            await repair_project(fathom, check)
        checks.append(check)
    return checks


def _taken_back(fathom: Checking, project: str) -> Any:
    """What the project's `.fathomignore` takes back from the secret rules (`!path` lines),
    read from its recorded root; None when the root is unknown or gone."""
    from fathom.index.walker import Selection

    root = (fathom.records.get(project) or {}).get("root")
    if not root or not Path(root).is_dir():
        return None
    return Selection(Path(root)).taken_back
