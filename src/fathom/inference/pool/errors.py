"""How a pool's batch can go wrong: the errors a pool raises, the duck-typed tests that sort a
provider's failure (a throttle, a batch too large), and the check of what a provider returned.

Duck-typed so routing never imports a provider module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fathom.errors import NoProviderAvailable, ProviderError
from fathom.inference.provider import Provider


class MalformedBatch(ProviderError):
    """A provider returned vectors that cannot be written (wrong count or width, or values
    that are not finite). Nothing from that batch is written; the provider is ejected."""

    retryable = False

    def __init__(self, provider_id: str, problem: str):
        self.provider_id, self.problem = provider_id, problem
        super().__init__(f"provider {provider_id} returned a malformed batch: {problem}")


class PoolStalled(NoProviderAvailable):
    """No batch finished for `stall_timeout` seconds: nothing that may serve could."""

    def __init__(self, done: int, total: int, waited: float, members: dict[str, str]):
        self.done, self.total, self.waited, self.members = done, total, waited, members
        state = "; ".join(f"{pid}: {s}" for pid, s in sorted(members.items())) or "no provider at all"
        super().__init__(
            f"the embedding pool made no progress for {waited:.0f}s with {total - done} of "
            f"{total} items left ({state}). Start a sidecar, fix the failing providers, or "
            f"check the role's policy; the items written so far are kept."
        )


def is_too_large(exc: BaseException) -> bool:
    """The provider refused a request for carrying more than it takes at once (too many
    inputs, too many tokens over the batch, a 413): the same items in smaller batches pass.
    Duck-typed on `too_large`; a sidecar relays the error's class name as `code`."""
    return getattr(exc, "too_large", False) is True or getattr(exc, "code", None) == "BatchTooLarge"


def is_throttle(exc: BaseException) -> bool:
    """A rate limit (429) or an exhausted in-flight budget (402): the account says wait; the
    provider is healthy, so it is paused, never ejected. Duck-typed on `throttle_kind` (and
    `retry_after`), so routing never imports a provider module."""
    return getattr(exc, "throttle_kind", None) in ("429", "402")


def check_batch(provider: Provider, raw: Any, n: int) -> np.ndarray:
    arr = np.asarray(raw, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise MalformedBatch(provider.id, f"expected {n} vectors, got shape {arr.shape}")
    width = provider.info.width
    if width is not None and arr.shape[1] != width:
        raise MalformedBatch(provider.id, f"expected width {width}, got {arr.shape[1]}")
    if not np.isfinite(arr).all():
        raise MalformedBatch(provider.id, "non-finite values")
    return arr
