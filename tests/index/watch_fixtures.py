"""Live sync in the tests: the watcher's options for a test (`OPTIONS`), a longer `wait_for`,
a project's sync jobs (`syncs`), a wait until its watch is idle and stays so (`settled`), and
the sample project indexed, watched and settled with the hash encoder at the Provider
cut-off (`watched`, `hash_encoder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fathom.config import Settings
from fathom.roles import EMBEDDING_ROLES
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import HashEmbedder
from tests.fleet.fleet_fixtures import wait_for as shared_wait_for
from tests.index.retrieval_fixtures import write_project

OPTIONS = {"quiet_s": 0.3, "retry_first_s": 0.2, "retry_max_s": 1.0}


wait_for = functools.partial(shared_wait_for, timeout=60.0, interval=0.05)


def syncs(fathom: Fathom, project: str = "shop") -> list[Any]:
    return [j for j in fathom.jobs.values() if j.project == project and j.reason == "sync"]


async def settled(fathom: Fathom, project: str = "shop", quiet: float = 1.5) -> None:
    """Wait until the project's watch is idle with nothing pending, and stays so for `quiet`."""

    async def idle() -> bool:
        s = fathom.watch_state(project)
        return (
            s["state"] == "watching" and s["pending"] == 0 and all(j.finished for j in syncs(fathom, project))
        )

    await wait_for(idle, what="an idle watch")
    count = len(syncs(fathom, project))
    await asyncio.sleep(quiet)
    await wait_for(idle, what="an idle watch")
    if len(syncs(fathom, project)) != count:
        await settled(fathom, project, quiet)


def hash_encoder() -> HashEmbedder:
    encoder = HashEmbedder(width=8)
    encoder.info = dataclasses.replace(encoder.info, roles=frozenset(EMBEDDING_ROLES))
    return encoder


@contextlib.asynccontextmanager
async def watched(tmp_path: Path, files: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """(service, root) of the project `shop` (the sample, or `files`) indexed, watched and
    settled; closed after."""
    root = write_project(tmp_path / "shop", files)
    fathom = Fathom(Settings(data_dir=tmp_path / "data", watch=True), encoder=hash_encoder())
    await fathom.index(root, "shop")
    await fathom.start_watching(**OPTIONS)
    try:
        await settled(fathom)
        yield fathom, root
    finally:
        await fathom.aclose()
