"""Index jobs held mid-run, for the tests of jobs through MCP and the admin API: a project of
several embedding batches (`write_shop`), an encoder at the Provider cut-off that holds its
batches of code at a gate the test opens (`HeldEncoder`, `HeldAfterFirst`), the operator's
server with a first index held over the admin API (`held_admin_job`), a service with one
project indexed on a `HeldAfterFirst` encoder (the `served` fixture), and a job followed over
MCP to its end (`job_of`, `ended`) within a bounded time (`bounded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from fathom.config import Settings
from fathom.inference.registry import ProviderRegistry
from fathom.roles import EMBEDDING_ROLES
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import HashEmbedder, serve_in_loop, wait_for
from tests.server.admin_fixtures import Operator, build_operator_app


def write_shop(root: Path, files: int = 12) -> Path:
    """A project of `files` modules with several functions each: several embedding batches."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (root / f"mod_{i}.py").write_text(
            "".join(
                f'def handler_{i}_{j}(request):\n    """Handle request {j} of module {i}."""\n'
                f"    return request.value + {j}\n\n\n"
                for j in range(8)
            )
        )
    (root / "billing.py").write_text(
        'def invoice_total(lines):\n    """Sum the invoice lines with tax."""\n'
        "    return sum(line.price * 1.2 for line in lines)\n"
    )
    return root


class HeldEncoder(HashEmbedder):
    """`HashEmbedder` that, once `hold` is set, holds every batch of code chunks (texts of
    several lines) until it is set, and says when one is held (`reached`). A search's query (one
    line) is never held: searches answer while a run is held."""

    def __init__(self) -> None:
        super().__init__(width=8)
        self.hold: asyncio.Event | None = None
        self.reached = asyncio.Event()

    async def embed(self, texts: Any) -> Any:
        if self.hold is not None and any("\n" in t for t in texts):
            self.reached.set()
            await self.hold.wait()
        return await super().embed(texts)


def bounded(test: Any) -> Any:
    """A test that fails after a minute instead of hanging (a run that never ends)."""

    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> Any:
        async with asyncio.timeout(60):
            return await test(*args, **kwargs)

    return run


async def job_of(client: Client, project: str, job: str) -> dict[str, Any]:
    r = await client.call_tool("index_status", {"project": project, "job": job})
    assert not r.is_error, r.content[0].text
    return r.structured_content["job"]


async def ended(client: Client, project: str, job: str) -> dict[str, Any]:
    async def finished() -> dict[str, Any] | None:
        view = await job_of(client, project, job)
        return view if view["state"] in ("done", "failed", "cancelled") else None

    return await wait_for(finished, what=f"job {job} to end", timeout=30.0, interval=0.02)


@contextlib.asynccontextmanager
async def held_admin_job(
    tmp_path: Path,
) -> AsyncIterator[tuple[str, Operator, Any, dict[str, Any], asyncio.Event]]:
    """The operator's server on 127.0.0.1 with a first index of `shop` started over the admin
    API and held (its encoder's gate closed): yields the URL, the operator, its admin client,
    the job and the gate (set it to let the run end)."""
    encoder = HeldEncoder()
    app = build_operator_app(tmp_path / "data", encoder=encoder)
    root = write_shop(tmp_path / "src" / "shop", files=4)
    async with serve_in_loop(app) as url:
        op = Operator(url, app, tmp_path / "data", tmp_path)
        async with op.client() as admin:
            gate = encoder.hold = asyncio.Event()
            job = (await admin.post("/admin/jobs", json={"path": str(root), "project": "shop"})).json()
            await asyncio.wait_for(encoder.reached.wait(), 30)
            yield url, op, admin, job, gate


class HeldAfterFirst(HeldEncoder):
    """Lets one batch of code through once `hold` is set, then holds the rest: the run is
    mid-embedding with some chunks done."""

    def __init__(self) -> None:
        super().__init__()
        self.passed = 0

    async def embed(self, texts: Any) -> Any:
        if self.hold is not None and any("\n" in t for t in texts) and self.passed == 0:
            self.passed += 1
            return await super(HeldEncoder, self).embed(texts)
        return await super().embed(texts)


@pytest.fixture
async def served(tmp_path: Path) -> tuple[Fathom, HeldAfterFirst]:
    """A service with one project indexed (so the encoder's verdicts exist: a later run's
    check of the encoders embeds nothing, and the first held batch is a project's)."""
    encoder = HeldAfterFirst()
    encoder.info = dataclasses.replace(encoder.info, roles=frozenset(EMBEDDING_ROLES))
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=encoder, registry=ProviderRegistry())
    await fathom.index(write_shop(tmp_path / "shop"), "shop")
    return fathom, encoder
