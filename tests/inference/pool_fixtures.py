"""Fakes at the Provider cut-off for pool and router tests, timed by an injected FakeClock.

A `FakeEmbedder` serves `len(texts) / rate + latency` virtual seconds per batch and returns
vectors that encode each text's index, so a sink can check every row it receives is the row
for its index. Faults are scripted per call (`script(call_no, now) -> action`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fathom.errors import ProviderError, ProviderUnavailable
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.roles import Role
from tests.fake_clock import FakeClock

WIDTH = 4


class Throttled(ProviderError):
    """Shaped like the openrouter module's RateLimited: duck-typed by the pool and router."""

    def __init__(self, retry_after: float | None, kind: str = "429"):
        self.retry_after, self.throttle_kind = retry_after, kind
        super().__init__(f"rate limited ({kind}), retry after {retry_after}")


@dataclass
class Call:
    start: float
    texts: list[str]
    end: float | None = None
    outcome: str = "pending"  # ok | failed | throttled | cancelled


# What a scripted call does: None (serve), "fail" (after its service time), "fail-now",
# "throttle", "hang" (never returns), "late" (serves after `late_s` ignoring cancellation).
Script = Callable[[int, float], str | None]


class FakeEmbedder(Provider):
    def __init__(
        self,
        pid: str,
        clock: FakeClock,
        *,
        rate: float = 1.0,
        latency: float = 0.0,
        kind: Kind = Kind.LOCAL,
        roles: Sequence[Role] = (Role.EMBEDDING, Role.CODE_EMBEDDING),
        script: Script | None = None,
        retry_after: float = 5.0,
        late_s: float = 50.0,
    ):
        self.info = ProviderInfo(
            id=pid,
            kind=kind,
            roles=frozenset(roles),
            model="fake-model",
            width=WIDTH,
            upstream="up" if kind is Kind.CLOUD else None,
        )
        self.clock = clock
        self.rate, self.latency = rate, latency
        self.script = script
        self.retry_after, self.late_s = retry_after, late_s
        self.calls: list[Call] = []
        self.in_flight = 0
        self.peak_in_flight = 0

    @property
    def served(self) -> int:
        return sum(len(c.texts) for c in self.calls if c.outcome == "ok")

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        call = Call(self.clock.now(), list(texts))
        self.calls.append(call)
        action = self.script(len(self.calls), call.start) if self.script else None
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if action == "fail-now":
                raise ProviderUnavailable(f"{self.id} is down")
            if action == "throttle":
                raise Throttled(self.retry_after)
            if action == "hang":
                await asyncio.get_running_loop().create_future()
            if action == "late":
                try:
                    await self.clock.sleep(self.late_s)
                except asyncio.CancelledError:
                    pass  # a provider that finishes its batch even when nobody waits
            else:
                await self.clock.sleep(self.latency + len(texts) / self.rate)
            if action == "fail":
                raise ProviderUnavailable(f"{self.id} dropped mid-batch")
            call.outcome = "ok"
            return vectors_for(texts)
        except asyncio.CancelledError:
            call.outcome = "cancelled"
            raise
        except Throttled:
            call.outcome = "throttled"
            raise
        except Exception:
            call.outcome = "failed"
            raise
        finally:
            call.end = self.clock.now()
            self.in_flight -= 1


def texts_for(n: int) -> list[str]:
    return [f"chunk {i}" for i in range(n)]


def vectors_for(texts: Sequence[str]) -> np.ndarray:
    out = np.zeros((len(texts), WIDTH), dtype=np.float32)
    for row, t in enumerate(texts):
        out[row, 0] = float(t.split()[-1])
        out[row, 1] = 1.0
    return out


@dataclass
class Collector:
    """The job's sink: records who wrote each index, and every second write of one."""

    clock: FakeClock | None = None
    writes: dict[int, str] = field(default_factory=dict)
    twice: list[int] = field(default_factory=list)
    batches: list[tuple[float, str, list[int]]] = field(default_factory=list)

    async def __call__(self, indices: list[int], vectors: np.ndarray, provider: Provider) -> None:
        assert vectors.shape == (len(indices), WIDTH)
        for i, v in zip(indices, vectors):
            assert int(v[0]) == i, "a row reached the sink under another row's index"
            if i in self.writes:
                self.twice.append(i)
            self.writes[i] = provider.id
        self.batches.append((self.clock.now() if self.clock else 0.0, provider.id, list(indices)))

    def assert_exactly_once(self, n: int) -> None:
        assert self.twice == []
        assert sorted(self.writes) == list(range(n))

    def count(self, pid: str) -> int:
        return sum(1 for v in self.writes.values() if v == pid)


def window(fail_from: float, fail_until: float, action: str = "fail") -> Script:
    """Fail every call that starts inside [fail_from, fail_until)."""
    return lambda n, now: action if fail_from <= now < fail_until else None


def nth(calls: set[int], action: str) -> Script:
    return lambda n, now: action if n in calls else None


class ClearedFlags:
    """A router's `is_cleared` for tests of routing alone: the (role, provider id) pairs a test
    granted, instead of the gate's verdicts."""

    def __init__(self, pairs: Sequence[tuple[Role, str]] = ()):
        self._pairs: set[tuple[Role, str]] = set(pairs)

    def grant(self, role: Role, provider_id: str) -> None:
        self._pairs.add((Role(role), provider_id))

    def revoke(self, role: Role, provider_id: str) -> None:
        self._pairs.discard((Role(role), provider_id))

    def __call__(self, role: Role, provider: Provider) -> bool:
        return (Role(role), provider.id) in self._pairs
