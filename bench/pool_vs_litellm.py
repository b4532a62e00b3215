"""Fathom's pull pool against LiteLLM's Router on the same heterogeneous endpoints.

    .venv/bin/pip install -e '.[bench]'          # LiteLLM: a benchmark-only extra
    .venv/bin/python bench/pool_vs_litellm.py [--quick] [--seconds S] [--batch B]

Three OpenRouter emulators on 127.0.0.1 stand for three upstreams of one embedding model:
`fast` and `slow` differ in latency, `limited` is as fast as `fast` but enforces a request
rate (a sliding window scaled down to `--window` seconds so a run is short) and answers 429
with Retry-After beyond it. Each also caps its concurrency (more in flight is a 429). The same
N chunks go through each contender in turn, with the emulators reset in between:

- Fathom: `Pool` over one `OpenRouterProvider` per endpoint (pinned upstream), each with the
  `CloudBudget` a server keeps for a key: an override of the endpoint's concurrency (so lanes
  = concurrency, halved on a 429) and what `GET /api/v1/key` reports, read as a sidecar's key
  check reads it (the `limited` endpoint reports its own rate limit; the others the default
  "1000 per hour", which is not trusted). Batches adapt up to `--batch`. Two jobs, both timed:
  the first with no history, the next starting from the batch history the first left,
  written to and read back from a routing state (`routing.json`), as a restarted server
  reads it;
- LiteLLM `Router`, strategies simple-shuffle, least-busy and latency-based-routing, with one
  deployment per endpoint (OpenAI-compatible, `max_parallel_requests` = the endpoint's
  concurrency, the same pin in `extra_body`), driven the way a user would: batches of
  `--batch`, as many concurrent calls as the deployments' slots add up to, the Router's own
  retries (`num_retries=3`), and a failed batch put back after one second.

Fathom learns the limited endpoint's rate limit from its key report, as key discovery does
for a server; LiteLLM has no key discovery and learns it from 429s (rate-limit adherence with
a configured RPM on both sides is `bench/rate_limit.py`). The ideal is every endpoint busy all
the job at `--batch` items per request within its concurrency and rate limit, with no tail:
    ideal items/s = sum over endpoints of min(c × B / (base + B × per_item), rate × B).
Efficiency = items/s / ideal. The upstreams answer with hashed vectors (see
`_common.use_hash_encoders`), each emulator in a process of its own (`_emulator_process.py`),
so the client under test shares no GIL with them: what a request costs is the emulator's
configured latency, as a floor that a loaded machine does not always reach. So the run first
measures the latency each endpoint delivers (`--calibrate` seconds, every endpoint driven at
once at B a request by the simplest client) and also gives each contender's throughput ÷ the
ideal at those latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path

import _common as c

from fathom.config import RoutingStore  # noqa: E402
from fathom.devtools.emulator import MINILM  # noqa: E402
from fathom.inference.budget import CloudBudget  # noqa: E402
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider  # noqa: E402
from fathom.inference.pool import Pool, Sizing  # noqa: E402
from fathom.roles import Role  # noqa: E402
from fathom.service import record_of, sizing_of  # noqa: E402

WIDTH = 64
PIN = "alpha"
FIRST = "Fathom Pool, first job"
NEXT = "Fathom Pool, next job (history)"


@dataclass(frozen=True)
class Endpoint:
    name: str
    concurrency: int
    base_s: float
    per_item_s: float
    window_allowance: int | None = None  # requests per window (None: no rate limit)

    def capacity(self, batch: int, window_s: float, latency_s: float | None = None) -> float:
        """Best steady items/s at `batch` items per request (at `latency_s` a request, if
        given, instead of the configured latency)."""
        latency = self.base_s + batch * self.per_item_s if latency_s is None else latency_s
        by_latency = self.concurrency * batch / latency
        if self.window_allowance is None:
            return by_latency
        return min(by_latency, self.window_allowance / window_s * batch)


ENDPOINTS = [
    Endpoint("fast", 4, 0.10, 0.004),
    Endpoint("slow", 4, 0.30, 0.012),
    Endpoint("limited", 4, 0.10, 0.004, window_allowance=20),
]


class Fleet:
    def __init__(self, window_s: float):
        self.window_s = window_s
        self.emus = {e.name: c.start_emulator_process(e.name, WIDTH) for e in ENDPOINTS}

    def reset(self) -> None:
        for e in ENDPOINTS:
            ctl = self.emus[e.name].control
            ctl.reset()
            ctl.latency(base_ms=e.base_s * 1000, per_item_ms=e.per_item_s * 1000)
            ctl.set_limits(
                concurrency=e.concurrency,
                **({"rpm": e.window_allowance, "window": self.window_s} if e.window_allowance else {}),
            )
            if e.window_allowance:  # what GET /api/v1/key says of the key's rate limit
                ctl.set_key(rate_limit={"requests": e.window_allowance, "interval": f"{self.window_s:g}s"})

    def counters(self) -> dict[str, dict]:
        return {name: emu.control.counters() for name, emu in self.emus.items()}

    def stop(self) -> None:
        for emu in self.emus.values():
            emu.stop()


@dataclass
class Outcome:
    name: str
    wall_s: float
    items: int
    written_once: bool
    client_errors: int = 0  # failures the caller saw (after the Router's own retries)
    note: str = ""


async def run_fathom(
    fleet: Fleet, chunks: list[str], batch: int, history: dict[str, Sizing], name: str
) -> Outcome:
    providers = []
    budgets: dict[str, CloudBudget] = {}
    for e in ENDPOINTS:
        client = OpenRouterClient(c.BENCH_KEY, base_url=fleet.emus[e.name].base_url)
        p = OpenRouterProvider(
            client,
            model=MINILM,
            roles=[Role.CODE_EMBEDDING],
            upstream=PIN,
            width=WIDTH,
            provider_id=f"openrouter:{e.name}",
        )
        providers.append(p)
        budget = CloudBudget(override=e.concurrency, window_s=fleet.window_s)
        budget.discover(await client.key_info())
        budgets[p.id] = budget
    pool = Pool(
        providers,
        lanes=lambda p: budgets[p.id].effective_limit,
        admission=lambda p: budgets[p.id].admission(p),
        rate_limit=lambda p: budgets[p.id].key_rate(),
        history=history,
        max_batch=batch,
        stall_timeout=120.0,
    )
    seen: Counter[int] = Counter()

    async def sink(indices, vectors, provider):
        seen.update(indices)

    t0 = time.perf_counter()
    try:
        report = await pool.run(chunks, sink)
    finally:
        for p in providers:
            await p.aclose()
        for budget in budgets.values():
            await budget.aclose()
    wall = time.perf_counter() - t0
    once = len(seen) == len(chunks) and max(seen.values()) == 1
    note = f"straggler copies {report.duplicates}" if report.duplicates else ""
    return Outcome(name, wall, len(chunks), once, sum(report.failures.values()), note)


async def delivered_latency(fleet: Fleet, chunks: list[str], batch: int, seconds: float) -> dict[str, float]:
    """Each endpoint's median seconds for a request of `batch`, as this process and machine
    deliver it now: every endpoint driven at once by the simplest client (each slot sends
    the next request as soon as one returns), within its rate limit (the limited endpoint
    gets only its window's allowance). The configured latency is a floor that an in-process
    emulator on a loaded machine does not reach; this is what any contender could get."""
    timings: dict[str, list[float]] = {e.name: [] for e in ENDPOINTS}

    async def slot(e: Endpoint, provider: OpenRouterProvider, until: float, budget: list[int]) -> None:
        while time.perf_counter() < until and budget[0] > 0:
            budget[0] -= 1
            t0 = time.perf_counter()
            await provider.embed(chunks[:batch])
            timings[e.name].append(time.perf_counter() - t0)

    providers, slots = [], []
    until = time.perf_counter() + seconds
    for e in ENDPOINTS:
        client = OpenRouterClient(c.BENCH_KEY, base_url=fleet.emus[e.name].base_url)
        p = OpenRouterProvider(
            client,
            model=MINILM,
            roles=[Role.CODE_EMBEDDING],
            upstream=PIN,
            width=WIDTH,
            provider_id=f"openrouter:{e.name}",
        )
        providers.append(p)
        budget = [e.window_allowance or 1 << 30]
        slots += [slot(e, p, until, budget) for _ in range(e.concurrency)]
    try:
        await asyncio.gather(*slots)
    finally:
        for p in providers:
            await p.aclose()
    return {name: sorted(ts)[len(ts) // 2] for name, ts in timings.items()}


def through_routing_state(history: dict[str, Sizing], folder: Path) -> dict[str, Sizing]:
    """The batch history as a restarted server gets it: written to `routing.json`, read back."""
    RoutingStore(folder).record_batches(
        "code", {pid: record_of(s) for pid, s in history.items() if s.spi is not None}
    )
    return {pid: sizing_of(r) for pid, r in RoutingStore(folder).load().batches["code"].items()}


async def run_litellm(fleet: Fleet, chunks: list[str], batch: int, strategy: str) -> Outcome:
    litellm = c.import_litellm()
    model_list = [
        {
            "model_name": "code-embedding",
            "litellm_params": {
                "model": "openai/" + MINILM,
                "api_base": fleet.emus[e.name].base_url,
                "api_key": c.BENCH_KEY,
                "max_parallel_requests": e.concurrency,
                "extra_body": {"provider": {"order": [PIN], "allow_fallbacks": False}},
            },
        }
        for e in ENDPOINTS
    ]
    router = litellm.Router(model_list=model_list, routing_strategy=strategy, num_retries=3)
    batches = deque(range(0, len(chunks), batch))
    done: Counter[int] = Counter()
    errors = 0

    async def worker() -> None:
        nonlocal errors
        while batches:
            start = batches.popleft()
            part = chunks[start : start + batch]
            try:
                resp = await router.aembedding(model="code-embedding", input=part)
                if len(resp.data) != len(part):
                    raise RuntimeError(f"{len(resp.data)} vectors for {len(part)} texts")
            except Exception:  # noqa: BLE001 - what a caller does: count it, retry the batch later
                errors += 1
                await asyncio.sleep(1.0)
                batches.appendleft(start)
                continue
            done.update(range(start, start + len(part)))

    slots = sum(e.concurrency for e in ENDPOINTS)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(slots)))
    wall = time.perf_counter() - t0
    once = len(done) == len(chunks) and max(done.values()) == 1
    return Outcome(f"LiteLLM {strategy}", wall, len(chunks), once, errors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="ideal job length (sets N)")
    ap.add_argument("--batch", type=int, default=64, help="items per request (both sides' maximum)")
    ap.add_argument("--window", type=float, default=10.0, help="the limited endpoint's window, s")
    ap.add_argument("--quick", action="store_true", help="a ~30 s run (6 s ideal jobs)")
    ap.add_argument(
        "--calibrate",
        type=float,
        default=5.0,
        help="seconds measuring the latency each endpoint delivers on this machine",
    )
    ap.add_argument("--only", choices=["fathom", "litellm"], default=None)
    args = ap.parse_args()
    if args.quick:
        args.seconds = 6.0
    print(c.machine())
    print(f"LiteLLM {c.litellm_version()}")

    ideal = sum(e.capacity(args.batch, args.window) for e in ENDPOINTS)
    n = int(ideal * args.seconds)
    chunks = c.texts(n)
    print("\nEndpoints (each one OpenRouter emulator; one model, upstream pinned):")
    print(
        c.table(
            ["endpoint", "concurrency", "latency", "rate limit", f"best items/s at {args.batch}"],
            [
                (
                    e.name,
                    e.concurrency,
                    f"{e.base_s * 1000:.0f} ms + {e.per_item_s * 1000:g} ms/item",
                    f"{e.window_allowance} req / {args.window:g} s" if e.window_allowance else "none",
                    e.capacity(args.batch, args.window),
                )
                for e in ENDPOINTS
            ],
        )
    )
    print(f"\nN = {n} chunks, ideal {ideal:.0f} items/s ({args.seconds:g} s with no tail)")

    contenders: list[tuple[str, object]] = []
    if args.only in (None, "fathom"):
        contenders += [("fathom", FIRST), ("fathom", NEXT)]
    if args.only in (None, "litellm"):
        contenders += [("litellm", s) for s in ("simple-shuffle", "least-busy", "latency-based-routing")]

    fleet = Fleet(args.window)
    fleet.reset()
    try:
        delivered = asyncio.run(delivered_latency(fleet, chunks, args.batch, args.calibrate))
    except BaseException:
        fleet.stop()
        raise
    delivered_ideal = sum(e.capacity(args.batch, args.window, delivered[e.name]) for e in ENDPOINTS)
    print(
        f"Delivered here and now ({args.calibrate:g} s, every endpoint driven at once at "
        f"{args.batch} a request): "
        + ", ".join(
            f"{e.name} {delivered[e.name] * 1000:.0f} ms (configured "
            f"{(e.base_s + args.batch * e.per_item_s) * 1000:.0f})"
            for e in ENDPOINTS
        )
        + f"; ideal at those latencies {delivered_ideal:.0f} items/s\n"
    )
    rows = []
    results = {}
    history: dict[str, Sizing] = {}
    state_dir = tempfile.TemporaryDirectory(prefix="fathom-bench-routing-")
    try:
        for kind, strategy in contenders:
            fleet.reset()
            limit = 20 * args.seconds + 60  # every run stops by itself
            if kind == "fathom":
                if strategy == NEXT:
                    history = through_routing_state(history, Path(state_dir.name))
                    print(
                        "batch history read back from routing.json: "
                        + ", ".join(
                            f"{pid.split(':')[-1]} {s.batch_size}" for pid, s in sorted(history.items())
                        )
                    )
                coro = run_fathom(fleet, chunks, args.batch, history, str(strategy))
            else:
                coro = run_litellm(fleet, chunks, args.batch, strategy)  # type: ignore[arg-type]
            try:
                out = asyncio.run(asyncio.wait_for(coro, limit))
            except TimeoutError:
                name = str(strategy) if kind == "fathom" else f"LiteLLM {strategy}"
                rows.append((name, f"> {limit:.0f}", "–", "–", "–", "–", "–", "–", "–", "did not finish"))
                continue
            counters = fleet.counters()
            served = {k: v["served"].get("embeddings", 0) for k, v in counters.items()}
            r429 = sum(v["rate_limited"] for v in counters.values())
            requests = sum(v["requests"].get("embeddings", 0) for v in counters.values())
            pins = {u for v in counters.values() for u in v["by_upstream"]}
            rate = out.items / out.wall_s
            results[out.name] = rate / ideal
            note = "; ".join(
                x
                for x in (
                    out.note,
                    "" if pins <= {PIN} else f"PIN NOT HONOURED {pins}",
                    "" if out.written_once else "NOT EXACTLY ONCE",
                )
                if x
            )
            rows.append(
                (
                    out.name,
                    out.wall_s,
                    rate,
                    rate / ideal,
                    rate / delivered_ideal,
                    r429,
                    f"{100 * r429 / max(1, requests):.1f} %",
                    " / ".join(str(served[e.name]) for e in ENDPOINTS),
                    out.client_errors,
                    note or "ok",
                )
            )
    finally:
        fleet.stop()
        state_dir.cleanup()

    print(
        c.table(
            [
                "contender",
                "wall s",
                "items/s",
                "÷ ideal",
                "÷ delivered ideal",
                "429s",
                "429 % of requests",
                "requests served fast / slow / limited",
                "caller-visible failures",
                "notes",
            ],
            rows,
        )
    )
    print()
    for mine in (FIRST, NEXT):
        fathom = results.get(mine)
        for name, eff in results.items():
            if fathom is not None and not name.startswith("Fathom") and eff > 0:
                print(f"{mine} throughput ÷ {name}: {fathom / eff:.2f}×")
    if NEXT in results:
        print(
            f"{NEXT}: {results[NEXT]:.3f} of ideal, {results[NEXT] * ideal / delivered_ideal:.3f} "
            f"of the ideal at the latencies delivered here (target ≥ 0.95)"
        )


if __name__ == "__main__":
    main()
