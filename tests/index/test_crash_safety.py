"""Crash safety of `fathom index --full`, as an operator meets it: the process SIGKILLed at
seeded random moments (promotion included), a kill between the promotions of the code and the
docs tables, and a disk that fills up mid-run.

After every kill the active index is exactly what it was before the run (or, when the kill
fell after the one promotion rename, exactly the new index, both tables together), holds no
duplicate chunk id, and the next run completes to the same index as a clean run, compared by
chunk ids and vectors.

`FATHOM_FAULT_KILLS` raises the number of kills (default 10), `FATHOM_FAULT_SEED` changes the
seed (default 19). The CLI runs in children forked from a warm forkserver (`tests/cli/cli_child.py`)
so that each run costs its own work, not ten seconds of imports.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fathom.index.migrate import read_rows
from fathom.index.store import LanceStore
from tests.cli import cli_child
from tests.index.retrieval_fixtures import SAMPLE_FILES

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("FATHOM_FAULT_KILLS", "10"))
SEED = int(os.environ.get("FATHOM_FAULT_SEED", "19"))
PROJECT = "shop"

CORPUS_A = dict(SAMPLE_FILES)
CORPUS_B = {k: v for k, v in SAMPLE_FILES.items() if k != "web/server.js"} | {
    "net/retry.py": SAMPLE_FILES["net/retry.py"].replace("attempts=5", "attempts=7"),
    "cache/lru.py": (
        '"""A least-recently-used cache."""\n\n\nclass LRU:\n    """Evicts the '
        'entry used longest ago."""\n\n    def __init__(self, size):\n        '
        "self.size = size\n        self.items = {}\n\n    def get(self, key):\n"
        "        return self.items.get(key)\n"
    ),
    "README.md": SAMPLE_FILES["README.md"] + "\n## Caching\n\nAn LRU cache keeps hot items.\n",
}
CORPORA = {"A": CORPUS_A, "B": CORPUS_B}

Snapshot = dict[str, dict[str, np.ndarray]]


def write_corpus(root: Path, files: dict[str, str]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def snapshot(data: Path) -> Snapshot:
    """The active index: per table, chunk id -> vector. Fails on a duplicate chunk id."""
    store = LanceStore(data / "lance")
    try:
        out: Snapshot = {}
        for table in ("code", "docs"):
            rows: dict[str, np.ndarray] = {}
            n = 0
            for batch in read_rows(store, PROJECT, table):
                n += len(batch.chunk_ids)
                rows.update(zip(batch.chunk_ids, batch.vectors, strict=True))
            assert n == len(rows), f"{table}: {n} rows for {len(rows)} chunk ids"
            out[table] = rows
        return out
    finally:
        store.close()


def identical(a: Snapshot, b: Snapshot) -> bool:
    return all(a[t].keys() == b[t].keys() and all(np.array_equal(a[t][c], b[t][c]) for c in a[t]) for t in a)


def same_index(a: Snapshot, b: Snapshot) -> bool:
    """Same chunk ids, and vectors equal up to float noise (a resumed run batches differently)."""
    return all(
        a[t].keys() == b[t].keys() and all(np.allclose(a[t][c], b[t][c], atol=1e-4) for c in a[t]) for t in a
    )


class Runs:
    """`fathom --data-dir DATA index ROOT --project shop [--full]` in forked children."""

    def __init__(self, base: Path, root: Path):
        self.base, self.root, self.n = base, root, 0

    def start(self, data: Path, *, full: bool = True, plan: dict | None = None, events: bool = False):
        self.n += 1
        log = self.base / f"run{self.n}.log"
        argv = ["--data-dir", str(data), "index", str(self.root), "--project", PROJECT]
        proc = cli_child.start(
            argv + (["--full"] if full else []),
            log,
            plan=plan,
            events=self.base / f"run{self.n}.events" if events else None,
        )
        proc.log = log  # type: ignore[attr-defined]
        proc.events = self.base / f"run{self.n}.events"  # type: ignore[attr-defined]
        return proc

    def run(
        self,
        data: Path,
        *,
        full: bool = True,
        plan: dict | None = None,
        events: bool = False,
        timeout: float = 300,
    ):
        proc = self.start(data, full=full, plan=plan, events=events)
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join(10)
            raise AssertionError(f"run did not finish in {timeout}s:\n{proc.log.read_text()[-3000:]}")
        return proc

    def ok(self, data: Path, **kw) -> str:
        proc = self.run(data, **kw)
        out = proc.log.read_text()
        assert proc.exitcode == 0, out[-3000:]
        return out


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path, tmp_path / "shop")


def references(runs: Runs, tmp_path: Path) -> tuple[dict[str, Snapshot], dict[str, list[str]], float]:
    """A clean index of each corpus in its own data dir, the storage events of a clean run, and
    how long a clean run takes."""
    refs, events, took = {}, {}, 0.0
    for name, files in CORPORA.items():
        write_corpus(runs.root, files)
        started = time.monotonic()
        proc = runs.run(tmp_path / f"ref{name}", events=True)
        took = max(took, time.monotonic() - started)
        assert proc.exitcode == 0, proc.log.read_text()[-3000:]
        import json

        events[name] = json.loads(proc.events.read_text())
        refs[name] = snapshot(tmp_path / f"ref{name}")
        assert refs[name]["code"] and refs[name]["docs"]
    assert not same_index(refs["A"], refs["B"])
    return refs, events, took


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[dict[str, Snapshot], dict[str, list[str]], float]:
    base = tmp_path_factory.mktemp("clean")
    return references(Runs(base, base / "shop"), base)


def test_sigkill_at_seeded_random_moments_never_damages_the_index(runs, tmp_path, clean):
    rng = random.Random(SEED)
    refs, events, took = clean
    data = tmp_path / "data"
    write_corpus(runs.root, CORPUS_A)
    runs.ok(data)
    assert same_index(snapshot(data), refs["A"])
    current, kills, in_promotion, trials = "A", 0, 0, 0
    modes: list[str] = []
    while kills < KILLS:
        trials += 1
        assert trials <= 4 * KILLS, f"only {kills} of {trials} planned kills landed: {modes}"
        target = "B" if current == "A" else "A"
        write_corpus(runs.root, CORPORA[target])
        before = snapshot(data)
        mode = rng.choice(["event", "event", "event", "promote", "time"])
        if kills == KILLS - 2 and in_promotion < 2 or kills == KILLS - 1 and in_promotion < 2:
            mode = "promote"  # at least two kills land inside the promotion
        if mode == "time":
            proc = runs.start(data)
            time.sleep(rng.uniform(0.2, took))
            proc.kill()
            proc.join(60)
        else:
            labels = events[target]
            span = len([x for x in labels if x.startswith("promote:")]) if mode == "promote" else len(labels)
            plan = {
                "at": rng.randrange(span),
                "when": rng.choice(["before", "after", "during"]),
                "delay": rng.uniform(0, 0.03),
            }
            if mode == "promote":
                plan["phase"] = "promote"
            proc = runs.run(data, plan=plan)
            mode = f"{mode}{plan}"
        killed = proc.exitcode == -9
        modes.append(f"{mode} -> {proc.exitcode}")
        if killed:
            kills += 1
            in_promotion += mode.startswith("promote")
        after = snapshot(data)
        # The active index is the one before the run, untouched, or (when the kill fell after
        # the one promotion rename, or the run finished) the new one: both tables together.
        assert identical(after, before) or same_index(after, refs[target]), modes[-1]
        # The next run completes to exactly a clean run's index.
        runs.ok(data)
        assert same_index(snapshot(data), refs[target]), modes[-1]
        current = target
    assert in_promotion >= 2, modes
    print(
        f"\n{kills} kills in {trials} runs, {in_promotion} inside the promotion (seed {SEED}):\n  "
        + "\n  ".join(modes)
    )


def test_a_kill_between_the_two_promotions_leaves_both_tables_in_step(runs, tmp_path, clean):
    """The kill lands right after the first rename of the pointer file that switches an active
    table. Both tables switch in that one rename; the next run re-embeds nothing."""
    data = tmp_path / "data"
    write_corpus(runs.root, CORPUS_A)
    runs.ok(data)
    before = snapshot(data)
    write_corpus(runs.root, CORPUS_B)
    promotion = [x for x in clean[1]["B"] if x.startswith("promote:")]
    at = promotion.index("promote:_write_state")  # the first pointer-file write it makes
    proc = runs.run(data, plan={"phase": "promote", "at": at, "when": "after"})
    assert proc.exitcode == -9
    after = snapshot(data)
    code_new = after["code"].keys() != before["code"].keys()
    docs_new = after["docs"].keys() != before["docs"].keys()
    assert code_new and docs_new, "the code and docs tables are out of step"
    out = runs.ok(data, full=False)
    assert re.search(r"embedded\s+0 in", out), out


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 16 MB tmpfs, when this machine lets the test mount one (root with CAP_SYS_ADMIN, as CI)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("the disk-full test mounts a small tmpfs, which needs root; run as root (CI does)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.strip()}); the disk-full test needs CAP_SYS_ADMIN"
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` until only about `leave` bytes are free."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as fh:
        chunk = b"\0" * (1 << 16)
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
        with_free = max(0, leave)
    if with_free:
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - with_free))
    return filler


def test_a_full_disk_is_one_clear_line_and_the_next_run_completes(
    runs, tmp_path, small_disk, clean, local_encoder
):
    ref_b = clean[0]["B"]
    data = small_disk / "data"
    write_corpus(runs.root, CORPUS_A)
    runs.ok(data)
    snap_a = snapshot(data)
    write_corpus(runs.root, CORPUS_B)
    for leave in (0, 16 * 1024, 64 * 1024):
        filler = fill(small_disk, leave)
        proc = runs.run(data)
        out = proc.log.read_text()
        assert proc.exitcode == 1, (leave, out[-3000:])
        assert "Traceback" not in out, out[-3000:]
        errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, out[-3000:]
        assert errors[0].startswith("error: no space left on the disk holding Fathom's data"), errors
        assert "free some space" in errors[0] and "active index is unchanged" in errors[0]
        assert identical(snapshot(data), snap_a), f"the active index changed ({leave} bytes left)"
        print(f"\n{leave} bytes free: {errors[0][:160]}")
        filler.unlink()

    # The same failure through an MCP session and at a server start.
    from mcp import Client

    from fathom.config import Settings
    from fathom.server.mcp_tools import build_mcp_server
    from fathom.service import Fathom

    filler = fill(small_disk, 0)
    fathom = Fathom(Settings(data_dir=data), encoder=local_encoder)

    async def mcp_call():
        async with Client(build_mcp_server(fathom)) as client:
            return await client.call_tool(
                "index_project", {"path": str(runs.root), "project": PROJECT, "full": True, "wait": True}
            )

    result = asyncio.run(mcp_call())
    assert result.is_error and "no space left on the disk" in result.content[0].text
    started = subprocess.run(
        [sys.executable, "-m", "fathom.server", "--data-dir", str(small_disk / "srv"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, FATHOM_ADMIN_TOKEN="", FATHOM_JOIN_TOKEN=""),
    )
    assert started.returncode == 1, started.stderr[-3000:]
    assert "Traceback" not in started.stderr
    lines = [ln for ln in started.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: no space left on the disk"), started.stderr[-2000:]
    filler.unlink()

    # Space freed: the same command completes, to a clean run's index.
    runs.ok(data)
    assert same_index(snapshot(data), ref_b)
