"""The OpenRouter emulator in virtual time: its real app, called in-process over httpx's ASGI
transport, with its clock, latency and encoders on a `FakeClock`.

A minute of rate-limited traffic at 500 ms latency then takes milliseconds and comes out the
same every run: the emulator's sliding RPM window, its latency sleeps, the budget's window and
cooldowns and the pool's timing all read one virtual clock, which jumps only when every task
waits. Every request still goes through the emulator's HTTP app (routing, auth, JSON bodies,
status codes, headers), and every knob through its `/control` API.

The emulator's encoders are replaced here by a cheap deterministic one (a unit vector per
text from its hash): these tests measure rates, not vectors, and a real model inline on the
event loop would take real seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from fathom.devtools.emulator import EmulatorConfig, create_app
from fathom.devtools.emulator import encoders as emu
from tests.fake_clock import FakeClock

ROOT = "http://emulator.invalid"
BASE_URL = ROOT + "/api/v1"
WIDTH = 384


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def hashed(texts: Sequence[str]) -> np.ndarray:
    out = np.empty((len(texts), WIDTH), np.float32)
    for i, t in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(WIDTH).astype(np.float32)
        out[i] = v / np.linalg.norm(v)
    return out


@dataclass
class VirtualEmulator:
    clock: FakeClock
    http: httpx.AsyncClient  # for OpenRouterClient(..., base_url=BASE_URL, http=http)
    state: Any  # the emulator's state, read-only

    async def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        r = await self.http.request(method, f"{ROOT}/control{path}", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    async def counters(self) -> dict[str, Any]:
        return await self.control("GET", "/counters")


@contextlib.asynccontextmanager
async def virtual_emulator(clock: FakeClock, seed: int = 0) -> AsyncIterator[VirtualEmulator]:
    saved = {v: emu._cache.get(v) for v in emu.VARIANTS}
    with emu._cache_lock:
        for v in emu.VARIANTS:
            emu._cache[v] = emu.Encoder(v, hashed)
    app = create_app(EmulatorConfig(clock=clock.now, sleep=clock.sleep, offload=inline, seed=seed))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ROOT, timeout=None)
    try:
        yield VirtualEmulator(clock, http, app.state.emulator)
    finally:
        await http.aclose()
        with emu._cache_lock:
            for v, enc in saved.items():
                if enc is None:
                    emu._cache.pop(v, None)
                else:
                    emu._cache[v] = enc
