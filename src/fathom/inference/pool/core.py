"""`Pool`: the face of the pull-based fan-out pool (see the package docstring for what it
guarantees). It takes the collaborators and one `PoolOptions`, runs one job at a time, and
hands the work to its parts: `Members` (who pulls), `Lanes` (the pulling), `Planner` (what a
lane does next), `Sizer` (how large a batch), over the shared `PoolState`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fathom.clock import Clock, SystemClock
from fathom.errors import NoProviderAvailable
from fathom.inference.pool.errors import PoolStalled
from fathom.inference.pool.lanes import Lanes
from fathom.inference.pool.members import Members
from fathom.inference.pool.options import PoolOptions
from fathom.inference.pool.plan import Planner
from fathom.inference.pool.sizing import Sizer, Sizing
from fathom.inference.pool.state import Admission, PoolJob, PoolReport, PoolState, Progress, Sink
from fathom.inference.provider import Provider
from fathom.inference.registry import ProviderRegistry
from fathom.roles import Role


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
