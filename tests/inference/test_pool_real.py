"""The pool through the real path: registry → router → pool over the in-process MiniLM
encoder, on the system clock, with a second route that drops a batch mid-job."""

from collections.abc import Sequence

import numpy as np

from fathom.clock import SystemClock
from fathom.config import RoutingState
from fathom.errors import ProviderUnavailable
from fathom.inference.local import LocalEncoder
from fathom.inference.provider import Provider, ProviderInfo
from fathom.inference.registry import ProviderRegistry
from fathom.inference.router import Router
from fathom.roles import Role
from tests.inference.pool_fixtures import ClearedFlags


class SameModelSidecar(Provider):
    """A second route to the same real model (as a sidecar serving it would be) whose first
    batch is lost in transit."""

    def __init__(self, inner: LocalEncoder):
        self.inner = inner
        self.info = ProviderInfo(
            id="sidecar:minilm",
            kind=inner.info.kind,
            roles=inner.info.roles,
            model=inner.info.model,
            width=inner.info.width,
            host="gpu-1",
        )
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        vectors = await self.inner.embed(texts)
        if self.calls == 1:
            raise ProviderUnavailable("sidecar connection reset mid-batch")
        return vectors


async def test_index_job_over_the_real_encoder_writes_every_chunk_once(local_encoder):
    texts = [f"def handler_{i}(request):\n    return route(request, {i})" for i in range(24)]
    registry = ProviderRegistry(clock=SystemClock())
    sidecar = SameModelSidecar(local_encoder)
    registry.add(local_encoder)
    registry.add(sidecar)
    role = Role.CODE_EMBEDDING
    cleared = ClearedFlags([(role, local_encoder.id), (role, sidecar.id)])
    router = Router(RoutingState(), registry, is_cleared=cleared)  # defaults: aggregate

    written: dict[int, tuple[str, np.ndarray]] = {}
    twice: list[int] = []

    async def sink(indices, vectors, provider):
        for i, v in zip(indices, vectors):
            if i in written:
                twice.append(i)
            written[i] = (provider.id, v)

    report = await router.pool(role, initial_batch=4, max_batch=16).run(texts, sink)

    assert twice == [] and sorted(written) == list(range(len(texts)))
    assert report.failures == {sidecar.id: 1}
    expected = local_encoder.encode_sync(texts)
    got = np.stack([written[i][1] for i in range(len(texts))])
    assert got.shape == (len(texts), 384)
    assert np.allclose(got, expected, atol=1e-5)  # each row is its own text's vector
    assert {pid for pid, _ in written.values()} <= {local_encoder.id, sidecar.id}
    assert sum(report.per_provider.values()) == len(texts)
