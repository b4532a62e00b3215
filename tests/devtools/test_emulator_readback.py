"""What the emulator reports for the operator walk's invariants, over HTTP: an embedding
request is counted as unpinned unless its provider routing allows exactly one upstream, the
peak in flight is read per period, and `remember` answers a text seen before with the same
vector the encoder gave (and a drifted variant is never answered from the other's memory)."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np

from fathom.devtools.emulator import EmulatorConfig, create_app
from fathom.devtools.emulator.state import pinned_upstream
from tests.inference.e2e_fixtures import KEY, MINILM


def test_pinned_means_one_upstream_and_no_fallback():
    assert pinned_upstream({"order": ["alpha"], "allow_fallbacks": False}) == "alpha"
    assert pinned_upstream({"only": ["alpha"]}) == "alpha"
    assert pinned_upstream({"only": ["alpha", "beta"], "ignore": ["beta"]}) == "alpha"
    for loose in (
        None,
        {},
        {"order": ["alpha"]},
        {"order": ["alpha", "beta"], "allow_fallbacks": False},
        {"only": ["alpha", "beta"]},
        "alpha",
    ):
        assert pinned_upstream(loose) is None, loose


def test_unpinned_requests_are_counted_and_the_peak_is_read_per_period(emulator, memo_emulator_encoders):
    headers = {"Authorization": f"Bearer {KEY}"}
    emulator.control.latency(base_ms=300)

    async def embed(provider):
        body = {"model": MINILM, "input": ["def f(): pass"], **({"provider": provider} if provider else {})}
        async with httpx.AsyncClient(base_url=emulator.base_url, headers=headers, timeout=30) as http:
            assert (await http.post("/embeddings", json=body)).status_code == 200

    async def burst():
        pinned = {"order": ["alpha"], "allow_fallbacks": False}
        await asyncio.gather(embed(pinned), embed(pinned), embed(None))

    asyncio.run(burst())
    assert emulator.control.counters()["unpinned_embeddings"] == 1
    assert emulator.control.take_peak() == {"peak": 3, "in_flight": 0}
    asyncio.run(embed({"only": ["alpha"]}))
    assert emulator.control.take_peak() == {"peak": 1, "in_flight": 0}  # a new period
    assert emulator.control.counters()["unpinned_embeddings"] == 1


def test_remember_answers_a_text_with_its_own_vector_per_variant():
    app = create_app(EmulatorConfig(remember=True))
    headers = {"Authorization": f"Bearer {KEY}"}
    pinned = {"order": ["alpha"], "allow_fallbacks": False}

    async def go():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://emu", headers=headers, timeout=60
        ) as http:

            async def vec(text):
                r = await http.post(
                    "/api/v1/embeddings", json={"model": MINILM, "input": [text], "provider": pinned}
                )
                return np.array(r.json()["data"][0]["embedding"], dtype=np.float32)

            first, again = await vec("def retry(): pass"), await vec("def retry(): pass")
            await http.put("/control/upstreams/alpha", json={"variant": "int8"})
            drifted = await vec("def retry(): pass")
            return first, again, drifted

    first, again, drifted = asyncio.run(go())
    assert np.array_equal(first, again)
    assert float(first @ drifted) < 0.9999  # int8 answered by the int8 encoder, not from fp32's memory
