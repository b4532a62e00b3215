"""The server's assembly: the answer helpers at the bottom of the server's imports, and an app
wired over parts built once (`build_parts`), served over real HTTP on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import ADMIN, HashEmbedder, serve_in_loop
from tests.source_tree import imports, modules


def test_the_answers_import_nothing_of_the_server_and_the_guard_not_the_admin_api():
    edges = imports(modules())
    answers = [
        dst for src, dst, _, _ in edges if src == "fathom.server.answers" and dst.startswith("fathom.server")
    ]
    assert answers == []
    low = ("fathom.server.auth", "fathom.server.guard", "fathom.server.tokens", "fathom.server.mcp_http")
    reach = [
        (src, dst)
        for src, dst, _, _ in edges
        if src in low and (dst == "fathom.server.admin" or dst.startswith("fathom.server.admin."))
    ]
    assert reach == []


async def test_an_app_over_built_parts_serves_the_admin_api_behind_its_token(tmp_path: Path):
    from fathom.config import Settings
    from fathom.server.app import create_app
    from fathom.server.assembly import ServerOptions, build_parts
    from fathom.service import Fathom

    settings = Settings(data_dir=tmp_path)
    service = Fathom(settings, encoder=HashEmbedder(width=8))
    parts = build_parts(settings, ServerOptions(admin_token=ADMIN, service=service))
    assert (
        parts.service is service and parts.registry is service.registry and parts.operator.jobs is parts.jobs
    )
    with pytest.raises(TypeError):
        create_app(settings, parts=parts)  # parts already built from settings: one or the other
    app = create_app(parts=parts)
    assert app.state.parts is parts and app.state.service is service and app.state.hub is parts.hub
    async with serve_in_loop(app) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            anon = await client.get("/admin/overview")
            admin = await client.get("/admin/overview", headers={"Authorization": f"Bearer {ADMIN}"})
            budget = await client.put(
                "/admin/budget", json={"override": 7}, headers={"Authorization": f"Bearer {ADMIN}"}
            )
    assert anon.status_code == 401
    assert admin.status_code == 200 and {"policies", "fleet", "budget", "jobs"} <= set(admin.json())
    # The override is saved under the data dir the parts were built on, then applied.
    assert budget.status_code == 200 and budget.json()["override"] == 7
    assert parts.operator.budget_record is not None and parts.operator.budget_record.load() == 7


def test_a_part_that_is_not_the_services_own_is_refused(tmp_path: Path):
    from fathom.config import Settings
    from fathom.inference.registry import ProviderRegistry
    from fathom.server.assembly import ServerOptions, build_parts
    from fathom.service import Fathom

    settings = Settings(data_dir=tmp_path)
    service = Fathom(settings, encoder=HashEmbedder(width=8))
    with pytest.raises(ValueError, match="registry given is not the service's own"):
        build_parts(settings, ServerOptions(admin_token=ADMIN, service=service, registry=ProviderRegistry()))
