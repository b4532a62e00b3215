"""`FakeClock`: virtual time for tests, moving only when every task waits.

It advances virtual time by itself, but only when nothing else on the event loop can run:
every task is then waiting (on a clock sleep, an event, a queue) and the next thing that can
happen is the earliest pending clock sleep, so time jumps straight to it. This is what trio's
autojump clock does; a test with fifty concurrent workers and an hour of virtual service time
finishes in milliseconds, the same way every run.

It cannot see work done outside the event loop: a task waiting on a thread
(`asyncio.to_thread`) looks idle to it, so virtual time may jump while the thread runs. Use
`SystemClock` around real model inference. It satisfies `fathom.clock.Clock`, so it can be
injected wherever the product takes a clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import weakref


class FakeClock:
    """Virtual time for tests.

    With `auto_advance=True` (the default) time moves only when the event loop has nothing
    else ready to run, and then straight to the earliest pending sleep; sleepers due at the
    same instant wake in the order they went to sleep. With `auto_advance=False` time moves
    only through `advance()`.
    """

    # How many loop turns to wait before calling the loop idle, on an event loop that does
    # not expose its ready queue (not CPython's asyncio); unused on the standard loop.
    _FALLBACK_IDLE_TURNS = 50

    def __init__(self, start: float = 0.0, *, auto_advance: bool = True):
        self._now = float(start)
        self.auto_advance = auto_advance
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._driver: asyncio.Task[None] | None = None

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if not seconds > 0:  # also catches NaN
            await asyncio.sleep(0)
            return
        if math.isinf(seconds):
            # Nothing will ever wake it; still a cancellation point, never a time target.
            await asyncio.get_running_loop().create_future()
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        if self.auto_advance:
            self._ensure_driver(loop)
        await fut

    def advance(self, seconds: float) -> None:
        """Move time forward by hand and wake every sleeper now due."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._now += seconds
        self._wake_due()

    @property
    def pending(self) -> int:
        """Sleepers not yet woken (cancelled ones excluded)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def next_deadline(self) -> float | None:
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    # -- internals ---------------------------------------------------------------------

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    def _ensure_driver(self, loop: asyncio.AbstractEventLoop) -> None:
        d = self._driver
        if d is not None and not d.done() and d.get_loop() is loop:
            return
        self._driver = loop.create_task(self._drive(loop), name="FakeClock.driver")
        _DRIVERS.add(self._driver)

    async def _drive(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            await self._until_idle(loop)
            deadline = self.next_deadline()
            if deadline is None:
                return  # no sleeper left; the next sleep() starts a new driver
            if deadline > self._now:
                self._now = deadline
            self._wake_due()

    async def _until_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        ready = getattr(loop, "_ready", None)
        if ready is None:
            for _ in range(self._FALLBACK_IDLE_TURNS):
                await asyncio.sleep(0)
            return
        # CPython's loop runs `_ready` in batches; when this task runs and the deque holds
        # nothing else (left in this batch or scheduled by it), nothing can run before time
        # moves. Other clocks' drivers do not count: two drivers each waiting for the other
        # to go quiet would spin forever.
        await asyncio.sleep(0)
        while any(not _is_driver(h) for h in ready):
            await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now:.6f}, pending={self.pending})"


_DRIVERS: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()


def _is_driver(handle: object) -> bool:
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    return task is not None and task in _DRIVERS
