"""Peak memory while indexing a large generated corpus, with a stand-in encoder.

    nice -n 10 .venv/bin/python bench/index_memory.py [--chunks 200000]

Writes a synthetic Python project (files of 40 small functions, each ~0.7 KB with a
docstring, so two chunks per function: the code and the docstring) to a temporary folder,
then runs a full `fathom index` job
(`Indexer.run`: walk, chunk, plan, embed in batches, write to a shadow slot, promote) into a
LanceDB store with a hash encoder standing in for the model (deterministic 384-d unit vectors
from each text's CRC: microseconds per chunk, no torch), so the figure is the indexer's and
the store's own memory, not a model's. Reported: chunks, time, RSS before, peak RSS during
the job (Linux VmHWM, reset before it starts) and the difference. Target (issue 20): peak
RSS < 2 GiB at 200k chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _common import hash_vectors, machine, peak_rss_mib, reset_peak_rss, rss_mib  # noqa: E402

from fathom.index.indexer import Indexer  # noqa: E402
from fathom.index.store import LanceStore  # noqa: E402
from fathom.inference.provider import Kind, Provider, ProviderInfo  # noqa: E402
from fathom.roles import EMBEDDING_ROLES  # noqa: E402

WIDTH = 384


class HashEncoder(Provider):
    """The stand-in encoder: `hash_vectors` of the texts."""

    def __init__(self) -> None:
        self.info = ProviderInfo(id="local:hash-384", kind=Kind.LOCAL, roles=EMBEDDING_ROLES,
                                 model="hash-384", width=WIDTH)

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
                f"    raise RuntimeError('request {n} failed after %d attempts' % retries)\n")
        text = "\n\n".join(body)
        path = root / f"pkg{f // 500}" / f"mod_{f}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        total += len(text)
    return total


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=200_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fathom-indexmem-"))
    try:
        t0 = time.perf_counter()
        size = write_corpus(work / "src", args.chunks // 2)  # code + docstring chunk each
        gen_s = time.perf_counter() - t0
        store = LanceStore(work / "lance")
        indexer = Indexer(store, HashEncoder(), batch_size=256)
        job = indexer.job("big", work / "src", full=True)
        reset = reset_peak_rss()
        before = rss_mib()
        t0 = time.perf_counter()
        report = await indexer.run(job)
        took = time.perf_counter() - t0
        peak = peak_rss_mib()
        if hasattr(store, "wait_for_ann"):
            store.wait_for_ann()
        print(f"machine : {machine()}")
        print(f"corpus  : {report.files} files, {size / 2**20:.0f} MiB of text, generated in "
              f"{gen_s:.0f} s; {report.chunks} chunks indexed in {took:.0f} s "
              f"({report.chunks / took:.0f} chunks/s, hash encoder)")
        print(f"RSS     : {before:.0f} MiB before the job, peak during it {peak:.0f} MiB "
              f"(+{peak - before:.0f} MiB){'' if reset else ' (peak not resettable: whole run)'}; "
              f"target < 2048 MiB -> {'met' if peak < 2048 else 'NOT met'}")
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
