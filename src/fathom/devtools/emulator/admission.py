"""How the emulator lets a request in, in OpenRouter's order: the key, then credits, the
in-flight budget, the rate and the concurrency gate; injected faults and latency before serving;
provider routing over a model's upstreams; and the documented error body every refusal gets
(`{"error": {"code", "message", "metadata"}}` with the same HTTP status).

It owns no endpoint: `api.py` calls it around each one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from fathom.devtools.emulator.limits import retry_after_header
from fathom.devtools.emulator.state import EmulatorConfig, EmulatorState, pinned_upstream

# What OpenRouter answers on each refusal of a key read: message and `error_type`.
KEY_FAILURES = {
    401: ("User not found.", "authentication"),
    402: ("Insufficient credits. Add more using https://openrouter.ai/credits", "payment_required"),
    429: ("Rate limit exceeded", "rate_limit_exceeded"),
}


class Refusal(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        metadata: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        page: str | None = None,
    ):
        self.status, self.message, self.metadata, self.headers = status, message, metadata, headers or {}
        self.page = page  # an HTML page in place of the JSON error body (a proxy's)

    def response(self) -> Response:
        if self.page is not None:
            return Response(self.page, status_code=self.status, media_type="text/html", headers=self.headers)
        return error_response(self.status, self.message, self.metadata, self.headers)


def error_response(
    status: int, message: str, metadata: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    err: dict[str, Any] = {"code": status, "message": message}
    if metadata is not None:
        err["metadata"] = metadata
    return JSONResponse({"error": err}, status_code=status, headers=headers)


Serve = Callable[[dict[str, Any]], Awaitable[Response]]


class Admission:
    def __init__(self, state: EmulatorState, cfg: EmulatorConfig):
        self.state, self.cfg = state, cfg

    def auth(self, request: Request, endpoint: str) -> str:
        state = self.state
        header = request.headers.get("authorization")
        state.requests[endpoint] += 1
        if not header or not state.authorize(header):
            state.issued["401"] += 1
            raise Refusal(
                401,
                "No auth credentials found" if not header else "User not found.",
                {"error_type": "authentication"},
            )
        return header

    def admit(self, endpoint: str) -> None:
        """Budget, rate and concurrency checks in OpenRouter's order; enters the gate."""
        state = self.state
        if state.credits_402.fires(endpoint, state.rng):
            state.issued["402_credits"] += 1
            raise Refusal(
                402,
                "Insufficient credits. Add more using https://openrouter.ai/credits",
                {"error_type": "payment_required", "limit_source": "openrouter_credits"},
            )
        if state.in_flight_402.fires(endpoint, state.rng):
            state.issued["402_in_flight"] += 1
            ra = float(state.in_flight_402.params.get("retry_after", 2))
            raise Refusal(
                402,
                "Too much spend is in flight for your balance; retry shortly.",
                {
                    "error_type": "payment_required",
                    "reason": "in_flight_budget_exhausted",
                    "limit_source": "openrouter_in_flight_budget",
                },
                {"Retry-After": retry_after_header(ra - 1e-9) if ra > 0 else "0"},
            )
        if state.rpm is not None:
            ok, wait = state.rpm.try_acquire()
            if not ok:
                raise self.rate_limited("rpm", state.rpm.rpm, wait)
        if not state.concurrency.try_enter():
            raise self.rate_limited("concurrency", state.concurrency.limit or 0, 1.0)
        state.accepted_at.append(self.cfg.clock())

    def rate_limited(self, kind: str, limit: int, wait: float) -> Refusal:
        state = self.state
        state.issued["429"] += 1
        headers = {
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(int((time.time() + wait) * 1000)),
        }
        if state.send_retry_after:
            fixed = state.retry_after_seconds
            headers["Retry-After"] = f"{fixed:g}" if fixed is not None else retry_after_header(wait)
        return Refusal(
            429, "Rate limit exceeded", {"error_type": "rate_limit_exceeded", "limit": kind}, headers
        )

    async def before_serving(self, endpoint: str, items: int) -> None:
        state = self.state
        if state.fail.fires(endpoint, state.rng):
            status = int(state.fail.params.get("status", 502))
            state.issued[f"{status}"] += 1
            raise Refusal(
                status,
                "Internal Server Error" if status == 500 else "Upstream error from the provider",
                {"error_type": "server" if status == 500 else "provider_unavailable"},
                page=state.fail.params.get("page"),
            )
        delay = state.latency_base + state.latency_per_item * items
        if delay > 0:
            await self.cfg.sleep(delay)

    def route(self, model: str, provider: dict[str, Any] | None) -> str:
        """OpenRouter's provider routing over this model's upstreams: `only`/`ignore` filter,
        `order` tries its slugs first, `allow_fallbacks: false` forbids anything else; with
        no order the request is load-balanced (random) across the upstreams."""
        state = self.state
        served = state.upstreams.get(model)
        if not served:
            raise Refusal(400, f"{model} is not a valid model ID", {"error_type": "invalid_request"})
        prefs = provider or {}
        candidates = list(served)
        if prefs.get("only") is not None:
            candidates = [u for u in candidates if u in set(prefs["only"])]
        if prefs.get("ignore"):
            candidates = [u for u in candidates if u not in set(prefs["ignore"])]
        allow_fallbacks = prefs.get("allow_fallbacks", True) is not False
        order = [u for u in (prefs.get("order") or []) if u in candidates]
        if prefs.get("order"):
            rest = [u for u in candidates if u not in order]
            state.rng.shuffle(rest)
            candidates = order + (rest if allow_fallbacks else [])
        else:
            state.rng.shuffle(candidates)
        if not candidates:
            raise Refusal(
                404,
                f"No endpoints found for {model} that match your provider routing "
                f"preferences (order={prefs.get('order')}, only={prefs.get('only')}).",
                {"error_type": "not_found"},
            )
        up = [u for u in candidates if u not in state.down]
        if not up:
            raise Refusal(
                503,
                "No available model provider meets your routing requirements",
                {"error_type": "provider_overloaded", "provider_name": candidates[0]},
                {"Retry-After": "1"},
            )
        return up[0]

    async def guarded(self, request: Request, endpoint: str, handler: Serve) -> Response:
        state = self.state
        try:
            self.auth(request, endpoint)
            try:
                body = await request.json()
            except ValueError:
                raise Refusal(
                    400, "Request body is not valid JSON", {"error_type": "invalid_request"}
                ) from None
            if not isinstance(body, dict):
                raise Refusal(400, "Request body must be a JSON object", {"error_type": "invalid_request"})
            if endpoint == "embeddings" and pinned_upstream(body.get("provider")) is None:
                state.unpinned_embeddings += 1  # counted before admission: it reached us
            self.admit(endpoint)
        except Refusal as r:
            return r.response()
        streaming = False
        try:
            resp = await handler(body)
            streaming = isinstance(resp, StreamingResponse)
            state.served[endpoint] += 1
            return resp
        except Refusal as r:
            return r.response()
        finally:
            if not streaming:  # a stream leaves the gate when it ends
                state.concurrency.leave()

    def key_refusal(self, endpoint: str) -> Refusal | None:
        """The answer `/control/key-fail` set for the key-info and credits reads, if it fires."""
        state = self.state
        if not state.key_fail.fires(endpoint, state.rng):
            return None
        status = int(state.key_fail.params["status"])
        state.issued[f"{status}_{endpoint}"] += 1
        message, kind = KEY_FAILURES.get(status, ("Internal Server Error", "server"))
        return Refusal(status, message, {"error_type": kind}, {"Retry-After": "1"} if status == 429 else None)
