"""Acceptance 2 of the OpenRouter issue: each failure the emulator produces over real HTTP maps
to its typed exception with its evidence; Retry-After is read from the header; a response of
the wrong width or count is refused. Plus chat (tool calls, streaming, mid-stream errors),
key info and credits."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import numpy as np
import pytest

from fathom.devtools.emulator import MINILM
from fathom.errors import ProviderError
from fathom.inference.budget.ceiling import interval_seconds
from fathom.inference.openrouter import (
    BadRequest,
    InFlightBudgetExhausted,
    InsufficientCredits,
    InvalidResponse,
    OpenRouterClient,
    OpenRouterProvider,
    RateLimited,
    StreamError,
    Unauthorized,
    UpstreamError,
    UpstreamUnavailable,
    parse_retry_after,
    pin,
)
from fathom.roles import Role

KEY = "sk-or-v1-client-test"
MGMT = "sk-or-v1-management"


@pytest.fixture
async def client(emulator):
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as c:
        yield c


def test_pin_builds_the_documented_provider_object():
    assert pin("alpha") == {"order": ["alpha"], "allow_fallbacks": False}
    assert pin("alpha", "only") == {"only": ["alpha"], "allow_fallbacks": False}
    with pytest.raises(ValueError):
        pin("alpha", "first")  # type: ignore[arg-type]


def test_retry_after_reads_seconds_and_http_dates():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("1.5") == 1.5
    assert (
        parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now=lambda: now) == 30.0
    )
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


async def test_rate_limited_carries_retry_after_from_the_header_and_metadata(emulator, client):
    emulator.control.set_limits(rpm=2, retry_after_seconds=17)
    for _ in range(2):
        await client.embeddings(MINILM, ["x"], provider=pin("alpha"))
    with pytest.raises(RateLimited) as caught:
        await client.embeddings(MINILM, ["x"], provider=pin("alpha"))
    err = caught.value
    assert err.status == 429 and err.retryable and err.retry_after == 17.0
    assert err.metadata["error_type"] == "rate_limit_exceeded"
    assert isinstance(err, ProviderError)
    assert emulator.control.counters()["rate_limited"] == 1


async def test_rate_limited_without_retry_after(emulator, client):
    emulator.control.set_limits(rpm=1, retry_after=False)
    await client.embeddings(MINILM, ["x"])
    with pytest.raises(RateLimited) as caught:
        await client.embeddings(MINILM, ["x"])
    assert caught.value.retry_after is None


async def test_computed_retry_after_names_when_the_window_reopens(emulator, client):
    emulator.control.set_limits(rpm=1)
    await client.key_info()  # /key is not rate limited
    await client.embeddings(MINILM, ["x"])
    with pytest.raises(RateLimited) as caught:
        await client.embeddings(MINILM, ["x"])
    assert 59 <= caught.value.retry_after <= 61


async def test_in_flight_budget_402_is_retryable_with_retry_after(emulator, client):
    emulator.control.in_flight_402(count=1, retry_after=3)
    with pytest.raises(InFlightBudgetExhausted) as caught:
        await client.embeddings(MINILM, ["x"])
    assert caught.value.retryable and caught.value.retry_after == 3.0 and caught.value.status == 402
    assert caught.value.metadata["reason"] == "in_flight_budget_exhausted"
    await client.embeddings(MINILM, ["x"])  # the next one goes through


async def test_other_402_is_insufficient_credits_and_not_retryable(emulator, client):
    emulator.control.credits_402(count=1)
    with pytest.raises(InsufficientCredits) as caught:
        await client.rerank("qwen/qwen3-reranker-8b", "q", ["d"])
    assert not caught.value.retryable


async def test_unknown_key_is_unauthorized(emulator):
    emulator.control.set_keys(accepted=["sk-or-v1-the-only-one"])
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as c:
        with pytest.raises(Unauthorized) as caught:
            await c.embeddings(MINILM, ["x"])
    assert caught.value.status == 401 and not caught.value.retryable
    async with OpenRouterClient("not-an-openrouter-key", base_url=emulator.base_url) as c:
        emulator.control.set_keys(accepted=None)
        with pytest.raises(Unauthorized):
            await c.key_info()


async def test_bad_request(client):
    with pytest.raises(BadRequest) as caught:
        await client.embeddings("no/such-model", ["x"])
    assert caught.value.status == 400 and not caught.value.retryable


async def test_pin_to_an_upstream_that_does_not_serve_the_model(client):
    with pytest.raises(UpstreamUnavailable) as caught:
        await client.embeddings(MINILM, ["x"], provider=pin("gamma"))
    assert caught.value.status == 404 and not caught.value.retryable
    assert "No endpoints found" in caught.value.upstream_message


async def test_pinned_upstream_down_is_unavailable_and_retryable(emulator, client):
    emulator.control.set_down("alpha")
    with pytest.raises(UpstreamUnavailable) as caught:
        await client.embeddings(MINILM, ["x"], provider=pin("alpha", "only"))
    assert caught.value.status == 503 and caught.value.retryable and caught.value.retry_after == 1.0


@pytest.mark.parametrize("status", [500, 502, 504])
async def test_injected_5xx_is_upstream_error(emulator, client, status):
    emulator.control.fail(status=status, count=1)
    with pytest.raises(UpstreamError) as caught:
        await client.embeddings(MINILM, ["x"])
    assert caught.value.status == status and caught.value.retryable
    assert emulator.control.counters()["issued"][str(status)] == 1


async def test_unreachable_server_is_a_retryable_upstream_error():
    async with OpenRouterClient(KEY, base_url="http://127.0.0.1:9/api/v1", timeout=2.0) as c:
        with pytest.raises(UpstreamError) as caught:
            await c.key_info()
    assert caught.value.status is None and caught.value.retryable


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("truncate", "expected width"),
        ("drop", "one vector per input"),
        ("nan", "finite"),
        ("duplicate_index", "indices"),
    ],
)
async def test_a_wrong_response_is_refused_with_evidence(emulator, client, mode, problem):
    emulator.control.corrupt(mode, count=1)
    with pytest.raises(InvalidResponse) as caught:
        await client.embeddings(MINILM, ["a", "b", "c"], provider=pin("alpha"), expected_width=384)
    err = caught.value
    assert problem in err.problem and not err.retryable and err.upstream == "alpha"
    if mode == "truncate":
        assert (err.expected, err.got) == (384, 383)
    if mode == "drop":
        assert (err.expected, err.got) == (3, 2)


async def test_width_is_checked_against_what_the_route_expects(client):
    with pytest.raises(InvalidResponse) as caught:
        await client.embeddings(MINILM, ["a"], expected_width=768)
    assert (caught.value.expected, caught.value.got) == (768, 384)


async def test_vectors_are_put_back_in_index_order(emulator, client):
    texts = ["first text", "second, different", "third one here"]
    straight = (await client.embeddings(MINILM, texts, provider=pin("alpha"))).vectors
    emulator.control.corrupt("reverse", count=1)
    reordered = (
        await client.embeddings(MINILM, texts, provider=pin("alpha"), encoding_format="base64")
    ).vectors
    np.testing.assert_allclose(reordered, straight, atol=1e-6)


async def test_chat_with_scripted_tool_calls(emulator, client):
    emulator.control.script(
        [
            {"tool_calls": [{"name": "search_code", "arguments": {"query": "retry", "k": 3}}]},
            {"content": "Found it in retry.py."},
        ]
    )
    tools = [{"type": "function", "function": {"name": "search_code", "parameters": {"type": "object"}}}]
    first = await client.chat(
        "poolside/laguna-s-2.1", [{"role": "user", "content": "where is retry?"}], tools=tools
    )
    assert first.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("search_code", {"query": "retry", "k": 3})]
    second = await client.chat("poolside/laguna-s-2.1", [{"role": "user", "content": "and?"}])
    assert second.content == "Found it in retry.py." and second.tool_calls == ()
    third = await client.chat("poolside/laguna-s-2.1", [{"role": "user", "content": "hello"}])
    assert third.content == "echo: hello"


async def test_streamed_chat_assembles_content_and_tool_calls(emulator, client):
    emulator.control.script(
        [
            {
                "content": "Let me look that up now.",
                "tool_calls": [{"name": "grep", "arguments": {"pattern": "def retry"}}],
            },
        ]
    )
    deltas: list[str] = []
    result = await client.chat("m/x", [{"role": "user", "content": "q"}], stream=True, on_delta=deltas.append)
    assert result.content == "Let me look that up now." and len(deltas) > 1
    assert result.tool_calls[0].name == "grep" and result.tool_calls[0].arguments == {"pattern": "def retry"}
    assert result.finish_reason == "tool_calls" and result.usage["total_tokens"] > 0


async def test_mid_stream_error_event_is_a_stream_error(emulator, client):
    emulator.control.script(
        [
            {
                "content": "one two three four five",
                "stream_error": {
                    "after_chunks": 2,
                    "code": 429,
                    "message": "Rate limit exceeded",
                    "error_type": "rate_limit_exceeded",
                },
            },
        ]
    )
    with pytest.raises(StreamError) as caught:
        await client.chat("m/x", [{"role": "user", "content": "q"}], stream=True)
    err = caught.value
    assert err.code == 429 and err.partial == "one two " and err.retryable
    assert err.metadata["error_type"] == "rate_limit_exceeded"


async def test_rule_turns_match_by_substring_and_are_not_consumed(emulator, client):
    emulator.control.script([{"match": "ping", "content": "pong"}])
    for _ in range(2):
        assert (await client.chat("m/x", [{"role": "user", "content": "ping?"}])).content == "pong"


async def test_key_info_reports_what_the_control_api_set(emulator, client):
    info = await client.key_info()
    assert info.rate_limit is not None and info.rate_limit.requests * 60 / interval_seconds(
        info.rate_limit.interval
    ) == pytest.approx(1000 / 60)
    emulator.control.set_key(
        rate_limit={"requests": 1, "interval": "1m"},
        limit=5.0,
        limit_remaining=1.25,
        usage=3.75,
        is_free_tier=True,
    )
    info = await client.key_info()
    assert info.rate_limit.requests == 1 and interval_seconds(info.rate_limit.interval) == 60
    assert (info.limit, info.limit_remaining, info.usage, info.is_free_tier) == (5.0, 1.25, 3.75, True)
    emulator.control.set_key(rate_limit="absent")
    info = await client.key_info()
    assert info.rate_limit is None and "rate_limit" not in info.raw
    emulator.control.set_key(rate_limit=None)
    assert (await client.key_info()).rate_limit is None


async def test_credits_need_a_management_key(emulator, client):
    assert await client.credits() is None
    emulator.control.set_keys(management=[MGMT])
    emulator.control.set_credits(total_credits=20, total_usage=5.5)
    async with OpenRouterClient(MGMT, base_url=emulator.base_url) as mgmt:
        credits = await mgmt.credits()
    assert credits is not None and credits.remaining == 14.5


async def test_latency_and_concurrency_limit_produce_429_and_peak_counts(emulator, client):
    emulator.control.set_limits(concurrency=1)
    emulator.control.latency(base_ms=1500)
    slow = asyncio.create_task(client.embeddings(MINILM, ["slow"]))
    # Wait until the slow request is admitted (a condition, not a duration).
    for _ in range(500):
        if emulator.control.counters()["in_flight"] == 1:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(RateLimited) as caught:
        await client.embeddings(MINILM, ["fast"])
    assert caught.value.metadata["limit"] == "concurrency"
    await slow
    counters = emulator.control.counters()
    assert counters["peak_concurrency"] == 1 and counters["in_flight"] == 0


async def test_provider_adapter_chat_and_errors_are_provider_errors(emulator, client):
    provider = OpenRouterProvider(client, model="deepseek/deepseek-v4-flash", roles=["rlm"])
    assert provider.info.roles == frozenset({Role.RLM}) and provider.info.upstream is None
    assert (await provider.chat([{"role": "user", "content": "hi"}])).content == "echo: hi"
    emulator.control.fail(status=502, count=1)
    with pytest.raises(ProviderError):
        await provider.chat([{"role": "user", "content": "hi"}])
