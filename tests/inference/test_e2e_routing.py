"""Issue 4, acceptance 3, end to end over real HTTP: an index job under `aggregate`, with the
in-process MiniLM encoder and a cloud route pinned to the emulator's `alpha` (the same model,
fp32), writes rows from both into one table, each row under the gate verdict that cleared its
writer, every chunk exactly once.

Why the cloud is sure to pull: the pool starts every member's lanes at once, and a cloud lane
whose budget permit is granted at once pulls its first batch in the same turn of the event
loop as the local's first pull; with dozens of chunks per table the queue holds more than
both first batches.
"""

from __future__ import annotations

from collections import Counter

import pytest

from fathom.inference.openrouter import OpenRouterClient
from fathom.roles import Role
from tests.inference.e2e_fixtures import KEY, all_rows, cloud_route, make_fathom, write_functions

pytestmark = pytest.mark.slow


async def test_aggregate_index_job_writes_rows_from_local_and_pinned_cloud_into_one_table(
    tmp_path, emulator, memo_local, memo_emulator_encoders
):
    project = write_functions(tmp_path / "proj", files=6, per_file=12)
    fathom = make_fathom(tmp_path / "data", memo_local)
    fathom.routing.update(
        {
            Role.CODE_EMBEDDING: {"policy": "aggregate", "upstream": "alpha"},
            Role.EMBEDDING: {"policy": "aggregate", "upstream": "alpha"},
        }
    )
    client = OpenRouterClient(KEY, base_url=emulator.base_url)
    alpha = cloud_route(fathom, client, "alpha")
    try:
        report = await fathom.index(project, "proj")

        local_id, alpha_id = memo_local.id, alpha.id
        assert set(report.providers) == {local_id, alpha_id}
        assert sum(report.providers.values()) == report.embedded == report.chunks
        for table in ("code", "docs"):
            space = fathom.store.space_of("proj", table)
            # The table is the local encoder's space (aggregate: agreement with local rows).
            assert space.reference == local_id
            counts = fathom.store.provenance_counts("proj", table)
            by_provider = Counter()
            for (pid, vid), n in counts.items():
                verdict = fathom.gate.verdict_for(space, fathom.registry.get(pid))
                # Each row carries the verdict that cleared its writer for this very table.
                assert verdict is not None and verdict.cleared and vid == verdict.verdict_id
                by_provider[pid] += n
            print(f"\n{table}: rows per provider {dict(by_provider)}")
            assert by_provider[local_id] >= 1 and by_provider[alpha_id] >= 1
            assert set(by_provider) == {local_id, alpha_id}
            rows = all_rows(fathom, "proj", table)
            assert len(rows) == len(set(rows)) == report.tables[table]
        assert report.tables["code"] + report.tables["docs"] == report.chunks

        # The cloud's rows came over HTTP from the pinned upstream, and only from it.
        counters = emulator.control.counters()
        assert set(counters["by_upstream"]) == {"alpha"}
        assert counters["rate_limited"] == 0
        alpha_verdict = fathom.gate.verdict_for(fathom.space("code"), alpha)
        print(f"alpha against local MiniLM: minimum cosine {alpha_verdict.min_cosine:.6f}")
        assert alpha_verdict.min_cosine > 0.999
    finally:
        await fathom.aclose()
        await client.aclose()
