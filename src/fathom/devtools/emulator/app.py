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

It refuses to be a product: it binds where it is told (127.0.0.1 in every fixture), has no
persistence, and the control API has no auth because it must never face a network.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from fathom.devtools.control_api import add_control_routes, bad, body_of
from fathom.devtools.emulator.chat import content_pieces, tool_call_fragments
from fathom.devtools.emulator.encoders import VARIANTS, Remembering, encoder
from fathom.devtools.emulator.limits import ConcurrencyGate, RpmWindow, retry_after_header
from fathom.devtools.emulator.state import (
    CHAT_UPSTREAM,
    RERANK_UPSTREAM,
    EmulatorConfig,
    EmulatorState,
    Fault,
    key_hash,
    pinned_upstream,
)


class _Refusal(Exception):
    def __init__(self, status: int, message: str, metadata: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        self.status, self.message, self.metadata, self.headers = status, message, metadata, headers or {}


def _error(status: int, message: str, metadata: dict[str, Any] | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    err: dict[str, Any] = {"code": status, "message": message}
    if metadata is not None:
        err["metadata"] = metadata
    return JSONResponse({"error": err}, status_code=status, headers=headers)


CORRUPT_MODES = ("truncate", "drop", "nan", "reverse", "duplicate_index", "not_json", "other_upstream")


def _raw_json(payload: Any) -> Response:
    # allow_nan: a broken upstream may really send NaN; the client must refuse it.
    return Response(json.dumps(payload, allow_nan=True), media_type="application/json")


# What OpenRouter answers on each refusal of a key read: message and `error_type`.
KEY_FAILURES = {
    401: ("User not found.", "authentication"),
    402: ("Insufficient credits. Add more using https://openrouter.ai/credits", "payment_required"),
    429: ("Rate limit exceeded", "rate_limit_exceeded"),
}


def _number_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def key_report_problem(b: dict[str, Any]) -> str | None:
    """Why a `/control/key` body would make GET /key answer something OpenRouter never
    sends, or None. `rate_limit`: {requests: number, interval: "10s"}, null, or "absent"
    (degenerate figures such as 0 or -1 requests are allowed: real keys report them)."""
    for k in ("limit", "limit_remaining", "usage", "usage_daily", "usage_weekly", "usage_monthly"):
        if k in b and not _number_or_null(b[k]):
            return f"{k} must be a number or null"
    for k in ("is_free_tier", "is_management_key", "include_byok_in_limit"):
        if k in b and not isinstance(b[k], bool):
            return f"{k} must be true or false"
    if "rate_limit" in b:
        rl = b["rate_limit"]
        if rl is None or rl == "absent":
            return None
        if not (isinstance(rl, dict) and set(rl) <= {"requests", "interval", "note"}
                and _number_or_null(rl.get("requests")) and rl.get("requests") is not None
                and isinstance(rl.get("interval"), str)):
            return 'rate_limit must be {"requests": number, "interval": "10s"}, null or "absent"'
    return None


def create_app(config: EmulatorConfig | None = None) -> FastAPI:
    cfg = config or EmulatorConfig()
    state = EmulatorState(cfg)
    remembered = Remembering() if cfg.remember else None
    app = FastAPI(title="OpenRouter emulator (dev/test only)", docs_url=None, redoc_url=None)
    app.state.emulator = state

    # ------------------------------------------------------------------ admission

    def auth(request: Request, endpoint: str) -> str:
        header = request.headers.get("authorization")
        state.requests[endpoint] += 1
        if not state.authorize(header):
            state.issued["401"] += 1
            raise _Refusal(401, "No auth credentials found" if not header else "User not found.",
                           {"error_type": "authentication"})
        return header  # type: ignore[return-value]

    def admit(endpoint: str) -> None:
        """Budget, rate and concurrency checks in OpenRouter's order; enters the gate."""
        if state.credits_402.fires(endpoint, state.rng):
            state.issued["402_credits"] += 1
            raise _Refusal(402, "Insufficient credits. Add more using https://openrouter.ai/credits",
                           {"error_type": "payment_required", "limit_source": "openrouter_credits"})
        if state.in_flight_402.fires(endpoint, state.rng):
            state.issued["402_in_flight"] += 1
            ra = float(state.in_flight_402.params.get("retry_after", 2))
            raise _Refusal(402, "Too much spend is in flight for your balance; retry shortly.",
                           {"error_type": "payment_required", "reason": "in_flight_budget_exhausted",
                            "limit_source": "openrouter_in_flight_budget"},
                           {"Retry-After": retry_after_header(ra - 1e-9) if ra > 0 else "0"})
        if state.rpm is not None:
            ok, wait = state.rpm.try_acquire()
            if not ok:
                raise rate_limited("rpm", state.rpm.rpm, wait)
        if not state.concurrency.try_enter():
            raise rate_limited("concurrency", state.concurrency.limit or 0, 1.0)
        state.accepted_at.append(cfg.clock())

    def rate_limited(kind: str, limit: int, wait: float) -> _Refusal:
        state.issued["429"] += 1
        headers = {
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(int((time.time() + wait) * 1000)),
        }
        if state.send_retry_after:
            fixed = state.retry_after_seconds
            headers["Retry-After"] = (f"{fixed:g}" if fixed is not None else retry_after_header(wait))
        return _Refusal(429, "Rate limit exceeded", {"error_type": "rate_limit_exceeded", "limit": kind}, headers)

    async def before_serving(endpoint: str, items: int) -> None:
        if state.fail.fires(endpoint, state.rng):
            status = int(state.fail.params.get("status", 502))
            state.issued[f"{status}"] += 1
            raise _Refusal(status, "Internal Server Error" if status == 500 else "Upstream error from the provider",
                           {"error_type": "server" if status == 500 else "provider_unavailable"})
        delay = state.latency_base + state.latency_per_item * items
        if delay > 0:
            await cfg.sleep(delay)

    def route(model: str, provider: dict[str, Any] | None) -> str:
        """OpenRouter's provider routing over this model's upstreams: `only`/`ignore` filter,
        `order` tries its slugs first, `allow_fallbacks: false` forbids anything else; with
        no order the request is load-balanced (random) across the upstreams."""
        served = state.upstreams.get(model)
        if not served:
            raise _Refusal(400, f"{model} is not a valid model ID", {"error_type": "invalid_request"})
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
            raise _Refusal(404, f"No endpoints found for {model} that match your provider routing "
                                f"preferences (order={prefs.get('order')}, only={prefs.get('only')}).",
                           {"error_type": "not_found"})
        up = [u for u in candidates if u not in state.down]
        if not up:
            raise _Refusal(503, "No available model provider meets your routing requirements",
                           {"error_type": "provider_overloaded", "provider_name": candidates[0]},
                           {"Retry-After": "1"})
        return up[0]

    async def guarded(request: Request, endpoint: str, handler) -> Response:
        try:
            auth(request, endpoint)
            try:
                body = await request.json()
            except ValueError:
                raise _Refusal(400, "Request body is not valid JSON", {"error_type": "invalid_request"}) from None
            if not isinstance(body, dict):
                raise _Refusal(400, "Request body must be a JSON object", {"error_type": "invalid_request"})
            if endpoint == "embeddings" and pinned_upstream(body.get("provider")) is None:
                state.unpinned_embeddings += 1  # counted before admission: it reached us
            admit(endpoint)
        except _Refusal as r:
            return _error(r.status, r.message, r.metadata, r.headers)
        streaming = False
        try:
            resp = await handler(body)
            streaming = isinstance(resp, StreamingResponse)
            state.served[endpoint] += 1
            return resp
        except _Refusal as r:
            return _error(r.status, r.message, r.metadata, r.headers)
        finally:
            if not streaming:  # a stream leaves the gate when it ends
                state.concurrency.leave()

    # ------------------------------------------------------------------ OpenRouter API

    @app.post("/api/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        async def serve(body: dict[str, Any]) -> Response:
            model = body.get("model")
            inputs = body.get("input")
            if isinstance(inputs, str):
                inputs = [inputs]
            if not isinstance(model, str) or not isinstance(inputs, list) or not inputs or \
                    not all(isinstance(t, str) for t in inputs):
                raise _Refusal(400, "model and a non-empty input (string or list of strings) are required",
                               {"error_type": "invalid_request"})
            fmt = body.get("encoding_format", "float")
            if fmt not in ("float", "base64"):
                raise _Refusal(400, f"encoding_format must be float or base64, not {fmt!r}",
                               {"error_type": "invalid_request"})
            upstream = route(model, body.get("provider"))
            if state.max_inputs is not None and len(inputs) > state.max_inputs:
                raise too_many_inputs(upstream, len(inputs), state.max_inputs)
            await before_serving("embeddings", len(inputs))
            variant = state.upstreams[model][upstream]
            if remembered is not None:
                vectors = await cfg.offload(remembered.encode, variant, inputs)
            else:
                vectors = await cfg.offload(encoder(variant).encode, inputs)
            state.by_upstream[upstream] += 1
            state.by_model[model] += 1
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            mode = corruption()
            if mode == "not_json":  # a proxy's error page answered with a 200
                return Response("<html><body>502 Bad Gateway</body></html>", status_code=200,
                                media_type="text/html")
            if mode == "other_upstream":  # served by another upstream than the one pinned
                upstream = next((u for u in state.upstreams[model] if u != upstream), f"not-{upstream}")
            data = corrupt(data, mode)
            for item in data:
                vec = np.asarray(item["embedding"], dtype="<f4")
                item["embedding"] = (base64.b64encode(vec.tobytes()).decode() if fmt == "base64"
                                     else [float(x) for x in vec])
            tokens = sum(max(1, len(t) // 4) for t in inputs)
            return _raw_json({
                "id": f"gen-emb-{uuid.uuid4().hex[:16]}", "object": "list", "data": data,
                "model": model, "provider": upstream,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "cost": 0},
            })

        return await guarded(request, "embeddings", serve)

    def too_many_inputs(upstream: str, n: int, limit: int) -> _Refusal:
        """An upstream's refusal of a batch over its input limit, as OpenRouter relays an
        upstream error: its own message says only that the provider refused, and the
        upstream's body rides along in `metadata.raw` (here OpenAI's wording)."""
        state.issued["400_too_many_inputs"] += 1
        raw = {"error": {"message": f"Too many inputs. The max number of inputs is {limit}, "
                                    f"but {n} were given. Send fewer inputs per request.",
                         "type": "invalid_request_error", "param": "input", "code": None}}
        return _Refusal(400, "Provider returned error",
                        {"error_type": "invalid_request", "provider_name": upstream, "raw": json.dumps(raw)})

    def corruption() -> str | None:
        """The corrupt mode this embedding response gets, if the switch fires for it."""
        if not state.corrupt.fires("embeddings", state.rng):
            return None
        return state.corrupt.params.get("mode")

    def corrupt(data: list[dict[str, Any]], mode: str | None) -> list[dict[str, Any]]:
        if mode == "truncate":
            for item in data:
                item["embedding"] = item["embedding"][:-1]
        elif mode == "drop":
            data = data[:-1]
        elif mode == "nan":
            vec = np.array(data[0]["embedding"], dtype=np.float32)
            vec[0] = np.nan
            data[0]["embedding"] = vec
        elif mode == "reverse":  # still valid: clients must order by `index`
            data = list(reversed(data))
        elif mode == "duplicate_index":
            if len(data) > 1:
                data[-1]["index"] = data[0]["index"]
        return data

    @app.post("/api/v1/rerank")
    async def rerank(request: Request) -> Response:
        async def serve(body: dict[str, Any]) -> Response:
            model, query, docs = body.get("model"), body.get("query"), body.get("documents")
            if not isinstance(model, str) or not isinstance(query, str) or not isinstance(docs, list) or not docs:
                raise _Refusal(400, "model, query and a non-empty documents list are required",
                               {"error_type": "invalid_request"})
            texts = [d if isinstance(d, str) else str((d or {}).get("text", "")) for d in docs]
            await before_serving("rerank", len(texts))
            enc = encoder(cfg.rerank_variant)
            vecs = await cfg.offload(enc.encode, [query, *texts])
            scores = (vecs[1:] @ vecs[0]).astype(float)
            order = sorted(range(len(texts)), key=lambda i: -scores[i])
            top_n = body.get("top_n")
            if isinstance(top_n, int) and top_n >= 0:
                order = order[:top_n]
            state.by_upstream[RERANK_UPSTREAM] += 1
            state.by_model[model] += 1
            return JSONResponse({
                "id": f"gen-rerank-{uuid.uuid4().hex[:16]}", "model": model, "provider": RERANK_UPSTREAM,
                "results": [{"index": i, "relevance_score": float(scores[i]), "document": {"text": texts[i]}}
                            for i in order],
                "usage": {"search_units": 1, "total_tokens": sum(len(t) // 4 + 1 for t in [query, *texts])},
            })

        return await guarded(request, "rerank", serve)

    @app.post("/api/v1/chat/completions")
    async def chat(request: Request) -> Response:
        async def serve(body: dict[str, Any]) -> Response:
            model, messages = body.get("model"), body.get("messages")
            if not isinstance(model, str) or not isinstance(messages, list) or not messages:
                raise _Refusal(400, "model and a non-empty messages list are required",
                               {"error_type": "invalid_request"})
            await before_serving("chat", 1)
            turn = state.chat.next_turn(model, messages)
            calls = state.chat.tool_call_objects(turn)
            finish = turn.finish_reason or ("tool_calls" if calls else "stop")
            state.by_upstream[CHAT_UPSTREAM] += 1
            state.by_model[model] += 1
            gen_id = f"gen-{uuid.uuid4().hex[:16]}"
            created = int(time.time())
            usage = {"prompt_tokens": sum(len(str(m.get("content", ""))) // 4 + 1 for m in messages),
                     "completion_tokens": len(turn.content or "") // 4 + len(calls), "total_tokens": 0}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            if not body.get("stream"):
                message: dict[str, Any] = {"role": "assistant", "content": turn.content}
                if calls:
                    message["tool_calls"] = calls
                return JSONResponse({
                    "id": gen_id, "object": "chat.completion", "created": created, "model": model,
                    "provider": CHAT_UPSTREAM,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                 "native_finish_reason": finish}],
                    "usage": usage,
                })
            return StreamingResponse(stream(gen_id, created, model, turn, calls, finish, usage),
                                     media_type="text/event-stream",
                                     headers={"X-Generation-Id": gen_id, "Cache-Control": "no-cache"})

        return await guarded(request, "chat", serve)

    async def stream(gen_id: str, created: int, model: str, turn, calls: list[dict[str, Any]],
                     finish: str, usage: dict[str, int]):
        def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
            obj = {"id": gen_id, "object": "chat.completion.chunk", "created": created, "model": model,
                   "provider": CHAT_UPSTREAM,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra}
            return f"data: {json.dumps(obj)}\n\n"

        try:
            yield ": OPENROUTER PROCESSING\n\n"
            yield chunk({"role": "assistant", "content": ""})
            err = turn.stream_error
            for n, piece in enumerate(content_pieces(turn.content)):
                if err is not None and n >= int(err.get("after_chunks", 0)):
                    break
                yield chunk({"content": piece})
            if err is not None:
                code = int(err.get("code", 502))
                e = {"code": code, "message": err.get("message", "Provider disconnected"),
                     "metadata": {"error_type": err.get("error_type", "provider_unavailable")}}
                yield (f"data: {json.dumps({'id': gen_id, 'object': 'chat.completion.chunk', 'created': created, 'model': model, 'provider': CHAT_UPSTREAM, 'error': e, 'choices': [{'index': 0, 'delta': {'content': ''}, 'finish_reason': 'error'}]})}\n\n")
                return
            for delta in tool_call_fragments(calls):
                yield chunk(delta)
            yield chunk({}, finish, usage=usage)
            yield "data: [DONE]\n\n"
        finally:
            state.concurrency.leave()

    def key_refusal(endpoint: str) -> _Refusal | None:
        """The answer `/control/key-fail` set for the key-info and credits reads, if it fires."""
        if not state.key_fail.fires(endpoint, state.rng):
            return None
        status = int(state.key_fail.params["status"])
        state.issued[f"{status}_{endpoint}"] += 1
        message, kind = KEY_FAILURES.get(status, ("Internal Server Error", "server"))
        return _Refusal(status, message, {"error_type": kind},
                        {"Retry-After": "1"} if status == 429 else None)

    @app.get("/api/v1/key")
    async def key(request: Request) -> Response:
        try:
            auth(request, "key")
            refused = key_refusal("key")
            if refused is not None:
                raise refused
        except _Refusal as r:
            return _error(r.status, r.message, r.metadata, r.headers)
        state.served["key"] += 1
        report = dict(state.key_report)
        if report.get("rate_limit") == "absent":
            report.pop("rate_limit")
        return JSONResponse({"data": report})

    @app.get("/api/v1/credits")
    async def credits(request: Request) -> Response:
        try:
            header = auth(request, "credits")
            refused = key_refusal("credits")
            if refused is not None:
                raise refused
        except _Refusal as r:
            return _error(r.status, r.message, r.metadata, r.headers)
        if not state.is_management(header):
            state.issued["403"] += 1
            return _error(403, "Only management keys can fetch credits", {"error_type": "permission_denied"})
        state.served["credits"] += 1
        return JSONResponse({"data": dict(state.credits)})

    # ------------------------------------------------------------------ control API

    add_control_routes(app, state)  # reset, counters, chat script

    @app.post("/control/peak")
    async def control_peak() -> dict[str, Any]:
        """The peak of requests in flight since the last call (or the start), and how many are
        in flight now; the next period starts from those."""
        in_flight = state.concurrency.in_flight
        return {"peak": state.concurrency.take_peak(), "in_flight": in_flight}

    @app.get("/control/state")
    async def control_state() -> dict[str, Any]:
        return state.snapshot()

    @app.put("/control/key")
    async def control_key(request: Request) -> Any:
        """Partial update of what GET /key reports. `rate_limit`: an object, null, or
        "absent" (field omitted)."""
        b = await body_of(request)
        unknown = set(b) - set(state.key_report) - {"rate_limit"}
        if unknown:
            return bad(f"unknown key fields {sorted(unknown)}")
        problem = key_report_problem(b)
        if problem:
            return bad(problem)
        state.key_report.update(b)
        return {"key": state.key_report}

    @app.post("/control/key-fail")
    async def control_key_fail(request: Request) -> Any:
        """Make GET /key (and, with `endpoints`, GET /credits) answer `status` — 401, 402, 429
        or 5xx — for the next `count` reads (null: all)."""
        b = await body_of(request)
        status = int(b.get("status", 401))
        if status not in KEY_FAILURES and not 500 <= status <= 599:
            return bad(f"status must be one of {sorted(KEY_FAILURES)} or 5xx")
        eps = b.get("endpoints") or ["key"]
        if set(eps) - {"key", "credits"}:
            return bad("endpoints may name only key and credits")
        state.key_fail = fault_from({**b, "endpoints": eps}, status=status)
        return {"ok": True}

    @app.put("/control/credits")
    async def control_credits(request: Request) -> Any:
        b = await body_of(request)
        for k in ("total_credits", "total_usage"):
            if k in b:
                state.credits[k] = float(b[k])
        if "for_all_keys" in b:
            state.credits_for_all = bool(b["for_all_keys"])
        return {"credits": state.credits, "for_all_keys": state.credits_for_all}

    @app.put("/control/keys")
    async def control_keys(request: Request) -> Any:
        """Which keys are valid (`accepted`: list, or null for any sk-or- key) and which are
        management keys. Stored as hashes only."""
        b = await body_of(request)
        if "accepted" in b:
            state.accepted_hashes = None if b["accepted"] is None else {key_hash(k) for k in b["accepted"]}
        if "management" in b:
            state.management_hashes = {key_hash(k) for k in b["management"]}
        return {"ok": True}

    @app.put("/control/limits")
    async def control_limits(request: Request) -> Any:
        """`rpm` (exact sliding 60 s window; null: off), `concurrency` (null: off),
        `max_inputs` (the most inputs an embedding request may carry, a 400 above it; null:
        off), `retry_after` (send the header on 429s), `retry_after_seconds` (fixed value)."""
        b = await body_of(request)
        if "rpm" in b:
            state.rpm = None if b["rpm"] is None else RpmWindow(int(b["rpm"]), window=float(b.get("window", 60.0)),
                                                                 clock=cfg.clock)
        if "concurrency" in b:
            gate = ConcurrencyGate(None if b["concurrency"] is None else int(b["concurrency"]))
            gate.in_flight, gate.peak = state.concurrency.in_flight, state.concurrency.peak
            state.concurrency = gate
        if "max_inputs" in b:
            v = b["max_inputs"]
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                return bad("max_inputs must be a whole number of at least 1, or null")
            state.max_inputs = v
        if "retry_after" in b:
            state.send_retry_after = bool(b["retry_after"])
        if "retry_after_seconds" in b:
            v = b["retry_after_seconds"]
            state.retry_after_seconds = None if v is None else float(v)
        return state.snapshot()

    def fault_from(b: dict[str, Any], **params: Any) -> Fault:
        count = b.get("count", 1)
        eps = b.get("endpoints")
        return Fault(remaining=None if count is None else int(count), rate=float(b.get("rate", 0.0)),
                     endpoints=None if eps is None else frozenset(eps), params=params)

    @app.post("/control/fail")
    async def control_fail(request: Request) -> Any:
        """Inject 5xx: the next `count` requests (null: all), or each with probability
        `rate`; `status` (default 502); optional `endpoints` filter."""
        b = await body_of(request)
        status = int(b.get("status", 502))
        if not 500 <= status <= 599:
            return bad("status must be 5xx")
        state.fail = fault_from(b, status=status)
        return {"ok": True}

    @app.post("/control/in-flight-402")
    async def control_in_flight(request: Request) -> Any:
        b = await body_of(request)
        state.in_flight_402 = fault_from(b, retry_after=float(b.get("retry_after", 2)))
        return {"ok": True}

    @app.post("/control/credits-402")
    async def control_credits_402(request: Request) -> Any:
        state.credits_402 = fault_from(await body_of(request))
        return {"ok": True}

    @app.post("/control/corrupt")
    async def control_corrupt(request: Request) -> Any:
        """Make embedding responses wrong: mode truncate | drop (one vector fewer than inputs)
        | nan | reverse | duplicate_index | not_json (a 200 whose body is an HTML page) |
        other_upstream (the response names an upstream other than the one that was pinned),
        for the next `count` responses (null: all)."""
        b = await body_of(request)
        mode = b.get("mode")
        if mode not in CORRUPT_MODES:
            return bad(f"mode must be one of {', '.join(CORRUPT_MODES)}")
        state.corrupt = fault_from(b, mode=mode)
        return {"ok": True}

    @app.put("/control/latency")
    async def control_latency(request: Request) -> Any:
        b = await body_of(request)
        state.latency_base = float(b.get("base_ms", 0)) / 1000.0
        state.latency_per_item = float(b.get("per_item_ms", 0)) / 1000.0
        return {"ok": True}

    @app.put("/control/upstreams/{name}")
    async def control_upstream(name: str, request: Request) -> Any:
        """Drift an upstream to another encoder `variant`, or mark it `down`."""
        b = await body_of(request)
        models = [m for m, ups in state.upstreams.items() if name in ups]
        if not models:
            return JSONResponse({"error": f"no upstream named {name!r}"}, status_code=404)
        if "variant" in b:
            if b["variant"] not in VARIANTS:
                return bad(f"variant must be one of {', '.join(VARIANTS)}")
            for m in models:
                state.upstreams[m][name] = b["variant"]
        if "down" in b:
            (state.down.add if b["down"] else state.down.discard)(name)
        return state.snapshot()

    return app
