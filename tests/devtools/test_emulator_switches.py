"""The emulator's failure switches, each through the real path: the product's pinned
`OpenRouterProvider` over HTTP against the emulator, alone (the typed error it raises) and in
an index pool beside a local encoder (what the product does about it: nothing from the bad
answer is written, and the job still writes every text exactly once, under the right pin).

Switches: a wrong vector count, HTTP 500s, a 200 whose body is not JSON, and a response that
names an upstream other than the pinned one.
"""

from __future__ import annotations

import numpy as np
import pytest

from fathom.clock import SystemClock
from fathom.inference.openrouter import (
    InvalidResponse,
    OpenRouterClient,
    OpenRouterProvider,
    UpstreamError,
    UpstreamMismatch,
)
from fathom.inference.pool import Pool
from fathom.inference.provider import Provider
from fathom.roles import Role
from tests.inference.e2e_fixtures import KEY, MINILM

TEXTS = [f"def handler_{i}(request):\n    return route(request, {i})" for i in range(24)]


def switch(emulator, name: str, count: int | None) -> None:
    if name == "http_500":
        emulator.control.fail(status=500, count=count, endpoints=["embeddings"])
    else:
        emulator.control.corrupt(name, count=count)


class Written:
    """The job's sink: who wrote each text, and whether any text was written twice."""

    def __init__(self) -> None:
        self.by: dict[int, str] = {}
        self.twice: list[int] = []

    async def __call__(self, indices: list[int], vectors: np.ndarray, provider: Provider) -> None:
        assert vectors.shape == (len(indices), 384) and np.isfinite(vectors).all()
        for i in indices:
            if i in self.by:
                self.twice.append(i)
            self.by[i] = provider.id


@pytest.mark.parametrize(
    ("name", "error", "retryable", "words"),
    [
        ("drop", InvalidResponse, False, "one vector per input"),
        ("http_500", UpstreamError, True, "500"),
        ("not_json", InvalidResponse, False, "not JSON"),
        ("other_upstream", UpstreamMismatch, False, "alpha"),
    ],
)
async def test_each_switch_gives_a_typed_error_and_the_job_writes_nothing_from_it(
    emulator, memo_emulator_encoders, memo_local, name, error, retryable, words
):
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        cloud = OpenRouterProvider(
            client, model=MINILM, roles=[Role.CODE_EMBEDDING], upstream="alpha", width=384
        )
        # Alone: the product's typed error, naming the problem.
        switch(emulator, name, count=1)
        with pytest.raises(error) as caught:
            await cloud.embed(TEXTS[:3])
        assert caught.value.retryable is retryable and words in str(caught.value)
        if name == "other_upstream":
            assert (caught.value.expected, caught.value.got) == ("alpha", "beta")
        assert (await cloud.embed(TEXTS[:2])).shape == (2, 384)  # the switch fired once

        # In an index job beside a local encoder: every bad answer is refused whole, the
        # cloud route is set aside, and every text is still written exactly once.
        switch(emulator, name, count=None)
        sink = Written()
        report = await Pool(
            [memo_local, cloud],
            clock=SystemClock(),
            max_failures=1,
            eject_base=0.05,
            eject_max=0.2,
            stall_timeout=60,
        ).run(TEXTS, sink)
        assert sink.twice == [] and sorted(sink.by) == list(range(len(TEXTS)))
        assert set(sink.by.values()) == {memo_local.id}  # nothing from the broken answers
        assert report.failures.get(cloud.id, 0) >= 1 and report.ejections.get(cloud.id, 0) >= 1
