"""Shared fixtures for the operator surface: the full app (fleet, gate, budget, service, jobs)
on a real 127.0.0.1 socket in the test's loop, with a fast deterministic encoder as the tables'
reference, a tiny project to index, and fake providers at the Provider cut-off for the gate.
A test asks for `operator` by name (`tests/conftest.py` provides it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fathom.config import Settings
from fathom.fleet.hub import Hub
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.inference.registry import ProviderRegistry
from fathom.roles import EMBEDDING_ROLES, Role
from fathom.server.app import create_app
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import ADMIN, JOIN, HashEmbedder, serve_in_loop

METRICS = "fm_test-scrape-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


def make_project(root: Path) -> Path:
    """A tiny project: two Python functions and a README section."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text(
        'def add(a, b):\n    """Add two numbers."""\n    return a + b\n\n\n'
        "def greet(name):\n    return f'hello {name}'\n"
    )
    (root / "README.md").write_text(
        "# Demo\n\nA tiny project for the operator tests.\n\n## Usage\n\nCall add.\n"
    )
    return root


class FakeEncoder(Provider):
    """A provider at the cut-off whose vectors are HashEmbedder's, optionally skewed (so its
    cosine against the reference falls below the floor). Counts its calls."""

    def __init__(
        self,
        pid: str,
        *,
        kind: Kind = Kind.LOCAL,
        roles: Sequence[Role] = tuple(EMBEDDING_ROLES),
        model: str = "test/hash-embedder",
        width: int = 8,
        upstream: str | None = None,
        skew: float = 0.0,
    ):
        self.info = ProviderInfo(
            id=pid, kind=kind, roles=frozenset(roles), model=model, width=width, upstream=upstream
        )
        self.skew = skew
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        w = self.info.width or 8
        rows = []
        for t in texts:
            v = HashEmbedder.vector(t, w)
            if self.skew:
                v = v + self.skew * HashEmbedder.vector("skew:" + t, w)
                v = v / np.linalg.norm(v)
            rows.append(v.astype(np.float32))
        return np.stack(rows) if rows else np.zeros((0, w), np.float32)


def build_operator_app(
    data_dir: Path,
    *,
    encoder: Provider | None = None,
    settings: Settings | None = None,
    chat: Provider | None = None,
    **options: Any,
) -> Any:
    """The operator app; `chat`: a (scripted) local chat model for the agents' roles."""
    registry = ProviderRegistry()
    if chat is not None:
        registry.add(chat)
    hub = Hub(data_dir, registry=registry, join_tokens=(JOIN,))
    settings = settings or Settings(data_dir=data_dir)
    encoder = encoder or HashEmbedder(width=8)
    # The server's in-process encoder serves the embedding roles only (as LocalEncoder does).
    encoder.info = dataclasses.replace(encoder.info, roles=frozenset(EMBEDDING_ROLES))
    service = Fathom(settings, encoder=encoder, registry=registry)
    return create_app(
        settings,
        registry=registry,
        hub=hub,
        admin_token=ADMIN,
        metrics_token=METRICS,
        service=service,
        **options,
    )


@dataclass
class Operator:
    url: str
    app: Any
    data_dir: Path
    tmp: Path

    @property
    def parts(self) -> Any:
        return self.app.state.operator

    def client(self, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=AUTH if headers is None else headers, timeout=30)

    async def wait_job(
        self, client: httpx.AsyncClient, job_id: str, *, timeout: float = 60.0, until: Any = None
    ) -> dict[str, Any]:
        """Poll a job until it is finished (or `until(job)`); bounded."""
        deadline = time.monotonic() + timeout
        while True:
            job = (await client.get(f"/admin/jobs/{job_id}")).json()
            if until(job) if until is not None else job["finished"]:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} did not get there: {job}")
            await asyncio.sleep(0.02)


@pytest.fixture
async def operator(tmp_path: Path) -> AsyncIterator[Operator]:
    app = build_operator_app(tmp_path / "data")
    async with serve_in_loop(app) as url:
        yield Operator(url, app, tmp_path / "data", tmp_path)
