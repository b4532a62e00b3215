"""What only the PostgreSQL store does: halfvec ANN with exact re-scoring, several servers on
one database, advisory index locks, a promotion killed inside its transaction, shared gate and
routing state, and passwords that never show. All against a real server (tests.index.pg_fixtures).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
import pytest

from fathom.config import BatchRecord, RoutingState
from fathom.errors import ConfigError, NotCleared, StoreError
from fathom.index.backend import open_store_url
from fathom.index.pgstore import (
    PgGoldenStore,
    PgRoutingStore,
    PgVerdictStore,
    PostgresStore,
    ProjectLocked,
    StoreUnavailable,
    redact_url,
)
from fathom.index.store import Slot
from fathom.roles import Role
from fathom.space import Provenance, Space
from tests.index.store_fixtures import CLEARED, SPACE, WIDTH, clustered, make_chunks, make_verdict

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pg(pg_url) -> PostgresStore:
    store = PostgresStore(pg_url)
    yield store
    store.close()


def plain(plan: str) -> str:
    return re.sub(r"'\[[^\]]*\]'", "'[…]'", plan)


# ---------------------------------------------------------------- wide tables


def test_2560d_table_is_searched_through_a_halfvec_index_and_rescored_exactly(pg_url):
    store = PostgresStore(pg_url, ann_min_rows=100)  # as a production-size table is
    width, n = 2560, 400
    space = Space("code", "big-encoder", width, "local:big-encoder")
    chunks = make_chunks(n, prefix="wide")
    vecs = clustered(n, width=width, clusters=16, seed=4, spread=0.3)
    store.begin_shadow("p", "code", space)
    store.write("p", "code", chunks, vecs, Provenance("local:big-encoder", None), slot=Slot.SHADOW)
    store.promote("p", "code")
    (name,) = [
        r[0]
        for r in store.db.conn().execute("SELECT active FROM fathom.slots WHERE project = 'p'").fetchall()
    ]

    indexdef = (
        store.db.conn()
        .execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (f"{name}_ann",))
        .fetchone()[0]
    )
    assert "hnsw" in indexdef and f"halfvec({width})" in indexdef
    assert "halfvec_cosine_ops" in indexdef
    plan = plain(store.explain_vector_search("p", "code", vecs[0], 10))
    assert f"Index Scan using {name}_ann" in plan, plan

    rng = np.random.default_rng(1)
    for qi in rng.choice(n, 8, replace=False):
        q = vecs[qi] + 0.03 * rng.standard_normal(width).astype(np.float32)
        q /= np.linalg.norm(q)
        hits = store.vector_search("p", "code", q, 10)
        exact = np.argsort(-(vecs.astype(np.float64) @ q))[:10]
        assert [h.chunk_id for h in hits] == [chunks[i].chunk_id for i in exact]
        # Full-precision scores (half precision would be off by ~1e-4).
        want = vecs.astype(np.float64)[exact] @ q
        assert np.allclose([h.score for h in hits], want, atol=2e-6)
    store.close()


def test_384d_table_uses_a_plain_hnsw_index(pg_url):
    store = PostgresStore(pg_url, ann_min_rows=100)
    space = Space("code", "m", 384, "local:m")
    vecs = clustered(300, width=384, seed=2)
    store.begin_shadow("p", "code", space)
    store.write("p", "code", make_chunks(300), vecs, Provenance("local:m", None), slot=Slot.SHADOW)
    store.promote("p", "code")
    plan = plain(store.explain_vector_search("p", "code", vecs[0], 10))
    assert re.search(r"Index Scan using v\d+_ann", plan) and "halfvec" not in plan, plan
    # Small tables are answered by an exact scan (fast, and exact).
    exact_store = PostgresStore(pg_url)
    assert "Seq Scan" in exact_store.explain_vector_search("p", "code", vecs[0], 10)
    store.close()
    exact_store.close()


def test_pgvector_itself_refuses_another_width(pg):
    """Even a caller that bypassed `Store.write` cannot put a wrong-width row in the table."""
    pg.open_table("p", "code", SPACE)
    wrong = np.ones((1, WIDTH + 3), np.float32)
    from psycopg import sql

    conn = pg.db.conn()
    schema = sql.Identifier(pg.db.schema)
    slots = sql.SQL("SELECT active FROM {}.slots WHERE project = 'p' AND kind = 'code'").format(schema)
    name = conn.execute(slots).fetchone()[0]
    insert = sql.SQL(
        "INSERT INTO {}.{} (chunk_id, content_hash, path, language, start_line, end_line, text,"
        " vector, provider_id, written_at) VALUES ('c', 'h', 'a.py', 'python', 1, 2, 'x', %s, 'ref', now())"
    ).format(schema, sql.Identifier(name))
    with pytest.raises(psycopg.errors.DataException, match="dimensions"):
        conn.execute(insert, (str(wrong[0].tolist()),))
    assert pg.table_info("p", "code").rows == 0


def test_text_search_splits_code_identifiers(pg):
    pg.open_table("p", "code", SPACE)
    chunks = make_chunks(3)
    from fathom.index.chunk import Chunk

    special = Chunk(
        "src/userRepo.ts",
        "typescript",
        "code",
        3,
        9,
        "UserRepo.getUserName",
        "getUserName(id) { return this.cache.lookup_name(id) }\x00",
    )
    pg.write("p", "code", [*chunks, special], clustered(4), CLEARED)
    for q in ["getUserName", "user name", "lookup", "cache.lookup_name", "userRepo"]:
        assert pg.text_search("p", "code", q, 1)[0].chunk_id == special.chunk_id, q


# ---------------------------------------------------------------- a promotion killed mid-way


_PROMOTER = """
import sys
from fathom.index.pgstore import PostgresStore
store = PostgresStore(sys.argv[1], application_name="fathom-promoter")
print("promoting", flush=True)
store.promote("p", "code")
print("promoted", flush=True)
"""


@pytest.mark.slow
def test_promotion_killed_inside_its_transaction_changes_nothing(pg, pg_url):
    """The promoter is SIGKILLed after it switched the pointer inside its transaction (it is
    blocked on dropping the old table): the database rolls the whole switch back."""
    old = make_chunks(20)
    pg.open_table("p", "code", SPACE)
    pg.write("p", "code", old, clustered(20), CLEARED)
    pg.begin_shadow("p", "code", SPACE)
    new_vecs = clustered(30, seed=1)
    pg.write("p", "code", make_chunks(30, prefix="fresh"), new_vecs, CLEARED, slot=Slot.SHADOW)
    active = pg.db.conn().execute("SELECT active FROM fathom.slots").fetchone()[0]

    blocker = psycopg.connect(pg_url)  # a reader in a long transaction on the old table
    blocker.execute(f"SELECT count(*) FROM fathom.{active}").fetchone()
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROMOTER, pg_url],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        watch = pg.db.connect()
        for _ in range(600):  # until the promoter waits for the lock, inside its transaction
            row = watch.execute(
                "SELECT wait_event_type, query FROM pg_stat_activity "
                "WHERE application_name = 'fathom-promoter' AND state = 'active'"
            ).fetchone()
            if row and row[0] == "Lock" and "DROP TABLE" in row[1]:
                break
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.1)
        else:
            pytest.fail("the promoter never reached the drop of the old table")
        # Inside that transaction the pointer already names the shadow; nobody else sees it.
        assert watch.execute("SELECT active FROM fathom.slots").fetchone()[0] == active
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        watch.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        blocker.close()

    info = pg.table_info("p", "code")
    assert (info.rows, info.shadow_rows, info.space) == (20, 30, SPACE)
    assert {e.chunk_id for e in pg.manifest("p", "code")} == {c.chunk_id for c in old}
    assert pg.text_search("p", "code", "fresh", 3) == []
    # The job resumes: the shadow is still there, and a promotion now completes.
    assert pg.begin_shadow("p", "code", SPACE).resumed
    assert pg.promote("p", "code").rows == 30
    assert pg.text_search("p", "code", "fresh_3", 1)[0].symbol == "fresh_3"


# ---------------------------------------------------------------- several servers


_SERVER = r"""
import json, sys, traceback
import numpy as np
from fathom.index.pgstore import PostgresStore, ProjectLocked
from fathom.index.search import hybrid_search
from tests.index.store_fixtures import SPACE, CLEARED, make_chunks, clustered

store = PostgresStore(sys.argv[1])
held = {}
for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd["op"]
    try:
        if op == "lock":
            cm = store.project_lock(cmd["project"], holder=cmd["holder"])
            held[cmd["project"]] = (cm, cm.__enter__())
            out = {"ok": True}
        elif op == "unlock":
            cm, _ = held.pop(cmd["project"])
            cm.__exit__(None, None, None)
            out = {"ok": True}
        elif op == "index":
            chunks = make_chunks(cmd["n"], prefix=cmd["prefix"])
            store.open_table(cmd["project"], "code", SPACE)
            for i in range(0, len(chunks), 25):
                store.write(cmd["project"], "code", chunks[i:i + 25],
                            clustered(cmd["n"], seed=cmd["seed"])[i:i + 25], CLEARED)
            out = {"ok": True, "rows": store.table_info(cmd["project"], "code").rows}
        elif op == "search":
            q = clustered(1, seed=cmd["seed"])[0]
            hits = hybrid_search(store, cmd["project"], "code", q, cmd["query"], k=8)
            out = {"ok": True, "hits": [[h.chunk_id, h.path, h.start_line, round(h.score, 9)]
                                        for h in hits]}
        else:
            out = {"ok": False, "error": "unknown op"}
    except ProjectLocked as exc:
        h = exc.holder
        out = {"ok": False, "type": "ProjectLocked", "message": str(exc),
               "holder": h.holder, "host": h.host, "pid": h.pid}
    except Exception as exc:
        out = {"ok": False, "type": type(exc).__name__, "message": traceback.format_exc()}
    print(json.dumps(out), flush=True)
"""


class Server:
    """A Fathom server process holding its own PostgresStore on the shared database."""

    def __init__(self, url: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, url],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def __call__(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()[-3000:]
        return json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)


@pytest.mark.slow
def test_two_servers_one_database(pg_url):
    a, b = Server(pg_url), Server(pg_url)
    try:
        assert a(op="lock", project="shared", holder="server-a")["ok"]
        refused = b(op="lock", project="shared", holder="server-b")
        assert refused["type"] == "ProjectLocked"
        assert (refused["holder"], refused["pid"]) == ("server-a", a.proc.pid)
        assert "server-a" in refused["message"] and f"pid {a.proc.pid}" in refused["message"]
        assert "wait for that job to finish" in refused["message"]
        # Another project is not blocked by it.
        assert b(op="lock", project="other", holder="server-b")["ok"]
        assert b(op="unlock", project="other")["ok"]

        assert a(op="index", project="shared", n=60, prefix="f", seed=1)["rows"] == 60
        assert a(op="unlock", project="shared")["ok"]
        # Now the second server may index: an idempotent upsert plus new rows.
        assert b(op="lock", project="shared", holder="server-b")["ok"]
        assert b(op="index", project="shared", n=70, prefix="f", seed=1)["rows"] == 70
        assert b(op="unlock", project="shared")["ok"]

        for seed, query in [(1, "compute value 7"), (3, "widget"), (5, "f_64")]:
            ra = a(op="search", project="shared", seed=seed, query=query)
            rb = b(op="search", project="shared", seed=seed, query=query)
            assert ra["ok"] and ra["hits"] and ra["hits"] == rb["hits"]

        # A server that dies holding the lock does not block the project: PostgreSQL drops
        # the lock with the dead server's connection.
        assert a(op="lock", project="shared", holder="server-a")["ok"]
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=60)
        for _ in range(100):
            got = b(op="lock", project="shared", holder="server-b")
            if got["ok"]:
                break
            time.sleep(0.1)  # the server notices the closed socket
        assert got["ok"], got
    finally:
        a.stop()
        b.stop()


def test_project_lock_in_process(pg, pg_url):
    other = PostgresStore(pg_url)
    with pg.project_lock("p", holder="indexer-1") as held:
        assert held.holder == "indexer-1"
        assert other.lock_holder("p").holder == "indexer-1"
        with pytest.raises(ProjectLocked) as err:
            with other.project_lock("p", holder="indexer-2"):
                pass
        assert err.value.holder.holder == "indexer-1" and err.value.project == "p"
        with pytest.raises(ProjectLocked):  # a second job in the same server, too
            with pg.project_lock("p", holder="indexer-1b"):
                pass
    assert other.lock_holder("p") is None
    with other.project_lock("p", holder="indexer-2"):
        pass
    other.close()


# ---------------------------------------------------------------- gate + routing state


def test_verdicts_are_shared_by_every_server(pg_url):
    from fathom.inference.gate import Gate, GateClearance

    server_a, server_b = PostgresStore(pg_url), PostgresStore(pg_url)
    verdicts_a, verdicts_b = PgVerdictStore(server_a), PgVerdictStore(server_b)
    v1 = make_verdict("sidecar:gpu1", SPACE)
    v2 = make_verdict("sidecar:gpu2", SPACE, decided_at=1_800_000_100.0)
    verdicts_a.put(v1)
    verdicts_a.put(v2)
    assert [v.verdict_id for v in verdicts_b.all()] == [v1.verdict_id, v2.verdict_id]
    assert verdicts_b.get(v1.verdict_id) == v1
    assert verdicts_b.get("v-nope") is None

    # Server B's store admits rows under a verdict that server A decided...
    gate_b = Gate(verdicts=verdicts_b, golden=PgGoldenStore(server_b))
    store_b = PostgresStore(pg_url, GateClearance(gate_b))
    store_b.open_table("p", "code", SPACE)
    prov = Provenance("sidecar:gpu1", v1.verdict_id)
    assert store_b.write("p", "code", make_chunks(2), clustered(2), prov) == 2
    # ...and refuses them the moment server A quarantines it (replaced in place, order kept).
    verdicts_a.put(v1.revoked(1_800_000_200.0, "drifted on re-probe"))
    assert [v.verdict_id for v in verdicts_b.all()] == [v1.verdict_id, v2.verdict_id]
    with pytest.raises(NotCleared, match="quarantined"):
        store_b.write("p", "code", make_chunks(2, prefix="g"), clustered(2), prov)
    for s in (server_a, server_b, store_b):
        s.close()


def test_golden_vectors_round_trip(pg):
    from fathom.inference.gate import Golden

    golden = PgGoldenStore(pg)
    vec = clustered(4, width=WIDTH)
    g = Golden(
        space=SPACE.key,
        probe_set="ps1",
        probe_ids=("a", "b", "c", "d"),
        reference="local:test-encoder",
        recorded_at=1.5,
        vectors=vec,
    )
    assert golden.get(SPACE.key) is None
    golden.put(g)
    got = golden.get(SPACE.key, "ps1")
    assert got.probe_ids == g.probe_ids and np.array_equal(got.vectors, vec)
    assert golden.get(SPACE.key, "another-probe-set") is None


def test_routing_state_is_shared_and_validated(pg_url):
    a, b = PgRoutingStore(pg_url), PgRoutingStore(pg_url)
    assert a.load() == RoutingState()
    a.update({Role.EMBEDDING: {"policy": "local"}})
    assert b.load().roles[Role.EMBEDDING].policy.value == "local"
    with pytest.raises(ConfigError) as err:  # a cloud route without a pin: refused, unchanged
        b.update({Role.EMBEDDING: {"policy": "aggregate"}})
    assert "upstream" in str(err.value)
    assert a.load().roles[Role.EMBEDDING].policy.value == "local"
    b.update({Role.EMBEDDING: {"policy": "aggregate", "upstream": "deepinfra"}})
    assert a.load().roles[Role.EMBEDDING].upstream == "deepinfra"
    # The pools' batch history lives in the same row: written by one server, read by another,
    # without touching the routes.
    a.record_batches("code", {"local:minilm": BatchRecord(batch_size=96, spi=0.01, base=0.02)})
    seen = b.load()
    assert seen.batches["code"]["local:minilm"].batch_size == 96
    assert seen.roles[Role.EMBEDDING].upstream == "deepinfra"


# ---------------------------------------------------------------- secrets


def test_redact_url():
    assert (
        redact_url("postgresql://fathom:s3cr3t@db.example:5432/fathom")
        == "postgresql://fathom:***@db.example:5432/fathom"
    )
    assert redact_url("postgresql://fathom@db/x") == "postgresql://fathom@db/x"
    assert "s3cr3t" not in redact_url("postgresql://u@h/d?password=s3cr3t&sslmode=require")
    assert "sslmode=require" in redact_url("postgresql://u@h/d?password=s3cr3t&sslmode=require")
    assert redact_url("host=h user=u password=s3cr3t dbname=d") == "host=h user=u password=*** dbname=d"
    assert redact_url("postgresql://u:p%40ss@h/d") == "postgresql://u:***@h/d"


def test_the_password_never_shows(pg_server, pg_url, caplog):
    password = pg_server.password
    caplog.set_level(logging.DEBUG)
    store = open_store_url(pg_url)
    texts = [
        repr(store),
        str(store),
        store.url,
        repr(store.db),
        repr(PgVerdictStore(store)),
        repr(PgRoutingStore(store)),
    ]
    store.open_table("p", "code", SPACE)
    store.write("p", "code", make_chunks(3), clustered(3), CLEARED)
    with store.project_lock("p", holder="me"):
        with pytest.raises(ProjectLocked) as locked:
            with PostgresStore(pg_url).project_lock("p"):
                pass
    texts.append(str(locked.value))
    texts += [str(p) for p in store.list_projects()]

    wrong = pg_url.replace(password, password[::-1])
    with pytest.raises(StoreUnavailable) as bad_login:
        PostgresStore(wrong)
    assert "password authentication failed" in str(bad_login.value)
    with pytest.raises(StoreUnavailable) as no_db:
        PostgresStore(pg_url.rsplit("/", 1)[0] + "/no_such_database")
    with pytest.raises(StoreUnavailable) as no_server:
        PostgresStore(f"postgresql://fathom:{password}@127.0.0.1:1/x", connect_timeout=2)
    for err in (bad_login.value, no_db.value, no_server.value):
        texts += [str(err), repr(err), repr(err.args), str(err.__cause__ or "")]
        assert err.__cause__ is None and err.__context__ is None or password not in str(err.__context__)
    texts += [r.getMessage() for r in caplog.records]
    blob = "\n".join(texts)
    assert password not in blob and password[::-1] not in blob
    assert "fathom:***@127.0.0.1" in blob
    store.close()


def test_not_a_postgres_url_is_refused():
    with pytest.raises(ConfigError):
        PostgresStore("mysql://u:pw@h/d")


def test_copy_rows_validates_like_a_write(pg):
    pg.begin_shadow("p", "code", SPACE)
    from fathom.index.pgstore import RowBatch

    good = RowBatch(
        ["a"],
        ["h"],
        ["x.py"],
        ["python"],
        [1],
        [2],
        [None],
        ["t"],
        clustered(1),
        ["sidecar:1"],
        ["v-1"],
        [datetime(2030, 1, 1, tzinfo=UTC)],
    )
    assert pg.copy_admitted_rows("p", "code", good) == 1
    bad = RowBatch(
        ["b"],
        ["h"],
        ["x.py"],
        ["python"],
        [1],
        [2],
        [None],
        ["t"],
        np.ones((1, WIDTH + 1), np.float32),
        ["sidecar:1"],
        ["v-1"],
        [None],
    )
    with pytest.raises(StoreError):
        pg.copy_admitted_rows("p", "code", bad)
    assert pg.provenance_counts("p", "code", Slot.SHADOW) == {("sidecar:1", "v-1"): 1}
    (exported,) = pg.export_rows("p", "code", Slot.SHADOW)
    assert exported.written_at == [datetime(2030, 1, 1, tzinfo=UTC)]
    assert exported.verdict_ids == ["v-1"] and np.allclose(exported.vectors, good.vectors)
