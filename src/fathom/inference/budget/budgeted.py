"""`BudgetedProvider`: a cloud provider that cannot send a request without the key's permit.

Wrapping is how the budget sits above every cloud provider: embeddings, rerank, chat and gate
probes all go through these three methods, so none can bypass it. A permit already bound in
the calling task (the pool takes one before it pulls a batch) is used instead of a second one.
A throttle raised by the inner provider — any `ProviderError` with `throttle_kind` "429" or
"402" and `retry_after`, or one named RateLimited / InFlightBudgetExhausted — is reported to
the permit and re-raised unchanged: the budget never retries, the pool decides what becomes of
the batch. A bound permit carries one request at a time; a concurrent call takes its own.

Local providers never take a permit. Wrapping one is allowed and is a plain pass-through, so a
caller may wrap every provider uniformly without starving GPUs when the cloud is throttled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from fathom.inference.budget.limiter import CloudBudget, bound_permit
from fathom.inference.provider import ChatResult, Provider

T = TypeVar("T")


class BudgetedProvider(Provider):
    def __init__(self, inner: Provider, budget: CloudBudget):
        self.inner = inner
        self.budget = budget
        self.info = inner.info

    async def _through(self, call: Callable[[], Awaitable[T]]) -> T:
        if not self.info.is_cloud:
            return await call()
        held = bound_permit(self.budget)
        if held is None:
            async with self.budget.permit():
                return await call()
        held.in_use = True
        try:
            return await call()
        except BaseException as exc:
            held.report(exc)
            raise
        finally:
            held.in_use = False

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await self._through(lambda: self.inner.embed(texts))

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        return await self._through(lambda: self.inner.rerank(query, documents))

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResult:
        return await self._through(lambda: self.inner.chat(messages, tools, **options))

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # Anything else the inner provider exposes (a client, counters) stays reachable.
        if name == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"<BudgetedProvider {self.id}>"
