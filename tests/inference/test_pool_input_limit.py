"""A provider's per-request input limit, learned by the pool at the Provider cut-off.

A fake provider refuses every batch over its limit the way `openrouter.BatchTooLarge` does
(`too_large`); the pool halves that provider's batch, keeps the size as its ceiling in the
batch history, retries the refused items at the smaller size, and never goes past the ceiling
again, whatever its growth or a key's rate floor would want. In FakeClock virtual time. The
refusal shapes real providers answer are read by the OpenRouter client (over httpx's mock
transport here; over real HTTP against the emulator in `test_provider_input_limit.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx
import numpy as np
import pytest

from fathom.config import BatchRecord, RoutingStore
from fathom.errors import ProviderError
from fathom.inference.budget import KeyRate
from fathom.inference.openrouter import BadRequest, BatchTooLarge, ContextLengthExceeded, OpenRouterClient
from fathom.inference.pool import Pool, Sizing
from fathom.inference.provider import Kind
from fathom.service import record_of, sizing_of
from tests.fake_clock import FakeClock
from tests.inference.pool_fixtures import Collector, FakeEmbedder, texts_for


class TooManyInputs(ProviderError):
    """Shaped like `openrouter.BatchTooLarge`: duck-typed by the pool."""

    too_large = True
    provider_fault = False
    retryable = False


class LimitedEmbedder(FakeEmbedder):
    """Refuses every request carrying more than `max_inputs` texts after its round trip
    (`latency`), as a remote endpoint does; counts them."""

    def __init__(self, *args, max_inputs: int, **kw):
        super().__init__(*args, **kw)
        self.max_inputs = max_inputs
        self.refused: list[int] = []

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) > self.max_inputs:
            self.refused.append(len(texts))
            await self.clock.sleep(self.latency)
            raise TooManyInputs(f"too many inputs: {len(texts)} > {self.max_inputs}")
        return await super().embed(texts)

    def served_sizes(self) -> list[int]:
        return [len(c.texts) for c in self.calls if c.outcome == "ok"]


# Every job is bounded: a pool that kept sending refused batches would write nothing for this
# many virtual seconds and end with `PoolStalled` instead of looping.
STALL = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def cloud(clock: FakeClock, limit: int) -> LimitedEmbedder:
    # A remote endpoint: a fixed round trip plus a cost per item, so batches grow past 32.
    return LimitedEmbedder("cloud", clock, rate=2000, latency=0.05, kind=Kind.CLOUD, max_inputs=limit)


async def test_one_refusal_sets_the_ceiling_and_the_refused_items_are_retried(clock):
    """Four lanes ramping up together: the first batch over the limit is refused, once; its
    items come back at the smaller size; the job writes everything exactly once."""
    p = cloud(clock, 32)
    history: dict[str, Sizing] = {}
    sink = Collector(clock)
    report = await Pool([p], clock=clock, stall_timeout=STALL, lanes=4, history=history).run(
        texts_for(2000), sink
    )

    sink.assert_exactly_once(2000)
    assert len(p.refused) == 1 and p.refused[0] > 32, p.refused
    assert report.too_large == {"cloud": 1}
    assert report.failures == {} and report.ejections == {}  # a limit is not a sick provider
    assert history["cloud"].ceiling == 32  # the largest size it served (growth doubles 4..32)
    assert history["cloud"].batch_size == 32  # where the next job starts: not past it
    assert max(p.served_sizes()) == 32
    assert p.served_sizes().count(32) > 10  # it kept sending full batches at the ceiling


async def test_the_ceiling_holds_in_the_next_job_and_a_success_at_it_does_not_raise_it(clock):
    p = cloud(clock, 32)
    history: dict[str, Sizing] = {}
    await Pool([p], clock=clock, stall_timeout=STALL, lanes=4, history=history).run(
        texts_for(1000), Collector(clock)
    )
    assert len(p.refused) == 1
    p.calls.clear()
    p.refused.clear()

    sink = Collector(clock)
    report = await Pool([p], clock=clock, stall_timeout=STALL, lanes=4, history=history).run(
        texts_for(3000), sink
    )
    sink.assert_exactly_once(3000)
    assert p.refused == [] and report.too_large == {}
    assert max(p.served_sizes()) == 32 and history["cloud"].ceiling == 32
    # The same provider lifts its limit: the ceiling stays until the operator removes it.
    p.max_inputs = 1000
    await Pool([p], clock=clock, stall_timeout=STALL, lanes=4, history=history).run(
        texts_for(1000), Collector(clock)
    )
    assert history["cloud"].ceiling == 32 and max(p.served_sizes()) == 32


async def test_a_key_rate_floor_never_sends_past_the_ceiling(clock):
    """Under a trusted RPM the pool sends max_batch (requests are the scarce resource); a
    provider that takes fewer inputs is halved down to what it takes, and stays there."""
    p = cloud(clock, 32)
    history: dict[str, Sizing] = {}
    rate = KeyRate(per_s=100.0, lanes_follow=True)
    sink = Collector(clock)
    await Pool(
        [p],
        clock=clock,
        stall_timeout=STALL,
        lanes=4,
        history=history,
        max_batch=256,
        rate_limit=lambda _: rate,
    ).run(texts_for(2000), sink)
    sink.assert_exactly_once(2000)
    # 256 -> 128 -> 64 -> 32: one refusal per halving, each tried by one lane at a time.
    assert p.refused == [256, 128, 64], p.refused
    assert history["cloud"].ceiling == 32 and max(p.served_sizes()) == 32

    p.calls.clear()
    p.refused.clear()
    await Pool(
        [p],
        clock=clock,
        stall_timeout=STALL,
        lanes=4,
        history=history,
        max_batch=256,
        rate_limit=lambda _: rate,
    ).run(texts_for(2000), Collector(clock))
    assert p.refused == [] and set(p.served_sizes()) <= {32} | set(range(1, 32))


async def test_a_ceiling_is_the_largest_size_served_below_the_refusal_when_that_beats_half(clock):
    """45 items a second at a 1 s target: from 30 (served in an earlier job) it grows to 45,
    which a provider taking 40 refuses. Half of 45 is 22; it served 30: the ceiling is 30."""
    p = LimitedEmbedder("cloud", clock, rate=45, kind=Kind.CLOUD, max_inputs=40)
    history = {"cloud": Sizing(30, 1 / 45)}
    history["cloud"].accepted = 30
    sink = Collector(clock)
    await Pool([p], clock=clock, stall_timeout=STALL, lanes=1, target_latency=1.0, history=history).run(
        texts_for(600), sink
    )
    sink.assert_exactly_once(600)
    assert p.refused == [45] and history["cloud"].ceiling == 30
    assert set(p.served_sizes()[1:-1]) == {30}


async def test_a_single_input_refused_as_too_large_is_a_failure_not_a_loop(clock):
    """Nothing smaller exists: the provider is ejected like any failing one, and the other
    provider writes the job."""
    p = cloud(clock, 0)
    local = FakeEmbedder("local", clock, rate=50)
    history: dict[str, Sizing] = {}
    sink = Collector(clock)
    report = await Pool([p, local], clock=clock, stall_timeout=STALL, history=history, eject_base=1000).run(
        texts_for(300), sink
    )
    sink.assert_exactly_once(300)
    assert history["cloud"].ceiling == 1 and report.ejections.get("cloud") == 1
    assert p.served_sizes() == [] and len(p.refused) <= 4


def test_the_ceiling_is_kept_in_the_batch_history_across_a_restart(tmp_path):
    sizing = Sizing(32, 0.01, ceiling=32)
    RoutingStore(tmp_path).record_batches("code", {"cloud": record_of(sizing)})
    stored = json.loads((tmp_path / "routing.json").read_text())["batches"]["code"]["cloud"]
    assert stored["ceiling"] == 32
    again = sizing_of(RoutingStore(tmp_path).load().batches["code"]["cloud"])
    assert again.ceiling == 32 and again.batch_size == 32
    # A ceiling that is not a size is dropped with its record, never a refused route.
    with pytest.raises(ValueError):
        BatchRecord(batch_size=4, ceiling=0)


# -- the refusal shapes real providers answer ------------------------------------------------


def relayed(message: str) -> dict:
    """OpenRouter's relay of an upstream's refusal: its own message, the upstream's in raw."""
    return {
        "error": {
            "code": 400,
            "message": "Provider returned error",
            "metadata": {"provider_name": "alpha", "raw": json.dumps({"error": {"message": message}})},
        }
    }


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, {"error": {"code": 400, "message": "Too many inputs. The max number of inputs is 16."}}),
        (400, relayed("Too many inputs. The max number of inputs is 2048.")),
        (400, relayed("invalid request: too many texts - total number of texts must be at most 96")),
        (400, relayed("Too many inputs in request, split into more batches.")),
        (400, relayed("batch size 64 > maximum allowed batch size 32")),
        (400, relayed("The batch size limit is 128. Your batch size is 200.")),
        (400, relayed("The max allowed tokens per submitted batch is 120000.")),
        (400, relayed("At most 100 requests can be in one batch.")),
        (400, relayed("input array too long")),
        (400, relayed("List should have at most 32 items after validation, not 64")),
        (400, {"error": {"code": 400, "message": "Request too large: exceeds the maximum batch size"}}),
        (413, "<html><head><title>413 Request Entity Too Large</title></head></html>"),
        (413, {"error": {"code": 413, "message": "Payload Too Large"}}),
        (413, ""),  # a proxy's bare refusal: the status alone says it
    ],
)
async def test_the_client_reads_every_real_too_large_shape(status, body):
    def answer(request: httpx.Request) -> httpx.Response:
        text = body if isinstance(body, str) else json.dumps(body)
        return httpx.Response(status, text=text)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        client = OpenRouterClient("sk-or-v1-shapes", base_url="http://upstream/api/v1", http=http)
        with pytest.raises(BatchTooLarge) as caught:
            await client.embeddings("m", ["a", "b"])
    assert caught.value.too_large and caught.value.status == status
    assert "fewer" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (relayed("This model's maximum context length is 512 tokens."), BadRequest),
        (
            {"error": {"code": 400, "message": "This model's maximum context length is 512 tokens."}},
            ContextLengthExceeded,
        ),
        ({"error": {"code": 400, "message": "encoding_format must be float or base64"}}, BadRequest),
    ],
)
async def test_other_refusals_are_not_taken_for_a_batch_limit(body, error):
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(400, json=body))
    ) as http:
        client = OpenRouterClient("sk-or-v1-shapes", base_url="http://upstream/api/v1", http=http)
        with pytest.raises(error) as caught:
            await client.embeddings("m", ["a"])
    assert not isinstance(caught.value, BatchTooLarge)
