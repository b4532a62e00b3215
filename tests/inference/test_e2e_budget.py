"""Issue 6, acceptance 3 and 4, at the level of index jobs: the service's `CloudBudget` above a
cloud route to the OpenRouter emulator over HTTP, the role's pull pool, the LanceDB store.

3. While the emulator answers 429 to every request (a concurrency limit of 0), an index job
   under `aggregate` with the in-process encoder and a cleared cloud route completes: the cloud
   stops pulling (no request during a cooldown, batches go back to the queue), the local
   encoder embeds every chunk, no row is missing or duplicated, and the budget shows the
   throttles and the halving.
4. Two projects indexing at once through one key (one budget with a tight override, a
   cloud-only code table) each get a fair share of the permits while both are waiting
   (within 20 %), though one project has three times the other's work.
   `tests/inference/test_budget_emulator.py` proves the same split at the budget level with raw chat
   calls; this is the version through the service's index jobs.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from fathom.inference.budget import CloudBudget
from fathom.inference.openrouter import OpenRouterClient
from fathom.roles import Role
from tests.inference.e2e_fixtures import KEY, all_rows, cloud_route, make_fathom, write_functions

pytestmark = pytest.mark.slow

RETRY_AFTER_S = 3.0  # what the emulator's 429s ask for


async def test_cloud_answering_429_to_everything_stops_pulling_and_locals_finish_the_job(
    tmp_path, emulator, memo_local, memo_emulator_encoders
):
    fathom = make_fathom(tmp_path / "data", memo_local)
    fathom.routing.update(
        {
            Role.CODE_EMBEDDING: {"policy": "aggregate", "upstream": "alpha"},
            Role.EMBEDDING: {"policy": "aggregate", "upstream": "alpha"},
        }
    )
    client = OpenRouterClient(KEY, base_url=emulator.base_url)
    alpha = cloud_route(fathom, client, "alpha")
    project = write_functions(tmp_path / "proj", files=4, per_file=8, tag="outage")
    try:
        for table in ("code", "docs"):  # cleared while the account still answers
            await fathom.verify_providers(table)
            assert fathom.gate.is_cleared(fathom.space(table), alpha)
        before = emulator.control.counters()["requests"].get("embeddings", 0)
        ceiling = fathom.budget.state().ceiling
        emulator.control.set_limits(concurrency=0, retry_after_seconds=RETRY_AFTER_S)
        local_before = memo_local.texts_embedded

        started = time.monotonic()
        report = await asyncio.wait_for(fathom.index(project, "proj"), timeout=300)
        elapsed = time.monotonic() - started

        counters = emulator.control.counters()
        sent = counters["requests"]["embeddings"] - before
        state = fathom.budget.state()
        print(
            f"\n{report.chunks} chunks in {elapsed:.1f}s; cloud requests during the outage "
            f"{sent}, all 429 ({counters['rate_limited']}); budget: effective "
            f"{state.effective_limit}/{state.ceiling}, halvings {state.halvings}, throttled "
            f"{state.throttled_total}, cooldown left {state.cooldown_remaining_s:.1f}s"
        )

        # The job completed through the local encoder alone, every chunk exactly once.
        assert report.providers == {memo_local.id: report.chunks}
        assert memo_local.texts_embedded - local_before == report.chunks  # no batch redone
        for table in ("code", "docs"):
            rows = all_rows(fathom, "proj", table)
            assert len(rows) == len(set(rows)) == report.tables[table]
            assert set(fathom.store.provenance_counts("proj", table)) == {
                (memo_local.id, fathom.gate.verdict_for(fathom.space(table), memo_local).verdict_id)
            }
        assert report.tables["code"] + report.tables["docs"] == report.chunks

        # The cloud did try, was told 429 every time, and backed off: each throttle reported
        # once, the limit halved, and no request sent during a cooldown (each wave is at most
        # the limit's worth, and waves are at least Retry-After apart).
        assert sent >= 1 and counters["rate_limited"] == sent
        assert counters["by_upstream"].get("alpha", 0) == 2  # only the probes were ever served
        assert state.throttled_total["429"] == sent
        assert state.halvings >= 1 and state.effective_limit < ceiling
        assert state.last_throttle is not None and state.last_throttle.kind == "429"
        assert state.last_throttle.retry_after_s == RETRY_AFTER_S
        assert sent <= ceiling * (1 + math.floor(elapsed / RETRY_AFTER_S))
        assert state.in_flight == 0
    finally:
        await fathom.aclose()
        await client.aclose()


async def test_two_projects_indexing_at_once_share_one_key_fairly(
    tmp_path, emulator, memo_local, memo_emulator_encoders
):
    # Two permits for the whole key, and an upstream slow enough that the permits, not the
    # CPU, are what the two jobs wait for; small batches (latency per item) so each job makes
    # many requests.
    budget = CloudBudget(override=2)
    fathom = make_fathom(tmp_path / "data", memo_local, budget=budget)
    fathom.routing.update(
        {
            Role.CODE_EMBEDDING: {"policy": "cloud", "upstream": "alpha"},
            Role.EMBEDDING: {"policy": "local"},
        }
    )
    client = OpenRouterClient(KEY, base_url=emulator.base_url)
    alpha = cloud_route(fathom, client, "alpha")
    big = write_functions(tmp_path / "big", files=6, per_file=10, tag="big", docstrings=False)
    small = write_functions(tmp_path / "small", files=2, per_file=10, tag="small", docstrings=False)
    try:
        await fathom.verify_providers("code")  # the anchor alone: reduced coverage, cleared
        assert fathom.gate.is_cleared(fathom.space("code"), alpha)
        # Half a second an item: the pool's one-second batches hold two items, so the two jobs
        # take well over ten permits between them while both wait.
        emulator.control.latency(base_ms=100, per_item_ms=500)

        snapshots: dict[str, dict[str, int]] = {}
        stop = asyncio.Event()

        async def watch() -> None:
            # The first instant both jobs hold grants: from then on both are waiting in line.
            while not stop.is_set():
                granted = budget.state().granted_by_project
                if "warm" not in snapshots and granted.get("big") and granted.get("small"):
                    snapshots["warm"] = dict(granted)
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        jobs = {
            asyncio.create_task(fathom.index(big, "big")): "big",
            asyncio.create_task(fathom.index(small, "small")): "small",
        }
        done, _ = await asyncio.wait(jobs, timeout=300, return_when=asyncio.FIRST_COMPLETED)
        assert done, "neither job finished"
        first = jobs[next(iter(done))]
        snapshots["end"] = dict(budget.state().granted_by_project)
        reports = {
            jobs[t]: r for t, r in zip(jobs, await asyncio.wait_for(asyncio.gather(*jobs), timeout=300))
        }
        stop.set()
        await watcher

        warm, end = snapshots["warm"], snapshots["end"]
        share = {p: end[p] - warm[p] for p in ("big", "small")}
        total = sum(share.values())
        state = budget.state()
        print(
            f"\nfirst to finish: {first}; permits while both waited {share} (warm-up {warm}, "
            f"at the end {state.granted_by_project}); peak in flight {state.peak_in_flight}, "
            f"emulator peak {emulator.control.counters()['peak_concurrency']}"
        )

        assert first == "small"  # a third of the work, and not starved by the big one
        assert total >= 10
        for n in share.values():
            assert abs(n - total / 2) <= 0.2 * total / 2
        # One key, one limit: never more than the override in flight, whoever asked.
        assert state.peak_in_flight <= 2
        assert emulator.control.counters()["peak_concurrency"] <= 2
        for name, report in reports.items():
            assert report.providers == {alpha.id: report.chunks}
            rows = all_rows(fathom, name, "code")
            assert len(rows) == len(set(rows)) == report.chunks
    finally:
        await fathom.aclose()
        await client.aclose()
