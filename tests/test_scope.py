"""`fathom.scope`: inside a caller's scope the store lists, finds and serves only the scope's
projects; outside it the store is the store. Over a real LanceDB store with two projects."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fathom import scope
from fathom.config import Settings
from fathom.index.store import Store, UnknownProject
from fathom.scope import ScopedStore
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import HashEmbedder
from tests.server.admin_fixtures import make_project


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
        assert fathom.store.project_names() == ["alpha"]
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


def test_search_many_never_returns_rows_of_a_project_outside_the_scope(two_projects: Fathom):
    """`search_many` is checked by the scope itself, not left to a caller that filters first:
    a list naming a project outside the scope is refused whole, so none of its rows come back."""
    store = two_projects.store
    vector = np.full(8, 1 / np.sqrt(8), dtype=np.float32)
    every = store.search_many(["alpha", "beta"], "code", vector, "add two numbers", k=50)
    assert {h.project for h in every.vector + every.text} == {"alpha", "beta"}  # both have rows
    with scope.within(["alpha"]):
        scoped = two_projects.store
        with pytest.raises(UnknownProject, match="no project 'beta'") as refused:
            scoped.search_many(["alpha", "beta"], "code", vector, "add two numbers", k=50)
        assert refused.value.known == ["alpha"]
        mine = scoped.search_many(["alpha"], "code", vector, "add two numbers", k=50)
        assert mine.vector and {h.project for h in mine.vector + mine.text} == {"alpha"}


def test_a_store_method_without_a_check_is_not_reachable_through_a_scope(two_projects: Fathom):
    """Every public method of the store contract is written out in `ScopedStore` with its
    check; a backend's own extras (here LanceDB's ANN wait) do not pass through at all."""
    public = {n for n, v in vars(Store).items() if callable(v) and not n.startswith("_")}
    assert public - set(vars(ScopedStore)) == set()
    assert hasattr(two_projects.store, "wait_for_ann")
    with scope.within(["alpha"]):
        assert not hasattr(two_projects.store, "wait_for_ann")
