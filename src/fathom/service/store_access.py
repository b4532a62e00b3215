"""The store as each use case reaches it: opened once, on first use, and seen through `scope`.

What it owns: when the store opens (the first caller that needs it, so `fathom projects` and a
front end's start stay quick; opening imports the backend and may connect to PostgreSQL), the
clearance its writes are guarded by (the gate's, `GateClearance`), and its close. Every call
answers the store as the current caller may see it (`scope.confine`: a scoped token, its
projects), so the composition root hands this one object to each use case instead of a
closure over itself.

What it refuses to do: choose the backend (`fathom.index.backend.open_store` does, from the
settings) or decide who may write (the clearance does).
"""

from __future__ import annotations

from fathom import scope
from fathom.config import Settings
from fathom.index.backend import open_store
from fathom.index.store import Store
from fathom.inference.gate import Gate, GateClearance


class StoreAccess:
    """`access()` is the store as the current caller may see it, opened on first use."""

    def __init__(self, settings: Settings, gate: Gate, store: Store | None = None):
        self.settings, self.gate = settings, gate
        self.opened = store  # a test's own store, or None until the first caller

    def __call__(self) -> Store:
        if self.opened is None:
            self.opened = open_store(self.settings, clearance=GateClearance(self.gate))
        return scope.confine(self.opened)

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()
