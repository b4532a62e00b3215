"""The lanes: worker tasks, one or more per provider, that each pull a batch from the job's
queue when their provider has capacity, embed it, and write it through the job's sink.

A lane asks the `Planner` what to do next, takes a cloud permit BEFORE it pulls items (so a
throttled provider holds no work), and settles every outcome here: a written batch, a
failure (back to the queue front; the provider halves, and is ejected after repeated
failures), a throttle (a pause holding no work), a refusal as too large (a ceiling, via the
`Sizer`), a losing straggler copy (discarded, never written).

How a batch went wrong is sorted here too, where each outcome is settled: the check of what a
provider returned (`check_batch`, raising `MalformedBatch`) and the duck-typed tests that tell
a throttle (`is_throttle`) or a batch too large (`is_too_large`) from a failure, duck-typed so
routing never imports a provider module.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from fathom.errors import ProviderError
from fathom.inference.pool.plan import (
    Admission,
    Attempt,
    Member,
    Phase,
    Planner,
    PoolOptions,
    PoolState,
    Sizer,
    Step,
    bump,
)
from fathom.inference.provider import Provider

log = logging.getLogger(__name__)


class Lanes:
    def __init__(
        self,
        state: PoolState,
        options: PoolOptions,
        sizer: Sizer,
        planner: Planner,
        lanes: Callable[[Provider], int],
        admission: Admission | None,
    ):
        self.state, self.options, self.sizer, self.planner = state, options, sizer, planner
        self._lanes = lanes
        self.admission = admission

    # -- how many ----------------------------------------------------------------------

    def wanted(self, provider: Provider) -> int:
        return max(1, int(self._lanes(provider)))

    def spawn(self, m: Member, n: int) -> None:
        job = self.state.job
        assert job is not None
        for _ in range(n):
            task = asyncio.get_running_loop().create_task(
                self.run(m), name=f"pool-lane:{m.id}:{len(m.tasks)}", context=job.context.copy()
            )
            m.tasks[task] = Phase.IDLE

    def follow(self, m: Member, me: asyncio.Task[Any]) -> bool:
        """Match the member's lane count to `lanes(provider)` as it is now (for a cloud
        provider: the budget's effective limit, which an override, a discovery or a halving
        moves mid-job). Grows at once; shrinks by letting this lane go. False: this lane
        must exit."""
        want = self.wanted(m.provider)
        live = [t for t in m.tasks if not t.done()]
        m.lanes = want
        if len(live) < want:
            self.spawn(m, want - len(live))
        elif len(live) > want:
            m.tasks.pop(me, None)
            return False
        return True

    # -- one lane ----------------------------------------------------------------------

    async def run(self, m: Member) -> None:
        try:
            await self._pull_loop(m)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A sink failure is already recorded; anything else is a bug that must fail the
            # job loudly rather than leave its items stranded in a dead lane.
            job = self.state.job
            if job is not None and job.error is None:
                job.error = exc
                self.state.notify()
            raise

    async def _pull_loop(self, m: Member) -> None:
        me = asyncio.current_task()
        assert me is not None
        while True:
            if not self.follow(m, me):
                return
            plan = self.planner.next(m)
            if plan.action == "exit":
                return
            if plan.action == "wait":
                await self.state.wait(plan.until)
                continue
            permit = None
            if m.is_cloud and self.admission is not None:
                # Wait for the budget holding no items: the queue stays available to the
                # locals for as long as this wait lasts.
                m.admitting += 1
                try:
                    permit = await self.admission(m.provider)
                except Exception as exc:  # a budget refusal pauses this provider, not the job
                    log.warning(
                        "pool: %s could not get a cloud permit (%s: %s); pausing",
                        m.id,
                        type(exc).__name__,
                        exc,
                    )
                    m.cooldown_until = self.state.clock.now() + self.options.throttle_wait
                    continue
                finally:
                    m.admitting -= 1
                plan = self.planner.next(m)  # the world moved while we waited
                if plan.action not in ("pull", "dup"):
                    await release(permit, used=False)
                    continue
            attempt = self._start(m, plan)
            m.tasks[me] = Phase.EMBED
            try:
                await self._attempt(m, attempt, permit)
            finally:
                if me in m.tasks:
                    m.tasks[me] = Phase.IDLE

    def _start(self, m: Member, plan: Step) -> Attempt:
        job = self.state.job
        assert job is not None
        now = self.state.clock.now()
        if plan.action == "pull":
            work = job.take(plan.size)
        else:
            assert plan.work is not None
            work = plan.work
            job.report.duplicates += 1
            log.info(
                "pool: %s duplicates a straggling batch of %d from %s",
                m.id,
                len(work.indices),
                work.attempts[0].member.id,
            )
        a = Attempt(work, m, now, self.sizer.expected(m.sizing, len(work.indices)), plan.probe)
        work.copies += 1
        work.attempts.append(a)
        m.attempts.add(a)
        if plan.probe:
            m.probing = True
        self.state.notify()
        return a

    def _end(self, a: Attempt) -> None:
        """An attempt is over (written, failed, superseded or cancelled). When it was the
        work's last copy and the work is not written, its items return to the queue front."""
        job = self.state.job
        work, m = a.work, a.member
        if a in m.attempts:
            m.attempts.discard(a)
        if a in work.attempts:
            work.attempts.remove(a)
            work.copies -= 1
        if a.probe:
            m.probing = False
        if work.copies == 0 and job is not None:
            job.requeue(work)
        self.state.notify()

    async def _attempt(self, m: Member, a: Attempt, permit: Any) -> None:
        job = self.state.job
        assert job is not None
        texts = [job.texts[i] for i in a.work.indices]
        a.task = asyncio.ensure_future(m.provider.embed(texts))
        try:
            raw = await a.task
            vectors = check_batch(m.provider, raw, len(texts))
        except asyncio.CancelledError:
            self._end(a)
            me = asyncio.current_task()
            if permit is not None:
                await release(permit, used=False, background=True)
            if a.superseded and me is not None and not me.cancelling():
                return  # the other copy was written first; this lane carries on
            raise
        except Exception as exc:
            self._end(a)
            await self._failed(m, a, exc, permit)
            return
        if permit is not None:
            await release(permit)
        self.sizer.learn(m.sizing, len(texts), self.state.clock.now() - a.started)
        if a.probe or m.ejected_until is not None:
            log.info("pool: %s passed its re-probe and pulls again", m.id)
        m.failures, m.ejections, m.ejected_until, m.ejected_at = 0, 0, None, None
        a.work.has_result = True
        try:
            await self._deliver(m, a, vectors)
        finally:
            if not a.work.done:
                a.work.has_result = False
            self._end(a)

    async def _deliver(self, m: Member, a: Attempt, vectors: np.ndarray) -> None:
        job = self.state.job
        assert job is not None
        me = asyncio.current_task()
        async with job.sink_lock:
            work = a.work
            if work.done:
                job.report.discarded += len(work.indices)
                return
            if me is not None and me in m.tasks:
                m.tasks[me] = Phase.DELIVER
            try:
                await job.sink(list(work.indices), vectors, m.provider)
            except BaseException as exc:
                if not isinstance(exc, asyncio.CancelledError):
                    job.error = exc
                    self.state.notify()
                raise
            work.done = True
            job.done += len(work.indices)
            job.last_progress = self.state.clock.now()
            bump(job.report.per_provider, m.id, len(work.indices))
            bump(job.report.batches, m.id)
            if job.on_progress is not None:
                try:  # under the lock, so reports arrive in order, one per written batch
                    job.on_progress(self.state.progress(job))
                except Exception:  # a progress bar must never fail an index job
                    log.exception("pool: progress callback failed")
        # The losing copy, if any, stops now instead of finishing work nobody will write.
        for other in list(work.attempts):
            if other is not a and other.task is not None and not other.task.done():
                other.superseded = True
                other.task.cancel()
        self.state.notify()

    async def _failed(self, m: Member, a: Attempt, exc: Exception, permit: Any) -> None:
        job = self.state.job
        assert job is not None
        now = self.state.clock.now()
        if is_throttle(exc):
            await self._throttled(m, exc, permit, now)
            return
        if permit is not None:
            await release(permit)
        if is_too_large(exc) and len(a.work.indices) > 1:
            # Its items are back at the queue front already; the next pull is smaller.
            bump(job.report.too_large, m.id)
            self.sizer.refused_as_too_large(m.sizing, m.id, len(a.work.indices), exc)
            self.state.notify()
            return
        bump(job.report.failures, m.id)
        m.failures += 1
        self.sizer.failed(m.sizing)
        retryable = getattr(exc, "retryable", True)
        if m.ejected_at is not None and a.started <= m.ejected_at and not a.probe:
            # A batch that was already in flight when this episode ejected the provider: the
            # same failure, seen by another lane. The back-off grows once per episode.
            self.state.notify()
            return
        if a.probe or not retryable or m.failures >= self.options.max_failures:
            self._eject(m, exc, now)
        self.state.notify()

    async def _throttled(self, m: Member, exc: Exception, permit: Any, now: float) -> None:
        job = self.state.job
        assert job is not None
        retry_after = getattr(exc, "retry_after", None)
        wait = retry_after if retry_after is not None and retry_after > 0 else self.options.throttle_wait
        m.cooldown_until = max(m.cooldown_until, now + wait)
        bump(job.report.throttles, m.id)
        log.info(
            "pool: %s rate-limited (%s), pauses %.1fs holding no work",
            m.id,
            getattr(exc, "throttle_kind", "?"),
            wait,
        )
        if permit is not None:
            # A budget-wrapped provider already told its permit; say it once.
            if not getattr(permit, "throttles", 0):
                await settle(permit, "throttled", retry_after, getattr(exc, "throttle_kind", None))
            await release(permit)
        self.state.notify()

    def _eject(self, m: Member, exc: Exception, now: float) -> None:
        """Stop pulling with `m` until a back-off that doubles per failure episode ends;
        then one small batch re-probes it."""
        job = self.state.job
        assert job is not None
        o = self.options
        m.ejections += 1
        m.ejected_at = now
        backoff = min(o.eject_max, o.eject_base * 2 ** (m.ejections - 1))
        m.ejected_until = now + backoff
        m.eject_reason = f"{type(exc).__name__}: {exc}"
        bump(job.report.ejections, m.id)
        log.warning(
            "pool: %s ejected for %.0fs after %d failure(s): %s", m.id, backoff, m.failures, m.eject_reason
        )


async def release(permit: Any, *, used: bool = True, background: bool = False) -> None:
    """Give a permit back. One that carried no request (the queue emptied while it was
    awaited, or the call was cancelled) must not count as a round trip: a ~0 s sample would
    drag the budget's Little's-law estimate down."""
    fn = getattr(permit, "release", None)
    kwargs: dict[str, Any] = {}
    if fn is not None and not used:
        try:
            if "record_rtt" in inspect.signature(fn).parameters:
                kwargs["record_rtt"] = False
        except (TypeError, ValueError):
            pass
    await settle(permit, "release", background=background, **kwargs)


async def settle(permit: Any, method: str, *args: Any, background: bool = False, **kwargs: Any) -> None:
    """Call a permit method that may be sync or async; never let a permit error fail a job."""
    fn = getattr(permit, method, None)
    if fn is None:
        return
    try:
        r = fn(*args, **kwargs)
        if inspect.isawaitable(r):
            if background:
                asyncio.ensure_future(r)
            else:
                await r
    except Exception:
        log.exception("pool: permit.%s failed", method)


# -- how a batch went wrong ------------------------------------------------------------


class MalformedBatch(ProviderError):
    """A provider returned vectors that cannot be written (wrong count or width, or values
    that are not finite). Nothing from that batch is written; the provider is ejected."""

    retryable = False

    def __init__(self, provider_id: str, problem: str):
        self.provider_id, self.problem = provider_id, problem
        super().__init__(f"provider {provider_id} returned a malformed batch: {problem}")


def is_too_large(exc: BaseException) -> bool:
    """The provider refused a request for carrying more than it takes at once (too many
    inputs, too many tokens over the batch, a 413): the same items in smaller batches pass.
    Duck-typed on `too_large`; a sidecar relays the error's class name as `code`."""
    return getattr(exc, "too_large", False) is True or getattr(exc, "code", None) == "BatchTooLarge"


def is_throttle(exc: BaseException) -> bool:
    """A rate limit (429) or an exhausted in-flight budget (402): the account says wait; the
    provider is healthy, so it is paused, never ejected. Duck-typed on `throttle_kind` (and
    `retry_after`), so routing never imports a provider module."""
    return getattr(exc, "throttle_kind", None) in ("429", "402")


def check_batch(provider: Provider, raw: Any, n: int) -> np.ndarray:
    arr = np.asarray(raw, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise MalformedBatch(provider.id, f"expected {n} vectors, got shape {arr.shape}")
    width = provider.info.width
    if width is not None and arr.shape[1] != width:
        raise MalformedBatch(provider.id, f"expected width {width}, got {arr.shape[1]}")
    if not np.isfinite(arr).all():
        raise MalformedBatch(provider.id, "non-finite values")
    return arr
