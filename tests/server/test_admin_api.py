"""The admin API over a real socket: every endpoint, its refusals, and auth everywhere but health."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute

from fathom.inference.provider import Kind
from fathom.roles import Role
from fathom.server.guard import WrongTokenDelay
from tests.fake_clock import FakeClock
from tests.fleet.fleet_fixtures import ADMIN, Fleet, HashEmbedder, serve_in_loop, wait_for
from tests.server.admin_fixtures import METRICS, FakeEncoder, Operator, build_operator_app, make_project

REFERENCE = "hash:test/hash-embedder"  # the service's encoder: both tables' reference
CE = Role.CODE_EMBEDDING
OPEN = {
    "/health",
    "/healthz",
    "/",
    "/dashboard/app.js",
    "/dashboard/style.css",
    "/dashboard/favicon.svg",
    "/favicon.ico",
}


def _routes() -> list[tuple[str, str]]:
    """Every HTTP route of the app: the ones on `app.routes` directly, and those of the included
    routers (which this FastAPI keeps behind an include wrapper) as the schema lists them."""
    with tempfile.TemporaryDirectory() as d:
        app = build_operator_app(Path(d))
        out = {(m, r.path) for r in app.routes if isinstance(r, APIRoute) for m in r.methods - {"HEAD"}}
        for path, ops in app.openapi()["paths"].items():
            out |= {(m.upper(), path) for m in ops}
        return sorted(out)


ROUTES = _routes()
# A forge's push webhook carries no bearer token: the project's own signature guards it.
SIGNED = {"/hooks/git/{project}"}
GUARDED = [r for r in ROUTES if r[1] not in OPEN | SIGNED]


def _fill(path: str) -> str:
    return (
        path.replace("{name}", "gpu-x")
        .replace("{project}", "demo")
        .replace("{job_id}", "abc")
        .replace("{action}", "pause")
    )


# ---------------------------------------------------------------------------- auth


def test_the_route_list_covers_the_whole_operator_surface():
    paths = {p for _, p in GUARDED}
    for wanted in (
        "/admin/policies",
        "/admin/key",
        "/admin/fleet",
        "/admin/fleet/{name}/approve",
        "/admin/fleet/{name}/revoke",
        "/admin/gate/verdicts",
        "/admin/gate/verify",
        "/admin/gate/audit/{project}",
        "/admin/budget",
        "/admin/jobs",
        "/admin/jobs/{job_id}",
        "/admin/jobs/{job_id}/{action}",
        "/admin/overview",
        "/metrics",
        "/openapi.json",
    ):
        assert wanted in paths


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory: pytest.TempPathFactory):
    """One app for the auth checks (no lifespan needed to refuse a request). Its wrong-token
    delay runs on a virtual clock: every route here is asked with wrong tokens from one peer,
    and the real delay (its own test in test_server_hostile_clients) would sleep its cap each time."""
    return build_operator_app(
        tmp_path_factory.mktemp("auth") / "data", wrong_tokens=WrongTokenDelay(clock=FakeClock())
    )


def _asgi(app, headers: dict[str, str]) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", headers=headers
    )


@pytest.mark.parametrize(("method", "path"), GUARDED, ids=[f"{m} {p}" for m, p in GUARDED])
async def test_auth_is_required(shared_app, method: str, path: str):
    url = _fill(path)
    for headers in ({}, {"Authorization": "Bearer fa_wrong"}, {"Authorization": ADMIN}):
        async with _asgi(shared_app, headers) as anon:
            r = await anon.request(method, url, json={})
        assert r.status_code == 401, (method, path, headers, r.text)
        assert r.headers.get("www-authenticate") == "Bearer"
    # The scrape-only token opens /metrics and nothing else.
    async with _asgi(shared_app, {"Authorization": f"Bearer {METRICS}"}) as scraper:
        r = await scraper.request(method, url, json={})
    assert (r.status_code == 200) == (path == "/metrics"), (method, path, r.status_code)


@pytest.mark.parametrize("path", sorted(SIGNED))
async def test_a_webhook_without_the_project_signature_is_refused_whatever_the_token(shared_app, path):
    for headers in ({}, {"Authorization": ADMIN}, {"X-Hub-Signature-256": "sha256=" + "0" * 64}):
        async with _asgi(shared_app, headers) as anon:
            r = await anon.post(_fill(path), json={"ref": "refs/heads/main"})
        assert r.status_code == 401, (headers, r.text)
        assert "signature" in r.json()["detail"]["message"]


@pytest.mark.parametrize("path", sorted(OPEN))
async def test_health_and_the_dashboard_page_need_no_token(shared_app, path: str):
    async with _asgi(shared_app, {}) as anon:
        r = await anon.get(path)
    assert r.status_code == 200
    if path in ("/health", "/healthz"):
        assert r.json() == {
            "ok": True,
            "version": r.json()["version"],
            "sidecars": 0,
            "encoder": "not started",
        }  # no lifespan here: nothing warms it


async def test_the_openapi_schema_is_served_to_the_admin(operator: Operator):
    async with operator.client() as admin:
        doc = (await admin.get("/openapi.json")).json()
    assert doc["components"]["securitySchemes"]["admin"]["scheme"] == "bearer"
    assert doc["paths"]["/health"]["get"]["security"] == []
    assert "put" in doc["paths"]["/admin/policies"] and "/admin/jobs/{job_id}/{action}" in doc["paths"]


# ---------------------------------------------------------------------------- policies


async def test_policies_show_each_role_with_its_serving_providers(operator: Operator):
    twin = FakeEncoder("fake:twin")
    operator.app.state.registry.add(twin)
    async with operator.client() as admin:
        roles = (await admin.get("/admin/policies")).json()["roles"]
        # The in-process reference, not yet judged by the gate, is what the first index clears
        # against itself and writes with: it shows as serving, and no role is a problem.
        assert REFERENCE in roles[CE]["serving"]
        assert "first index" in {p["id"]: p for p in roles[CE]["providers"]}[REFERENCE]["reason"]
        # No key was pushed: no cloud route exists to pin, so no pin notice.
        assert not any("no upstream is pinned" in w for w in roles[CE]["warnings"])
        # Optional roles nobody set up are not configured (neutral), not unserved.
        assert roles["reranker"]["configured"] is False and roles["reranker"]["unavailable"] == []
        await operator.app.state.service.gate.verify(
            operator.app.state.service.space("code"), operator.app.state.service.encoder, "aggregate"
        )
        roles = (await admin.get("/admin/policies")).json()["roles"]
        assert set(roles) == {r.value for r in Role}
        ce = roles[CE]
        assert ce["policy"] == "aggregate" and ce["table"] == "code" and ce["stateful"]
        by_id = {p["id"]: p for p in ce["providers"]}
        assert by_id[REFERENCE]["serving"] and REFERENCE in ce["serving"]
        # Registered but not cleared by the gate: listed, not serving.
        assert by_id["fake:twin"]["cleared"] is False and not by_id["fake:twin"]["serving"]
        assert roles["rlm"]["fallback"] == "local-only" and roles["rlm"]["serving"] == []
        assert roles["rlm"]["configured"] is False
        r = await admin.post("/admin/gate/verify", json={"provider": "fake:twin", "table": "code"})
        assert r.status_code == 200 and r.json()["verdicts"][0]["cleared"]
        ce = (await admin.get("/admin/policies")).json()["roles"][CE]
    assert "fake:twin" in ce["serving"]


async def test_a_policy_change_is_stored_and_pushed_to_the_sidecars(operator: Operator):
    fleet = Fleet(operator.url, operator.app.state.hub, operator.app.state.registry, operator.data_dir)
    operator.app.state.hub.auth.approve("gpu-a")
    sidecar, _ = await fleet.start_sidecar("gpu-a", {CE: HashEmbedder()})
    try:
        async with operator.client() as admin:
            r = await admin.put(
                "/admin/policies",
                json={"rlm": {"policy": "local"}, "reranker": {"model": "acme/rerank-2", "policy": "backup"}},
            )
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["push"]["acked"] == ["gpu-a"] and body["push"]["key_sent"] is False
            assert body["applied"]["rlm"]["policy"] == "local"
            assert body["applied"]["reranker"]["model"] == "acme/rerank-2"
            again = (await admin.get("/admin/policies")).json()["roles"]
        stored = json.loads((operator.data_dir / "routing.json").read_text())
        assert (
            stored["roles"]["rlm"]["policy"] == "local" and stored["roles"]["reranker"]["policy"] == "backup"
        )
        assert again["reranker"]["model"] == "acme/rerank-2"
        await wait_for(
            lambda: (
                sidecar.config.get(Role.RERANKER) is not None
                and sidecar.config[Role.RERANKER].model == "acme/rerank-2"
            ),
            what="the sidecar's copy",
        )
    finally:
        await fleet.close()


async def test_a_refused_policy_change_lists_every_problem_and_writes_nothing(operator: Operator):
    routing = operator.data_dir / "routing.json"
    async with operator.client() as admin:
        r = await admin.put(
            "/admin/policies",
            json={
                "nope": {"policy": "local"},
                "rlm": {"policy": "everywhere"},
                CE: {"policy": "cloud"},  # cloud-capable embedding route without a pin
                "reranker": {"width": 512, "colour": "blue"},
                "embedding": {"fallback": "sometimes", "upstream": "has space"},
            },
        )
        assert r.status_code == 400
        detail = r.json()["detail"]
        problems = detail["problems"]
        assert not routing.exists()  # nothing was written, not even a default file
        assert "nothing was written" in detail["message"]
        text = "\n".join(problems)
        for expected in (
            "unknown role 'nope'",
            "rlm: unknown policy 'everywhere'",
            "code-embedding: policy cloud",
            "upstream",
            "reranker: a reranker route writes no table",
            "reranker: unknown field 'colour'",
            "embedding: unknown fallback 'sometimes'",
            "embedding: upstream must be a name",
            # the sound rest of the embedding route still lacks a pin: said at once
            "embedding: policy aggregate can send embeddings to OpenRouter but no upstream",
        ):
            assert expected in text, expected
        assert len(problems) == 8

        # A valid change writes the file; a later refusal leaves it byte for byte.
        assert (await admin.put("/admin/policies", json={"rlm": {"policy": "local"}})).status_code == 200
        before = routing.read_bytes()
        r = await admin.put("/admin/policies", json={"rlm": {"policy": "cloud"}, CE: {"policy": "backup"}})
        assert r.status_code == 400 and "code-embedding: policy backup" in r.text
        assert routing.read_bytes() == before  # rlm's valid half was not written either
        for bad in (b"not json", b"[1, 2]", b"{}", b'{"rlm": {}}', b'{"rlm": "local"}', b"null"):
            r = await admin.put("/admin/policies", content=bad, headers={"Content-Type": "application/json"})
            assert r.status_code == 400 and r.json()["detail"]["problems"], bad
        assert routing.read_bytes() == before


async def test_a_pin_makes_a_cloud_embedding_route_acceptable(operator: Operator):
    async with operator.client() as admin:
        r = await admin.put(
            "/admin/policies",
            json={
                CE: {
                    "policy": "cloud",
                    "upstream": "alpha",
                    "model": "sentence-transformers/all-minilm-l6-v2",
                }
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["applied"][CE]["upstream"] == "alpha"
        r = await admin.put("/admin/policies", json={CE: {"upstream": None}})  # removing the pin: refused
        assert r.status_code == 400 and "no upstream is pinned" in r.text


async def test_a_width_must_match_the_table(operator: Operator):
    project = make_project(operator.tmp / "demo")
    async with operator.client() as admin:
        # No table yet: the reference encoder (8-d here) defines the width.
        r = await admin.put("/admin/policies", json={"embedding": {"policy": "local", "width": 384}})
        assert r.status_code == 400 and "reference encoder (8-d)" in r.text
        job = (await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})).json()
        assert (await operator.wait_job(admin, job["id"]))["state"] == "done"
        r = await admin.put("/admin/policies", json={CE: {"policy": "local", "width": 16}})
        assert r.status_code == 400
        assert "width 16 does not match the code table's width 8 (project demo)" in r.text
        r = await admin.put("/admin/policies", json={CE: {"policy": "local", "width": 8}})
        assert r.status_code == 200 and r.json()["applied"][CE]["width"] == 8


# ---------------------------------------------------------------------------- key and fleet


async def test_a_key_push_never_echoes_the_key(operator: Operator):
    canary = "sk-or-v1-" + "c0ffee" * 10
    async with operator.client() as admin:
        r = await admin.post("/admin/key", json={"key": canary})
        assert r.status_code == 200 and canary not in r.text
        assert r.json()["acked"] == [] and r.json()["key_sent"] is True
        r = await admin.post("/admin/key", json={"key": canary, "surprise": 1})
        assert r.status_code == 400 and canary not in r.text
        for path in ("/admin/overview", "/admin/fleet", "/metrics"):
            assert canary not in (await admin.get(path)).text


async def test_fleet_list_approve_revoke_and_tokens(operator: Operator):
    fleet = Fleet(operator.url, operator.app.state.hub, operator.app.state.registry, operator.data_dir)
    try:
        await fleet.start_sidecar("gpu-p", {CE: HashEmbedder()})
        async with operator.client() as admin:
            listed = (await admin.get("/admin/fleet")).json()
            assert [s["state"] for s in listed["sidecars"]] == ["pending"]
            assert "sidecar gpu-p is waiting for approval" in listed["problems"]
            assert (await admin.post("/admin/fleet/gpu-p/approve")).json()["state"] == "approved"
            await wait_for(
                lambda: "sidecar:gpu-p:code-embedding:local" in operator.app.state.registry,
                what="its provider",
            )
            assert (await admin.post("/admin/fleet/gpu-p/revoke")).json()["state"] == "revoked"
            assert (await admin.post("/admin/fleet/bad name!/approve")).status_code == 400
            issued = (await admin.post("/admin/fleet/tokens", json={"name": "gpu-h"})).json()
            assert issued["kind"] == "host" and issued["token"]
            r = await admin.post("/admin/fleet/probe", json={"provider": "nobody", "texts": ["x"]})
            assert r.status_code == 404
    finally:
        await fleet.close()


# ---------------------------------------------------------------------------- gate


async def test_gate_verify_clears_a_twin_and_refuses_a_skewed_provider_with_evidence(operator: Operator):
    registry = operator.app.state.registry
    registry.add(FakeEncoder("fake:twin"))
    skewed = FakeEncoder("fake:skewed", skew=0.6)
    registry.add(skewed)
    async with operator.client() as admin:
        assert (await admin.get("/admin/gate/verdicts")).json()["verdicts"] == []
        twin = (await admin.post("/admin/gate/verify", json={"provider": "fake:twin"})).json()["verdicts"]
        assert [v["table"] for v in twin] == ["code", "docs"]  # every table its roles write
        v = twin[0]
        assert v["cleared"] and v["coverage"] == "full" and v["regime"] == "local-ref"
        assert v["reference"] == REFERENCE and v["min_cosine"] > 0.999 and len(v["cosines"]) >= 16
        r = await admin.post("/admin/gate/verify", json={"provider": "fake:skewed", "table": "code"})
        bad = r.json()["verdicts"][0]
        assert r.status_code == 200 and bad["status"] == "refused" and not bad["cleared"]
        assert bad["min_cosine"] < 0.99 and bad["failing"] and "minimum cosine" in bad["reason"]
        listed = (await admin.get("/admin/gate/verdicts")).json()
        assert listed["counts"] == {"cleared": 2, "refused": 1, "quarantined": 0}
        statuses = {(x["provider"], x["table"]): x["status"] for x in listed["verdicts"]}
        assert statuses[("fake:skewed", "code")] == "refused"
        # A verdict exists: probing again without force answers it without a probe.
        calls = skewed.calls
        await admin.post("/admin/gate/verify", json={"provider": "fake:skewed", "table": "code"})
        assert skewed.calls == calls
        await admin.post(
            "/admin/gate/verify", json={"provider": "fake:skewed", "table": "code", "force": True}
        )
        assert skewed.calls > calls
        assert len((await admin.get("/admin/gate/verdicts?history=true")).json()["verdicts"]) == 4


async def test_gate_verify_refusals(operator: Operator):
    registry = operator.app.state.registry
    unpinned = FakeEncoder("fake:cloud-unpinned", kind=Kind.CLOUD)
    registry.add(unpinned)
    registry.add(FakeEncoder("fake:chat", roles=[Role.RLM]))
    async with operator.client() as admin:
        r = await admin.post("/admin/gate/verify", json={"provider": "nobody"})
        assert r.status_code == 404 and "no live provider" in r.text
        r = await admin.post("/admin/gate/verify", json={"provider": "fake:chat"})
        assert r.status_code == 400 and "gate judges embedding routes only" in r.text
        r = await admin.post("/admin/gate/verify", json={"provider": "fake:cloud-unpinned", "table": "code"})
        assert r.status_code == 400 and "no upstream pin" in r.text
        assert unpinned.calls == 0  # refused before a single probe
        r = await admin.post("/admin/gate/verify", json={"provider": "x", "table": "tables"})
        assert r.status_code == 400 and r.json()["detail"]["problems"]


async def test_a_sole_cloud_provider_is_flagged_as_reduced_coverage(operator: Operator):
    sole = FakeEncoder("fake:cloud-alpha", kind=Kind.CLOUD, upstream="alpha")
    operator.app.state.registry.add(sole)
    async with operator.client() as admin:
        assert (
            await admin.put("/admin/policies", json={CE: {"policy": "cloud", "upstream": "alpha"}})
        ).status_code == 200
        v = (await admin.post("/admin/gate/verify", json={"provider": sole.id, "table": "code"})).json()[
            "verdicts"
        ][0]
        assert v["cleared"] and v["regime"] == "cloud-ref" and v["reduced_coverage"]
        assert "sole cloud provider" in v["coverage_note"] and "REDUCED COVERAGE" in v["status_line"]
        listed = (await admin.get("/admin/gate/verdicts")).json()
        assert listed["reduced_coverage"] == [sole.id]


async def test_gate_audit_and_reembed(operator: Operator):
    project = make_project(operator.tmp / "demo")
    async with operator.client() as admin:
        assert (await admin.get("/admin/gate/audit/nowhere")).status_code == 404
        job = (await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})).json()
        await operator.wait_job(admin, job["id"])
        audit = (await admin.get("/admin/gate/audit/demo")).json()
        assert audit["suspect_count"] == 0 and audit["suspects"] == []
        rows = {c["table"]: c for c in audit["counts"]}
        assert rows["code"]["provider"] == REFERENCE and rows["code"]["rows"] >= 2
        assert audit["lines"]
        r = await admin.post("/admin/gate/reembed/demo")
        assert r.status_code == 200 and r.json()["total"] == 0


# ---------------------------------------------------------------------------- budget


async def test_budget_state_and_override(operator: Operator):
    async with operator.client() as admin:
        b = (await admin.get("/admin/budget")).json()
        assert b["ceiling_source"] == "default" and b["ceiling"] == 4 and b["override"] is None
        for key in ("effective", "in_flight", "window", "cooldown_left_s", "last_429"):
            assert key in b
        b = (await admin.put("/admin/budget", json={"override": 8})).json()
        assert b["ceiling_source"] == "override" and b["ceiling"] == 8 and b["override"] == 8
        for bad in (
            {"override": 300},
            {"override": 0},
            {"override": "many"},
            {"override": 2.5},
            {},
            {"override": 8, "extra": 1},
        ):
            r = await admin.put("/admin/budget", json=bad)
            assert r.status_code == 400 and r.json()["detail"]["problems"], bad
        r = await admin.put("/admin/budget", json={"override": 300})
        assert "from 1 to 256" in r.json()["detail"]["message"]
        assert (await admin.get("/admin/budget")).json()["ceiling"] == 8  # unchanged by the refusals
    assert json.loads((operator.data_dir / "budget.json").read_text()) == {"override": 8}
    # A restart keeps the override.
    again = build_operator_app(operator.data_dir)
    assert again.state.budget.state().ceiling == 8
    async with operator.client() as admin:
        b = (await admin.put("/admin/budget", json={"override": None})).json()
    assert b["override"] is None and b["ceiling_source"] == "default"


# ---------------------------------------------------------------------------- jobs


async def test_a_job_runs_to_completion_with_progress(operator: Operator):
    project = make_project(operator.tmp / "demo")
    async with operator.client() as admin:
        r = await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})
        assert r.status_code == 202
        job = await operator.wait_job(admin, r.json()["id"])
        assert (
            job["state"] == "done"
            and job["percent"] == 100.0
            and job["chunks_done"] == job["chunks_total"] > 0
        )
        assert job["report"]["tables"]["code"] >= 2 and job["report"]["providers"] == {
            REFERENCE: job["chunks_done"]
        }
        listed = (await admin.get("/admin/jobs")).json()["jobs"]
        assert [j["id"] for j in listed] == [job["id"]]
        for action in ("pause", "resume", "cancel"):
            r = await admin.post(f"/admin/jobs/{job['id']}/{action}")
            assert r.status_code == 409 and "nothing to" in r.text
        assert (await admin.get("/admin/jobs/nope")).status_code == 404
        assert (await admin.post("/admin/jobs/nope/pause")).status_code == 404
        assert (await admin.post(f"/admin/jobs/{job['id']}/explode")).status_code == 400


async def test_job_start_refusals(operator: Operator):
    (operator.tmp / "file.txt").write_text("x")
    async with operator.client() as admin:
        for body, words in (
            ({"path": "relative/dir", "project": "p"}, "relative path"),
            # `~name` of a user this machine lacks: pathlib raises, the API refuses
            ({"path": "~no-such-user-fathom/x", "project": "p"}, "relative path"),
            ({"path": str(operator.tmp / "missing"), "project": "p"}, "no such folder"),
            ({"path": str(operator.tmp / "file.txt"), "project": "p"}, "not a folder"),
            ({"path": str(operator.tmp), "project": "bad\nname"}, "invalid project name"),
            ({"path": str(operator.tmp)}, "project"),
            ({"path": str(operator.tmp), "project": "p", "full": "maybe"}, "full"),
        ):
            r = await admin.post("/admin/jobs", json=body)
            assert r.status_code == 400 and words in r.text, (body, r.text)
        assert (await admin.get("/admin/jobs")).json()["jobs"] == []


async def test_pause_resume_and_cancel_a_running_job(tmp_path: Path):
    held = asyncio.Event()
    encoder = HashEmbedder(width=8, gate=held)
    app = build_operator_app(tmp_path / "data", encoder=encoder)
    from tests.fleet.fleet_fixtures import serve_in_loop

    async with serve_in_loop(app) as url:
        op = Operator(url, app, tmp_path / "data", tmp_path)
        project = make_project(tmp_path / "demo")
        # The gate judges the reference before a job embeds anything; do it up front, so the
        # first embed the job makes below is an index batch, not a probe.
        encoder.gate = None
        for table in ("code", "docs"):
            await app.state.service.verify_providers(table)
        encoder.gate, encoder.started = held, asyncio.Event()
        async with op.client() as admin:
            job = (await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})).json()
            await asyncio.wait_for(encoder.started.wait(), 30)  # a batch is in flight
            r = await admin.post(f"/admin/jobs/{job['id']}/pause")
            assert r.status_code == 200 and r.json()["state"] == "paused"
            assert (await admin.post(f"/admin/jobs/{job['id']}/pause")).status_code == 409
            held.set()  # the batch in flight finishes and is written; then the job waits
            paused = await op.wait_job(admin, job["id"], until=lambda j: j["chunks_done"] > 0)
            assert paused["state"] == "paused" and not paused["finished"]
            r = await admin.post(f"/admin/jobs/{job['id']}/resume")
            assert r.status_code == 200 and r.json()["state"] == "running"
            assert (await op.wait_job(admin, job["id"]))["state"] == "done"

            # A second run, full, cancelled while paused: it ends cancelled, the table unchanged.
            # (A new file: a full run embeds only text the table lacks, the rest is reused.)
            (project / "more.py").write_text("def more(x):\n    return x * 2\n")
            held.clear()
            encoder.started.clear()
            second = (
                await admin.post("/admin/jobs", json={"path": str(project), "project": "demo", "full": True})
            ).json()
            await asyncio.wait_for(encoder.started.wait(), 30)
            assert (await admin.post(f"/admin/jobs/{second['id']}/pause")).status_code == 200
            assert (await admin.post(f"/admin/jobs/{second['id']}/resume")).status_code == 200
            assert (await admin.post(f"/admin/jobs/{second['id']}/cancel")).status_code == 200
            held.set()
            assert (await op.wait_job(admin, second["id"]))["state"] == "cancelled"
            rows = (await admin.get("/admin/gate/audit/demo")).json()["counts"]
            assert sum(c["rows"] for c in rows) == paused["chunks_total"]


# ---------------------------------------------------------------------------- overview


async def test_the_overview_carries_every_section(operator: Operator):
    async with operator.client() as admin:
        o = (await admin.get("/admin/overview")).json()
    assert set(o) >= {"policies", "fleet", "gate", "budget", "jobs", "problems", "version"}
    assert o["budget"]["ceiling"] == 4 and o["gate"]["counts"]["cleared"] == 0
    # A fresh install is healthy: the optional roles nobody set up are no problem, and the
    # in-process encoder serves the embedding roles.
    assert o["problems"] == []
    async with operator.client() as admin:
        r = await admin.put("/admin/policies", json={"rlm": {"fallback": "any"}})
        assert r.status_code == 200, r.text
        o = (await admin.get("/admin/overview")).json()
    # Set up, and nothing can serve it: now it is a problem, said in words.
    assert any(p.startswith("role rlm has no provider serving it") for p in o["problems"])


async def test_a_client_without_a_configured_admin_token_gets_503(tmp_path: Path):
    from fathom.config import Settings
    from fathom.server.app import create_app
    from tests.fleet.fleet_fixtures import serve_in_loop

    app = create_app(Settings(data_dir=tmp_path), service=_light_service(tmp_path))
    async with serve_in_loop(app) as url:
        async with httpx.AsyncClient(base_url=url) as anon:
            r = await anon.get("/admin/policies", headers={"Authorization": "Bearer anything"})
    assert r.status_code == 503 and "FATHOM_ADMIN_TOKEN" in r.text


def _light_service(tmp_path: Path):
    from fathom.config import Settings
    from fathom.service import Fathom

    return Fathom(Settings(data_dir=tmp_path), encoder=HashEmbedder(width=8))


# ---------------------------------------------------------------------------- projects


async def test_projects_watch_state_and_drop(operator: Operator):
    project = make_project(operator.tmp / "demo")
    async with operator.client() as admin:
        job = (await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})).json()
        assert (await operator.wait_job(admin, job["id"]))["state"] == "done"
        listed = (await admin.get("/admin/projects")).json()["projects"]
        assert [p["name"] for p in listed] == ["demo"]
        demo = listed[0]
        assert demo["root"] == str(project) and demo["tables"]["code"] > 0
        # This server runs without live sync (FATHOM_WATCH=0 in the tests): said, with why.
        assert demo["watch"]["enabled"] and demo["watch"]["state"] == "not watched"
        status = (await admin.get("/admin/projects/demo")).json()
        assert status["tables"]["code"]["rows"] == demo["tables"]["code"] and status["watch"]

        off = await admin.put("/admin/projects/demo/watch", json={"enabled": False})
        assert off.status_code == 200 and off.json()["watch"]["state"] == "off"
        bad = await admin.put("/admin/projects/demo/watch", json={"enabled": "sometimes"})
        assert bad.status_code == 400

        assert (await admin.delete("/admin/projects/ghost")).status_code == 404
        dropped = await admin.delete("/admin/projects/demo")
        assert dropped.status_code == 200, dropped.text
        assert dropped.json()["rows"]["code"] == demo["tables"]["code"]
        assert (await admin.get("/admin/projects")).json()["projects"] == []
        assert (await admin.get("/admin/projects/demo")).status_code == 404
        assert (await admin.delete("/admin/projects/demo")).status_code == 404
        assert operator.app.state.service.records.get("demo") is None
        assert (
            await admin.get("/admin/projects", headers={"Authorization": "Bearer wrong"})
        ).status_code == 401


async def test_a_drop_cancels_the_running_job_first(tmp_path: Path):
    held = asyncio.Event()
    encoder = HashEmbedder(width=8, gate=held)
    app = build_operator_app(tmp_path / "data", encoder=encoder)
    async with serve_in_loop(app) as url:
        op = Operator(url, app, tmp_path / "data", tmp_path)
        project = make_project(tmp_path / "demo")
        encoder.gate = None
        for table in ("code", "docs"):
            await app.state.service.verify_providers(table)
        async with op.client() as admin:
            first = (await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})).json()
            assert (await op.wait_job(admin, first["id"]))["state"] == "done"
            (project / "more.py").write_text("def more(x):\n    return x * 2\n")
            encoder.gate, encoder.started = held, asyncio.Event()
            job = (await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})).json()
            await asyncio.wait_for(encoder.started.wait(), 30)  # a batch is in flight
            running = app.state.service.jobs[job["id"]]
            drop = asyncio.create_task(admin.delete("/admin/projects/demo"))
            await asyncio.sleep(0.2)
            assert not drop.done()  # it waits for the job to stop between batches
            held.set()
            assert (await drop).status_code == 200
            assert running.state.value == "cancelled"
            assert not app.state.service.store.has_project("demo")
            # Its jobs went with it.
            assert (await admin.get(f"/admin/jobs/{job['id']}")).status_code == 404


async def test_a_drop_waits_a_bounded_time_for_the_project_lock(tmp_path: Path, monkeypatch):
    """Another writer holds the project's lock (another server's run, or this process's job
    a moment after its cancel): the drop waits for it, and past its bound is refused, 409,
    having changed nothing."""
    import fathom.service.indexing as indexing_mod

    app = build_operator_app(tmp_path / "data")
    service = app.state.service
    for table in ("code", "docs"):
        await service.verify_providers(table)
    await service.index(make_project(tmp_path / "demo"), "demo")
    auth = {"Authorization": f"Bearer {ADMIN}"}
    async with serve_in_loop(app) as url, httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as admin:
        held = service.project_lock("demo")
        await asyncio.to_thread(held.__enter__)
        drop = asyncio.create_task(admin.delete("/admin/projects/demo"))
        await wait_for(
            lambda: service.indexing._index_lock["demo"].locked(), what="the drop to reach the lock"
        )
        for _ in range(5):
            await asyncio.sleep(0.05)
            assert not drop.done()  # waiting, not refused at once
        await asyncio.to_thread(held.__exit__, None, None, None)
        assert (await drop).status_code == 200
        assert not service.store.has_project("demo")

        await service.index(make_project(tmp_path / "demo"), "demo")
        monkeypatch.setattr(indexing_mod, "LOCK_TRIES", 3)
        held = service.project_lock("demo")
        await asyncio.to_thread(held.__enter__)
        try:
            refused = await admin.delete("/admin/projects/demo")
        finally:
            await asyncio.to_thread(held.__exit__, None, None, None)
        assert refused.status_code == 409 and "indexing" in refused.text, refused.text
        assert service.store.has_project("demo")


async def test_a_writer_cancelled_while_taking_the_project_lock_does_not_keep_it(tmp_path: Path):
    """A drop or a run cancelled (a shutdown, a client gone) while its thread takes the real
    project lock: the lock is released as it is taken, and the next writer gets it."""
    import threading

    from fathom.service import entered

    app = build_operator_app(tmp_path / "data")
    service = app.state.service
    real = service.project_lock("demo")
    go, took = threading.Event(), threading.Event()

    class Slow:
        def __enter__(self):
            go.wait(10)
            held = real.__enter__()
            took.set()
            return held

        def __exit__(self, *exc):
            return real.__exit__(*exc)

    taking = asyncio.create_task(entered(Slow()))
    await asyncio.sleep(0.05)
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    go.set()
    assert await asyncio.to_thread(took.wait, 10)  # the thread took it, for nobody
    after = await wait_for(lambda: _taken(service, "demo"), timeout=10, what="the lock to be free again")
    after.__exit__(None, None, None)


def _taken(service, project: str):
    """The project's lock, entered, or None while another holds it."""
    from fathom.index.store import ProjectLocked

    lock = service.project_lock(project)
    try:
        lock.__enter__()
    except ProjectLocked:
        return None
    return lock


async def test_the_projects_view_says_what_is_indexed_and_the_search_answers_as_search_code(
    operator: Operator,
):
    project = make_project(operator.tmp / "demo")
    async with operator.client() as admin:
        job = (await admin.post("/admin/jobs", json={"path": str(project), "project": "demo"})).json()
        assert (await operator.wait_job(admin, job["id"]))["state"] == "done"
        view = (await admin.get("/admin/projects")).json()["projects"][0]
        assert view["indexing"] is False and view["unfinished_full_run"] is False  # the job ended
        assert view["details"]["code"]["rows"] == 2 and view["details"]["code"]["width"] == 8
        assert view["details"]["code"]["model"] == "test/hash-embedder"
        assert sum(view["details"]["code"]["provenance"].values()) == 2
        assert view["last_run"]["outcome"] == "done" and view["last_run"]["files"] == 2
        found = await admin.post(
            "/admin/search", json={"query": "add two numbers", "project": "demo", "group": "chunk"}
        )
        assert found.status_code == 200, found.text
        hits = found.json()["results"]
        add = next(h for h in hits if h["symbol"] == "add")
        per_file = (
            await admin.post("/admin/search", json={"query": "add two numbers", "project": "demo"})
        ).json()["results"]
        assert [h["path"] for h in per_file].count("app.py") == 1  # a file once, by default
        assert add["path"] == "app.py" and add["keyword_rank"] == 1 and add["rank"] >= 1
        docs = await admin.post("/admin/search", json={"query": "usage", "table": "docs"})
        assert docs.status_code == 200 and docs.json()["table"] == "docs" and docs.json()["results"]
        for body, status in (
            ({"query": " "}, 400),
            ({"query": "x", "project": "ghost"}, 404),
            ({"query": "x", "k": 0}, 400),
            ({"query": "x", "table": "images"}, 400),
        ):
            r = await admin.post("/admin/search", json=body)
            assert r.status_code == status, (body, r.text)
