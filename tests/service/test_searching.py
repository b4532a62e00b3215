"""Which projects a search over every project reads (`fathom.service.searching`)."""

from __future__ import annotations

import asyncio

from fathom.config import Settings
from fathom.index.store import LanceStore
from fathom.service import Fathom
from fathom.service.searching import SearchSources
from tests.fleet.fleet_fixtures import HashEmbedder
from tests.server.admin_fixtures import make_project


def test_a_search_over_every_project_reads_pointers_and_counts_no_rows(tmp_path, monkeypatch):
    """Each search over every project starts by naming them: from their pointer files, with no
    table opened or counted as `list_projects` does (a few ms a project, on every search). A
    project whose pointer is garbled is still left out and named, and the others answer."""
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=HashEmbedder(width=8))
    for name in ("alpha", "beta", "gamma"):
        asyncio.run(fathom.index(make_project(tmp_path / name), name))
    assert isinstance(fathom.store, LanceStore)
    (fathom.store.project_dir("gamma") / "state.json").write_text('{"project": "gamma", "tab')

    def refused(*_args, **_kwargs):
        raise AssertionError("a search over every project listed or counted tables")

    monkeypatch.setattr(LanceStore, "list_projects", refused)
    monkeypatch.setattr(LanceStore, "table_info", refused)
    names, notes = fathom.searchable(None, "code")
    assert names == ["alpha", "beta"]
    assert len(notes) == 1 and "skipped project 'gamma', which is damaged" in notes[0]
    hits = asyncio.run(fathom.search("add two numbers", k=10))
    assert {h.project for h in hits} == {"alpha", "beta"}


def test_a_project_dropped_after_the_search_named_it_is_left_out(tmp_path, monkeypatch):
    """Between naming the projects and reading them, another caller drops one: the search
    answers from the others instead of failing whole."""
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=HashEmbedder(width=8))
    for name in ("alpha", "beta"):
        asyncio.run(fathom.index(make_project(tmp_path / name), name))
    named = SearchSources.searchable

    def then_drop(self, project, table):
        found = named(self, project, table)
        if "beta" in found[0]:
            fathom.store.drop_project("beta")
        return found

    monkeypatch.setattr(SearchSources, "searchable", then_drop)
    hits = asyncio.run(fathom.search("add two numbers", k=10))
    assert hits and {h.project for h in hits} == {"alpha"}
