"""Prometheus metrics: events observed through the real provider path, state read at scrape time,
one registry per app, and no secret in any label."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fathom.errors import ProviderError
from fathom.inference.provider import Kind
from fathom.roles import Role
from fathom.server.metrics import MeteredProvider, Metrics
from tests.fleet.fleet_fixtures import Fleet, HashEmbedder, wait_for
from tests.server.admin_fixtures import METRICS, FakeEncoder, Operator, make_project


class Throttled(ProviderError):
    throttle_kind = "429"
    retry_after = 2.0


class Refusing(FakeEncoder):
    async def embed(self, texts: Sequence[str]):
        raise Throttled("slow down")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


class Ticks:
    """A fake clock: each call advances 0.25 s."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.25
        return self.t


async def test_a_metered_provider_counts_throughput_latency_errors_and_throttles():
    metrics = Metrics()
    ok = metrics.instrument(
        FakeEncoder("sidecar:gpu1:code-embedding:local", roles=[Role.CODE_EMBEDDING]), clock=Ticks()
    )
    cloud = MeteredProvider(
        Refusing("openrouter:m@alpha", kind=Kind.CLOUD, roles=[Role.EMBEDDING]),
        metrics,
        role=Role.EMBEDDING,
        clock=Ticks(),
    )
    await ok.embed(["a", "b", "c"])
    await ok.embed(["d"])
    with pytest.raises(Throttled):
        await cloud.embed(["x"])
    text = metrics.render()[0].decode()
    ce = {"role": "code-embedding", "provider": "sidecar:gpu1:code-embedding:local"}
    assert value(text, "fathom_inference_requests_total", **ce, outcome="ok") == 2
    assert value(text, "fathom_inference_texts_total", **ce) == 4
    assert value(text, "fathom_inference_request_seconds_count", **ce) == 2
    assert value(text, "fathom_inference_request_seconds_sum", **ce) == pytest.approx(0.5)
    emb = {"role": "embedding", "provider": "openrouter:m@alpha"}
    assert value(text, "fathom_inference_requests_total", **emb, outcome="error") == 1
    assert value(text, "fathom_throttles_total", provider="openrouter:m@alpha", kind="429") == 1
    # The wrapper is the same provider to whoever uses it.
    assert ok.id == "sidecar:gpu1:code-embedding:local" and ok.info.roles == frozenset({Role.CODE_EMBEDDING})
    wrapped = metrics.instrument(HashEmbedder())
    assert wrapped.started is wrapped.inner.started  # attributes forward


def test_no_secret_reaches_a_label_and_apps_do_not_share_a_registry():
    one, two = Metrics(), Metrics()
    one.observe_request("embedding", "openrouter:sk-or-v1-" + "ab" * 32, 0.1, True)
    one.count_throttle("x" * 500)
    text = one.render()[0].decode()
    assert "sk-or-v1-" not in text and "sk-or-***" in text
    assert max(len(v) for (_, labels) in samples(text) for _, v in labels) <= 160
    assert "fathom_inference_requests_total{" not in two.render()[0].decode()


async def test_the_scrape_reads_budget_gate_fleet_providers_and_jobs(operator: Operator):
    fleet = Fleet(operator.url, operator.app.state.hub, operator.app.state.registry, operator.data_dir)
    operator.app.state.hub.auth.approve("gpu-m")
    operator.app.state.registry.add(FakeEncoder("fake:twin"))
    operator.app.state.metrics.observe_request(Role.CODE_EMBEDDING, "fake:twin", 0.01, True, texts=7)
    try:
        await fleet.start_sidecar("gpu-m", {Role.CODE_EMBEDDING: HashEmbedder()})
        await wait_for(
            lambda: "sidecar:gpu-m:code-embedding:local" in operator.app.state.registry, what="route"
        )
        async with operator.client() as admin:
            await admin.put("/admin/budget", json={"override": 12})
            await admin.post("/admin/gate/verify", json={"provider": "fake:twin", "table": "code"})
            job = (
                await admin.post(
                    "/admin/jobs", json={"path": str(make_project(operator.tmp / "p")), "project": "p"}
                )
            ).json()
            await operator.wait_job(admin, job["id"])
        async with operator.client({"Authorization": f"Bearer {METRICS}"}) as scraper:
            r = await scraper.get("/metrics")
    finally:
        await fleet.close()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert value(text, "fathom_budget_ceiling", source="override") == 12
    assert value(text, "fathom_budget_effective_limit") is not None
    assert value(text, "fathom_budget_in_flight") == 0
    assert value(text, "fathom_budget_throttled_total", kind="429") == 0
    # fake:twin verified by hand, and the sidecar's route judged by the job before it pulled.
    assert value(text, "fathom_gate_verdicts", table="code", status="cleared", coverage="full") == 2
    assert value(text, "fathom_sidecars", state="approved", connected="true") == 1
    assert value(text, "fathom_provider_up", provider="fake:twin", kind="local", health="ok") == 1
    assert value(text, "fathom_index_jobs", state="done") == 1
    assert value(text, "fathom_inference_texts_total", role="code-embedding", provider="fake:twin") == 7
