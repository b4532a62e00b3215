"""Runs the real `fathom` command line in this process, paused mid-run: once `FATHOM_PAUSE_AFTER`
chunk texts have been embedded, every further embedding waits forever, so the run stops with
its first batches stored and nothing promoted. A test kills it there — at a known point, not
at whatever point the machine's speed gives.

    python tests/index/paused_cli.py --data-dir D index ROOT --project P --full

The gate's probe texts do not count: they are embedded before any chunk.
"""

from __future__ import annotations

import asyncio
import os
import runpy
import sys
from collections.abc import Sequence
from typing import Any

from fathom.inference.local import LocalEncoder
from fathom.inference.onnx.encoder import OnnxEncoder
from fathom.inference.probes import load_probes

PAUSE_AFTER = int(os.environ.get("FATHOM_PAUSE_AFTER", "4"))
PROBES = {p.text for p in load_probes().probes}
embedded = 0


def paused(embed: Any) -> Any:
    async def wrapper(self: Any, texts: Sequence[str]) -> Any:
        global embedded
        if not set(texts) <= PROBES:
            if embedded >= PAUSE_AFTER:
                await asyncio.Event().wait()  # the loop runs on: earlier batches finish their writes
            embedded += len(texts)
        return await embed(self, texts)

    return wrapper


for cls in (OnnxEncoder, LocalEncoder):
    cls.embed = paused(cls.embed)  # type: ignore[method-assign]

sys.argv = ["fathom", *sys.argv[1:]]
runpy.run_module("fathom.cli", run_name="__main__")
