"""Peak memory while indexing a large generated corpus, with a stand-in encoder.

    nice -n 10 .venv/bin/python bench/index_memory.py [--chunks 200000[,1000000]] [--window N]

Writes a synthetic Python project (files of 40 small functions, each ~0.7 KB with a
docstring, so two chunks per function: the code and the docstring) to a temporary folder,
then runs a full `fathom index` job
(`Indexer.run`: walk, chunk, plan, embed in batches, write to a shadow slot, promote) into a
LanceDB store with a hash encoder standing in for the model (deterministic 384-d unit vectors
from each text's CRC: microseconds per chunk, no torch), so the figure is the indexer's and
the store's own memory, not a model's. Each size runs in a fresh process, one after the
other, so several sizes compare side by side: the indexer streams (a window of chunks at a
time), so the peak should not grow with the corpus. Reported per size: chunks, time, RSS
before, peak RSS during the job (Linux VmHWM, reset before it starts), the difference, the peak
before promotion (walk, chunk, embed and write: the streaming's own; promotion then compacts
the table and builds its keyword index) and the peak including the background ANN build that
follows promotion. Target (issue 20): peak RSS
< 2 GiB at 200k chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _common import hash_vectors, machine, peak_rss_mib, reset_peak_rss, rss_mib  # noqa: E402

from fathom.index.indexer import WINDOW, Indexer  # noqa: E402
from fathom.index.store import LanceStore  # noqa: E402
from fathom.inference.provider import Kind, Provider, ProviderInfo  # noqa: E402
from fathom.roles import EMBEDDING_ROLES  # noqa: E402

WIDTH = 384


class HashEncoder(Provider):
    """The stand-in encoder: `hash_vectors` of the texts."""

    def __init__(self) -> None:
        self.info = ProviderInfo(
            id="local:hash-384", kind=Kind.LOCAL, roles=EMBEDDING_ROLES, model="hash-384", width=WIDTH
        )

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return hash_vectors(texts, WIDTH)


def write_corpus(root: Path, functions: int, per_file: int = 40) -> int:
    """`functions` functions in files of `per_file`; returns the bytes written."""
    total = 0
    for f in range(-(-functions // per_file)):
        body = []
        for j in range(min(per_file, functions - f * per_file)):
            n = f * per_file + j
            body.append(
                f"def handler_{n}(request, retries={n % 7}):\n"
                f'    """Handle request {n}: parse it, check the token, retry on failure."""\n'
                f"    payload = parse_payload(request.body, strict={n % 2 == 0})\n"
                f"    if not check_token(request.headers.get('authorization'), scope='s{n % 13}'):\n"
                f"        raise PermissionError('request {n} has no valid token')\n"
                f"    for attempt in range(retries):\n"
                f"        try:\n"
                f"            result = backend_{n % 17}.send(payload, timeout={n % 30 + 1})\n"
                f"            log.info('request %s done after %s attempts', {n}, attempt + 1)\n"
                f"            return render(result, template='t{n % 11}.html')\n"
                f"        except TimeoutError:\n"
                f"            time.sleep(0.1 * 2 ** attempt)  # back off, then try again\n"
                f"    raise RuntimeError('request {n} failed after %d attempts' % retries)\n"
            )
        text = "\n\n".join(body)
        path = root / f"pkg{f // 500}" / f"mod_{f}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        total += len(text)
    return total


async def one(chunks: int, window: int) -> None:
    """Index a generated corpus of `chunks` chunks in this process; print one result line."""
    work = Path(tempfile.mkdtemp(prefix="fathom-indexmem-"))
    try:
        t0 = time.perf_counter()
        size = write_corpus(work / "src", chunks // 2)  # code + docstring chunk each
        gen_s = time.perf_counter() - t0
        store = LanceStore(work / "lance")
        indexer = Indexer(store, HashEncoder(), batch_size=256, window=window)
        job = indexer.job("big", work / "src", full=True)
        # The peak up to promotion is the streaming's own (walk, chunk, embed, write a batch at
        # a time); promotion then compacts the shadow and builds its keyword index (LanceDB).
        marks: dict[str, float] = {}
        promote = store.promote_together

        def promote_marked(*args, **kwargs):
            marks["streamed"] = peak_rss_mib()
            return promote(*args, **kwargs)

        store.promote_together = promote_marked  # type: ignore[method-assign]
        reset = reset_peak_rss()
        before = rss_mib()
        t0 = time.perf_counter()
        report = await indexer.run(job)
        took = time.perf_counter() - t0
        peak = peak_rss_mib()
        if hasattr(store, "wait_for_ann"):
            store.wait_for_ann()
        with_ann = peak_rss_mib()
        print(
            f"{report.chunks:>8} chunks: {report.files} files, {size / 2**20:.0f} MiB of text "
            f"(generated in {gen_s:.0f} s), indexed in {took:.0f} s "
            f"({report.chunks / took:.0f} chunks/s); RSS {before:.0f} MiB before, peak "
            f"{peak:.0f} MiB during the job (+{peak - before:.0f} MiB; "
            f"{marks.get('streamed', float('nan')):.0f} MiB before promotion)"
            f"{'' if reset else ' (peak not resettable: whole run)'}, {with_ann:.0f} MiB "
            f"with the ANN build after it; target < 2048 MiB -> "
            f"{'met' if peak < 2048 else 'NOT met'}",
            flush=True,
        )
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", default="200000", help="a size, or sizes separated by commas")
    ap.add_argument("--window", type=int, default=WINDOW, help="chunks planned and embedded at a time")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one size
    args = ap.parse_args()
    sizes = [int(n) for n in args.chunks.split(",")]
    if args.one:
        asyncio.run(one(sizes[0], args.window))
        return
    print(f"machine : {machine()}")
    print(
        f"indexer : a full run, window of {args.window} chunks, hash encoder, batches of 256; "
        f"each size in a fresh process"
    )
    for n in sizes:
        subprocess.run(
            [sys.executable, __file__, "--one", "--chunks", str(n), "--window", str(args.window)], check=True
        )


if __name__ == "__main__":
    main()
