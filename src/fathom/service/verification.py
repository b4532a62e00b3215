"""The check (and repair) of a project's stored tables, which the composition root asks for.

A function of a `fathom.service.Fathom` (the `fathom` argument, typed by what it needs:
`Checking`), kept apart so the class stays a wiring diagram. The gate's judgement of a table's
providers is `fathom.service.spaces.Spaces.verify_providers`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fathom.index.store import DamagedProject, UnknownProject
from fathom.index.verify import Repairer, check_project, repair_project

if TYPE_CHECKING:
    from fathom.service.projects import ProjectRecords


class Checking(Repairer, Protocol):
    """What checking (and repairing) stored tables needs: a repair's parts and the records,
    whose roots say what each project's `.fathomignore` takes back."""

    @property
    def records(self) -> ProjectRecords: ...


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
