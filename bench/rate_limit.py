"""Rate-limit adherence: Fathom's CloudBudget against a fixed 3 × 8 cap and LiteLLM's `rpm`.

    .venv/bin/pip install -e '.[bench]'          # LiteLLM: a benchmark-only extra
    .venv/bin/python bench/rate_limit.py [--quick] [--rpm R]

One OpenRouter emulator enforces R requests per minute (an exact sliding window) with
realistic latency. Three cloud providers share its one key, each allowed eight requests in
flight (the SPEC's case: 3 × 8 = 24 on one account). Each contender embeds an endless index
job through the three of them, in three phases:

1. steady (after a short warm-up): accepted requests ÷ the limit, and the 429s it drew;
2. outage: the emulator answers 429 to everything for a few seconds (a burst of 429s);
3. recovery: how long until the first accepted request after the outage, and accepted
   requests ÷ the limit over the recovery phase (the sliding window emptied during the
   outage, so a contender that resumes at once can briefly exceed 1.0).

Contenders (the emulator is reset in between):
- Fathom: `Pool` over three `BudgetedProvider(OpenRouterProvider)` with one `CloudBudget`
  (rpm = R, configured, hence trusted: Little's law ceiling + the RPM window + AIMD), 8 lanes each;
- Fathom, discovered: nothing configured; the emulator's key reports R (`GET /key`), read the
  way a sidecar reads it (`fleet.keycheck.read_key`) and fed to the budget the way the server's
  hub does (`feed_budget`); each provider's lanes follow the budget's effective limit, as the
  service's index pools do;
- fixed 3 × 8: the same pool without the budget (per-provider caps only; a 429 still pauses
  that provider for Retry-After, so this is the pool's own reaction, not a naive retry loop);
- LiteLLM Router, three deployments on the same endpoint and key, each `rpm = R / 3` (LiteLLM
  limits per deployment, so a user splits the key's limit) and `max_parallel_requests = 8`,
  with usage-based-routing-v2 (the strategy that checks rpm) and simple-shuffle (the default);
  24 concurrent callers, the Router's retries (`num_retries=3`), a failed batch retried after 1 s.

LiteLLM counts rpm per calendar minute, so the default run keeps the real 60 s window. In
`--quick` the window is scaled down (emulator and budget alike), LiteLLM's rpm is scaled to the
same per-window allowance, but its minute counter cannot follow: its quick rows are not
comparable. The upstream answers with hashed vectors (routing benchmark; see `_common`).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import math
import time
from dataclasses import dataclass, field
from datetime import UTC

import _common as c

from fathom.devtools.emulator import MINILM  # noqa: E402
from fathom.inference.budget import BudgetedProvider, CloudBudget  # noqa: E402
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider  # noqa: E402
from fathom.inference.pool import Pool  # noqa: E402
from fathom.roles import Role  # noqa: E402

WIDTH = 64
PIN = "alpha"
PROVIDERS = 3
LANES = 8
BATCH = 16


@dataclass
class Phases:
    window_s: float
    warm_s: float
    steady_s: float
    outage_s: float
    recovery_s: float

    @property
    def total(self) -> float:
        return self.warm_s + self.steady_s + self.outage_s + self.recovery_s


@dataclass
class Measure:
    name: str
    accepted: list[float] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # phase boundaries, monotonic
    counts: dict[str, dict] = field(default_factory=dict)  # emulator counters at each mark
    peak: int = 0
    note: str = ""


class Contender:
    """Runs the endless job until `stop` is set; `name` for the table."""

    name = ""

    async def start(self) -> None: ...

    async def stop(self) -> str:
        return ""


class FathomPool(Contender):
    def __init__(
        self, base_url: str, rpm: float | None, window_s: float, budgeted: bool, discovered: bool = False
    ):
        self.budgeted = budgeted
        self.discovered = discovered
        self.name = (
            "Fathom CloudBudget (rpm discovered)"
            if discovered
            else "Fathom CloudBudget (rpm known)"
            if budgeted
            else "fixed 3 × 8 (pool, no budget)"
        )
        self.client = OpenRouterClient(c.BENCH_KEY, base_url=base_url)
        if discovered:
            rpm = None  # the budget learns it from the key
        scale = window_s / 60.0
        self.budget = (
            CloudBudget(
                rpm=rpm, window_s=window_s, clean_window_s=10.0 * scale, base_backoff_s=max(0.25, 1.0 * scale)
            )
            if budgeted
            else None
        )
        inner = [
            OpenRouterProvider(
                self.client,
                model=MINILM,
                roles=[Role.CODE_EMBEDDING],
                upstream=PIN,
                width=WIDTH,
                provider_id=f"openrouter:sidecar-{i}",
            )
            for i in range(PROVIDERS)
        ]
        providers = [BudgetedProvider(p, self.budget) for p in inner] if self.budget else inner
        budget = self.budget
        lanes = (lambda p: budget.effective_limit) if discovered and budget else LANES
        self.pool = Pool(
            providers,
            lanes=lanes,
            max_batch=BATCH,
            initial_batch=BATCH,
            min_batch=1,
            admission=self.budget.admission if self.budget else None,
            stall_timeout=None,
        )
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        async def sink(indices, vectors, provider):
            pass

        if self.discovered:
            from datetime import datetime

            from fathom.fleet.keycheck import KeyCheckRecord, feed_budget, read_key

            check = await read_key(self.client, "push")
            feed_budget(self.budget)(
                KeyCheckRecord("bench", check.outcome, check.reason, datetime.now(UTC), check.facts)
            )
        self.task = asyncio.create_task(self.pool.run(c.texts(200_000), sink))

    async def stop(self) -> str:
        assert self.task is not None
        note = ""
        if self.budget is not None:
            st = self.budget.state()
            note = (
                f"ceiling {st.ceiling} ({st.ceiling_origin}), effective {st.effective_limit}, "
                f"halvings {st.halvings}, rtt {st.rtt_s * 1000:.0f} ms"
            )
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopped on purpose
            pass
        if self.budget is not None:
            await self.budget.aclose()
        await self.client.aclose()
        return note


class LiteLLMRouter(Contender):
    def __init__(self, base_url: str, rpm_per_minute: float, strategy: str):
        litellm = c.import_litellm()
        self.name = f"LiteLLM {strategy}, rpm {rpm_per_minute / PROVIDERS:g} × 3"
        model_list = [
            {
                "model_name": "code-embedding",
                "litellm_params": {
                    "model": "openai/" + MINILM,
                    "api_base": base_url,
                    "api_key": c.BENCH_KEY,
                    "rpm": max(1, int(rpm_per_minute // PROVIDERS)),
                    "max_parallel_requests": LANES,
                    "extra_body": {"provider": {"order": [PIN], "allow_fallbacks": False}},
                },
                "model_info": {"id": f"sidecar-{i}"},
            }
            for i in range(PROVIDERS)
        ]
        self.router = litellm.Router(model_list=model_list, routing_strategy=strategy, num_retries=3)
        self.stopping = False
        self.errors = 0
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        chunk = c.texts(BATCH)

        async def caller() -> None:
            while not self.stopping:
                try:
                    await self.router.aembedding(model="code-embedding", input=chunk)
                except Exception:  # noqa: BLE001 - what a caller does: count it, try again later
                    self.errors += 1
                    await asyncio.sleep(1.0)

        self.tasks = [asyncio.create_task(caller()) for _ in range(PROVIDERS * LANES)]

    async def stop(self) -> str:
        self.stopping = True
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return f"{self.errors} caller-visible failures"


async def drive(make, emu: c.Emulator, ph: Phases) -> Measure:
    contender: Contender = make()
    m = Measure(contender.name)
    ctl = emu.control
    m.marks["start"] = time.monotonic()
    await contender.start()
    for phase, secs in (("warm", ph.warm_s), ("steady", ph.steady_s)):
        await asyncio.sleep(secs)
        m.marks[phase] = time.monotonic()
        m.counts[phase] = await asyncio.to_thread(ctl.counters)
    await asyncio.to_thread(ctl.set_limits, concurrency=0)  # every request is a 429 now
    await asyncio.sleep(ph.outage_s)
    await asyncio.to_thread(ctl.set_limits, concurrency=None)
    m.marks["outage"] = time.monotonic()
    m.counts["outage"] = await asyncio.to_thread(ctl.counters)
    await asyncio.sleep(ph.recovery_s)
    m.marks["recovery"] = time.monotonic()
    m.counts["recovery"] = await asyncio.to_thread(ctl.counters)
    m.note = await contender.stop()
    m.accepted = sorted(m.counts["recovery"]["accepted_at"])
    return m


def summarise(m: Measure, per_window: int, ph: Phases) -> tuple:
    acc = m.accepted
    rate = per_window / ph.window_s  # the limit, requests per second

    def between(a: float, b: float) -> int:
        return bisect.bisect_left(acc, b) - bisect.bisect_left(acc, a)

    def reqs(name: str) -> int:
        return m.counts[name]["requests"].get("embeddings", 0)

    def r429(name: str) -> int:
        return m.counts[name]["rate_limited"]

    steady = between(m.marks["warm"], m.marks["steady"])
    achieved = steady / (rate * ph.steady_s)
    steady_429 = r429("steady") - r429("warm")
    steady_req = reqs("steady") - reqs("warm")
    outage_429 = r429("outage") - r429("steady")
    end = m.marks["outage"]
    first = next((t - end for t in acc if t >= end), math.nan)
    recovered = between(end, m.marks["recovery"]) / (rate * ph.recovery_s)
    rec_429 = r429("recovery") - r429("outage")
    in_steady = [t for t in acc if m.marks["warm"] <= t < m.marks["steady"]]
    stall = max(
        (b - a for a, b in zip([m.marks["warm"], *in_steady], [*in_steady, m.marks["steady"]])),
        default=math.nan,
    )
    return (
        m.name,
        achieved,
        steady_429,
        f"{100 * steady_429 / max(1, steady_req):.1f} %",
        m.counts["steady"]["peak_concurrency"],
        round(stall, 2),
        outage_429,
        first,
        recovered,
        rec_429,
        m.note,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rpm", type=int, default=120, help="the emulator's limit, requests per minute")
    ap.add_argument("--latency-ms", type=float, default=500.0, help="base latency per request")
    ap.add_argument("--quick", action="store_true", help="a ~1 min run (window scaled to 6 s)")
    ap.add_argument("--skip-litellm", action="store_true")
    args = ap.parse_args()
    ph = (
        Phases(window_s=6.0, warm_s=1.0, steady_s=6.0, outage_s=2.0, recovery_s=6.0)
        if args.quick
        else Phases(window_s=60.0, warm_s=5.0, steady_s=60.0, outage_s=5.0, recovery_s=20.0)
    )
    per_window = max(1, round(args.rpm * ph.window_s / 60.0))
    c.use_hash_encoders(WIDTH)
    print(c.machine())
    print(f"LiteLLM {c.litellm_version()}")
    print(
        f"\nlimit {args.rpm} requests/min as {per_window} per {ph.window_s:g} s sliding window; "
        f"latency {args.latency_ms:g} ms + 2 ms/item, {BATCH} items/request; "
        f"{PROVIDERS} providers × {LANES} on one key; phases: warm-up {ph.warm_s:g} s, steady "
        f"{ph.steady_s:g} s, outage (all 429) {ph.outage_s:g} s, recovery {ph.recovery_s:g} s\n"
    )

    emu = c.start_emulator("rate-limited")
    base = emu.base_url
    rpm = per_window * 60.0 / ph.window_s
    makers = [
        lambda: FathomPool(base, rpm, ph.window_s, budgeted=True),
        lambda: FathomPool(base, None, ph.window_s, budgeted=True, discovered=True),
        lambda: FathomPool(base, None, ph.window_s, budgeted=False),
    ]
    if not args.skip_litellm:
        makers += [
            lambda: LiteLLMRouter(base, rpm, "usage-based-routing-v2"),
            lambda: LiteLLMRouter(base, rpm, "simple-shuffle"),
        ]
    rows = []
    try:
        for make in makers:
            emu.control.reset()
            emu.control.latency(base_ms=args.latency_ms, per_item_ms=2.0)
            emu.control.set_limits(rpm=per_window, window=ph.window_s)
            # The key reports the limit it is held to (what "discovered" reads; the others
            # are told the rpm or ignore it).
            emu.control.set_key(rate_limit={"requests": per_window, "interval": f"{ph.window_s:g}s"})
            m = asyncio.run(asyncio.wait_for(drive(make, emu, ph), ph.total + 60))
            rows.append(summarise(m, per_window, ph))
            print(f"  {m.name}: done", flush=True)
            # Requests the stopped contender left at the emulator finish before the next reset:
            # one that ended after it would count down the next contender's in-flight figure.
            deadline = time.monotonic() + 30
            while emu.control.counters()["in_flight"] > 0 and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        emu.stop()

    print()
    print(
        c.table(
            [
                "contender",
                "achieved ÷ limit",
                "429s (steady)",
                "429 % (steady)",
                "peak in flight",
                "longest gap (steady), s",
                "429s in outage",
                "first success after outage, s",
                "accepted ÷ limit in recovery",
                "429s in recovery",
                "notes",
            ],
            rows,
        )
    )
    if args.quick:
        print("\n(--quick: LiteLLM counts rpm per calendar minute; its rows are not comparable here)")


if __name__ == "__main__":
    main()
