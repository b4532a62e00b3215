"""The emulator's OpenRouter API under /api/v1: embeddings (with the corrupt modes a broken
upstream shows), rerank, chat completions (streamed or not, from the scripted turns), and the
key-info and credits reads. Every endpoint runs inside `Admission` (auth, budget, rate,
faults); this module only answers.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from fathom.devtools.emulator.admission import Admission, Refusal, error_response
from fathom.devtools.emulator.chat import Turn, content_pieces, tool_call_fragments
from fathom.devtools.emulator.encoders import Remembering, encoder
from fathom.devtools.emulator.state import CHAT_UPSTREAM, RERANK_UPSTREAM, EmulatorConfig, EmulatorState


def _raw_json(payload: Any) -> Response:
    # allow_nan: a broken upstream may really send NaN; the client must refuse it.
    return Response(json.dumps(payload, allow_nan=True), media_type="application/json")


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


class OpenRouterApi:
    def __init__(self, state: EmulatorState, cfg: EmulatorConfig, admission: Admission):
        self.state, self.cfg, self.admission = state, cfg, admission
        self.remembered = Remembering() if cfg.remember else None

    def router(self) -> APIRouter:
        r = APIRouter()
        r.add_api_route("/api/v1/embeddings", self.embeddings, methods=["POST"])
        r.add_api_route("/api/v1/rerank", self.rerank, methods=["POST"])
        r.add_api_route("/api/v1/chat/completions", self.chat, methods=["POST"])
        r.add_api_route("/api/v1/key", self.key, methods=["GET"])
        r.add_api_route("/api/v1/credits", self.credits, methods=["GET"])
        return r

    # ------------------------------------------------------------------ embeddings

    async def embeddings(self, request: Request) -> Response:
        return await self.admission.guarded(request, "embeddings", self._embed)

    async def _embed(self, body: dict[str, Any]) -> Response:
        state, cfg = self.state, self.cfg
        model = body.get("model")
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if (
            not isinstance(model, str)
            or not isinstance(inputs, list)
            or not inputs
            or not all(isinstance(t, str) for t in inputs)
        ):
            raise Refusal(
                400,
                "model and a non-empty input (string or list of strings) are required",
                {"error_type": "invalid_request"},
            )
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise Refusal(
                400,
                f"encoding_format must be float or base64, not {fmt!r}",
                {"error_type": "invalid_request"},
            )
        upstream = self.admission.route(model, body.get("provider"))
        if state.max_inputs is not None and len(inputs) > state.max_inputs:
            raise self.too_many_inputs(upstream, len(inputs), state.max_inputs)
        await self.admission.before_serving("embeddings", len(inputs))
        variant = state.upstreams[model][upstream]
        if self.remembered is not None:
            vectors = await cfg.offload(self.remembered.encode, variant, inputs)
        else:
            vectors = await cfg.offload(encoder(variant).encode, inputs)
        state.by_upstream[upstream] += 1
        state.by_model[model] += 1
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        mode = self.corruption()
        if mode == "not_json":  # a proxy's error page answered with a 200
            return Response(
                "<html><body>502 Bad Gateway</body></html>", status_code=200, media_type="text/html"
            )
        if mode == "other_upstream":  # served by another upstream than the one pinned
            upstream = next((u for u in state.upstreams[model] if u != upstream), f"not-{upstream}")
        data = corrupt(data, mode)
        for item in data:
            vec = np.asarray(item["embedding"], dtype="<f4")
            item["embedding"] = (
                base64.b64encode(vec.tobytes()).decode() if fmt == "base64" else [float(x) for x in vec]
            )
        tokens = sum(max(1, len(t) // 4) for t in inputs)
        return _raw_json(
            {
                "id": f"gen-emb-{uuid.uuid4().hex[:16]}",
                "object": "list",
                "data": data,
                "model": model,
                "provider": upstream,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "cost": 0},
            }
        )

    def too_many_inputs(self, upstream: str, n: int, limit: int) -> Refusal:
        """An upstream's refusal of a batch over its input limit, as OpenRouter relays an
        upstream error: its own message says only that the provider refused, and the
        upstream's body rides along in `metadata.raw` (here OpenAI's wording)."""
        self.state.issued["400_too_many_inputs"] += 1
        raw = {
            "error": {
                "message": f"Too many inputs. The max number of inputs is {limit}, "
                f"but {n} were given. Send fewer inputs per request.",
                "type": "invalid_request_error",
                "param": "input",
                "code": None,
            }
        }
        return Refusal(
            400,
            "Provider returned error",
            {"error_type": "invalid_request", "provider_name": upstream, "raw": json.dumps(raw)},
        )

    def corruption(self) -> str | None:
        """The corrupt mode this embedding response gets, if the switch fires for it."""
        state = self.state
        if not state.corrupt.fires("embeddings", state.rng):
            return None
        return state.corrupt.params.get("mode")

    # ------------------------------------------------------------------ rerank

    async def rerank(self, request: Request) -> Response:
        return await self.admission.guarded(request, "rerank", self._rerank)

    async def _rerank(self, body: dict[str, Any]) -> Response:
        state, cfg = self.state, self.cfg
        model, query, docs = body.get("model"), body.get("query"), body.get("documents")
        if not isinstance(model, str) or not isinstance(query, str) or not isinstance(docs, list) or not docs:
            raise Refusal(
                400,
                "model, query and a non-empty documents list are required",
                {"error_type": "invalid_request"},
            )
        texts = [d if isinstance(d, str) else str((d or {}).get("text", "")) for d in docs]
        await self.admission.before_serving("rerank", len(texts))
        enc = encoder(cfg.rerank_variant)
        vecs = await cfg.offload(enc.encode, [query, *texts])
        scores = (vecs[1:] @ vecs[0]).astype(float)
        order = sorted(range(len(texts)), key=lambda i: -scores[i])
        top_n = body.get("top_n")
        if isinstance(top_n, int) and top_n >= 0:
            order = order[:top_n]
        state.by_upstream[RERANK_UPSTREAM] += 1
        state.by_model[model] += 1
        return JSONResponse(
            {
                "id": f"gen-rerank-{uuid.uuid4().hex[:16]}",
                "model": model,
                "provider": RERANK_UPSTREAM,
                "results": [
                    {"index": i, "relevance_score": float(scores[i]), "document": {"text": texts[i]}}
                    for i in order
                ],
                "usage": {"search_units": 1, "total_tokens": sum(len(t) // 4 + 1 for t in [query, *texts])},
            }
        )

    # ------------------------------------------------------------------ chat

    async def chat(self, request: Request) -> Response:
        return await self.admission.guarded(request, "chat", self._chat)

    async def _chat(self, body: dict[str, Any]) -> Response:
        state = self.state
        model, messages = body.get("model"), body.get("messages")
        if not isinstance(model, str) or not isinstance(messages, list) or not messages:
            raise Refusal(
                400, "model and a non-empty messages list are required", {"error_type": "invalid_request"}
            )
        await self.admission.before_serving("chat", 1)
        turn = state.chat.next_turn(model, messages)
        calls = state.chat.tool_call_objects(turn)
        finish = turn.finish_reason or ("tool_calls" if calls else "stop")
        state.by_upstream[CHAT_UPSTREAM] += 1
        state.by_model[model] += 1
        gen_id = f"gen-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        usage = {
            "prompt_tokens": sum(len(str(m.get("content", ""))) // 4 + 1 for m in messages),
            "completion_tokens": len(turn.content or "") // 4 + len(calls),
            "total_tokens": 0,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": turn.content}
            if calls:
                message["tool_calls"] = calls
            return JSONResponse(
                {
                    "id": gen_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "provider": CHAT_UPSTREAM,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": finish,
                            "native_finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                }
            )
        return StreamingResponse(
            self.stream(gen_id, created, model, turn, calls, finish, usage),
            media_type="text/event-stream",
            headers={"X-Generation-Id": gen_id, "Cache-Control": "no-cache"},
        )

    async def stream(
        self,
        gen_id: str,
        created: int,
        model: str,
        turn: Turn,
        calls: list[dict[str, Any]],
        finish: str,
        usage: dict[str, int],
    ) -> AsyncIterator[str]:
        def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
            obj = {
                "id": gen_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "provider": CHAT_UPSTREAM,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                **extra,
            }
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
                # OpenRouter's mid-stream error: one chunk with a top-level `error`, then the end.
                e = {
                    "code": int(err.get("code", 502)),
                    "message": err.get("message", "Provider disconnected"),
                    "metadata": {"error_type": err.get("error_type", "provider_unavailable")},
                }
                yield chunk({"content": ""}, "error", error=e)
                return
            for delta in tool_call_fragments(calls):
                yield chunk(delta)
            yield chunk({}, finish, usage=usage)
            yield "data: [DONE]\n\n"
        finally:
            self.state.concurrency.leave()

    # ------------------------------------------------------------------ key and credits

    async def key(self, request: Request) -> Response:
        state = self.state
        try:
            self.admission.auth(request, "key")
            refused = self.admission.key_refusal("key")
            if refused is not None:
                raise refused
        except Refusal as r:
            return r.response()
        state.served["key"] += 1
        report = dict(state.key_report)
        if report.get("rate_limit") == "absent":
            report.pop("rate_limit")
        return JSONResponse({"data": report})

    async def credits(self, request: Request) -> Response:
        state = self.state
        try:
            header = self.admission.auth(request, "credits")
            refused = self.admission.key_refusal("credits")
            if refused is not None:
                raise refused
        except Refusal as r:
            return r.response()
        if not state.is_management(header):
            state.issued["403"] += 1
            return error_response(
                403, "Only management keys can fetch credits", {"error_type": "permission_denied"}
            )
        state.served["credits"] += 1
        return JSONResponse({"data": dict(state.credits)})
