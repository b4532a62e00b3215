"""`Pool`: the face of the pull-based fan-out pool (see the package docstring for what it
guarantees), with who pulls in it. It takes the collaborators and one `PoolOptions`, runs one job
at a time, fails a job that stopped making progress (`PoolStalled`), and hands the work to its
parts: `Members` (who joins and leaves), `Lanes` (the pulling, `lanes`), `Planner` (what a lane
does next) and `Sizer` (how large a batch), over the shared `PoolState` (all three in `plan`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fathom.clock import Clock, SystemClock
from fathom.errors import NoProviderAvailable
from fathom.inference.pool.lanes import Lanes
from fathom.inference.pool.plan import (
    Admission,
    Member,
    Phase,
    Planner,
    PoolJob,
    PoolOptions,
    PoolReport,
    PoolState,
    Progress,
    Sink,
    Sizer,
    Sizing,
)
from fathom.inference.provider import Provider
from fathom.inference.registry import ChangeKind, ProviderRegistry, RegistryChange
from fathom.roles import Role


class PoolStalled(NoProviderAvailable):
    """No batch finished for `stall_timeout` seconds: nothing that may serve could."""

    def __init__(self, done: int, total: int, waited: float, members: dict[str, str]):
        self.done, self.total, self.waited, self.members = done, total, waited, members
        state = "; ".join(f"{pid}: {s}" for pid, s in sorted(members.items())) or "no provider at all"
        super().__init__(
            f"the embedding pool made no progress for {waited:.0f}s with {total - done} of "
            f"{total} items left ({state}). Start a sidecar, fix the failing providers, or "
            f"check the role's policy; the items written so far are kept."
        )


class Pool:
    def __init__(
        self,
        providers: ProviderRegistry | Iterable[Provider],
        *,
        role: Role | None = None,
        clock: Clock | None = None,
        eligible: Callable[[Provider], bool] | None = None,
        cloud_reserve_only: bool | Callable[[], bool] = False,
        admission: Admission | None = None,
        lanes: int | Callable[[Provider], int] = 1,
        on_progress: Callable[[Progress], None] | None = None,
        history: dict[str, Sizing] | None = None,
        rate_limit: Callable[[Provider], Any] | None = None,
        options: PoolOptions | None = None,
        **knobs: Any,
    ):
        """`providers`: a registry (the pool follows its changes for `role`) or a fixed list
        (change it mid-job with `add`/`remove`). `options`: the numbers that shape a job
        (`PoolOptions`); a knob may also be named here (`Pool(ps, max_batch=64)`), changing
        that one option. `eligible(provider)` is asked before every
        pull (the router's "may serve now", clearance included). `admission(provider)` is
        awaited for a cloud provider BEFORE it pulls items and returns a permit with
        `release()` and `throttled(retry_after, kind)` (sync or async), e.g.
        `CloudBudget.admission`, which also binds the permit so a `BudgetedProvider` uses it
        instead of taking a second. The pool calls `throttled(...)` on a rate-limited call
        (unless the permit already recorded it), then `release()` once per permit
        (`record_rtt=False` when it carried no request). Locals never ask it; an exception
        from it pauses that provider for `throttle_wait`.
        `lanes(provider)`: batches one provider may have in flight at once, asked again
        before every pull, so a cloud provider's lanes follow the budget's effective limit.
        `history`: what earlier pools learned of each provider's speed (provider id ->
        `Sizing`), shared and updated in place, so a provider's first batch of the next job
        starts at the size its measured speed calls for instead of `initial_batch`.
        `rate_limit(provider)`: for a cloud provider, the key's known request rate (an object
        with `per_s`, requests a second, and `lanes_follow`, true when the budget adds lanes
        until that rate is reached), or None when no trusted rate is known
        (`CloudBudget.key_rate`). Requests are then the scarce resource: see
        `Sizer.rate_floor`."""
        self.options = PoolOptions.of(options, **knobs)
        if isinstance(providers, ProviderRegistry):
            if role is None:
                raise ValueError("a pool over a registry needs the role it embeds for")
            self.registry: ProviderRegistry | None = providers
            self._static: list[Provider] = []
        else:
            self.registry = None
            self._static = list(providers)
        self.role = Role(role) if role is not None else None
        self.clock = clock or (self.registry.clock if self.registry else SystemClock())
        self.on_progress = on_progress
        reserve = cloud_reserve_only if callable(cloud_reserve_only) else (lambda: cloud_reserve_only)
        self._state = PoolState(self.clock)
        sizer = Sizer(self.options, rate_limit)
        planner = Planner(self._state, self.options, sizer, eligible or (lambda p: True), reserve)
        self._lanes = Lanes(
            self._state,
            self.options,
            sizer,
            planner,
            lanes if callable(lanes) else (lambda p: lanes),
            admission,
        )
        self._members = Members(
            self._state, sizer, self._lanes, {} if history is None else history, self.role
        )

    # -- public ------------------------------------------------------------------------

    async def run(
        self, texts: Sequence[str], sink: Sink, *, on_progress: Callable[[Progress], Any] | None = None
    ) -> PoolReport:
        """Embed every text; `sink(indices, vectors, provider)` is awaited once per finished
        batch, one at a time, and every index reaches it exactly once. Raises the sink's
        exception if a write fails, `PoolStalled` if nothing could make progress."""
        state = self._state
        if state.job is not None:
            raise RuntimeError("a pool runs one job at a time")
        job = PoolJob(texts, sink, self.clock.now(), on_progress or self.on_progress)
        if job.total == 0:
            return job.report
        state.job = job
        state.changed = asyncio.Event()
        unsubscribe = None
        try:
            if self.registry is not None:
                unsubscribe = self.registry.subscribe(self._members.on_registry)
                initial = self.registry.list(self.role)
            else:
                initial = [p for p in self._static if self._members.serves(p)]
                if not initial:
                    raise NoProviderAvailable("the embedding pool was given no provider to pull with")
            for p in initial:
                self._members.join(p)
            await self._supervise(job)
            job.report.elapsed = self.clock.now() - job.started
            return job.report
        finally:
            if unsubscribe:
                unsubscribe()
            await self._members.stop_all()
            state.job = None

    def add(self, provider: Provider) -> None:
        """A provider joins the running job (and later ones, for a fixed list)."""
        if self.registry is None and provider not in self._static:
            self._static.append(provider)
        if self._state.job is not None and self._members.serves(provider):
            self._members.join(provider)

    def remove(self, provider_id: str) -> None:
        """A provider leaves: its in-flight batches go back to the queue, nothing is lost."""
        self._static = [p for p in self._static if p.id != provider_id]
        self._members.leave(provider_id)

    @property
    def progress(self) -> Progress | None:
        job = self._state.job
        return self._state.progress(job) if job else None

    # -- supervision -------------------------------------------------------------------

    async def _supervise(self, job: PoolJob) -> None:
        stall_timeout = self.options.stall_timeout
        while not job.finished:
            if job.error is not None:
                raise job.error
            until = None
            if stall_timeout is not None:
                until = job.last_progress + stall_timeout
                if self.clock.now() >= until:
                    now = self.clock.now()
                    raise PoolStalled(
                        job.done,
                        job.total,
                        now - job.last_progress,
                        {m.id: m.describe(now) for m in self._state.members.values()},
                    )
            await self._state.wait(until)
        if job.error is not None:
            raise job.error


# -- who pulls -------------------------------------------------------------------------


class Members:
    """Who pulls in a running job: providers join (with their lanes and their sizing from the
    history) and leave (their batches in flight go back to the queue; a lane mid-write finishes
    its write). Follows a registry's changes for the pool's role.

    It refuses to decide whether a member may serve at a given moment (`Planner`, through the
    router's `eligible`)."""

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
