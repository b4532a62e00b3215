"""A provider's per-request input limit is learned once (over real HTTP, the real service)."""

from __future__ import annotations

import time

import pytest

from fathom.inference.openrouter import OpenRouterClient
from fathom.roles import Role
from tests.e2e_fixtures import (  # noqa: F401
    KEY,
    MINILM,
    all_rows,
    cloud_route,
    make_fathom,
    memo_emulator_encoders,
    memo_local,
    write_functions,
)
from tests.emulator_fixtures import emulator, emulator_server  # noqa: F401
from tests.retrieval_fixtures import local_encoder  # noqa: F401


async def test_repro(tmp_path, emulator, memo_local, memo_emulator_encoders):
    emulator.control.set_limits(max_inputs=32)
    fathom = make_fathom(tmp_path / "data", memo_local)
    fathom.routing.update({Role.CODE_EMBEDDING: {"policy": "cloud", "model": MINILM, "upstream": "alpha"},
                           Role.EMBEDDING: {"policy": "local"}})
    client = OpenRouterClient(KEY, base_url=emulator.base_url)
    alpha = cloud_route(fathom, client, "alpha")
    try:
        for tag in "ab":
            project = write_functions(tmp_path / f"proj{tag}", files=20, per_file=31, tag=tag, docstrings=False)
            t = time.monotonic()
            report = await fathom.index(project, f"p{tag}")
            c = emulator.control.counters()
            print(tag, time.monotonic() - t, report.chunks, report.providers, c["too_many_inputs"], c["requests"], c["served"])
            print(fathom._batch_history)
    finally:
        await client.aclose()
        await fathom.aclose()
