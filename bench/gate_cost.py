"""Gate cost: seconds to verify one provider, with real encoders.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/gate_cost.py [--quick] [--repeat N]

The local reference is the in-process MiniLM (`LocalEncoder`, fp32). Verified against it for
the code table under the default policy (aggregate):
- the reference itself (shape checks only, and its golden vectors recorded);
- a second in-process MiniLM (another `LocalEncoder` instance, its own model copy): must pass;
- the emulator's `alpha` upstream (fp32 MiniLM behind OpenRouter's API, pinned), over real
  HTTP on 127.0.0.1 and through the key's `CloudBudget`: must pass;
- the emulator's `beta` upstream (same model id, int8): must be refused.
Each verify embeds the probe set once through the candidate and, for a non-reference, once
through the reference. "cold" is the first verify (model loads included: the emulator's
encoder loads lazily on its first request); "warm" is the median of `--repeat` forced
re-verifies. The emulator shares this process's two cores, so a cloud figure here is a
lower bound on the network but an upper bound on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time

import _common as c

from fathom.config import Settings  # noqa: E402
from fathom.inference.budget import BudgetedProvider, CloudBudget  # noqa: E402
from fathom.inference.gate import Gate  # noqa: E402
from fathom.inference.local import LocalEncoder  # noqa: E402
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider  # noqa: E402
from fathom.policy import Policy  # noqa: E402
from fathom.roles import Role  # noqa: E402
from fathom.space import Space  # noqa: E402


async def measure(gate: Gate, space: Space, provider, repeat: int) -> tuple[float, list[float], object]:
    t0 = time.perf_counter()
    verdict = await gate.verify(space, provider, Policy.AGGREGATE)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        verdict = await gate.verify(space, provider, Policy.AGGREGATE, force=True)
        warm.append(time.perf_counter() - t0)
    return cold, warm, verdict


async def run(repeat: int) -> list[tuple]:
    settings = Settings()
    ref = LocalEncoder.from_settings(settings)
    t0 = time.perf_counter()
    await asyncio.to_thread(ref.load)
    load_s = time.perf_counter() - t0
    other = LocalEncoder.from_settings(settings)
    other.info = dataclasses.replace(other.info, id="sidecar:minilm-second-copy")
    space = Space(table="code", model=settings.local_model_name, width=settings.local_width, reference=ref.id)
    emu = c.start_emulator("gate")
    client = OpenRouterClient(c.BENCH_KEY, base_url=emu.base_url)
    budget = CloudBudget()
    clouds = {
        u: BudgetedProvider(
            OpenRouterProvider(
                client,
                model=settings.local_model_name,
                roles=[Role.CODE_EMBEDDING],
                upstream=u,
                width=settings.local_width,
            ),
            budget,
        )
        for u in ("alpha", "beta")
    }
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="fathom-gate-bench-") as tmp:
            gate = Gate(tmp)
            gate.attach(ref)
            n = len(gate.probes)
            cases = [
                ("local reference (MiniLM, in process)", ref, f"model load {load_s:.1f} s before"),
                ("second in-process MiniLM", other, "its own model load in cold"),
                ("emulator alpha (fp32), pinned, over HTTP", clouds["alpha"], "encoder load in cold"),
                ("emulator beta (int8), pinned, over HTTP", clouds["beta"], "encoder load in cold"),
            ]
            for name, provider, note in cases:
                cold, warm, v = await measure(gate, space, provider, repeat)
                rows.append(
                    (
                        name,
                        n,
                        "passed" if v.cleared else "refused",
                        v.min_cosine if v.min_cosine is not None else float("nan"),
                        cold,
                        statistics.median(warm),
                        min(warm),
                        note,
                    )
                )
            counters = emu.control.counters()
            rows.append(
                (
                    "(emulator requests seen)",
                    "",
                    "",
                    float("nan"),
                    float("nan"),
                    float("nan"),
                    float("nan"),
                    f"{counters['served'].get('embeddings', 0)} embeddings requests",
                )
            )
    finally:
        await budget.aclose()
        await client.aclose()
        emu.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="warm re-verifies per provider")
    ap.add_argument("--quick", action="store_true", help="--repeat 2")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 2
    print(c.machine())
    rows = asyncio.run(run(max(1, args.repeat)))
    print()
    print(
        c.table(
            [
                "candidate (code table, aggregate, local reference)",
                "probes",
                "verdict",
                "min cosine",
                "cold s",
                "warm s (median)",
                "warm s (min)",
                "notes",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
