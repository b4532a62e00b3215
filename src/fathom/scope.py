"""Which projects the current caller may see: one context variable, and the store as it looks
from inside it.

A scoped MCP token (see `server.tokens`) sees only its own projects. This module owns how that
holds everywhere at once: while a caller's scope is set (`within`), `Fathom.store` answers as a
`ScopedStore` that lists only the scope's projects, says "no such project" for any other, and
refuses every per-project call on one outside it. So "search every project" means every project
of the scope, `list_projects` lists those, and a tool written later reads through the same
view without knowing scopes exist.

The scope is a `contextvars` variable: it follows a request into the threads (`asyncio.to_thread`
copies the context) and tasks it starts, and never leaks into another request. Outside any scope
(the admin API, the CLI, index jobs the operator starts) the store is the store.

It refuses to decide who may see what (the MCP endpoint resolves a request's token and sets the
scope) and to hide anything from the operator: `None` means every project.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Iterable, Iterator
from typing import Any

_scope: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "fathom_project_scope", default=None
)


def current() -> frozenset[str] | None:
    """The projects the current caller may see; None for every project."""
    return _scope.get()


@contextlib.contextmanager
def within(projects: Iterable[str] | None) -> Iterator[None]:
    """Run the block as a caller who sees only `projects` (None: every project)."""
    token = _scope.set(None if projects is None else frozenset(projects))
    try:
        yield
    finally:
        _scope.reset(token)


def confine(store: Any) -> Any:
    """`store` as the current caller may see it: itself outside any scope."""
    projects = _scope.get()
    return store if projects is None else ScopedStore(store, projects)


def _takes_project(method: Any) -> bool:
    try:
        params = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "project"


class ScopedStore:
    """A view of a store for a caller who sees only `projects`. Every method whose first
    parameter is `project` refuses a project outside them with the store's own "no such
    project" error (the same words whether or not it exists, so a scope learns nothing of the
    projects outside it); `list_projects` and `has_project` see only the scope's projects."""

    def __init__(self, store: Any, projects: frozenset[str]):
        self._store = store
        self._projects = projects

    @property
    def projects(self) -> frozenset[str]:
        return self._projects

    def list_projects(self) -> list[Any]:
        return [p for p in self._store.list_projects() if p.name in self._projects]

    def has_project(self, project: str) -> bool:
        return project in self._projects and self._store.has_project(project)

    def refuse(self, project: Any) -> None:
        """Raise the store's "no such project" error unless `project` is in the scope."""
        if project not in self._projects:
            from fathom.index.store import UnknownProject

            raise UnknownProject(str(project), [p.name for p in self.list_projects()])

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or not _takes_project(attr):
            return attr

        @functools.wraps(attr)
        def checked(*args: Any, **kwargs: Any) -> Any:
            self.refuse(args[0] if args else kwargs.get("project"))
            return attr(*args, **kwargs)

        return checked
