"""`fathom index` throughput beside raw `SentenceTransformer.encode` on the same chunks.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/index_throughput.py [--path DIR] [--files N]

Both sides use the same loaded model in the same process, so the ratio measures what the
indexer adds around inference (walking, chunking, batching, writes, shadow promotion), not
the model. The raw side encodes the exact chunk texts the indexer embeds, in one
`encode(...)` call (which sorts by length internally), i.e. the best case for inference alone.
Target: ratio >= 0.85. Default project: the installed `rich` package source.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from fathom.config import Settings  # noqa: E402
from fathom.index.indexer import discover  # noqa: E402
from fathom.inference.local import LocalEncoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402


def subset(src: Path, n: int | None, dst: Path) -> Path:
    """The first `n` files of `src` (sorted), copied into `dst` (all files when n is None)."""
    if n is None:
        return src
    files = sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts)[:n]
    for f in files:
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    return dst


async def main() -> None:
    import rich

    ap = argparse.ArgumentParser()
    ap.add_argument("--path", type=Path, default=Path(rich.__file__).parent)
    ap.add_argument("--files", type=int, default=None, help="only the first N .py files")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating raw/fathom rounds; the best of each is compared")
    ap.add_argument("--batch-size", type=int, default=None)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fathom-bench-"))
    try:
        root = subset(args.path, args.files, work / "project")
        settings = Settings(data_dir=work / "data")
        if args.batch_size:
            settings.local_batch_size = args.batch_size
        encoder = LocalEncoder.from_settings(settings)
        model = encoder.load()
        model.encode(["warm up the kernels"] * 8, batch_size=8)
        texts = [c.text for c in discover(root, tokens=encoder.token_counter()).chunks]  # as indexed

        raw: list[float] = []
        full: list[float] = []
        embed: list[float] = []
        report = None
        # Alternating rounds, best of each: on a shared machine other processes steal CPU
        # at random; the minimum is the run least disturbed, on both sides alike.
        for i in range(args.rounds):
            t0 = time.perf_counter()
            model.encode(texts, batch_size=encoder.batch_size, normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=False)
            raw.append(time.perf_counter() - t0)

            fathom = Fathom(Settings(data_dir=work / f"data-{i}"), encoder=encoder)
            t0 = time.perf_counter()
            report = await fathom.index(root, "bench", full=True)
            full.append(time.perf_counter() - t0)
            embed.append(report.embed_s)
            assert report.embedded == len(texts), (report.embedded, len(texts))
            print(f"round {i + 1}: raw {raw[-1]:.1f} s, fathom index {full[-1]:.1f} s "
                  f"(embed phase {embed[-1]:.1f} s)", flush=True)

        n = len(texts)
        raw_rate, index_rate = n / min(raw), n / min(full)
        print(f"machine   : {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
              f"python {sys.version.split()[0]}, torch threads {_torch_threads()}")
        print(f"project   : {args.path}" + (f" (first {args.files} files)" if args.files else ""))
        print(f"chunks    : {n} ({report.files} files, batch size {encoder.batch_size}, "
              f"mean {sum(map(len, texts)) / n:.0f} chars)")
        print(f"raw encode: best {min(raw):7.1f} s  {raw_rate:7.1f} chunks/s  "
              f"(SentenceTransformer.encode, median {statistics.median(raw):.1f} s)")
        print(f"fathom    : best {min(full):7.1f} s  {index_rate:7.1f} chunks/s  "
              f"(fathom index end to end, median {statistics.median(full):.1f} s; "
              f"embed phase best {min(embed):.1f} s)")
        print(f"ratio     : {index_rate / raw_rate:.3f}  (best vs best; medians "
              f"{statistics.median(raw) / statistics.median(full):.3f}; target >= 0.85)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    asyncio.run(main())
