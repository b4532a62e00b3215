"""Index cost beside cocoindex-code: CPU seconds per indexed character, the same folders, the
same MiniLM model folder, in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/index_cpu.py [--sets starlette,rich] [--rounds 1]

(the peer's virtualenv as in `bench/peer_side_by_side.py`; `--peer-python` points elsewhere.)

Each set is an installed package's Python sources, copied into a folder of their own; both
systems index the same files. "chars" is the characters of those files: the text both were
given, whatever each makes of it (chunks, overlap, extra tables), so the figure charges each
system for everything it does with a character.

* **Fathom**: in this process, the shipped indexer as `fathom index` runs it (every table:
  code, docs, keywords, symbols). A warm-up folder is indexed first (model load, gate probe),
  then each set's first full index; CPU is this process's user + system time over
  `Fathom.index` (every thread: walk, chunking, ONNX Runtime's pool, the store's writes).
  Beside it: the chunks and characters it embedded.
* **the peer**: `bench/_peer_driver.py` in the peer's Python, its daemon warmed the same way;
  CPU is the daemon's (and its children's, and the client's) user + system time over
  `client.index`.

`--rounds R` indexes each set R times per system (fresh data each time) and keeps the least
CPU of each: on a shared machine other processes slow a run down (cache, memory bandwidth),
never speed it up. The ratio is Fathom's CPU per character over the peer's; the goal is <= 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "src", ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench._common import machine, table  # noqa: E402
from bench.peer_side_by_side import drive_peer, minilm_folder, package_folder  # noqa: E402

from fathom.config import Settings  # noqa: E402
from fathom.inference.encoders import local_encoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402

WARMUP = '"""A small module to load the model with."""\n\n\ndef greet(name):\n    return f"hello {name}"\n'


def chars_of(folder: Path) -> int:
    return sum(len(p.read_text(encoding="utf-8", errors="replace")) for p in folder.rglob("*.py"))


def run_peer(python: str, work: Path, sets: Sequence[str], rounds: int, model: str) -> dict[str, float]:
    """The least CPU seconds of `rounds` first indexes of each set by the peer."""
    warm = work / "peer-warmup"
    warm.mkdir()
    (warm / "warm.py").write_text(WARMUP, encoding="utf-8")
    job: dict[str, object] = {
        "home": str(work / "peer-home"),
        "model": model,
        "limit": 10,
        "cpu": True,
        "warmup": str(warm),
        "projects": [],
    }
    for r in range(rounds):
        for name in sets:
            copy = work / "peer" / f"{name}-{r}"
            shutil.copytree(work / name, copy)
            job["projects"].append({"root": str(copy), "queries": []})  # type: ignore[attr-defined]
    best: dict[str, float] = {}
    for i, project in enumerate(drive_peer(python, job)["projects"]):
        name = sets[i % len(sets)]
        print(
            f"peer {name}: {project['chunks']} chunks, {project['cpu_s']:.1f} s CPU, {project['index_s']:.1f} s wall"
        )
        best[name] = min(best.get(name, float("inf")), project["cpu_s"])
    return best


async def run_fathom(work: Path, sets: Sequence[str], rounds: int) -> dict[str, float]:
    """The least CPU seconds of `rounds` first indexes of each set by Fathom, as shipped."""
    settings = Settings(data_dir=work / "fathom-data")
    encoder = local_encoder(settings)
    embedded = {"texts": 0, "chars": 0}
    inner = encoder.encode_sync  # type: ignore[attr-defined]

    def counted(texts: Sequence[str]) -> np.ndarray:
        embedded["texts"] += len(texts)
        embedded["chars"] += sum(map(len, texts))
        return inner(texts)  # type: ignore[no-any-return]

    encoder.encode_sync = counted  # type: ignore[attr-defined]
    fathom = Fathom(settings, encoder=encoder)
    best: dict[str, float] = {}
    try:
        warm = work / "fathom-warmup"
        warm.mkdir()
        (warm / "warm.py").write_text(WARMUP, encoding="utf-8")
        await fathom.index(warm, "warmup", full=True)
        for r in range(rounds):
            for name in sets:
                embedded.update(texts=0, chars=0)
                cpu0, t0 = time.process_time(), time.perf_counter()
                report = await fathom.index(work / name, f"{name}-{r}", full=True)
                cpu = time.process_time() - cpu0
                print(
                    f"fathom {name}: {report.chunks} chunks ({report.tables}), embedded "
                    f"{embedded['texts']} texts of {embedded['chars']:,} chars, {cpu:.1f} s CPU, "
                    f"{time.perf_counter() - t0:.1f} s wall",
                    flush=True,
                )
                best[name] = min(best.get(name, float("inf")), cpu)
    finally:
        fathom.store.close()
    return best


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-python", default="/tmp/peer-venv/bin/python")
    ap.add_argument("--sets", default="starlette,rich", help="installed packages to index")
    ap.add_argument("--rounds", type=int, default=1, help="indexes per set and system; the least CPU is kept")
    ap.add_argument("--skip-peer", action="store_true", help="Fathom's figures only")
    args = ap.parse_args()
    print(machine())
    sets = args.sets.split(",")
    work = Path(tempfile.mkdtemp(prefix="fathom-cpu-"))
    try:
        chars = {}
        for name in sets:
            package_folder(name, [], work / name)
            chars[name] = chars_of(work / name)
        peer = {} if args.skip_peer else run_peer(args.peer_python, work, sets, args.rounds, minilm_folder())
        fathom = await run_fathom(work, sets, args.rounds)
        rows = []
        for name in sets:
            f_us = fathom[name] / chars[name] * 1e6
            p_us = peer[name] / chars[name] * 1e6 if name in peer else float("nan")
            rows.append(
                [
                    name,
                    f"{chars[name]:,}",
                    f"{fathom[name]:.1f}",
                    f"{peer.get(name, float('nan')):.1f}",
                    f"{f_us:.1f}",
                    f"{p_us:.1f}",
                    f"{f_us / p_us:.2f}",
                ]
            )
        print()
        print(
            table(
                ["set", "chars", "Fathom CPU s", "peer CPU s", "Fathom µs/char", "peer µs/char", "ratio"],
                rows,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
