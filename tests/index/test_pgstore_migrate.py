"""`fathom store migrate`: LanceDB -> PostgreSQL with provenance preserved, resumable."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from fathom.config import RoutingStore
from fathom.index.migrate import main, migrate, migrate_gate_state
from fathom.index.pgstore import PgRoutingStore, PgVerdictStore, PostgresStore
from fathom.index.store import LanceStore, Slot
from fathom.roles import Role
from fathom.space import Provenance
from tests.index.store_fixtures import (
    CLEARED,
    DOCS_SPACE,
    REFERENCE,
    SPACE,
    AllowList,
    FakeClock,
    clustered,
    make_chunks,
    make_verdict,
)

SIDECAR = Provenance("sidecar:gpu1:test-encoder", "v-7")


class Interrupted(Exception):
    pass


@pytest.fixture
def lance(tmp_path):
    clock = FakeClock()
    store = LanceStore(
        tmp_path / "lance", AllowList({(REFERENCE, None), (SIDECAR.provider_id, "v-7")}), clock=clock
    )
    chunks, vecs = make_chunks(10), clustered(10)
    store.open_table("p", "code", SPACE)
    store.write("p", "code", chunks, vecs, CLEARED)
    clock.now += 86_400
    late, late_vecs = make_chunks(5, prefix="late"), clustered(5, seed=2)
    store.write("p", "code", late, late_vecs, SIDECAR)
    store.open_table("p", "docs", DOCS_SPACE)
    store.write("p", "docs", make_chunks(3, prefix="doc", table="docs"), clustered(3, seed=3), CLEARED)
    store.open_table("other", "code", SPACE)
    store.write("other", "code", make_chunks(2, prefix="o"), clustered(2, seed=4), CLEARED)
    yield store, chunks + late, np.vstack([vecs, late_vecs]), clock
    store.close()


def test_migration_preserves_provenance_and_resumes_after_an_interruption(lance, pg_url):
    source, chunks, vecs, clock = lance
    target = PostgresStore(pg_url)

    calls = []

    def die_after_first_batch(project, table, done, total):
        calls.append((project, table, done, total))
        raise Interrupted

    with pytest.raises(Interrupted):
        migrate(source, target, projects=["p"], batch_size=4, progress=die_after_first_batch)
    assert calls == [("p", "code", 4, 15)]
    info = target.table_info("p", "code")
    assert (info.rows, info.shadow_rows, info.space) == (0, 4, None)  # nothing active yet

    report = migrate(source, target, batch_size=4)
    by_table = {(t.project, t.table): t for t in report.tables}
    assert set(by_table) == {("p", "code"), ("p", "docs"), ("other", "code")}
    assert by_table["p", "code"].resumed and by_table["p", "code"].copied == 11
    assert report.rows == 20

    for project, table in by_table:
        assert target.space_of(project, table) == source.space_of(project, table)
        assert target.provenance_counts(project, table) == source.provenance_counts(project, table)
        assert sorted(target.manifest(project, table), key=lambda e: e.chunk_id) == sorted(
            source.manifest(project, table), key=lambda e: e.chunk_id
        )
        assert (
            target.table_info(project, table).last_indexed == source.table_info(project, table).last_indexed
        )
    assert target.provenance_counts("p", "code") == {(REFERENCE, None): 10, (SIDECAR.provider_id, "v-7"): 5}
    # written_at is the original one, not the migration's.
    cut = datetime.fromtimestamp(clock.now - 3600, tz=UTC)
    assert (
        {e.chunk_id for e in target.written_since("p", "code", cut)}
        == {e.chunk_id for e in source.written_since("p", "code", cut)}
        == {c.chunk_id for c in chunks[10:]}
    )
    ids = [c.chunk_id for c in chunks]
    assert target.chunk_texts("p", "code", ids) == source.chunk_texts("p", "code", ids)
    for i in (0, 7, 12):
        assert [h.chunk_id for h in target.vector_search("p", "code", vecs[i], 5)] == [
            h.chunk_id for h in source.vector_search("p", "code", vecs[i], 5)
        ]
        hit, vec = target.chunk_at("p", "code", chunks[i].path, 2)
        assert hit.provider_id == source.chunk_at("p", "code", chunks[i].path, 2)[0].provider_id
        assert np.array_equal(vec, vecs[i])
    assert target.text_search("p", "code", "late_3", 1)[0].chunk_id == chunks[13].chunk_id

    # Running it again is a clean full copy (a new shadow, promoted), same result.
    again = migrate(source, target, projects=["other"])
    assert again.tables[0].rows == 2 and not again.tables[0].resumed
    assert target.table_info("p", "code").shadow_rows is None
    target.close()


def test_gate_and_routing_state_move_too(tmp_path, pg_url):
    from fathom.inference.gate import JsonVerdictStore, Watched

    data = tmp_path / "data"
    v1, v2 = make_verdict("sidecar:gpu1", SPACE), make_verdict("sidecar:gpu2", SPACE, decided_at=2e9)
    json_verdicts = JsonVerdictStore(data / "gate" / "verdicts.json")
    json_verdicts.put(v1)
    json_verdicts.put(v2)
    json_verdicts.watch(Watched(SPACE, "sidecar:gpu1", 1.5e9))
    RoutingStore(data).update({Role.EMBEDDING: {"policy": "local"}})
    target = PostgresStore(pg_url)
    report = migrate_gate_state(data, target)
    assert (report.verdicts, report.routing) == (2, True)
    assert [v.verdict_id for v in PgVerdictStore(target).all()] == [v1.verdict_id, v2.verdict_id]
    assert PgRoutingStore(target).load() == RoutingStore(data).load()
    assert PgVerdictStore(target).watched() == [Watched(SPACE, "sidecar:gpu1", 1.5e9)]
    assert migrate_gate_state(data, target).verdicts == 2  # idempotent
    assert len(PgVerdictStore(target).all()) == 2
    target.close()


def test_cli_entry_point(lance, pg_server, pg_url, capsys):
    source, *_ = lance
    assert main([str(source.root), pg_url, "--project", "other"]) == 0
    out = capsys.readouterr()
    assert "other/code: 2 rows" in out.out
    assert pg_server.password not in out.out + out.err
    assert "fathom:***@127.0.0.1" in out.out
    assert main([str(source.root), pg_url, "--project", "nope"]) == 1
    err = capsys.readouterr().err
    assert "no project 'nope'" in err and pg_server.password not in err
    assert PostgresStore(pg_url).table_info("other", "code").rows == 2
    assert PostgresStore(pg_url).provenance_counts("other", "code", Slot.ACTIVE) == {(REFERENCE, None): 2}
