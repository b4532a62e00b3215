"""Prometheus metrics of one fathom server: what it served, and the state it is in now.

This module owns two kinds of series, on a `CollectorRegistry` of its own (never the process
global one, so a test can build several apps and a scrape shows one server only):

- events, counted as they happen by whoever makes the call: `Metrics.observe_request(role,
  provider, seconds, ok, texts=n)` (throughput, latency and errors per role and provider) and
  `Metrics.count_throttle(provider, kind)` (429s and in-flight 402s). `MeteredProvider` wraps a
  `Provider` so every embed, rerank and chat through it is observed without the caller's help;
- state, read at scrape time from the live parts (`Metrics.watch(...)`): the cloud budget
  (ceiling, effective limit, in flight, window, cooldown, throttles), the gate's verdict counts,
  the fleet, the providers' health and the index jobs. Nothing is copied ahead of a scrape, so
  the numbers are never stale.

It refuses to carry a secret: label values are provider ids, role, table and state names,
passed through `logsafe.scrub` and cut to a bounded length, so even a provider id built from a
mistaken key could not put it on the wire. A part that fails to report is logged and skipped;
a scrape never fails because one part is broken.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fathom.inference.provider import Provider
from fathom.logsafe import scrub

_T = TypeVar("_T")

log = logging.getLogger("fathom.server.metrics")

MAX_LABEL = 160
# Embedding batches take milliseconds locally and seconds through a busy cloud upstream.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def label(value: Any) -> str:
    """A label value that is safe to publish: scrubbed of anything key-shaped, bounded."""
    text = scrub(str(value if value is not None else ""))
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 3] + "..."


class Metrics:
    """The server's metrics. One per app; `render()` is what `GET /metrics` returns."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "fathom_inference_requests",
            "Inference requests by role, provider and outcome (ok or error).",
            ["role", "provider", "outcome"],
            registry=self.registry,
        )
        self.texts = Counter(
            "fathom_inference_texts",
            "Texts embedded or scored, by role and provider (throughput).",
            ["role", "provider"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "fathom_inference_request_seconds",
            "Inference request latency by role and provider.",
            ["role", "provider"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.throttles = Counter(
            "fathom_throttles",
            "Throttles answered by the cloud (kind 429 rate limit, 402 in-flight budget), by provider.",
            ["provider", "kind"],
            registry=self.registry,
        )
        self._state: StateCollector | None = None

    # -- events ------------------------------------------------------------------------

    def observe_request(self, role: Any, provider: Any, seconds: float, ok: bool, *, texts: int = 1) -> None:
        r, p = label(getattr(role, "value", role)), label(getattr(provider, "id", provider))
        self.requests.labels(r, p, "ok" if ok else "error").inc()
        self.latency.labels(r, p).observe(max(0.0, float(seconds)))
        if ok and texts:
            self.texts.labels(r, p).inc(texts)

    def count_throttle(self, provider: Any, kind: str = "429") -> None:
        self.throttles.labels(label(getattr(provider, "id", provider)), label(kind)).inc()

    def instrument(
        self, provider: Provider, role: Any = None, clock: Callable[[], float] = time.perf_counter
    ) -> MeteredProvider:
        return MeteredProvider(provider, self, role=role, clock=clock)

    # -- state, read at scrape time ----------------------------------------------------

    def watch(
        self,
        *,
        budget: Any = None,
        gate: Any = None,
        hub: Any = None,
        registry: Any = None,
        jobs: Callable[[], Iterable[Any]] | None = None,
    ) -> None:
        """Publish these parts' state on every scrape (call once per app)."""
        if self._state is not None:
            self.registry.unregister(self._state)
        self._state = StateCollector(budget=budget, gate=gate, hub=hub, registry=registry, jobs=jobs)
        self.registry.register(self._state)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MeteredProvider(Provider):
    """A provider whose every call is observed: latency, texts, errors, throttles.

    `role` labels the calls; without one, an embed is labelled with the provider's single
    embedding role when it has exactly one, else "embedding", and rerank and chat with
    "reranker" and "chat". Every other attribute (`load`, `batch_size`, ...) is the inner
    provider's, so an indexer or a gate sees the same provider, with the same id.
    """

    def __init__(
        self,
        inner: Provider,
        metrics: Metrics,
        *,
        role: Any = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.inner = inner
        self.info = inner.info
        self.metrics = metrics
        self.role = None if role is None else str(getattr(role, "value", role))
        self.clock = clock

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes this wrapper lacks: forward them to the provider it wraps.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _role(self, op: str) -> str:
        if self.role is not None:
            return self.role
        if op == "embed":
            roles = sorted(r.value for r in self.info.roles if r.value.endswith("embedding"))
            return roles[0] if len(roles) == 1 else "embedding"
        return {"rerank": "reranker"}.get(op, "chat")

    async def _observe(self, op: str, n: int, call: Awaitable[_T]) -> _T:
        started = self.clock()
        try:
            result = await call
        except BaseException as exc:
            self.metrics.observe_request(self._role(op), self.id, self.clock() - started, False, texts=0)
            kind = _throttle_kind(exc)
            if kind is not None:
                self.metrics.count_throttle(self.id, kind)
            raise
        self.metrics.observe_request(self._role(op), self.id, self.clock() - started, True, texts=n)
        return result

    async def embed(self, texts: Sequence[str]) -> Any:
        return await self._observe("embed", len(texts), self.inner.embed(texts))

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        return await self._observe("rerank", len(documents), self.inner.rerank(query, documents))

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Any,
    ) -> Any:
        return await self._observe("chat", 1, self.inner.chat(messages, tools, **options))

    async def aclose(self) -> None:
        await self.inner.aclose()


def _throttle_kind(exc: BaseException) -> str | None:
    try:
        from fathom.inference.budget import throttle_of
    except ImportError:  # pragma: no cover - the budget is part of the package
        return None
    found = throttle_of(exc)
    return found[0] if found else None


class StateCollector:
    """Reads the live parts at scrape time (a prometheus_client custom collector)."""

    def __init__(
        self,
        *,
        budget: Any = None,
        gate: Any = None,
        hub: Any = None,
        registry: Any = None,
        jobs: Callable[[], Iterable[Any]] | None = None,
    ):
        self.budget, self.gate, self.hub, self.registry, self.jobs = budget, gate, hub, registry, jobs

    def describe(self) -> list[Metric]:
        return []  # state series vary with what is live; no fixed description to check against

    def collect(self) -> Iterator[Metric]:
        for part, read in (
            ("budget", self._budget),
            ("gate", self._gate),
            ("fleet", self._fleet),
            ("providers", self._providers),
            ("jobs", self._jobs),
        ):
            try:
                yield from list(read())
            except Exception:  # one broken part must not fail the whole scrape
                log.exception("metrics: could not read the %s state", part)

    def _budget(self) -> Iterator[Metric]:
        if self.budget is None:
            return
        s = self.budget.state()
        g = GaugeMetricFamily(
            "fathom_budget_ceiling",
            "Cloud budget ceiling (permits), by where it comes from.",
            labels=["source"],
        )
        g.add_metric([label(s.ceiling_source)], s.ceiling)
        yield g
        yield GaugeMetricFamily(
            "fathom_budget_effective_limit",
            "Cloud permits allowed in flight now (AIMD).",
            value=s.effective_limit,
        )
        yield GaugeMetricFamily("fathom_budget_in_flight", "Cloud permits held now.", value=s.in_flight)
        yield GaugeMetricFamily(
            "fathom_budget_waiting", "Requests waiting for a cloud permit.", value=sum(s.waiting.values())
        )
        yield GaugeMetricFamily(
            "fathom_budget_window_count",
            "Request starts in the RPM window (0 when unarmed).",
            value=s.window_count,
        )
        yield GaugeMetricFamily(
            "fathom_budget_cooldown_seconds",
            "Seconds left in the throttle cooldown.",
            value=s.cooldown_remaining_s,
        )
        c = CounterMetricFamily(
            "fathom_budget_throttled", "Throttles the budget was told of, by kind.", labels=["kind"]
        )
        for kind, n in sorted(s.throttled_total.items()):
            c.add_metric([label(kind)], n)
        yield c
        yield CounterMetricFamily("fathom_budget_granted", "Cloud permits granted.", value=s.granted_total)
        yield CounterMetricFamily(
            "fathom_budget_halvings", "Times a throttle halved the effective limit.", value=s.halvings
        )

    def _gate(self) -> Iterator[Metric]:
        if self.gate is None:
            return
        tally: Tally[tuple[str, str, str]] = Tally()
        for v in latest_verdicts(self.gate):
            tally[(v.key.table, v.status.value, v.coverage.value)] += 1
        g = GaugeMetricFamily(
            "fathom_gate_verdicts",
            "Current gate verdicts (latest per provider and space).",
            labels=["table", "status", "coverage"],
        )
        for (table, status, coverage), n in sorted(tally.items()):
            g.add_metric([label(table), label(status), label(coverage)], n)
        yield g

    def _fleet(self) -> Iterator[Metric]:
        if self.hub is None:
            return
        tally: Tally[tuple[str, str]] = Tally()
        for s in self.hub.sidecars():
            tally[(s.state, "true" if s.connected else "false")] += 1
        g = GaugeMetricFamily(
            "fathom_sidecars", "Sidecars by approval state and connection.", labels=["state", "connected"]
        )
        for (state, connected), n in sorted(tally.items()):
            g.add_metric([label(state), connected], n)
        yield g
        yield GaugeMetricFamily(
            "fathom_fleet_problems",
            "Fleet problems an operator must see (e.g. key missing).",
            value=len(self.hub.problems()),
        )

    def _providers(self) -> Iterator[Metric]:
        if self.registry is None:
            return
        g = GaugeMetricFamily(
            "fathom_provider_up",
            "1 when a live provider may serve now, 0 when ejected, "
            "quarantined, or a cloud route not seen serving (health: unchecked, key_rejected, "
            "no_credits, throttled, unreachable).",
            labels=["provider", "kind", "health"],
        )
        for p in self.registry:
            state, up = provider_health(self.registry, p, getattr(self.hub, "cloud_health", None))
            g.add_metric([label(p.id), label(p.info.kind.value), label(state)], 1 if up else 0)
        yield g

    def _jobs(self) -> Iterator[Metric]:
        if self.jobs is None:
            return
        tally: Tally[str] = Tally()
        for job in self.jobs():
            tally[str(getattr(job.state, "value", job.state))] += 1
        g = GaugeMetricFamily("fathom_index_jobs", "Index jobs in this process, by state.", labels=["state"])
        for state, n in sorted(tally.items()):
            g.add_metric([label(state)], n)
        yield g


def provider_health(registry: Any, provider: Any, cloud: Any = None) -> tuple[str, bool]:
    """A live provider's health word and whether it may serve now. The registry's flag (ejected,
    quarantined) comes first; a cloud route the registry lets serve is only as healthy as what
    its calls found (`fathom.inference.cloud_health`): "serving" once one succeeded."""
    health = registry.health(provider.id)
    state = str(getattr(health.state, "value", health.state))
    up = bool(registry.available(provider.id))
    if cloud is not None and provider.info.is_cloud and state == "ok":
        record = cloud.of(provider.id, provider.info.host)
        return record.state.value, up and record.serving
    return state, up


def latest_verdicts(gate: Any) -> list[Any]:
    """The latest verdict per (space, provider, model, pin): what each provider's standing is
    now (the gate's own `status_lines` groups the same way)."""
    latest: dict[tuple[str, str, str, str | None], Any] = {}
    for v in gate.verdicts.all():
        latest[(v.key.space, v.key.provider_id, v.key.model, v.key.upstream)] = v
    return list(latest.values())
