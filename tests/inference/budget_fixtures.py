"""Fake time for the budget's tests: a clock and an async sleep that only move when told.

`await fake.advance(dt)` moves the clock through every sleeper's deadline in order, letting the
event loop settle at each, so timers fire exactly when they would and no test waits on the
wall clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.roles import Role


async def settle(rounds: int = 30) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeTime:
    def __init__(self, start: float = 1000.0):
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        if delay <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + delay, next(self._seq), fut))
        await fut

    async def advance(self, dt: float) -> None:
        target = self.now + dt
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self.now = max(self.now, deadline)
            if not fut.done():
                fut.set_result(None)
            await settle()
        self.now = target
        await settle()


class FixedRng:
    """`random()` always returns `value`: the jitter factor is then 1 + value × jitter."""

    def __init__(self, value: float = 0.5):
        self.value = value

    def random(self) -> float:
        return self.value


class InFlight:
    """Counts requests actually in flight at the provider cut-off, across providers."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.done = 0

    def enter(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        self.now -= 1
        self.done += 1


class FakeCloud(Provider):
    """A cloud provider that takes `service_s` of fake time per request and may raise."""

    def __init__(
        self,
        time: FakeTime,
        name: str = "a",
        *,
        service_s: float = 1.0,
        tracker: InFlight | None = None,
        kind: Kind = Kind.CLOUD,
        fail: list[BaseException] | None = None,
    ):
        self.info = ProviderInfo(
            id=f"fake:{name}", kind=kind, roles=frozenset({Role.EMBEDDING}), model="m", width=4
        )
        self.time, self.service_s = time, service_s
        self.tracker = tracker or InFlight()
        self.fail = fail if fail is not None else []
        self.calls = 0

    async def _serve(self) -> None:
        self.calls += 1
        self.tracker.enter()
        try:
            await self.time.sleep(self.service_s)
            if self.fail:
                raise self.fail.pop(0)
        finally:
            self.tracker.leave()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        await self._serve()
        return np.zeros((len(texts), 4), dtype=np.float32)

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        await self._serve()
        return [0.0] * len(documents)

    async def chat(self, messages: Sequence[dict[str, Any]], tools: Any = None, **o: Any) -> Any:
        await self._serve()
        from fathom.inference.provider import ChatResult

        return ChatResult(content="ok")
