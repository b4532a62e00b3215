"""An index job's cloud lanes take the budget's permit BEFORE they pull work (issue 14): the
service's pull pool over a cloud-only table, a cloud route to the OpenRouter emulator over
HTTP, the LanceDB store. While the key's only permit is held elsewhere, the job's cloud lane
waits holding no item of the queue; once the permit is free, the job writes every chunk once.
"""

from __future__ import annotations

import asyncio

import pytest

from fathom.inference.budget import CloudBudget
from fathom.inference.openrouter import OpenRouterClient
from fathom.roles import Role
from tests.fleet.fleet_fixtures import wait_for
from tests.inference.e2e_fixtures import KEY, MINILM, all_rows, cloud_route, make_fathom, write_functions

pytestmark = pytest.mark.slow


async def test_a_cloud_lane_waiting_for_a_permit_holds_no_work(
    tmp_path, emulator, memo_local, memo_emulator_encoders
):
    fathom = make_fathom(tmp_path / "data", memo_local, budget=CloudBudget(override=1))
    fathom.routing.update(
        {
            Role.CODE_EMBEDDING: {"policy": "cloud", "model": MINILM, "upstream": "alpha"},
            Role.EMBEDDING: {"policy": "local"},
        }
    )
    client = OpenRouterClient(KEY, base_url=emulator.base_url)
    alpha = cloud_route(fathom, client, "alpha")
    pools = []
    runner = fathom.indexing._runner

    def spy(table: str):  # the service's own pool, remembered so the test can look at it
        pools.append(runner(table))
        return pools[-1]

    fathom.indexing._runner = spy
    project = write_functions(tmp_path / "proj", files=3, per_file=8, tag="adm", docstrings=False)
    try:
        await fathom.verify_providers("code")
        held = await fathom.budget.acquire()  # another caller holds the key's only permit
        job = asyncio.create_task(fathom.index(project, "adm"))
        await wait_for(
            lambda: (
                pools and pools[-1].progress is not None and sum(fathom.budget.state().waiting.values()) >= 1
            ),
            what="a waiting cloud lane",
        )
        for _ in range(50):
            await asyncio.sleep(0)
        progress = pools[-1].progress
        assert progress.in_flight == 0 and progress.queued == progress.total == 24
        held.release()
        report = await asyncio.wait_for(job, 60)
        rows = all_rows(fathom, "adm", "code")
        assert len(rows) == len(set(rows)) == 24 and report.providers == {alpha.id: 24}
    finally:
        await client.aclose()
        await fathom.aclose()
