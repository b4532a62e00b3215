"""`fathom.scope`: inside a caller's scope the store lists, finds and serves only the scope's
projects; outside it the store is the store. Over a real LanceDB store with two projects."""

from __future__ import annotations

import asyncio

import pytest

from fathom import scope
from fathom.config import Settings
from fathom.index.store import UnknownProject
from fathom.service import Fathom
from tests.admin_fixtures import make_project
from tests.fleet_fixtures import HashEmbedder


@pytest.fixture(scope="module")
def two_projects(tmp_path_factory: pytest.TempPathFactory) -> Fathom:
    base = tmp_path_factory.mktemp("scope")
    fathom = Fathom(Settings(data_dir=base / "data"), encoder=HashEmbedder(width=8))
    for name in ("alpha", "beta"):
        asyncio.run(fathom.index(make_project(base / name), name))
    return fathom


def test_a_scope_sees_its_projects_only(two_projects: Fathom):
    fathom = two_projects
    assert {p.name for p in fathom.projects()} == {"alpha", "beta"}
    with scope.within(["alpha", "ghost"]):
        assert [p.name for p in fathom.projects()] == ["alpha"]
        assert fathom.store.has_project("alpha") and not fathom.store.has_project("beta")
        assert fathom.index_status("alpha").tables["code"]["rows"] > 0
        for call in (
            lambda: fathom.index_status("beta"),
            lambda: fathom.store.table_info("beta", "code"),
            lambda: fathom.store.chunk_ids("beta", "code"),
        ):
            with pytest.raises(UnknownProject, match="no project 'beta'") as refused:
                call()
            assert "beta" not in refused.value.known and refused.value.known == ["alpha"]
        hits = asyncio.run(fathom.search("add two numbers", k=10))
        assert hits and {h.project for h in hits} == {"alpha"}
    # Outside it, the store is the store again (and a scope follows into threads).
    assert fathom.store.has_project("beta") and scope.current() is None

    async def in_a_thread() -> list[str]:
        with scope.within(["beta"]):
            return await asyncio.to_thread(lambda: [p.name for p in fathom.projects()])

    assert asyncio.run(in_a_thread()) == ["beta"]


def test_an_empty_scope_sees_nothing(two_projects: Fathom):
    with scope.within([]):
        assert two_projects.projects() == []
        with pytest.raises(Exception, match="no project is indexed"):
            asyncio.run(two_projects.search("add"))
