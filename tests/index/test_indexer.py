"""Index jobs through the real store and the real MiniLM encoder: full builds through a
shadow slot, interrupted runs that leave the active table intact and resume, incremental runs
that re-embed only what changed, job control and progress."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fathom.errors import NotCleared
from fathom.index.indexer import Indexer
from fathom.index.job import JobCancelled, JobState
from fathom.index.search import search
from fathom.index.store import LanceStore, Slot
from tests.index.retrieval_fixtures import CountingEncoder


@pytest.fixture
def store(tmp_path: Path) -> LanceStore:
    s = LanceStore(tmp_path / "lance")
    yield s
    s.close()


def manifest(store, project="shop"):
    return {
        t: sorted((e.chunk_id, e.content_hash, e.path) for e in store.manifest(project, t))
        for t in ("code", "docs")
    }


async def index(store, encoder, root, *, full=False, batch_size=4, progress=None, job=None):
    indexer = Indexer(store, encoder, batch_size=batch_size)
    job = job or indexer.job("shop", root, full=full)
    return await indexer.run(job, progress), job


async def test_first_index_writes_both_tables_with_provenance(store, local_encoder, sample_project):
    events = []
    report, job = await index(store, local_encoder, sample_project, progress=events.append)
    assert job.state is JobState.DONE
    assert report.files == 5 and report.embedded == report.chunks > 0
    assert report.tables["code"] > 0 and report.tables["docs"] > 0
    for table in ("code", "docs"):
        counts = store.provenance_counts("shop", table)
        assert counts == {(local_encoder.id, None): report.tables[table]}
    # Progress: the phases in order, the last embedding event complete, an ETA while running.
    phases = [e.phase for e in events]
    assert phases[0] == "walking" and phases[-1] == "done"
    embedding = [e for e in events if e.phase == "embedding"]
    assert embedding[-1].chunks_done == embedding[-1].chunks_total == report.embedded
    assert any(e.eta_s is not None and e.chunks_done < e.chunks_total for e in embedding)
    hits = await search(store, local_encoder, "shop", "hash a password with a salt", k=3)
    assert hits[0].path == "auth/password.py"


async def test_a_folder_of_empty_files_is_a_clean_run_with_no_rows(store, local_encoder, tmp_path):
    """Nothing to chunk makes no table; the run still ends with its report, not UnknownProject."""
    root = tmp_path / "empty"
    root.mkdir()
    for i in range(3):
        (root / f"f{i}.py").write_bytes(b"")
    report, job = await index(store, local_encoder, root)
    assert job.state is JobState.DONE
    assert report.chunks == 0 and report.tables == {"code": 0, "docs": 0}


async def test_skipped_files_are_counted_by_reason(store, local_encoder, sample_project):
    (sample_project / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    report, _ = await index(store, local_encoder, sample_project)
    assert sum(report.skipped.values()) >= 1
    assert report.files == 5


async def test_incremental_reindex_embeds_only_changed_files(store, local_encoder, sample_project):
    await index(store, local_encoder, sample_project)
    before = manifest(store)

    # Nothing changed: nothing embedded, nothing deleted.
    counting = CountingEncoder(local_encoder)
    report, _ = await index(store, counting, sample_project)
    assert counting.texts == [] and report.embedded == 0 and report.deleted == 0
    assert manifest(store) == before

    # One file edited, one removed, one added.
    retry = sample_project / "net" / "retry.py"
    retry.write_text(retry.read_text().replace("gave up after retries", "retries exhausted"))
    (sample_project / "web" / "server.js").unlink()
    (sample_project / "math_utils.py").write_text(
        'def mean(values):\n    """Arithmetic mean of a list of numbers."""\n    return sum(values) / len(values)\n'
    )
    counting = CountingEncoder(local_encoder)
    report, _ = await index(store, counting, sample_project)

    after = manifest(store)
    embedded_paths = {p for t in after for (cid, _, p) in after[t] if cid not in {c for c, _, _ in before[t]}}
    assert embedded_paths == {"net/retry.py", "math_utils.py"}
    new_ids = sum(len({c for c, _, _ in after[t]} - {c for c, _, _ in before[t]}) for t in after)
    assert report.embedded == len(counting.texts) == new_ids > 0
    assert not any(p == "web/server.js" for t in after for (_, _, p) in after[t])
    # Unchanged files kept their rows untouched.
    for t in before:
        keep = {r for r in before[t] if r[2] in ("auth/password.py", "billing/invoice.py", "README.md")}
        assert keep <= set(after[t])
    hits = await search(store, local_encoder, "shop", "average of numbers", k=1)
    assert hits[0].path == "math_utils.py"


async def test_killed_full_reindex_leaves_active_intact_and_resumes(store, local_encoder, sample_project):
    await index(store, local_encoder, sample_project)
    before = manifest(store)
    query_before = await search(store, local_encoder, "shop", "invoice total with tax", k=5)

    # Every chunk of the code changes (trailing spaces on every line), so the full run has all
    # of them to embed; it dies after 2 batches.
    for path in sample_project.rglob("*.py"):
        path.write_text(path.read_text().replace("\n", "  \n"))
    dying = CountingEncoder(local_encoder, fail_after_batches=2)
    with pytest.raises(RuntimeError, match="killed"):
        await index(store, dying, sample_project, full=True, batch_size=2)

    # The active table is exactly what it was, and searches still answer from it.
    assert manifest(store) == before
    query_after = await search(store, local_encoder, "shop", "invoice total with tax", k=5)
    assert [(h.chunk_id, h.path) for h in query_after] == [(h.chunk_id, h.path) for h in query_before]
    in_shadow = len(store.chunk_ids("shop", "code", Slot.SHADOW)) + len(
        store.chunk_ids("shop", "docs", Slot.SHADOW)
    )
    # The text of the other files is unchanged: their rows came over with their vectors.
    prose = {c for t in before for c, _, p in before[t] if not p.endswith(".py")}
    carried = prose & (
        store.chunk_ids("shop", "code", Slot.SHADOW) | store.chunk_ids("shop", "docs", Slot.SHADOW)
    )
    assert carried == prose and prose
    assert in_shadow == len(dying.texts) + len(prose) and len(dying.texts) == 4

    # The next full run resumes: only what the shadow lacks is embedded, then it is promoted.
    resumed = CountingEncoder(local_encoder)
    report, _ = await index(store, resumed, sample_project, full=True, batch_size=2)
    assert report.resumed and report.reused >= 4 + len(prose)
    assert report.embedded == len(resumed.texts) == report.chunks - report.reused
    assert not set(dying.texts) & set(resumed.texts)
    after = manifest(store)
    assert after != before
    assert store.table_info("shop", "code").shadow_rows is None
    assert sum(len(v) for v in after.values()) == report.chunks


async def test_a_provider_not_cleared_for_the_table_writes_nothing(store, local_encoder, sample_project):
    await index(store, local_encoder, sample_project)
    before = manifest(store)
    (sample_project / "extra.py").write_text("def extra():\n    return 'an extra function'\n")
    stranger = CountingEncoder(local_encoder, provider_id="openrouter:unverified@somewhere")
    indexer = Indexer(
        store, local_encoder, batch_size=4, runner=_SingleProviderRunner(stranger, batch_size=4)
    )
    with pytest.raises(NotCleared):
        await indexer.run(indexer.job("shop", sample_project))
    assert manifest(store) == before


class _SingleProviderRunner:
    """The shape of `Pool.run(texts, sink)` with one provider: enough to test that the
    indexer writes each batch with the provenance of the provider that embedded it."""

    def __init__(self, provider, batch_size):
        self.provider, self.batch_size = provider, batch_size

    async def run(self, texts, sink):
        for start in range(0, len(texts), self.batch_size):
            idx = list(range(start, min(start + self.batch_size, len(texts))))
            await sink(idx, await self.provider.embed([texts[i] for i in idx]), self.provider)


async def test_pause_resume_and_cancel(store, local_encoder, sample_project):
    indexer = Indexer(store, local_encoder, batch_size=2)
    job = indexer.job("shop", sample_project)
    paused = asyncio.Event()

    def on_progress(p):
        if p.phase == "embedding" and p.chunks_done >= 2 and not paused.is_set():
            job.pause()
            paused.set()

    task = asyncio.create_task(indexer.run(job, on_progress))
    await paused.wait()
    assert job.state is JobState.PAUSED
    done_at_pause = job.progress.chunks_done
    for _ in range(20):  # the run makes no progress while paused
        await asyncio.sleep(0)
    assert job.progress.chunks_done <= done_at_pause + 2  # at most the batch already in flight
    job.resume()
    report = await task
    assert job.state is JobState.DONE and report.embedded == report.chunks

    (sample_project / "more.py").write_text("def more():\n    return 1\n")
    job2 = indexer.job("shop", sample_project, full=True)
    job2.cancel()
    with pytest.raises(JobCancelled):
        await indexer.run(job2)
    assert job2.state is JobState.CANCELLED
    assert store.table_info("shop", "code").rows == report.tables["code"]


@pytest.mark.slow
async def test_sigkilled_cli_full_reindex_leaves_active_intact_and_resumes(
    store, local_encoder, sample_project, tmp_path
):
    import os
    import signal
    import subprocess
    import sys

    from fathom.config import Settings
    from fathom.service import Fathom

    for i in range(30):  # more chunks than the paused run embeds before it waits
        (sample_project / "gen" / f"mod_{i}.py").parent.mkdir(exist_ok=True)
        (sample_project / "gen" / f"mod_{i}.py").write_text(
            f'def step_{i}(x):\n    """Advance state number {i} by one step."""\n    return x + {i}\n'
        )
    data = tmp_path / "data"
    fathom = Fathom(Settings(data_dir=data), encoder=local_encoder)
    await fathom.index(sample_project, "shop")
    disk = fathom.store
    before = manifest(disk)
    query_before = [h.chunk_id for h in await search(disk, local_encoder, "shop", "password hash", k=5)]
    for path in sample_project.rglob("*.py"):
        path.write_text(path.read_text() + "\n# revised\n")

    # The real command line, paused once its first chunks are embedded and stored (batches
    # grow as a run goes, so a kill timed by polling alone could land after the promotion).
    env = dict(os.environ, HF_HUB_OFFLINE="1", FATHOM_LOCAL_BATCH_SIZE="2", FATHOM_PAUSE_AFTER="4")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("paused_cli.py")),
            "--data-dir",
            str(data),
            "index",
            str(sample_project),
            "--project",
            "shop",
            "--full",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(1200):  # bounded: at most ~4 minutes of polling
            shadow = disk.table_info("shop", "code").shadow_rows or 0
            if shadow >= 4 or proc.poll() is not None:
                break
            await asyncio.sleep(0.2)
        assert proc.poll() is None, "the paused run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    assert manifest(disk) == before
    assert [
        h.chunk_id for h in await search(disk, local_encoder, "shop", "password hash", k=5)
    ] == query_before
    kept = len(disk.chunk_ids("shop", "code", Slot.SHADOW)) + len(disk.chunk_ids("shop", "docs", Slot.SHADOW))
    assert kept >= 4

    counting = CountingEncoder(local_encoder)
    resumed = Fathom(Settings(data_dir=data), encoder=counting, store=disk)
    report = await resumed.index(sample_project, "shop", full=True)
    assert report.resumed and report.reused == kept
    # Whatever unchanged text the killed run had not carried over yet is carried now.
    assert report.embedded == len(counting.texts) == report.chunks - report.reused - report.carried
    assert disk.table_info("shop", "code").shadow_rows is None
    after = manifest(disk)
    assert after != before
    assert sum(len(v) for v in after.values()) == report.chunks
