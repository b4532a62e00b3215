"""The emulator's HTTP surface: OpenRouter's documented endpoints under /api/v1, and a JSON
control API under /control for tests to steer faults and read counters.

It follows OpenRouter's documentation, not a guess: error bodies are
`{"error": {"code", "message", "metadata"}}` with the same HTTP status; a 429 carries
`metadata.error_type = "rate_limit_exceeded"` and, when enabled, `Retry-After`; an in-flight
budget 402 carries `metadata.reason = "in_flight_budget_exhausted"` (and
`limit_source = "openrouter_in_flight_budget"`) with `Retry-After`; a pin that no upstream
satisfies is a 404 "No endpoints found …", a pinned upstream that is down a 503; the `provider`
field of a response names the upstream that served; a streamed chat may end in the documented
mid-stream error chunk with `finish_reason: "error"`. `GET /key` answers `{"data": {label,
limit, limit_remaining, usage…, is_free_tier, rate_limit?}}` (`PUT /control/key` sets it and
refuses a shape OpenRouter never sends; a degenerate `rate_limit` — 0, -1, 1/min, null or
absent — is allowed, as real keys report them); `GET /credits` answers only a management key
(403 otherwise); `POST /control/key-fail` makes either answer 401, 402, 429 or 5xx. With
`max_inputs` set (`PUT /control/limits`), an embedding request carrying more inputs is refused
with a 400 the way OpenRouter relays an upstream's refusal: "Provider returned error", the
upstream's own body ("Too many inputs. The max number of inputs is 32…") in `metadata.raw`.

The parts: `admission.py` lets a request in (auth, budget, rate, faults, provider routing)
and shapes every refusal; `api.py` answers the OpenRouter endpoints; `switches.py` holds the
/control switches. This module only assembles them.

It refuses to be a product: it binds where it is told (127.0.0.1 in every fixture), has no
persistence, and the control API has no auth because it must never face a network.
"""

from __future__ import annotations

from fastapi import FastAPI

from fathom.devtools.control_api import add_control_routes
from fathom.devtools.emulator.admission import KEY_FAILURES, Admission
from fathom.devtools.emulator.api import OpenRouterApi
from fathom.devtools.emulator.state import EmulatorConfig, EmulatorState
from fathom.devtools.emulator.switches import CORRUPT_MODES, Switches, key_report_problem

__all__ = ["create_app", "CORRUPT_MODES", "KEY_FAILURES", "key_report_problem"]


def create_app(config: EmulatorConfig | None = None) -> FastAPI:
    cfg = config or EmulatorConfig()
    state = EmulatorState(cfg)
    app = FastAPI(title="OpenRouter emulator (dev/test only)", docs_url=None, redoc_url=None)
    app.state.emulator = state
    app.include_router(OpenRouterApi(state, cfg, Admission(state, cfg)).router())
    add_control_routes(app, state)  # reset, counters, chat script
    app.include_router(Switches(state, cfg).router())
    return app
