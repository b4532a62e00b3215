"""A provider's per-request input limit is learned once, through the real path: the `Fathom`
service (its budget, router, pull pool, LanceDB store and routing state on disk) indexing with
a cloud route to the OpenRouter emulator over real HTTP, the emulator refusing any embedding
request of more than 32 inputs with a 400 worded as a real provider words it (relayed as
OpenRouter relays an upstream's error).

The first job (620 chunks) writes every chunk with at most 2 refused requests; the next job on
the same service, and the next after a restart on the same data dir (the batch history read
back from `routing.json`), with none. The refusals are counted by the emulator.
"""

from __future__ import annotations

import json

import pytest

from fathom.inference.openrouter import BatchTooLarge, OpenRouterClient
from fathom.roles import Role
from tests.inference.e2e_fixtures import KEY, MINILM, all_rows, cloud_route, make_fathom, write_functions

LIMIT = 32


async def test_the_emulator_refuses_a_request_over_its_input_limit_like_a_provider(emulator):
    emulator.control.set_limits(max_inputs=2)
    assert emulator.control.state()["max_inputs"] == 2
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        with pytest.raises(BatchTooLarge) as caught:
            await client.embeddings(MINILM, ["a", "b", "c"], provider={"only": ["alpha"]})
        assert caught.value.status == 400
        assert "Too many inputs" in caught.value.metadata["raw"]  # the upstream's own words
    counters = emulator.control.counters()
    assert counters["too_many_inputs"] == 1 and counters["served"].get("embeddings", 0) == 0
    with pytest.raises(RuntimeError, match="max_inputs"):
        emulator.control.set_limits(max_inputs=0)
    emulator.control.set_limits(max_inputs=None)
    assert emulator.control.state()["max_inputs"] is None


@pytest.mark.slow
async def test_an_input_limit_costs_at_most_two_refusals_once_and_none_after_a_restart(
    tmp_path, emulator, memo_local, memo_emulator_encoders
):
    emulator.control.set_limits(max_inputs=LIMIT)
    data = tmp_path / "data"

    def refused() -> int:
        return emulator.control.counters()["too_many_inputs"]

    async def index_whole(fathom, tag: str) -> None:
        root = write_functions(tmp_path / tag, files=20, per_file=31, tag=tag, docstrings=False)
        report = await fathom.index(root, tag)
        rows = all_rows(fathom, tag, "code")
        assert report.chunks >= 600 and len(rows) == len(set(rows)) == report.chunks
        assert set(report.providers) == {alpha.id} and report.providers[alpha.id] == report.chunks

    def stored_ceiling() -> int | None:
        batches = json.loads((data / "routing.json").read_text())["batches"]["code"]
        return batches[alpha.id].get("ceiling")

    client = OpenRouterClient(KEY, base_url=emulator.base_url)
    fathom = make_fathom(data, memo_local)
    fathom.routing.update(
        {
            Role.CODE_EMBEDDING: {"policy": "cloud", "model": MINILM, "upstream": "alpha"},
            Role.EMBEDDING: {"policy": "local"},
        }
    )
    alpha = cloud_route(fathom, client, "alpha")
    try:
        await index_whole(fathom, "first")
        first = refused()
        assert 1 <= first <= 2  # it met the limit, and learned it at once
        ceiling = stored_ceiling()
        assert ceiling is not None and LIMIT // 2 <= ceiling <= LIMIT

        await index_whole(fathom, "second")  # the same server
        assert refused() == first and stored_ceiling() == ceiling
    finally:
        await fathom.aclose()

    fathom = make_fathom(data, memo_local)  # a restart on the same data dir
    alpha = cloud_route(fathom, client, "alpha")
    try:
        await index_whole(fathom, "third")
        assert refused() == first and stored_ceiling() == ceiling
        assert emulator.control.counters()["issued"].keys() <= {"400_too_many_inputs"}
    finally:
        await fathom.aclose()
        await client.aclose()
