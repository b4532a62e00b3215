"""Damaged data and concurrent writers, through the CLI, the admin API and an MCP session.

* Two indexers of one project at once (a CLI run and a server job): one is refused at once,
  naming the holder (process, host, since when), and the index stays intact.
* A garbled state.json, a deleted table folder, a truncated data or manifest file: typed
  errors naming the fix (never a traceback, never a bare 500), the damaged project listed as
  damaged and skipped by searches over every project, the others unaffected.
* Flipped bytes in a data file, a deleted full-text index, duplicate chunk ids: found by
  `fathom store verify`, fixed by `--repair` (damaged vectors re-embedded under the gate).
* PostgreSQL lost in the middle of a run: one line, and the next run completes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from lancedb.index import FTS
from mcp import Client
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.index.keywords import STOP_WORDS
from fathom.index.migrate import read_rows
from fathom.index.store import LanceStore
from fathom.index.store.lance_tables import fts_config, fts_name
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom, ProjectRecords
from tests.fleet.fleet_fixtures import serve_in_loop
from tests.index.retrieval_fixtures import write_project
from tests.server.admin_fixtures import AUTH, Operator, build_operator_app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def cli(fathom: Fathom, *args: str):
    return runner.invoke(app, list(args), obj={"fathom": fathom}, env={"COLUMNS": "220"})


def found_in(output: str, project: str, path: str) -> bool:
    """A result row of `fathom search` naming `path` in `project` (its own column)."""
    return any(f" {project} " in line and f" {path}:" in line for line in output.splitlines())


def one_line_error(output: str) -> str:
    assert "Traceback" not in output, output
    errors = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, output
    return errors[0]


def lance_dir(data: Path, project: str) -> Path:
    return data / "lance" / "projects" / LanceStore.slug(project)


def active_table(data: Path, project: str, table: str) -> Path:
    state = json.loads((lance_dir(data, project) / "state.json").read_text())
    return lance_dir(data, project) / f"{state['tables'][table]['active']}.lance"


@pytest.fixture(scope="module")
def indexed_pair(tmp_path_factory, local_encoder):
    """`shop` and `other`, indexed once for the module (each test damages its own copy)."""
    base = tmp_path_factory.mktemp("pair")
    data = base / "data"
    shop = write_project(base / "shop")
    other = write_project(
        base / "other",
        {
            "lib/queue.py": (
                '"""A bounded work queue."""\n\n\ndef enqueue(queue, item, limit=10):\n    """Put an item '
                'on the queue unless it is full."""\n    if len(queue) >= limit:\n        raise OverflowError'
                '("queue full")\n    queue.append(item)\n'
            )
        },
    )
    fathom = Fathom(Settings(data_dir=data), encoder=local_encoder)
    assert cli(fathom, "index", str(shop), "--project", "shop").exit_code == 0
    assert cli(fathom, "index", str(other), "--project", "other").exit_code == 0
    fathom.store.close()
    return data, shop


@pytest.fixture
def two_projects(indexed_pair, tmp_path, local_encoder):
    """A copy of the indexed pair: (data dir, shop root, a fresh-Fathom factory)."""
    template, shop = indexed_pair
    data = tmp_path / "data"
    shutil.copytree(template, data)

    def fresh() -> Fathom:
        return Fathom(Settings(data_dir=data), encoder=local_encoder)

    return data, shop, fresh


# ---------------------------------------------------------------- two writers at once


def _lock_record(data: Path, project: str) -> dict | None:
    try:
        return json.loads((lance_dir(data, project) / ".index.lock").read_text() or "null")
    except (OSError, ValueError):
        return None


@pytest.mark.slow
async def test_a_cli_run_and_a_server_job_never_index_one_project_at_once(tmp_path, local_encoder):
    data = tmp_path / "data"
    root = write_project(tmp_path / "shop")
    for i in range(12):
        (root / f"extra/mod{i}.py").parent.mkdir(exist_ok=True)
        (root / f"extra/mod{i}.py").write_text(
            "\n\n".join(f"def task_{i}_{j}(value):\n    return value * {j} + {i}" for j in range(6))
        )
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COLUMNS="200")
    cmd = [
        sys.executable,
        "-m",
        "fathom.cli",
        "--data-dir",
        str(data),
        "index",
        str(root),
        "--project",
        "shop",
    ]
    host = socket.gethostname()
    app_ = build_operator_app(data, encoder=local_encoder)
    async with serve_in_loop(app_) as url:
        op = Operator(url, app_, data, tmp_path)
        # A server that has been serving has its store open (the first open imports LanceDB).
        await asyncio.to_thread(getattr, app_.state.service, "store")
        async with op.client() as client:
            # 1. The CLI takes the project; it is frozen (SIGSTOP) while it holds it.
            first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            try:
                for _ in range(1800):
                    record = _lock_record(data, "shop")
                    if record and record["pid"] == first.pid or first.poll() is not None:
                        break
                    await asyncio.sleep(0.05)
                assert record and record["pid"] == first.pid, first.communicate(timeout=60)
                first.send_signal(signal.SIGSTOP)

                # 2. A server job for the same project is refused at once, naming the CLI.
                started = time.monotonic()
                r = await client.post("/admin/jobs", json={"path": str(root), "project": "shop"})
                assert r.status_code == 202, r.text
                job = await op.wait_job(client, r.json()["id"], timeout=30)
                took = time.monotonic() - started
                assert job["state"] == "failed", job
                assert took < 2.0, f"refused after {took:.2f}s"
                message = job["error"]
                assert "project 'shop' is being indexed by" in message, message
                assert f"pid {first.pid}" in message and f"host {host}" in message
                assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", message), message
            finally:
                first.send_signal(signal.SIGCONT)
            out, err = await asyncio.to_thread(first.communicate, timeout=300)
            assert first.returncode == 0, err[-3000:]

            # 3. A server job holds the project (paused between batches); the CLI is refused.
            r = await client.post("/admin/jobs", json={"path": str(root), "project": "shop", "full": True})
            job_id = r.json()["id"]
            await client.post(f"/admin/jobs/{job_id}/pause")
            for _ in range(600):
                record = _lock_record(data, "shop")
                if record and record["pid"] == os.getpid():
                    break
                await asyncio.sleep(0.05)
            assert record and record["pid"] == os.getpid(), record
            refused = await asyncio.to_thread(
                subprocess.run, cmd, capture_output=True, text=True, env=env, timeout=300
            )
            assert refused.returncode == 1, refused.stderr[-3000:]
            line = one_line_error(refused.stderr)
            message = " ".join(line.split())
            assert "project 'shop' is being indexed by" in message
            assert f"pid {os.getpid()}" in message and f"host {host}" in message and "since" in message
            # The CLI command itself refuses in well under 2 s (a process start aside).
            other = Fathom(Settings(data_dir=data), encoder=local_encoder)
            started = time.monotonic()
            result = await asyncio.to_thread(cli, other, "index", str(root), "--project", "shop")
            took = time.monotonic() - started
            assert result.exit_code == 1 and "is being indexed by" in result.output
            assert took < 2.0, f"refused after {took:.2f}s"

            await client.post(f"/admin/jobs/{job_id}/resume")
            job = await op.wait_job(client, job_id, timeout=300)
            assert job["state"] == "done", job

    # 4. The index is intact: one row per chunk id, nothing damaged.
    check = Fathom(Settings(data_dir=data), encoder=local_encoder)
    result = await asyncio.to_thread(cli, check, "store", "verify", "shop")
    assert result.exit_code == 0 and "no problems found" in result.output, result.output
    from fathom.index.indexer import discover

    chunks = discover(root).chunks
    rows = {t: [c for b in read_rows(check.store, "shop", t) for c in b.chunk_ids] for t in ("code", "docs")}
    assert sorted(rows["code"] + rows["docs"]) == sorted(c.chunk_id for c in chunks)


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, local_encoder):
    data = tmp_path / "data"
    root = write_project(tmp_path / "shop")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\nfrom fathom.index.store import LanceStore\n"
                "s = LanceStore(sys.argv[1])\n"
                "with s.project_lock('shop'):\n    print('held', flush=True)\n    time.sleep(600)\n"
            ),
            str(data / "lance"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert holder.stdout.readline().strip() == "held"
    fathom = Fathom(Settings(data_dir=data), encoder=local_encoder)
    result = cli(fathom, "index", str(root), "--project", "shop")
    assert result.exit_code == 1 and f"pid {holder.pid}" in result.output
    holder.kill()  # no clean-up: the record of the dead holder stays in the lock file
    holder.wait(30)
    assert _lock_record(data, "shop")["pid"] == holder.pid
    result = cli(fathom, "index", str(root), "--project", "shop")
    assert result.exit_code == 0, result.output


def test_project_records_are_locked_across_processes(tmp_path):
    """Four processes finishing runs at once, each writing its project's record (a last-run
    summary of a few KB, as a real one): no record is lost to another's read-modify-write."""
    script = (
        "import sys\nfrom pathlib import Path\nfrom fathom.service import ProjectRecords\n"
        "r = ProjectRecords(Path(sys.argv[1]))\n"
        "for i in range(60):\n"
        "    r.put(f'{sys.argv[2]}{i}', {'root': str(i), 'last_run': {'n': 'x' * 4000}})\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), tag], cwd=REPO)
        for tag in ("a", "b", "c", "d")
    ]
    for p in procs:
        assert p.wait(180) == 0
    records = ProjectRecords(tmp_path).load()
    assert len(records) == 240, f"{240 - len(records)} records lost"


# ---------------------------------------------------------------- damaged projects


def admin_audit_status(data: Path, project: str) -> int:
    """The admin API's answer about a damaged project: a typed refusal naming the damage and
    the fix, never a bare 500."""

    async def ask() -> int:
        app_ = build_operator_app(data)
        async with serve_in_loop(app_) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as client:
            r = await client.get(f"/admin/gate/audit/{project}")
            assert "is damaged" in r.json()["detail"]["message"], r.text
            assert "fathom store verify" in r.json()["detail"]["message"]
            return r.status_code

    return asyncio.run(ask())


def test_a_garbled_state_file_is_damage_not_an_empty_store(two_projects):
    data, shop, fresh = two_projects
    (lance_dir(data, "shop") / "state.json").write_text('{"project": "shop", "tab')
    fathom = fresh()

    result = cli(fathom, "projects")
    assert result.exit_code == 0, result.output
    assert "no projects indexed yet" not in result.output
    assert "shop (damaged)" in result.output and "other" in result.output
    assert "fathom store verify shop --repair" in result.output

    line = one_line_error(cli(fathom, "search", "hash a password", "--project", "shop").output)
    assert "project 'shop' is damaged" in line and "state.json is unreadable" in line
    assert "fathom store verify shop --repair" in line
    # An index run refuses too: it never overwrites the damaged file as if it were empty.
    assert "is damaged" in one_line_error(cli(fathom, "index", str(shop), "--project", "shop").output)
    result = cli(fathom, "search", "bounded work queue", "-k", "3")
    assert result.exit_code == 0 and found_in(result.output, "other", "lib/queue.py"), result.output
    assert "skipped project 'shop', which is damaged" in result.output

    async def over_mcp() -> None:
        async with Client(build_mcp_server(fathom)) as client:
            r = await client.call_tool("search_code", {"query": "hash a password", "project": "shop"})
            assert r.is_error and "project 'shop' is damaged" in r.content[0].text
            r = await client.call_tool("search_code", {"query": "bounded work queue", "k": 3})
            assert not r.is_error and r.structured_content["results"][0]["project"] == "other"
            assert any("'shop'" in n for n in r.structured_content["notes"])
            listed = (await client.call_tool("list_projects", {})).structured_content["projects"]
            assert {p["name"]: bool(p["damaged"]) for p in listed} == {"shop": True, "other": False}

    asyncio.run(over_mcp())
    assert admin_audit_status(data, "shop") == 409

    # The repair rebuilds the pointer from the tables on disk; the next run embeds nothing.
    result = cli(fresh(), "store", "verify", "shop", "--repair")
    assert result.exit_code == 0, result.output
    assert "rebuilt state.json" in result.output
    result = cli(fresh(), "index", str(shop), "--project", "shop")
    assert result.exit_code == 0 and re.search(r"embedded\s+0 in", result.output), result.output
    result = cli(fresh(), "search", "hash a password", "--project", "shop", "-k", "2")
    assert "auth/password.py" in result.output


def test_a_deleted_table_folder_hides_only_its_own_project(two_projects):
    data, shop, fresh = two_projects
    shutil.rmtree(active_table(data, "shop", "code"))
    fathom = fresh()
    result = cli(fathom, "projects")
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert "shop (damaged)" in result.output and "was not found" in result.output
    result = cli(fathom, "search", "bounded work queue", "-k", "3")
    assert result.exit_code == 0 and found_in(result.output, "other", "lib/queue.py"), result.output
    assert "skipped project 'shop'" in result.output
    line = one_line_error(cli(fathom, "search", "hash", "--project", "shop").output)
    assert "project 'shop' is damaged" in line

    assert admin_audit_status(data, "shop") == 409

    result = cli(fresh(), "store", "verify")
    assert result.exit_code == 1 and "unreadable" in result.output
    result = cli(fresh(), "store", "verify", "shop", "--repair")
    assert result.exit_code == 0 and "set the unreadable code table aside" in result.output
    result = cli(fresh(), "index", str(shop), "--project", "shop")
    assert result.exit_code == 0, result.output
    assert "auth/password.py" in cli(fresh(), "search", "hash a password", "--project", "shop").output
    assert "no problems found" in cli(fresh(), "store", "verify").output


@pytest.mark.parametrize("damage", ["data", "manifest"])
def test_a_truncated_data_or_manifest_file_is_a_typed_error(two_projects, damage):
    data, shop, fresh = two_projects
    table = active_table(data, "shop", "code")
    files = sorted(
        (table / ("data" if damage == "data" else "_versions")).glob(
            "*.lance" if damage == "data" else "*.manifest"
        ),
        key=os.path.getsize,
    )
    for f in files:
        raw = f.read_bytes()
        f.write_bytes(raw[: len(raw) // 2])
    fathom = fresh()
    line = one_line_error(cli(fathom, "search", "hash a password", "--project", "shop").output)
    assert "project 'shop' is damaged" in line and "--repair" in line
    result = cli(fathom, "search", "bounded work queue", "-k", "2")
    assert result.exit_code == 0 and found_in(result.output, "other", "lib/queue.py"), result.output
    result = cli(fresh(), "store", "verify", "shop")
    assert result.exit_code == 1 and "unreadable" in result.output, result.output
    assert cli(fresh(), "store", "verify", "shop", "--repair").exit_code == 0
    assert cli(fresh(), "index", str(shop), "--project", "shop").exit_code == 0
    assert "no problems found" in cli(fresh(), "store", "verify", "shop").output


# ---------------------------------------------------------------- verify and repair


def _corrupt_vector_bytes(table_dir: Path, vectors: list[np.ndarray]) -> int:
    """Overwrite these vectors' bytes inside the table's data files (flipped bytes on disk):
    the first becomes NaNs, the second 37k-scale floats."""
    hit = 0
    garbage = [b"\x00\x00\xc0\x7f" * 16, b"\xff\x7f\x13\x47" * 16]
    for f in (table_dir / "data").glob("*.lance"):
        raw = bytearray(f.read_bytes())
        for vec, junk in zip(vectors, garbage):
            needle = np.asarray(vec, np.float32).tobytes()
            at = raw.find(needle)
            if at >= 0:
                raw[at : at + 64] = junk
                hit += 1
        f.write_bytes(bytes(raw))
    return hit


def test_verify_finds_and_repair_fixes_flipped_vectors_a_lost_fts_index_and_duplicates(two_projects):
    data, shop, fresh = two_projects
    store = LanceStore(data / "lance")
    rows = next(read_rows(store, "shop", "code"))
    victims = [rows.chunk_ids[0], rows.chunk_ids[1]]
    wanted = {rows.chunk_ids[i]: rows.vectors[i].copy() for i in (0, 1)}
    table_dir = active_table(data, "shop", "code")
    # (older versions of the table may hold copies too: all are overwritten)
    assert _corrupt_vector_bytes(table_dir, [rows.vectors[0], rows.vectors[1]]) >= 2
    # The docs table loses its full-text index; two code rows get stored twice.
    shutil.rmtree(active_table(data, "shop", "docs") / "_indices")
    store.close()
    store = LanceStore(data / "lance")
    tbl = store.slot_table("shop", "code")
    assert tbl.name == table_dir.stem
    dup = tbl.search().where(f"chunk_id = '{rows.chunk_ids[2]}'").limit(None).to_arrow()
    tbl.add(dup)
    store.close()

    # Searching still answers, a NaN row never ranks, and the verify names every problem.
    fathom = fresh()
    result = cli(fathom, "search", "hash a password", "--project", "shop", "-k", "3")
    assert result.exit_code == 0, result.output
    hits = fathom.store.vector_search("shop", "code", wanted[victims[0]], k=50)
    assert hits and victims[0] not in [h.chunk_id for h in hits]
    assert all(np.isfinite(h.score) for h in hits)
    result = cli(fresh(), "store", "verify", "shop")
    assert result.exit_code == 1, result.output
    for kind in ("bad-vectors", "fts-missing", "duplicate-ids"):
        assert kind in result.output, result.output
    assert "error: 3 problem(s) in the store. Run `fathom store verify shop --repair`" in " ".join(
        result.output.split()
    )

    fixer = fresh()
    result = cli(fixer, "store", "verify", "shop", "--repair")
    assert result.exit_code == 0, result.output
    assert "re-embedded 2 rows with local:" in " ".join(result.output.split())
    assert "no problems found" in cli(fresh(), "store", "verify", "shop").output
    # The re-embedded rows are the encoder's vectors again, written under its gate verdict.
    store = LanceStore(data / "lance")
    now = {
        c: v
        for b in read_rows(store, "shop", "code")
        for c, v, vid in zip(b.chunk_ids, b.vectors, b.verdict_ids, strict=True)
        if c in victims and vid
    }
    assert set(now) == set(victims)
    for cid in victims:
        assert np.allclose(now[cid], wanted[cid], atol=1e-4)
    store.close()
    result = cli(fresh(), "search", "sample shop", "--docs", "--project", "shop")
    assert "README.md" in result.output


def _keyword_hits(data: Path, query: str) -> tuple[list[str], list[str]]:
    """The shop code table's FTS indexes by name, and the paths LanceDB's full-text search
    finds for `query` (read from the table itself, never from the in-memory index)."""
    store = LanceStore(data / "lance")
    tbl = store.slot_table("shop", "code")
    names = sorted(i.name for i in tbl.list_indices() if i.index_type == "FTS")
    paths = [r["path"] for r in tbl.search(query, query_type="fts").limit(10).to_list()]
    store.close()
    return names, paths


def _built_by_another_release(data: Path) -> None:
    """The shop code table's keyword index as an earlier Fathom would have left it, built with
    other stop words (here also `password`: LanceDB's own list differs between releases),
    under the name LanceDB gives by default."""
    store = LanceStore(data / "lance")
    tbl = store.slot_table("shop", "code")
    for index in tbl.list_indices():
        if index.index_type == "FTS":
            tbl.drop_index(index.name)
    tbl.create_index("keywords", config=FTS(with_position=False, custom_stop_words=[*STOP_WORDS, "password"]))
    store.close()
    assert _keyword_hits(data, "password") == (["keywords_idx"], [])


def test_a_keyword_index_built_with_other_stop_words_is_rebuilt(two_projects):
    """A keyword index keeps the stop words it was built with (an earlier Fathom's: LanceDB's
    own list, which changed at 0.41), while the in-memory index beside a cached matrix scores
    with the product's. `store verify` names such an index, and `--repair`
    rebuilds it (also when a rebuild cut short left both); so does the next index run that
    writes to the table, without being asked."""
    data, shop, fresh = two_projects
    _built_by_another_release(data)
    result = cli(fresh(), "store", "verify", "shop")
    assert result.exit_code == 1, result.output
    assert "fts-stale" in result.output and "built with this Fathom's stop words" in " ".join(
        result.output.split()
    )
    result = cli(fresh(), "store", "verify", "shop", "--repair")
    assert result.exit_code == 0 and "rebuilt the full-text index" in result.output, result.output
    assert "no problems found" in cli(fresh(), "store", "verify", "shop").output
    names, paths = _keyword_hits(data, "password")
    assert names == [fts_name()] and "auth/password.py" in paths

    # A rebuild cut short leaves the new index beside the old one: still stale, and repaired.
    _built_by_another_release(data)
    store = LanceStore(data / "lance")
    store.slot_table("shop", "code").create_index("keywords", config=fts_config(), name=fts_name())
    store.close()
    assert _keyword_hits(data, "password")[0] == sorted(["keywords_idx", fts_name()])
    assert "fts-stale" in cli(fresh(), "store", "verify", "shop").output
    assert cli(fresh(), "store", "verify", "shop", "--repair").exit_code == 0
    names, paths = _keyword_hits(data, "password")
    assert names == [fts_name()] and "auth/password.py" in paths

    _built_by_another_release(data)
    (shop / "auth" / "tokens.py").write_text(
        'def rotate(token):\n    """A new session token."""\n    return token[::-1]\n'
    )
    result = cli(fresh(), "index", str(shop), "--project", "shop")
    assert result.exit_code == 0, result.output
    names, paths = _keyword_hits(data, "password")
    assert names == [fts_name()] and "auth/password.py" in paths


def test_verify_names_a_row_count_that_disagrees_with_the_manifest(two_projects, monkeypatch):
    """LanceDB itself refuses most files that would make the two disagree (they read as
    unreadable instead), so the manifest's count is made to claim three rows more."""
    data, _, fresh = two_projects
    real = LanceStore.table_info

    def claims_more(self, project, table):
        info = real(self, project, table)
        return (
            info
            if project != "shop" or table != "code"
            else __import__("dataclasses").replace(info, rows=info.rows + 3)
        )

    monkeypatch.setattr(LanceStore, "table_info", claims_more)
    result = cli(fresh(), "store", "verify")
    assert result.exit_code == 1 and "count-mismatch" in result.output, result.output
    assert "manifest counts" in " ".join(result.output.split())


def test_stored_vectors_are_unit_length_whoever_encoded_them(tmp_path):
    """What makes "not unit-length" a sign of damage for `fathom store verify`."""
    from fathom.index.chunk import Chunk
    from fathom.space import Provenance, Space

    store = LanceStore(tmp_path / "lance")
    store.open_table("p", "code", Space("code", "m", 4, "ref"))
    store.write(
        "p",
        "code",
        [Chunk("a.py", "python", "code", 1, 2, None, "x = 1")],
        np.array([[3.0, 4.0, 0.0, 0.0]]),
        Provenance("ref", None),
    )
    vec = next(read_rows(store, "p", "code")).vectors[0]
    assert np.allclose(vec, [0.6, 0.8, 0.0, 0.0])


def test_a_shadow_with_duplicate_ids_is_never_promoted(tmp_path):
    from fathom.index.chunk import Chunk
    from fathom.index.store import DuplicateChunks, Slot
    from fathom.space import Provenance, Space

    store = LanceStore(tmp_path / "lance")
    space = Space("code", "m", 4, "ref")
    chunk = Chunk("a.py", "python", "code", 1, 2, None, "x = 1")
    store.open_table("p", "code", space)
    store.write("p", "code", [chunk], np.ones((1, 4)), Provenance("ref", None))
    store.begin_shadow("p", "code", space)
    store.write("p", "code", [chunk], np.ones((1, 4)), Provenance("ref", None), slot=Slot.SHADOW)
    tbl = store.slot_table("p", "code", Slot.SHADOW)
    tbl.add(tbl.to_arrow())  # a second writer's copy of the same rows
    with pytest.raises(DuplicateChunks) as err:
        store.promote("p", "code")
    assert "2 rows for 1 chunk ids" in str(err.value) and "not promoted" in str(err.value)
    assert store.space_of("p", "code", Slot.SHADOW) is None  # discarded: the next run rebuilds
    assert store.table_info("p", "code").rows == 1


# ---------------------------------------------------------------- PostgreSQL lost mid-run


@pytest.mark.slow
def test_postgres_lost_mid_run_is_one_line_and_the_next_run_completes(
    tmp_path, pg_server, pg_url, local_encoder
):
    import psycopg

    from fathom.inference.provider import Provider

    database = pg_url.rsplit("/", 1)[1]
    root = write_project(tmp_path / "shop")

    def lose() -> None:
        with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )

    class LosesTheDatabase(Provider):
        """The real encoder; the database goes away after its first batch."""

        def __init__(self, inner: Provider):
            self.inner, self.info, self.batches = inner, inner.info, 0

        async def embed(self, texts):
            self.batches += 1
            if self.batches == 2:
                await asyncio.to_thread(lose)
            return await self.inner.embed(texts)

    settings = Settings(data_dir=tmp_path / "data", store_url=pg_url, local_batch_size=4)
    fathom = Fathom(settings, encoder=LosesTheDatabase(local_encoder))
    result = cli(fathom, "index", str(root), "--project", "shop")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (
        result.output,
        "".join(__import__("traceback").format_exception(*result.exc_info)),
    )
    line = one_line_error(result.output)
    assert (
        "PostgreSQL store" in line
        and "run the same command again" in line
        or "cannot connect to the PostgreSQL store" in line
    ), line
    assert settings.store_url.split("@")[0].split(":")[-1] not in line  # no password

    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    again = Fathom(settings, encoder=local_encoder)
    result = cli(again, "index", str(root), "--project", "shop")
    assert result.exit_code == 0, result.output
    assert "auth/password.py" in cli(again, "search", "hash a password", "--project", "shop").output
