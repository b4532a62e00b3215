"""A cloud route's health is learned from real answers: what the OpenRouter client (against the
emulator over HTTP) raises, or what a sidecar reports, becomes one distinct state each."""

from __future__ import annotations

import httpx
import pytest

from fathom.fleet.protocol import ErrorInfo
from fathom.fleet.remote import error_from_info
from fathom.inference.cloud_health import CloudHealth, CloudState, Outcome, outcome_of
from fathom.inference.openrouter import OpenRouterClient

MODEL = "sentence-transformers/all-minilm-l6-v2"
ROUTE = "sidecar:gpu-1:embedding:cloud:alpha"


async def _failure(client: OpenRouterClient) -> BaseException:
    with pytest.raises(Exception) as caught:
        await client.embeddings(MODEL, ["x"], provider={"order": ["alpha"], "allow_fallbacks": False})
    return caught.value


async def test_each_real_refusal_is_its_own_state(emulator):
    good, bad = "sk-or-v1-" + "a" * 64, "sk-or-v1-" + "b" * 64
    emulator.control.set_keys(accepted=[good])
    book = CloudHealth()
    async with OpenRouterClient(bad, base_url=emulator.base_url) as client:
        assert book.note_failure(ROUTE, await _failure(client)).state is CloudState.KEY_REJECTED
    async with OpenRouterClient(good, base_url=emulator.base_url) as client:
        emulator.control.credits_402(count=1)
        assert book.note_failure(ROUTE, await _failure(client)).state is CloudState.NO_CREDITS
        emulator.control.set_limits(rpm=1)
        await client.embeddings(MODEL, ["x"], provider={"order": ["alpha"], "allow_fallbacks": False})
        book.note(ROUTE, Outcome.OK)
        assert book.of(ROUTE).state is CloudState.SERVING
        assert book.note_failure(ROUTE, await _failure(client)).state is CloudState.THROTTLED
    # Nothing listens on this port: a transport failure.
    async with OpenRouterClient(
        good, base_url="http://127.0.0.1:9/api/v1", http=httpx.AsyncClient(timeout=2)
    ) as client:
        assert book.note_failure(ROUTE, await _failure(client)).state is CloudState.UNREACHABLE
    # The record never carries the key, whatever the error said.
    assert bad not in str(book.of(ROUTE).to_dict())


def test_a_sidecars_error_codes_mean_the_same_states():
    for code, throttle, state in (
        ("Unauthorized", None, Outcome.REJECTED),
        ("InsufficientCredits", None, Outcome.NO_CREDITS),
        ("RateLimited", "429", Outcome.THROTTLED),
        ("InFlightBudgetExhausted", "402", Outcome.THROTTLED),
        ("UpstreamError", None, Outcome.UNREACHABLE),
    ):
        exc = error_from_info("gpu-1", ErrorInfo(code=code, message="m", throttle_kind=throttle))
        assert outcome_of(exc) is state, code
    # A failure that says nothing about the route (bad input, the sidecar gone) is not a state.
    assert outcome_of(error_from_info("gpu-1", ErrorInfo(code="BadRequest", message="m"))) is None
    assert outcome_of(error_from_info("gpu-1", ErrorInfo(code="SidecarUnavailable", message="m"))) is None


def test_never_serving_before_a_success_and_the_latest_word_wins():
    book = CloudHealth()
    assert book.of(ROUTE, "gpu-1").state is CloudState.UNCHECKED
    assert not book.of(ROUTE, "gpu-1").serving
    book.note(ROUTE, Outcome.REJECTED, "401")
    assert book.of(ROUTE, "gpu-1").state is CloudState.KEY_REJECTED
    # A key check on the sidecar (or a key push) speaks for every cloud route it holds...
    book.note("gpu-1", Outcome.RESET)
    assert book.of(ROUTE, "gpu-1").state is CloudState.UNCHECKED
    book.note("gpu-1", Outcome.OK)
    assert book.of(ROUTE, "gpu-1").serving and book.of("sidecar:gpu-1:rlm:cloud:auto", "gpu-1").serving
    # ...until a later call through one route says otherwise, for that route only.
    book.note(ROUTE, Outcome.NO_CREDITS)
    assert book.of(ROUTE, "gpu-1").state is CloudState.NO_CREDITS
    assert book.of("sidecar:gpu-1:rlm:cloud:auto", "gpu-1").serving
    assert book.of(ROUTE).state is CloudState.NO_CREDITS  # without its sidecar: its own record


def test_the_metric_says_up_only_for_a_cloud_route_seen_serving():
    from fathom.inference.provider import Kind
    from fathom.inference.registry import ProviderRegistry
    from fathom.server.metrics import Metrics, provider_health
    from tests.server.admin_fixtures import FakeEncoder

    registry, book = ProviderRegistry(), CloudHealth()
    cloud = FakeEncoder(ROUTE, kind=Kind.CLOUD, upstream="alpha")
    local = FakeEncoder("sidecar:gpu-1:code-embedding:local")
    registry.add(cloud)
    registry.add(local)
    assert provider_health(registry, local, book) == ("ok", True)
    assert provider_health(registry, cloud, book) == ("unchecked", False)
    book.note(ROUTE, Outcome.OK)
    assert provider_health(registry, cloud, book) == ("serving", True)
    book.note(ROUTE, Outcome.REJECTED)

    class Hub:  # what the metrics read of the hub: its book
        cloud_health = book

        def sidecars(self):
            return []

        def problems(self):
            return []

    metrics = Metrics()
    metrics.watch(registry=registry, hub=Hub())
    text = metrics.render()[0].decode()
    assert f'fathom_provider_up{{health="key_rejected",kind="cloud",provider="{ROUTE}"}} 0.0' in text
    assert (
        'fathom_provider_up{health="ok",kind="local",provider="sidecar:gpu-1:code-embedding:local"} 1.0'
        in text
    )
