"""The Provider cut-off between routing and I/O.

Routing, the pool, the gate and the budget speak only to this interface and never learn
whether a provider is an in-process model, a sidecar command over WebSocket or an HTTP call to
OpenRouter. Tests plug fakes in exactly here. A provider owns no policy: it serves what it is
asked, or raises a typed `ProviderError`.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from fathom.errors import ProviderError
from fathom.roles import Role


class Kind(StrEnum):
    LOCAL = "local"  # in-process model, or a sidecar's GPU / on-host server: never budgeted
    CLOUD = "cloud"  # OpenRouter, always through the key's CloudBudget


@dataclass(frozen=True)
class ProviderInfo:
    """What a provider is, as the gate and the provenance columns see it.

    `id` is stable across restarts for the same route (the gate keys verdicts on it);
    `upstream` is the OpenRouter upstream pin, None for local providers; `host` is the
    sidecar serving it, None for the server's own in-process model.
    """

    id: str
    kind: Kind
    roles: frozenset[Role]
    model: str
    width: int | None = None
    upstream: str | None = None
    host: str | None = None
    # Encoders: the longest input read, in the model's own tokens (special ones included);
    # None when unknown. Chunks are sized to it.
    max_tokens: int | None = None

    @property
    def is_cloud(self) -> bool:
        return self.kind is Kind.CLOUD


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model made it. `problem` says why it cannot run as made (arguments
    that are not a JSON object, no function name; `arguments` is then empty): that is the
    model's mistake, not the provider's, so it comes back here for the caller to correct."""

    id: str
    name: str
    arguments: dict[str, Any]
    problem: str | None = None


@dataclass(frozen=True)
class ChatResult:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None


class Unsupported(ProviderError):
    retryable = False


class Provider(ABC):
    """One route that can serve one or more roles. Subclasses override what they serve."""

    info: ProviderInfo

    @property
    def id(self) -> str:
        return self.info.id

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a float32 array of shape (len(texts), width), row i for texts[i]."""
        raise Unsupported(f"provider {self.id} does not embed")

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """Return one relevance score per document, in the documents' order."""
        raise Unsupported(f"provider {self.id} does not rerank")

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResult:
        raise Unsupported(f"provider {self.id} does not chat")

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"
