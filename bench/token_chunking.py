"""Chunks sized in the encoder's tokens beside chunks sized in characters only, on one corpus.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/token_chunking.py [--path DIR] [--files N] [--rounds R]

Both sides index the same files (full runs, the same loaded MiniLM, rounds alternating) and
print side by side: chunks, how many character-sized chunks the model would have truncated
(and how many tokens it would have dropped), the chunking time alone, and the whole index
time. Token-true chunking costs one tokenizer pass more over the text, and embeds the tokens
that truncation used to drop, so its index time is the honest price of reading every line.
Default project: the installed `rich` package source, first 30 modules.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from index_throughput import subset  # noqa: E402  (bench/ is on sys.path when run as a script)

from fathom.config import Settings  # noqa: E402
from fathom.index.indexer import discover  # noqa: E402
from fathom.inference.local import LocalEncoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402


class CharsOnly(LocalEncoder):
    """The same encoder without a tokenizer for chunking: chunks sized in characters only."""

    token_counter = None  # type: ignore[assignment]


async def main() -> None:
    import rich

    ap = argparse.ArgumentParser()
    ap.add_argument("--path", type=Path, default=Path(rich.__file__).parent)
    ap.add_argument("--files", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fathom-bench-"))
    try:
        root = subset(args.path, args.files, work / "project")
        tokens_side = LocalEncoder.from_settings(Settings())
        counter = tokens_side.token_counter()
        chars_side = CharsOnly.from_settings(Settings())
        chars_side._model = tokens_side.load()  # one loaded model for both sides
        timings: dict[str, list[float]] = {"chars": [], "tokens": []}
        chunking: dict[str, list[float]] = {"chars": [], "tokens": []}
        reports = {}
        for i in range(args.rounds):
            for side, encoder, kw in (
                ("chars", chars_side, {}),
                ("tokens", tokens_side, {"tokens": counter}),
            ):
                t0 = time.perf_counter()
                discover(root, cache=None, **kw)
                chunking[side].append(time.perf_counter() - t0)
                fathom = Fathom(Settings(data_dir=work / f"data-{side}-{i}"), encoder=encoder)
                t0 = time.perf_counter()
                reports[side] = await fathom.index(root, "bench", full=True)
                timings[side].append(time.perf_counter() - t0)
                await fathom.aclose()
                print(f"round {i + 1} {side:6}: index {timings[side][-1]:6.1f} s", flush=True)
        chars_chunks = discover(root, cache=None).chunks
        sizes = counter.count([c.text for c in chars_chunks])
        over = [n for n in sizes if n > counter.limit]
        print(f"machine : {platform.machine()}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
        print(f"project : {args.path} (first {args.files} .py files), limit {counter.limit} tokens")
        print(f"{'':8}  {'chunks':>7}  {'split':>6}  {'chunking s':>10}  {'index s (best)':>14}")
        for side in ("chars", "tokens"):
            r = reports[side]
            print(
                f"{side:8}  {r.chunks:7d}  {r.split:6d}  {min(chunking[side]):10.2f}  {min(timings[side]):14.1f}"
            )
        print(
            f"chars-only chunks over {counter.limit} tokens: {len(over)} of {len(sizes)}; "
            f"tokens the model dropped: {sum(n - counter.limit for n in over)} of {sum(sizes)}"
        )
        print(f"ratio tokens/chars index time: {min(timings['tokens']) / min(timings['chars']):.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
