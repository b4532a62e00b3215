"""What the emulator is configured to do, and what it has seen.

`EmulatorConfig` is fixed at start (which upstreams serve which model, which keys exist, the
clock, the seed). `EmulatorState` is everything the control API may change at run time and
everything a test may read back; `reset()` returns it to the start. Keys are never stored:
the state keeps sha256 hashes only, for both the keys it accepts and the keys it has seen.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fathom.devtools.emulator.chat import ScriptedChat
from fathom.devtools.emulator.limits import ConcurrencyGate, RpmWindow

MINILM = "sentence-transformers/all-minilm-l6-v2"
E5_SMALL = "intfloat/multilingual-e5-small"

# model -> {upstream slug: encoder variant}, in the order OpenRouter would list them.
DEFAULT_UPSTREAMS: dict[str, dict[str, str]] = {
    MINILM: {"alpha": "fp32", "beta": "int8"},
    E5_SMALL: {"gamma": "original", "delta": "enpt"},
}
RERANK_UPSTREAM = "emu-rerank"
CHAT_UPSTREAM = "emu-scripted"

DEFAULT_KEY_REPORT: dict[str, Any] = {
    "label": "sk-or-v1-emu...lator",
    "limit": None,
    "limit_remaining": None,
    "limit_reset": None,
    "include_byok_in_limit": False,
    "usage": 0.0,
    "usage_daily": 0.0,
    "usage_weekly": 0.0,
    "usage_monthly": 0.0,
    "is_free_tier": False,
    "is_management_key": False,
    # Deprecated by OpenRouter ("safe to ignore") but still sent: tests set it absent,
    # present, or degenerate.
    "rate_limit": {
        "requests": 1000,
        "interval": "1h",
        "note": "This field is deprecated and safe to ignore.",
    },
}


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class EmulatorConfig:
    upstreams: dict[str, dict[str, str]] = field(
        default_factory=lambda: {m: dict(u) for m, u in DEFAULT_UPSTREAMS.items()}
    )
    # None: any `sk-or-…` key is valid. Otherwise only these (kept as hashes in the state).
    accepted_keys: list[str] | None = None
    management_keys: list[str] = field(default_factory=list)
    seed: int = 0
    clock: Callable[[], float] = time.monotonic
    # How latency is served. With a virtual clock's `now` and `sleep` (the tests' `FakeClock`)
    # and the app called in-process (httpx's ASGI transport), rate limits and latency run in
    # virtual time: a minute of traffic is exact and takes milliseconds.
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
    # How an encoder runs off the event loop. A virtual-time test runs it inline instead: a
    # thread looks idle to a virtual clock, which would jump while the encoder works.
    offload: Callable[..., Awaitable[Any]] = asyncio.to_thread
    rerank_variant: str = "fp32"
    remember: bool = False  # answer an embedding text seen before (per variant) from memory


@dataclass
class Fault:
    """A counted fault: fires on the next `remaining` matching requests (None: every one),
    or with probability `rate` when that is set."""

    remaining: int | None = 0
    rate: float = 0.0
    endpoints: frozenset[str] | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def fires(self, endpoint: str, rng: random.Random) -> bool:
        if self.endpoints is not None and endpoint not in self.endpoints:
            return False
        if self.rate > 0.0:
            return rng.random() < self.rate
        if self.remaining is None:
            return True
        if self.remaining > 0:
            self.remaining -= 1
            return True
        return False


def pinned_upstream(prefs: Any) -> str | None:
    """The one upstream a request's provider routing allows, or None when it allows more than
    one (no `only`/`order`, several slugs, or fallbacks left on for an `order`): the pin every
    embedding request must carry."""
    if not isinstance(prefs, dict):
        return None
    only, order = prefs.get("only"), prefs.get("order")
    if only is not None:
        allowed = set(only)
    elif order and prefs.get("allow_fallbacks", True) is False:
        allowed = set(order)
    else:
        return None
    allowed -= set(prefs.get("ignore") or ())
    return next(iter(allowed)) if len(allowed) == 1 else None


class EmulatorState:
    def __init__(self, config: EmulatorConfig):
        self.config = config
        self.reset()

    def reset(self) -> None:
        cfg = self.config
        self.rng = random.Random(cfg.seed)
        self.upstreams = {m: dict(u) for m, u in cfg.upstreams.items()}
        self.down: set[str] = set()
        self.accepted_hashes = None if cfg.accepted_keys is None else {key_hash(k) for k in cfg.accepted_keys}
        self.management_hashes = {key_hash(k) for k in cfg.management_keys}
        self.credits_for_all = False
        self.key_report: dict[str, Any] = {
            k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULT_KEY_REPORT.items()
        }
        self.credits = {"total_credits": 10.0, "total_usage": 0.0}
        self.rpm: RpmWindow | None = None
        self.concurrency = ConcurrencyGate(None)
        self.send_retry_after = True
        self.retry_after_seconds: float | None = None  # fixed value instead of the computed one
        # The most inputs one embedding request may carry (None: no limit); above it a 400,
        # worded as real embedding providers word it, as OpenRouter relays it.
        self.max_inputs: int | None = None
        self.fail = Fault()
        self.in_flight_402 = Fault()
        self.credits_402 = Fault()
        self.key_fail = Fault()  # GET /key and /credits answering 401/402/429/5xx
        self.corrupt = Fault()
        self.latency_base = 0.0
        self.latency_per_item = 0.0
        self.chat = ScriptedChat()
        self.requests: Counter[str] = Counter()
        self.served: Counter[str] = Counter()
        self.by_upstream: Counter[str] = Counter()
        self.by_model: Counter[str] = Counter()
        self.issued: Counter[str] = Counter()  # 401, 402s, 429s, injected 5xx by kind
        self.keys_seen: set[str] = set()
        self.accepted_at: list[float] = []  # clock times of admitted inference requests
        self.unpinned_embeddings = 0  # embedding requests that more than one upstream could serve

    # -- keys

    def authorize(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        key = header[len("Bearer ") :].strip()
        h = key_hash(key)
        self.keys_seen.add(h)
        if self.accepted_hashes is None:
            return key.startswith("sk-or-") and len(key) > len("sk-or-")
        return h in self.accepted_hashes

    def is_management(self, header: str) -> bool:
        key = header[len("Bearer ") :].strip()
        return self.credits_for_all or key_hash(key) in self.management_hashes

    # -- read back

    def counters(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "served": dict(self.served),
            "by_upstream": dict(self.by_upstream),
            "by_model": dict(self.by_model),
            "issued": dict(self.issued),
            "rate_limited": self.issued["429"],
            "too_many_inputs": self.issued["400_too_many_inputs"],
            "peak_concurrency": self.concurrency.peak,
            "in_flight": self.concurrency.in_flight,
            "key_hashes": sorted(self.keys_seen),
            "accepted_at": list(self.accepted_at),
            "unpinned_embeddings": self.unpinned_embeddings,
        }

    def snapshot(self) -> dict[str, Any]:
        return {
            "upstreams": {m: dict(u) for m, u in self.upstreams.items()},
            "down": sorted(self.down),
            "key": dict(self.key_report),
            "credits": dict(self.credits),
            "rpm": self.rpm.rpm if self.rpm else None,
            "concurrency": self.concurrency.limit,
            "max_inputs": self.max_inputs,
            "retry_after": self.send_retry_after,
            "latency": {"base_ms": self.latency_base * 1000, "per_item_ms": self.latency_per_item * 1000},
            "script_turns": len(self.chat.turns),
        }
