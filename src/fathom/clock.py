"""Time, injected: a monotonic `now()` and an `async sleep()`, real or virtual.

Every piece of timing logic in Fathom (the pool's batch sizing, ejection backoff and straggler
detection, the budget's cooldowns and windows) reads time through a `Clock`, so tests run it in
virtual time: deterministic, independent of the machine's speed, and fast.

The virtual clock the tests use, `FakeClock`, lives with them (`tests/fake_clock.py`): the
product itself only ever runs on `SystemClock` or a clock a caller hands it.

This module refuses to know about anything it times.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds; only differences are meaningful."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's monotonic clock and asyncio's sleep."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


async def wait_event(clock: Clock, event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set or `timeout` seconds of `clock` time pass; True if set.

    `asyncio.wait_for` would time out on the loop's real clock; this one honours an injected
    clock, so a `FakeClock` test can wait "30 seconds" in no time.
    """
    if event.is_set():
        return True
    if timeout is None:
        await event.wait()
        return True
    if timeout <= 0:
        return event.is_set()
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        sleeper.cancel()
    return event.is_set()
