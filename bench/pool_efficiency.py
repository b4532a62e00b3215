"""How close the pull pool gets to the ideal throughput of a heterogeneous fleet.

Run by hand:  .venv/bin/python bench/pool_efficiency.py [--quick]

Providers are latency-only (they sleep, they compute nothing): a batch of n items takes
`overhead + n / rate` seconds. The ideal is every provider busy the whole job at its best
batch size (`max_batch`), with no tail: ideal throughput = sum over providers of
lanes × max_batch / (overhead + max_batch / rate). Efficiency = pool throughput / ideal; the
target is ≥ 0.95.

Each scenario runs twice: in virtual time (FakeClock: exact, machine-independent) and in real
time (SystemClock + asyncio sleeps, the whole scenario sped up by `--speedup` so a run takes
seconds; the real run includes the event loop's own overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fake_clock

from tests.fake_clock import FakeClock  # noqa: E402

from fathom.clock import Clock, SystemClock  # noqa: E402
from fathom.inference.pool import Pool  # noqa: E402
from fathom.inference.provider import Kind, Provider, ProviderInfo  # noqa: E402
from fathom.roles import Role  # noqa: E402

MAX_BATCH = 256


@dataclass(frozen=True)
class Spec:
    id: str
    rate: float  # items per second once the call is under way
    overhead: float = 0.0  # seconds per call (network round trip, kernel launch)
    lanes: int = 1
    kind: Kind = Kind.LOCAL

    def best(self, max_batch: int = MAX_BATCH) -> float:
        return self.lanes * max_batch / (self.overhead + max_batch / self.rate)


class LatencyOnly(Provider):
    def __init__(self, spec: Spec, clock: Clock):
        self.spec, self.clock = spec, clock
        self.info = ProviderInfo(
            id=spec.id, kind=spec.kind, roles=frozenset({Role.CODE_EMBEDDING}), model="bench", width=8
        )

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        await self.clock.sleep(self.spec.overhead + len(texts) / self.spec.rate)
        return np.zeros((len(texts), 8), dtype=np.float32)


SCENARIOS: dict[str, list[Spec]] = {
    "rates 4:2:1, per-item cost only": [
        Spec("gpu-a", 400),
        Spec("gpu-b", 200),
        Spec("cloud", 100, kind=Kind.CLOUD),
    ],
    "GPU + sidecar + cloud with round trips": [
        Spec("in-process", 130, 0.002),
        Spec("sidecar-a100", 900, 0.015),
        Spec("openrouter", 600, 0.120, lanes=4, kind=Kind.CLOUD),
    ],
    "one fast GPU, five slow sidecars": [
        Spec("fast", 1000, 0.005),
        *[Spec(f"slow-{i}", 60, 0.010) for i in range(5)],
    ],
}


def scaled(specs: list[Spec], k: float) -> list[Spec]:
    """The same fleet k times faster: every duration divided by k."""
    return [Spec(s.id, s.rate * k, s.overhead / k, s.lanes, s.kind) for s in specs]


async def run_one(specs: list[Spec], n: int, clock: Clock, target: float) -> tuple[float, dict[str, int]]:
    providers = [LatencyOnly(s, clock) for s in specs]
    pool = Pool(
        providers,
        clock=clock,
        lanes=lambda p: p.spec.lanes,
        target_latency=target,
        max_batch=MAX_BATCH,
        stall_timeout=None,
    )
    written = 0

    async def sink(indices, vectors, provider):
        nonlocal written
        written += len(indices)

    report = await pool.run([f"chunk {i}" for i in range(n)], sink)
    assert written == n
    return report.elapsed, report.per_provider


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--seconds", type=float, default=30.0, help="ideal job length in (virtual) seconds, before speed-up"
    )
    ap.add_argument("--target", type=float, default=1.0, help="target batch latency, seconds")
    ap.add_argument("--speedup", type=float, default=5.0, help="real-time run k× faster")
    ap.add_argument("--quick", action="store_true", help="virtual time only")
    args = ap.parse_args()

    rows = []
    for name, specs in SCENARIOS.items():
        ideal_rate = sum(s.best() for s in specs)
        n = int(ideal_rate * args.seconds)
        elapsed, per = asyncio.run(run_one(specs, n, FakeClock(), args.target))
        rows.append((name, "virtual", n, n / elapsed, ideal_rate, per))
        if not args.quick:
            k = args.speedup
            fast = scaled(specs, k)
            t0 = time.perf_counter()
            elapsed, per = asyncio.run(run_one(fast, n, SystemClock(), args.target / k))
            wall = time.perf_counter() - t0
            rows.append((name, f"real ({wall:.1f}s wall, {k:g}× speed)", n, n / elapsed / k, ideal_rate, per))

    print(
        f"\nPool efficiency (target batch latency {args.target}s, max batch {MAX_BATCH}; "
        f"ideal = every provider busy at its best batch size, no tail)\n"
    )
    head = f"{'scenario':42} {'clock':30} {'items':>7} {'items/s':>9} {'ideal/s':>9} {'efficiency':>10}"
    print(head)
    print("-" * len(head))
    worst = 1.0
    for name, mode, n, rate, ideal, _per in rows:
        eff = rate / ideal
        worst = min(worst, eff)
        print(f"{name:42} {mode:30} {n:7d} {rate:9.1f} {ideal:9.1f} {eff:10.3f}")
    print(f"\nworst efficiency {worst:.3f} (target ≥ 0.95): {'PASS' if worst >= 0.95 else 'BELOW TARGET'}")


if __name__ == "__main__":
    main()
