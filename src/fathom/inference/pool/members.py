"""Who pulls in a running job: providers join (with their lanes and their sizing from the
history) and leave (their batches in flight go back to the queue; a lane mid-write finishes
its write). Follows a registry's changes for the pool's role.

It refuses to decide whether a member may serve at a given moment (`Planner`, through the
router's `eligible`).
"""

from __future__ import annotations

import asyncio

from fathom.inference.pool.lanes import Lanes
from fathom.inference.pool.sizing import Sizer, Sizing
from fathom.inference.pool.state import Member, Phase, PoolState
from fathom.inference.provider import Provider
from fathom.inference.registry import ChangeKind, RegistryChange
from fathom.roles import Role


class Members:
    def __init__(
        self, state: PoolState, sizer: Sizer, lanes: Lanes, history: dict[str, Sizing], role: Role | None
    ):
        self.state, self.sizer, self.lanes = state, sizer, lanes
        self.history = history
        self.role = role

    def serves(self, provider: Provider) -> bool:
        return self.role is None or self.role in provider.info.roles

    def on_registry(self, change: RegistryChange) -> None:
        if change.kind is ChangeKind.ADDED:
            if self.serves(change.provider):
                self.join(change.provider)
        elif change.kind is ChangeKind.REMOVED:
            m = self.state.members.get(change.provider.id)
            if m is not None and m.provider is change.provider:
                self.leave(change.provider.id)
        self.state.notify()

    def join(self, provider: Provider) -> None:
        state = self.state
        if state.job is None:
            return
        existing = state.members.get(provider.id)
        if existing is not None and existing.present:
            if existing.provider is provider:
                return
            self.leave(provider.id)
        if existing is not None:
            state.departed.append(existing)
        sizing = self.sizer.start(self.history, provider.id)
        m = Member(provider, sizing, self.lanes.wanted(provider))
        state.members[provider.id] = m
        self.lanes.spawn(m, m.lanes)
        state.notify()

    def leave(self, provider_id: str) -> None:
        m = self.state.members.get(provider_id)
        if m is None or not m.present:
            return
        m.present = False
        for task, phase in list(m.tasks.items()):
            # A lane in the middle of writing finishes its write (the rows are good); every
            # other lane stops now, and its batch returns to the queue as it unwinds.
            if phase is not Phase.DELIVER:
                task.cancel()
        self.state.notify()

    async def stop_all(self) -> None:
        state = self.state
        members = [*state.members.values(), *state.departed]
        tasks = [t for m in members for t in m.tasks]
        for m in members:
            m.present = False
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        state.members.clear()
        state.departed.clear()
